#!/usr/bin/env bash
# The project's test command: starts the engines the tests need (installing
# what is missing), vets the code, runs every test with the race detector and
# the default tier of the fault suites, then stops the engines.
#
# Every engine must start: if one cannot be installed or started, this stops
# at once, naming it (with its log, from scripts/engines.sh). And every test
# must have its engine: LEASEHOLD_REQUIRE_ENGINES=1 makes a test that would
# skip for a missing engine fail instead (internal/enginetest).
set -euo pipefail
cd "$(dirname "$0")/.."

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
echo "== $(go version)"
echo "== go mod download"
go mod download

echo "== engines"
trap 'scripts/engines.sh stop' EXIT
# Not eval "$(scripts/engines.sh start)": eval would go on after a failure.
if ! exports=$(scripts/engines.sh start); then
	failed=$(cat "${LEASEHOLD_ENGINES_DIR:-.engines}/failed" 2>/dev/null || echo "see above")
	echo "test.sh: FAILED: the test engines did not start: $failed" >&2
	exit 1
fi
eval "$exports"
export LEASEHOLD_REQUIRE_ENGINES=1

echo "== go vet"
go vet ./...
echo "== go test -race (everything but the fault suites)"
pkgs=$(go list ./... | grep -v '/internal/verify')
# shellcheck disable=SC2086 # one word per package
go test -race -count=1 -timeout 40m $pkgs
# Every benchmark suite of the bench module (its own go.mod) once with tiny
# counts (docs/benchmarks.md), so that none can rot: a suite that cannot run
# an implementation or its reference fails; timings never do. A change to
# the main go.mod can leave bench/go.mod behind: cd bench && go mod tidy.
echo "== bench --smoke (every benchmark suite, tiny counts)"
(cd bench && go vet ./... && go test -count=1 ./... && go run . --smoke all >/dev/null)
# The Python client (clients/python) against a real server built from this
# checkout, with Debian's /usr/bin/python3 (see clients/python/run_tests.sh).
clients/python/run_tests.sh
# The fault suites (docs/verification.md) run their workers as processes and
# time faults against lease TTLs: they run without the race detector, one
# package at a time, and end with the verification report.
scripts/verify.sh default
