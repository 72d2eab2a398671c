"""CROWN's running example (the CROWN paper's Figure 3, states (a) to (d); docs/algorithms.md) as
known-answer tests of the semi-join counters, projections, live views and deltas."""

from __future__ import annotations

import pytest

from core.records import Update
from dataflow.api import View, compile_query
from operators.nodemaps import members

SQL = """
CREATE TABLE R1(x1 INT, x2 INT);
CREATE TABLE R2(x2 INT, x3 INT);
CREATE TABLE R3(x3 INT, x4 INT);
CREATE TABLE R4(x4 INT, x5 INT);
SELECT R1.x1, R1.x2, R2.x3, R3.x4
FROM R1, R2, R3, R4
WHERE R1.x2 = R2.x2 AND R2.x3 = R3.x3 AND R3.x4 = R4.x4;
"""

INITIAL = {
    "R1": [(1, 2), (2, 2), (3, 3)],
    "R2": [(1, 2), (2, 2), (4, 3), (1, 1), (2, 4), (1, 4)],
    "R3": [(1, 1), (2, 5), (3, 3), (1, 2), (4, 4)],
    "R4": [(1, 1), (2, 2), (3, 3), (4, 4)],
}


def node(view: View, name: str):  # noqa: ANN201 - test helper
    return next(n for n in view.engines[0].nodes if n.name == name)


def proj_counts(view: View, name: str) -> dict[object, int]:
    """Tuples per key of a top node's semi-join groups (compact buckets: a set, or one
    bare tuple)."""
    return {k: len(members(v)) for k, v in node(view, name).proj.items()}


@pytest.fixture()
def state_a() -> View:
    q = compile_query(SQL)
    view = q.maintain()
    for rel, rows in INITIAL.items():
        for row in rows:
            view.apply(Update("+", rel, row))
    return view


def test_tree_is_the_papers(state_a: View) -> None:
    assert state_a.query.plan.tree_text == "[x3](R2(R1), R3(R4))"


def test_state_a_views(state_a: View) -> None:
    view = state_a
    assert view.end_epoch().rows == ((1, (1, 2, 4, 4)), (1, (2, 2, 4, 4)))
    assert proj_counts(view, "sj_R1") == {2: 2, 3: 1}
    r2 = node(view, "sj_R2")
    # One child each: R2's and R3's counters are derived from the child's projection.
    assert {t: r2.support_count(t) for t in r2.base} == \
        {(1, 2): 0, (2, 2): 1, (4, 3): 0, (1, 1): 0, (2, 4): 1, (1, 4): 0}
    assert dict(r2.counter) == {}
    assert {t for g in r2.proj.values() for t in members(g)} == {(2, 2), (2, 4)}
    assert proj_counts(view, "sj_R2") == {4: 1, 2: 1}
    r3 = node(view, "sj_R3")
    assert {t: r3.support_count(t) for t in r3.base} == \
        {(1, 1): 1, (2, 5): 0, (3, 3): 1, (1, 2): 1, (4, 4): 1}
    assert proj_counts(view, "sj_R3") == {1: 2, 3: 1, 4: 1}
    # R4 enters as R4(x4) (x5 is projected away), all of it in its parent R3: it hangs
    # below the top part, and its projection is a count per key (no tuple groups).
    r4 = node(view, "sj_R4")
    assert not r4.top
    assert dict(r4.proj) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert dict(r4.counter) == {}  # a leaf keeps no counters
    root = node(view, "sj_gen0")
    # (the paper's counters, read from the children's projections: none stored)
    assert {k: root.support_count(k) for k in (1, 2, 3, 4, 5)} == \
        {1: 1, 2: 1, 3: 1, 4: 2, 5: 0}
    assert dict(root.counter) == {}
    assert set(members(root.proj[()])) == {4}
    assert set(root.live) == {4}
    assert set(node(view, "sj_R2").live) == {(2, 4)}
    assert view.snapshot() == [(1, (1, 2, 4, 4)), (1, (2, 2, 4, 4))]


def test_state_b_insert_into_r1(state_a: View) -> None:
    view = state_a
    view.end_epoch()
    view.apply(Update("+", "R1", (1, 1)))
    delta = view.end_epoch()
    assert delta.rows == ((1, (1, 1, 1, 1)), (1, (1, 1, 1, 2)), (1, (1, 1, 4, 4)))
    assert proj_counts(view, "sj_R1") == {2: 2, 3: 1, 1: 1}
    assert proj_counts(view, "sj_R2") == {4: 2, 2: 2, 1: 1}
    assert set(members(node(view, "sj_gen0").proj[()])) == {1, 4}
    # live views: R2 tuples with x3 in {1, 4}; R3 tuples with x3 in {1, 4}
    assert set(node(view, "sj_R2").live) == {(2, 4), (1, 4), (1, 1)}
    assert set(node(view, "sj_R3").live) == {(1, 1), (1, 2), (4, 4)}


def test_state_c_delete_from_r4(state_a: View) -> None:
    view = state_a
    view.apply(Update("+", "R1", (1, 1)))
    view.end_epoch()
    view.apply(Update("-", "R4", (1, 1)))
    delta = view.end_epoch()
    assert delta.rows == ((-1, (1, 1, 1, 1)),)
    r3 = node(view, "sj_R3")
    assert r3.support_count((1, 1)) == 0
    assert proj_counts(view, "sj_R3") == {1: 1, 3: 1, 4: 1}
    assert (1, 1) not in r3.live


def test_state_d_insert_witness_below(state_a: View) -> None:
    view = state_a
    view.apply(Update("+", "R1", (1, 1)))
    view.apply(Update("-", "R4", (1, 1)))
    view.end_epoch()
    view.apply(Update("+", "R1", (4, 1)))
    delta = view.end_epoch()
    assert proj_counts(view, "sj_R1")[1] == 2
    assert delta.rows == ((1, (4, 1, 1, 2)), (1, (4, 1, 4, 4)))


def test_per_update_epochs_sum_to_result(state_a: View) -> None:
    """Epoch size 1: the deltas of single updates add up to the result."""
    view = state_a
    total: dict[tuple[object, ...], int] = {}
    for m, row in view.end_epoch().rows:
        total[row] = total.get(row, 0) + m
    for u in [Update("+", "R1", (1, 1)), Update("-", "R4", (1, 1)), Update("+", "R1", (4, 1)),
              Update("-", "R2", (2, 4)), Update("+", "R3", (1, 1))]:
        view.apply(u)
        for m, row in view.end_epoch().rows:
            total[row] = total.get(row, 0) + m
    assert sorted((m, r) for r, m in total.items() if m) == view.snapshot()
