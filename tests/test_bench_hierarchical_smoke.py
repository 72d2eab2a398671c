"""The hierarchical knob benchmark (bench/hierarchical_bench.py) on tiny sizes: the
generated databases have the degrees they promise, the light-edge family keeps every key
light and the heavy-edge family makes every key heavy, and the ``--quick`` path writes
its JSON with slopes for every (query, eps). No timing assertions."""

from __future__ import annotations

import json
from pathlib import Path

from bench import hierarchical_bench as hb
from dataflow.api import compile_query


def test_databases_have_the_promised_degrees() -> None:
    for name in ("ex5", "ex4"):
        tuples, keys = hb.database(name, 1000, 7)
        r_per_b: dict[int, int] = {}
        for atom, values in tuples:
            if atom == 0:
                r_per_b[values["r.b"]] = r_per_b.get(values["r.b"], 0) + 1
        assert set(r_per_b) == set(keys) and set(r_per_b.values()) == {7}


def test_families_are_all_light_and_all_heavy() -> None:
    q = compile_query(hb.QUERIES["ex5"], eps=0.5, view_trees=True)
    light_tuples, keys = hb.database("ex5", 2000, 40)  # 40 < 2000^0.5
    heavy_tuples, _ = hb.database("ex5", 2000, 200)
    light = hb.Loaded("ex5", q.kind.make_engine(), light_tuples).engine.views
    heavy = hb.Loaded("ex5", q.kind.make_engine(), heavy_tuples).engine.views
    assert not any(h.m for h in light.heavy.values()) and light.light_rows() == 40 * len(keys)
    assert light.light_rows() > 0 and heavy.light_rows() == 0
    assert dict(heavy.enumerate()) == heavy.full()


def test_quick_run_writes_slopes(tmp_path: Path) -> None:
    out = tmp_path / "h.json"
    assert hb.main(["--quick", "--updates", "20", "--rows", "50", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {(s["query"], s["eps"]) for s in data["slopes"]} == {
        ("ex5", 0.0), ("ex5", 0.5), ("ex5", 1.0), ("ex4", 0.5)}
    assert all(p["update_us"] > 0 and p["delay_us"] > 0 for p in data["rows"])
    assert {c["query"] for c in data["crown"]} == {"ex5", "ex4"}
