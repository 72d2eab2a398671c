"""bench/operator_cost_bench.py runs end to end at a small scale (its numbers are the
benchmark's business; here: every measured operator's snapshot was checked equal to
DuckDB, and the JSON has what docs/benchmarks.md's table reads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_operator_cost_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "operator_cost"
    ops = ["min_max", "top_k", "semi_join_in", "scalar_uncorrelated", "view_chain"]
    done = subprocess.run([sys.executable, "-m", "bench.operator_cost_bench",
                           "--sizes", "300", "600", "--updates", "60", "--epoch", "20",
                           "--operators", *ops, "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=True,
                          cwd=ROOT)
    assert "| min_max |" in done.stdout
    data = json.loads(out.with_suffix(".json").read_text())
    assert {"sizes", "updates", "epoch", "operators", "rows", "checked_equal_duckdb",
            "machine", "table"} <= set(data)
    for name, s in data["operators"].items():
        if name not in ops:  # (its slot stays in the table, marked)
            assert s["status"] == "not measured in this run"
            assert f"| {name} | {s['design']} | not measured" in data["table"]
            continue
        assert s["status"] == "measured"
        assert {"ratio_largest_smallest", "slope", "over_plain", "duckdb_over_ivmflow",
                "design"} <= set(s)
    assert set(ops) < set(data["operators"])
    assert len(data["rows"]) == len(ops) * 2
    for row in data["rows"]:
        for system in ("ivmflow", "plain", "duckdb"):
            assert row[system]["us_per_update"] > 0
        # (both ivmflow snapshots were compared with DuckDB on the final state)
        assert set(row["checked_equal_duckdb"]) == {"ivmflow", "plain"}
    assert data["checked_equal_duckdb"] == len(ops) * 2 * 2
