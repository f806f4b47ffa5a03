#!/usr/bin/env bash
# The project's test command: starts the engines the tests need (installing
# what is missing), vets the code, runs every test with the race detector,
# the bench smoke run, the Python client's tests and the default tier of
# the fault suites, then stops the engines.
#
# Every engine must start: if one cannot be installed or started, this stops
# at once, naming it (with its log, from scripts/engines.sh). And every test
# must have its engine: LEASEHOLD_REQUIRE_ENGINES=1 makes a test that would
# skip for a missing engine fail instead (testrig/enginetest).
#
# Every stage runs even when an earlier one failed, so that one failure does
# not hide the rest of the report; the script ends with a table of the
# stages (status and seconds) and exits non-zero if any failed.
#
# LEASEHOLD_STAGES="vet race" runs only the named stages (mod, vet, race,
# bench, python, verify; unset or empty: all of them); the engines start
# whenever a named stage needs them. An unknown name is a usage error (64).
# The table gives each stage's wall-clock and CPU seconds (its processes'
# user + system time).
set -uo pipefail
cd "$(dirname "$0")/.."

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
all_stages="mod vet race bench python verify"
want=" ${LEASEHOLD_STAGES:-$all_stages} "
for s in $want; do
	case " $all_stages " in
	*" $s "*) ;;
	*)
		echo "test.sh: unknown stage '$s' in LEASEHOLD_STAGES (the stages: $all_stages, separated by spaces)" >&2
		exit 64
		;;
	esac
done
began=$(date +%s)
summary=()
failed=0

# stage NAME COMMAND...: runs COMMAND (if NAME is wanted), timing it and
# noting its status; never stops the script.
stage() {
	local name=$1 t0 st
	shift
	case "$want" in *" $name "*) ;; *) return 0 ;; esac
	echo "== [$name] $*"
	t0=$(date +%s)
	local c0
	cpu_now
	c0=$CPU_NOW
	"$@"
	st=$?
	local secs=$(($(date +%s) - t0))
	cpu_now
	local cpu=$((CPU_NOW - c0))
	if [ $st -eq 0 ]; then
		summary+=("$(printf '%-8s ok      %5d s  (cpu %d s)' "$name" "$secs" "$cpu")")
	else
		summary+=("$(printf '%-8s FAILED  %5d s  (cpu %d s, exit %d)' "$name" "$secs" "$cpu" "$st")")
		failed=1
	fi
	echo "== [$name] exit $st after $secs s (cpu $cpu s)"
	return 0
}

# cpu_now sets CPU_NOW to the user + system CPU seconds this script's
# finished children have used so far: the second line of bash's times
# builtin, which must run in this shell (in a subshell or a pipeline it
# reports that subshell's children), so the result is a variable, not
# printed.
cpu_now() {
	local f l1 l2
	f=$(mktemp)
	times >"$f"
	{
		read -r l1
		read -r l2
	} <"$f"
	rm -f "$f"
	CPU_NOW=0
	if [[ $l2 =~ ^([0-9]+)m([0-9]+)[.,][0-9]+s\ ([0-9]+)m([0-9]+)[.,][0-9]+s$ ]]; then
		CPU_NOW=$((10#${BASH_REMATCH[1]} * 60 + 10#${BASH_REMATCH[2]} + 10#${BASH_REMATCH[3]} * 60 + 10#${BASH_REMATCH[4]}))
	fi
}

report() {
	echo
	echo "== stages ($(($(date +%s) - began)) s in all, $(go version | cut -d' ' -f3), $(nproc) cores)"
	printf '%s\n' "${summary[@]}"
}

race() {
	local pkgs
	pkgs=$(go list ./... | grep -v '/testrig/verify') || return 1
	# shellcheck disable=SC2086 # one word per package
	go test -race -count=1 -timeout 40m $pkgs
}

# Every benchmark suite of the bench module (its own go.mod) once with tiny
# counts (docs/benchmarks.md), so that none can rot: a suite that cannot run
# an implementation or its reference fails; timings never do. A change to
# the main go.mod can leave bench/go.mod behind: cd bench && go mod tidy.
bench_smoke() {
	(cd bench && go vet ./... && go test -count=1 ./... && go run . --smoke all >/dev/null)
}

engines() {
	trap 'scripts/engines.sh stop; report' EXIT
	local exports failedwhat
	# Not eval "$(scripts/engines.sh start)": eval would go on after a failure.
	if ! exports=$(scripts/engines.sh start); then
		failedwhat=$(cat "${LEASEHOLD_ENGINES_DIR:-.engines}/failed" 2>/dev/null || echo "see above")
		echo "test.sh: FAILED: the test engines did not start: $failedwhat" >&2
		return 1
	fi
	eval "$exports"
	export LEASEHOLD_REQUIRE_ENGINES=1
}

echo "== $(go version)"
trap report EXIT
stage mod go mod download
case "$want" in
*" race "* | *" bench "* | *" python "* | *" verify "*)
	want="$want engines "
	stage engines engines
	if [ $failed -ne 0 ]; then
		# Nothing that needs an engine can pass without it.
		exit 1
	fi
	;;
esac
# With -race, vet compiles every dependency as the race stage needs it, and
# the race stage finds them in the build cache (on a cold cache that saves
# the minutes of compiling them twice). No file of the module depends on
# the race build tag, so vet sees the same code either way.
stage vet go vet -race ./...
stage race race
stage bench bench_smoke
# The Python client (clients/python) against a real server built from this
# checkout, with Debian's /usr/bin/python3 (see clients/python/run_tests.sh).
stage python clients/python/run_tests.sh
# The fault suites (docs/verification.md) run their workers as processes and
# time faults against lease TTLs: they run without the race detector, one
# package at a time, and end with the verification report.
stage verify scripts/verify.sh default
exit $failed
