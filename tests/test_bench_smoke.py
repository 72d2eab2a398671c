"""The benchmark harness on tiny graphs: workloads, the SCP and DuckDB baselines against
a brute-force oracle, ivmflow against the oracle, and a ``run_bench --quick`` run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench import run_bench
from bench.baseline_duckdb import DuckDBRecompute
from bench.baseline_scp import CQ, SCP, Atom, Bag, bench_cq, oracle_deltas
from bench.workloads import QUERY_NAMES, Workload, make_graph, make_workload
from core.records import Update


def _tiny(query: str, seed: int = 7) -> Workload:
    return make_workload(query, 120, seed=seed, attach=4, model="ba")


def _drive(system: run_bench.Maintained, epochs: list[list[Update]]) -> list[Bag]:
    out = []
    for ep in epochs:
        for u in ep:
            system.apply(u)
        d = system.end_epoch()
        out.append({r: m for m, r in run_bench.delta_pairs(d)})
    return out


def test_graph_and_fifo_stream() -> None:
    g = make_graph(500, seed=3, attach=4)
    assert len(g.edges) == len(set(g.edges)) == 500
    assert all(s != d for s, d in g.edges)
    kept = sum(1 for _, d in g.edges if d > g.threshold)
    assert 0.02 * 500 <= kept <= 0.2 * 500
    wl = make_workload("hop3_full", 500, seed=3)
    assert len(wl.updates) == 2 * 500 - wl.window
    live: set[tuple[object, ...]] = set()
    inserted: list[tuple[object, ...]] = []
    for u in wl.updates:
        if u.op == "+":
            assert u.row not in live
            live.add(u.row)
            inserted.append(u.row)
        else:  # FIFO: the deleted edge is the one inserted w insertions ago
            assert u.row == inserted[len(inserted) - 1 - wl.window]
            live.remove(u.row)
        assert len(live) <= wl.window + 1
    assert len(live) == wl.window
    comb = make_workload("comb2", 500, seed=3)
    assert {u.relation for u in comb.updates[:10]} <= {"V1", "V2"}


@pytest.mark.parametrize("early", [False, True])
@pytest.mark.parametrize("query", QUERY_NAMES)
def test_scp_matches_oracle(query: str, early: bool) -> None:
    wl = _tiny(query)
    epochs = wl.epochs(13)
    cq = bench_cq(query, wl.threshold)
    expected = oracle_deltas(cq, epochs)
    scp = SCP(cq, early_projection=early)
    assert _drive(scp, epochs) == expected
    assert any(expected)
    assert scp.state_entries() > 0


def test_scp_bags_repeated_variables_and_multiplicities() -> None:
    cq = CQ((Atom("R", ("a", "a")), Atom("S", ("b", "c"), lambda t: t[0] != 1),
             Atom("R", ("c", "d"))), ("a", "d"), count=True)
    rng = random.Random(5)
    live: list[tuple[str, tuple[int, int], int]] = []
    ups: list[Update] = []
    for _ in range(400):
        if live and rng.random() < 0.4:
            rel, row, m = live.pop(rng.randrange(len(live)))
            ups.append(Update("-", rel, row, m))
        else:
            rel, row, m = rng.choice("RS"), (rng.randrange(4), rng.randrange(4)), \
                rng.randint(1, 3)
            live.append((rel, row, m))
            ups.append(Update("+", rel, row, m))
    epochs = [ups[i:i + 9] for i in range(0, len(ups), 9)]
    for variant in (CQ(cq.atoms, cq.output, count=True), CQ(cq.atoms, cq.output),
                    CQ(cq.atoms, cq.output, distinct=True)):
        assert _drive(SCP(variant), epochs) == oracle_deltas(variant, epochs)


@pytest.mark.parametrize("query", QUERY_NAMES)
def test_duckdb_matches_oracle(query: str) -> None:
    wl = _tiny(query, seed=11)
    epochs = wl.epochs(29)
    expected = oracle_deltas(bench_cq(query, wl.threshold), epochs)
    assert _drive(DuckDBRecompute(wl.sql), epochs) == expected
    warm = DuckDBRecompute(wl.sql)  # warm start in the middle, as run_bench does
    half = len(epochs) // 2
    warm.load(u for ep in epochs[:half] for u in ep)
    assert _drive(warm, epochs[half:]) == expected[half:]


@pytest.mark.parametrize("query", QUERY_NAMES)
def test_ivmflow_matches_oracle(query: str) -> None:
    wl = _tiny(query, seed=13)
    epochs = wl.epochs(17)
    expected = oracle_deltas(bench_cq(query, wl.threshold), epochs)
    assert _drive(run_bench.make_system("ivmflow", wl), epochs) == expected


def test_digest_is_order_independent() -> None:
    a = [(1, (1, 2)), (-2, (3, 4))]
    assert run_bench.digest(a) == run_bench.digest(list(reversed(a)))
    assert run_bench.digest(a) != run_bench.digest([(1, (1, 2)), (2, (3, 4))])


def test_mismatch_is_reported() -> None:
    wl = _tiny("star_count")
    epochs = wl.epochs(20)
    good = run_bench.run_system("scp", wl, epochs)
    bad = run_bench.run_system("scp", wl, epochs)
    bad.digests[3] = (0, 0)
    assert run_bench.first_mismatch(good, bad) == 3


def test_quick_run_writes_results(tmp_path: Path) -> None:
    assert run_bench.main(["--quick", "--edges", "400", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "crown_local_quick.json").read_text())
    assert (tmp_path / "crown_local_quick.png").stat().st_size > 0
    seen = {(r["query"], r["system"]) for r in doc["rows"]}
    assert seen == {(q, s) for q in QUERY_NAMES for s in run_bench.SYSTEMS}
    for r in doc["rows"]:
        assert r["updates"] > 0 and r["seconds"] >= 0
    assert all(r["ivmflow_over_scp"] is not None for r in doc["ratios"])
