"""Smoke test of bench/write_back_bench.py (small window): it counts changed entries per
update per map, and the engine keeps no derived map a runner would write back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import write_back_bench


def test_write_back_bench_counts_entries_per_map(tmp_path: Path) -> None:
    out = tmp_path / "wb.json"
    args = ["--queries", "hop2_count", "hop3_filter", "--window", "3000",
            "--steady-edges", "2000", "--out", str(out)]
    assert write_back_bench.main(args) == 0
    rows = {r["query"]: r for r in json.loads(out.read_text())["rows"]}
    for r in rows.values():
        assert r["steady_updates"] == 4000
        assert r["entries_per_update"] == pytest.approx(sum(r["per_map"].values()))
        assert r["entries_per_update"] > 0
        # V_l is derived, not stored: no map of live flags is written back.
        assert not any(m.endswith(".live") for m in r["per_map"])
    # The grouped COUNT's finalizer reads its groups off the engine: no copy written.
    assert "finalize.output" not in rows["hop2_count"]["per_map"]
    # An atom node with children keeps its multiplicities in its first index's buckets:
    # no base map (hop2: G1 over G2; hop3: G2 over G3); a top leaf keeps them in its
    # groups (hop3: G1's proj, key -> {tuple: multiplicity}): no base map either.
    assert "sj_G1.base" not in rows["hop2_count"]["per_map"]
    assert "sj_G1.index.sj_G2" in rows["hop2_count"]["per_map"]
    assert "sj_G2.base" not in rows["hop3_filter"]["per_map"]
    assert "sj_G1.base" not in rows["hop3_filter"]["per_map"]
    assert "sj_G1.proj" in rows["hop3_filter"]["per_map"]
    assert not any(m.endswith(".base") for m in rows["hop3_filter"]["per_map"])
