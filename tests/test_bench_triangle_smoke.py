"""The triangle benchmark (bench/triangle_bench.py) on tiny graphs: the workload's shape,
the naive delta-query baseline against networkx, and the ``--quick`` path in-process,
where every system (IVM-eps at eps = 0, 1/2, 1 and the naive baseline) must agree.
No timing assertions."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

from bench import triangle_bench as tb
from bench.harness import streams


def test_hub_graph_and_stream() -> None:
    spec = streams.GraphSpec()
    edges, hub_edges = streams.hub_graph(600, seed=3, spec=spec, n_live=400)
    assert len(edges) == len(set(edges)) == 600
    assert all(s != d for s, d in edges)
    assert set(hub_edges) <= set(edges) and len(hub_edges) == spec.hubs * (spec.hubs - 1)
    st = streams.hub_stream(400, seed=3, tail=0.5, spec=spec, hot=10)
    live: set[tuple[int, int]] = set()
    for i, (op, e) in enumerate(st.updates):
        if op == "+":
            assert e not in live
            live.add(e)
        else:
            live.remove(e)
        if i >= st.phases["load"][1]:
            assert abs(len(live) - 400) <= 1
    assert st.phases["hot"][1] - st.phases["hot"][0] == 10
    stats = streams.degree_stats([e for _, e in st.updates[:400]])
    assert stats["max_out_degree"] >= st.hub_degree // 2


@pytest.mark.parametrize("listing", [False, True])
def test_naive_matches_networkx(listing: bool) -> None:
    g = nx.gnp_random_graph(30, 0.2, seed=5, directed=True)
    edges = list(g.edges())
    naive = tb.NaiveDelta(listing)
    for a, b in edges:
        naive.apply("+", a, b)
    for a, b in edges[::3]:
        naive.apply("-", a, b)
        g.remove_edge(a, b)
    cycles = [c for c in nx.simple_cycles(g, length_bound=3) if len(c) == 3]
    if listing:
        expected = {}
        for x, y, z in cycles:
            for r in ((x, y, z), (y, z, x), (z, x, y)):
                expected[r] = 1
        assert naive.result() == expected
    else:
        assert naive.result() == 3 * len(cycles)
    assert cycles


def test_quick_path_systems_agree(tmp_path: Path) -> None:
    lines: list[str] = []
    doc = tb.main(["--quick", "--sizes", "400,1000", "--hot", "12", "--out-dir",
                   str(tmp_path)], log=lines.append)
    assert doc["agree"] is True
    assert sum("all 4 systems agree" in ln for ln in lines) == 4  # 2 sizes x 2 queries
    res = doc["rows"]
    assert {(r["query"], r["system"]) for r in res} == {
        (q, s) for q in tb.QUERIES for s in tb.SYSTEMS
    }
    assert all(r["state_entries"] > 0 and r["tail_updates"] > 0 for r in res)
    assert len(doc["slopes"]) == len(tb.QUERIES) * len(tb.SYSTEMS)
    # the hubs are heavy at eps = 1/2 on the larger graph: both parts are exercised
    assert all(r["router"]["heavy_values"] > 0 for r in res
               if r["system"] == "ivm_eps0.5" and r["size"] == 1000)
    saved = json.loads((tmp_path / "triangle_quick.json").read_text())
    assert saved["sizes"] == [400, 1000] and saved["graph"]
    assert (tmp_path / "triangle_quick.png").stat().st_size > 0
    assert any("slope" in ln for ln in lines)


def test_disagreement_is_detected() -> None:
    stream = streams.hub_stream(160, seed=1, tail=0.5, spec=streams.GraphSpec(), hot=4)
    a = tb.run_system("naive", "count", stream)
    b = tb.run_system("ivm_eps0.5", "count", stream)
    tb.check_agreement([a, b])
    b.digests[-1] += 1
    with pytest.raises(tb.Disagreement):
        tb.check_agreement([a, b])
