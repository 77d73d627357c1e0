#!/usr/bin/env bash
# Slurm for the real-scheduler tests (tests/slurm/): slurmctld, slurmd, the client programs,
# munge, and slurmdbd with MariaDB (sacct needs accounting), from Debian's packages.
# Idempotent and quick when installed; daemons are never started here (the tests start
# their own with scripts/slurm-one-node.sh). Installed only when missing and only when we
# can (root + apt + dpkg).
set -uo pipefail
command -v dpkg-query >/dev/null 2>&1 || exit 0  # not a Debian system: the tests skip
# shellcheck source=scripts/apt-install.sh
here=${BASH_SOURCE[0]%/*}; [ "$here" != "${BASH_SOURCE[0]}" ] || here=.
. "$here/apt-install.sh"
pkgs=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
need=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
install_missing "the Slurm tests are skipped" "${need[@]}"
