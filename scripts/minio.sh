#!/usr/bin/env bash
# Installs the MinIO server that the S3 tests run against (committer/s3,
# internal/testing/testsrv, tests/) into $(go env GOPATH)/bin, unless the pinned
# version is there already. Safe to run again.
#
# The tests find the binary at $EOSINK_MINIO_BIN, else $(go env GOPATH)/bin/minio,
# else on $PATH.
set -euo pipefail

module=github.com/minio/minio
version=v0.0.0-20260212201848-7aac2a2c5b7c

gopath=$(go env GOPATH)
bindir="${gopath%%:*}/bin"
bin="$bindir/minio"

if [ -n "${EOSINK_MINIO_BIN:-}" ]; then
  echo "minio.sh: EOSINK_MINIO_BIN is set; the tests use $EOSINK_MINIO_BIN"
fi

installed=""
if [ -x "$bin" ]; then
  installed=$(go version -m "$bin" 2>/dev/null | awk -v m="$module" '$1 == "mod" && $2 == m { print $3 }')
fi
if [ "$installed" = "$version" ]; then
  echo "minio.sh: $module@$version already installed at $bin"
  exit 0
fi
if [ -n "$installed" ]; then
  echo "minio.sh: $bin is $module@$installed; installing $version"
elif [ -e "$bin" ]; then
  echo "minio.sh: $bin exists but is not a $module build; replacing it"
fi

echo "minio.sh: installing $module@$version into $bindir (a large build: several minutes the first time)"
mkdir -p "$bindir"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
# Built outside any module, so the project's go.mod and go.work play no part.
(cd / && GOBIN="$bindir" go install -v "$module@$version") >"$log" 2>&1 &
pid=$!
last=$start
while kill -0 "$pid" 2>/dev/null; do
  sleep 1
  now=$(date +%s)
  if [ $((now - last)) -ge 20 ]; then
    echo "minio.sh: ... $((now - start))s, $(wc -l <"$log") packages built"
    last=$now
  fi
done
if ! wait "$pid"; then
  echo "minio.sh: go install failed; last output:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
echo "minio.sh: installed $bin in $(($(date +%s) - start))s"
"$bin" --version | head -n 1
