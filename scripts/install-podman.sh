#!/usr/bin/env bash
# What the compose smoke test (scripts/compose-smoke.sh) needs, from Debian's packages:
# podman with runc (crun refuses this VM's hybrid cgroups), the CNI dnsname plugin (so the
# stack's containers find each other by service name) and mmdebstrap (base images from
# Debian's packages: no container registry is reachable). podman-compose comes from PyPI
# with the test extras. Installed only when missing and only when we can (root + apt).
set -uo pipefail
# shellcheck source=scripts/apt-install.sh
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
. "$here/apt-install.sh"
need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
[ -e /usr/lib/cni/dnsname ] || need+=(golang-github-containernetworking-plugin-dnsname)
install_missing "the compose smoke test is skipped" "${need[@]}"
