#!/usr/bin/env bash
# Installs promtool, which checks that eosink's /metrics passes
# `promtool check metrics` (server/promtool_test.go): Debian's prometheus
# package, unless promtool is on $PATH already. Safe to run again. Needs
# root (as in CI) or sudo.
#
# The tests find promtool at $EOSINK_PROMTOOL, else on $PATH. Without it
# they skip, and with CI=true they fail naming this script.
set -euo pipefail

if [ -n "${EOSINK_PROMTOOL:-}" ]; then
  echo "promtool.sh: EOSINK_PROMTOOL is set; the tests use $EOSINK_PROMTOOL"
fi
if command -v promtool >/dev/null 2>&1; then
  echo "promtool.sh: $(command -v promtool) already installed: $(promtool --version 2>&1 | head -n 1)"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "promtool.sh: not root and no sudo: run as root to install prometheus" >&2
    exit 1
  fi
  sudo=sudo
fi

export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
echo "promtool.sh: apt-get update"
$sudo apt-get update -q
echo "promtool.sh: apt-get install prometheus (for promtool)"
# The package also brings a prometheus server with a service we never use:
# a policy-rc.d that says no keeps apt from starting it (Debian's way; a
# container usually has one already, which is then left as it is).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# written by eosink scripts/promtool.sh for one install\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  trap '$sudo rm -f "$policy"' EXIT
fi
$sudo apt-get install -y -q --no-install-recommends prometheus
if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool.sh: installed the package but promtool is not on PATH" >&2
  exit 1
fi
echo "promtool.sh: installed $(promtool --version 2>&1 | head -n 1) in $(($(date +%s) - start))s"
