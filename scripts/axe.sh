#!/usr/bin/env bash
# Installs axe-core 4.x, the accessibility checker that the web UI's browser
# tests (web/browser_test.go) inject into every page they visit, with the
# machine's node/npm into a cache folder, unless it is there already. Safe to
# run again.
#
# The tests find axe.min.js at $EOSINK_AXE, else at
# ${XDG_CACHE_HOME:-$HOME/.cache}/eosink/axe/node_modules/axe-core/axe.min.js
# (where this script puts it). Without it they skip, and with CI=true they
# fail naming this script.
set -euo pipefail

dir="${XDG_CACHE_HOME:-$HOME/.cache}/eosink/axe"
js="$dir/node_modules/axe-core/axe.min.js"

if [ -n "${EOSINK_AXE:-}" ]; then
  echo "axe.sh: EOSINK_AXE is set; the tests use $EOSINK_AXE"
fi
if [ -f "$js" ]; then
  echo "axe.sh: axe-core $(node -p "require('$dir/node_modules/axe-core/package.json').version" 2>/dev/null || echo '(version unknown)') already installed at $js"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "axe.sh: npm not found: install Debian's npm package (apt-get install npm) and run again" >&2
  exit 1
fi

start=$(date +%s)
echo "axe.sh: npm install axe-core@4 into $dir"
mkdir -p "$dir"
npm install --prefix "$dir" --no-audit --no-fund --no-save axe-core@4
if [ ! -f "$js" ]; then
  echo "axe.sh: npm installed axe-core but $js is missing" >&2
  exit 1
fi
echo "axe.sh: installed axe-core $(node -p "require('$dir/node_modules/axe-core/package.json').version") in $(($(date +%s) - start))s"
