#!/usr/bin/env bash
# The compose stack as users run it, on Podman, without a container registry.
#   scripts/compose-smoke.sh images   # base images (mmdebstrap, cached), our image, stand-ins
#   scripts/compose-smoke.sh up       # images, then docker-compose.yml + compose.local.yml
#   scripts/compose-smoke.sh down     # remove every container, volume and network it made
# tests/compose/test_compose_smoke.py drives it (up, checks through the APIs, down).
# Podman reads its settings from a containers.conf of our own (CONTAINERS_CONF), so the
# host's global configuration is left alone. Base images are cached by their package list:
# as images in Podman's store, and as tarballs under $ETT_COMPOSE_CACHE.
# Timings go to stdout as "timing: <what> <seconds>".
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
REPO=$PWD

CACHE=${ETT_COMPOSE_CACHE:-/var/cache/ett-compose}
SUITE=${ETT_BASE_SUITE:-bookworm}
MIRROR=${ETT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PROJECT=ett
LOCAL=tests/compose/compose.local.yml
# Grafana is not brought up: no image of it can be built here (docs/deploy.md).
SERVICES=(migrate api aggregator prometheus alertmanager alert-bridge)
PYTHON_PACKAGES=python3,python3-venv,python-is-python3,ca-certificates
STANDIN_PACKAGES=postgresql,prometheus,prometheus-alertmanager,python3

mkdir -p "$CACHE"
export CONTAINERS_CONF="$CACHE/containers.conf"
# crun refuses this VM's hybrid cgroups; the ulimits are what podman's defaults exceed here.
cat > "$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
EOF

compose() {
  local pc
  pc=$(command -v podman-compose || true)
  [ -n "$pc" ] || pc="$REPO/.venv/bin/podman-compose"
  "$pc" -p "$PROJECT" -f docker-compose.yml -f "$LOCAL" "$@"
}

now() { date +%s.%N; }
timing() { awk -v what="$1" -v t0="$2" -v t1="$(now)" 'BEGIN { printf "timing: %s %.1f\n", what, t1 - t0 }'; }

# A root filesystem from Debian's packages, imported as an image tagged by its inputs.
debian_image() {
  local name=$1 packages=$2 key tag tar
  key=$(printf '%s\n' "$SUITE" "$MIRROR" minbase "$packages" | sha256sum | cut -c1-16)
  tag="localhost/$name:$key"
  tar="$CACHE/$name-$key.tar"
  if ! podman image exists "$tag"; then
    if [ ! -f "$tar" ]; then
      rm -f "$CACHE/$name"-*.tar
      # mmdebstrap picks its output format from the name's extension: keep ".tar" last.
      mmdebstrap --quiet --variant=minbase --include="$packages" "$SUITE" \
        "$CACHE/partial-$name.tar" "$MIRROR" >&2
      mv "$CACHE/partial-$name.tar" "$tar"
    fi
    podman import -q "$tar" "$tag" >/dev/null
  fi
  echo "$tag"
}

# pip inside the build reaches the same indexes as the host: its configuration files and
# every local path they name (indexes, wheels, constraints, CA bundle), mounted read-only.
pip_mounts() {
  local f paths=()
  for f in /etc/pip.conf /etc/xdg/pip "$HOME/.config/pip" "$HOME/.pip" "${PIP_CONFIG_FILE:-}"; do
    [ -n "$f" ] && [ -e "$f" ] && paths+=("$f")
  done
  while read -r f; do
    f=${f#file://}
    # A simple index links to its files through ../../files: mount the index's parent.
    [[ $f == */simple ]] && f=${f%/simple}
    [ -e "$f" ] && paths+=("$f")
  done < <({ python3 -m pip config list 2>/dev/null || true; env | grep '^PIP_' || true; } \
             | grep -oE "(file://)?/[^' ]+")
  printf '%s\n' "${paths[@]}" | sort -u | awk 'last == "" || index($0, last "/") != 1 { print; last = $0 }' \
    | while read -r f; do
    printf -- '-v\n%s:%s:ro\n' "$f" "$f"
  done
}

images() {
  local t base standins
  t=$(now)
  base=$(debian_image ett-base-python "$PYTHON_PACKAGES")
  standins=$(debian_image ett-base-standins "$STANDIN_PACKAGES")
  timing base_images "$t"

  t=$(now)
  mapfile -t mounts < <(pip_mounts)
  # PIP_* settings of the host that are not files reach pip as build arguments would not:
  # the configuration files carry them.
  podman build -q "${mounts[@]}" --build-arg PYTHON_IMAGE="$base" \
    -t localhost/ett-telemetry:local -f Dockerfile . >/dev/null
  timing project_image "$t"

  t=$(now)
  local s
  for s in postgres prometheus alertmanager webhook; do
    podman build -q --build-arg STANDINS_BASE="$standins" \
      -t "localhost/ett-standin-$s:local" "tests/compose/standins/$s" >/dev/null
  done
  timing standin_images "$t"
}

# Podman 4.3 runs no healthcheck without systemd: run the compose file's own by hand.
wait_healthy() {
  local container=$1 timeout=$2 deadline
  deadline=$(( $(date +%s) + timeout ))
  until podman healthcheck run "$container" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "$container not healthy after ${timeout}s" >&2
      podman logs --tail 50 "$container" >&2 || true
      return 1
    fi
    sleep 1
  done
}

up() {
  local port t
  for port in 8080 9090 9093 9095; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "port $port is taken on this machine; the stack publishes it" >&2
      return 1
    fi
  done
  images
  t=$(now)
  # postgres first, healthy, before `migrate` (podman-compose waits for service_healthy
  # only on podman >= 4.6; it does wait for service_completed_successfully).
  # The compose file's order, carried out here: podman-compose waits for service_healthy
  # only on podman >= 4.6, and podman 4.3 cannot start a container whose --requires chain
  # is two deep ("depends on container ... not found in input list"), so each step is
  # started with --no-deps once the previous one is healthy or done.
  local log="$CACHE/compose-up.log"
  : >"$log"
  compose up -d postgres >>"$log" 2>&1 || { cat "$log" >&2; return 1; }
  wait_healthy "${PROJECT}_postgres_1" 120
  compose up -d --no-deps migrate >>"$log" 2>&1 || { cat "$log" >&2; return 1; }
  local code
  code=$(podman wait "${PROJECT}_migrate_1")
  if [ "$code" != 0 ]; then
    podman logs "${PROJECT}_migrate_1" 2>&1 | tail -30 >&2
    return 1
  fi
  local rest=() s
  for s in "${SERVICES[@]}"; do [ "$s" = migrate ] || rest+=("$s"); done
  compose up -d --no-deps "${rest[@]}" >>"$log" 2>&1 || { cat "$log" >&2; return 1; }
  wait_healthy "${PROJECT}_api_1" 120
  wait_healthy "${PROJECT}_aggregator_1" 120
  timing stack_up "$t"
}

down() {
  compose down -v -t 10 >/dev/null 2>&1 || true
  local left
  left=$(podman ps -aq --filter "label=io.podman.compose.project=$PROJECT")
  if [ -n "$left" ]; then
    podman rm -f $left >/dev/null
  fi
  podman volume ls -q --filter "label=io.podman.compose.project=$PROJECT" \
    | xargs -r podman volume rm -f >/dev/null
  podman network ls -q --filter "label=io.podman.compose.project=$PROJECT" \
    | xargs -r podman network rm -f >/dev/null
}

case "${1:-}" in
  images) images ;;
  up) up ;;
  down) down ;;
  *) echo "usage: $0 images|up|down" >&2; exit 2 ;;
esac
