#!/usr/bin/env bash
# System tools the end-to-end tests use, from Debian's packages: Podman and Slurm (their own
# scripts), Prometheus (promtool), Alertmanager (amtool) and Chromium (the console's browser
# tests drive it through Playwright). Installed only when missing and only when we can (root + apt).
set -uo pipefail
bash "$(dirname "$0")/install-podman.sh"
bash "$(dirname "$0")/install-slurm.sh"
# shellcheck source=scripts/apt-install.sh
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
. "$here/apt-install.sh"
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v amtool >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
install_missing "tests that need them are skipped" "${need[@]}"
