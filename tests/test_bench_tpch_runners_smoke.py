"""bench/tpch_runners_all.py runs end to end on the local runner (the other runners'
cells are the benchmark's business; here: the table, the JSON, a refusal's reason)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_tpch_runners_all_smoke(tpch_sf001: Path, tmp_path: Path) -> None:
    out = tmp_path / "runners"
    done = subprocess.run([sys.executable, "-m", "bench.tpch_runners_all",
                           "--data", str(tpch_sf001), "--queries", "q04,q06",
                           "--runners", "local", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=True,
                          cwd=ROOT)
    assert "q04" in done.stdout and "q06" in done.stdout
    data = json.loads(out.with_suffix(".json").read_text())
    assert [r["query"] for r in data["rows"]] == ["q04", "q06"]
    assert all(r["local"]["status"] == "ok" and r["local"]["delta_lines"] > 0
               for r in data["rows"])
