"""Packed rows (core/native_rows.pyx): a join node's tuple in native fields must be the
tuple in every way the engine reads it: equal to it (both ways), hashing as it does,
each field the same value printed the same (a DECIMAL keeps its exponent), ordered,
pickled and added as the tuple; and a view whose nodes hold packed rows gives what the
interpreted view gives, with deletes, on a query whose atoms carry DECIMALs, dates,
texts and NULLs.
"""

from __future__ import annotations

import datetime
import pickle
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import bag_stream, check_stream

from core.native import native_available, native_rows
from core.records import Update
from dataflow.api import compile_query
from operators.nodemaps import members

pytestmark = pytest.mark.skipif(native_available() is not None,
                                reason=f"no native build: {native_available()}")

DECIMALS = st.one_of(
    st.decimals(allow_nan=False, allow_infinity=False, places=2, min_value=-10**16,
                max_value=10**16),
    st.decimals(allow_nan=False, allow_infinity=False),  # any exponent, any digits
    st.sampled_from([Decimal("-0.00"), Decimal("0"), Decimal("1E+2"), Decimal("1E-7"),
                     Decimal("Infinity"), Decimal("123456789012345678"),
                     Decimal("1234567890123456789"), Decimal("-5.50")]),
)
VALUES = st.one_of(
    st.integers(min_value=-2**70, max_value=2**70), st.integers(-300, 300), DECIMALS,
    st.text(max_size=5), st.none(), st.booleans(), st.dates(),
    st.floats(allow_nan=False), st.sampled_from([2**63 - 1, -2**63 + 1, -2**63, 2**63]),
)
ROWS = st.lists(VALUES, min_size=1, max_size=10).map(tuple)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and repr(a) == repr(b)


@settings(max_examples=500, deadline=None)
@given(t=ROWS, decimals=st.booleans())
def test_a_packed_row_is_its_tuple(t: tuple[Any, ...], decimals: bool) -> None:
    r = native_rows().packer(decimals)(t)
    if len(t) > 8:
        assert r is t  # (left a tuple)
        return
    from core.native import ROW_SIZES

    # (the smallest class that holds the row's values)
    assert type(r).__name__ == f"PackedRow{min(n for n in ROW_SIZES if n >= len(t))}"
    assert r == t and t == r and (r != t) is False and hash(r) == hash(t)
    assert len(r) == len(t) and all(_same(a, b) for a, b in zip(r, t, strict=True))
    assert all(_same(r[i], t[i]) for i in range(-len(t), len(t)))
    assert r[1:] == t[1:] and repr(r) == repr(t)
    back = pickle.loads(pickle.dumps(r))
    assert back == r and hash(back) == hash(t) and type(back) is type(r)
    assert r + (1,) == t + (1,) and (0,) + r == (0,) + t
    assert {r: 1}.get(t) == 1 and {t: 1}.get(r) == 1


@settings(max_examples=300, deadline=None)
@given(a=ROWS, b=ROWS)
def test_packed_rows_compare_as_their_tuples(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    pack = native_rows().packer(True)
    pa, pb = pack(a), pack(b)
    assert (pa == pb) == (a == b) and (pa != pb) == (a != b)
    if a == b:
        assert hash(pa) == hash(pb)
    try:
        want = a < b
    except TypeError:
        return  # (values of types that do not order: neither do the rows)
    assert (pa < pb) == want


def test_equal_values_of_other_forms_are_equal_rows() -> None:
    pack = native_rows().packer(True)
    assert pack((Decimal("1.0"), 2)) == pack((Decimal("1.00"), 2))
    assert pack((1, 2)) == pack((Decimal(1), 2)) and hash(pack((1,))) == hash(pack((Decimal(1),)))
    assert pack((Decimal("1.5"),)) != pack((Decimal("1.50001"),))
    assert str(pack((Decimal("-0.00"),))[0]) == "-0.00"


SQL = ("CREATE TABLE R(a INT, d DECIMAL(15,2), s TEXT, day DATE);\n"
       "CREATE TABLE S(a INT, b INT, x DECIMAL(15,2));\n"
       "CREATE TABLE T(b INT, c TEXT);\n"
       "SELECT R.s, T.c, SUM(R.d * (1 - S.x)), COUNT(*), MIN(R.day) FROM R, S, T "
       "WHERE R.a = S.a AND S.b = T.b GROUP BY R.s, T.c")


def _row(table: str, draw: Any) -> tuple[Any, ...]:
    a = draw(st.sampled_from([None, 0, 1, 2, 10**12]))
    dec = draw(st.sampled_from([None, Decimal("0.00"), Decimal("-0.05"), Decimal("12.50"),
                                Decimal("12345.67")]))
    text = draw(st.sampled_from([None, "", "x", "y"]))
    day = draw(st.sampled_from([None, datetime.date(1996, 3, 13), datetime.date(1970, 1, 1)]))
    b = draw(st.sampled_from([None, 0, 1, 3]))
    return {"R": (a, dec, text, day), "S": (a, b, dec), "T": (b, text)}[table]


@st.composite
def _streams(draw: Any) -> list[Any]:
    return bag_stream(draw, "RRSST", _row, epochs=5, per_epoch=16)


@settings(max_examples=40, deadline=None)
@given(records=_streams())
def test_a_view_over_packed_rows_equals_duckdb(records: list[Any]) -> None:
    view = compile_query(SQL).maintain(native=True)
    assert view.packed_rows > 0, "the native view packs its nodes' tuples"
    check_stream(view, SQL, records)


# Ring payloads (an aggregate vector per key of a lower projection) are stored packed
# too, with their keys of several values: a chain whose lowest projection is keyed by
# two columns, and TPC-H Q5's 4-cycle (a GHD whose delta-join bags keep their atoms in
# their indexes, CROWN over the bags keeping vectors per (order, nation)).
PAYLOAD_SQL = {
    "chain": ("CREATE TABLE R(a INT, b INT, d DECIMAL(15,2));\n"
              "CREATE TABLE S(a INT, b INT, k INT, x DECIMAL(15,2));\n"
              "CREATE TABLE T(k INT, c TEXT);\n"
              "SELECT T.c, SUM(R.d * S.x), COUNT(*), SUM(R.d) FROM R, S, T "
              "WHERE R.a = S.a AND R.b = S.b AND S.k = T.k GROUP BY T.c"),
    "cycle": ("CREATE TABLE C(ck INT, nk INT);\n"
              "CREATE TABLE O(ok INT, ck INT);\n"
              "CREATE TABLE L(ok INT, sk INT, x DECIMAL(15,2), y DECIMAL(15,2));\n"
              "CREATE TABLE P(sk INT, nk INT);\n"
              "CREATE TABLE N(nk INT, name TEXT);\n"
              "SELECT N.name, SUM(L.x * (1 - L.y)), COUNT(*) FROM C, O, L, P, N "
              "WHERE C.ck = O.ck AND L.ok = O.ok AND L.sk = P.sk AND C.nk = P.nk "
              "AND P.nk = N.nk GROUP BY N.name"),
}
PAYLOAD_TABLES = {"chain": "RRSST", "cycle": "CCOOLLLPPN"}


def _payload_row(table: str, draw: Any) -> tuple[Any, ...]:
    key = st.sampled_from([None, 0, 1, 2, 10**12])
    dec = st.sampled_from([None, Decimal("0.00"), Decimal("-0.05"), Decimal("12.50"),
                           Decimal("1234567.89")])
    text = st.sampled_from([None, "", "x", "y"])
    kinds = {"R": "kkd", "S": "kkkd", "T": "kt", "C": "kk", "O": "kk", "L": "kkdd",
             "P": "kk", "N": "kt"}[table]
    return tuple(draw({"k": key, "d": dec, "t": text}[kind]) for kind in kinds)


@st.composite
def _payload_streams(draw: Any, shape: str) -> list[Any]:
    return bag_stream(draw, PAYLOAD_TABLES[shape], _payload_row, epochs=5, per_epoch=16)


def _stored_payloads(view: Any) -> list[Any]:
    """Every ring payload the engine's lower projections store as objects (a sum leaf's
    ``FieldMap`` holds its payloads' fields in its slots: no objects to look at)."""
    engine = view.engines[0]
    crown = getattr(engine, "crown", engine)
    field_map = native_rows().FieldMap
    return [p for node in crown.nodes if not node.top and type(node.proj) is not field_map
            for p in node.proj.values()]


@pytest.mark.parametrize("shape", sorted(PAYLOAD_SQL))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_packed_ring_payloads_equal_duckdb(shape: str, data: st.DataObject) -> None:
    sql = PAYLOAD_SQL[shape]
    records = data.draw(_payload_streams(shape))
    view = compile_query(sql).maintain(native=True)
    assert view.packed_payloads > 0, "the native view packs its ring payloads"
    check_stream(view, sql, records)
    packed = native_rows().PACKED_TYPES
    stored = _stored_payloads(view)
    assert all(type(p) in packed for p in stored), [type(p) for p in stored]


def test_a_view_that_keeps_rows_whole_packs_no_payloads() -> None:
    """(the local checkpoint pickles the state as it is: nothing packed there)"""
    view = compile_query(PAYLOAD_SQL["chain"]).maintain(native=True, keep_rows=True)
    assert view.packed_rows == 0 and view.packed_payloads == 0


# Keys of several values are stored packed in every map of the tree (its indexes, its
# projections and groups, its live indexes), with integer payloads too; a key that is
# the whole tuple is the tuple the bucket holds. A Q21-like shape: join tree D(B(A, C)),
# B's index for A keyed by all of B's values, COUNT only.
KEY_SQL = ("CREATE TABLE D(x INT, name TEXT);\n"
           "CREATE TABLE B(x INT, y INT);\n"
           "CREATE TABLE A(x INT, y INT);\n"
           "CREATE TABLE C(y INT, z INT);\n"
           "SELECT D.name, COUNT(*) FROM D, B, A, C "
           "WHERE D.x = B.x AND A.x = B.x AND A.y = B.y AND B.y = C.y GROUP BY D.name")


def _key_row(table: str, draw: Any) -> tuple[Any, ...]:
    key = st.sampled_from([None, 0, 1, 2, 10**12])
    text = st.sampled_from([None, "", "x"])
    return tuple(draw(text if kind == "t" else key)
                 for kind in {"D": "kt", "B": "kk", "A": "kk", "C": "kk"}[table])


@st.composite
def _key_streams(draw: Any) -> list[Any]:
    return bag_stream(draw, "DBBAAC", _key_row, epochs=5, per_epoch=16)


def _node_maps(view: Any) -> list[Any]:
    """Every map of the engine's join nodes."""
    engine = view.engines[0]
    crown = getattr(engine, "crown", engine)
    return [m for node in crown.nodes
            for m in (node.proj, node.base, *node.index, *node.live_index)]


def _stored_items(view: Any) -> list[tuple[Any, Any]]:
    """Every entry of every dict map of the engine's join nodes."""
    return [kv for m in _node_maps(view) if isinstance(m, dict) for kv in m.items()]


@settings(max_examples=30, deadline=None)
@given(records=_key_streams())
def test_keys_of_several_values_are_stored_packed(records: list[Any]) -> None:
    view = compile_query(KEY_SQL).maintain(native=True)
    check_stream(view, KEY_SQL, records)
    keys = [k for k, _bucket in _stored_items(view)]
    assert not [k for k in keys if type(k) is tuple and len(k) > 1], keys
    # The indexes are field maps: a key in native fields (not an object), each bucket
    # a stored row or a list or set of them, packed, never a tuple.
    field_maps = [m for m in _node_maps(view) if type(m).__name__ == "FieldMap"]
    assert field_maps, [type(m).__name__ for m in _node_maps(view)]
    stored = [r for m in field_maps for _k, b in m.items() for r in members(b)]
    assert not [r for r in stored if type(r) is tuple], stored


def test_a_key_that_is_the_whole_tuple_is_the_stored_tuple() -> None:
    """(B's index for A is keyed by both of B's values: its key is the bucket's tuple,
    stored once: a node's index is a field map, the key in its native fields and the
    bucket the packed row; in a dict, the key and the bucket are one packed object)"""
    view = compile_query(KEY_SQL).maintain(native=True)
    for table, row in (("D", (1, "n")), ("B", (1, 2)), ("A", (1, 2)), ("C", (2, 5))):
        view.apply(Update("+", table, row))
    view.end_epoch()
    packed = native_rows().PACKED_TYPES
    crown = getattr(view.engines[0], "crown", view.engines[0])
    entries = [(k, b, type(m).__name__) for node in crown.nodes for m in node.index
               if isinstance(m, dict) or type(m).__name__ == "FieldMap" for k, b in m.items()]
    shared = [(k, b) for k, b, kind in entries
              if type(b) in packed and k == b and (kind == "FieldMap" or k is b)]
    assert shared, entries
