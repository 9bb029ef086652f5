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

. "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
apt_install_binary nginx.sh /usr/sbin/nginx EOSINK_NGINX nginx-light "about 1 MB" nginx
