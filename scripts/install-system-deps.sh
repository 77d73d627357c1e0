#!/usr/bin/env bash
# System tools the end-to-end tests use: Prometheus (promtool), Alertmanager (amtool) and
# Chromium (the console's browser tests drive it through Playwright), from Debian's packages. Installed only when missing and only when we can (root + apt).
set -uo pipefail
bash "$(dirname "$0")/install-podman.sh"
bash "$(dirname "$0")/install-slurm.sh"
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
# A policy-rc.d that was already there (container images ship one) is put back afterwards.
policy=${POLICY_RC_D:-/usr/sbin/policy-rc.d}  # another path only in its test
saved=""
if [ -e "$policy" ]; then
  saved=$(mktemp) && cp -p "$policy" "$saved"
fi
printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
rc=$?
if [ -n "$saved" ]; then
  cp -p "$saved" "$policy" && rm -f "$saved"
else
  rm -f "$policy"
fi
exit $rc
