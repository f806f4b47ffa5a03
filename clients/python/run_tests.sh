#!/usr/bin/env bash
# Runs the Python client's test suite (stdlib unittest) against a real
# `leasehold serve`, built here from this checkout; each test module starts
# its own server on a free loopback port with a temporary data directory.
#
# The interpreter is chosen deliberately: Debian's own /usr/bin/python3, not
# the first python3 on PATH (pyenv, a virtualenv or /usr/local may shadow
# it). Debian's packages, such as python3-boto3 for the DynamoDB extra (PyPI
# is not reachable in CI), are installed for that interpreter only.
# LEASEHOLD_PYTHON overrides it; LEASEHOLD_BIN uses a prebuilt binary.
# Arguments go to unittest (e.g. -k takeover). Before the tests, mypy
# (Debian's python3-mypy, which scripts/engines.sh installs) checks the
# package with its own configuration (pyproject.toml: strict); it is
# skipped with a message when mypy is missing, unless the engines are
# required (LEASEHOLD_REQUIRE_ENGINES, CI: tests/engines.py's rule).
set -euo pipefail
cd "$(dirname "$0")"

PY=${LEASEHOLD_PYTHON:-/usr/bin/python3}
if [ ! -x "$PY" ]; then
	echo "clients/python/run_tests.sh: no interpreter at $PY: apt-get install python3 (scripts/engines.sh installs it), or set LEASEHOLD_PYTHON" >&2
	exit 1
fi

tmp=$(mktemp -d)
# Every command below that may take a while runs in a process group of its
# own (job control) and is waited for, so that a signal to this script (a
# Ctrl-C at the terminal, SIGTERM, SIGHUP) is handled at once: stop ends
# each group (the build, mypy, the test halves with their servers), waits
# for them, prints what the halves had said and exits; the EXIT trap then
# removes the temporary directory, where the tests' own temporary files
# (servers' data directories, tokens) are too (TMPDIR).
kids=()
stop() {
	local p f
	for p in "${kids[@]}"; do
		kill -TERM -- "-$p" 2>/dev/null || true
	done
	wait || true
	for f in "$tmp"/half-*.log; do
		if [ -e "$f" ]; then cat "$f"; fi
	done
	exit "$1"
}
trap 'rm -rf "$tmp"' EXIT
trap 'stop 130' INT
trap 'stop 143' TERM
trap 'stop 129' HUP
# start CMD...: CMD in a process group of its own, in the background.
start() {
	set -m
	"$@" &
	kids+=($!)
	set +m
}
# run CMD...: CMD as start does, waited for; its status is run's.
run() {
	start "$@"
	wait "$!"
}

if [ -z "${LEASEHOLD_BIN:-}" ]; then
	run go -C ../.. build -o "$tmp/leasehold" ./cmd/leasehold
	export LEASEHOLD_BIN="$tmp/leasehold"
fi

if "$PY" -c 'import mypy' 2>/dev/null; then
	echo "== mypy --strict (pyproject.toml) with $("$PY" -m mypy --version)"
	run "$PY" -m mypy --config-file pyproject.toml --cache-dir "$tmp/mypy-cache" leasehold
else
	if (cd tests && "$PY" -c 'import engines, sys; sys.exit(0 if engines.required()[0] else 1)'); then
		echo "clients/python/run_tests.sh: missing mypy (apt-get install python3-mypy; scripts/engines.sh installs it)" >&2
		exit 1
	fi
	echo "== mypy: not installed, type check skipped (apt-get install python3-mypy)"
fi

mkdir "$tmp/tmp"
export TMPDIR="$tmp/tmp"
echo "== python client tests with $PY ($("$PY" --version 2>&1))"
# Tests import the package from this directory (python -m puts the working
# directory first on sys.path), never an installed copy.
if [ $# -gt 0 ]; then
	run "$PY" -m unittest discover -s tests -t tests "$@"
	exit
fi
# The whole suite in two halves at once (about 45 s each, mostly waiting
# on servers and TTLs; one after the other they took 80 s). Each module
# starts its own server on a port the kernel picks, so the halves share
# nothing but the engines' dynalite, which only the first half uses. Each
# half's output is printed whole, the first half's when it ends, the
# second's after it. A module unittest
# would find (test*.py, also in a subdirectory) that is in neither half is
# refused rather than skipped.
while IFS= read -r f; do
	case $f in
	tests/test_[a-z]*.py)
		case ${f#tests/} in */*) ;; *) continue ;; esac
		;;
	esac
	echo "clients/python/run_tests.sh: $f is in neither half of the suite (tests/test_[a-k]*.py, tests/test_[l-z]*.py): name it tests/test_<lower-case letter>..." >&2
	exit 1
done < <(find tests -name 'test*.py')
halves=()
for half in 'test_[a-k]*.py' 'test_[l-z]*.py'; do
	start "$PY" -m unittest discover -s tests -t tests -p "$half" >"$tmp/half-${#halves[@]}.log" 2>&1
	halves+=($!)
done
st=0
for i in "${!halves[@]}"; do
	wait "${halves[$i]}" || st=1
	cat "$tmp/half-$i.log"
	rm "$tmp/half-$i.log" # printed: not again if a signal comes now
done
exit $st
