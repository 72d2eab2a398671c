"""The update file's common lines parsed in C (core/native_parse.pyx) make the very
records, values and errors the Python parser makes: random lines of every column type,
tricky text included, read both ways."""

from __future__ import annotations

import datetime
import string
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.files import line_parser, read_updates_from_lines
from core.errors import InputError
from core.native import native_available
from core.records import Update
from core.schema import Column, Relation, Schema

pytestmark = pytest.mark.skipif(native_available() is not None,
                                reason=f"no native build here: {native_available()}")

COLUMNS = (
    Column("i", "INT"), Column("t", "INT", width=8), Column("u", "INT", width=-64),
    Column("h", "INT", width=128), Column("d", "DECIMAL", 2, 15), Column("z", "DECIMAL"),
    Column("w", "DECIMAL", 0, 4), Column("n", "DECIMAL", 4, 4), Column("dt", "DATE"),
    Column("s", "TEXT"), Column("f", "FLOAT"), Column("ts", "TIMESTAMP"),
    Column("b", "BOOL"), Column("k", "KEY"),
)
"""Every column type, and the INT widths and DECIMAL shapes the C path checks."""

FIELD_LIST = ["", " 12", "12 ", "+5", "007", "-0", "0x1F", "1_000", "1e3", "12.5",
                     "-12.50", "12.", ".5", "1.005", "0.00", "-0.00", "00012.50",
                     "9999999999999.99", "10000000000000.00", "123456789012345678.00",
                     "1998-09-02", "1998-9-2", "0000-01-01", "1998-02-30", "1998-13-01",
                     "1998/09/02", "1998-09-02 10:00:00", "epoch", "infinity", "true",
                     "no", "nan", "-inf", "2.5", "x", "a,b", "é", "\u20ac", '""', '"a"',
                     '"a,b"', '"a""b"', '"1.50"', '"1998-09-02"', 'a"b', '"x"y', "1998-02-28",
                     "2000-02-29", "1900-02-29", "9999-12-31", "0001-01-01", "-1", "-7", "7"]
"""Texts of every type and of none, written as the C path reads them and otherwise."""

FIELD_TEXTS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.integers(-300, 300).map(str),
    st.sampled_from(FIELD_LIST),
    st.decimals(min_value=-(10**14), max_value=10**14, places=2).map(str),
    st.dates().map(str),
    st.text(string.ascii_letters + string.digits + " .-,", max_size=8),
)


def edge_texts(col: Column) -> st.SearchStrategy[str]:
    """Texts at the edges of ``col``'s type: an INT width's bounds and one past them,
    a DECIMAL's digits before the point at its limit and one past it, at its scale and
    at others, dates at the ends of months."""
    if col.type == "INT":
        lo, hi = col.int_range
        near = st.sampled_from([lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 0, -1])
        return st.one_of(near, st.integers(lo, hi)).map(str)
    if col.type == "DECIMAL":
        before = col.precision - col.scale
        digits = st.integers(0, before + 1).flatmap(
            lambda k: st.text("0123456789", min_size=k, max_size=k))
        frac = st.integers(0, col.scale + 1).flatmap(
            lambda k: st.text("0123456789", min_size=k, max_size=k))
        return st.builds(lambda sign, a, lead, b: f"{sign}{lead}{a or '0'}"
                         + (f".{b}" if b or col.scale else ""),
                         st.sampled_from(["", "-"]), digits, st.sampled_from(["", "0", "00"]),
                         frac)
    if col.type == "DATE":
        odd = st.builds(lambda y, m, d: f"{y:04d}-{m:02d}-{d:02d}", st.integers(0, 9999),
                        st.integers(0, 13), st.sampled_from([0, 1, 28, 29, 30, 31, 32]))
        return st.one_of(st.dates().map(str), odd)
    return FIELD_TEXTS


@st.composite
def lines(draw: st.DrawFn) -> tuple[Schema, list[str]]:
    """A schema of two relations of random columns and lines for them, most of them
    well-formed, some with the wrong number of fields, ops, names or ends."""
    cols = draw(st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=6))
    named = tuple(Column(f"c{i}", c.type, c.scale, c.width) for i, c in enumerate(cols))
    schema = Schema({"R": Relation("R", named),
                     "S": Relation("S", (Column("a", "INT"), Column("b", "TEXT")))})
    out = []
    for _ in range(draw(st.integers(1, 8))):
        # (mostly lines the C path reads, so that its every branch is met)
        op = draw(st.sampled_from(["+"] * 6 + ["-"] * 6 + ["+2", "*", "#", " +", "-0"]))
        name = draw(st.sampled_from(["R"] * 8 + ["S", "S", "r", "T", " R"]))
        arity = len(named) if name.strip().upper() == "R" else 2
        n = draw(st.sampled_from([arity] * 8 + [arity - 1, arity + 1]))
        cols = named if name.strip().upper() == "R" else schema.relations["S"].columns
        fields = [draw(edge_texts(cols[i % len(cols)]) if draw(st.integers(0, 9))
                       else FIELD_TEXTS) for i in range(n)]
        end = draw(st.sampled_from(["\n"] * 6 + ["", "\r\n", " \n", ",\n"]))
        out.append(op if op == "*" else ",".join([op, name, *fields]) + end)
    return schema, out


def _read(schema: Schema, line: str, lineno: int, native: bool) -> object:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IVMFLOW_NATIVE", "1" if native else "0")
        assert (line_parser(schema) is not None) == native
        return _records(schema, line, lineno)


def _records(schema: Schema, line: str, lineno: int) -> object:
    try:
        return [(repr(r), r.source, [type(v) for v in getattr(r, "row", ())])
                for r in read_updates_from_lines([line], schema, "u.csv", first_line=lineno)]
    except InputError as err:
        return ("error", str(err))


@settings(max_examples=300, deadline=None)
@given(lines())
def test_the_c_parser_reads_every_line_as_python_does(case: tuple[Schema, list[str]],
                                                      ) -> None:
    schema, texts = case
    for lineno, line in enumerate(texts, 1):
        assert _read(schema, line, lineno, True) == _read(schema, line, lineno, False), line


def _edges(col: Column) -> list[str]:
    if col.type == "INT":
        lo, hi = col.int_range
        return [str(v) for v in (lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, -7, 7, 0)]
    if col.type == "DECIMAL":
        before, scale = col.precision - col.scale, col.scale
        out = []
        for k in (0, 1, before - 1, before, before + 1):
            for f in {0, scale - 1, scale, scale + 1} - {-1}:
                for sign in ("", "-"):
                    a = "9" * k if k > 0 else "0"
                    out += [f"{sign}{a}" + (f".{'5' * f}" if f else ""),
                            f"{sign}00{a}" + (f".{'1' * f}" if f else "")]
        return out
    return []


@pytest.mark.parametrize("col", COLUMNS, ids=[f"{c.type}{c.width or ''}_{c.scale}"
                                              for c in COLUMNS])
def test_every_field_text_alone(col: Column) -> None:
    """Each column type, each text of the list and at the type's edges, in a line of
    its own and beside an INT: the C path's records (and errors) are Python's."""
    schema = Schema({"R": Relation("R", (Column("c", col.type, col.scale, col.width),
                                         Column("x", "INT")))})
    texts = sorted(set(FIELD_LIST + _edges(col)))
    for text in texts:
        for line in (f"+,R,{text},1\n", f"-,R,1,{text}" if col.type == "INT" else
                     f"-,R,{text},-1"):
            assert _read(schema, line, 9, True) == _read(schema, line, 9, False), line


TPCH_LINEITEM = Relation("lineitem", (
    Column("l_orderkey", "INT"), Column("l_quantity", "DECIMAL", 2, 15),
    Column("l_extendedprice", "DECIMAL", 2, 15), Column("l_shipdate", "DATE"),
    Column("l_shipmode", "TEXT"), Column("l_comment", "TEXT")))


def test_common_lines_take_the_c_path_and_share_values(monkeypatch: pytest.MonkeyPatch,
                                                        ) -> None:
    monkeypatch.setenv("IVMFLOW_NATIVE", "auto")
    schema = Schema({"lineitem": TPCH_LINEITEM})
    parse = line_parser(schema)
    assert parse is not None
    a = parse("+,lineitem,1,17.00,21168.23,1996-03-13,TRUCK,\"egular, courts\"\n", "u", 1)
    b = parse("-,lineitem,2,17.00,45983.16,1996-03-13,TRUCK,ly final dependencies\n", "u", 2)
    assert a == Update("+", "lineitem", (1, Decimal("17.00"), Decimal("21168.23"),
                                          datetime.date(1996, 3, 13), "TRUCK",
                                          "egular, courts"))
    assert isinstance(b, Update) and b.op == "-" and b.source == "u:2"
    assert a.row[1] is b.row[1] and a.row[3] is b.row[3] and a.row[4] is b.row[4]
    # Lines the C path leaves to the Python parser: a quote doubled, a count, a NULL
    # written "" in a DATE column, a bad value; a field of another form goes through
    # its column's Python parser.
    for line in ('+,lineitem,1,17.00,1.00,1996-03-13,TRUCK,"a ""b"""',
                 "+2,lineitem,1,17.00,1.00,1996-03-13,TRUCK,x",
                 '+,lineitem,1,17.00,1.00,"",TRUCK,x',
                 "+,lineitem,1,17.00,1.00,1996-02-30,TRUCK,x"):
        assert parse(line, "u", 3) is None
    c = parse("+,lineitem,1,17.0,1.00,1996-03-13,TRUCK,x", "u", 4)
    assert c is not None and str(c.row[1]) == "17.00"


def test_native_off_reads_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IVMFLOW_NATIVE", "0")
    assert line_parser(Schema({"lineitem": TPCH_LINEITEM})) is None
