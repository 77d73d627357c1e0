#!/usr/bin/env bash
# Slurm for the real-scheduler tests (tests/slurm/): slurmctld, slurmd, the client programs,
# munge, and slurmdbd with MariaDB (sacct needs accounting), from Debian's packages.
# Idempotent and quick when installed; daemons are never started here (the tests start
# their own with scripts/slurm-one-node.sh). Installed only when missing and only when we
# can (root + apt + dpkg).
set -uo pipefail
command -v dpkg-query >/dev/null 2>&1 || exit 0  # not a Debian system: the tests skip
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
# policy-rc.d keeps the packages from starting daemons of their own (munge, slurmctld,
# mariadb); one that was already there is put back afterwards.
policy=${POLICY_RC_D:-/usr/sbin/policy-rc.d}
saved=""
if [ -e "$policy" ]; then
  saved=$(mktemp) && cp -p "$policy" "$saved"
fi
printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
  { apt-get update -qq >/dev/null && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
rc=$?
if [ -n "$saved" ]; then
  cp -p "$saved" "$policy" && rm -f "$saved"
else
  rm -f "$policy"
fi
exit $rc
