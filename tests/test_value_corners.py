"""Values at the corners, against DuckDB 1.5.5 (issue 41, items 3 and 4).

A property test draws row expressions over NULLs, zeros, negatives, each type's extremes
and mixed types (TINYINT ... BIGINT, DECIMAL, DOUBLE with NaN and infinities, VARCHAR
holding numbers and not, BOOLEAN, DATE, TIMESTAMP), runs each through ivmflow (a
one-table query over a small stream of inserts and a delete) and through DuckDB on the
same data, and compares: the same rows, or both fail (DuckDB's Out of Range or
Conversion Error, ivmflow's :class:`~core.errors.EvaluationError` naming the record),
or both refuse the query (DuckDB's binder, ivmflow's compiler). The number of
expressions drawn is printed at the end of the module (``-s``, or the terminal summary).

The other tests pin each corner changed, input checked against declared types (the
update CSV read as DuckDB's CSV reader reads it), the empty string in CSV in and out,
joins across types, and an overflow met while applying an update naming the record
(``--on-error skip`` skips it).
"""

from __future__ import annotations

import datetime
import math
import os
import re
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import EvaluationError, InputError, QueryError
from core.records import Update, format_update
from dataflow.api import compile_query

duckdb = pytest.importorskip("duckdb")

# -- the table every drawn expression reads -----------------------------------------------

COLUMNS: dict[str, str] = {
    "i": "INTEGER", "b": "BIGINT", "s": "SMALLINT", "ti": "TINYINT",
    "d": "DECIMAL(9,2)", "e": "DECIMAL(18,4)", "f": "DOUBLE", "v": "VARCHAR",
    "bo": "BOOLEAN", "dt": "DATE", "ts": "TIMESTAMP",
}
SCHEMA = "CREATE TABLE t(" + ", ".join(f"{c} {t}" for c, t in COLUMNS.items()) + ");\n"
_COLUMN_NAMES = re.compile(r"\b(" + "|".join(COLUMNS) + r")\b")

_D = Decimal
POOLS: dict[str, list[Any]] = {
    "i": [None, 0, 1, -1, 2, 7, 1000, 46341, -(2**31), 2**31 - 1],
    "b": [None, 0, 1, -1, 3037000500, 10**12, -(2**63), 2**63 - 1],
    "s": [None, 0, 1, -1, 181, 200, -(2**15), 2**15 - 1],
    "ti": [None, 0, 1, -1, 12, 100, -128, 127],
    "d": [None, _D("0.00"), _D("1.50"), _D("-2.25"), _D("0.01"), _D("100.00"),
          _D("9999999.99"), _D("-9999999.99")],
    "e": [None, _D("0.0000"), _D("1.2345"), _D("-0.0001"), _D("99999999999999.9999"),
          _D("-99999999999999.9999")],
    "f": [None, 0.0, 1.5, -2.5, 3.0, 1e308, -1e-308, math.inf, -math.inf, math.nan],
    "v": [None, "", "0", "12", "-3", "x", " 7 ", "1.5", "2147483648", "true",
          "2020-01-02"],
    "bo": [None, True, False],
    "dt": [None, datetime.date(2020, 1, 2), datetime.date(1970, 1, 1),
           datetime.date(1999, 12, 31)],
    "ts": [None, datetime.datetime(2020, 1, 2), datetime.datetime(2020, 1, 2, 10, 30),
           datetime.datetime(1970, 1, 1, 0, 0, 1)],
}

INT_COLS = ["i", "b", "s", "ti"]
DEC_COLS = ["d", "e"]
INT_LITS = ["0", "1", "-1", "2", "7", "127", "128", "-128", "32767", "2147483647",
            "-2147483648", "3000000000", "9223372036854775807", "NULL"]
DEC_LITS = ["1.5", "0.00", "-2.25", "99.99", "0.001", "12345678.9"]
FLOAT_LITS = ["1e0", "2.5e1", "-1e300", "0e0", "CAST('nan' AS DOUBLE)",
              "CAST('inf' AS DOUBLE)"]
INT_TYPES = ["TINYINT", "SMALLINT", "INTEGER", "BIGINT"]
DEC_TYPES = ["DECIMAL(5,2)", "DECIMAL(18,4)", "DECIMAL(38,0)", "DECIMAL(4,4)"]
STR_LITS = ["'12'", "'x'", "'-3'", "''", "'1.5'", "'true'", "'2020-01-02'"]
CMP = ["=", "<>", "<", "<=", ">", ">="]

DRAWN: Counter[str] = Counter()
"""Expressions drawn (and how they came out), printed at the end of the module."""


# -- the expression grammar ----------------------------------------------------------------

def _int(draw: Any, depth: int) -> str:
    kind = draw(st.sampled_from(["col", "col", "lit", "op", "op", "neg", "abs", "cast",
                                 "case", "coalesce"] if depth > 0 else ["col", "lit"]))
    if kind == "col":
        return draw(st.sampled_from(INT_COLS))
    if kind == "lit":
        return draw(st.sampled_from(INT_LITS))
    if kind == "op":
        op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
        return f"({_int(draw, depth - 1)} {op} {_int(draw, depth - 1)})"
    if kind == "neg":
        return f"(-{_int(draw, depth - 1)})"
    if kind == "abs":
        return f"abs({_int(draw, depth - 1)})"
    if kind == "cast":
        source = draw(st.sampled_from(["int", "dec", "float", "text", "bool"]))
        inner = {"int": _int, "dec": _dec, "float": _float, "text": _text,
                 "bool": _safe_bool}[source](draw, depth - 1)
        return f"CAST({inner} AS {draw(st.sampled_from(INT_TYPES))})"
    if kind == "case":
        return (f"CASE WHEN {_bool(draw, depth - 1)} THEN {_int(draw, depth - 1)} "
                f"ELSE {_int(draw, depth - 1)} END")
    return f"COALESCE({_int(draw, depth - 1)}, {_int(draw, depth - 1)})"


def _dec(draw: Any, depth: int) -> str:
    kind = draw(st.sampled_from(["col", "col", "lit", "op", "op", "mixed", "neg",
                                 "round", "cast", "case"] if depth > 0 else ["col", "lit"]))
    if kind == "col":
        return draw(st.sampled_from(DEC_COLS))
    if kind == "lit":
        return draw(st.sampled_from(DEC_LITS))
    if kind in ("op", "mixed"):
        op = draw(st.sampled_from(["+", "-", "*", "%"]))
        other = _dec(draw, depth - 1) if kind == "op" else _int(draw, depth - 1)
        left, right = _dec(draw, depth - 1), other
        if draw(st.booleans()):
            left, right = right, left
        return f"({left} {op} {right})"
    if kind == "neg":
        return f"(-{_dec(draw, depth - 1)})"
    if kind == "round":
        return f"round({_dec(draw, depth - 1)}, {draw(st.sampled_from([0, 1, 3]))})"
    if kind == "cast":
        source = draw(st.sampled_from(["int", "dec", "float", "text"]))
        inner = {"int": _int, "dec": _dec, "float": _float, "text": _text}[source](
            draw, depth - 1)
        return f"CAST({inner} AS {draw(st.sampled_from(DEC_TYPES))})"
    return (f"CASE WHEN {_bool(draw, depth - 1)} THEN {_dec(draw, depth - 1)} "
            f"ELSE {_int(draw, depth - 1)} END")


def _num(draw: Any, depth: int) -> str:
    return draw(st.sampled_from([_int, _dec, _float]))(draw, depth)


def _float(draw: Any, depth: int) -> str:
    kind = draw(st.sampled_from(["col", "lit", "div", "div", "intdiv", "op", "mod",
                                 "cast", "round"] if depth > 0 else ["col", "lit"]))
    if kind == "col":
        return "f"
    if kind == "lit":
        return draw(st.sampled_from(FLOAT_LITS))
    if kind == "div":
        return f"({_num(draw, depth - 1)} / {_num(draw, depth - 1)})"
    if kind == "intdiv":  # (// of a DOUBLE or DECIMAL divides, NULL for a zero)
        return f"({_float(draw, depth - 1)} // {_num(draw, depth - 1)})"
    if kind == "op":
        op = draw(st.sampled_from(["+", "-", "*"]))
        return f"({_float(draw, depth - 1)} {op} {_num(draw, depth - 1)})"
    if kind == "mod":
        return f"({_float(draw, depth - 1)} % {_float(draw, depth - 1)})"
    if kind == "round":
        return f"round({_float(draw, depth - 1)}, {draw(st.sampled_from([0, 2, -1]))})"
    source = draw(st.sampled_from(["int", "dec", "text"]))
    inner = {"int": _int, "dec": _dec, "text": _text}[source](draw, depth - 1)
    return f"CAST({inner} AS DOUBLE)"


def _text(draw: Any, depth: int) -> str:
    kind = draw(st.sampled_from(["col", "col", "lit", "cast", "concat"] if depth > 0
                                else ["col", "lit"]))
    if kind == "col":
        return "v"
    if kind == "lit":
        return draw(st.sampled_from(STR_LITS))
    if kind == "cast":
        return f"CAST({_num(draw, depth - 1)} AS VARCHAR)"
    left = draw(st.sampled_from([_text, _text, _int, _dec]))(draw, depth - 1)
    return f"({left} || {_text(draw, depth - 1)})"


def _safe_term(draw: Any) -> str:
    """A value that cannot raise (a column, a literal, a DOUBLE division)."""
    kind = draw(st.sampled_from(["int", "dec", "float", "div"]))
    if kind == "int":
        return draw(st.sampled_from(INT_COLS + INT_LITS))
    if kind == "dec":
        return draw(st.sampled_from(DEC_COLS + DEC_LITS))
    if kind == "float":
        return draw(st.sampled_from(["f", *FLOAT_LITS]))
    return f"({draw(st.sampled_from(INT_COLS + DEC_COLS))} / " \
           f"{draw(st.sampled_from(INT_COLS + DEC_COLS + ['f', '0']))})"


def _safe_bool(draw: Any, depth: int = 1) -> str:
    """A condition that cannot raise: what AND and OR combine (DuckDB evaluates their
    operands in an order of its optimizer's choosing, so an operand that raises would
    make the outcome depend on it)."""
    kind = draw(st.sampled_from(["cmp", "cmp", "null", "bo", "between", "in"]
                                + (["and", "or", "not"] if depth > 0 else [])))
    if kind == "cmp":
        return f"({_safe_term(draw)} {draw(st.sampled_from(CMP))} {_safe_term(draw)})"
    if kind == "null":
        return f"({_safe_term(draw)} IS {draw(st.sampled_from(['', 'NOT ']))}NULL)"
    if kind == "bo":
        return draw(st.sampled_from(["bo", "(NOT bo)", "(bo = 1)", "(bo IS TRUE)"]))
    if kind == "between":
        return f"({_safe_term(draw)} BETWEEN {_safe_term(draw)} AND {_safe_term(draw)})"
    if kind == "in":
        items = draw(st.lists(st.sampled_from(INT_LITS + DEC_LITS), min_size=1,
                              max_size=3))
        return f"({draw(st.sampled_from(INT_COLS + DEC_COLS + ['f']))} IN " \
               f"({', '.join(items)}))"
    if kind == "not":
        return f"(NOT {_safe_bool(draw, depth - 1)})"
    op = "AND" if kind == "and" else "OR"
    return f"({_safe_bool(draw, depth - 1)} {op} {_safe_bool(draw, depth - 1)})"


def _bool(draw: Any, depth: int) -> str:
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "safe", "text", "typed", "not",
                                 "null"]))
    if kind == "cmp":
        # (both sides read a column: DuckDB's optimizer moves a constant across the
        # arithmetic of the other side, 0 = 2147483647 * s becoming s = 0, which
        # changes whether it overflows)
        sides = [_num(draw, depth), _num(draw, depth)]
        sides = [x if _COLUMN_NAMES.search(x.replace("'", " ' "))
                 else draw(st.sampled_from(INT_COLS + DEC_COLS + ["f"])) for x in sides]
        return f"({sides[0]} {draw(st.sampled_from(CMP))} {sides[1]})"
    if kind == "safe":
        return _safe_bool(draw)
    if kind == "text":  # (a string against another type: = and <> cast it, < refused)
        other = draw(st.sampled_from([_int, _dec, _float]))(draw, max(depth - 1, 0))
        left, right = _text(draw, max(depth - 1, 0)), other
        if draw(st.booleans()):
            left, right = right, left
        return f"({left} {draw(st.sampled_from(CMP))} {right})"
    if kind == "typed":  # (dates, timestamps, booleans against each other and strings)
        left = draw(st.sampled_from(["dt", "ts", "bo", "v", "DATE '2020-01-02'",
                                     "TIMESTAMP '2020-01-02 10:30:00'"]))
        right = draw(st.sampled_from(["dt", "ts", "bo", "v", "i", "'2020-01-02'",
                                      "'true'", "TRUE"]))
        return f"({left} {draw(st.sampled_from(['=', '<>', '<']))} {right})"
    if kind == "not":
        return f"(NOT {_bool(draw, max(depth - 1, 0))})"
    # (over a term that cannot raise: DuckDB rewrites ``(a + b) IS NULL`` to tests of
    # a and b, so an overflow of a + b never happens there)
    return f"({_safe_term(draw)} IS {draw(st.sampled_from(['', 'NOT ']))}NULL)"


@st.composite
def expressions(draw: Any) -> str:
    """One row expression (an integer, DECIMAL, DOUBLE, string or boolean one) that
    reads a column (a SELECT item over no table is not maintained)."""
    depth = draw(st.integers(0, 3))
    expr = draw(st.sampled_from([_int, _int, _dec, _dec, _float, _text, _bool]))(
        draw, depth)
    if not _COLUMN_NAMES.search(expr.replace("'", " ' ")):
        # (not IS NULL over it: DuckDB rewrites (1 + 2147483647) IS NULL, no overflow)
        expr = f"CASE WHEN i IS NOT NULL THEN {expr} END"
    return expr


@st.composite
def row_sets(draw: Any) -> list[tuple[Any, ...]]:
    """One to four rows, each column's value from its pool of corners."""
    row = st.tuples(*(st.sampled_from(POOLS[c]) for c in COLUMNS))
    return draw(st.lists(row, min_size=1, max_size=4))


# -- running both ------------------------------------------------------------------------

def _key(value: Any) -> Any:
    """A value as the two systems' answers are compared: NaN equal to NaN, -0.0 as 0.0,
    numbers by value (an INT and an equal DECIMAL are one), floats to 12 digits."""
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if math.isinf(value):
            return value
        return float(f"{value:.12g}") + 0.0
    if isinstance(value, Decimal):
        return float(f"{float(value):.12g}") if value != value.to_integral_value() \
            else int(value)
    return value


_DUCK: list[Any] = []


def _duck() -> Any:
    """One DuckDB connection holding table ``t`` (emptied for each query)."""
    if not _DUCK:
        con = duckdb.connect()
        con.execute(SCHEMA)
        _DUCK.append(con)
    return _DUCK[0]


def duckdb_outcome(query: str, rows: list[tuple[Any, ...]]) -> tuple[str, Any]:
    """("rows", Counter) or ("refused", message) (a binder or parser error: the query is
    not valid) or ("error", message) (DuckDB failed while computing it)."""
    con = _duck()
    con.execute("DELETE FROM t")
    if rows:
        marks = ", ".join(["(" + ", ".join("?" for _ in COLUMNS) + ")"] * len(rows))
        con.execute(f"INSERT INTO t VALUES {marks}", [v for r in rows for v in r])
    try:
        got = con.execute(query).fetchall()
    except (duckdb.BinderException, duckdb.ParserException) as err:
        return "refused", str(err).splitlines()[0]
    except duckdb.Error as err:
        return "error", str(err).splitlines()[0]
    return "rows", Counter(tuple(_key(v) for v in r) for r in got)


def ivmflow_outcome(query: str, rows: list[tuple[Any, ...]]) -> tuple[str, Any]:
    """The same for ivmflow: every row inserted in epoch 1, the first deleted in epoch
    2; ("rows", [after epoch 1, after epoch 2]), ("refused", ...) for a
    :class:`QueryError`, ("error", ...) for an :class:`InputError` while applying."""
    try:
        view = compile_query(SCHEMA + query + ";\n").maintain()
    except QueryError as err:
        return "refused", str(err)
    acc: Counter[tuple[Any, ...]] = Counter()
    out = []
    try:
        for k, batch in enumerate([[("+", r) for r in rows], [("-", rows[0])]]):
            for n, (op, r) in enumerate(batch):
                view.apply(Update(op, "t", r, 1, f"u.csv:{k * 10 + n + 1}"))
            for mult, r in view.end_epoch().rows:
                acc[tuple(_key(v) for v in r)] += mult
            out.append(+acc)
    except InputError as err:
        return "error", str(err)
    return "rows", out


def check_agrees(query: str, rows: list[tuple[Any, ...]], condition: str | None = None
                 ) -> str:
    """Assert that ivmflow and DuckDB agree on ``query`` over ``rows``; returns how.
    ``condition``: the query's WHERE condition."""
    kind, got = ivmflow_outcome(query, rows)
    want_kind, want = duckdb_outcome(query, rows)
    where = f"\nquery: {query}\nrows: {rows}"
    if kind == "refused" and "cannot cast one to the other" in got and want_kind != \
            "refused":
        # (DATE against BOOLEAN, say: DuckDB's error comes when a value is cast, so
        # not when every value it meets is NULL; ivmflow refuses the query)
        assert want_kind == "rows" or "Unimplemented type for cast" in want, want
        return "refused"
    if want_kind == "rows" and kind == "error" and condition is not None:
        # DuckDB's filter can skip evaluating part of a condition its optimizer finds
        # it does not need; the condition as a value is what SQL says it computes
        value_kind, value = duckdb_outcome(f"SELECT {condition} FROM t", rows)
        assert value_kind == "error", f"DuckDB answers {dict(want)} (the condition " \
                                      f"{dict(value)}), ivmflow: {got}{where}"
        return "error"
    if want_kind == "rows":
        assert kind == "rows", f"DuckDB answers {dict(want)}, ivmflow: {got}{where}"
        assert got[0] == want, f"after the inserts: {dict(got[0])} != {dict(want)}{where}"
        _, rest = duckdb_outcome(query, rows[1:])
        assert got[1] == rest, f"after the delete: {dict(got[1])} != {dict(rest)}{where}"
        return "rows"
    if want_kind == "error":
        assert kind == "error", f"DuckDB fails ({want}), ivmflow: {kind} {got}{where}"
        return "error"
    assert kind == "refused", f"DuckDB refuses ({want}), ivmflow: {kind} {got}{where}"
    return "refused"


def _examples(factor: int = 1) -> int:
    return settings.default.max_examples * factor


@settings(max_examples=_examples(3), suppress_health_check=[HealthCheck.too_slow,
                                                            HealthCheck.filter_too_much])
@given(expr=expressions(), rows=row_sets())
def test_expressions_agree_with_duckdb(expr: str, rows: list[tuple[Any, ...]]) -> None:
    """``SELECT expr FROM t``: every value, NULL, overflow and conversion error as DuckDB."""
    DRAWN["select"] += 1
    DRAWN["select " + check_agrees(f"SELECT {expr} AS x FROM t", rows)] += 1


@st.composite
def conditions(draw: Any) -> str:
    return _bool(draw, draw(st.integers(0, 2)))


@settings(max_examples=_examples(2), suppress_health_check=[HealthCheck.too_slow])
@given(cond=conditions(), rows=row_sets())
def test_conditions_agree_with_duckdb(cond: str, rows: list[tuple[Any, ...]]) -> None:
    """``SELECT i, v FROM t WHERE cond``: a row is kept exactly when DuckDB keeps it
    (NaN above every number, a division by zero an infinity)."""
    DRAWN["where"] += 1
    DRAWN["where " + check_agrees(f"SELECT i, v FROM t WHERE {cond}", rows, cond)] += 1


class _DrawnReport:
    """Prints how many expressions were drawn, in pytest's terminal summary."""

    @staticmethod
    def pytest_terminal_summary(terminalreporter: Any) -> None:
        total = DRAWN["select"] + DRAWN["where"]
        if not total:
            return
        parts = ", ".join(f"{k}: {v}" for k, v in sorted(DRAWN.items()))
        line = f"value corners: {total} expressions drawn and compared with DuckDB " \
               f"({parts})"
        terminalreporter.write_line(line)
        out = os.environ.get("IVMFLOW_CORNERS_REPORT")
        if out:
            Path(out).write_text(line + "\n")


@pytest.fixture(scope="module", autouse=True)
def _report_drawn(request: pytest.FixtureRequest) -> None:
    manager = request.config.pluginmanager
    if not manager.has_plugin("ivmflow-value-corners"):
        manager.register(_DrawnReport(), "ivmflow-value-corners")


# -- each corner changed, pinned --------------------------------------------------------------

CORNERS: list[tuple[str, list[tuple[Any, ...]]]] = [
    # division by zero: inf / -inf / NaN for /, NULL for // and % (NaN for a DOUBLE %)
    ("SELECT i / j, d / e, f / g FROM z",
     [(1, 0, _D("1.5"), _D("0"), 2.0, 0.0), (-1, 0, _D("-1.5"), _D("0"), -2.0, -0.0),
      (0, 0, _D("0"), _D("0"), 0.0, 0.0)]),
    ("SELECT i // j, i % j, d // e, d % e, f // g, f % g FROM z",
     [(7, 0, _D("1.5"), _D("0"), 2.5, 0.0), (-7, 2, _D("-7.5"), _D("2"), -7.5, 2.0)]),
    ("SELECT i FROM z WHERE i / j > 1", [(1, 0, None, None, None, None),
                                         (0, 0, None, None, None, None)]),
    # NaN is greater than every number and equal to itself
    ("SELECT f, f > 1e308, f = f, f < g FROM z",
     [(0, 0, None, None, math.nan, math.inf), (0, 0, None, None, math.inf, math.nan)]),
    # integer overflow is an error, never a wider type
    ("SELECT i + 1 FROM z", [(2**31 - 1, 0, None, None, None, None)]),
    ("SELECT t + 1, t * t FROM z", [(0, 0, None, None, None, None)]),
    ("SELECT -i FROM z", [(-(2**31), 0, None, None, None, None)]),
    ("SELECT i // j FROM z", [(-(2**31), -1, None, None, None, None)]),
    ("SELECT CAST(i AS TINYINT) FROM z", [(300, 0, None, None, None, None)]),
    ("SELECT CAST(f AS INTEGER) FROM z", [(0, 0, None, None, 2.5, None),
                                          (0, 0, None, None, 3.5, None)]),
    ("SELECT CAST(f AS INTEGER) FROM z", [(0, 0, None, None, math.nan, None)]),
    # DECIMAL arithmetic keeps DuckDB's precision and fails past it
    ("SELECT d * e * d * e FROM z", [(0, 0, _D("9999999.99"), _D("9999999.99"), None,
                                      None)]),
    ("SELECT CAST(d AS DECIMAL(5,2)) FROM z", [(0, 0, _D("1234.56"), None, None, None)]),
    # a string compared with a number: = casts it (an error when it is no number)
    ("SELECT i FROM z WHERE s = i", [(12, 0, None, None, None, None, "12")]),
    ("SELECT i FROM z WHERE s = i", [(12, 0, None, None, None, None, "x")]),
    ("SELECT i FROM z WHERE s = 12", [(12, 0, None, None, None, None, " 12 ")]),
    ("SELECT i FROM z WHERE s < 12", [(12, 0, None, None, None, None, "12")]),
    # NULL in every position
    ("SELECT i + NULL, NULL / j, i = NULL, COALESCE(NULL, i), i IN (1, NULL), "
     "j IN (2, NULL), i IS NULL, -i, abs(i), i // j, CAST(i AS TINYINT) FROM z",
     [(None, 0, None, None, None, None), (1, 1, None, None, None, None)]),
    # COALESCE's later arguments only where the earlier ones are NULL
    ("SELECT COALESCE(j, i + 1) FROM z", [(2**31 - 1, 0, None, None, None, None)]),
]
CORNER_SCHEMA = ("CREATE TABLE z(i INTEGER, j INTEGER, d DECIMAL(9,2), e DECIMAL(9,2), "
                 "f DOUBLE, g DOUBLE, s VARCHAR, t TINYINT);\n")


def _corner_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(r) + (None,) * (8 - len(r)) for r in rows]


@pytest.mark.parametrize(("query", "rows"), CORNERS, ids=[q for q, _ in CORNERS])
def test_each_corner_agrees_with_duckdb(query: str, rows: list[tuple[Any, ...]]) -> None:
    rows = _corner_rows(rows)
    con = duckdb.connect()
    con.execute(CORNER_SCHEMA)
    con.executemany("INSERT INTO z VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [list(r) for r in rows])
    try:
        want: Any = Counter(tuple(_key(v) for v in r) for r in con.execute(query).fetchall())
        want_kind = "rows"
    except (duckdb.BinderException, duckdb.ParserException):
        want_kind = "refused"
    except duckdb.Error:
        want_kind = "error"
    try:
        view = compile_query(CORNER_SCHEMA + query + ";\n").maintain()
    except QueryError:
        assert want_kind == "refused", query
        return
    try:
        for n, r in enumerate(rows, 1):
            view.apply(Update("+", "z", r, 1, f"u.csv:{n}"))
        got = Counter()
        for mult, r in view.end_epoch().rows:
            got[tuple(_key(v) for v in r)] += mult
    except EvaluationError:
        assert want_kind == "error", query
        return
    assert want_kind == "rows", f"{query}: DuckDB {want_kind}, ivmflow {dict(got)}"
    assert +got == want, query


# -- an error met applying an update names the record; skip skips it ------------------------

def test_overflow_names_the_record_and_can_be_skipped(tmp_path: Path) -> None:
    from connectors.files import CollectingSink, read_updates_from_lines
    from dataflow.circuit.drive import drive

    sql = "CREATE TABLE r(k INTEGER, x INTEGER); SELECT k, x * 2 AS y FROM r"
    lines = ["+,r,1,5", "+,r,2,2000000000", "+,r,3,7"]
    schema = compile_query(sql).schema
    view = compile_query(sql).maintain()
    with pytest.raises(InputError) as info:
        drive(view, read_updates_from_lines(lines, schema, "u.csv"), epoch_size=10,
              on_delta=lambda d: None)
    err = info.value
    assert err.source == "u.csv:2" and err.record == "+,r,2,2000000000"
    assert "x * 2" in err.expected and "INTEGER" in err.expected
    assert "4000000000" in err.found and "--on-error skip" in str(err)

    sink = CollectingSink()
    view = compile_query(sql).maintain()
    drive(view, read_updates_from_lines(lines, schema, "u.csv"), epoch_size=10,
          on_delta=sink.write_epoch, on_error="skip", dead_letter=sink)
    assert sorted(r for _e, _m, r in sink.rows()) == [(1, 10), (3, 14)]
    assert [e.source for e in sink.dead_letters] == ["u.csv:2"]


def test_a_string_that_does_not_convert_names_the_record() -> None:
    from connectors.files import read_updates_from_lines
    from dataflow.circuit.drive import drive

    sql = ("CREATE TABLE r(name VARCHAR); CREATE TABLE s(x INTEGER, y INTEGER);"
           "SELECT r.name, s.y FROM r, s WHERE r.name = s.x")
    schema = compile_query(sql).schema
    view = compile_query(sql).maintain()
    with pytest.raises(InputError) as info:
        drive(view, read_updates_from_lines(["+,s,12,1", "+,r,12", "+,r,x"], schema,
                                            "u.csv"), on_delta=lambda d: None)
    assert info.value.source == "u.csv:3" and "'x'" in info.value.found
    assert "r.name = s.x" in info.value.expected


# -- joins across types ------------------------------------------------------------------------

JOINS = [
    # VARCHAR = INTEGER: the string is cast (the literal form the same)
    ("CREATE TABLE r(name VARCHAR, k INTEGER); CREATE TABLE s(x INTEGER, y INTEGER);",
     "SELECT r.k, s.y FROM r, s WHERE r.name = s.x",
     {"r": [("12", 1), (" 7 ", 2), (None, 3), ("12.4", 4)], "s": [(12, 10), (7, 20)]}),
    ("CREATE TABLE r(name VARCHAR, k INTEGER); CREATE TABLE s(x INTEGER, y INTEGER);",
     "SELECT r.k, s.y FROM r JOIN s ON s.x = r.name",
     {"r": [("12", 1), ("x", 2)], "s": [(12, 10)]}),
    # DATE = TIMESTAMP: as TIMESTAMPs
    ("CREATE TABLE r(d DATE, k INTEGER); CREATE TABLE s(t TIMESTAMP, y INTEGER);",
     "SELECT r.k, s.y FROM r, s WHERE r.d = s.t",
     {"r": [(datetime.date(2020, 1, 2), 1)],
      "s": [(datetime.datetime(2020, 1, 2), 10), (datetime.datetime(2020, 1, 2, 1), 20)]}),
    # DECIMAL = DOUBLE: as DOUBLEs
    ("CREATE TABLE r(p DECIMAL(9,2), k INTEGER); CREATE TABLE s(q DOUBLE, y INTEGER);",
     "SELECT r.k, s.y FROM r, s WHERE r.p = s.q",
     {"r": [(_D("0.10"), 1), (_D("1.47"), 2)], "s": [(0.1, 10), (1.47, 20), (1.5, 30)]}),
    # INTEGER = DOUBLE, BIGINT = DECIMAL, BOOLEAN = INTEGER
    ("CREATE TABLE r(a INTEGER, b BIGINT, c BOOLEAN); "
     "CREATE TABLE s(x DOUBLE, y DECIMAL(5,1), z INTEGER);",
     "SELECT r.a, s.z FROM r, s WHERE r.a = s.x AND r.b = s.y AND r.c = s.z",
     {"r": [(1, 2, True), (3, 4, False)], "s": [(1.0, _D("2.0"), 1), (3.0, _D("4.0"), 0),
                                                 (3.0, _D("4.0"), 2)]}),
    # a string column against a number column twice, and a string = string join beside
    ("CREATE TABLE r(a VARCHAR, b VARCHAR); CREATE TABLE s(x INTEGER, y VARCHAR);",
     "SELECT r.a, r.b, s.x FROM r, s WHERE r.a = s.x AND r.b = s.x",
     {"r": [("1", "1"), ("1", " 1"), ("1", "2")], "s": [(1, "a"), (2, "b")]}),
    ("CREATE TABLE r(a VARCHAR, b INTEGER); CREATE TABLE s(x INTEGER, y VARCHAR);",
     "SELECT r.b, s.x FROM r, s WHERE r.a = s.x AND r.a = s.y",
     {"r": [("1", 1), ("01", 2)], "s": [(1, "1"), (1, "01")]}),
    # DATE = INTEGER: DuckDB has no such cast (refused)
    ("CREATE TABLE r(d DATE); CREATE TABLE s(x INTEGER);",
     "SELECT s.x FROM r, s WHERE r.d = s.x", {"r": [(datetime.date(2020, 1, 2),)],
                                             "s": [(1,)]}),
]


@pytest.mark.parametrize(("tables", "query", "data"), JOINS, ids=[q for _, q, _ in JOINS])
def test_joins_across_types_agree_with_duckdb(tables: str, query: str,
                                              data: dict[str, list[tuple[Any, ...]]]) -> None:
    con = duckdb.connect()
    con.execute(tables)
    for rel, rows in data.items():
        marks = ", ".join("?" for _ in rows[0])
        con.executemany(f"INSERT INTO {rel} VALUES ({marks})", [list(r) for r in rows])
    try:
        want: Any = Counter(tuple(_key(v) for v in r) for r in con.execute(query).fetchall())
        want_kind = "rows"
    except (duckdb.BinderException, duckdb.ParserException):
        want_kind = "refused"
    except duckdb.Error:
        want_kind = "error"
    try:
        view = compile_query(tables + query).maintain()
    except QueryError as err:
        assert want_kind in ("refused", "error"), f"{query}: {err}"
        assert "cannot cast" in str(err)
        return
    try:
        for rel, rows in data.items():
            for r in rows:
                view.apply(Update("+", rel, r))
        got = Counter()
        for mult, r in view.end_epoch().rows:
            got[tuple(_key(v) for v in r)] += mult
    except EvaluationError:
        assert want_kind == "error", query
        return
    assert want_kind == "rows", f"{query}: DuckDB {want_kind}, ivmflow {dict(got)}"
    assert +got == want, query


# -- input checked against declared types (the update CSV as DuckDB's CSV reader) ------------

INPUTS: list[tuple[str, str]] = [
    ("DECIMAL(5,2)", "12345.67"), ("DECIMAL(5,2)", "123.45"), ("DECIMAL(5,2)", "123.455"),
    ("DECIMAL(5,2)", "-123.455"), ("DECIMAL(5,2)", "999.995"), ("DECIMAL(5,2)", "1.005"),
    ("DECIMAL(5,2)", "1e2"), ("DECIMAL(5,2)", "1e3"), ("DECIMAL(5,2)", ".5"),
    ("DECIMAL(5,2)", "abc"), ("DECIMAL(5,2)", "NaN"), ("DECIMAL(38,0)", "1.5"),
    ("DECIMAL(4,4)", "0.99995"), ("DECIMAL(18,3)", "1e20"),
    ("INTEGER", "3099999999"), ("INTEGER", "2147483647"), ("INTEGER", "-2147483648"),
    ("INTEGER", "-2147483649"), ("INTEGER", "12.5"), ("INTEGER", "-12.5"),
    ("INTEGER", "1e1"), ("INTEGER", " 12 "), ("INTEGER", "+12"), ("INTEGER", "0x10"),
    ("INTEGER", "0b11"), ("INTEGER", "1_000"), ("INTEGER", "1__0"), ("INTEGER", "-0x10"),
    ("INTEGER", "2147483647.5"), ("INTEGER", "abc"), ("INTEGER", '""'),
    ("BIGINT", str(2**70)), ("BIGINT", str(2**63)), ("BIGINT", str(2**63 - 1)),
    ("BIGINT", str(-(2**63))), ("SMALLINT", "32768"), ("SMALLINT", "-32768"),
    ("TINYINT", "128"), ("TINYINT", "-129"), ("TINYINT", "127"), ("HUGEINT", str(2**127)),
    ("HUGEINT", str(2**127 - 1)),
    ("BOOLEAN", "true"), ("BOOLEAN", "T"), ("BOOLEAN", "yes"), ("BOOLEAN", "y"),
    ("BOOLEAN", "1"), ("BOOLEAN", "0"), ("BOOLEAN", "n"), ("BOOLEAN", "False"),
    ("BOOLEAN", "off"), ("BOOLEAN", "2"), ("BOOLEAN", '""'),
    ("DATE", "2020-01-01"), ("DATE", "2020-1-1"), ("DATE", "2020/01/01"),
    ("DATE", "2020-02-30"), ("DATE", "2020-01-01 10:00:00"), ("DATE", "20200101"),
    ("DATE", "epoch"), ("DATE", "2020-13-01"),
    ("TIMESTAMP", "2020-01-01 10:00:00"), ("TIMESTAMP", "2020-01-01T10:00:00"),
    ("TIMESTAMP", "2020-01-01"), ("TIMESTAMP", "2020-01-01 10:00"),
    ("TIMESTAMP", "2020-01-01 10:00:00.1234567"), ("TIMESTAMP", "2020-01-01 25:00:00"),
    ("TIMESTAMP", "2020-01-01 10:00:00+02"),
    ("DOUBLE", "nan"), ("DOUBLE", "inf"), ("DOUBLE", "-inf"), ("DOUBLE", "Infinity"),
    ("DOUBLE", "1e400"), ("DOUBLE", "1e-400"), ("DOUBLE", "abc"),
    ("VARCHAR", ""), ("VARCHAR", '""'), ("VARCHAR", '" "'), ("VARCHAR", "abc"),
    ("VARCHAR", '"a,b"'), ("VARCHAR", '"say ""hi"""'),
    ("INTEGER", ""), ("DATE", ""),
]
"""(declared type, the field as written in the line): each read by ivmflow and by
DuckDB's CSV reader (``allow_quoted_nulls=false``: ``""`` is the empty string)."""

OUT_OF_PYTHON = [("DATE", "10000-01-01"), ("DATE", "0000-01-01"), ("DATE", "infinity"),
                 ("TIMESTAMP", "10000-01-01 00:00:00")]
"""DuckDB holds these; Python's dates stop at years 1 to 9999, so ivmflow refuses them
(as out of range, naming the column)."""


def _duckdb_reads(sql_type: str, field: str, tmp: Path) -> tuple[str, Any]:
    path = tmp / "in.csv"
    path.write_text(f"a,b\n{field},x\n")
    con = duckdb.connect()
    try:
        got = con.execute(
            f"SELECT a FROM read_csv('{path}', header=true, auto_detect=false, "
            f"allow_quoted_nulls=false, columns={{'a': '{sql_type}', 'b': 'VARCHAR'}})"
        ).fetchall()
    except duckdb.Error:
        return "refused", None
    finally:
        con.close()
    return "value", got[0][0]


def _ivmflow_reads(sql_type: str, field: str) -> tuple[str, Any]:
    from connectors.files import read_updates_from_lines

    schema = compile_query(f"CREATE TABLE r(a {sql_type}, b VARCHAR); "
                           "SELECT a FROM r").schema
    try:
        (update,) = list(read_updates_from_lines([f"+,r,{field},x"], schema, "u.csv"))
    except InputError as err:
        assert err.source == "u.csv:1" and "column r.a" in err.expected, err
        return "refused", str(err)
    assert isinstance(update, Update)
    return "value", update.row[0]


@pytest.mark.parametrize(("sql_type", "field"), INPUTS,
                         ids=[f"{t}:{f}" for t, f in INPUTS])
def test_input_is_read_as_duckdbs_csv_reader_reads_it(sql_type: str, field: str,
                                                      tmp_path: Path) -> None:
    want_kind, want = _duckdb_reads(sql_type, field, tmp_path)
    kind, got = _ivmflow_reads(sql_type, field)
    assert kind == want_kind, f"{sql_type} {field!r}: DuckDB {want_kind} {want!r}, " \
                              f"ivmflow {kind} {got!r}"
    if kind == "value":
        assert _key(got) == _key(want) and type(got) is type(want) or \
            (got is None and want is None), f"{sql_type} {field!r}: {got!r} != {want!r}"


@pytest.mark.parametrize(("sql_type", "field"), OUT_OF_PYTHON)
def test_values_python_cannot_hold_are_refused_as_out_of_range(sql_type: str,
                                                               field: str) -> None:
    kind, message = _ivmflow_reads(sql_type, field)
    assert kind == "refused" and "out of range" in message


def test_out_of_range_input_names_file_line_column_expected_and_found() -> None:
    from connectors.files import read_updates_from_lines

    schema = compile_query("CREATE TABLE r(k INT, p DECIMAL(5,2), n BIGINT); "
                           "SELECT k FROM r").schema
    cases = {"+,r,3099999999,1.00,1": ("INTEGER (-2147483648 to 2147483647) for column r.k",
                                       "'3099999999' (out of range)"),
             "+,r,1,12345.67,1": ("DECIMAL(5,2) (at most 3 digits before the point) for "
                                  "column r.p", "'12345.67' (out of range)"),
             f"+,r,1,1.00,{2**70}": ("BIGINT (-9223372036854775808 to 9223372036854775807) "
                                     "for column r.n", f"'{2**70}' (out of range)")}
    for line, (expected, found) in cases.items():
        with pytest.raises(InputError) as info:
            list(read_updates_from_lines([line], schema, "u.csv"))
        assert (info.value.source, info.value.expected, info.value.found) == \
            ("u.csv:1", expected, found)


def test_kafka_json_values_are_checked_against_declared_types() -> None:
    from connectors.kafka.codec import decode_update

    schema = compile_query("CREATE TABLE r(k INT, p DECIMAL(5,2), n BIGINT, s VARCHAR); "
                           "SELECT k FROM r").schema
    ok = decode_update(b'{"op": "+", "relation": "r", "row": [1, 123.455, 5, ""]}',
                       schema, source="t@0:1")
    assert isinstance(ok, Update) and ok.row == (1, Decimal("123.46"), 5, "")
    for row, column in (("[3099999999, 1, 1, null]", "r.k"), ("[1, 12345.67, 1, null]", "r.p"),
                        (f"[1, 1, {2**70}, null]", "r.n")):
        with pytest.raises(InputError) as info:
            decode_update(f'{{"op": "+", "relation": "r", "row": {row}}}'.encode(), schema,
                          source="t@0:1")
        assert f"column {column}" in info.value.expected
        assert "out of range" in info.value.found


# -- the empty string in CSV, in and out ----------------------------------------------------

def test_empty_string_and_null_round_trip_through_the_csv_files(tmp_path: Path) -> None:
    from connectors.files import DeltaCsvSink, read_updates_from_lines

    sql = "CREATE TABLE r(k INT, s VARCHAR); SELECT k, s FROM r"
    schema = compile_query(sql).schema
    lines = ['+,r,1,""', "+,r,2,", '+,r,3," "', '+,r,4,"a,""b"""']
    updates = list(read_updates_from_lines(lines, schema, "u.csv"))
    assert [u.row for u in updates if isinstance(u, Update)] == \
        [(1, ""), (2, None), (3, " "), (4, 'a,"b"')]
    # an update line written back is read back the same
    again = list(read_updates_from_lines([format_update(u) for u in updates], schema, "w"))
    assert again == updates
    assert format_update(updates[0]) == '+,r,1,""' and format_update(updates[1]) == "+,r,2,"
    view = compile_query(sql).maintain()
    for u in updates:
        assert isinstance(u, Update)
        view.apply(u)
    out = tmp_path / "deltas.csv"
    with DeltaCsvSink(out, ["k", "s"]) as sink:
        sink.write_epoch(view.end_epoch())
    con = duckdb.connect()
    back = con.execute(f"SELECT k, s FROM read_csv('{out}', header=true, auto_detect=false, "
                       "allow_quoted_nulls=false, columns={'epoch': 'INTEGER', "
                       "'mult': 'INTEGER', 'k': 'INTEGER', 's': 'VARCHAR'}) ORDER BY k"
                       ).fetchall()
    assert back == [(1, ""), (2, None), (3, " "), (4, 'a,"b"')]
    text = out.read_text()
    assert '1,1,1,""\n' in text and "1,1,2,\n" in text
