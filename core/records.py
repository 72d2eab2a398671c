"""Records that flow into and out of a maintained query.

Example:
    >>> Update("+", "G", (1, 2)).signed_mult
    1
    >>> Update("-", "G", (1, 2), 3).signed_mult
    -3
"""

from __future__ import annotations

import csv
import datetime
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from core.schema import Row, Value

Op = Literal["+", "-"]


@dataclass(frozen=True, slots=True)
class Update:
    """Insert (``+``) or delete (``-``) ``mult`` copies of ``row`` in ``relation``.

    ``source`` says where the record came from (``file:line`` or ``topic@partition:offset``)
    so that errors found later still point at the input.
    """

    op: Op
    relation: str
    row: Row
    mult: int = 1
    source: str = field(default="", compare=False)

    @property
    def signed_mult(self) -> int:
        return self.mult if self.op == "+" else -self.mult


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """An explicit epoch boundary (the ``*`` line / ``{"op": "*"}`` record)."""

    source: str = field(default="", compare=False)


EPOCH_END = EpochEnd()

Record = Update | EpochEnd
"""What sources yield."""


@dataclass(frozen=True, init=False)
class EpochDelta:
    """The consolidated change of the query result in one epoch.

    ``rows`` holds ``(mult, row)`` pairs with non-zero ``mult``, sorted for determinism.
    ``snapshot_requested`` is set when the epoch was closed by an explicit marker.

    >>> EpochDelta(3, ((1, (2, 5)),), updates=4)
    EpochDelta(epoch=3, rows=((1, (2, 5)),), updates=4, closed_by_marker=False)
    """

    epoch: int
    rows: tuple[tuple[int, Row], ...]
    updates: int = 0
    closed_by_marker: bool = False

    def __init__(self, epoch: int, rows: tuple[tuple[int, Row], ...], updates: int = 0,
                 closed_by_marker: bool = False) -> None:
        # Item stores into the instance dict instead of the frozen dataclass's four
        # object.__setattr__ calls (or one update() with a keyword dict): this runs once
        # per epoch, so per update at epoch size 1 (545 -> 259 -> 171 ns).
        d = self.__dict__
        d["epoch"] = epoch
        d["rows"] = rows
        d["updates"] = updates
        d["closed_by_marker"] = closed_by_marker

    def __len__(self) -> int:
        return len(self.rows)


# ---------------------------------------------------------------------------------------
# The one text form of values and records (the update CSV of docs/formats.md): used by
# the CSV sinks, error messages, the generators and the tests.


def format_value(value: Value) -> str:
    """Render one value for a CSV line: NULL is empty, floats round-trip, bools are
    ``true``/``false``.

    >>> [format_value(v) for v in (None, True, 0.1, 7, "a", Decimal("-0.00"))]
    ['', 'true', '0.1', '7', 'a', '0.00']
    >>> format_value(Decimal("1E-8")), format_value(Decimal("0E-8"))
    ('0.00000001', '0.00000000')
    >>> format_value(datetime.datetime(1998, 9, 2)), format_value(datetime.date(1998, 9, 2))
    ('1998-09-02 00:00:00', '1998-09-02')
    """
    if value is None:
        return ""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Decimal):
        # (a sum that cancels to zero can be -0.00; DuckDB writes 0.00; and never
        # Python's exponent form: 0.00000001, not 1E-8)
        return format(value.copy_abs() if value.is_zero() else value, "f")
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def csv_line(fields: Iterable[str]) -> str:
    """Fields joined and quoted as the csv module writes them (no newline).

    >>> csv_line(["+", "G", "a,b"])
    '+,G,"a,b"'
    """
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(fields)
    return buf.getvalue()


def csv_value(value: Value) -> str:
    """One value as a field of a CSV line: :func:`format_value`, a string quoted when it
    must be, and the empty string written ``""`` (an empty field is NULL), as DuckDB's
    CSV writer does.

    >>> print(*[csv_value(v) for v in (None, "", "a,b", 'a"b', 1.5)], sep="|")
    |""|"a,b"|"a""b"|1.5
    """
    if not isinstance(value, str):
        return format_value(value)
    if not value:
        return '""'
    if '"' in value:
        return '"' + value.replace('"', '""') + '"'
    if "," in value or "\n" in value or "\r" in value:
        return f'"{value}"'
    return value


def format_update(record: Record) -> str:
    """Render a record as one line of the update CSV (without newline); an epoch end
    is ``*``.

    >>> format_update(Update("-", "G", (1, None), 2)), format_update(EPOCH_END)
    ('-2,G,1,', '*')
    >>> format_update(Update("+", "S", ("", None)))
    '+,S,"",'
    """
    if isinstance(record, EpochEnd):
        return "*"
    op = record.op if record.mult == 1 else f"{record.op}{record.mult}"
    return ",".join([op, csv_value(record.relation), *(csv_value(v) for v in record.row)])
