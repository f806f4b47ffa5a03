#!/usr/bin/env bash
# The project's test command: vets the code and runs every test with the race
# detector. Engines that tests need are started by scripts/engines.sh when it
# exists; tests for an engine that is not running skip with a message.
set -euo pipefail
cd "$(dirname "$0")/.."

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
echo "== $(go version)"
echo "== go vet"
go vet ./...
echo "== go test -race"
go test -race -count=1 -timeout 40m ./...
