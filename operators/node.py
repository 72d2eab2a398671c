"""The node protocol: the one lifecycle every node of a circuit offers whoever runs it.

A query runs as a circuit (:mod:`dataflow.circuit.graph`): a DAG of nodes - a compiled query
(CROWN, GHD, triangle or view trees), a keyed view (outer join), a threshold view, the
top-k window, an aggregate's partial and global finalizer - each node, or each
partition of one, driven through the same calls, in the spirit of DBSP's ``Operator``
(``clock_start``, ``eval``, ``flush``/``clock_end``, ``checkpoint``/``restore``):

1. :meth:`Node.open_epoch` ``(e)``: epoch ``e`` begins;
2. :meth:`Node.apply_batch` ``(changes)``: changes of its inputs, in stream order (any
   number of batches per epoch);
3. :meth:`Node.close_epoch` ``()``: the epoch's consolidated delta, ``(mult, row)``
   pairs with no zero and no row twice;
4. :meth:`Node.snapshot` ``()``: the whole current result, ``(mult, row)`` pairs;
5. :meth:`Node.state_maps` ``()`` / :meth:`Node.state_entries` ``()``: the names of the
   keyed maps its state lives in (what a runner binds to its keyed state), and the
   entries they hold;
6. :meth:`Node.checkpoint` ``()`` / :meth:`Node.restore_checkpoint` ``(blob)``: what it
   holds outside those maps (the open epoch's changes), a picklable value that a runner
   stores with the maps and hands back to a fresh node after a restart.

The kind of change a node takes is its own (the protocol's type parameter): a live node
of the local runner takes whole :class:`~core.records.Update` records of the relations
it reads (:data:`LocalNode`); one partition of a stage on Spark or Flink takes the
runners' tagged rows (:data:`PartitionNode`, :class:`dataflow.distributed.partitions.TaggedRow`'s
fields as a plain tuple), already projected and routed to it.

Example (a node counting the rows of its input, its state in one map):
    >>> from core.records import EpochDelta, Update
    >>> from operators.state import DictState
    >>> class Count(Node[Update]):
    ...     def __init__(self):
    ...         self.state, self.open = DictState(), 0
    ...         self.total = self.state.map("count.total")
    ...     def open_epoch(self, epoch): pass
    ...     def apply_batch(self, batch):
    ...         self.open += sum(u.signed_mult for u in batch)
    ...     def close_epoch(self):
    ...         before = self.total.get((), 0)
    ...         self.total[()], self.open = before + self.open, 0
    ...         after = self.total[()]
    ...         return [] if after == before else [(-1, (before,)), (1, (after,))]
    ...     def snapshot(self): return [(1, (self.total.get((), 0),))]
    ...     def state_maps(self): return self.state.names()
    ...     def state_entries(self): return self.state.entries()
    ...     def checkpoint(self): return self.open
    ...     def restore_checkpoint(self, blob): self.open = blob or 0
    >>> node = Count()
    >>> isinstance(node, Node)
    True
    >>> node.open_epoch(1)
    >>> node.apply_batch([Update("+", "R", (1,)), Update("+", "R", (2,))])
    >>> node.close_epoch(), node.snapshot(), node.state_maps()
    ([(-1, (0,)), (1, (2,))], [(1, (2,))], ['count.total'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from core.epochs import CLOSE
from core.records import EpochDelta, Update

__all__ = ["BatchNode", "Change", "HostedNode", "LocalNode", "Node", "PartitionNode", "TaggedTuple",
           "UpdateNode", "drive_rows"]

C_contra = TypeVar("C_contra", contravariant=True)
"""The kind of change a node takes."""

Change = tuple[int, Any]
"""One change of a node's output: a signed multiplicity and a row (for an aggregate's
partial stage, a group and its payload)."""

TaggedTuple = tuple[Any, ...]
"""A runner's tagged row: :class:`dataflow.distributed.partitions.TaggedRow`'s fields as a plain
tuple (slot, seq, epoch, kind, atom, tuple, dm, snapshot)."""


@runtime_checkable
class Node(Protocol[C_contra]):
    """One node of a circuit (or one partition of it): its epoch lifecycle, its result,
    its state. Implementations subclass it explicitly, so that mypy checks them."""

    def open_epoch(self, epoch: int) -> None:
        """Epoch ``epoch`` begins: the changes applied from here on are its own."""
        ...

    def apply_batch(self, batch: Sequence[C_contra]) -> None:
        """Apply changes of this node's inputs, in stream order; on bad input raise
        :class:`core.errors.InputError`."""
        ...

    def close_epoch(self) -> list[Change]:
        """Close the open epoch: its consolidated delta (no zero, no row twice)."""
        ...

    def snapshot(self) -> list[Change]:
        """The whole current result (after the last closed epoch). A node that keeps
        no rows (a keyed view keeps counts per key) raises :class:`NotImplementedError`;
        a circuit asks only its final node and the nodes that ship snapshots on."""
        ...

    def state_maps(self) -> list[str]:
        """The names of the keyed maps its state lives in (``State.map(name)``)."""
        ...

    def state_entries(self) -> int:
        """Stored state entries: map keys plus the members of set and dict values."""
        ...

    def checkpoint(self) -> Any:
        """What it holds outside its maps (picklable; None or empty when nothing)."""
        ...

    def restore_checkpoint(self, blob: Any) -> None:
        """Take back what :meth:`checkpoint` gave (None: nothing), on a node whose maps
        hold the state of the same moment."""
        ...


LocalNode = Node[Update]
"""A live node of the local runner, fed whole updates of the relations it reads."""

PartitionNode = Node[TaggedTuple]
"""One partition of a stage on Spark or Flink, fed tagged rows (projected, routed)."""


def drive_rows(node: PartitionNode, rows: Sequence[TaggedTuple]
               ) -> dict[tuple[str, int], list[Change]]:
    """Run ``rows`` (tagged updates and closes, in the order to apply them) through a
    partition node: each run of updates is one batch, each close closes the epoch
    (its delta under ``("delta", epoch)``), takes the snapshot it asks for (under
    ``("snapshot", number)``) and opens the next epoch. What every runner's partition
    and stage slot does with its rows.

    >>> class Sum(Node[TaggedTuple]):
    ...     def __init__(self): self.open, self.total = 0, 0
    ...     def open_epoch(self, epoch): pass
    ...     def apply_batch(self, batch): self.open += sum(r[6] for r in batch)
    ...     def close_epoch(self):
    ...         self.total, d = self.total + self.open, self.open
    ...         self.open = 0
    ...         return [(1, (d,))] if d else []
    ...     def snapshot(self): return [(1, (self.total,))]
    ...     def state_maps(self): return []
    ...     def state_entries(self): return 0
    ...     def checkpoint(self): return self.open
    ...     def restore_checkpoint(self, blob): self.open = blob or 0
    >>> up = lambda seq, dm: (0, seq, 1, "u", 0, (seq,), dm, 0)
    >>> drive_rows(Sum(), [up(0, 2), up(1, 3), (0, 2, 1, "c", -1, None, 0, 1)])
    {('delta', 1): [(1, (5,))], ('snapshot', 1): [(1, (5,))]}
    """
    out: dict[tuple[str, int], list[Change]] = {}
    start = 0
    for i, r in enumerate(rows):
        if r[3] != CLOSE:  # (TaggedRow.kind)
            continue
        if i > start:
            node.apply_batch(rows[start:i])
        start = i + 1
        epoch, snapshot = r[2], r[7]
        delta = node.close_epoch()
        if delta:
            out[("delta", epoch)] = delta
        if snapshot:
            full = node.snapshot()
            if full:
                out[("snapshot", snapshot)] = full
        node.open_epoch(epoch + 1)
    if start < len(rows):
        node.apply_batch(rows[start:] if start else rows)
    return out



class UpdateNode(Node[Update]):
    """The lifecycle of a live node that applies one update at a time
    (``apply(update)``) and closes an epoch into an
    :class:`~core.records.EpochDelta` (``end_epoch()``), numbering its epochs
    (``epoch``: the last one closed): a keyed or threshold view, a local
    :class:`~dataflow.circuit.view.View`, a DAG of them."""

    epoch: int

    def apply(self, update: Update) -> None:
        raise NotImplementedError

    def end_epoch(self, closed_by_marker: bool = False) -> EpochDelta:
        raise NotImplementedError

    def open_epoch(self, epoch: int) -> None:
        self.epoch = epoch - 1

    def apply_batch(self, batch: Sequence[Update]) -> None:
        apply = self.apply
        for update in batch:
            apply(update)

    def close_epoch(self) -> list[Change]:
        return list(self.end_epoch().rows)

    def held_changes(self) -> int:
        """Changed rows held for the open epoch's delta (a DAG hands a view's on to its
        readers once there are many: :class:`dataflow.circuit.views.DagView`)."""
        pending = getattr(self, "pending", None)
        return len(pending) if isinstance(pending, dict) else 0


class BatchNode(UpdateNode):
    """A live node that nets an epoch's updates (``updates``: how many) and computes
    its delta at the close (:meth:`close_epoch`, its own): ``end_epoch`` numbers that
    delta (a set operation, a window view)."""

    updates: int

    def end_epoch(self, closed_by_marker: bool = False) -> EpochDelta:
        rows = self.close_epoch()
        self.epoch += 1
        delta = EpochDelta(self.epoch, tuple(rows), self.updates, closed_by_marker)
        self.updates = 0
        return delta


class HostedNode(Node[TaggedTuple]):
    """A stage partition hosting a live node (``view``): its lifecycle is the view's;
    a subclass turns tagged rows into the view's changes (:meth:`apply_batch`)."""

    view: Node[Any]

    def open_epoch(self, epoch: int) -> None:
        self.view.open_epoch(epoch)

    def close_epoch(self) -> list[Change]:
        return self.view.close_epoch()

    def snapshot(self) -> list[Change]:
        return self.view.snapshot()

    def state_maps(self) -> list[str]:
        return self.view.state_maps()

    def state_entries(self) -> int:
        return self.view.state_entries()

    def checkpoint(self) -> Any:
        """The view's: the open epoch's changes."""
        return self.view.checkpoint()

    def restore_checkpoint(self, blob: Any) -> None:
        self.view.restore_checkpoint(blob)
