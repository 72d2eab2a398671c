#!/usr/bin/env bash
# Container runtime for the Kafka tests (tests/kafka_broker.py), as root on Debian:
# a reachable Docker engine is used as is; otherwise podman (Debian package, runc) serves
# the Docker API on $IVMFLOW_PODMAN_SOCKET for testcontainers. Then the broker image is
# built locally (.ci/kafka_image.sh; nothing is pulled).
#
# Prints `DOCKER_HOST=...` as its last line on success, for the caller to export.
# Exits non-zero on failure; the tests then fall back to a broker process.
#
# `.ci/podman_setup.sh stop` (the end of .ci/run) removes the containers testcontainers
# left (no reaper runs: a killed test session leaves its broker running) and stops the
# API service this script started.
set -euo pipefail
cd "$(dirname "$0")/.."

SOCK=${IVMFLOW_PODMAN_SOCKET:-/run/ivmflow-podman/podman.sock}
DIR=$(dirname "$SOCK")

if [ "${1:-}" = stop ]; then
  if command -v podman >/dev/null 2>&1; then
    export CONTAINERS_CONF="$DIR/containers.conf"
    for id in $(podman ps -aq --filter label=org.testcontainers=true 2>/dev/null); do
      podman rm -f "$id" >/dev/null 2>&1 || true
    done
  fi
  if [ -f "$DIR/service.pid" ]; then
    kill "$(cat "$DIR/service.pid")" 2>/dev/null || true
    rm -f "$DIR/service.pid"
  fi
  exit 0
fi
t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'; }

ping_api() {  # ping_api unix:///path.sock -> exit 0 when a Docker API answers
  local path=${1#unix://}
  [ -S "$path" ] && curl -sf -m 5 --unix-socket "$path" http://d/_ping >/dev/null
}

if ! command -v curl >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null
fi

for url in ${DOCKER_HOST:-} unix:///var/run/docker.sock; do
  if [[ $url == unix://* ]] && ping_api "$url"; then
    CONTAINER_CLI=docker bash .ci/kafka_image.sh >&2
    echo "docker engine at $url; image built in $(elapsed) s" >&2
    echo "DOCKER_HOST=$url"
    exit 0
  fi
done

if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc >/dev/null
fi

# runc (the runtime verified here) and finite ulimits (the default unlimited
# nofile/nproc are refused); CONTAINERS_CONF applies to the CLI and to the API service.
mkdir -p "$DIR"
cat > "$DIR/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF="$DIR/containers.conf"

if ! ping_api "unix://$SOCK"; then
  rm -f "$SOCK"
  # --time=0: the service never exits on idle; .ci/run stops it by its pid at the end.
  nohup setsid podman system service --time=0 "unix://$SOCK" >"$DIR/service.log" 2>&1 &
  SERVICE_PID=$!
  echo "$SERVICE_PID" >"$DIR/service.pid"
  # If anything below fails, stop the service this script started (the tests then use
  # the broker process, and nothing is left running).
  trap 'if [ $? -ne 0 ]; then kill "$SERVICE_PID" 2>/dev/null; rm -f "$DIR/service.pid"; fi' EXIT
  for _ in $(seq 100); do
    ping_api "unix://$SOCK" && break
    sleep 0.1
  done
  if ! ping_api "unix://$SOCK"; then
    echo "podman system service did not answer on $SOCK; its log:" >&2
    cat "$DIR/service.log" >&2
    exit 1
  fi
fi
CONTAINER_CLI=podman bash .ci/kafka_image.sh >&2
echo "podman API on unix://$SOCK, image built; setup took $(elapsed) s" >&2
echo "DOCKER_HOST=unix://$SOCK"
