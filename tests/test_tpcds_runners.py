"""Ten TPC-DS queries with window functions or set operations (issue 42, item 7) on the
Spark and Flink runners at parallelism 2: every epoch's delta equals the local
runner's record for record (the local runner equals DuckDB: bench/tpcds_accept.py).

The stream is a slice of ``ivmflow generate tpcds`` at SF 0.01 with two refresh rounds
(bench/.cache/tpcds_sf0.01_r2, made once by bench/tpcds_accept.py's ``ensure_data``):
every epoch, with the load's fact tables cut to their first rows, ``date_dim`` to the
years 1998-2003 and ``time_dim`` to its first rows, and a later delete kept only when
the slice holds the row it deletes. Every cell is beyond the default slice
(``IVMFLOW_FULL_MATRIX=1``, bench/runner_matrix.sh)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from test_sql_runners import _deltas, local_reference

# windows: q12 q20 q47 q57 q89 q98; set operations: q02 (UNION ALL), q38 (INTERSECT),
# q87 (EXCEPT); q36: UNION ALL of grouping sets (ROLLUP) under RANK() OVER
TPCDS_QUERIES = ("q02", "q12", "q20", "q36", "q38", "q47", "q57", "q87", "q89", "q98")

_FACTS = {"store_sales", "store_returns", "catalog_sales", "catalog_returns",
          "web_sales", "web_returns", "inventory"}
_FACT_ROWS = 1500
_TIME_ROWS = 1000


def _slice(updates: Path, out: Path) -> None:
    """Write the slice of ``updates`` described above to ``out``."""
    kept: Counter[str] = Counter()
    load_rows: Counter[str] = Counter()
    lines, epoch = [], 0
    for line in updates.read_text().splitlines():
        if line.startswith("*"):
            epoch += 1
            lines.append(line)
            continue
        op, table, values = line.split(",", 2)
        if epoch == 0:
            load_rows[table] += 1
            if table in _FACTS and load_rows[table] > _FACT_ROWS:
                continue
            if table == "time_dim" and load_rows[table] > _TIME_ROWS:
                continue
            if table == "date_dim" and not 1998 <= int(values.split(",")[6]) <= 2003:
                continue
        row = f"{table},{values}"
        if op == "-":
            if kept[row] == 0:
                continue
            kept[row] -= 1
        else:
            kept[row] += 1
        lines.append(line)
    out.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def tpcds_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("duckdb")
    from bench.tpcds_accept import ensure_data

    data = ensure_data(0.01, 2)
    out = tmp_path_factory.mktemp("tpcds_slice")
    (out / "queries").symlink_to(data / "queries")
    _slice(data / "updates.csv", out / "updates.csv")
    return out


@pytest.fixture(scope="module")
def local_tpcds_deltas(tpcds_slice: Path, tmp_path_factory: pytest.TempPathFactory
                       ) -> dict[str, Counter[str]]:
    return local_reference(tpcds_slice, tmp_path_factory.mktemp("local"))


@pytest.mark.integration
@pytest.mark.matrix
@pytest.mark.parametrize("runner", ["spark", "flink"])
@pytest.mark.parametrize("name", TPCDS_QUERIES)
def test_tpcds_on_runner_equals_local(tpcds_slice: Path, tmp_path: Path,
                                      local_tpcds_deltas: dict[str, Counter[str]],
                                      name: str, runner: str) -> None:
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    got = _deltas(tpcds_slice / "queries" / f"{name}.sql", tpcds_slice / "updates.csv",
                  tmp_path / "out.csv", "--runner", runner, "--parallelism", "2",
                  "--checkpoint", str(tmp_path / "ckpt"))
    want = local_tpcds_deltas[name]
    assert sum(want.values()) > 1
    assert got == want
