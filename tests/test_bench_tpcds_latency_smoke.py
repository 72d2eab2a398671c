"""bench/tpcds_latency.py runs end to end at SF 0.01 (its numbers are the benchmark's
business; here: a window-function query maintained by the native build with every
epoch's delta equal to DuckDB recomputing it, and a record written)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_tpcds_latency_smoke(tmp_path: Path) -> None:
    pytest.importorskip("duckdb_extension_tpcds")
    out = tmp_path / "latency.json"
    done = subprocess.run([sys.executable, "-m", "bench.tpcds_latency", "--quick",
                           "--queries", "q12", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, check=True,
                          cwd=ROOT)
    assert "q12" in done.stdout, done.stdout
    (row,) = json.loads(out.read_text())["rows"]
    assert row["check"] == "equal", row
    assert row["ivm_epochs"] == row["duck_epochs"] == 5
    assert row["ivm_p50_ms"] > 0 and row["ratio_p50"] > 0 and row["ivm_bytes_per_tuple"] > 0
