#!/usr/bin/env bash
# The project's test command: starts the engines the tests need (installing
# what is missing), vets the code, runs every test with the race detector and
# the default tier of the fault suites, then stops the engines. Tests for an engine that is not running skip with a
# message saying how to start it.
set -euo pipefail
cd "$(dirname "$0")/.."

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
echo "== $(go version)"
echo "== go mod download"
go mod download

echo "== engines"
trap 'scripts/engines.sh stop' EXIT
eval "$(scripts/engines.sh start)"

echo "== go vet"
go vet ./...
echo "== go test -race (everything but the fault suites)"
go test -race -count=1 -timeout 40m $(go list ./... | grep -v '/internal/verify')
# The fault suites (docs/verification.md) run their workers as processes and
# time faults against lease TTLs: they run without the race detector, one
# package at a time, and end with the verification report.
scripts/verify.sh default
