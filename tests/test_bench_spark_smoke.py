"""Smoke test of bench/spark_bench.py's cost-vs-state part on real Spark (small windows):
it runs, checks the Spark deltas against the local runner's (it exits otherwise), and
writes its JSON with a positive steady cost per runner and window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.integration
def test_spark_bench_quick_state(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from bench import spark_bench

    assert spark_bench.main(["--quick", "--parts", "state", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "spark_state_quick.json").read_text())
    spark = [r for r in data["rows"] if r["runner"] == "spark"]
    assert [r["window"] for r in spark] == [2000, 4000]
    assert all(r["us_per_update"] > 0 and r["checkpoint_bytes"] > 0 for r in spark)
    assert "spark P=2" in data["slopes"]
