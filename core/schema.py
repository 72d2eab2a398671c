"""Relation schemas declared by the ``CREATE TABLE`` statements of a query file.

Values of update records are parsed with these types, so the schema is shared by the
plan compiler, the connectors and the runners.

Example:
    >>> s = Schema({"G": Relation("G", (Column("src", "INT"), Column("dst", "INT")))})
    >>> s.relation("G").parse_value(0, "7")
    7
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal

ColumnType = Literal["INT", "FLOAT", "TEXT", "BOOL", "DECIMAL", "DATE", "TIMESTAMP", "KEY"]
"""Value domains ivmflow understands; SQL type names are mapped onto these. DECIMAL
values are :class:`decimal.Decimal` quantized to the column's scale (exact fixed point:
sums under inserts and deletes never drift), DATE :class:`datetime.date`, TIMESTAMP
:class:`datetime.datetime`. KEY (``IVMFLOW_KEY``) is internal: the hidden join key of an
outer join's keyed view, a tuple only a join reads (never an input or output column)."""

SQL_TYPE_NAMES: dict[str, ColumnType] = {
    "INT": "INT", "INTEGER": "INT", "BIGINT": "INT", "SMALLINT": "INT", "TINYINT": "INT",
    "UBIGINT": "INT", "HUGEINT": "INT",
    "FLOAT": "FLOAT", "DOUBLE": "FLOAT", "REAL": "FLOAT", "FLOAT4": "FLOAT",
    "FLOAT8": "FLOAT", "DECIMAL": "DECIMAL", "NUMERIC": "DECIMAL",
    "DATE": "DATE", "TIMESTAMP": "TIMESTAMP", "DATETIME": "TIMESTAMP",
    "TIMESTAMPNTZ": "TIMESTAMP",
    "TEXT": "TEXT", "VARCHAR": "TEXT", "CHAR": "TEXT", "STRING": "TEXT", "NCHAR": "TEXT",
    "NVARCHAR": "TEXT",
    "BOOL": "BOOL", "BOOLEAN": "BOOL", "IVMFLOW_KEY": "KEY",
}

Value = int | float | str | bool | Decimal | datetime.date | datetime.datetime | None
"""One field of a row; ``None`` is SQL NULL."""

Row = tuple[Value, ...]
"""A tuple of a relation or an output row."""

_TRUE = {"true", "t", "1", "yes"}
_FALSE = {"false", "f", "0", "no"}


class ValueParseError(ValueError):
    """A field could not be parsed by its column type (the caller adds where it was)."""


@dataclass(frozen=True)
class Column:
    """A column of a relation: its name and value domain."""

    name: str
    type: ColumnType
    scale: int = 0
    """Digits after the point of a DECIMAL column (DECIMAL(p, s): s; DuckDB's default
    DECIMAL is (18, 3))."""

    @property
    def quantum(self) -> Decimal:
        return Decimal(1).scaleb(-self.scale)

    def _decimal(self, value: object) -> Decimal:
        d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)  # type: ignore[arg-type]
        if not d.is_finite():
            raise ValueError(value)
        # (round half away from zero, as DuckDB casts)
        return d.quantize(self.quantum, rounding="ROUND_HALF_UP")

    def parse(self, text: str) -> Value:
        """Parse a CSV field; the empty field is NULL.

        >>> Column("x", "FLOAT").parse("2.5")
        2.5
        """
        if text == "":
            return None
        try:
            if self.type == "INT":
                return int(text)
            if self.type == "FLOAT":
                return float(text)
            if self.type == "DECIMAL":
                return self._decimal(text.strip())
            if self.type == "DATE":
                return datetime.date.fromisoformat(text.strip())
            if self.type == "TIMESTAMP":
                return datetime.datetime.fromisoformat(text.strip())
            if self.type == "BOOL":
                low = text.strip().lower()
                if low in _TRUE:
                    return True
                if low in _FALSE:
                    return False
                raise ValueError(text)
            return text
        except (ValueError, InvalidOperation):
            msg = f"column {self.name!r} expects {self.type_text}, found {text!r}"
            raise ValueParseError(msg) from None

    def coerce(self, value: object) -> Value:
        """Check and normalise a value that arrived already typed (JSON, Python API)."""
        if value is None:
            return None
        if self.type == "INT" and isinstance(value, int) and not isinstance(value, bool):
            return value
        if self.type == "INT" and isinstance(value, float) and value.is_integer():
            return int(value)
        if self.type == "FLOAT" and isinstance(value, (int, float)) and not isinstance(
            value, bool
        ):
            return float(value)
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
            return value
        if self.type == "BOOL" and isinstance(value, bool):
            return value
        if self.type == "KEY" and isinstance(value, tuple):
            return value  # type: ignore[return-value]
        if isinstance(value, str) and self.type != "KEY":
            return self.parse(value)
        msg = f"column {self.name!r} expects {self.type_text}, found {value!r}"
        raise ValueParseError(msg)

    @property
    def type_text(self) -> str:
        """The type as a message names it (``DECIMAL(s=2)``, ``DATE``)."""
        if self.type == "DECIMAL":
            return f"DECIMAL with scale {self.scale}"
        if self.type == "DATE":
            return "DATE (YYYY-MM-DD)"
        if self.type == "TIMESTAMP":
            return "TIMESTAMP (YYYY-MM-DD HH:MM:SS)"
        return self.type


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

    def parse_row(self, fields: list[str] | tuple[str, ...]) -> Row:
        """Parse CSV fields into a typed row (arity checked by the caller).

        >>> r = Relation("G", (Column("src", "INT"), Column("dst", "INT")))
        >>> r.parse_row(["1", "2"]), r.parse_row(["1", ""])
        ((1, 2), (1, None))
        """
        if self._all_int and "" not in fields:
            # The common shape (edge lists): one C-level map; any field int() refuses
            # goes the per-column way below, which names the column.
            try:
                return tuple(map(int, fields))
            except ValueError:
                pass
        return tuple(c.parse(f) for c, f in zip(self.columns, fields))

    @functools.cached_property
    def _all_int(self) -> bool:
        return all(c.type == "INT" for c in self.columns)

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
