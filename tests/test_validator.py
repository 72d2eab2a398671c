"""The view's delete check (operators.deletecheck). Per relation the query reads it keeps
a multiset of row digests, nothing where a FROM item's node keeps the rows whole (the
check reads that node), or whole rows for a consumer that needs them back (a local
state checkpoint); a relation the query does not read keeps nothing; ``validate=False``
(``--trust-deletes``) keeps nothing and checks nothing.

These tests hold every mode to the plain count on random streams of every query family
and engine (the same deletes are refused, with nothing changed; the same deltas), show
that equal values give equal digests (so a valid delete is never refused), and force a
4-bit digest to show what a collision does: exactly what the module documents."""

from __future__ import annotations

import datetime
import math
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from strategies import FAMILIES, SHAPES, RandomChooser, random_case, stream_case

import operators.deletecheck as deletecheck
from core.codegen import define
from core.errors import InputError, UsageError
from core.native import native_available
from core.records import EpochEnd, Record, Update
from core.schema import Column, Relation, Row
from dataflow.api import View, compile_query
from dataflow.cli import main
from dataflow.runners.run import RunOptions
from operators.deletecheck import DeleteCheck, RowDigest, decimal_canon

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
    "dag-of-views": "CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT); "
                    "SELECT R.a, COUNT(S.c) FROM R LEFT JOIN S ON R.b = S.b "
                    "WHERE NOT EXISTS (SELECT 1 FROM S S2 WHERE S2.c = R.a) GROUP BY R.a;",
}


def _key(rel: str, row: Row) -> tuple[str, Row]:
    return rel.lower(), row


def _absent(value: Any, i: int) -> Any:
    """A value of ``value``'s type that no generated stream holds."""
    if value is None:
        return None
    if isinstance(value, str):
        return f"absent-{i}"
    return type(value)(10**6 + i)


def _feed(views: list[View], reference: View, records: list[Record],
          rng: random.Random) -> None:
    """Apply ``records`` to every view and the reference; on ``views`` also try refused
    deletes (one copy too many of a present row, an absent row) before some updates:
    each must raise and change nothing, so all stay equal epoch by epoch. The view that
    keeps rows must hold exactly the database."""
    have: Counter[tuple[str, Row]] = Counter()
    for i, rec in enumerate(records):
        if isinstance(rec, EpochEnd):
            want = reference.end_epoch().rows
            for view in views:
                assert view.end_epoch().rows == want
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
                for view in views:
                    with pytest.raises(InputError, match="a delete of at most"):
                        view.apply(bad_update)
        for view in views:
            view.apply(rec)
        reference.apply(rec)
        have[_key(rec.relation, rec.row)] += rec.signed_mult
    kept = next(v for v in views if v.validator.mode == "rows")
    got = Counter({_key(rel, row): m for rel, row, m in kept.base_tuples()})
    assert got == +have
    want = reference.end_epoch().rows
    for view in views:
        assert view.end_epoch().rows == want
        assert view.snapshot() == reference.snapshot()


def _check(sql: str, records: list[Record], rng: random.Random, native: bool) -> View:
    """The digest view (returned) and a rows view against a reference of 2 partitions
    (no node there takes rows whole for the check: every relation is digested)."""
    query = compile_query(sql)
    view = query.maintain(native=native)
    kept = query.maintain(native=native, keep_rows=True)
    reference = query.maintain(parallelism=2)
    if not hasattr(reference, "views"):  # (a DAG of views checks once, for all of them)
        assert not reference.validator.held
    _feed([view, kept], reference, records, rng)
    return view


@pytest.mark.parametrize("family", FAMILIES)
def test_delete_check_matches_counting(family: str) -> None:
    held = 0
    for seed in range(8):
        rng = random.Random(f"validator-{family}-{seed}")
        case = random_case(rng, family, SHAPES[seed % len(SHAPES)])
        view = _check(case.sql, case.records, rng, native=False)
        held += bool(view.validator.held)
    assert held >= 4  # (most random queries take some relation whole)


@pytest.mark.parametrize("name", sorted(OTHER_ENGINES))
def test_delete_check_on_other_engines(name: str) -> None:
    sql = OTHER_ENGINES[name]
    for seed in range(4):
        rng = random.Random(f"validator-{name}-{seed}")
        case = stream_case(RandomChooser(rng), sql)
        _check(sql, case.records, rng, native=False)


def test_rows_a_node_does_not_take_are_counted() -> None:
    """A NULL in a join column reaches no node: the check counts that row itself (its
    digest, or the row when rows are kept)."""
    for keep_rows in (False, True):
        view = compile_query(OTHER_ENGINES["self-join-nulls"]).maintain(keep_rows=keep_rows)
        assert set(view.validator.held) == {"G"}
        view.apply(Update("+", "G", (1, None), 2))
        view.apply(Update("+", "G", (1, 2)))
        counts = view.validator.counts["G"]
        assert list(counts.values()) == [2]
        assert list(counts) == ([(1, None)] if keep_rows else
                                [view.validator.digests["G"].digest((1, None))])
        if keep_rows:
            assert sorted(view.base_tuples(), key=repr) == [("G", (1, 2), 1),
                                                            ("G", (1, None), 2)]
        view.apply(Update("-", "G", (1, None)))
        with pytest.raises(InputError, match="a delete of at most 1 copy present"):
            view.apply(Update("-", "G", (1, None), 2))
        with pytest.raises(InputError, match="a delete of at most 1 copy present"):
            view.apply(Update("-", "G", (1, 2), 2))
        assert list(counts.values()) == [1]


def test_a_second_delete_in_one_epoch_of_a_held_row_is_refused() -> None:
    """The held check counts the epoch's netted change of the row (not yet in the
    node): a row present before the epoch, deleted twice in it, is refused the second
    time. (It was accepted before the delete check passed the count it computed.)"""
    sql = ("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT); "
           "SELECT R.a, S.c FROM R, S WHERE R.b = S.b;")
    for native in (False, None):
        view = compile_query(sql).maintain(native=native)
        assert set(view.validator.held) == {"R", "S"}
        view.apply(Update("+", "R", (1, 2)))
        view.apply(Update("+", "S", (2, 3)))
        assert view.end_epoch().rows == ((1, (1, 3)),)
        view.apply(Update("-", "R", (1, 2)))
        with pytest.raises(InputError, match="a delete of at most 0 copies present"):
            view.apply(Update("-", "R", (1, 2)))
        assert view.end_epoch().rows == ((-1, (1, 3)),)
        assert view.snapshot() == []


@pytest.mark.skipif(native_available() is not None,
                    reason=f"no native build here: {native_available()}")
@pytest.mark.parametrize("family", FAMILIES)
def test_delete_check_compiled(family: str, tmp_path_factory: pytest.TempPathFactory,
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
    view = compile_query(sql).maintain(native=False, keep_rows=True)
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


# -- what is kept, per relation and mode --------------------------------------------------
TPCH_LIKE = ("CREATE TABLE lineitem(k INT, qty DECIMAL(15,2), price DECIMAL(15,2), "
             "ship DATE, mode VARCHAR, note VARCHAR);\n"
             "CREATE TABLE nation(n INT, name VARCHAR);\n"
             "SELECT mode, SUM(price) FROM lineitem WHERE qty < 30 GROUP BY mode;\n")


def _row(i: int) -> Row:
    return (i, Decimal(f"{i % 50}.00"), Decimal(f"{i}.25"),
            datetime.date(1995, 1, 1) + datetime.timedelta(days=i % 300), "AIR", f"n{i}")


@pytest.mark.parametrize("native", [False, None])
def test_digests_only_for_the_relations_the_query_reads(native: bool | None) -> None:
    """Digests (ints), not rows, for the table the query reads; nothing for a table it
    declares and does not read, whose records are still checked for shape and type."""
    view = compile_query(TPCH_LIKE).maintain(native=native)
    assert view.delete_check == "row digests (64-bit)"
    # (compiled: the C hash of core/native_sort.pyx, for the checked path too)
    hashed = view.validator.digests["lineitem"].hash
    assert (getattr(hashed, "__name__", "") == "row_digest64") == view.native
    for i in range(100):
        view.apply(Update("+", "lineitem", _row(i)))
        view.apply(Update("+", "nation", (i, f"N{i}")))
    counts = view.validator.counts
    assert set(counts) == {"lineitem"} and len(counts["lineitem"]) == 100
    assert all(type(k) is int and 0 <= k < 2**64 for k in counts["lineitem"])
    view.apply(Update("-", "nation", (7, "never inserted")))  # not read: not checked
    with pytest.raises(InputError, match="2 values for nation"):
        view.apply(Update("+", "nation", (1, "x", 3)))
    with pytest.raises(InputError, match="typed values"):
        view.apply(Update("+", "nation", ("one", "x")))
    with pytest.raises(InputError, match="a delete of at most 0 copies present"):
        view.apply(Update("-", "lineitem", _row(1000)))
    with pytest.raises(UsageError, match="keep_rows=True"):
        view.base_tuples()
    assert view.end_epoch().rows == ((1, ("AIR", Decimal("2385.00"))),)
    assert view.validator.entries() == 100


def test_validate_false_keeps_nothing_and_checks_nothing() -> None:
    q = compile_query(TPCH_LIKE)
    view = q.maintain(validate=False)
    assert view.delete_check == "off (--trust-deletes)"
    assert view.validator.counts == {} and view.validator.held == {}
    view.apply(Update("+", "lineitem", _row(1)))
    view.apply(Update("-", "lineitem", _row(1)))
    view.apply(Update("-", "lineitem", _row(2)))  # not checked: the source is trusted
    with pytest.raises(InputError, match="6 values for lineitem"):
        view.apply(Update("-", "lineitem", _row(2)[:5]))
    assert "off (--trust-deletes)" in q.delete_check(validate=False)
    assert q.delete_check() == ("row digests (64-bit) of lineitem; nation not read: shape "
                                "and type only")


def test_equal_values_give_equal_digests() -> None:
    """A valid delete is never refused: values equal in SQL (``1.5`` and ``1.50`` in a
    DECIMAL(15,2) column, ``-0.00`` and ``0.00``, ``-0.0`` and ``0.0``, the NaNs) have
    one digest, whether the insert took the compiled fast path and the delete the
    checked path or the other way round; different values have different ones."""
    view = compile_query(
        "CREATE TABLE T(p DECIMAL(15,2), x DOUBLE, q DECIMAL(10,0), z DECIMAL(18,6));"
        "SELECT COUNT(*) FROM T;").maintain()
    for ins, dels in [
        ((Decimal("1.50"), 1.0, Decimal(3), Decimal("1.000000")),
         (Decimal("1.5"), 1.0, Decimal("3.0"), Decimal("1"))),
        ((Decimal("-0.00"), -0.0, Decimal("-0"), Decimal("0.000000")),
         (Decimal("0.00"), 0.0, Decimal(0), Decimal("-0E-6"))),
        ((Decimal("2.00"), math.nan, Decimal("1E+1"), Decimal("0.000001")),
         (Decimal("2"), float("nan"), Decimal(10), Decimal("1E-6"))),
        ((Decimal("1.005"), 2.0, Decimal("0.5"), Decimal("1.2E-7")),
         (Decimal("1.0050"), 2.0, Decimal("0.50"), Decimal("1.20E-7"))),
    ]:
        view.apply(Update("+", "T", ins))
        with pytest.raises(InputError):
            view.apply(Update("-", "T", (Decimal("-1.00"), *ins[1:])))
        view.apply(Update("-", "T", dels))
    assert view.validator.entries() == 0
    d = RowDigest(Relation("T", (Column("p", "DECIMAL", 2, 15),)))
    assert d.digest((Decimal("-1.00"),)) != d.digest((Decimal("-2.00"),))
    assert d.digest((None,)) != d.digest((Decimal(0),))


def _fast(digest: RowDigest) -> object:
    lines, env = digest.fast_lines("row", "d", "_t")
    src = "def fast(row):\n" + "".join(f"    {ln}\n" for ln in lines) + "    return d\n"
    return define(src, "<test fast digest>", env)["fast"]


def test_the_inline_digest_is_the_digest() -> None:
    """The generated fast path's digest equals :meth:`RowDigest.digest` on every row
    it takes (it gives the others to the checked path: ``False``)."""
    rel = Relation("R", (Column("a", "INT"), Column("p", "DECIMAL", 2, 15),
                         Column("q", "DECIMAL", 0, 18), Column("z", "DECIMAL", 5, 18),
                         Column("f", "FLOAT"), Column("d", "DATE"), Column("t", "TIMESTAMP"),
                         Column("s", "TEXT"), Column("b", "BOOL")))
    digest = RowDigest(rel)
    fast = _fast(digest)
    rng = random.Random(3)
    decimals = {"p": ["1.50", "1.5", "-0.00", "0.00", "12.34", "1E+1", "1.005", "-3.20", "7"],
                "q": ["1", "10", "1E+1", "-0", "0", "1.0", "5.5"],
                "z": ["1.00000", "1.2E-7", "1.20E-7", "0.00001", "-0.00000", "3", "2E+3"]}
    taken = 0
    for _ in range(3000):
        row = (rng.randint(-5, 5), Decimal(rng.choice(decimals["p"])),
               Decimal(rng.choice(decimals["q"])), Decimal(rng.choice(decimals["z"])),
               rng.choice([0.0, -0.0, 1.5, math.nan]), datetime.date(2020, 1, rng.randint(1, 9)),
               datetime.datetime(2020, 1, 2, 3, rng.randint(0, 5), 6), rng.choice("xyz"),
               rng.random() < 0.5)
        got = fast(row)  # type: ignore[operator]
        if got is not False:
            taken += 1
            assert got == digest.digest(row), row
    assert taken > 100
    assert decimal_canon(2)(Decimal("-0.00")) == decimal_canon(2)(Decimal(0)) == "0.00"


# -- collisions: a 4-bit digest ----------------------------------------------------------
def test_a_forced_collision_is_accepted_as_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 4-bit digests, a delete of a never-inserted row whose digest equals a
    present row's is accepted (the documented false accept, probability n / 2**bits;
    n / 2**64 by default), one whose digest differs is refused; at the default width
    the same delete is refused. And a valid stream is never refused at any width: the
    4-bit view's deltas equal the 64-bit view's."""
    # (c unread: no FROM item takes R's rows whole, so R is digested)
    sql = "CREATE TABLE R(a INT, b INT, c INT); SELECT R.a, R.b FROM R;"
    q = compile_query(sql)
    monkeypatch.setattr(deletecheck, "DIGEST_BITS", 4)
    tiny = q.maintain()
    assert tiny.delete_check == "row digests (4-bit)"
    monkeypatch.setattr(deletecheck, "DIGEST_BITS", 64)
    wide = q.maintain()
    assert wide.delete_check == "row digests (64-bit)"
    digest = tiny.validator.digests["R"].digest
    present = (1, 10, 0)
    by_digest: dict[int, tuple[int, int, int]] = {}
    for b in range(11, 200):
        by_digest.setdefault(digest((1, b, 0)), (1, b, 0))
    collides = by_digest.pop(digest(present))
    differs = next(iter(by_digest.values()))
    for view in (tiny, wide):
        view.apply(Update("+", "R", present))
        with pytest.raises(InputError, match="a delete of at most 0 copies present"):
            view.apply(Update("-", "R", differs))
    with pytest.raises(InputError, match="a delete of at most 0 copies present"):
        wide.apply(Update("-", "R", collides))
    assert tiny.end_epoch().rows == wide.end_epoch().rows == ((1, (1, 10)),)
    tiny.apply(Update("-", "R", collides))  # accepted: its digest is the present row's
    assert tiny.validator.entries() == 0
    # The engine then applies it as a valid delete: a wrong answer from there on, as
    # documented (a row with multiplicity -1).
    assert tiny.end_epoch().rows == ((-1, collides[:2]),)
    assert tiny.snapshot() == [(1, (1, 10)), (-1, collides[:2])]

    rng = random.Random(4)
    monkeypatch.setattr(deletecheck, "DIGEST_BITS", 4)
    tiny4 = q.maintain()
    monkeypatch.setattr(deletecheck, "DIGEST_BITS", 64)
    wide64 = q.maintain()
    live: Counter[tuple[int, int, int]] = Counter()
    for step in range(2000):
        if live and rng.random() < 0.45:
            row = rng.choice(sorted(live))
            live[row] -= 1
            live = +live
            u = Update("-", "R", row)
        else:
            row = (rng.randint(0, 5), rng.randint(0, 40), rng.randint(0, 1))
            live[row] += 1
            u = Update("+", "R", row)
        tiny4.apply(u)
        wide64.apply(u)
        if step % 50 == 0:
            assert tiny4.end_epoch().rows == wide64.end_epoch().rows
    assert tiny4.snapshot() == wide64.snapshot()


# -- a DAG of views, a keyed view's state, the run options --------------------------------
def test_a_dag_checks_each_base_table_once() -> None:
    sql = OTHER_ENGINES["dag-of-views"]
    q = compile_query(sql)
    view = q.maintain()
    assert set(view.validator.relations) == {"R", "S"}
    dag: Any = view  # (a DagView)
    assert all(v.validator.mode == "off" for _n, v in [*dag.views, ("", dag.outer)])
    view.apply(Update("+", "R", (1, 2)))
    view.apply(Update("+", "S", (2, 5)))
    before = view.state_entries()
    with pytest.raises(InputError, match="a delete of at most 0 copies present"):
        view.apply(Update("-", "S", (2, 6)))
    assert view.state_entries() == before
    assert view.end_epoch().rows == ((1, (1, 1)),)
    kept = q.maintain(keep_rows=True)
    kept.apply(Update("+", "R", (1, 2)))
    assert kept.base_tuples() == [("R", (1, 2), 1)]
    assert "row digests (64-bit) of R, S" in q.delete_check()


def test_a_keyed_view_keeps_digests_in_its_state() -> None:
    """On Spark and Flink an outer join's keyed view checks its base table's deletes
    against row digests in the runner's keyed state (``keyed.base.<table>``, layout 11),
    not whole rows."""
    from dataflow.circuit.views import CompiledDag
    from dataflow.distributed.partitions import STATE_LAYOUT
    from operators.keyedview import CompiledKeyedView, KeyedViewState
    from operators.state import DictState

    assert STATE_LAYOUT >= 11
    dag = compile_query(OTHER_ENGINES["dag-of-views"])
    assert isinstance(dag, CompiledDag)
    keyed = next(node for _n, node in dag.inner if isinstance(node, CompiledKeyedView))
    state = DictState()
    view = KeyedViewState(keyed, state)
    names = state.names()
    assert [n for n in names if n.startswith("keyed.base")] == \
        [f"keyed.base.{r}" for r in sorted(view.validator.relations)]
    rel = next(iter(view.validator.relations))
    arity = len(view.validator.relations[rel].columns)
    view.apply(Update("+", rel, (1,) * arity))
    assert all(type(k) is int for n in names if n.startswith("keyed.base")
               for k in state.map(n))
    with pytest.raises(InputError, match="a delete of at most 0 copies present"):
        view.apply(Update("-", rel, (2,) * arity))


def test_run_options_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert RunOptions("q.sql", "u.csv").maintain_kwargs() == {"parallelism": 1}
    assert RunOptions("q.sql", "u.csv", trust_deletes=True).maintain_kwargs()["validate"] \
        is False
    assert RunOptions("q.sql", "kafka://h:1/t", checkpoint="ck").maintain_kwargs()[
        "keep_rows"] is True  # (the local state checkpoint saves the rows)
    q = tmp_path / "q.sql"
    q.write_text(TPCH_LIKE)
    u = tmp_path / "u.csv"
    u.write_text("+,lineitem,1,2.00,3.50,1995-01-01,AIR,x\n*\n-,lineitem,1,2.00,3.50,"
                 "1995-01-01,AIR,y\n")
    assert main(["run", str(q), "--updates", str(u), "--deltas", str(tmp_path / "d.csv")]) == 1
    err = capsys.readouterr().err
    assert "a delete of at most 0 copies present" in err
    assert main(["run", str(q), "--updates", str(u), "--deltas", str(tmp_path / "e.csv"),
                 "--trust-deletes"]) == 0
    assert capsys.readouterr().err.endswith(", delete check: off (--trust-deletes)\n")
    assert main(["explain", str(q)]) == 0
    assert capsys.readouterr().out.endswith(
        "delete check: row digests (64-bit) of lineitem; nation not read: shape and "
        "type only\n")


def test_delete_check_modes_are_checked() -> None:
    with pytest.raises(ValueError, match="digests, rows or nothing"):
        DeleteCheck({}, "all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 1 bit"):
        RowDigest(Relation("R", (Column("a", "INT"),)), bits=0)


SUM_LEAVES = ("CREATE TABLE R(a INT, b INT, x INT); CREATE TABLE S(b INT, c INT, y INT); "
              "SELECT R.a, COUNT(*), SUM(S.y) FROM R, S WHERE R.b = S.b GROUP BY R.a;")


def test_a_sum_leaf_keeps_no_tuples() -> None:
    """A leaf of the join tree that only feeds sums (S here: its key b, its payload
    COUNT and SUM(y)) keeps its sum per key, not its tuples, in a view (which checks
    deletes itself, by digests); the same node of a worker's engine keeps its tuples
    (the worker checks deletes against them). Results stay equal to a view that keeps
    the rows, and a bad delete of S is still refused with nothing changed."""
    q = compile_query(SUM_LEAVES)
    view, kept = q.maintain(native=False), q.maintain(native=False, keep_rows=True)
    engine = view.engines[0]
    leaf = engine.atom_nodes[1]  # (S: the second FROM item)
    assert leaf.sum_leaf and not leaf.top and not leaf.children
    assert not any(name.startswith(f"{leaf.name}.base") for name in engine.state.names())
    assert "S" in view.validator.counts  # (S's rows are digested: no node holds them)
    worker = q.kind.make_engine()
    assert not worker.atom_nodes[1].sum_leaf
    assert isinstance(worker.atom_nodes[1].base, dict)
    rng = random.Random(7)
    rows = [(rng.randrange(4), rng.randrange(5), rng.randrange(9)) for _ in range(60)]
    for i, row in enumerate(rows):
        for v in (view, kept):
            v.apply(Update("+", "R" if i % 2 else "S", row))
            if i % 7 == 6:
                v.apply(Update("-", "R" if i % 2 else "S", row))
        if i % 10 == 9:
            want = kept.end_epoch().rows
            assert view.end_epoch().rows == want
    before = view.snapshot()
    with pytest.raises(InputError, match="a delete of at most 0 copies present"):
        view.apply(Update("-", "S", (99, 99, 99)))
    assert view.end_epoch().rows == () and view.snapshot() == before == kept.snapshot()


def test_runner_partitions_with_trust_deletes_keep_no_tuples() -> None:
    """On Spark and Flink (``WorkerPlan``, ``PartitionTask``), ``--trust-deletes`` keeps
    an aggregate's sums at its keys and no tuple per row (no ``.base`` map), checks no
    delete, and writes under another layout stamp: a checkpoint of the other mode is
    refused, never misread. Without it, a delete of a row never inserted is refused."""
    from dataflow.distributed.partitions import UPDATE, PartitionTask, TaggedRow, WorkerPlan
    from operators.writeback import WriteBackState

    q = compile_query(TPCH_LIKE)
    rows = [TaggedRow(0, i, 1, UPDATE, 0, (i, Decimal("2.00"), Decimal(i) / 4,
                                           datetime.date(1995, 1, 1), "AIR", "x"), 1, 0)
            for i in range(200)]
    stamps, sizes = [], []
    for trust in (False, True):
        plan = WorkerPlan.of(q, 1, trust)
        stamps.append(plan.layout_stamp())
        state = WriteBackState()
        task = PartitionTask(*plan.compiled(), state=state, trust_deletes=trust)
        task.process(rows)
        sizes.append({n: len(state.map(n)) for n in state.names()})
        assert state.names() == plan.map_names()
        bad = TaggedRow(0, 200, 1, UPDATE, 0, (7, Decimal("1.00"), Decimal("1.00"),
                                               datetime.date(1995, 1, 1), "AIR", "x"), -1, 0)
        if trust:
            task.process([bad])  # (trusted: not checked)
        else:
            with pytest.raises(InputError, match="a delete of at most 0 copies present"):
                task.process([bad])
    assert stamps[0] != stamps[1]
    assert sum(n for name, n in sizes[0].items() if name.endswith(".base")) >= 200
    assert not any(name.endswith(".base") for name in sizes[1])
    assert sum(sizes[1].values()) < 20


FOUR_CYCLE = ("CREATE TABLE R(a INT, b INT, x DOUBLE); CREATE TABLE S(b INT, c INT); "
              "CREATE TABLE T(c INT, d INT); CREATE TABLE U(d INT, a INT); "
              "SELECT R.a, SUM(R.x) FROM R, S, T, U WHERE R.b = S.b AND S.c = T.c "
              "AND T.d = U.d AND U.a = R.a GROUP BY R.a")


def test_runner_ghd_checks_deletes_in_its_bags_without_a_second_copy() -> None:
    """On the runners (delete check on), a cyclic query's delta-join bags check their
    atoms' deletes against their own relation copies; CROWN's leaves over those bags
    keep payload sums only, not the bag's tuples again (a second copy nothing read:
    a quarter of TPC-H Q5's partition state). A delete of a row never inserted is
    still refused in every atom, with nothing applied."""
    from core.epochs import EpochCursor
    from dataflow.distributed.partitions import PartitionTask, WorkerPlan, tag_records
    from operators.writeback import WriteBackState

    q = compile_query(FOUR_CYCLE)
    c, layout = WorkerPlan.of(q, 1, False).compiled()
    state = WriteBackState()
    task = PartitionTask(c, layout, state=state)
    cursor = EpochCursor()

    def epoch(*ups: Update) -> list[tuple[int, Any]]:
        rows = task.process(tag_records(layout, cursor.number(ups, final=True)))
        return sorted((r.mult, r.row) for r in rows)

    loaded = [Update("+", "R", (a, a + 1, a / 2)) for a in range(1, 6)]
    loaded += [Update("+", "S", (a + 1, 7)) for a in range(1, 6)]
    loaded += [Update("+", "T", (7, 8)), *(Update("+", "U", (8, a)) for a in range(1, 6))]
    assert epoch(*loaded) == [(1, (a, a / 2)) for a in range(1, 6)]
    names = state.names()
    assert not [n for n in names if n.startswith("crown.") and n.endswith(".base")], names
    assert any(n.startswith("B0.atom") for n in names)  # (the bag's own copies)
    for rel, t in (("R", (1, 2, 9.0)), ("S", (2, 8)), ("T", (8, 8)), ("U", (8, 9))):
        with pytest.raises(InputError, match="a delete of at most 0 copies present"):
            epoch(Update("-", rel, t))
    # Nothing of the refused epochs was applied: a real delete still nets to the sum.
    assert epoch(Update("-", "R", (2, 3, 1.0))) == [(-1, (2, 1.0))]
    assert epoch(Update("-", "T", (7, 8))) == sorted(
        (-1, (a, a / 2)) for a in (1, 3, 4, 5))
