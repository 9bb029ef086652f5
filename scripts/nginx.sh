#!/usr/bin/env bash
# Installs the nginx that the load-balancer tests (tests/lb_test.go) put in
# front of several eosink nodes: Debian's nginx-light package (the small
# build: upstream hash, map, proxy — all the tests need), unless an nginx is
# there already. Safe to run again. Needs root (as in CI) or sudo. Prints
# the binary's path on its last line.
#
# The tests find nginx at $EOSINK_NGINX, else /usr/sbin/nginx, else on
# PATH. Without it they skip, and with CI=true they fail naming this script.
# Only the binary is used: the package's own service is stopped and
# disabled where systemd runs it, and the tests start nginx as their child
# with a configuration and prefix of their own.
set -euo pipefail

bin=/usr/sbin/nginx

if [ -n "${EOSINK_NGINX:-}" ]; then
  echo "nginx.sh: EOSINK_NGINX is set; the tests use $EOSINK_NGINX" >&2
fi
if [ -x "$bin" ]; then
  echo "nginx.sh: $bin already installed: $("$bin" -v 2>&1 | head -n 1)" >&2
  echo "$bin"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "nginx.sh: not root and no sudo: run as root to install nginx" >&2
    exit 1
  fi
  sudo=sudo
fi

export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
# Debian's postinst starts the nginx service on port 80 where it can;
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

echo "nginx.sh: apt-get update" >&2
$sudo apt-get update -q >/dev/null
echo "nginx.sh: apt-get install nginx-light (about 1 MB)" >&2
$sudo apt-get install -y -q --no-install-recommends nginx-light >/dev/null
if [ ! -x "$bin" ]; then
  echo "nginx.sh: installed the package but $bin is missing" >&2
  exit 1
fi
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $sudo systemctl disable --now nginx >/dev/null 2>&1 || true
fi
echo "nginx.sh: installed $("$bin" -v 2>&1 | head -n 1) in $(($(date +%s) - start))s" >&2
echo "$bin"
