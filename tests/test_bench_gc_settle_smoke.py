"""bench/gc_settle_bench.py runs end to end at a small scale: both settings, each in
its own process, their epochs after the load counted and timed (its numbers are the
benchmark's business)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_gc_settle_bench_smoke(tpch_sf001: Path, tmp_path: Path) -> None:
    data = tmp_path / "q03"
    data.mkdir()
    (data / "queries").symlink_to(tpch_sf001 / "queries")
    (data / "updates.csv").symlink_to(tpch_sf001 / "updates.csv")
    out = tmp_path / "gc_settle.json"
    subprocess.run([sys.executable, "-m", "bench.gc_settle_bench", "--data", str(data),
                    "--epoch", "100", "--out", str(out)],
                   capture_output=True, text=True, timeout=300, check=True, cwd=ROOT)
    rows = json.loads(out.read_text())["rows"]
    assert [(r["query"], r["settling"]) for r in rows] == [("q03", "on"), ("q03", "off")]
    for r in rows:
        assert r["epochs"] > 0 and 0 < r["p50_ms"] <= r["max_ms"] and r["total_s"] > 0
