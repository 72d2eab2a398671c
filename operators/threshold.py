"""The threshold view (:class:`plans.threshold.ThresholdFilter`): the rows of a view
whose value compares true with a one-row scalar view, maintained in O(the rows that
change or flip) per epoch.

State: the rows view's rows with their multiplicities (map ``threshold.rows``) and the
scalar view's rows (map ``threshold.scalar``: one row, or one per key for a correlated
scalar); derived from them, per key the rows ordered by their value (rebuilt when the
view is made, e.g. after a restore). Per epoch:

- a changed row is tested against the scalar after the epoch (and, for what it
  contributed before, against the one before);
- when the scalar moves from s to s', only the rows whose value lies between s and s'
  (for ``=`` and ``<>``: equals s or s') can flip: they are read from the ordered index.
  A scalar that becomes or stops being NULL flips every row: O(rows), as it must.

Comparison as the query compiler does it: numbers as DOUBLEs when either side is a
DOUBLE (DuckDB's rule), else exactly; a DATE against a TIMESTAMP as TIMESTAMPs; NULL
compares to nothing.

Example (``R.b > (SELECT AVG(b) FROM R)``):
    >>> from core.records import Update
    >>> from core.schema import Column, Relation
    >>> from plans.threshold import ThresholdFilter
    >>> rows = Relation("_tv_0", (Column("_c0", "INT"), Column("_thr", "INT")))
    >>> scalar = Relation("_u_0", (Column("_col_0", "FLOAT"),))
    >>> view = CompiledThreshold(ThresholdFilter("_tf_0", "_tv_0", "_u_0", ">"),
    ...                          rows, scalar).maintain()
    >>> for a, b in [(1, 10), (2, 20), (3, 30)]:
    ...     view.apply(Update("+", "_tv_0", (a, b)))
    >>> view.apply(Update("+", "_u_0", (20.0,)))
    >>> view.end_epoch().rows
    ((1, (3, 30)),)
    >>> view.apply(Update("-", "_u_0", (20.0,)))
    >>> view.apply(Update("+", "_u_0", (15.0,)))     # only the rows in [15, 20] are read
    >>> view.end_epoch().rows
    ((1, (2, 20)),)
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from sortedcontainers import SortedKeyList

from core.errors import QueryError
from core.records import EpochDelta, Update
from core.schema import Relation, Row
from operators.node import Change, UpdateNode
from operators.state import DictState, State
from plans.expr import SqlType
from plans.threshold import ThresholdFilter

_TESTS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda v, s: bool(v == s), "<>": lambda v, s: bool(v != s),
    "<": lambda v, s: bool(v < s), "<=": lambda v, s: bool(v <= s),
    ">": lambda v, s: bool(v > s), ">=": lambda v, s: bool(v >= s)}


def _as_timestamp(v: Any) -> Any:
    if isinstance(v, datetime.date) and not isinstance(v, datetime.datetime):
        return datetime.datetime(v.year, v.month, v.day)
    return v


class CompiledThreshold:
    """A :class:`~plans.threshold.ThresholdFilter` bound to its inputs' schemas:
    ``rows`` (its first columns the keys, if any, its last the compared value) and
    ``scalar`` (the value column, and the key columns of a correlated scalar)."""

    def __init__(self, spec: ThresholdFilter, rows: Relation, scalar: Relation) -> None:
        self.spec = spec
        self.rows = rows
        self.scalar = scalar
        self.columns = rows.columns
        names_of = [c.name.lower() for c in scalar.columns]
        self.n_keys = len(spec.keys)
        self.scalar_keys = tuple(names_of.index(k.lower()) for k in spec.keys)
        self.scalar_value = names_of.index(spec.value.lower())
        a = SqlType.of_column(rows.columns[-1])
        b = SqlType.of_column(scalar.columns[self.scalar_value])
        names = {a.name, b.name}
        self.domain: Callable[[Any], Any]
        if a.numeric and b.numeric:
            self.domain = float if "FLOAT" in names else _identity
        elif names == {"DATE", "TIMESTAMP"}:
            self.domain = _as_timestamp
        elif a.name == b.name or "NULL" in names:
            self.domain = _identity
        else:
            msg = (f"comparison of {a.name} with {b.name}: {spec.source}'s value "
                   f"{spec.op} the scalar subquery {spec.scalar}")
            raise QueryError(msg)
        self.test = _TESTS[spec.op]

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def reads(self) -> tuple[str, ...]:
        """The relations this view reads (lower case)."""
        return (self.spec.source.lower(), self.spec.scalar.lower())

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        s = self.spec
        per = f"its key's value ({', '.join(s.keys)}) of" if s.keys else "the one value of"
        return (f"threshold view: rows of {s.source} with value {s.op} {per} "
                f"{s.scalar}, ordered by value (a moving scalar reads the rows between "
                "its old and new value)")

    def maintain(self, *_args: Any, **_kwargs: Any) -> ThresholdState:
        return ThresholdState(self)


def _identity(v: Any) -> Any:
    return v


class ThresholdState(UpdateNode):
    """A live threshold view: ``apply`` its inputs' updates, ``end_epoch`` for the
    delta. Everything is per key (the empty key for an uncorrelated scalar)."""

    def __init__(self, compiled: CompiledThreshold, state: State | None = None) -> None:
        self.compiled = compiled
        self.state: State = state if state is not None else DictState()
        self.rows = self.state.map("threshold.rows")
        """The rows view's rows -> multiplicity."""
        self.scalar = self.state.map("threshold.scalar")
        """The scalar view's rows (at most one per key) -> multiplicity."""
        domain = compiled.domain
        k = compiled.n_keys
        self.key: Callable[[Row], Any] = lambda row: domain(row[-1])
        self.index: dict[tuple[Any, ...], SortedKeyList] = {}
        """key -> its rows with a non-NULL value, ordered by value (derived)"""
        for r in self.rows:
            if r[-1] is not None:
                self._index_of(r[:k]).add(r)
        self.values: dict[tuple[Any, ...], Any] = {}
        """key -> its scalar's value, in the comparison's domain (derived; None: NULL)"""
        self.live: dict[tuple[Any, ...], dict[Row, int]] = {}
        """key -> its scalar rows (derived)"""
        for srow, m in self.scalar.items():
            self.live.setdefault(self._scalar_key(srow), {})[srow] = m
        for key in self.live:
            self.values[key] = self._value(key)
        self.source = compiled.spec.source.lower()
        self.scalar_name = compiled.spec.scalar.lower()
        self.pending: dict[Row, int] = {}
        self.pending_scalar: dict[Row, int] = {}
        self.epoch = 0
        self.updates = 0

    def _index_of(self, key: tuple[Any, ...]) -> SortedKeyList:
        sl = self.index.get(key)
        if sl is None:
            sl = self.index[key] = SortedKeyList(key=self.key)
        return sl

    def _scalar_key(self, srow: Row) -> tuple[Any, ...]:
        return tuple(srow[i] for i in self.compiled.scalar_keys)

    def apply(self, update: Update) -> None:
        rel = update.relation.lower()
        if rel == self.source:
            self.add_row(update.row, update.signed_mult)
        elif rel == self.scalar_name:
            self.add_scalar(update.row, update.signed_mult)

    def add_row(self, row: Row, dm: int) -> None:
        self.updates += 1
        self.pending[row] = self.pending.get(row, 0) + dm

    def add_scalar(self, row: Row, dm: int) -> None:
        self.updates += 1
        self.pending_scalar[row] = self.pending_scalar.get(row, 0) + dm

    def _value(self, key: tuple[Any, ...]) -> Any:
        live = [r for r, m in self.live.get(key, {}).items() if m > 0]
        if len(live) > 1:
            msg = (f"scalar subquery {self.compiled.spec.scalar} has {len(live)} rows"
                   + (f" for {key}" if key else "") + ": a scalar subquery must return "
                   "at most one row")
            raise QueryError(msg)
        v = live[0][self.compiled.scalar_value] if live else None
        return None if v is None else self.compiled.domain(v)

    def end_epoch(self, closed_by_marker: bool = False) -> EpochDelta:
        k = self.compiled.n_keys
        moved: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        """key -> its scalar's value (before, after) where it changed"""
        before_of: dict[tuple[Any, ...], Any] = {}
        for srow, dm in self.pending_scalar.items():
            if not dm:
                continue
            key = self._scalar_key(srow)
            before_of.setdefault(key, self.values.get(key))
            m = self.scalar.get(srow, 0) + dm
            of_key = self.live.setdefault(key, {})
            if m:
                self.scalar[srow] = of_key[srow] = m
            else:
                del self.scalar[srow]
                of_key.pop(srow, None)
        for key, before in before_of.items():
            after = self._value(key)
            if after is None:
                self.values.pop(key, None)
                if not self.live.get(key):
                    self.live.pop(key, None)
            else:
                self.values[key] = after
            if before != after:
                moved[key] = (before, after)
        old: dict[Row, int] = {}
        """changed row -> its multiplicity before the epoch"""
        rows = self.rows
        for row, dm in self.pending.items():
            if not dm:
                continue
            was = rows.get(row, 0)
            old.setdefault(row, was)
            now = was + dm
            if now:
                rows[row] = now
            else:
                del rows[row]
            if row[-1] is not None and (was == 0) != (now == 0):
                if was == 0:
                    self._index_of(row[:k]).add(row)
                else:
                    sl = self.index[row[:k]]
                    sl.remove(row)
                    if not sl:
                        del self.index[row[:k]]
        candidates: set[Row] = set(old)
        equality = self.compiled.spec.op in ("=", "<>")
        for key, (before, after) in moved.items():
            sl = self.index.get(key)
            if sl is None:
                continue
            if before is None or after is None:
                candidates.update(sl)  # (NULL compares to nothing: every row flips)
                continue
            # (closed ranges of values whose test can differ between the two)
            spans = [(before, before), (after, after)] if equality else \
                [(min(before, after), max(before, after))]
            for lo, hi in spans:
                candidates.update(sl.irange_key(lo, hi))
        test = self.compiled.test
        out: list[tuple[int, Row]] = []
        values = self.values
        for row in candidates:
            key = row[:k]
            if row[-1] is None or None in key:
                continue  # (SQL's = never matches a NULL key: no scalar for it)
            after = values.get(key)
            before = moved[key][0] if key in moved else after
            v = self.key(row)
            now = rows.get(row, 0) if after is not None and test(v, after) else 0
            was = old.get(row, rows.get(row, 0)) if before is not None and test(v, before) \
                else 0
            if now != was:
                out.append((now - was, row))
        self.pending, self.pending_scalar = {}, {}
        self.epoch += 1
        delta = EpochDelta(self.epoch, tuple(out), self.updates, closed_by_marker)
        self.updates = 0
        return delta

    # -- the node protocol (operators.node) --
    def snapshot(self) -> list[Change]:
        """The rows whose value passes the test against their key's scalar."""
        k, test, values = self.compiled.n_keys, self.compiled.test, self.values
        out: list[Change] = []
        for row, m in self.rows.items():
            s = values.get(row[:k])
            if row[-1] is not None and None not in row[:k] and s is not None \
                    and test(self.key(row), s):
                out.append((m, row))
        return out

    def state_maps(self) -> list[str]:
        return self.state.names()

    def state_entries(self) -> int:
        return len(self.rows) + len(self.scalar)

    def checkpoint(self) -> tuple[dict[Row, int], dict[Row, int]]:
        """The open epoch's changes of the rows and of the scalar."""
        return (self.pending, self.pending_scalar)

    def restore_checkpoint(self, blob: Any) -> None:
        self.pending, self.pending_scalar = blob or ({}, {})
