#!/usr/bin/env bash
# Installs the Chromium that the web UI's browser tests (web/browser_test.go)
# drive through chromedp: Debian's chromium package, unless /usr/bin/chromium
# is there already. Safe to run again. Needs root (as in CI) or sudo. Prints
# the binary's path on its last line.
#
# The tests find the browser at $EOSINK_CHROMIUM, else /usr/bin/chromium.
# Without it they skip, and with CI=true they fail naming this script.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
apt_install_binary chromium.sh /usr/bin/chromium EOSINK_CHROMIUM \
  "chromium fonts-dejavu-core" "about 100 MB with its libraries" "" --version
