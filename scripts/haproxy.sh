#!/usr/bin/env bash
# Installs the HAProxy that TestLBRouting puts in front of several eosink
# nodes with deploy/haproxy.cfg: Debian's haproxy package, unless it is
# there already. Safe to run again. Needs root (as in CI) or sudo. Prints
# the binary's path on its last line.
#
# The tests find haproxy at $EOSINK_HAPROXY, else /usr/sbin/haproxy, else
# on PATH. Without it they skip, and with CI=true they fail naming this
# script. Only the binary is used: the package's own service is kept from
# starting, and the tests run haproxy as their child.
set -euo pipefail

bin=/usr/sbin/haproxy

if [ -n "${EOSINK_HAPROXY:-}" ]; then
  echo "haproxy.sh: EOSINK_HAPROXY is set; the tests use $EOSINK_HAPROXY" >&2
fi
if [ -x "$bin" ]; then
  echo "haproxy.sh: $bin already installed: $("$bin" -v 2>&1 | head -n 1)" >&2
  echo "$bin"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "haproxy.sh: not root and no sudo: run as root to install haproxy" >&2
    exit 1
  fi
  sudo=sudo
fi

export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
# The package's postinst starts its service on port 80 where it can;
# policy-rc.d 101 keeps it from starting anything during the install.
policy=/usr/sbin/policy-rc.d
own_policy=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  own_policy=1
fi
cleanup() { if [ -n "$own_policy" ]; then $sudo rm -f "$policy"; fi; }
trap cleanup EXIT

echo "haproxy.sh: apt-get update" >&2
$sudo apt-get update -q >/dev/null
echo "haproxy.sh: apt-get install haproxy (about 4 MB)" >&2
$sudo apt-get install -y -q --no-install-recommends haproxy >/dev/null
if [ ! -x "$bin" ]; then
  echo "haproxy.sh: installed the package but $bin is missing" >&2
  exit 1
fi
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $sudo systemctl disable --now haproxy >/dev/null 2>&1 || true
fi
echo "haproxy.sh: installed $("$bin" -v 2>&1 | head -n 1) in $(($(date +%s) - start))s" >&2
echo "$bin"
