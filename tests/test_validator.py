"""The view's delete check (operators.input.BaseValidator). A relation with a FROM item
that takes its rows whole is checked against that item's node (its multiplicities),
not counted a second time; these tests hold the check to the plain count on random
streams of every query family and engine: the same deletes are refused (with nothing
changed), the same base tuples are reported (what checkpoints save), interpreted and
compiled."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from strategies import FAMILIES, SHAPES, RandomChooser, random_case, stream_case

from core.errors import InputError
from core.native import native_available
from core.records import EpochEnd, Record, Update
from dataflow.api import View, compile_query

OTHER_ENGINES = {
    "triangle": "CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT); "
                "CREATE TABLE T(c INT, a INT); "
                "SELECT R.a, R.b, S.c FROM R, S, T WHERE R.b = S.b AND S.c = T.c AND T.a = R.a;",
    "ghd": "CREATE TABLE G(src INT, dst INT); "
           "SELECT G1.src, G4.dst FROM G G1, G G2, G G3, G G4, G G5, G G6 "
           "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G1.src "
           "AND G3.src = G4.src AND G4.dst = G5.src AND G5.dst = G6.src AND G6.dst = G4.dst;",
    "hierarchical": "CREATE TABLE R(a INT, b INT); CREATE TABLE S(a INT, c INT); "
                    "SELECT R.a, R.b, S.c FROM R, S WHERE R.a = S.a;",
    "self-join-nulls": "CREATE TABLE G(src INT, dst INT); "
                       "SELECT G1.src, G2.dst FROM G G1, G G2 WHERE G1.dst = G2.src;",
}


def _key(rel: str, row: tuple[object, ...]) -> tuple[str, tuple[object, ...]]:
    return rel.lower(), row


def _absent(value: object, i: int) -> object:
    """A value of ``value``'s type that no generated stream holds."""
    if value is None:
        return None
    if isinstance(value, str):
        return f"absent-{i}"
    return type(value)(10**6 + i)  # type: ignore[call-arg]


def _feed(view: View, reference: View, records: list[Record], rng: random.Random) -> None:
    """Apply ``records`` to both views; on ``view`` also try refused deletes (one copy
    too many of a present row, an absent row) before some updates: each must raise
    and change nothing, so both views stay equal epoch by epoch."""
    have: Counter[tuple[str, tuple[object, ...]]] = Counter()
    for i, rec in enumerate(records):
        if isinstance(rec, EpochEnd):
            assert view.end_epoch().rows == reference.end_epoch().rows
            continue
        assert isinstance(rec, Update)
        if i % 3 == 0:
            present = sorted((k for k, m in have.items() if m > 0), key=repr)
            rel, row = rng.choice(present) if present else (rec.relation, rec.row)
            too_many = have[_key(rel, row)] + 1
            bad = [Update("-", rel, row, too_many)]
            absent = tuple(_absent(v, i) for v in row)
            if absent != row and not any(type(v) is bool for v in row):
                bad.append(Update("-", rel, absent))
            for bad_update in bad:
                with pytest.raises(InputError, match="a delete of at most"):
                    view.apply(bad_update)
        view.apply(rec)
        reference.apply(rec)
        have[_key(rec.relation, rec.row)] += rec.signed_mult
        got = Counter({_key(rel, row): m for rel, row, m in view.base_tuples()})
        assert got == +have, f"after {rec}"
    assert view.end_epoch().rows == reference.end_epoch().rows
    assert view.snapshot() == reference.snapshot()


def _check(sql: str, records: list[Record], rng: random.Random, native: bool) -> View:
    query = compile_query(sql)
    view = query.maintain(native=native)
    reference = query.maintain(parallelism=2)  # (several partitions: counts every row)
    assert not reference.validator.held
    _feed(view, reference, records, rng)
    return view


@pytest.mark.parametrize("family", FAMILIES)
def test_held_delete_check_matches_counting(family: str) -> None:
    held = 0
    for seed in range(8):
        rng = random.Random(f"validator-{family}-{seed}")
        case = random_case(rng, family, SHAPES[seed % len(SHAPES)])
        view = _check(case.sql, case.records, rng, native=False)
        held += bool(view.validator.held)
    assert held >= 4  # (most random queries take some relation whole)


@pytest.mark.parametrize("name", sorted(OTHER_ENGINES))
def test_held_delete_check_on_other_engines(name: str) -> None:
    sql = OTHER_ENGINES[name]
    for seed in range(4):
        rng = random.Random(f"validator-{name}-{seed}")
        case = stream_case(RandomChooser(rng), sql)
        _check(sql, case.records, rng, native=False)


def test_rows_a_node_does_not_take_are_counted() -> None:
    """A NULL in a join column reaches no node: the validator counts that row itself."""
    view = compile_query(OTHER_ENGINES["self-join-nulls"]).maintain()
    assert set(view.validator.held) == {"G"}
    view.apply(Update("+", "G", (1, None), 2))
    view.apply(Update("+", "G", (1, 2)))
    assert view.validator.counts == {("G", (1, None)): 2}
    assert sorted(view.base_tuples(), key=repr) == [("G", (1, 2), 1), ("G", (1, None), 2)]
    view.apply(Update("-", "G", (1, None)))
    with pytest.raises(InputError, match="a delete of at most 1 copy present"):
        view.apply(Update("-", "G", (1, None), 2))
    with pytest.raises(InputError, match="a delete of at most 1 copy present"):
        view.apply(Update("-", "G", (1, 2), 2))
    assert sorted(view.base_tuples(), key=repr) == [("G", (1, 2), 1), ("G", (1, None), 1)]


@pytest.mark.skipif(native_available() is not None,
                    reason=f"no native build here: {native_available()}")
@pytest.mark.parametrize("family", FAMILIES)
def test_held_delete_check_compiled(family: str, tmp_path_factory: pytest.TempPathFactory,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IVMFLOW_NATIVE_CACHE", str(tmp_path_factory.getbasetemp() / "native"))
    for seed in range(2):
        rng = random.Random(f"validator-native-{family}-{seed}")
        case = random_case(rng, family, SHAPES[seed % len(SHAPES)])
        _check(case.sql, case.records, rng, native=True)


def test_update_of_an_unread_column_cancels_before_the_join() -> None:
    """A delete and an insert of rows equal on the columns the query reads (TPC-H's
    ``s_acctbal`` updates under Q5) net to nothing per FROM item within the epoch: no
    node sees them. A real change reaches the node at the epoch's close, and the delete
    check sees the netted counts in between."""
    sql = ("CREATE TABLE R(a INT, b INT, c INT); CREATE TABLE S(b INT, d INT); "
           "SELECT R.a, S.d FROM R, S WHERE R.b = S.b;")
    view = compile_query(sql).maintain(native=False)
    view.apply(Update("+", "R", (1, 2, 3)))
    view.apply(Update("+", "S", (2, 7)))
    assert view.end_epoch().rows == ((1, (1, 7)),)

    def pending() -> list[dict[object, int]]:
        return [dict(net) for net, _apply in view._nets if net]

    view.apply(Update("-", "R", (1, 2, 3)))
    assert pending() == [{(1, 2): -1}]  # (R's tuple as the join reads it)
    view.apply(Update("+", "R", (1, 2, 9)))
    assert pending() == []
    with pytest.raises(InputError, match="a delete of at most 0 copies present"):
        view.apply(Update("-", "R", (1, 2, 3)))
    assert view.end_epoch().rows == ()
    view.apply(Update("-", "S", (2, 7)))
    view.apply(Update("+", "S", (2, 8)))
    assert pending() == [{(2, 7): -1, (2, 8): 1}]
    assert view.end_epoch().rows == ((-1, (1, 7)), (1, (1, 8)))
    assert pending() == []
    assert sorted(view.base_tuples()) == [("R", (1, 2, 9), 1), ("S", (2, 8), 1)]
