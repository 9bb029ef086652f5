#!/usr/bin/env bash
# Installs npm icebird 0.3.1, a pure-JavaScript Apache Iceberg reader that
# knows nothing of eosink, with the machine's node/npm into a cache folder,
# unless it is there already. The end-to-end Iceberg tests
# (tests/icebird_test.go) read eosink's tables with it. Installs Debian's
# nodejs and npm first when node is missing (CI runs as root). Safe to run
# again.
#
# The tests find icebird at $EOSINK_ICEBIRD (its package folder), else at
# ${XDG_CACHE_HOME:-$HOME/.cache}/eosink/icebird/node_modules/icebird
# (where this script puts it). Without it they skip, and with CI=true they
# fail naming this script.
set -euo pipefail

version=0.3.1
dir="${XDG_CACHE_HOME:-$HOME/.cache}/eosink/icebird"
pkg="$dir/node_modules/icebird/package.json"

if [ -n "${EOSINK_ICEBIRD:-}" ]; then
  echo "icebird.sh: EOSINK_ICEBIRD is set; the tests use $EOSINK_ICEBIRD"
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "icebird.sh: node or npm missing: apt-get install nodejs npm"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "icebird.sh: node/npm not found: install Debian's nodejs and npm packages and run again" >&2
    exit 1
  fi
fi
if [ -f "$pkg" ] && [ "$(node -p "require('$pkg').version")" = "$version" ]; then
  echo "icebird.sh: icebird $version already installed in $dir"
  exit 0
fi
start=$(date +%s)
echo "icebird.sh: npm install icebird@$version into $dir"
mkdir -p "$dir"
npm install --prefix "$dir" --no-audit --no-fund --no-save "icebird@$version"
if [ ! -f "$pkg" ]; then
  echo "icebird.sh: npm installed icebird but $pkg is missing" >&2
  exit 1
fi
echo "icebird.sh: installed icebird $(node -p "require('$pkg').version") in $(($(date +%s) - start))s"
