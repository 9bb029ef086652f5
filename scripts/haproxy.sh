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

. "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
apt_install_binary haproxy.sh /usr/sbin/haproxy EOSINK_HAPROXY haproxy "about 4 MB" haproxy
