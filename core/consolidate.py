"""Consolidation: the one routine that turns row changes into a delta as docs/semantics.md
defines it (multiplicities summed per row, zero changes dropped, rows sorted so that
every runner emits the same bytes).

Example:
    >>> consolidate([(1, (2, "b")), (2, (1, None)), (-1, (2, "b")), (1, (1, None))])
    [(3, (1, None))]
    >>> consolidate_by([("x", 1, (1,)), ("y", 1, (1,)), ("x", -1, (1,)), ("x", 2, (0,))])
    {'x': [(2, (0,))], 'y': [(1, (1,))]}
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any, TypeVar

from core.codegen import define
from core.schema import Row, Value

__all__ = ["ComputedKey", "Descending", "OrderBy", "consolidate", "consolidate_by", "net_changes",
           "order_value", "row_sort_key", "sort_component", "sort_rows", "sorted_changes",
           "tiebreak"]

K = TypeVar("K", bound=Hashable)
"""What changes are grouped by (an epoch, a (kind, number) pair, ...)."""


def _value_key(v: Value) -> tuple[int, str, Any]:
    if v is None:
        return (0, "", 0)
    return (1, type(v).__name__, v)


def row_sort_key(item: tuple[int, Row]) -> tuple[Any, ...]:
    """A total order on (mult, row) pairs with NULLs and mixed types."""
    mult, row = item
    return (tuple(_value_key(v) for v in row), mult)


def _row_then_mult(item: tuple[int, Row]) -> tuple[Row, int]:
    return (item[1], item[0])


def sort_rows(rows: list[tuple[int, Row]]) -> None:
    """Sort ``(mult, row)`` pairs in place by row, then mult. Plain tuple comparison is
    fast; rows holding NULLs next to values (or mixed types) need the slower total
    order.

    >>> rows = [(1, (2,)), (1, (None,)), (-1, (1,))]
    >>> sort_rows(rows); rows
    [(1, (None,)), (-1, (1,)), (1, (2,))]
    """
    try:
        rows.sort(key=_row_then_mult)
    except TypeError:
        rows.sort(key=row_sort_key)


def sorted_changes(net: Mapping[Row, Any]) -> list[tuple[int, Row]]:
    """``row -> net change`` (integers, zeros allowed) as ``(mult, row)`` pairs without
    the zeros, sorted as :func:`sort_rows` does. Rows are distinct keys, so sorting the
    ``(row, mult)`` items by plain tuple order is the same order, done in C.

    >>> sorted_changes({(2,): 1, (1,): -2, (3,): 0})
    [(-2, (1,)), (1, (2,))]
    """
    if len(net) <= 1:  # epochs of one update mostly change zero or one row
        return [(int(m), row) for row, m in net.items() if m]
    rows = [row for row, m in net.items() if m]
    try:
        rows.sort()
    except TypeError:
        out = [(int(net[row]), row) for row in rows]
        out.sort(key=row_sort_key)
        return out
    return [(int(net[row]), row) for row in rows]


def net_changes(net: Mapping[Row, int]) -> list[tuple[int, Row]]:
    """``row -> net change`` as sorted ``(mult, row)`` pairs without the zeros."""
    out = [(m, row) for row, m in net.items() if m]
    sort_rows(out)
    return out


def consolidate(changes: Iterable[tuple[int, Row]]) -> list[tuple[int, Row]]:
    """Sum ``(mult, row)`` changes per row; drop zeros; sort."""
    net: dict[Row, int] = {}
    for mult, row in changes:
        net[row] = net.get(row, 0) + mult
    return net_changes(net)


def consolidate_by(changes: Iterable[tuple[K, int, Row]]) -> dict[K, list[tuple[int, Row]]]:
    """:func:`consolidate` per group: ``(group, mult, row)`` changes in, sorted
    ``(mult, row)`` lists per group out (groups whose changes cancel are left out)."""
    net: dict[K, dict[Row, int]] = {}
    for group, mult, row in changes:
        rows = net.setdefault(group, {})
        rows[row] = rows.get(row, 0) + mult
    out: dict[K, list[tuple[int, Row]]] = {}
    for group, rows in net.items():
        pairs = net_changes(rows)
        if pairs:
            out[group] = pairs
    return out


@dataclass(frozen=True)
class ComputedKey:
    """An ORDER BY key that is no output column but an expression over the output row
    (``ORDER BY sum_sales - avg_monthly_sales``, both of them output columns): ``src``
    is Python source over ``row`` (the plan compiler's), its names bound in ``env``;
    ``sql`` its SQL text. Called on a row, its value; it pickles (the compiled
    function does not travel: it is compiled again where it is first called).

    >>> k = ComputedKey("row[0] - row[1]", "a - b", {})
    >>> k((5, 2)), k
    (3, ComputedKey(src='row[0] - row[1]', sql='a - b'))
    """

    src: str
    sql: str
    env: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False,
                                   repr=False)

    def __call__(self, row: Row) -> Value:
        fn = self.__dict__.get("_fn")
        if fn is None:
            env = dict(self.env)
            define(f"def order_key(row):\n    return {self.src}\n", "<order key>", env)
            fn = self.__dict__["_fn"] = env["order_key"]
        value: Value = fn(row)
        return value

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_fn"}


OrderBy = Sequence[tuple["int | ComputedKey", bool, bool]]
"""ORDER BY as (output column or computed key, descending, nulls first) triples."""


class Descending:
    """A value ordered the other way round (a DESC sort key that is not a number).

    >>> sorted(["a", "c", "b"], key=Descending)[0]
    'c'
    """

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and bool(self.v == other.v)

    def __lt__(self, other: Descending) -> bool:
        return bool(other.v < self.v)

    def __gt__(self, other: Descending) -> bool:
        return bool(self.v < other.v)

    def __hash__(self) -> int:
        return hash(self.v)


_NEGATABLE = (int, float, Decimal, Fraction)
"""Numbers: a DESC key is the negated value, compared in C (a column's values are all
numbers or all not, as its SQL type says)."""


def sort_component(v: Value, desc: bool, nulls_first: bool) -> tuple[Any, ...]:
    """One ORDER BY key of a sort key, as SQL orders it: a NULL first or last as asked,
    a value ascending, or descending (a number negated, anything else
    :class:`Descending`). Tuples Python compares in C: the ordered indexes of top-k and
    window functions compare keys on every insert and removal.

    >>> vals = [3, None, 1]
    >>> sorted(vals, key=lambda v: sort_component(v, True, False))
    [3, 1, None]
    >>> sorted(["a", "c", None], key=lambda v: sort_component(v, True, True))
    [None, 'c', 'a']
    """
    if v is None:
        return (0,) if nulls_first else (2,)
    if not desc:
        return (1, v)
    return (1, -v if isinstance(v, _NEGATABLE) else Descending(v))


def tiebreak(row: Row) -> tuple[tuple[Any, ...], ...]:
    """Every column ascending, NULLs last: what orders rows an ORDER BY leaves tied (the
    same on every runner; docs/semantics.md).

    >>> sorted([(2, None), (1, "b"), (2, "a")], key=tiebreak)
    [(1, 'b'), (2, 'a'), (2, None)]
    """
    return tuple((1,) if v is None else (0, v) for v in row)


def order_value(row: Row, col: int | ComputedKey) -> Value:
    """The value of ORDER BY key ``col`` (an output column's number, or a computed
    key) in ``row``."""
    return row[col] if isinstance(col, int) else col(row)


def _column_of(col: int | ComputedKey, pair: tuple[int, Row]) -> Value:
    return order_value(pair[1], col)


def order_rows(rows: list[tuple[int, Row]], order_by: OrderBy) -> None:
    """Sort ``(mult, row)`` pairs by ORDER BY's (column, descending, nulls first) keys
    (stable: ties keep their order).

    >>> rows = [(1, ("a", 2)), (1, ("b", None)), (1, ("c", 5))]
    >>> order_rows(rows, [(1, True, False)]); [r[0] for _, r in rows]
    ['c', 'a', 'b']
    >>> order_rows(rows, [(ComputedKey("-row[1] if row[1] is not None else None", "-b"),
    ...                    False, True)]); [r[0] for _, r in rows]
    ['b', 'c', 'a']
    """
    for col, desc, nulls_first in reversed(order_by):
        present = [r for r in rows if _column_of(col, r) is not None]
        nulls = [r for r in rows if _column_of(col, r) is None]
        key: Any = functools.partial(_column_of, col)  # (one column's values: comparable)
        present.sort(key=key, reverse=desc)
        rows[:] = nulls + present if nulls_first else present + nulls
