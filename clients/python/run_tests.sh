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
trap 'rm -rf "$tmp"' EXIT
if [ -z "${LEASEHOLD_BIN:-}" ]; then
	(cd ../.. && go build -o "$tmp/leasehold" ./cmd/leasehold)
	export LEASEHOLD_BIN="$tmp/leasehold"
fi

if "$PY" -c 'import mypy' 2>/dev/null; then
	echo "== mypy --strict (pyproject.toml) with $("$PY" -m mypy --version)"
	"$PY" -m mypy --config-file pyproject.toml --cache-dir "$tmp/mypy-cache" leasehold
else
	if (cd tests && "$PY" -c 'import engines, sys; sys.exit(0 if engines.required()[0] else 1)'); then
		echo "clients/python/run_tests.sh: missing mypy (apt-get install python3-mypy; scripts/engines.sh installs it)" >&2
		exit 1
	fi
	echo "== mypy: not installed, type check skipped (apt-get install python3-mypy)"
fi

echo "== python client tests with $PY ($("$PY" --version 2>&1))"
# Tests import the package from this directory (python -m puts the working
# directory first on sys.path), never an installed copy. Not exec'd: the
# trap above removes the binary built for the run (60 MB) when it ends.
if [ $# -gt 0 ]; then
	"$PY" -m unittest discover -s tests -t tests "$@"
	exit
fi
# The whole suite in two halves at once (about 45 s each, mostly waiting
# on servers and TTLs; one after the other they took 80 s). Each module
# starts its own server on a port the kernel picks, so the halves share
# nothing but the engines' dynalite, which only the first half uses. Each
# half's output is printed whole when both have ended.
for f in tests/test_*.py; do
	case ${f#tests/} in
	test_[a-z]*) ;;
	*)
		echo "clients/python/run_tests.sh: $f is in neither half (test_[a-k]*, test_[l-z]*): name it test_<lower-case letter>..." >&2
		exit 1
		;;
	esac
done
pids=()
# Each half runs in a process group of its own (job control, set -m): a
# signal to this script (a Ctrl-C at the terminal, SIGTERM, SIGHUP) ends
# both halves with their servers, and prints what they had said.
stop_halves() {
	for p in "${pids[@]}"; do
		kill -TERM -- "-$p" 2>/dev/null
	done
	wait
	cat "$tmp"/half-*.log
	exit "$1"
}
trap 'stop_halves 130' INT
trap 'stop_halves 143' TERM
trap 'stop_halves 129' HUP
set -m
for half in 'test_[a-k]*.py' 'test_[l-z]*.py'; do
	"$PY" -m unittest discover -s tests -t tests -p "$half" >"$tmp/half-${#pids[@]}.log" 2>&1 &
	pids+=($!)
done
set +m
st=0
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || st=1
	cat "$tmp/half-$i.log"
done
exit $st
