#!/usr/bin/env bash
# Each runner's extra installs alone and runs: for every extra named (default: spark
# flink), a fresh venv with `pip install -e ".[EXTRA]"` and nothing else, then the
# runner's example end to end there, its stdout compared byte for byte with the local
# runner's. The full suite runs in the combined environment, where one extra's
# dependencies can hide another's missing one (apache-flink brings the protobuf that
# Spark's transformWithState needs): this catches that.
#
# Usage: bash .ci/extras_check.sh [EXTRA...]   (PYTHON=python3.x to choose the base)
# Quick on a warm pip cache (the main install fills it): about a minute per extra.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
EXTRAS=("$@")
[ ${#EXTRAS[@]} -gt 0 ] || EXTRAS=(spark flink)
QUERY=examples/paths.sql
UPDATES=examples/paths_updates.csv

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ivmflow-extras.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# A clean environment for the venvs: no other venv, no path that brings its packages.
unset VIRTUAL_ENV PYTHONPATH PYTHONHOME

fail() {
  echo "!!!!!!!! extras check FAILED: $*" >&2
  exit 1
}

for extra in "${EXTRAS[@]}"; do
  venv=$WORK/venv-$extra
  start=$SECONDS
  "$PY" -m venv "$venv" || fail "[$extra]: '$PY -m venv' failed"
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      -e "$ROOT[$extra]" >"$WORK/pip-$extra.log" 2>&1; then
    grep -v '^WARNING: Location' "$WORK/pip-$extra.log" | tail -n 30 >&2
    fail "[$extra]: pip install -e '.[$extra]' into a fresh venv failed (above)"
  fi
  installed=$((SECONDS - start))
  # The reference: the local runner of the same installation (needs no extra).
  if ! "$venv/bin/ivmflow" run "$QUERY" --updates "$UPDATES" -q \
      >"$WORK/local-$extra.out" 2>"$WORK/local-$extra.err"; then
    cat "$WORK/local-$extra.err" >&2
    fail "[$extra]: the local runner failed in the venv with only [$extra] (above)"
  fi
  [ -s "$WORK/local-$extra.out" ] || fail "[$extra]: the local runner printed no deltas"
  if ! timeout 600 "$venv/bin/ivmflow" run "$QUERY" --updates "$UPDATES" -q \
      --runner "$extra" >"$WORK/$extra.out" 2>"$WORK/$extra.err"; then
    cat "$WORK/$extra.err" >&2
    log=$(grep -o 'full trace in [^ ]*' "$WORK/$extra.err" | head -n 1 | cut -d' ' -f4 || true)
    if [ -n "$log" ] && [ -f "$log" ]; then
      echo "---- the worker's traceback in $log:" >&2
      awk '/Traceback \(most recent call last\)/ {p = 1} p && /^\tat / {exit} p' "$log" |
        head -n 40 >&2
    fi
    fail "[$extra]: 'ivmflow run $QUERY --updates $UPDATES --runner $extra' failed in a" \
         "fresh venv with only ivmflow[$extra] installed (above); pin what it needs in" \
         "pyproject.toml's [$extra] extra"
  fi
  if ! cmp -s "$WORK/local-$extra.out" "$WORK/$extra.out"; then
    diff -u --label "local runner" --label "$extra runner" \
      "$WORK/local-$extra.out" "$WORK/$extra.out" >&2 || true
    fail "[$extra]: the $extra runner's stdout differs from the local runner's (above)"
  fi
  rows=$(($(wc -l <"$WORK/$extra.out") - 1))
  echo "extras: [$extra] alone: installed in ${installed}s, the $extra runner's $rows delta" \
       "rows equal the local runner's (${SECONDS}s so far)"
  rm -rf "$venv"
done
