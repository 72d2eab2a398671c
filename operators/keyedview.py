"""The keyed views that make an outer join an inner join (:mod:`plans.outerjoin`): the
rows of one side with a hidden join key, and, on a padded side, one NULL-padded row per
key of the other side that no row of this side has.

State: per key, the count of this side's kept rows and of the other side's rows (only
on a padded side). An update costs O(1); an epoch's delta is its rows' consolidated
changes plus, for the keys it touched, a padded row in or out: O(the epoch's changes).

Example (``A LEFT JOIN B ON A.x = B.y``, B's side):
    >>> from core.records import Update
    >>> from core.schema import Column, Relation
    >>> from plans.outerjoin import JoinSide, KeyedView
    >>> a = Relation("A", (Column("x", "INT"),))
    >>> b = Relation("B", (Column("y", "INT"), Column("z", "TEXT")))
    >>> spec = KeyedView("_kv_1", (JoinSide("B", "B", ("y",), None, 2),), False,
    ...                  JoinSide("A", "A", ("x",), None, 1))
    >>> view = CompiledKeyedView(spec, b, a, {"a", "b"}).maintain()
    >>> view.apply(Update("+", "A", (7,)))
    >>> view.end_epoch().rows        # key 7 has no B row: padded
    ((1, ((0, 7), None, None)),)
    >>> view.apply(Update("+", "B", (7, "hi")))
    >>> sorted(view.end_epoch().rows, key=repr)   # the first match arrives: pad goes
    [(-1, ((0, 7), None, None)), (1, ((0, 7), 7, 'hi'))]
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from core.codegen import define
from core.records import EpochDelta, Update
from core.schema import Column, Relation, Row
from operators.deletecheck import DeleteCheck
from operators.node import Change, UpdateNode
from operators.state import DictState, State
from plans.outerjoin import JoinSide, KeyedView

KeyOf = Callable[[Row], tuple[Any, ...]]


class CompiledKeyedView:
    """A :class:`~plans.outerjoin.KeyedView` bound to its inputs' schemas: ``own`` (and
    ``other``, the padded-from side's relation); ``base`` names the base tables (whose
    deletes this view checks when it reads them)."""

    def __init__(self, spec: KeyedView, own: Relation, other: Relation | None,
                 base: set[str]) -> None:
        self.spec = spec
        self.own = own
        self.other = other
        self.base = {b.lower() for b in base}
        self.own_keys = tuple(_key_function(side, own) for side in spec.keys)
        self.pad_key = _key_function(spec.pad, other) if spec.pad and other else None
        # (a key column holds a tuple; only the join reads it, by equality)
        self.columns = (*(Column(name, "KEY") for name in spec.hidden), *own.columns)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def reads(self) -> tuple[str, ...]:
        """The relations this view reads (lower case)."""
        pad = (self.spec.pad.source.lower(),) if self.spec.pad else ()
        return tuple(dict.fromkeys((self.spec.own.source.lower(), *pad)))

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        s = self.spec
        keys = "; ".join(f"({', '.join(k.columns)})" + (f" where {k.condition}" if k.condition
                                                         else "") for k in s.keys)
        lines = [f"keyed view (outer join): {s.own.source} AS {s.own.alias} keyed by {keys}",
                 "  rows that can match nothing (NULL key or condition not TRUE): "
                 + ("kept, tagged" if s.preserve else "dropped")]
        if s.pad:
            lines.append(f"  NULL-padded row per key of {s.pad.source} AS {s.pad.alias} "
                         f"({', '.join(s.pad.columns)}) with no row here; counts per key")
        return "\n".join(lines)

    def maintain(self, *_args: Any, validate: bool = True, **_kwargs: Any) -> KeyedViewState:
        return KeyedViewState(self, validate=validate)


class KeyedViewState(UpdateNode):
    """A live keyed view: ``apply`` base or view updates, ``end_epoch`` for the delta.
    Its state per key lives in ``state``'s maps (``keyed.own``, ``keyed.other``, and
    ``keyed.base.<relation>``, the row digests of the base tables it checks deletes
    against, :mod:`operators.deletecheck`): a dict locally, a runner's keyed state on
    Spark and Flink. ``validate=False``: no delete check (in a DAG of views the DAG
    checks base deletes once, :class:`dataflow.circuit.views.DagView`)."""

    def __init__(self, compiled: CompiledKeyedView, state: State | None = None,
                 validate: bool = True) -> None:
        self.compiled = compiled
        self.state: State = state if state is not None else DictState()
        spec = compiled.spec
        self.preserve = spec.preserve
        self.own_source = spec.own.source.lower()
        self.pad_source = spec.pad.source.lower() if spec.pad else None
        self.width = len(compiled.own.columns)
        self.own_count = self.state.map("keyed.own")
        """Kept rows of this side per key (padded sides only)."""
        self.other_count = self.state.map("keyed.other")
        """Rows of the other side per key (padded sides only)."""
        # (the base tables among its inputs: a table read on both sides is one)
        checked = {rel.name.lower(): rel for rel in (compiled.own, compiled.other)
                   if rel is not None and rel.name.lower() in compiled.base}
        self.validator = DeleteCheck(checked, "digests" if validate else "off",
                                     lambda name: self.state.map(f"keyed.base.{name}"))
        self.pending: dict[tuple[Any, ...], int] = {}
        self.touched: dict[tuple[Any, ...], bool] = {}
        self.epoch = 0
        self.updates = 0

    def _padded(self, key: tuple[Any, ...]) -> bool:
        return bool(self.other_count.get(key, 0) > 0 and self.own_count.get(key, 0) == 0)

    def _count(self, counts: MutableMapping[Any, Any], key: tuple[Any, ...], dm: int) -> None:
        if key not in self.touched:
            self.touched[key] = self._padded(key)
        n = counts.get(key, 0) + dm
        if n:
            counts[key] = n
        else:
            del counts[key]

    def apply(self, update: Update) -> None:
        """A base or view update (of this view's own relation, its padded-from one, or
        both)."""
        rel = update.relation.lower()
        row, dm = update.row, update.signed_mult
        if rel in self.compiled.base:
            self.validator.update(rel, row, dm, update.source)
        if rel == self.own_source:
            self.apply_own(row, dm)
        if rel == self.pad_source:
            self.apply_other(row, dm)

    def apply_own(self, row: Row, dm: int) -> None:
        self.updates += 1
        keys = tuple(key_of(row) for key_of in self.compiled.own_keys)
        key = keys[0]
        if key[0] == 0 or self.preserve:
            out = keys + tuple(row)
            m = self.pending.get(out, 0) + dm
            if m:
                self.pending[out] = m
            else:
                del self.pending[out]
            if self.pad_source is not None:
                self._count(self.own_count, key, dm)

    def apply_other(self, row: Row, dm: int) -> None:
        assert self.compiled.pad_key is not None
        self._count(self.other_count, self.compiled.pad_key(row), dm)

    def end_epoch(self, closed_by_marker: bool = False) -> EpochDelta:
        out = self.pending
        pad = (None,) * self.width
        for key, was in self.touched.items():
            now = self._padded(key)
            if now != was:
                row = (key, *pad)
                m = out.get(row, 0) + (1 if now else -1)
                if m:
                    out[row] = m
                else:
                    del out[row]
        self.pending, self.touched = {}, {}
        self.epoch += 1
        delta = EpochDelta(self.epoch, tuple((m, r) for r, m in out.items()), self.updates,
                           closed_by_marker)
        self.updates = 0
        return delta

    # -- the node protocol (operators.node) --
    def snapshot(self) -> list[Change]:
        msg = "a keyed view keeps counts per key, not its rows: no snapshot of it"
        raise NotImplementedError(msg)

    def state_maps(self) -> list[str]:
        return self.state.names()

    def state_entries(self) -> int:
        return self.state.entries()

    def checkpoint(self) -> tuple[dict[tuple[Any, ...], int], dict[tuple[Any, ...], bool]]:
        """The open epoch's rows and the keys it touched (with their padding before)."""
        return (self.pending, self.touched)

    def restore_checkpoint(self, blob: Any) -> None:
        self.pending, self.touched = blob or ({}, {})


def _index(rel: Relation, column: str) -> int:
    names = [c.name.lower() for c in rel.columns]
    return names.index(column.lower())


def _key_function(side: JoinSide, rel: Relation) -> KeyOf:
    """``row -> (0, *key)`` for a row that can match, else ``(side.tag,)``."""
    idx = [_index(rel, c) for c in side.columns]
    env: dict[str, Any] = {"_tagged": (side.tag,)}
    test = "True"
    if side.condition is not None:  # (compiled by the plan: plans.outerjoin)
        env.update(side.condition.env)
        test = side.condition.src
    values = ", ".join(f"row[{i}]" for i in idx)
    nulls = " or ".join(f"row[{i}] is None" for i in idx)
    source = (f"def key_of(row):\n"
              f"    if {nulls} or not {test}:\n"
              f"        return _tagged\n"
              f"    return (0, {values},)\n")
    fn: KeyOf = define(source, f"<key of {side.alias}>", env)["key_of"]
    return fn
