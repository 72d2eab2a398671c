#!/usr/bin/env bash
# Every cell of the runner matrices the default test command samples (tests marked
# `matrix`, see tests/conftest.py): each TPC-H query of tests/test_sql_runners.py on
# Spark and Flink at P = 1 and 2. About 20-30 minutes on 2 cores.
#
# Usage: bash bench/runner_matrix.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
IVMFLOW_FULL_MATRIX=1 exec python -m pytest -q -m "integration" --durations=25 \
  tests/test_sql_runners.py "$@"
