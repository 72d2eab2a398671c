"""bench/tpch_flink_sql.py: the TPC-H queries as Flink SQL text (without Flink), and
(integration) Flink SQL over the SF 0.01 changelog with its final result equal to DuckDB's."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.tpch_flink_sql import (
    TRANSLATIONS,
    check_final,
    flink_query,
    flink_schema,
    run_flink_sql,
    run_ivmflow_runner,
)


def test_translations_apply_and_order_by_without_limit_is_dropped(tpch_sf001: Path) -> None:
    for name in [f"q{n:02d}" for n in range(1, 23)]:
        text = (tpch_sf001 / "queries" / f"{name}.sql").read_text()
        sql = flink_query(name, text)  # raises when a translation no longer applies
        assert "CREATE TABLE" not in sql
        if "LIMIT" in sql:
            assert "ORDER BY" in sql
        else:
            assert "ORDER BY" not in sql.split("FROM")[-1].upper(), name
    assert set(TRANSLATIONS) <= {f"q{n:02d}" for n in range(1, 23)}
    schema = flink_schema((tpch_sf001 / "schema.sql").read_text())
    assert dict(schema["lineitem"])["l_quantity"] == "DECIMAL(15,2)"
    assert dict(schema["orders"])["o_orderdate"] == "DATE"
    assert dict(schema["orders"])["o_orderkey"] == "INT"
    assert dict(schema["customer"])["c_mktsegment"] == "STRING"


@pytest.mark.integration
def test_flink_sql_final_result_equals_duckdb(tpch_sf001: Path) -> None:
    pytest.importorskip("pyflink")
    import tpch_oracle as to

    select = to.query_part((tpch_sf001 / "queries" / "q06.sql").read_text())
    want = to.duckdb_answers_per_epoch(tpch_sf001 / "schema.sql",
                                       tpch_sf001 / "updates.csv", select)[-1]
    res = run_flink_sql(tpch_sf001, "q06", check_only=True, timeout=300)
    assert "final" in res, res
    assert check_final(res["final"], [[(1, r) for r in want]]) == "final equal"


@pytest.mark.integration
def test_ivmflow_on_flink_reports_its_last_checkpoint_and_equals_local(
        tpch_sf001: Path) -> None:
    """The state compared with Flink SQL's is what the job's REST endpoint (on the port
    IVMFLOW_FLINK_CONF gives it) says its last completed checkpoint holds; the run counts
    only when its deltas equal the local runner's."""
    pytest.importorskip("pyflink")
    res = run_ivmflow_runner(tpch_sf001, "q03", "ivmflow-flink", timeout=600,
                             conf={"execution.checkpointing.interval": "200ms"})
    assert res.get("check") == "equal to local", res
    latest = res["last_checkpoint"]
    assert latest.get("id", 0) >= 1 and res["state_bytes"] == latest["state_size"] > 0, res


@pytest.mark.integration
def test_a_bad_flink_conf_entry_stops_the_run_with_its_text(tpch_sf001: Path,
                                                            tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "dataflow", "run", str(tpch_sf001 / "queries" / "q06.sql"),
         "--updates", str(tpch_sf001 / "updates.csv"), "--deltas", str(tmp_path / "d.csv"),
         "--runner", "flink", "--quiet"],
        env={**os.environ, "IVMFLOW_FLINK_CONF": "rest.port=8081;state.backend.rocksdb"},
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-800:]
    assert "IVMFLOW_FLINK_CONF entry 'state.backend.rocksdb': expected key=value" \
        in done.stderr
    deltas = tmp_path / "d.csv"  # (the sink's header at most: no epoch was written)
    assert not deltas.exists() or len(deltas.read_text().splitlines()) <= 1
