"""The views that are not compiled queries as stages on Spark and Flink: a keyed view
(:mod:`operators.keyedview`, the sides of outer joins and anti-joins), a threshold
view (:mod:`operators.threshold`), a set operation (:mod:`operators.setop`) and a
window view (:mod:`operators.window`). Each gets a stage layout (its inputs, whole
rows, partitioned by its key, so that a key's rows of every input meet in one
partition; the set operation's and window's layouts are theirs,
:mod:`dataflow.circuit.setops` and :mod:`dataflow.circuit.windows`) and a task per
partition (a node of tagged rows, :mod:`operators.node`: its delta at each close, its
state per key in the partition's maps: O(changes) per epoch), which
:mod:`dataflow.distributed.stages` hosts as it hosts a compiled query.

Example:
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE A(x INT); CREATE TABLE B(y INT, z INT); "
    ...                   "SELECT A.x, B.z FROM A LEFT JOIN B ON A.x = B.y")
    >>> name, node = q.inner[0]
    >>> layout = stage_layout(node, 4)
    >>> layout.partitions, sorted(layout.inputs)
    (4, ['a'])
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from core.schema import Row
from operators.keyedview import CompiledKeyedView, KeyedViewState
from operators.node import HostedNode, TaggedTuple
from operators.setop import SetOpState
from operators.state import State
from operators.threshold import CompiledThreshold, ThresholdState
from operators.window import WindowState
from plans.setops import SetOperation
from plans.windows import WindowOp

__all__ = ["InputLayout", "KeyRouter", "KeyedViewTask", "SetOpTask", "ThresholdTask",
           "WholeRow", "WindowTask", "partition_of", "stage_layout", "stage_task"]

_EPOCH, _ATOM, _T, _DM = 2, 4, 5, 6  # (TaggedRow's fields)
OWN, OTHER = 0, 1
"""The atoms of a keyed view's two inputs (the same relation may be both)."""
ROWS, SCALAR = 0, 1
"""The atoms of a threshold view's two inputs."""


class WholeRow:
    """A stage input's projector that takes the row as it is."""

    @staticmethod
    def project(row: Row) -> Row:
        return row


def partition_of(key: Any, partitions: int) -> int:
    """The stage partition of a key: a crc32 of its repr (not hash(): the same in every
    worker process).

    >>> partition_of((7, "x"), 4) == partition_of((7, "x"), 4)
    True
    """
    return zlib.crc32(repr(key).encode()) % partitions


class KeyRouter:
    """Routes a row of input ``atom`` to the partition of its key (``keys[atom](row)``),
    so that a key's rows of every input meet in one partition."""

    def __init__(self, keys: dict[int, Callable[[Row], Any]], partitions: int) -> None:
        self.keys = keys
        self.partitions = partitions

    def route(self, atom: int, row: Row) -> list[int]:
        if self.partitions == 1:
            return [0]
        return [partition_of(self.keys[atom](row), self.partitions)]


@dataclass
class InputLayout:
    """A stage's layout: ``partitions``, its ``partitioner`` (``route(atom, row)``) and
    ``inputs``: relation -> [(atom, projector)] (here the whole row)."""

    partitions: int
    partitioner: KeyRouter
    inputs: dict[str, list[tuple[int, Any]]]


def _keyed_view_layout(compiled: CompiledKeyedView, parallelism: int) -> InputLayout:
    own_key, pad_key = compiled.own_keys[0], compiled.pad_key
    keys: dict[int, Callable[[Row], Any]] = {OWN: own_key}
    if pad_key is not None:
        keys[OTHER] = pad_key
    partitions = max(1, parallelism)
    inputs: dict[str, list[tuple[int, Any]]] = {}
    inputs.setdefault(compiled.spec.own.source.lower(), []).append((OWN, WholeRow()))
    if compiled.spec.pad is not None:
        inputs.setdefault(compiled.spec.pad.source.lower(), []).append((OTHER, WholeRow()))
    return InputLayout(partitions, KeyRouter(keys, partitions), inputs)


def _threshold_layout(compiled: CompiledThreshold, parallelism: int) -> InputLayout:
    # (one global partition for an uncorrelated scalar: it meets every row)
    k, idx = compiled.n_keys, compiled.scalar_keys
    keys: dict[int, Callable[[Row], Any]] = {
        ROWS: lambda row: tuple(row[:k]), SCALAR: lambda row: tuple(row[i] for i in idx)}
    partitions = max(1, parallelism) if k else 1
    inputs = {compiled.spec.source.lower(): [(ROWS, WholeRow())],
              compiled.spec.scalar.lower(): [(SCALAR, WholeRow())]}
    return InputLayout(partitions, KeyRouter(keys, partitions), inputs)


class _ViewTask(HostedNode):
    """One partition of a view's stage, as a node (:mod:`operators.node`): each update
    row to :meth:`add`, the lifecycle to the live view it hosts."""

    view: KeyedViewState | ThresholdState

    def add(self, atom: int, row: Row, dm: int, epoch: int) -> None:
        raise NotImplementedError

    def apply_batch(self, batch: Sequence[TaggedTuple]) -> None:
        add = self.add
        for r in batch:
            add(r[_ATOM], r[_T], r[_DM], r[_EPOCH])


class KeyedViewTask(_ViewTask):
    """A keyed view's partition: its counts per key in ``state``'s maps, and the delete
    check of the base tables it reads (row digests, ``keyed.base.<table>``)."""

    def __init__(self, compiled: CompiledKeyedView, state: State) -> None:
        self.view: KeyedViewState = KeyedViewState(compiled, state)
        self.state = state
        # (a base relation read twice is checked once, on its own side)
        own = compiled.spec.own.source.lower()
        own_base = own in compiled.base
        pad = compiled.spec.pad
        self.checked = {OWN: own} if own_base else {}
        if pad is not None and pad.source.lower() in compiled.base and not (
                own_base and pad.source.lower() == own):
            self.checked[OTHER] = pad.source.lower()

    def add(self, atom: int, row: Row, dm: int, epoch: int) -> None:
        rel = self.checked.get(atom)
        if rel is not None:
            self.view.validator.update(rel, row, dm, f"{rel} (epoch {epoch})")
        if atom == OWN:
            self.view.apply_own(row, dm)
        else:
            self.view.apply_other(row, dm)


class ThresholdTask(_ViewTask):
    """A threshold view's partition: rows and scalar one entry each in ``state``'s maps,
    the ordered index rebuilt from them when the task is made."""

    def __init__(self, compiled: CompiledThreshold, state: State) -> None:
        self.view: ThresholdState = ThresholdState(compiled, state)
        self.state = state

    def add(self, atom: int, row: Row, dm: int, epoch: int) -> None:
        if atom == ROWS:
            self.view.add_row(row, dm)
        else:
            self.view.add_scalar(row, dm)


class SetOpTask(HostedNode):
    """One partition of a set operation's stage: the rows its partition owns (rows are
    routed by their value, so a row of every input meets in one partition), its
    counts in ``state``'s maps. A row's atom is its input's position."""

    def __init__(self, spec: SetOperation, state: State) -> None:
        self.view: SetOpState = SetOpState(spec, state)
        self.state = state
        self.slots = tuple((0,) if self.view.summed else (i,)
                           for i in range(len(spec.inputs)))

    def apply_batch(self, batch: Sequence[TaggedTuple]) -> None:
        add, slots = self.view.add, self.slots
        for r in batch:
            add(slots[r[_ATOM]], r[_T], r[_DM])


class WindowTask(HostedNode):
    """One partition of a window view's stage: the rows of the window partitions it
    owns (routed by their PARTITION BY values), its rows in ``state``'s maps."""

    def __init__(self, spec: WindowOp, state: State) -> None:
        self.view: WindowState = WindowState(spec, state)
        self.state = state

    def apply_batch(self, batch: Sequence[TaggedTuple]) -> None:
        add = self.view.add
        for r in batch:
            add(r[_T], r[_DM])



def stage_layout(node: CompiledKeyedView | CompiledThreshold, parallelism: int
                 ) -> InputLayout:
    """The stage layout of a keyed or threshold view."""
    if isinstance(node, CompiledKeyedView):
        return _keyed_view_layout(node, parallelism)
    return _threshold_layout(node, parallelism)


def stage_task(node: CompiledKeyedView | CompiledThreshold, state: State) -> _ViewTask:
    """One partition of a keyed or threshold view's stage."""
    if isinstance(node, CompiledKeyedView):
        return KeyedViewTask(node, state)
    return ThresholdTask(node, state)
