#!/usr/bin/env bash
# Runs every test of eosink, after installing what the tests need: a MinIO
# server (scripts/minio.sh), Chromium (scripts/chromium.sh), axe-core for the
# accessibility checks (scripts/axe.sh), promtool for the metrics check
# (scripts/promtool.sh), and nginx and HAProxy for the load-balancer tests
# (scripts/nginx.sh, scripts/haproxy.sh), and npm icebird, a JavaScript Iceberg
# reader (scripts/icebird.sh). Safe to run again; installs are
# skipped when already done.
#
# Longer runs: EOSINK_MODEL_STEPS (model test steps, default 10000;
# EOSINK_MODEL_SEED replays a seed, EOSINK_MODEL_LEASE=on|off forces the
# node lease that a seed otherwise draws: off for a third of them),
# EOSINK_E2E_KILLS (SIGKILLs in the end-to-end crash loop), EOSINK_LB_KILLS
# (SIGKILLs in the load-balancer crash loop, default 4).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== install test dependencies"
bash scripts/minio.sh
bash scripts/chromium.sh
bash scripts/axe.sh
bash scripts/icebird.sh
bash scripts/promtool.sh
bash scripts/nginx.sh >/dev/null
bash scripts/haproxy.sh >/dev/null

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt needed:"; echo "$unformatted"; exit 1
fi
echo "== go vet"
go vet ./...
echo "== static build (scripts/build-static.sh, the Dockerfile's build step)"
bash scripts/build-static.sh "$(mktemp -d)/eosink"
echo "== go test"
go test -count=1 -timeout 40m ./...
echo "== go test -race (engine, API, client)"
go test -race -count=1 -timeout 20m ./server/... ./api/... ./client/... ./staging/... ./recovery/...
