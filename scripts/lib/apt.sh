# shellcheck shell=bash
# Shared by scripts/haproxy.sh and scripts/nginx.sh: installs one Debian
# package that provides a binary, unless the binary is there already. Safe
# to run again. Needs root (as in CI) or sudo. Prints the binary's path on
# its last line (stdout); everything else goes to stderr.
#
# apt_install_binary NAME BIN ENVVAR PACKAGE SIZE SERVICE
#   NAME     script name for messages (e.g. nginx.sh)
#   BIN      the binary the package installs (e.g. /usr/sbin/nginx)
#   ENVVAR   the variable the tests read instead (e.g. EOSINK_NGINX)
#   PACKAGE  the Debian package (e.g. nginx-light)
#   SIZE     its rough size, for the message (e.g. "about 1 MB")
#   SERVICE  the systemd unit the package brings, stopped and disabled
#
# The package's postinst starts its service on port 80 where it can;
# policy-rc.d 101 keeps it from starting anything during the install. Only
# the binary is used: the tests run it as their child.
apt_install_binary() {
  local name=$1 bin=$2 envvar=$3 package=$4 size=$5 service=$6

  if [ -n "${!envvar:-}" ]; then
    echo "$name: $envvar is set; the tests use ${!envvar}" >&2
  fi
  if [ -x "$bin" ]; then
    echo "$name: $bin already installed: $("$bin" -v 2>&1 | head -n 1)" >&2
    echo "$bin"
    return 0
  fi

  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "$name: not root and no sudo: run as root to install $service" >&2
      return 1
    fi
    sudo=sudo
  fi

  export DEBIAN_FRONTEND=noninteractive
  local start
  start=$(date +%s)
  local policy=/usr/sbin/policy-rc.d
  local own_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    own_policy=1
  fi
  # The trap outlives this function, so it names its values, not locals.
  if [ -n "$own_policy" ]; then
    # shellcheck disable=SC2064
    trap "$sudo rm -f '$policy'" EXIT
  fi

  echo "$name: apt-get update" >&2
  $sudo apt-get update -q >/dev/null
  echo "$name: apt-get install $package ($size)" >&2
  $sudo apt-get install -y -q --no-install-recommends "$package" >/dev/null
  if [ ! -x "$bin" ]; then
    echo "$name: installed the package but $bin is missing" >&2
    return 1
  fi
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now "$service" >/dev/null 2>&1 || true
  fi
  echo "$name: installed $("$bin" -v 2>&1 | head -n 1) in $(($(date +%s) - start))s" >&2
  echo "$bin"
}
