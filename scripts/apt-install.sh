# Sourced by the install-*.sh scripts: `install_missing WHAT_SKIPS PACKAGE...` installs the
# packages from Debian's archive, quietly, when there are any and we can (root + apt-get);
# otherwise it says what is skipped without them and succeeds. Its status is apt-get's.
# Plain bash only: the scripts' test runs them with a PATH of a few tools.

install_missing() {
  local skipped=$1
  shift
  [ $# -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "note: $* missing and cannot be installed here; $skipped" >&2
    return 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d keeps the packages from starting daemons of their own (munge, slurmctld,
  # mariadb...); the tests start their own. One that was already there (container images
  # ship one) is put back afterwards.
  local policy=${POLICY_RC_D:-/usr/sbin/policy-rc.d}  # another path only in its test
  local saved="" rc
  if [ -e "$policy" ]; then
    saved=$(mktemp) && cp -p "$policy" "$saved"
  fi
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
  # The package lists are read first as they are (quick when fresh), refreshed on failure.
  local install=(install -o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends "$@")
  apt-get "${install[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get "${install[@]}" >/dev/null; }
  rc=$?
  if [ -n "$saved" ]; then
    cp -p "$saved" "$policy" && rm -f "$saved"
  else
    rm -f "$policy"
  fi
  return $rc
}
