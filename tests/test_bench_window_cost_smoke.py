"""bench/window_cost_bench.py runs end to end at a small scale (its numbers are the
benchmark's business; here: every run's snapshot was checked equal to DuckDB, the tail
stream changes about one row per update, and the JSON has what docs/benchmarks.md's
table reads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_window_cost_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "window_cost"
    functions = ["row_number", "sum_range", "top_n_per_group"]
    done = subprocess.run([sys.executable, "-m", "bench.window_cost_bench",
                           "--sizes", "200", "400", "--updates", "60", "--epoch", "20",
                           "--functions", *functions, "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=True,
                          cwd=ROOT)
    assert "| row_number | tail |" in done.stdout
    data = json.loads(out.with_suffix(".json").read_text())
    assert {"sizes", "updates", "epoch", "functions", "rows", "machine", "commit",
            "table"} <= set(data)
    assert [r["function"] for r in data["rows"]] == [f for f in functions for _ in (1, 2)]
    for row in data["rows"]:
        assert row["ivmflow"]["us_per_update"] > 0 and row["duckdb"]["us_per_update"] > 0
        assert row["checked_equal_duckdb"] > 0
        if row["stream"] == "tail":  # (the epoch's deletes are not its own inserts)
            assert row["ivmflow"]["delta_rows_per_update"] >= 0.9
