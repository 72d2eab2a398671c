"""Top-k: ``ORDER BY ... LIMIT k [OFFSET m]`` maintained over the query's result.

The whole result is kept in an ordered index (a sorted list of rows with their
multiplicities, ordered by the ORDER BY keys and then by every output column, so ties
are broken deterministically); an epoch's consolidated changes are applied to it in
O(changes * log n), and the epoch's delta is the change of the selected window, found
by walking its first ``m + k`` rows: never a re-sort of the result. A row with
multiplicity ``c`` counts ``c`` times, as SQL's LIMIT counts rows.

Example:
    >>> t = TopK([(1, True, False)], limit=2, offset=0, state={})
    >>> t.apply([(1, ("a", 5)), (1, ("b", 7)), (1, ("c", 1))])
    [(1, ('a', 5)), (1, ('b', 7))]
    >>> t.apply([(1, ("d", 9)), (-1, ("b", 7))])   # d enters, b leaves, a stays
    [(-1, ('b', 7)), (1, ('d', 9))]
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

from sortedcontainers import SortedKeyList

from core.consolidate import OrderBy, order_value, sort_component, sort_rows, tiebreak
from core.schema import Row

TAG = "\x00ivmflow.topk"
"""The result index and the selected window live in the finalizer's map under this
key (a local, single-finalizer structure: see :func:`check_runner`)."""


def sort_key(row: Row, order_by: OrderBy) -> tuple[Any, ...]:
    """``row``'s place in the result index: its ORDER BY keys (a NULL first or last as
    asked, a DESC key reversed), then every column ascending with NULLs last (ties
    broken by the whole row). A tuple of tuples Python compares in C: the sorted list
    compares keys on every insert and removal, and an object with its own ``__lt__``
    cost a Python call per comparison.

    >>> order = [(1, True, False)]
    >>> rows = [("a", 2), ("b", None), ("c", 5), ("a", 5)]
    >>> [r for r in sorted(rows, key=lambda r: sort_key(r, order))]
    [('a', 5), ('c', 5), ('a', 2), ('b', None)]
    """
    return tuple(sort_component(order_value(row, col), desc, nulls_first)
                 for col, desc, nulls_first in order_by) + tiebreak(row)


class TopK:
    """The ordered index of a result and the window ``[offset, offset + limit)``."""

    def __init__(self, order_by: OrderBy, limit: int | None,
                 offset: int, state: MutableMapping[Any, Any]) -> None:
        self.order_by = tuple(order_by)
        self.limit = limit
        self.offset = offset
        self.state = state

    def _key(self, entry: tuple[Row, int]) -> tuple[Any, ...]:
        return sort_key(entry[0], self.order_by)

    def _index(self) -> tuple[SortedKeyList, dict[Row, int], dict[Row, int]]:
        """(sorted (row, mult) entries, row -> mult, the selected window row -> copies)."""
        hit = self.state.get(TAG)
        if hit is None:
            hit = (SortedKeyList(key=self._key), {}, {})
            self.state[TAG] = hit
        return hit

    def apply(self, changes: Sequence[tuple[int, Row]]) -> list[tuple[int, Row]]:
        """Apply an epoch's consolidated ``(mult, row)`` changes of the whole result;
        return the change of the window (sorted like every delta)."""
        index, mults, window = self._index()
        for m, row in changes:
            old = mults.get(row, 0)
            if old:
                index.remove((row, old))
            new = old + m
            if new:
                mults[row] = new
                index.add((row, new))
            else:
                mults.pop(row, None)
        new_window = self.select(index)
        delta: dict[Row, int] = {}
        for row, c in new_window.items():
            d = c - window.get(row, 0)
            if d:
                delta[row] = d
        for row, c in window.items():
            if row not in new_window:
                delta[row] = -c
        window.clear()
        window.update(new_window)
        out = [(m, row) for row, m in delta.items()]
        sort_rows(out)
        return out

    def select(self, entries: Any) -> dict[Row, int]:
        """The window of ``entries`` (sorted ``(row, mult)``): row -> copies selected."""
        skip, take = self.offset, self.limit
        chosen: dict[Row, int] = {}
        for row, mult in entries:
            if take is not None and take <= 0:
                break
            if skip >= mult:
                skip -= mult
                continue
            c = mult - skip
            skip = 0
            if take is not None:
                c = min(c, take)
                take -= c
            chosen[row] = c
        return chosen

    def snapshot(self, rows: Sequence[tuple[int, Row]]) -> list[tuple[int, Row]]:
        """The window of a full result, in ORDER BY order."""
        entries = sorted(((row, m) for m, row in rows), key=self._key)
        chosen = self.select(entries)
        return [(chosen[row], row) for row, _m in entries if row in chosen]
