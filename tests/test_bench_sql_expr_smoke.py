"""bench/sql_expr_bench.py runs end to end at a small scale (its numbers are the
benchmark's business; here: both variants agree and a JSON is written)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_sql_expr_bench_smoke(tmp_path: Path) -> None:
    pytest.importorskip("duckdb_extension_tpch")
    out = tmp_path / "sql_expr"
    done = subprocess.run([sys.executable, "-m", "bench.sql_expr_bench", "--sf",
                           "0.005", "--repeat", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=True,
                          cwd=ROOT)
    assert "q09" in done.stdout
    data = json.loads(out.with_suffix(".json").read_text())
    assert [r["query"] for r in data["rows"]] == ["q01", "q09"]
    assert all(r["expressions_us_per_update"] > 0 for r in data["rows"])
