#!/usr/bin/env bash
# Slurm for the real-scheduler tests (tests/slurm/): slurmctld, slurmd, the client programs,
# munge, and slurmdbd with MariaDB (sacct needs accounting), from Debian's packages.
# Idempotent and quick when installed; daemons are never started here (the tests start
# their own with scripts/slurm-one-node.sh).
set -uo pipefail
pkgs=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
need=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: ${need[*]} missing and cannot be installed here; the Slurm tests are skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1
[ $had_policy = 1 ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
  { apt-get update -qq >/dev/null && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
rc=$?
[ $had_policy = 1 ] || rm -f /usr/sbin/policy-rc.d
exit $rc
