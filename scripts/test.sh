#!/usr/bin/env bash
# The project's test command: starts the engines the tests need (installing
# what is missing), vets the code and runs every test with the race detector,
# then stops the engines. Tests for an engine that is not running skip with a
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
echo "== go test -race"
go test -race -count=1 -timeout 40m ./...
