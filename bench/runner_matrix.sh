#!/usr/bin/env bash
# The tests the default test command leaves out (marked `matrix`; tests/conftest.py,
# BEYOND_THE_SLICE, says what covers each in the default slice): each TPC-H query of
# tests/test_sql_runners.py on Spark and Flink at P = 1 and 2, the second runner's copy
# of slow Kafka and Flink tests, the bench scripts' smoke runs. About 40 minutes on 2
# cores. `IVMFLOW_FULL_MATRIX=1 python -m pytest -q` runs them with everything else.
#
# Usage: bash bench/runner_matrix.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
IVMFLOW_FULL_MATRIX=1 exec python -m pytest -q -m matrix --durations=25 "$@"
