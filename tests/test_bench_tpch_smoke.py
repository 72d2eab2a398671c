"""bench/tpch_bench.py runs end to end at SF 0.01 (its numbers are the benchmark's
business; here: a join block, an outer join and a DAG with top-k are maintained by
ivmflow with every epoch's delta equal to DuckDB recomputing, and a JSON is written)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_tpch_bench_smoke() -> None:
    pytest.importorskip("duckdb_extension_tpch")
    done = subprocess.run([sys.executable, "-m", "bench.tpch_bench", "--quick",
                           "--queries", "q06,q13,q18", "--epochs", "100",
                           "--systems", "ivmflow,duckdb"],
                          capture_output=True, text=True, timeout=600, check=True,
                          cwd=ROOT)
    assert "q18" in done.stdout, done.stdout
    data = json.loads((ROOT / "bench/results/tpch_bench_quick.json").read_text())
    rows = data["rows"]
    assert {(r["query"], r["system"]) for r in rows} == {
        (q, s) for q in ("q06", "q13", "q18") for s in ("ivmflow", "duckdb")}
    ivm = [r for r in rows if r["system"] == "ivmflow"]
    assert all(r["check"] == "equal" for r in ivm), ivm
    assert all(r["epochs"] >= 1 and r["p50_ms"] > 0 and r["state_entries"] > 0 for r in ivm)
