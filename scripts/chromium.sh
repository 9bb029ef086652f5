#!/usr/bin/env bash
# Installs the Chromium that the web UI's browser tests (web/browser_test.go)
# drive through chromedp: Debian's chromium package, unless /usr/bin/chromium
# is there already. Safe to run again. Needs root (as in CI) or sudo.
#
# The tests find the browser at $EOSINK_CHROMIUM, else /usr/bin/chromium.
# Without it they skip, and with CI=true they fail naming this script.
set -euo pipefail

bin=/usr/bin/chromium

if [ -n "${EOSINK_CHROMIUM:-}" ]; then
  echo "chromium.sh: EOSINK_CHROMIUM is set; the tests use $EOSINK_CHROMIUM"
fi
if [ -x "$bin" ]; then
  echo "chromium.sh: $bin already installed: $("$bin" --version 2>/dev/null | head -n 1 || echo 'version unknown')"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "chromium.sh: not root and no sudo: run as root to install chromium" >&2
    exit 1
  fi
  sudo=sudo
fi

export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
echo "chromium.sh: apt-get update"
$sudo apt-get update -q
echo "chromium.sh: apt-get install chromium (about 100 MB with its libraries)"
$sudo apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
if [ ! -x "$bin" ]; then
  echo "chromium.sh: installed the package but $bin is missing" >&2
  exit 1
fi
echo "chromium.sh: installed $("$bin" --version 2>/dev/null | head -n 1) in $(($(date +%s) - start))s"
