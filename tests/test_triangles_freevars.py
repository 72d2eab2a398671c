"""Triangle queries with one and two free variables and the double-partitioned count
(issue 6): DuckDB agreement on random streams with deletes and random epoch sizes for
every variant x eps in {0, 1/4, 1/2, 3/4, 1} x {R,S,T form, self-join form}, forced
minor and major rebalancing on a stream that flips a value between heavy and light,
the enumeration primitives (union, hop iterators), parallelism, explain and errors."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import DuckDBOracle, Row, accumulate, check_stream, normalise_rows
from strategies import random_stream
from test_triangles import (
    EPS,
    G_WHERE,
    RST,
    RST_WHERE,
    TRIANGLE_OPS,
    G,
    brute_triangles,
    flip_stream,
    router_invariants,
    valid_updates,
)

from core.errors import UnsupportedQueryError
from core.records import Record, Update
from dataflow.api import View, compile_query
from dataflow.cli import main
from operators.hop import EOF, Hop, HopUnion, SetIter, Union, drain
from operators.state import DictState
from operators.triangle_freevars import TriangleBinary, TriangleCountDouble, TriangleUnary

W, GW = RST_WHERE, G_WHERE

# name -> (sql, partitioning)
RST_QUERIES: dict[str, tuple[str, str]] = {
    "binary": (f"SELECT R.a, S.b {W}", "single"),
    # the pair on S in reverse order, JOIN ... ON, a filter, aliases
    "binary_s": ("SELECT S.c AS x, S.b AS y FROM R JOIN S ON R.b = S.b JOIN T ON S.c = T.c "
                 "WHERE T.a = R.a AND R.a <> 3", "single"),
    "binary_distinct": (f"SELECT DISTINCT T.a, T.c {W}", "single"),
    "binary_group": (f"SELECT S.b, R.a, COUNT(*) AS n {W} GROUP BY R.a, S.b", "single"),
    "unary": (f"SELECT S.c {W}", "single"),
    "unary_distinct": (f"SELECT DISTINCT R.b {W}", "single"),
    "unary_group": (f"SELECT COUNT(*) AS n, T.a {W} GROUP BY T.a", "single"),
    "count_double": (f"SELECT COUNT(*) {W}", "double"),
    "listing_group": (f"SELECT R.a, S.b, T.c, COUNT(*) {W} GROUP BY T.c, R.a, S.b", "single"),
}
G_QUERIES: dict[str, tuple[str, str]] = {
    "self_binary": (f"SELECT g2.src, g2.dst {GW}", "single"),
    "self_binary_distinct": (f"SELECT DISTINCT g1.dst, g1.src {GW}", "single"),
    "self_binary_group": (f"SELECT g3.dst, g1.dst, COUNT(*) {GW} GROUP BY g3.dst, g1.dst",
                          "single"),
    "self_unary": (f"SELECT g1.dst {GW} AND g2.src <> 4", "single"),
    "self_unary_distinct": (f"SELECT DISTINCT g2.dst {GW}", "single"),
    "self_unary_group": (f"SELECT g3.src, COUNT(*) {GW} GROUP BY g3.src", "single"),
    "self_count_double": (f"SELECT COUNT(*) {GW}", "double"),
}


def _query(name: str) -> tuple[str, str]:
    if name in RST_QUERIES:
        sql, part = RST_QUERIES[name]
        return RST + sql, part
    sql, part = G_QUERIES[name]
    return G + sql, part


def check_query(
    name: str, records: Sequence[Record], eps: float, parallelism: int = 1,
    invariants: bool = True,
) -> View:
    """Query ``name`` against DuckDB (:func:`oracle.check_stream`), the routers'
    invariants after every update."""
    sql, part = _query(name)
    view = compile_query(sql, eps=eps, triangle_partitioning=part).maintain(parallelism)
    return check_stream(view, sql, records, label=(name, eps), check_updates=True,
                        check=router_invariants if invariants else None)


# -- DuckDB agreement ----------------------------------------------------------------
@pytest.mark.parametrize("eps", EPS)
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 10**6), dom=st.sampled_from([3, 5, 8]), epoch=st.integers(3, 25))
def test_rst_variants_agree_with_duckdb(eps: float, seed: int, dom: int, epoch: int) -> None:
    rng = random.Random(seed)
    for name in RST_QUERIES:
        check_query(name, random_stream(rng, ["R", "S", "T"], 70, dom, epoch), eps)


@pytest.mark.parametrize("eps", EPS)
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 10**6), dom=st.sampled_from([3, 6]), epoch=st.integers(3, 25))
def test_self_join_variants_agree_with_duckdb(eps: float, seed: int, dom: int, epoch: int) -> None:
    rng = random.Random(seed)
    for name in G_QUERIES:
        check_query(name, random_stream(rng, ["G"], 60, dom, epoch), eps)


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("name", ["binary", "unary_group", "count_double",
                                  "self_binary_group", "self_unary", "self_count_double"])
def test_forced_minor_and_major_rebalancing(name: str, eps: float) -> None:
    """Value 0 crosses the thresholds again and again (in both columns for the
    self-join's copies, so both letters of the double partitions flip)."""
    relations = ["G"] if name.startswith("self") else ["R", "S", "T"]
    view = check_query(name, list(flip_stream(relations, rounds=4)), eps)
    stats = view.engines[0].router.stats  # type: ignore[union-attr]
    assert stats["major"] >= 6, stats  # N doubled from 1 to 128 (or 256)
    if eps in (0.0, 1.0):
        assert stats["minor"] == 0, stats  # classical IVM: no class ever changes
    elif eps < 0.75:
        assert stats["minor"] >= 8 and stats["moved"] >= stats["minor"], stats


@pytest.mark.parametrize("eps", [0.0, 1.0])
@pytest.mark.parametrize("name", ["binary", "unary", "count_double"])
def test_eps_extremes_are_classical_ivm(name: str, eps: float) -> None:
    """eps = 0: every tuple in the all-heavy part; eps = 1: in the all-light part, so
    only the HHH (LLL) view is ever non-empty (docs/algorithms.md)."""
    view = check_query(name, random_stream(random.Random(3), ["R", "S", "T"], 120, 5, 10), eps)
    router = view.engines[0].router  # type: ignore[union-attr]
    letter = "H" if eps == 0.0 else "L"
    for rel, parts in router.parts.items():
        assert sum(len(b) for b in parts.values()) == sum(
            len(b) for label, b in parts.items() if set(label) == {letter}
        ) > 0, rel


@pytest.mark.parametrize("parallelism", [2, 4, 8])
@pytest.mark.parametrize("name", ["binary_distinct", "unary_group", "count_double",
                                  "self_binary"])
def test_parallelism_agrees_with_duckdb(name: str, parallelism: int) -> None:
    relations = ["G"] if name.startswith("self") else ["R", "S", "T"]
    stream = random_stream(random.Random(parallelism), relations, 120, 6, 13)
    view = check_query(name, stream, 0.5, parallelism, invariants=False)
    assert len(view.engines) > 1


# -- the operators directly ------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(eps=st.sampled_from(EPS), ops=TRIANGLE_OPS)
def test_operators_match_brute_force(
    eps: float, ops: list[tuple[int, int, int, int, bool]]
) -> None:
    """After every single update: collected changes, full enumeration (each key once,
    through the union and hop iterators) and the partition invariants."""
    binary, unary = TriangleBinary(DictState(), eps), TriangleUnary(DictState(), eps)
    double = TriangleCountDouble(DictState(), eps)
    got2: Counter[Any] = Counter()
    got1: Counter[Any] = Counter()
    for i, t, m, rels in valid_updates(ops):
        for op in (binary, unary, double):
            op.update(i, t, m)
        got2.update(binary.take_delta())
        got1.update(unary.take_delta())
        double.take_delta()
        exp2: Counter[Any] = Counter()
        exp1: Counter[Any] = Counter()
        for (a, b, _), n in brute_triangles(rels).items():
            exp2[(a, b)] += n
            exp1[a] += n
        assert +got2 == exp2 and +got1 == exp1
        for op, exp in ((binary, exp2), (unary, exp1)):
            keys = [k for k, _ in op.enumerate()]
            assert len(keys) == len(set(keys))
            assert Counter(op.full()) == exp
            op.router.check_invariants()
        assert double.count == sum(exp1.values()) == double.recount()
        double.router.check_invariants()


@settings(max_examples=60, deadline=None)
@given(
    buckets=st.dictionaries(st.integers(0, 5), st.sets(st.integers(0, 12), max_size=8),
                            max_size=5),
    extra=st.lists(st.sets(st.integers(0, 12), max_size=6), max_size=3),
)
def test_union_and_hop_iterators_emit_each_element_once(
    buckets: dict[int, set[int]], extra: list[set[int]]
) -> None:
    where: dict[int, list[int]] = {}
    for i, elems in buckets.items():
        for x in elems:
            where.setdefault(x, []).append(i)
    hop = HopUnion({i: sorted(e) for i, e in buckets.items()}, lambda x: where.get(x, []))
    it = Union([SetIter(dict.fromkeys(e)) for e in extra] + [hop])
    out = list(drain(it))
    expected = set().union(*buckets.values(), *extra)
    assert len(out) == len(set(out)) and set(out) == expected
    assert it.next() is EOF


def test_hop_iterator_skips_excluded_ranges() -> None:
    h = Hop([1, 2, 3, 4, 5])
    for x in (2, 3, 5, 9):
        h.exclude(x)
    assert list(iter(h.next_hop, EOF)) == [1, 4]
    h.exclude(1)
    h.exclude(4)
    assert h.is_empty()


# -- double partitioning: space ----------------------------------------------------------
def test_double_partitioning_keeps_smaller_views_on_a_skewed_graph() -> None:
    """Three hubs -> 150 leaves each -> 3 sinks each (in-degree 3) -> a hub: single
    partitioning's views join the hubs' heavy rows with the leaves' light rows (one
    entry per hub and sink), the double partition only pairs heavy on both of a view's
    variables, and no sink is heavy. Both counts agree."""
    edges = [(h, 10 + 150 * h + j) for h in range(3) for j in range(150)]
    edges += [(10 + j, 1000 + (j + k) % 450) for j in range(450) for k in range(3)]
    edges += [(1000 + s, s % 3) for s in range(450)]
    sizes = {}
    counts = {}
    for part in ("single", "double"):
        view = compile_query(G + f"SELECT COUNT(*) {GW}", eps=0.5,
                             triangle_partitioning=part).maintain()
        for e in edges:
            view.apply(Update("+", "G", e, 1))
        view.end_epoch()  # (the engine sees the epoch's netted input at its close)
        op = view.engines[0].op  # type: ignore[union-attr]
        vs = op.vs if part == "double" else op.views
        sizes[part] = sum(len(v) for v in vs)
        counts[part] = view.snapshot()
    assert counts["single"] == counts["double"] != [(1, (0,))]
    assert sizes["double"] * 10 < sizes["single"], sizes


# -- compile, explain, CLI -----------------------------------------------------------
def test_explain_shows_views_partitions_and_exponents() -> None:
    text = compile_query(RST + RST_QUERIES["binary"][0], eps=0.25).explain()
    assert "binary triangle query" in text and "S = S on B,C" in text
    assert "R = R on A (a)" in text and "hop iterator" in text
    assert "update: O(N^0.75)" in text and "delay:  O(N^0.25)" in text
    assert "space:  O(N^1.25)" in text
    text = compile_query(G + G_QUERIES["self_unary"][0], eps=0.25).explain(parallelism=4)
    assert "unary triangle query" in text and "R = g1 on A,B" in text
    assert "delay:  O(N^0.5)" in text and "4 partitions" in text
    for eps, space in ((0.25, "1.25"), (0.5, "1"), (0.75, "1")):
        text = compile_query(RST + f"SELECT COUNT(*) {W}", eps=eps,
                             triangle_partitioning="double").explain()
        assert f"space:  O(N^{space}) (O(N^max(1, min(1+eps, 2-2eps))), double" in text


@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        (f"SELECT R.a, SUM(S.c) {W} GROUP BY R.a", "SUM"),
        (f"SELECT R.a, COUNT(S.c) {W} GROUP BY R.a", r"COUNT\(column\)"),
        (f"SELECT R.a, AVG(S.c) {W} GROUP BY R.a", "AVG"),
        (f"SELECT COUNT(*) {W} GROUP BY R.a", "GROUP BY a variable that is not in the SELECT"),
        (f"SELECT R.a, COUNT(*) {W} GROUP BY R.a, S.b", "GROUP BY a variable"),
        (f"SELECT R.a {W} GROUP BY R.a", "GROUP BY without COUNT"),
    ],
)
def test_unsupported_outputs_name_the_construct(sql: str, construct: str) -> None:
    with pytest.raises(UnsupportedQueryError, match=construct):
        compile_query(RST + sql)


def test_double_partitioning_is_for_the_count_only() -> None:
    with pytest.raises(UnsupportedQueryError, match=r"COUNT\(\*\) only"):
        compile_query(RST + RST_QUERIES["binary"][0], triangle_partitioning="double")
    with pytest.raises(UnsupportedQueryError, match="only triangle queries"):
        compile_query(G + "SELECT g1.src FROM G g1", triangle_partitioning="double")


def test_cli_partitioning_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = tmp_path / "q.sql"
    sql.write_text(G + f"\nSELECT COUNT(*) {GW};\n")
    updates = tmp_path / "u.csv"
    updates.write_text("+,G,1,2\n+,G,2,3\n+,G,3,1\n*\n-,G,3,1\n")
    outs = {}
    for part in ("single", "double"):
        out = tmp_path / f"{part}.csv"
        assert main(["run", str(sql), "--updates", str(updates), "--partitioning", part,
                     "--eps", "0.75", "--deltas", str(out), "-q"]) == 0
        outs[part] = out.read_text()
    assert outs["single"] == outs["double"]
    assert outs["double"].splitlines()[1:] == ["1,1,3", "2,1,0", "2,-1,3"]
    assert main(["explain", str(sql), "--partitioning", "double"]) == 0
    assert "partitioning (double" in capsys.readouterr().out


def test_bench_quick_path_runs_and_every_system_agrees(tmp_path: Path) -> None:
    """bench/triangle_free_bench.py --quick in-process: it fails (SystemExit) when two
    systems of a query end with different results; no timing assertions."""
    import sys

    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:  # bench/ is not an installed package
        sys.path.insert(0, root)
    from bench import triangle_free_bench as tfb

    doc = tfb.main(["--quick", "--no-plot", "--out-dir", str(tmp_path)])
    assert (tmp_path / "triangle_free_quick.json").exists()
    assert {r["system"] for r in doc["results"]} == set(tfb.SYSTEMS)
    assert all(r["enum_rows"] > 0 for r in doc["results"] if r["query"] != "count")


@pytest.mark.parametrize(
    ("select", "part"),
    [(f"SELECT DISTINCT g3.src {GW}", "single"), (f"SELECT COUNT(*) {GW}", "double"),
     (f"SELECT g2.dst, g3.src {GW} AND g1.src IS NOT NULL", "single")],
)
def test_text_values_with_nulls_on_three_partitions(select: str, part: str) -> None:
    """NULL never joins (SQL): the triangle inputs drop it; TEXT values hash the same
    in every partition."""
    ddl = "CREATE TABLE G(src TEXT, dst TEXT);"
    rng = random.Random(5)
    view = compile_query(ddl + select, triangle_partitioning=part).maintain(3)
    oracle = DuckDBOracle(ddl + select)
    acc: Counter[Row] = Counter()
    live: Counter[tuple[str | None, str | None]] = Counter()
    values = ["x", "y", "z", None, "w"]
    for k in range(200):
        if live and rng.random() < 0.3:
            t = rng.choice(sorted(live, key=repr))
            live[t] -= 1
            live += Counter()  # drop zeros
            u = Update("-", "G", t, 1)
        else:
            t = (rng.choice(values), rng.choice(values))
            live[t] += 1
            u = Update("+", "G", t, 1)
        view.apply(u)
        oracle.apply(u)
        if k % 17 == 0:
            accumulate(acc, view.end_epoch())
            assert acc == oracle.result()
    assert normalise_rows(view.snapshot()) == oracle.result()


@pytest.mark.parametrize("name", ["binary_distinct", "unary_group", "count_double", "unary",
                                  "self_binary_group"])
def test_partitioned_protocol_with_state_round_trips(name: str) -> None:
    """The Spark/Flink path without a JVM: tag updates to partitions, run each
    partition's TriangleEngine in batches of 40 rows with its state dumped and restored
    in between (mid-epoch too), merge: the same per-epoch deltas as the local view."""
    from core.epochs import EpochCursor
    from dataflow.distributed.partitions import (
        PartitionTask,
        WorkerPlan,
        merge_outputs,
        tag_records,
    )

    sql, part = _query(name)
    relations = ["G"] if name.startswith("self") else ["R", "S", "T"]
    records = random_stream(random.Random(11), relations, 150, 5, 17)
    local = compile_query(sql, eps=0.25, triangle_partitioning=part)
    reference = [sorted(d.rows) for d in local.run(records)]
    query, layout = WorkerPlan.of(local, 4).compiled()
    assert query.eps == 0.25 and query.kind.worker_options() == (0.25, part)
    rows = tag_records(layout, EpochCursor().number(records, final=True))
    out = []
    for p in range(layout.partitions):
        mine = [r for r in rows if r.partition == p]
        blob = None
        for lo in range(0, len(mine), 40):
            task = PartitionTask(query, layout, blob)
            out += task.process(mine[lo:lo + 40])
            blob = task.dump()
    merged = merge_outputs(out)
    got = [sorted(merged.get(("delta", e), [])) for e in range(1, len(reference) + 1)]
    assert got == reference
    assert layout.partitions > 1 or name == "count_double"  # COUNT(*): no output key
