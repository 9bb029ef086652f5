# shellcheck shell=bash
# Shared by scripts/chromium.sh, scripts/promtool.sh, scripts/haproxy.sh and
# scripts/nginx.sh: installs Debian packages that provide a binary, unless
# the binary is there already. Safe to run again. Needs root (as in CI) or
# sudo. Prints the binary's path on its last line (stdout); everything else
# goes to stderr.
#
# apt_install_binary NAME BIN ENVVAR PACKAGES SIZE [SERVICE [VERSION_FLAG]]
#   NAME          script name for messages (e.g. nginx.sh)
#   BIN           the binary the packages install (e.g. /usr/sbin/nginx)
#   ENVVAR        the variable the tests read instead (e.g. EOSINK_NGINX)
#   PACKAGES      the Debian packages, space-separated (e.g. nginx-light)
#   SIZE          their rough size, for the message (e.g. "about 1 MB")
#   SERVICE       the systemd unit a package brings, stopped and disabled;
#                 empty when there is none
#   VERSION_FLAG  what makes BIN print its version (default -v)
#
# A package's postinst may start its service (nginx on port 80, a
# prometheus server); policy-rc.d 101 keeps it from starting anything
# during the install (Debian's way; a container usually has one already,
# which is then left as it is). Only the binary is used: the tests run it
# as their child.
apt_install_binary() {
  local name=$1 bin=$2 envvar=$3 packages=$4 size=$5 service=${6:-} vflag=${7:--v}

  if [ -n "${!envvar:-}" ]; then
    echo "$name: $envvar is set; the tests use ${!envvar}" >&2
  fi
  if [ -x "$bin" ]; then
    echo "$name: $bin already installed: $("$bin" "$vflag" 2>&1 | head -n 1)" >&2
    echo "$bin"
    return 0
  fi

  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "$name: not root and no sudo: run as root to install $packages" >&2
      return 1
    fi
    sudo=sudo
  fi

  export DEBIAN_FRONTEND=noninteractive
  local start
  start=$(date +%s)
  local policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# written by eosink scripts/%s for one install\nexit 101\n' "$name" | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    # The trap outlives this function, so it names its values, not locals.
    # shellcheck disable=SC2064
    trap "$sudo rm -f '$policy'" EXIT
  fi

  echo "$name: apt-get update" >&2
  $sudo apt-get update -q >/dev/null
  echo "$name: apt-get install $packages ($size)" >&2
  # shellcheck disable=SC2086 # PACKAGES is a list
  $sudo apt-get install -y -q --no-install-recommends $packages >/dev/null
  if [ ! -x "$bin" ]; then
    echo "$name: installed the packages but $bin is missing" >&2
    return 1
  fi
  if [ -n "$service" ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now "$service" >/dev/null 2>&1 || true
  fi
  echo "$name: installed $("$bin" "$vflag" 2>&1 | head -n 1) in $(($(date +%s) - start))s" >&2
  echo "$bin"
}
