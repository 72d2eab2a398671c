"""The threshold view (:class:`plans.threshold.ThresholdFilter`): the rows of a view
whose value compares true with a one-row scalar view, maintained in O(the rows that
change or flip) per epoch.

State: the rows view's rows with their multiplicities (map ``threshold.rows``) and the
scalar view's row (map ``threshold.scalar``); derived from them, the rows ordered by
their value (rebuilt when the view is made, e.g. after a restore). Per epoch:

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
from collections.abc import Callable, Sequence
from typing import Any

from sortedcontainers import SortedKeyList

from core.epochs import UPDATE
from core.errors import QueryError
from core.records import EpochDelta, Update
from core.schema import Relation, Row
from operators.keyedview import WholeRow
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
    ``rows`` (the compared value its last column) and ``scalar`` (one column)."""

    def __init__(self, spec: ThresholdFilter, rows: Relation, scalar: Relation) -> None:
        self.spec = spec
        self.rows = rows
        self.scalar = scalar
        self.columns = rows.columns
        a = SqlType.of_column(rows.columns[-1])
        b = SqlType.of_column(scalar.columns[0])
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
        return (f"threshold view: rows of {s.source} with value {s.op} the one value of "
                f"{s.scalar}, ordered by value (a moving scalar reads the rows between "
                "its old and new value)")

    def maintain(self, *_args: Any, **_kwargs: Any) -> ThresholdState:
        return ThresholdState(self)

    def stage_layout(self, parallelism: int) -> ThresholdLayout:
        """Its layout on Spark and Flink: one global partition (the scalar meets every
        row)."""
        return ThresholdLayout(self)

    def stage_task(self, state: State, layout: Any) -> ThresholdTask:
        """Its one partition, all its state in ``state``."""
        return ThresholdTask(self, state)


def _identity(v: Any) -> Any:
    return v


class ThresholdState:
    """A live threshold view: ``apply`` its inputs' updates, ``end_epoch`` for the
    delta."""

    def __init__(self, compiled: CompiledThreshold, state: State | None = None) -> None:
        self.compiled = compiled
        self.state: State = state if state is not None else DictState()
        self.rows = self.state.map("threshold.rows")
        """The rows view's rows -> multiplicity."""
        self.scalar = self.state.map("threshold.scalar")
        """The scalar view's rows (one, or none) -> multiplicity."""
        domain = compiled.domain
        self.key: Callable[[Row], Any] = lambda row: domain(row[-1])
        self.index = SortedKeyList((r for r in self.rows if r[-1] is not None), key=self.key)
        self.source = compiled.spec.source.lower()
        self.scalar_name = compiled.spec.scalar.lower()
        self.pending: dict[Row, int] = {}
        self.pending_scalar: dict[Row, int] = {}
        self.epoch = 0
        self.updates = 0

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

    def _value(self) -> Any:
        live = [r for r, m in self.scalar.items() if m > 0]
        if len(live) > 1:
            msg = (f"scalar subquery {self.compiled.spec.scalar} has {len(live)} rows: "
                   "a scalar subquery must return at most one row")
            raise QueryError(msg)
        v = live[0][0] if live else None
        return None if v is None else self.compiled.domain(v)

    def end_epoch(self, closed_by_marker: bool = False) -> EpochDelta:
        before = self._value()
        for row, dm in self.pending_scalar.items():
            if dm:
                m = self.scalar.get(row, 0) + dm
                if m:
                    self.scalar[row] = m
                else:
                    del self.scalar[row]
        after = self._value()
        old: dict[Row, int] = {}
        """changed row -> its multiplicity before the epoch"""
        rows, index = self.rows, self.index
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
                    index.add(row)
                else:
                    index.remove(row)
        candidates: set[Row] | Any = old.keys()
        if before != after:
            if before is None or after is None:
                candidates = list(rows) + [r for r in old if r not in rows]
            else:
                # (closed ranges of values whose test can differ between the two)
                spans = [(before, before), (after, after)] \
                    if self.compiled.spec.op in ("=", "<>") else \
                    [(min(before, after), max(before, after))]
                candidates = set(old)
                for lo, hi in spans:
                    candidates.update(index.irange_key(lo, hi))
        test = self.compiled.test
        key = self.key
        out: list[tuple[int, Row]] = []
        for row in candidates:
            v = row[-1]
            if v is None:
                continue
            k = key(row)
            now = rows.get(row, 0) if after is not None and test(k, after) else 0
            was = old.get(row, rows.get(row, 0)) if before is not None and test(k, before) \
                else 0
            if now != was:
                out.append((now - was, row))
        self.pending, self.pending_scalar = {}, {}
        self.epoch += 1
        delta = EpochDelta(self.epoch, tuple(out), self.updates, closed_by_marker)
        self.updates = 0
        return delta

    def state_entries(self) -> int:
        return len(self.rows) + len(self.scalar)


# -- as a stage on Spark and Flink (dataflow.stages.StageNode) ---------------------------
_KIND, _ATOM, _T, _DM, _EPOCH = 3, 4, 5, 6, 2  # (TaggedRow's fields)
ROWS, SCALAR = 0, 1
"""The atoms of the stage's two inputs."""


class _OnePartition:
    partitions = 1

    @staticmethod
    def route(atom: int, row: Row) -> list[int]:
        return [0]


class ThresholdLayout:
    """One partition reading both inputs whole."""

    partitions = 1
    partitioner = _OnePartition()

    def __init__(self, compiled: CompiledThreshold) -> None:
        self.inputs: dict[str, list[tuple[int, Any]]] = {
            compiled.spec.source.lower(): [(ROWS, WholeRow())],
            compiled.spec.scalar.lower(): [(SCALAR, WholeRow())]}


class ThresholdTask:
    """The threshold view's one stage partition: rows and scalar one entry each in
    ``state``'s maps, the ordered index rebuilt from them when the task is made."""

    def __init__(self, compiled: CompiledThreshold, state: State) -> None:
        self.view = ThresholdState(compiled, state)
        self.state = state

    def process_bundles(self, rows: Sequence[Sequence[Any]]
                        ) -> dict[tuple[str, int], list[tuple[int, Any]]]:
        out: dict[tuple[str, int], list[tuple[int, Any]]] = {}
        view = self.view
        for r in rows:
            if r[_KIND] == UPDATE:
                if r[_ATOM] == ROWS:
                    view.add_row(r[_T], r[_DM])
                else:
                    view.add_scalar(r[_T], r[_DM])
                continue
            delta = view.end_epoch()
            if delta.rows:
                out[("delta", r[_EPOCH])] = list(delta.rows)
        return out

    def open_epoch(self) -> Any:
        return (self.view.pending, self.view.pending_scalar)

    def restore_open_epoch(self, blob: Any) -> None:
        self.view.pending, self.view.pending_scalar = blob or ({}, {})
