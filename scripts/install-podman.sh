#!/usr/bin/env bash
# What the compose smoke test (scripts/compose-smoke.sh) needs, from Debian's packages:
# podman with runc (crun refuses this VM's hybrid cgroups), the CNI dnsname plugin (so the
# stack's containers find each other by service name) and mmdebstrap (base images from
# Debian's packages: no container registry is reachable). podman-compose comes from PyPI
# with the test extras. Installed only when missing and only when we can (root + apt).
set -uo pipefail
need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
[ -e /usr/lib/cni/dnsname ] || need+=(golang-github-containernetworking-plugin-dnsname)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: ${need[*]} missing and cannot be installed here; the compose smoke test is skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null \
  && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
