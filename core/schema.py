"""Relation schemas declared by the ``CREATE TABLE`` statements of a query file.

Values of update records are parsed with these types, so the schema is shared by the
plan compiler, the connectors and the runners. A value outside its declared type (an
integer out of its width's range, a DECIMAL with more integer digits than its precision,
a date Python cannot hold) is bad input: :class:`ValueParseError`, which the connectors
turn into an :class:`~core.errors.InputError` naming the record.

Example:
    >>> s = Schema({"G": Relation("G", (Column("src", "INT"), Column("dst", "INT")))})
    >>> s.relation("G").parse_value(0, "7")
    7
    >>> try:
    ...     Column("x", "INT", width=32).parse("3099999999")
    ... except ValueParseError as err:
    ...     print(err)
    column 'x' expects INTEGER (-2147483648 to 2147483647), found '3099999999' (out of range)
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Literal

ColumnType = Literal["INT", "FLOAT", "TEXT", "BOOL", "DECIMAL", "DATE", "TIMESTAMP", "KEY"]
"""Value domains ivmflow understands; SQL type names are mapped onto these. DECIMAL
values are :class:`decimal.Decimal` quantized to the column's scale (exact fixed point:
sums under inserts and deletes never drift), DATE :class:`datetime.date`, TIMESTAMP
:class:`datetime.datetime`. KEY (``IVMFLOW_KEY``) is internal: the hidden join key of an
outer join's keyed view, a tuple only a join reads (never an input or output column)."""

SQL_TYPE_NAMES: dict[str, ColumnType] = {
    "INT": "INT", "INTEGER": "INT", "BIGINT": "INT", "SMALLINT": "INT", "TINYINT": "INT",
    "UBIGINT": "INT", "HUGEINT": "INT", "INT128": "INT",
    "FLOAT": "FLOAT", "DOUBLE": "FLOAT", "REAL": "FLOAT", "FLOAT4": "FLOAT",
    "FLOAT8": "FLOAT", "DECIMAL": "DECIMAL", "NUMERIC": "DECIMAL",
    "DATE": "DATE", "TIMESTAMP": "TIMESTAMP", "DATETIME": "TIMESTAMP",
    "TIMESTAMPNTZ": "TIMESTAMP",
    "TEXT": "TEXT", "VARCHAR": "TEXT", "CHAR": "TEXT", "STRING": "TEXT", "NCHAR": "TEXT",
    "NVARCHAR": "TEXT",
    "BOOL": "BOOL", "BOOLEAN": "BOOL", "IVMFLOW_KEY": "KEY",
}

INT_BITS: dict[str, int] = {
    "TINYINT": 8, "SMALLINT": 16, "INT": 32, "INTEGER": 32, "BIGINT": 64,
    "HUGEINT": 128, "INT128": 128, "UBIGINT": -64,
}
"""The width of each integer type name (as sqlglot spells them: ``INT`` is DuckDB's
INTEGER); a negative width is unsigned (UBIGINT)."""

INT_RANGES: dict[int, tuple[int, int]] = {
    8: (-(2**7), 2**7 - 1), 16: (-(2**15), 2**15 - 1), 32: (-(2**31), 2**31 - 1),
    64: (-(2**63), 2**63 - 1), 128: (-(2**127), 2**127 - 1), -64: (0, 2**64 - 1),
}
"""The values of each integer width (DuckDB's TINYINT ... HUGEINT, UBIGINT)."""

INT_NAMES: dict[int, str] = {8: "TINYINT", 16: "SMALLINT", 32: "INTEGER", 64: "BIGINT",
                             128: "HUGEINT", -64: "UBIGINT"}
"""DuckDB's name of each integer width."""

DECIMAL_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19, 128: 38, -64: 20}
"""The DECIMAL precision an integer type takes in DECIMAL arithmetic (DuckDB)."""

Value = int | float | str | bool | Decimal | datetime.date | datetime.datetime | None
"""One field of a row; ``None`` is SQL NULL."""

Row = tuple[Value, ...]
"""A tuple of a relation or an output row."""

# DuckDB's BOOLEAN words (case-insensitive)
_TRUE = {"true", "t", "1", "yes", "y"}
_FALSE = {"false", "f", "0", "no", "n"}

# DuckDB's integer text beyond what int() reads: hex and binary, and a decimal or
# exponent form (rounded half away from zero: '12.5' is 13, '1e1' is 10).
_HEX = re.compile(r"0[xX]([0-9a-fA-F]+(?:_[0-9a-fA-F]+)*)")
_BIN = re.compile(r"0[bB]([01]+(?:_[01]+)*)")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:_\d+)*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# DuckDB's DATE / TIMESTAMP text: year-month-day with '-', '/', '.' or ' ' between
# (the same one twice), then for a TIMESTAMP an optional time after ' ' or 'T' and an
# optional UTC offset (DuckDB drops it: a TIMESTAMP has no zone); a DATE ignores a time.
_DATE = re.compile(r"(-?\d+)([-/. ])(\d{1,2})\2(\d{1,2})")
_TIME = re.compile(r"(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?"
                   r"(?:\s*(?:Z|[+-]\d{1,2}(?::?\d{2}){0,2}))?")

NAN = math.nan
"""The one NaN object parsed and computed values carry: Python's tuple and dict
equality test identity first, so rows holding it are equal, as DuckDB's NaN = NaN."""


class ValueParseError(ValueError):
    """A field could not be parsed by its column type (the caller adds where it was).
    ``expected`` and ``found`` are the two halves of the message."""

    def __init__(self, message: str, expected: str = "", found: str = "") -> None:
        super().__init__(message)
        self.expected = expected
        self.found = found
        self.out_of_range = False
        """Whether the value has the type's form but lies outside its range."""


def _ymd(text: str, year: str, month: str, day: str) -> tuple[int, int, int]:
    y = int(year)
    if not 1 <= y <= 9999:
        raise OverflowError(text)  # (DuckDB's years go further; Python's stop here)
    return y, int(month), int(day)


def parse_date(text: str) -> datetime.date:
    """A DATE as DuckDB reads it (``2020-1-5``, ``2020/01/05``, a time part ignored);
    years 1 to 9999 (Python's; DuckDB's range is wider, and those are refused).

    >>> parse_date("2020-1-5"), parse_date(" 1998/09/02 10:00:00")
    (datetime.date(2020, 1, 5), datetime.date(1998, 9, 2))
    """
    s = text.strip()
    low = s.lower()
    if low == "epoch":
        return datetime.date(1970, 1, 1)
    if low in ("infinity", "-infinity"):
        raise OverflowError(text)
    m = _DATE.match(s)
    if m is None or not _TIME.fullmatch(s, m.end()):
        raise ValueError(text)
    return datetime.date(*_ymd(text, m.group(1), m.group(3), m.group(4)))


def parse_timestamp(text: str) -> datetime.datetime:
    """A TIMESTAMP as DuckDB reads it (date, optional ``HH:MM[:SS[.fraction]]`` after a
    space or ``T``; fractions past microseconds dropped, a UTC offset dropped).

    >>> parse_timestamp("1998-09-02T10:00"), parse_timestamp("1998-09-02 10:00:00.1234567")
    (datetime.datetime(1998, 9, 2, 10, 0), datetime.datetime(1998, 9, 2, 10, 0, 0, 123456))
    """
    s = text.strip()
    low = s.lower()
    if low == "epoch":
        return datetime.datetime(1970, 1, 1)
    if low in ("infinity", "-infinity"):
        raise OverflowError(text)
    m = _DATE.match(s)
    t = _TIME.fullmatch(s, m.end()) if m is not None else None
    if m is None or t is None:
        raise ValueError(text)
    hour, minute, second, frac = t.groups()
    micros = int((frac or "0")[:6].ljust(6, "0"))
    return datetime.datetime(*_ymd(text, m.group(1), m.group(3), m.group(4)),
                             int(hour or 0), int(minute or 0), int(second or 0), micros)


def parse_int(text: str) -> int:
    """An integer as DuckDB reads it: ``int()`` text, hex ``0x1F``, binary ``0b11``, or
    a decimal or exponent form rounded half away from zero.

    >>> [parse_int(t) for t in ("12", " +12 ", "1_000", "0x1F", "12.5", "-12.5", "1e1")]
    [12, 12, 1000, 31, 13, -13, 10]
    """
    try:
        return int(text)
    except ValueError:
        pass
    s = text.strip()
    m = _HEX.fullmatch(s)
    if m is not None:
        return int(m.group(1), 16)
    m = _BIN.fullmatch(s)
    if m is not None:
        return int(m.group(1), 2)
    if _NUMBER.fullmatch(s) is None:
        raise ValueError(text)
    d = Decimal(s.replace("_", ""))
    if d.adjusted() > 40:  # (far outside every integer type: no huge quantize)
        raise OverflowError(text)
    return int(d.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def decimal_of(value: object, scale: int) -> Decimal:
    """``value`` as a DECIMAL at ``scale``, rounded half away from zero as DuckDB casts
    (a float by its shortest text: ``1.005`` is ``1.01``, as its JSON or CSV text)."""
    d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)  # type: ignore[arg-type]
    if not d.is_finite():
        raise ValueError(value)
    if d.adjusted() > 80:
        raise OverflowError(value)
    return d.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class Column:
    """A column of a relation: its name and value domain."""

    name: str
    type: ColumnType
    scale: int = 0
    """Digits after the point of a DECIMAL column (DECIMAL(p, s): s; DuckDB's default
    DECIMAL is (18, 3))."""
    width: int = 0
    """DECIMAL: its precision p, the digits in all (0: 18, DuckDB's default). INT: its
    width in bits (8 TINYINT, 16 SMALLINT, 32 INTEGER, 64 BIGINT, 128 HUGEINT, -64
    UBIGINT; 0: BIGINT)."""

    @property
    def quantum(self) -> Decimal:
        return Decimal(1).scaleb(-self.scale)

    @property
    def precision(self) -> int:
        """The digits of a DECIMAL column in all (p of DECIMAL(p, s))."""
        return self.width or 18

    @property
    def int_range(self) -> tuple[int, int]:
        """The values an INT column holds (its type's range)."""
        return INT_RANGES[self.width or 64]

    def _decimal(self, value: object) -> Decimal:
        d = decimal_of(value, self.scale)
        if d.adjusted() >= self.precision - self.scale:
            raise OverflowError(value)
        return d

    def _int(self, value: int) -> int:
        lo, hi = INT_RANGES[self.width or 64]
        if lo <= value <= hi:
            return value
        raise OverflowError(value)

    def parse(self, text: str) -> Value:
        """Parse a CSV field; the empty field is NULL.

        >>> Column("x", "FLOAT").parse("2.5"), Column("p", "DECIMAL", 2, 5).parse("123.455")
        (2.5, Decimal('123.46'))
        """
        if text == "":
            return None
        try:
            if self.type == "INT":
                return self._int(parse_int(text))
            if self.type == "FLOAT":
                f = float(text)
                return NAN if f != f else f
            if self.type == "DECIMAL":
                return self._decimal(text.strip())
            if self.type == "DATE":
                return parse_date(text)
            if self.type == "TIMESTAMP":
                return parse_timestamp(text)
            if self.type == "BOOL":
                low = text.strip().lower()
                if low in _TRUE:
                    return True
                if low in _FALSE:
                    return False
                raise ValueError(text)
            return text
        except OverflowError:
            raise self._error(repr(text), out_of_range=True) from None
        except (ValueError, InvalidOperation):
            raise self._error(repr(text)) from None

    def parse_quoted_empty(self) -> Value:
        """The value of a quoted empty CSV field (``""``): the empty string of a TEXT
        column; bad input for any other type (as DuckDB's CSV reader with
        ``allow_quoted_nulls=false``)."""
        if self.type == "TEXT":
            return ""
        found = "'\"\"' (an empty string)"
        raise self._error(found)

    def _error(self, found: str, out_of_range: bool = False) -> ValueParseError:
        what = self.type_text
        if out_of_range:
            if self.type == "INT":
                lo, hi = self.int_range
                what = f"{what} ({lo} to {hi})"
            elif self.type == "DECIMAL":
                digits = self.precision - self.scale
                what = f"{what} (at most {digits} digit{'s' if digits != 1 else ''} " \
                       "before the point)"
            found += " (out of range)"
        msg = f"column {self.name!r} expects {what}, found {found}"
        err = ValueParseError(msg, what, found)
        err.out_of_range = out_of_range
        return err

    def coerce(self, value: object) -> Value:
        """Check and normalise a value that arrived already typed (JSON, Python API)."""
        if value is None:
            return None
        try:
            if self.type == "INT" and isinstance(value, int) and not isinstance(value, bool):
                return self._int(value)
            if self.type == "INT" and isinstance(value, float) and value.is_integer():
                return self._int(int(value))
            if self.type == "FLOAT" and isinstance(value, (int, float)) and not isinstance(
                value, bool
            ):
                f = float(value)
                return NAN if f != f else f
            if self.type == "TEXT" and isinstance(value, str):
                return value
            if self.type == "DECIMAL" and isinstance(value, (int, float, Decimal)) and not \
                    isinstance(value, bool):
                try:
                    return self._decimal(value)
                except (ValueError, InvalidOperation):
                    pass
            if self.type == "DATE" and type(value) is datetime.date:
                return value
            if self.type == "TIMESTAMP" and isinstance(value, datetime.datetime):
                return value.replace(tzinfo=None) if value.tzinfo is not None else value
            if self.type == "BOOL" and isinstance(value, bool):
                return value
            if self.type == "KEY" and isinstance(value, tuple):
                return value  # type: ignore[return-value]
        except OverflowError:
            raise self._error(repr(value), out_of_range=True) from None
        if isinstance(value, str) and self.type != "KEY":
            return self.parse(value)
        raise self._error(repr(value))

    @property
    def type_text(self) -> str:
        """The type as a message names it (``INTEGER``, ``DECIMAL(5,2)``, ``DATE``)."""
        if self.type == "DECIMAL":
            return f"DECIMAL({self.precision},{self.scale})"
        if self.type == "INT":
            return INT_NAMES[self.width] if self.width else "INT"
        if self.type == "DATE":
            return "DATE (YYYY-MM-DD)"
        if self.type == "TIMESTAMP":
            return "TIMESTAMP (YYYY-MM-DD HH:MM:SS)"
        return self.type

    @property
    def sql_type(self) -> str:
        """The type as a CREATE TABLE declares it (``INTEGER``, ``DECIMAL(15,2)``)."""
        if self.type == "DECIMAL":
            return f"DECIMAL({self.precision},{self.scale})"
        if self.type == "INT":
            return INT_NAMES[self.width or 64]
        return {"FLOAT": "DOUBLE", "TEXT": "VARCHAR", "BOOL": "BOOLEAN",
                "KEY": "IVMFLOW_KEY"}.get(self.type, self.type)


SHARED_VALUES_PER_COLUMN = 4096
"""How many distinct values of a DECIMAL, DATE, TIMESTAMP or TEXT column the parser
keeps to hand out again (:func:`shared_parser`)."""

_SHARED: dict[Column, Callable[[str], Value]] = {}


def shared_parser(col: Column) -> Callable[[str], Value]:
    """``col.parse``, handing out one object per distinct text among the column's first
    :data:`SHARED_VALUES_PER_COLUMN` distinct values: the rows a view keeps then share
    their low-cardinality values (a quantity, a discount, a date, a flag) instead of
    holding a copy each, 30-100 bytes apiece in CPython (a Decimal is 104), and a value
    met again is not parsed again. Values are immutable, so sharing is invisible. A
    column whose values mostly differ (a price, a comment: fewer hits than distinct
    values when the table is full) drops its table and parses plainly from then on,
    so it holds no memory for nothing. INT, FLOAT and BOOL parse to small or shared
    objects already: plain ``col.parse``.

    >>> p = shared_parser(Column("d", "DECIMAL", 2, 15))
    >>> p("1.50") is p("1.50") is p("1.50"), p("1.50")
    (True, Decimal('1.50'))
    """
    if col.type in ("INT", "FLOAT", "BOOL", "KEY"):
        return col.parse
    parser = _SHARED.get(col)
    if parser is None:
        parse = col.parse
        values: dict[str, Value] = {}
        get = values.get
        hits = 0
        sharing = True

        def parser(text: str) -> Value:
            nonlocal hits, sharing
            if not sharing:
                return parse(text)
            v = get(text)
            if v is not None:
                hits += 1
                return v
            v = parse(text)  # (a NULL is parsed each time: "" costs nothing)
            if len(values) < SHARED_VALUES_PER_COLUMN:
                values[text] = v
            elif hits < len(values):
                # (full, and hit less often than it has values: unique-ish values)
                sharing = False
                values.clear()
            return v

        _SHARED[col] = parser
    return parser


@dataclass(frozen=True)
class Relation:
    """A base relation (table) of the query file."""

    name: str
    columns: tuple[Column, ...]
    key: tuple[int, ...] = ()
    """The positions of the declared ``PRIMARY KEY`` columns (empty: none declared);
    change-stream sources keep the current row per key (docs/change-streams.md)."""

    @property
    def arity(self) -> int:
        return len(self.columns)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def parse_value(self, position: int, text: str) -> Value:
        return self.columns[position].parse(text)

    def parse_row(self, fields: list[str] | tuple[str, ...],
                  quoted_empty: frozenset[int] | set[int] = frozenset()) -> Row:
        """Parse CSV fields into a typed row (arity checked by the caller); the fields
        at ``quoted_empty`` were ``""`` in the line (an empty string, not NULL).

        >>> r = Relation("G", (Column("src", "INT"), Column("dst", "INT")))
        >>> r.parse_row(["1", "2"]), r.parse_row(["1", ""])
        ((1, 2), (1, None))
        >>> Relation("S", (Column("s", "TEXT"),)).parse_row([""], {0})
        ('',)
        """
        if quoted_empty:
            return tuple(c.parse_quoted_empty() if i in quoted_empty else c.parse(f)
                         for i, (c, f) in enumerate(zip(self.columns, fields)))
        bounds = self._int_bounds
        if bounds is not None and "" not in fields:
            # The common shape (edge lists): one C-level map and one range test; any
            # field int() refuses or out of range goes the per-column way below, which
            # names the column.
            try:
                row = tuple(map(int, fields))
            except ValueError:
                pass
            else:
                if bounds[0] <= min(row) and max(row) <= bounds[1]:
                    return row
        return tuple(p(f) for p, f in zip(self._parsers, fields))

    @functools.cached_property
    def _parsers(self) -> tuple[Callable[[str], Value], ...]:
        """Each column's :func:`shared_parser` (not pickled: :meth:`__getstate__`)."""
        return tuple(shared_parser(c) for c in self.columns)

    def __getstate__(self) -> dict[str, object]:
        # (a relation is shipped to Spark and Flink workers: its parsers, closures over
        # this process's shared values, are made again there on first use)
        return {k: v for k, v in self.__dict__.items() if k != "_parsers"}

    @functools.cached_property
    def _int_bounds(self) -> tuple[int, int] | None:
        """(the largest low, the smallest high) of the columns' ranges when every
        column is an INT, else None."""
        if not self.columns or not all(c.type == "INT" for c in self.columns):
            return None
        ranges = [c.int_range for c in self.columns]
        return max(lo for lo, _ in ranges), min(hi for _, hi in ranges)

    def coerce_row(self, values: list[object] | tuple[object, ...]) -> Row:
        return tuple(c.coerce(v) for c, v in zip(self.columns, values))


@dataclass(frozen=True)
class Schema:
    """All relations of a query file, by name (names are case-insensitive in SQL;
    ivmflow keys them by the spelling used in ``CREATE TABLE``)."""

    relations: dict[str, Relation]

    def relation(self, name: str) -> Relation:
        rel = self.lookup(name)
        if rel is None:
            known = ", ".join(sorted(self.relations)) or "none"
            msg = f"unknown relation {name!r}; the query declares: {known}"
            raise KeyError(msg)
        return rel

    def lookup(self, name: str) -> Relation | None:
        rel = self.relations.get(name)
        if rel is not None:
            return rel
        low = name.lower()
        for key, candidate in self.relations.items():
            if key.lower() == low:
                return candidate
        return None

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.relations)))
