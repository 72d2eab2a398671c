"""TPC-H Q1, Q5 and Q9 as written (DATE, DECIMAL, expressions, several-table aggregates)
on the Spark and Flink runners at parallelism 1 and 2: every epoch's delta equals the
local runner's record for record (and the local runner equals DuckDB:
tests/test_sql_layer.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _deltas(query: Path, updates: Path, out: Path, *args: str) -> Counter[str]:
    subprocess.run([sys.executable, "-m", "dataflow", "run", str(query), "--updates",
                    str(updates), "--deltas", str(out), "--quiet", *args],
                   cwd=ROOT, check=True, timeout=600,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = out.read_text().splitlines()
    assert lines[0].startswith("epoch,mult,")
    return Counter(lines)


@pytest.fixture(scope="module")
def local_deltas(tpch_sf001: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, Counter[str]]:
    tmp = tmp_path_factory.mktemp("local")
    return {name: _deltas(tpch_sf001 / "queries" / f"{name}.sql", tpch_sf001 / "updates.csv",
                          tmp / f"{name}.csv")
            for name in ("q01", "q05", "q09")}


@pytest.mark.integration
@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("runner", ["spark", "flink"])
@pytest.mark.parametrize("name", ["q01", "q05", "q09"])
def test_tpch_on_runner_equals_local(tpch_sf001: Path, tmp_path: Path,
                                     local_deltas: dict[str, Counter[str]],
                                     name: str, runner: str, parallelism: int) -> None:
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    got = _deltas(tpch_sf001 / "queries" / f"{name}.sql", tpch_sf001 / "updates.csv",
                  tmp_path / "out.csv", "--runner", runner, "--parallelism", str(parallelism),
                  "--checkpoint", str(tmp_path / "ckpt"))
    want = local_deltas[name]
    assert sum(want.values()) > 1
    assert got == want
