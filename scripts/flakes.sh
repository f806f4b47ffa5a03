#!/usr/bin/env bash
# The flake hunt: runs tests many times on a deliberately loaded machine
# and reports every failure, package by package, with the failing tests'
# names, so that a flaky test is found here rather than in CI.
#
#   scripts/flakes.sh                     # every package but the fault suites, -count 5, -race
#   scripts/flakes.sh -count 10 ./internal/cli/ ./cmd/leasehold/
#   scripts/flakes.sh -load 0 -norace     # no extra load, no race detector
#
# Options: -count N (default 5) runs of each test; -load K (default 2 per
# core) busy loops running beside the tests for the whole hunt; -norace
# leaves out the race detector (CI uses it; the hunt is faster without);
# -timeout D per package (default 60m). Packages default to what
# scripts/test.sh runs under -race (every package but internal/verify).
#
# Starts the test engines unless they are already running (as test.sh and
# verify.sh do), with LEASEHOLD_REQUIRE_ENGINES=1. Each package's output is
# kept in $LEASEHOLD_FLAKES_DIR (default a new temporary directory). Exits
# non-zero if any run of any test failed.
set -uo pipefail
cd "$(dirname "$0")/.."

count=5 load=$((2 * $(nproc))) race=-race timeout=60m
while [ $# -gt 0 ]; do
	case "$1" in
	-count) count=$2; shift 2 ;;
	-load) load=$2; shift 2 ;;
	-norace) race=; shift ;;
	-timeout) timeout=$2; shift 2 ;;
	-h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "flakes.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
	*) break ;;
	esac
done
case "$count$load" in *[!0-9]*) echo "flakes.sh: -count and -load take whole numbers" >&2; exit 64 ;; esac

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
out=${LEASEHOLD_FLAKES_DIR:-$(mktemp -d -t leasehold-flakes.XXXXXX)}
mkdir -p "$out"

loops=()
cleanup() {
	[ ${#loops[@]} -gt 0 ] && kill "${loops[@]}" 2>/dev/null
	[ -n "${started_engines:-}" ] && scripts/engines.sh stop
}
trap cleanup EXIT

if [ -z "${LEASEHOLD_TEST_PG_BIN:-}" ]; then
	started_engines=1
	if ! exports=$(scripts/engines.sh start); then
		echo "flakes.sh: FAILED: the test engines did not start" >&2
		exit 1
	fi
	eval "$exports"
fi
export LEASEHOLD_REQUIRE_ENGINES=1

if [ $# -gt 0 ]; then
	mapfile -t pkgs < <(go list "$@")
else
	mapfile -t pkgs < <(go list ./... | grep -v '/internal/verify')
fi

for ((i = 0; i < load; i++)); do
	(while :; do :; done) &
	loops+=($!)
done

echo "== flake hunt: ${#pkgs[@]} packages, -count $count ${race:-(no -race)}, $load busy loops on $(nproc) cores; output in $out"
began=$(date +%s)
failed=0
printf '%-58s %6s %6s  %s\n' package secs fails "failing tests" >"$out/summary"
for p in "${pkgs[@]}"; do
	f="$out/$(echo "$p" | tr / _).log"
	t0=$(date +%s)
	# shellcheck disable=SC2086 # race is one word or none
	go test $race -count="$count" -timeout "$timeout" "$p" >"$f" 2>&1
	st=$?
	tests=$(grep -E '^\s*--- FAIL' "$f" | awk '{print $3}' | sort | uniq -c | awk '{printf "%s×%s ", $2, $1}')
	n=$(grep -cE '^--- FAIL' "$f")
	if [ $st -ne 0 ]; then
		failed=1
		[ "$n" -eq 0 ] && tests="exit $st (see $f)"
	fi
	printf '%-58s %6d %6d  %s\n' "${p#github.com/leasehold/leasehold}" $(($(date +%s) - t0)) "$n" "$tests" | tee -a "$out/summary"
done
echo "== flake hunt done in $(($(date +%s) - began)) s: $([ $failed -eq 0 ] && echo "no failure" || echo "FAILURES above")"
exit $failed
