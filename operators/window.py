"""Window functions maintained (:class:`plans.windows.WindowOp`): the rows of a view,
each with its window functions' values, computed per partition over an ordered index.

State: the input's rows with their multiplicities (map ``window.rows``); derived from
it (rebuilt when the node is made, e.g. after a restore), per partition an ordered
index of its rows - one entry per copy, ordered by the ORDER BY values, peers by the
row's columns (ascending, NULLs last), copies by number - each entry holding its
output values, and for cumulative frames its running accumulators; for a whole-
partition frame the partition's sums, counts and ordered values (MIN, MAX); for
DENSE_RANK the partition's distinct ORDER BY values.

An epoch's changes are applied to their partitions' indexes (O(log n) each); then only
the entries whose value may change are read again and compared, and only those whose
value did change are output (a retraction of the old row, an insertion of the new):

===============================  ==========================================================
``ROW_NUMBER``, ``NTILE``*,       the entries from the first changed one to the partition's
cumulative ``ROWS`` frames        end: a row inserted at place p renumbers every row after it
``RANK``, ``PERCENT_RANK``*,      the same from the first peer of the first changed entry
``CUME_DIST``*, cumulative        (a peer's frame holds its peers)
``RANGE`` frames, ``LAST_VALUE``
``DENSE_RANK``                    the rows after a distinct ORDER BY value that appeared or
                                  vanished; none after one more peer of a present value
whole-partition ``SUM``,          every row of the partition when the partition's value
``COUNT``, ``AVG``, ``MIN``,      changes (each row's output changes: inherent), else none;
``MAX``, ``FIRST_VALUE``          the partition's value itself in O(log n)
``LAG``/``LEAD`` (k)              the k entries on each side of a change
===============================  ==========================================================

(*) and the whole partition when its size changes: the value divides by it. Beside
these, every inserted entry is computed and every deleted one retracted. Each read
entry costs O(log n + functions) (its place, its rank, in the index). A top-k per
partition (``WindowOp.limit``: the reader keeps only ``rn <= k``) bounds all of it to
the entries of rank k or less: the others are neither computed nor output, and those
pushed past k are retracted.

Example (``RANK() OVER (PARTITION BY a ORDER BY b)``):
    >>> from core.records import Update
    >>> from plans.windows import WindowFunc, WindowOp
    >>> spec = WindowOp("_wn_0", "_wi_0", (0,), ((1, False, False),),
    ...                 (WindowFunc("rank", None, "range"),), ("_w0",))
    >>> view = WindowState(spec)
    >>> for b in (10, 20, 30):
    ...     view.apply(Update("+", "_wi_0", (1, b)))
    >>> sorted(view.end_epoch().rows)
    [(1, (1, 10, 1)), (1, (1, 20, 2)), (1, (1, 30, 3))]
    >>> view.apply(Update("+", "_wi_0", (1, 15)))   # the ranks after 15 move
    >>> sorted(view.end_epoch().rows)
    [(-1, (1, 20, 2)), (-1, (1, 30, 3)), (1, (1, 15, 2)), (1, (1, 20, 3)), (1, (1, 30, 4))]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from sortedcontainers import SortedKeyList, SortedList

from core.consolidate import sort_component, tiebreak
from core.records import Update
from core.schema import Row
from operators.node import BatchNode, Change
from operators.state import DictState, State
from plans.windows import WindowFunc, WindowOp

__all__ = ["WindowState", "order_key"]

_CUMULATIVE = ("sum", "count", "count_star", "avg", "min", "max")


class _Top:
    """Greater than any value: ``(okey, _TOP)`` bounds the entries of peers ``okey``."""

    def __eq__(self, other: object) -> bool:
        return other is self

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return other is not self

    def __hash__(self) -> int:
        return 0


_TOP = _Top()


def order_key(row: Row, order_by: Sequence[tuple[int, bool, bool]]) -> tuple[Any, ...]:
    """A row's ORDER BY values as one comparable key: NULLs first or last as asked,
    descending columns reversed.

    >>> order_key((3, None), ((0, True, False), (1, False, False))) < \\
    ...     order_key((2, 5), ((0, True, False), (1, False, False)))
    True
    """
    return tuple(sort_component(row[col], desc, nulls_first)
                 for col, desc, nulls_first in order_by)


class _Entry:
    """One copy of a row in its partition's index: its key, its output values, its
    cumulative frames' running accumulators."""

    __slots__ = ("accs", "key", "row", "vals")

    def __init__(self, key: tuple[Any, ...], row: Row) -> None:
        self.key = key
        self.row = row
        self.vals: tuple[Any, ...] | None = None
        self.accs: tuple[Any, ...] = ()


class _Part:
    """A partition: its ordered entries, its whole-frame states, its distinct keys."""

    __slots__ = ("distinct", "entries", "keys", "whole")

    def __init__(self, whole: list[Any]) -> None:
        self.entries = SortedKeyList(key=attrgetter("key"))
        self.whole = whole
        self.distinct: dict[tuple[Any, ...], int] = {}
        self.keys = SortedList()


def _step(func: str, acc: Any, v: Any) -> Any:
    """A cumulative frame's accumulator after one more row of value ``v``."""
    if func == "count_star":
        return acc + 1
    if v is None:
        return acc
    if func == "count":
        return acc + 1
    if func in ("sum", "avg"):
        return (acc[0] + v, acc[1] + 1)
    if acc is None:
        return v
    return min(acc, v) if func == "min" else max(acc, v)


_START: dict[str, Any] = {"count_star": 0, "count": 0, "sum": (0, 0), "avg": (0, 0),
                          "min": None, "max": None}


def _final(func: str, acc: Any) -> Any:
    if func == "sum":
        return acc[0] if acc[1] else None
    if func == "avg":
        return float(acc[0]) / acc[1] if acc[1] else None
    return acc


class WindowState(BatchNode):
    """A live window view: ``apply`` its input's updates, ``end_epoch`` for the delta
    (the local runner's node; :class:`WindowTask` is one partition of it on Spark and
    Flink, fed the rows of the partitions it owns)."""

    def __init__(self, spec: WindowOp, state: State | None = None) -> None:
        self.spec = spec
        self.state: State = state if state is not None else DictState()
        self.rows = self.state.map("window.rows")
        """The input's rows -> multiplicity."""
        self.parts: dict[tuple[Any, ...], _Part] = {}
        self.pending: dict[Row, int] = {}
        self.epoch = 0
        self.updates = 0
        funcs = spec.funcs
        self.whole = [i for i, f in enumerate(funcs) if f.frame == "partition" or
                      f.func == "first_value"]
        """The functions whose value is the partition's (whole frames, FIRST_VALUE)."""
        self.cumulative = [i for i, f in enumerate(funcs)
                           if f.func in _CUMULATIVE and f.frame != "partition"]
        self.slot = {i: k for k, i in enumerate(self.cumulative)}
        self.dense = any(f.func == "dense_rank" for f in funcs)
        self.lags = {f.offset for f in funcs if f.func in ("lag", "lead")}
        self.value: list[Callable[[_Part, int, _Entry, int, dict[Any, Any]], Any]] = [
            self._value_of(i, f) for i, f in enumerate(funcs)]
        restored: dict[tuple[Any, ...], list[tuple[Row, int]]] = {}
        for row, m in self.rows.items():
            restored.setdefault(self._pkey(row), []).append((row, m))
        for pk, changes in restored.items():
            self._maintain(pk, changes, Counter(), restoring=True)

    def _pkey(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[c] for c in self.spec.partition_by)

    # -- the node's changes --
    def apply(self, update: Update) -> None:
        self.updates += 1
        self.add(update.row, update.signed_mult)

    def add(self, row: Row, dm: int) -> None:
        """``dm`` copies of ``row`` (negative: deleted) in the open epoch."""
        self.pending[row] = self.pending.get(row, 0) + dm

    def close_epoch(self) -> list[Change]:
        by_part: dict[tuple[Any, ...], list[tuple[Row, int]]] = {}
        for row, dm in self.pending.items():
            if dm:
                by_part.setdefault(self._pkey(row), []).append((row, dm))
        out: Counter[Row] = Counter()
        for pk, changes in by_part.items():
            self._maintain(pk, changes, out)
        self.pending = {}
        return [(m, row) for row, m in out.items() if m]

    # -- one partition's changes --
    def _new_part(self) -> _Part:
        whole: list[Any] = []
        for i in self.whole:
            f = self.spec.funcs[i]
            whole.append(SortedList() if f.func in ("min", "max") else [0, 0])
        return _Part(whole)

    def _enter(self, part: _Part, e: _Entry, sign: int) -> None:
        """Entry ``e`` enters (``sign`` 1) or leaves (-1) the partition's whole-frame
        states and distinct keys."""
        funcs = self.spec.funcs
        for k, i in enumerate(self.whole):
            f = funcs[i]
            if f.func == "first_value" or (f.func == "last_value"):
                continue
            v: Any = e.row[f.arg] if f.arg is not None else 0
            st = part.whole[k]
            if v is None:
                continue
            if f.func in ("min", "max"):
                if sign > 0:
                    st.add(v)
                else:
                    st.remove(v)
            else:
                st[0] += v * sign if f.func in ("sum", "avg") else 0
                st[1] += sign
        if self.dense:
            okey = e.key[0]
            c = part.distinct.get(okey, 0) + sign
            if c:
                part.distinct[okey] = c
                if c == 1 and sign > 0:
                    part.keys.add(okey)
            else:
                del part.distinct[okey]
                part.keys.remove(okey)

    def _whole_values(self, part: _Part) -> tuple[Any, ...]:
        funcs, entries, out = self.spec.funcs, part.entries, []
        for k, i in enumerate(self.whole):
            f, st = funcs[i], part.whole[k]
            if f.func in ("first_value", "last_value"):
                assert f.arg is not None
                out.append(entries[0 if f.func == "first_value" else -1].row[f.arg]
                           if entries else None)
            elif f.func in ("min", "max"):
                out.append((st[0] if f.func == "min" else st[-1]) if st else None)
            elif f.func == "sum":
                out.append(st[0] if st[1] else None)
            elif f.func == "avg":
                out.append(float(st[0]) / st[1] if st[1] else None)
            else:
                out.append(st[1])
        return tuple(out)

    def _maintain(self, pk: tuple[Any, ...], changes: list[tuple[Row, int]],
                  out: Counter[Row], restoring: bool = False) -> None:
        part = self.parts.get(pk)
        if part is None:
            part = self.parts[pk] = self._new_part()
        entries, rows, order_by = part.entries, self.rows, self.spec.order_by
        n_before = len(entries)
        whole_before = self._whole_values(part) if self.whole else ()
        lo: tuple[Any, ...] | None = None
        changed: list[tuple[Any, ...]] = []
        appeared: list[tuple[Any, ...]] = []
        new: list[_Entry] = []
        for row, dm in changes:
            have = 0 if restoring else rows.get(row, 0)
            after = have + dm
            if after < 0:
                msg = (f"window view {self.spec.name}: row {row!r} would be in its input "
                       f"{after} times (its input view deleted a row it never had)")
                raise RuntimeError(msg)
            if not restoring:
                if after:
                    rows[row] = after
                else:
                    rows.pop(row, None)
            okey, tb = order_key(row, order_by), tiebreak(row)
            if self.dense:
                known = okey in part.distinct
            for c in range(min(have, after), max(have, after)):
                key = (okey, tb, c)
                if dm > 0:
                    e = _Entry(key, row)
                    entries.add(e)
                    new.append(e)
                else:
                    i = entries.bisect_key_left(key)
                    e = entries[i]
                    del entries[i]
                    if e.vals is not None:  # (None: past a top-k per partition)
                        out[row + e.vals] -= 1
                self._enter(part, e, 1 if dm > 0 else -1)
                changed.append(key)
            first = (okey, tb, min(have, after))
            lo = first if lo is None or first < lo else lo
            if self.dense and known != (okey in part.distinct):
                appeared.append(okey)
        n = len(entries)
        if not n:
            del self.parts[pk]
            return
        assert lo is not None
        start = n
        lo_pos = entries.bisect_key_left(lo)
        lo_peer = entries.bisect_key_left((lo[0],))
        for f in self.spec.funcs:
            name = f.func
            if name in ("row_number",) or (name in _CUMULATIVE and f.frame == "rows"):
                start = min(start, lo_pos)
            elif name == "ntile":
                start = min(start, lo_pos if n == n_before else 0)
            elif name in ("percent_rank", "cume_dist"):
                start = min(start, lo_peer if n == n_before else 0)
            elif name == "rank" or (name in _CUMULATIVE and f.frame == "range") or (
                    name == "last_value" and f.frame == "range"):
                start = min(start, lo_peer)
            elif name == "dense_rank" and appeared:
                start = min(start, entries.bisect_key_left((min(appeared),)))
        if self.whole and self._whole_values(part) != whole_before:
            start = 0
        extra = {entries.bisect_key_left(e.key) for e in new}
        for k in self.lags:
            for key in changed:
                p = entries.bisect_key_left(key)
                extra.update(range(max(0, p - k), min(n, p + k + 1)))
        bound = self._bound(part, n) if self.spec.limit is not None else n
        start = min(start, bound)
        todo = sorted(i for i in extra if i < start)
        todo += range(start, bound)
        self._recompute(part, todo, out)
        # rows pushed out of a top-k per partition: the output ones after its bound (the
        # entries output were a prefix; only new entries stand between them now)
        pos, fresh = bound, {id(e) for e in new}
        while pos < n:
            e = entries[pos]
            if e.vals is not None:
                out[e.row + e.vals] -= 1
                e.vals = None
            elif id(e) not in fresh:
                break
            pos += 1

    def _bound(self, part: _Part, n: int) -> int:
        """The entries whose limiting function's value is at most k: a prefix, this
        long (a top-k per partition: ``WHERE rn <= k`` over the window)."""
        assert self.spec.limit is not None
        index, k = self.spec.limit
        func, entries = self.spec.funcs[index].func, part.entries
        if func == "row_number":
            return min(n, k)
        if func == "rank":
            return n if n <= k else int(entries.bisect_key_left((entries[k - 1].key[0], _TOP)))
        keys = part.keys
        return n if len(keys) <= k else int(entries.bisect_key_left((keys[k],)))

    def _recompute(self, part: _Part, todo: list[int], out: Counter[Row]) -> None:
        """The values of the entries at ``todo`` (ascending), output where changed."""
        entries, funcs = part.entries, self.spec.funcs
        if self.cumulative:
            for i in todo:
                e = entries[i]
                prev = entries[i - 1].accs if i else None
                accs = []
                for k, fi in enumerate(self.cumulative):
                    f = funcs[fi]
                    acc = prev[k] if prev is not None else _START[f.func]
                    accs.append(_step(f.func, acc, e.row[f.arg] if f.arg is not None
                                      else None))
                e.accs = tuple(accs)
        n = len(entries)
        cache: dict[Any, Any] = {"whole": self._whole_values(part)} if self.whole else {}
        value = self.value
        for i in todo:
            e = entries[i]
            vals = tuple(v(part, i, e, n, cache) for v in value)
            if vals != e.vals:
                if e.vals is not None:
                    out[e.row + e.vals] -= 1
                out[e.row + vals] += 1
                e.vals = vals

    # -- each function's value at entry i of n --
    def _value_of(self, index: int, f: WindowFunc
                  ) -> Callable[[_Part, int, _Entry, int, dict[Any, Any]], Any]:
        name, arg = f.func, f.arg
        if index in self.whole:
            k = self.whole.index(index)
            return lambda part, i, e, n, cache: cache["whole"][k]
        if name == "row_number":
            return lambda part, i, e, n, cache: i + 1
        if name == "rank":
            return lambda part, i, e, n, cache: _peer_start(part, e, cache) + 1
        if name == "dense_rank":
            return lambda part, i, e, n, cache: part.keys.index(e.key[0]) + 1
        if name == "percent_rank":
            return lambda part, i, e, n, cache: (
                _peer_start(part, e, cache) / (n - 1) if n > 1 else 0.0)
        if name == "cume_dist":
            return lambda part, i, e, n, cache: _peer_end(part, e, cache) / n
        if name == "ntile":
            return partial_ntile(f.offset)
        if name in ("lag", "lead"):
            step = -f.offset if name == "lag" else f.offset
            default = f.default
            assert arg is not None

            def nav(part: _Part, i: int, e: _Entry, n: int, cache: dict[Any, Any]) -> Any:
                j = i + step
                if 0 <= j < n:
                    return part.entries[j].row[arg]
                return e.row[default] if default is not None else None
            return nav
        if name == "last_value":
            assert arg is not None
            if f.frame == "rows":
                return lambda part, i, e, n, cache: e.row[arg]
            return lambda part, i, e, n, cache: part.entries[
                _peer_end(part, e, cache) - 1].row[arg]
        slot = self.slot[index]
        if f.frame == "rows":
            return lambda part, i, e, n, cache: _final(name, e.accs[slot])
        return lambda part, i, e, n, cache: _final(
            name, part.entries[_peer_end(part, e, cache) - 1].accs[slot])

    # -- the node protocol (operators.node) --
    def snapshot(self) -> list[Change]:
        """The rows with their window values and multiplicities."""
        out: Counter[Row] = Counter()
        for part in self.parts.values():
            for e in part.entries:
                if e.vals is not None:
                    out[e.row + e.vals] += 1
        return [(m, row) for row, m in out.items()]

    def state_maps(self) -> list[str]:
        return self.state.names()

    def state_entries(self) -> int:
        return len(self.rows)

    def checkpoint(self) -> dict[Row, int]:
        """The open epoch's changes per row."""
        return self.pending

    def restore_checkpoint(self, blob: Any) -> None:
        self.pending = blob or {}


def _peer_start(part: _Part, e: _Entry, cache: dict[Any, Any]) -> int:
    """The place of the first peer of ``e`` (its rank less one)."""
    key = ("start", e.key[0])
    at = cache.get(key)
    if at is None:
        at = cache[key] = part.entries.bisect_key_left((e.key[0],))
    return int(at)


def _peer_end(part: _Part, e: _Entry, cache: dict[Any, Any]) -> int:
    """The place after the last peer of ``e``."""
    key = ("end", e.key[0])
    at = cache.get(key)
    if at is None:
        at = cache[key] = part.entries.bisect_key_left((e.key[0], _TOP))
    return int(at)


def ntile(buckets: int, i: int, n: int) -> int:
    """The NTILE bucket of the row at place ``i`` (from 0) of ``n``: the first ``n %
    buckets`` buckets hold one row more.

    >>> [ntile(3, i, 7) for i in range(7)]
    [1, 1, 1, 2, 2, 3, 3]
    """
    size, big = divmod(n, buckets)
    if i < big * (size + 1):
        return i // (size + 1) + 1
    return big + (i - big * (size + 1)) // size + 1


def partial_ntile(buckets: int) -> Callable[[_Part, int, _Entry, int, dict[Any, Any]], Any]:
    return lambda part, i, e, n, cache: ntile(buckets, i, n)

