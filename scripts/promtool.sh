#!/usr/bin/env bash
# Installs promtool, which checks that eosink's /metrics passes
# `promtool check metrics` (server/promtool_test.go): Debian's prometheus
# package, unless promtool is on $PATH already. Safe to run again. Needs
# root (as in CI) or sudo. Prints the binary's path on its last line.
#
# The tests find promtool at $EOSINK_PROMTOOL, else on $PATH. Without it
# they skip, and with CI=true they fail naming this script. The package also
# brings a prometheus server with a service we never use: it is kept from
# starting, and stopped and disabled where systemd runs it.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
# A promtool already on PATH is used wherever it is; else Debian's.
bin=$(command -v promtool || echo /usr/bin/promtool)
apt_install_binary promtool.sh "$bin" EOSINK_PROMTOOL prometheus "for promtool" prometheus --version
