#!/usr/bin/env bash
# System tools the end-to-end tests use: Prometheus (promtool), Alertmanager (amtool) and
# Chromium (the console's browser tests drive it through Playwright), from Debian's packages. Installed only when missing and only when we can (root + apt).
set -uo pipefail
"$(dirname "$0")/install-slurm.sh"
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v amtool >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: ${need[*]} missing and cannot be installed here; tests that need them are skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d keeps the packages from starting daemons of their own; tests start their own.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
rc=$?
rm -f /usr/sbin/policy-rc.d
exit $rc
