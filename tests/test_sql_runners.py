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


_ORDERED = ("CREATE TABLE R(a INT, b INT);\n"
            "SELECT a, SUM(b) AS s FROM R GROUP BY a ORDER BY s DESC, a;\n")
_ORDERED_UPDATES = "+,R,1,5\n+,R,2,7\n+,R,3,1\n+,R,4,7\n*\n+,R,3,10\n*\n"
_ORDERED_SNAPSHOTS = ("snapshot,mult,a,s\n1,1,2,7\n1,1,4,7\n1,1,1,5\n1,1,3,1\n"
                      "2,1,3,11\n2,1,2,7\n2,1,4,7\n2,1,1,5\n")


@pytest.mark.parametrize("runner", ["local", pytest.param("flink", marks=pytest.mark.integration)])
def test_snapshots_are_written_in_order_by_order(tmp_path: Path, runner: str) -> None:
    """ORDER BY orders every snapshot file, also when partitions' rows were merged."""
    if runner != "local":
        pytest.importorskip("pyflink")
    query, updates = tmp_path / "q.sql", tmp_path / "u.csv"
    query.write_text(_ORDERED)
    updates.write_text(_ORDERED_UPDATES)
    snaps = tmp_path / "snaps.csv"
    extra = [] if runner == "local" else ["--checkpoint", str(tmp_path / "ckpt")]
    _deltas(query, updates, tmp_path / "d.csv", "--runner", runner, "--parallelism", "2",
            "--snapshots", str(snaps), *extra)
    assert snaps.read_text() == _ORDERED_SNAPSHOTS


_MINMAX = ("CREATE TABLE R(a INT, b DECIMAL(6,2), c VARCHAR);\n"
           "SELECT a, MIN(b) AS lo, MAX(c) AS hi, COUNT(DISTINCT c) AS n, "
           "SUM(DISTINCT b) AS s FROM R GROUP BY a;\n")


@pytest.mark.integration
@pytest.mark.parametrize("runner", ["spark", "flink"])
def test_min_max_and_distinct_aggregates_on_runners(tmp_path: Path, runner: str) -> None:
    """MIN/MAX (deletes of the current minimum included) and DISTINCT aggregates keep
    their per-group multisets in the runners' keyed state: equal to the local runner."""
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    query = tmp_path / "q.sql"
    query.write_text(_MINMAX)
    updates = ROOT / "tests/fixtures/minmax_updates.csv"
    want = _deltas(query, updates, tmp_path / "local.csv")
    got = _deltas(query, updates, tmp_path / "out.csv", "--runner", runner,
                  "--parallelism", "2", "--checkpoint", str(tmp_path / "ckpt"))
    assert sum(want.values()) > 100
    assert got == want
