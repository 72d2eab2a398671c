"""Compact buckets (operators/nodemaps.py): a join node's index, live index or group that
holds one tuple stores it bare, 2 to SMALL_BUCKET in a list, more in a set (a dict
bucket, tuple -> multiplicity: 2 to SMALL_BUCKET of one copy each in a list, else a
dict). The generated writes keep
a bucket's members exactly (None, 0 and '' among them: falsy members are members, None
is never bare), and whole queries whose keys go from one tuple to several and back, with
NULLs and falsy values in the joined columns and multiplicities of two, equal DuckDB
after every epoch, on the interpreted and the compiled build.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import bag_stream, check_stream

from core.codegen import SMALL_BUCKET, define, set_add, set_discard
from core.native import native_available
from dataflow.api import compile_query
from operators.nodecode import bucket_old_lines, bucket_put_lines, bucket_remove_lines
from operators.nodemaps import CONTAINERS, count_in, counted, members

MEMBERS = st.sampled_from([None, 0, "", 1, (1, 2), (1, None), ("", 0),
                           *range(2, SMALL_BUCKET + 6)])
"""More members than a list bucket holds, falsy ones and None among them."""


def _assert_no_spare_room(bucket: Any) -> None:
    """A list bucket that just grew holds no room for more (an appended list of 3 to 8
    has room for 8: 32 bytes more for 4 rows): its size is an exact list's."""
    if isinstance(bucket, list):
        assert sys.getsizeof(bucket) == sys.getsizeof([None] * len(bucket)), len(bucket)


def _bucket_ops() -> tuple[Callable[[Any, Any], None], Callable[[Any, Any], None], dict[Any, Any]]:
    table: dict[Any, Any] = {}
    text = "\n".join(["def add(k, t):", *set_add("    ", "table", "k", "b"),
                      "def discard(k, t):", *set_discard("    ", "table", "k", "b")])
    env = define(text, "<test buckets>", {"table": table})
    return env["add"], env["discard"], table


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2), MEMBERS), max_size=120))
def test_set_buckets_hold_their_members_exactly(ops: list[tuple[bool, int, Any]]) -> None:
    add, discard, table = _bucket_ops()
    truth: dict[int, set[Any]] = {}
    for is_add, key, member in ops:
        have = truth.setdefault(key, set())
        if is_add and member not in have:
            add(key, member)
            have.add(member)
            _assert_no_spare_room(table[key])
        elif not is_add and member in have:
            discard(key, member)
            have.discard(member)
        for k, expected in truth.items():
            if not expected:
                assert k not in table
                continue
            stored = table[k]
            assert set(members(stored)) == expected
            # one member, not None: bare; else a container: a list up to SMALL_BUCKET
            bare = len(expected) == 1 and None not in expected
            assert isinstance(stored, CONTAINERS) != bare, (stored, expected)
            if isinstance(stored, list):
                assert 2 <= len(stored) <= SMALL_BUCKET, stored
            elif len(expected) > SMALL_BUCKET:
                assert isinstance(stored, set), stored


def _dict_bucket_ops() -> tuple[Callable[[Any, Any, int], None], dict[Any, Any]]:
    table: dict[Any, Any] = {}
    text = "\n".join(["def change(k, t, dm):", "    b = table.get(k)",
                      *bucket_old_lines("    ", "b"), "    new = old + dm", "    if new:",
                      *bucket_put_lines("        ", "table", "k", "b"), "    else:",
                      *bucket_remove_lines("        ", "table", "k", "b")])
    env = define(text, "<test dict buckets>", {"table": table})
    return env["change"], table


OLD_BUCKETS = st.dictionaries(st.integers(0, 2), st.dictionaries(
    MEMBERS, st.sampled_from([1, 1, 2]), min_size=1, max_size=SMALL_BUCKET + 2))
"""Buckets as state written before small dict buckets were lists (a dict for every
bucket of two tuples or more, and for one of several copies): a runner's checkpoint
of then restores them as they were."""


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), MEMBERS, st.sampled_from([1, 1, 1, 2, -1, -1])),
                max_size=150), st.one_of(st.just({}), OLD_BUCKETS))
def test_dict_buckets_hold_their_multiplicities_exactly(
        ops: list[tuple[int, Any, int]], before: dict[int, dict[Any, int]]) -> None:
    """A dict bucket (a node's first index, a top leaf's group: tuple -> multiplicity)
    written by the generated code reads back its multiplicities exactly: bare for one
    tuple of one copy (not None), a list of 2 to SMALL_BUCKET distinct tuples of one
    copy each, else a dict; absent when empty. Buckets restored as dicts from state
    written before the lists (``before``) read and change as exactly."""
    change, table = _dict_bucket_ops()
    truth: dict[int, dict[Any, int]] = {k: dict(v) for k, v in before.items()}
    for k, bucket in before.items():
        (member, m), = bucket.items() if len(bucket) == 1 else [(None, 0)]
        table[k] = member if m == 1 and member is not None else dict(bucket)
    for key, member, dm in ops:
        have = truth.setdefault(key, {})
        if have.get(member, 0) + dm < 0:
            continue
        change(key, member, dm)
        if dm > 0:
            _assert_no_spare_room(table[key])
        have[member] = have.get(member, 0) + dm
        if not have[member]:
            del have[member]
        for k, expected in truth.items():
            if not expected:
                assert k not in table
                continue
            stored = table[k]
            assert dict(counted(stored)) == expected, (stored, expected)
            assert all(count_in(stored, t) == m for t, m in expected.items())
            if isinstance(stored, list):
                assert 2 <= len(stored) <= SMALL_BUCKET and len(set(stored)) == len(stored)
            elif not isinstance(stored, dict):
                assert expected == {stored: 1} and stored is not None


def test_a_bucket_goes_bare_list_set_and_back() -> None:
    add, discard, table = _bucket_ops()
    kinds = []
    top = SMALL_BUCKET + 2
    for t in range(top):
        add("k", t)
        kinds.append(type(table["k"]).__name__)
    add("k", 3)  # already there: nothing changes
    assert kinds == ["int"] + ["list"] * (SMALL_BUCKET - 1) + ["set"] * (top - SMALL_BUCKET)
    assert sorted(members(table["k"])) == list(range(top))
    shrinking = []
    for t in range(top - 1, -1, -1):
        discard("k", t)
        shrinking.append(type(table["k"]).__name__ if "k" in table else "-")
    # a set goes back to a list at half of SMALL_BUCKET, a list of one to the bare tuple
    assert shrinking == ["set"] * (top - 1 - SMALL_BUCKET // 2) \
        + ["list"] * (SMALL_BUCKET // 2 - 1) + ["int", "-"]


SQL = ("CREATE TABLE R(a INT); CREATE TABLE S(a INT, b TEXT); CREATE TABLE T(b TEXT, c INT);\n"
       "SELECT R.a, S.b, T.c FROM R, S, T WHERE R.a = S.a AND S.b = T.b")
AGG = ("CREATE TABLE R(a INT); CREATE TABLE S(a INT, b TEXT); CREATE TABLE T(b TEXT, c INT);\n"
       "SELECT S.b, COUNT(*), SUM(T.c) FROM R, S, T WHERE R.a = S.a AND S.b = T.b GROUP BY S.b")


def _row(table: str, draw: Any) -> tuple[Any, ...]:
    a = draw(st.sampled_from([None, 0, 1, 2]))
    b = draw(st.sampled_from([None, "", "x"]))
    c = draw(st.sampled_from([None, 0, 1]))
    return {"R": (a,), "S": (a, b), "T": (b, c)}[table]


def _wide_row(table: str, draw: Any) -> tuple[Any, ...]:
    # (two join values, a dozen b's: a key's bucket grows past a few and back)
    a = draw(st.sampled_from([0, 1, None]))
    b = draw(st.sampled_from([None, "", *"bcdefghijkl"]))
    c = draw(st.sampled_from([None, 0, 1]))
    return {"R": (a,), "S": (a, b), "T": (b, c)}[table]


@st.composite
def _streams(draw: Any) -> list[Any]:
    return bag_stream(draw, "RSST", _row, epochs=6, per_epoch=14)


@st.composite
def _wide_streams(draw: Any) -> list[Any]:
    return bag_stream(draw, "RSSSTT", _wide_row, epochs=5, per_epoch=30)


BUILDS = [False, pytest.param(True, marks=pytest.mark.skipif(
    native_available() is not None, reason=f"no native build: {native_available()}"))]


@pytest.mark.parametrize("native", BUILDS, ids=["interpreted", "native"])
@pytest.mark.parametrize("sql", [SQL, AGG], ids=["join", "aggregate"])
@settings(max_examples=40, deadline=None)
@given(records=_streams())
def test_queries_over_one_and_many_tuples_per_key_equal_duckdb(
        sql: str, native: bool, records: list[Any]) -> None:
    view = compile_query(sql).maintain(native=native)
    check_stream(view, sql, records)


@pytest.mark.parametrize("native", BUILDS, ids=["interpreted", "native"])
@pytest.mark.parametrize("sql", [SQL, AGG], ids=["join", "aggregate"])
@settings(max_examples=25, deadline=None)
@given(records=_wide_streams())
def test_queries_whose_buckets_pass_the_small_bucket_bound_equal_duckdb(
        sql: str, native: bool, records: list[Any]) -> None:
    view = compile_query(sql).maintain(native=native)
    check_stream(view, sql, records)


@pytest.mark.parametrize("native", BUILDS, ids=["interpreted", "native"])
@pytest.mark.parametrize("sql", [SQL, AGG], ids=["join", "aggregate"])
def test_a_key_past_the_small_bucket_bound_and_back_equals_duckdb(sql: str,
                                                                  native: bool) -> None:
    """One join value's S rows grow one at a time to SMALL_BUCKET + 3 (a list, then a
    set; a second copy of one makes the first index's bucket a dict) and shrink to
    none; R's copies change between (every S row of the value is walked again), and T's:
    DuckDB's answer after every epoch, compiled and interpreted."""
    from core.records import EPOCH_END, Update

    n = SMALL_BUCKET + 3
    bs = [f"b{i}" for i in range(n)]
    records: list[Any] = [Update("+", "R", (1,)), Update("+", "R", (1,))]
    for i, b in enumerate(bs):
        records += [Update("+", "S", (1, b)), Update("+", "T", (b, i % 3))]
        if i in (SMALL_BUCKET - 1, SMALL_BUCKET, SMALL_BUCKET + 1):
            records.append(EPOCH_END)
    # (R's copies change: every S row of the key is walked again, from its bucket)
    records += [Update("+", "R", (1,)), EPOCH_END, Update("-", "R", (1,), 2), EPOCH_END,
                Update("+", "S", (1, bs[5])), EPOCH_END, Update("-", "T", (bs[2], 2)),
                Update("+", "R", (1,)), EPOCH_END]
    for i, b in enumerate(reversed(bs)):
        records.append(Update("-", "S", (1, b), 2 if b == bs[5] else 1))
        if i % 7 == 0:
            records.append(EPOCH_END)
    records.append(EPOCH_END)
    check_stream(compile_query(sql).maintain(native=native), sql, records)


SHARED_DDL = "CREATE TABLE R(a INT, c INT); CREATE TABLE S(a INT, b TEXT);\n"
SHARED = [SHARED_DDL + "SELECT S.b, SUM(R.c), SUM(R2.c) FROM S, R, R AS R2 "
                       "WHERE R.a = S.a AND R2.a = S.a GROUP BY S.b",
          SHARED_DDL + "SELECT S.b, COUNT(*) FROM S, R, (SELECT R2.a, COUNT(*) AS n "
                       "FROM R AS R2 GROUP BY R2.a) AS t WHERE R.a = S.a AND t.a = S.a "
                       "AND t.n > 1 GROUP BY S.b"]
"""A node whose two children join it on one key: they read one index (the first
child's, whose buckets hold the multiplicities)."""


def _shared_row(table: str, draw: Any) -> tuple[Any, ...]:
    a = draw(st.sampled_from([None, 0, 1, 2]))
    return {"R": (a, draw(st.sampled_from([None, 0, 1]))),
            "S": (a, draw(st.sampled_from([None, "", "x", "y"])))}[table]


@st.composite
def _shared_streams(draw: Any) -> list[Any]:
    return bag_stream(draw, "RRS", _shared_row, epochs=6, per_epoch=16)


def _shared_indexes(view: Any) -> int:
    views = getattr(view, "views", None)
    live = [v for _, v in views] + [view.outer] if views else [view]
    return sum(1 for v in live for engine in v.engines for node in engine.nodes
               for shared in node.index_shared if shared is not None)


@pytest.mark.parametrize("native", BUILDS, ids=["interpreted", "native"])
@pytest.mark.parametrize("sql", SHARED, ids=["two-sums", "count-view"])
@settings(max_examples=30, deadline=None)
@given(records=_shared_streams())
def test_children_on_one_key_share_one_index_and_equal_duckdb(
        sql: str, native: bool, records: list[Any]) -> None:
    view = compile_query(sql).maintain(native=native)
    assert _shared_indexes(view) == 1
    check_stream(view, sql, records)
