#!/usr/bin/env bash
# Build the local Kafka broker image for the tests (tests/kafka_broker.py) without pulling
# anything: a root file system holding only the noida-db broker binary from the installed
# PyPI wheel and the shared libraries `ldd` lists for it, imported as an image.
#
#   .ci/kafka_image.sh [IMAGE]        (default: ivmflow/noida-db:<noida-db version>)
#
# Uses $IVMFLOW_PYTHON (default: python, i.e. the active venv) to find the wheel, and
# $CONTAINER_CLI (default: podman, else docker) to import the tarball. Works as root on a
# fresh Debian machine.
set -euo pipefail

# (not $PYTHON: .ci/run uses that for the interpreter that creates the venv)
PY=${IVMFLOW_PYTHON:-python}
read -r VERSION BIN < <("$PY" - <<'PYEOF'
from importlib import metadata, resources
print(metadata.version("noida-db"), resources.files("noida_db").joinpath("noida-db"))
PYEOF
) || true
if [ -z "${BIN:-}" ]; then
  echo "kafka_image.sh: noida-db is not installed for $PY ($(command -v "$PY")); activate" \
    "the project venv (pip install -e .[dev]) or set IVMFLOW_PYTHON" >&2
  exit 1
fi
IMAGE=${1:-${IVMFLOW_KAFKA_IMAGE:-ivmflow/noida-db:$VERSION}}
CLI=${CONTAINER_CLI:-}
if [ -z "$CLI" ]; then
  if command -v podman >/dev/null 2>&1; then CLI=podman; else CLI=docker; fi
fi
if [ ! -x "$BIN" ]; then
  chmod 755 "$BIN"
fi

# Rebuild only when the binary changed (a rebuild while a test broker runs would leave
# the old image behind, in use).
SUM=$(sha256sum "$BIN" | cut -c1-64)
HAVE=$("$CLI" image inspect --format '{{ index .Config.Labels "ivmflow.noida-sha256" }}' \
  "$IMAGE" 2>/dev/null || true)
if [ "$HAVE" = "$SUM" ]; then
  echo "$IMAGE is up to date ($CLI)"
  exit 0
fi

ROOT=$(mktemp -d)
trap 'rm -rf "$ROOT"' EXIT
install -D -m 755 "$BIN" "$ROOT/usr/local/bin/noida-db"
# Every absolute path ldd prints (the libraries and the dynamic loader), at the same path
# inside the image, so the loader finds them without any configuration.
# (ldd also prints the binary's harmless GLIBC version warning: keep only library lines.)
for lib in $(ldd "$BIN" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} /^[ \t]+\// {print $1}' | sort -u); do
  install -D -m 755 "$(readlink -f "$lib")" "$ROOT$lib"
done
mkdir -p "$ROOT/tmp" "$ROOT/data" "$ROOT/etc"
chmod 1777 "$ROOT/tmp"
echo "root:x:0:0:root:/root:/bin/false" > "$ROOT/etc/passwd"

OLD_ID=$("$CLI" image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
tar -C "$ROOT" -cf "$ROOT.tar" .
trap 'rm -rf "$ROOT" "$ROOT.tar"' EXIT
if ! out=$("$CLI" import \
  --change 'ENTRYPOINT ["/usr/local/bin/noida-db"]' \
  --change 'CMD ["start", "--data-dir", "/data", "--host", "127.0.0.1", "--only", "kafka"]' \
  --change "LABEL ivmflow.noida-sha256=$SUM" \
  "$ROOT.tar" "$IMAGE" 2>&1); then
  echo "$CLI import of $IMAGE failed:" >&2
  echo "$out" >&2
  exit 1
fi
NEW_ID=$("$CLI" image inspect --format '{{.Id}}' "$IMAGE")
if [ -n "$OLD_ID" ] && [ "$OLD_ID" != "$NEW_ID" ]; then
  "$CLI" rmi "$OLD_ID" >/dev/null 2>&1 || true  # the previous build, now untagged
fi
echo "built $IMAGE ($CLI; $(du -sh "$ROOT" | cut -f1) root file system)"
