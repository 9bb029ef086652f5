#!/usr/bin/env bash
# Builds the eosink service as one static binary (no cgo, no libc): what the
# Dockerfile runs, word for word, and what tests/TestStaticBuild runs.
#
#   scripts/build-static.sh [OUT]      default OUT: bin/eosink
#
# The revision shown by `eosink version`:
#   - Go stamps it itself (-buildvcs=auto) when it finds a .git directory
#     and git: a clone, or a container build whose context has .git;
#   - else this script passes it with -ldflags: $EOSINK_REVISION if set (the
#     Dockerfile's REVISION build argument), else `git rev-parse HEAD` when
#     this is a git work tree (a `git worktree`, whose .git is a file that
#     Go does not recognise), with "modified" if tracked files changed;
#   - with neither, the binary says "revision unknown".
# -buildvcs is given explicitly: some machines set GOFLAGS=-buildvcs=false.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-bin/eosink}
revision=${EOSINK_REVISION:-}
modified=""
if [ -z "$revision" ] && command -v git >/dev/null 2>&1 && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  revision=$(git rev-parse HEAD)
  if ! git diff --quiet HEAD -- 2>/dev/null; then
    modified=true
  fi
fi
ldflags="-s -w"
if [ -n "$revision" ]; then
  ldflags="$ldflags -X github.com/eosink/eosink/internal/buildinfo.revision=$revision"
fi
if [ -n "$modified" ]; then
  ldflags="$ldflags -X github.com/eosink/eosink/internal/buildinfo.modified=true"
fi
CGO_ENABLED=0 go build -trimpath -buildvcs=auto -ldflags "$ldflags" -o "$out" ./cmd/eosink
echo "build-static.sh: built $out ($("$out" version))"
