"""Smoke test of bench/runner_state_bench.py (local runner only, small windows): it runs,
writes its JSON with a row per window and a slope, and measures a positive cost."""

from __future__ import annotations

import json
from pathlib import Path

from bench import runner_state_bench


def test_runner_state_bench_quick_local(tmp_path: Path) -> None:
    out = tmp_path / "rs"
    assert runner_state_bench.main(["--quick", "--runners", "local", "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    rows = data["rows"]
    assert [r["window"] for r in rows] == [2000, 4000]
    assert all(r["us_per_update"] > 0 and r["steady_updates"] == 4000 for r in rows)
    assert rows[1]["state_entries"] > rows[0]["state_entries"]
    assert "local P=1" in data["slopes"]
