"""Count views whose counts live in their reader (dataflow/circuit/heldcount.py): the
``EXISTS``/``NOT EXISTS`` correlated by ``<>`` of TPC-H Q21 becomes counts per key and
per (key, value), which the query keeps anyway; the view keeps only an epoch's changed
groups. Equal to DuckDB after every epoch of random streams with deletes, NULLs and
multiplicities, interpreted and compiled, handing the views' changes on every few
updates; and record for record what the views keeping their own counts produce."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import bag_stream, check_stream, local_deltas

from core.native import native_available
from core.records import EPOCH_END, Record, Update
from core.schema import Row
from dataflow.api import compile_query
from dataflow.circuit.heldcount import HeldCount
from dataflow.circuit.views import DagView

DDL = "CREATE TABLE l(o INT, s INT, late INT, q INT); CREATE TABLE t(s INT, name VARCHAR); "

QUERIES = [
    # TPC-H Q21's form: late lines of a multi-supplier order, no other supplier late
    "SELECT t.name, COUNT(*) AS numwait FROM t, l l1 WHERE t.s = l1.s AND l1.late = 1 "
    "AND l1.o IS NOT NULL AND EXISTS (SELECT * FROM l l2 WHERE l2.o = l1.o AND "
    "l2.s <> l1.s) AND NOT EXISTS (SELECT * FROM l l3 WHERE l3.o = l1.o AND "
    "l3.s <> l1.s AND l3.late = 1) GROUP BY t.name",
    # the rows themselves, a filter on the outer side only
    "SELECT l1.o, l1.s, l1.q FROM l l1 WHERE l1.q > 1 AND EXISTS "
    "(SELECT * FROM l l2 WHERE l2.o = l1.o AND l2.s <> l1.s)",
    # NOT EXISTS alone, the inner side filtered as the outer
    "SELECT l1.s, l1.late FROM l l1 WHERE l1.o IS NOT NULL AND l1.s IS NOT NULL "
    "AND l1.q >= 2 AND NOT EXISTS (SELECT * FROM l l2 WHERE l2.o = l1.o AND "
    "l2.s <> l1.s AND l2.q >= 2)",
]
SUMS = ("SELECT l1.s, SUM(l1.q) FROM l l1 WHERE l1.o IS NOT NULL AND l1.s IS NOT NULL "
        "AND NOT EXISTS (SELECT * FROM l l2 WHERE l2.o = l1.o AND l2.s <> l1.s) "
        "GROUP BY l1.s")
"""A query of sums: its nodes hold sums of rows, not the views' rows (the views keep
their counts)."""
NATIVE = [False] + ([True] if native_available() is None else [])


def _value(table: str, draw: st.DrawFn) -> Row:
    if table == "t":
        return (draw(st.one_of(st.none(), st.integers(0, 3))),
                draw(st.sampled_from(["a", "b", "c"])))
    return (draw(st.one_of(st.none(), st.integers(0, 3))),
            draw(st.one_of(st.none(), st.integers(0, 3))),
            draw(st.integers(0, 1)), draw(st.integers(0, 3)))


@st.composite
def streams(draw: st.DrawFn) -> list[Record]:
    """Inserts and deletes of rows present (1 or 2 copies), ``l`` drawn three times as
    often as ``t``."""
    return bag_stream(draw, "lllt", _value, epochs=6, per_epoch=14)


def _view(sql: str, native: bool, shared: bool = True, feed: int | None = None) -> DagView:
    q = compile_query(sql)
    view = DagView(q, 1, None, native, None, shared_counts=shared)  # type: ignore[arg-type]
    if feed is not None:
        view.feed_rows, view.feed_check = 0, feed
    return view


def test_q21_form_keeps_no_counts_in_its_views() -> None:
    """Each count view of Q21's form is a HeldCount with no map of its own; the query's
    nodes hold the counts, one row per group."""
    view = _view(DDL + QUERIES[0], False)
    assert [type(node).__name__ for _, node in view.views] == ["HeldCount"] * 4
    assert all(node.state_maps() == [] for _, node in view.views)
    for row in [(1, 1, 1, 0), (1, 2, 0, 0), (1, 2, 0, 0), (2, 3, 1, 0)]:
        view.apply(Update("+", "l", row))
    view.end_epoch()
    assert sum(node.state_entries() for _, node in view.views) == 0  # (closed: none held)
    unshared = _view(DDL + QUERIES[0], False, shared=False)
    assert [type(node).__name__ for _, node in unshared.views] == ["View"] * 4


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=streams(), feed=st.sampled_from([None, 1, 2, 5]))
def test_held_counts_equal_duckdb_every_epoch(query: str, native: bool,
                                              records: list[Record], feed: int | None) -> None:
    """After every epoch the query's deltas sum to DuckDB's answer, whether the views
    hand their changes on at the epoch's end or every ``feed`` updates (each handing on
    reads the counts before from the reader again)."""
    sql = DDL + query
    view = _view(sql, native, feed=feed)
    assert any(isinstance(node, HeldCount) for _, node in view.views)
    check_stream(view, sql, records, label=(query, native, feed))  # type: ignore[arg-type]


@pytest.mark.parametrize("native", NATIVE)
def test_held_counts_match_own_counts_record_for_record(native: bool) -> None:
    """A long random stream: every epoch's delta, and each view's snapshot, the same
    with the counts in the reader as with the views keeping their own."""
    rng = random.Random(7)
    held: dict[Row, int] = {}
    records: list[Record] = []
    for _ in range(40):
        for _ in range(rng.randrange(1, 60)):
            if held and rng.random() < 0.4:
                row = rng.choice(sorted(held, key=repr))
                records.append(Update("-", "l", row, 1))
                held[row] -= 1
                if not held[row]:
                    del held[row]
            else:
                row = (rng.randrange(12), rng.choice([None, *range(5)]), rng.randrange(2),
                       rng.randrange(4))
                records.append(Update("+", "l", row, 1))
                held[row] = held.get(row, 0) + 1
        records.append(Update("+", "t", (rng.randrange(5), rng.choice("ab")), 1))
        records.append(EPOCH_END)
    sql = DDL + QUERIES[0]
    shared, own = _view(sql, native, feed=3), _view(sql, native, shared=False)
    assert local_deltas(shared, records) == local_deltas(own, records)
    for (_, a), (_, b) in zip(shared.views, own.views, strict=True):
        assert isinstance(a, HeldCount)
        assert sorted(a.snapshot()) == sorted(b.snapshot())


def test_views_keep_their_counts_where_the_reader_does_not_hold_them() -> None:
    """Partitioned, the query's nodes are split: the views keep their own counts."""
    q = compile_query(DDL + QUERIES[1])
    view = q.maintain(parallelism=2)
    assert isinstance(view, DagView)
    assert not any(isinstance(node, HeldCount) for _, node in view.views)
    assert _view(DDL + QUERIES[1], False).views[0][1].__class__ is HeldCount


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=streams())
def test_views_of_a_query_of_sums_keep_their_counts(records: list[Record]) -> None:
    """Where the query's nodes hold sums, not rows, the count views keep their own
    counts, and the answer is DuckDB's."""
    sql = DDL + SUMS
    view = _view(sql, False, feed=2)
    assert [type(node).__name__ for _, node in view.views] == ["View", "View"]
    check_stream(view, sql, records, label=SUMS)  # type: ignore[arg-type]
