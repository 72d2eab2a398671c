"""Protocols shared by every connector (files, Kafka), and the resume-skip wrapper.

A *source* is any iterable of records (:class:`~core.records.Update` and
:class:`~core.records.EpochEnd`).  Sinks receive one consolidated epoch delta, one
snapshot, or one rejected record at a time; each call is all-or-nothing as seen by a reader
of the sink.

Example:
    >>> from connectors.files import CollectingSink
    >>> sink: DeltaSink = CollectingSink()
    >>> isinstance(sink, DeltaSink) and isinstance(sink, SnapshotSink)
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from core.errors import InputError
from core.records import EpochDelta, Record
from core.schema import Row

Source = Iterable[Record]
"""What a runner consumes: updates and explicit epoch ends, in stream order."""


@runtime_checkable
class DeltaSink(Protocol):
    """Receives the consolidated delta of each epoch, in epoch order."""

    def write_epoch(self, delta: EpochDelta) -> None:
        """Write the rows of one epoch atomically (an epoch without rows writes nothing)."""
        ...

    def close(self) -> None:
        """Release files / connections; idempotent."""
        ...


@runtime_checkable
class SnapshotSink(Protocol):
    """Receives full enumerations of the result (snapshot k after the k-th ``*``)."""

    def write_snapshot(self, k: int, rows: Sequence[tuple[int, Row]]) -> None:
        """Write snapshot ``k`` atomically."""
        ...

    def close(self) -> None:
        """Release files / connections; idempotent."""
        ...


@runtime_checkable
class DeadLetterSink(Protocol):
    """Receives records rejected with ``--on-error skip``, with the reason."""

    def write(self, error: InputError) -> None:
        """Record one rejected record (source, reason, record text)."""
        ...

    def close(self) -> None:
        """Release files / connections; idempotent."""
        ...


class Sink(DeltaSink, SnapshotSink, Protocol):
    """A sink that takes both deltas and snapshots (e.g. a Kafka topic, a test collector)."""


@dataclass
class Outputs:
    """The sinks of a run, opened before the runner starts
    (:func:`dataflow.runners.run.open_outputs`)."""

    deltas: DeltaSink
    snapshots: SnapshotSink | None = None
    dead_letter: DeadLetterSink | None = None
    resume_epoch: int = 0
    """Epochs up to this one are already in the delta file (``--resume``)."""
    resume_snapshot: int = 0

    def close(self) -> None:
        for sink in (self.deltas, self.snapshots, self.dead_letter):
            if sink is not None:
                sink.close()


class SkipCommitted:
    """The one place where a resumed or replayed run skips what a sink already holds:
    wraps a delta and/or snapshot sink and drops epochs up to ``epoch`` and snapshots up
    to ``snapshot`` (recomputed by the run, already committed in the sink), then
    passes the rest on in order. Sinks that skip by themselves inside a transaction
    (Kafka) are not wrapped.

    >>> from connectors.files import CollectingSink
    >>> inner = CollectingSink()
    >>> sink = SkipCommitted(inner, epoch=1)
    >>> for k in (1, 2):
    ...     sink.write_epoch(EpochDelta(k, ((1, (k,)),)))
    >>> inner.rows()
    [(2, 1, (2,))]
    """

    def __init__(self, sink: Any, epoch: int = 0, snapshot: int = 0) -> None:
        self.sink = sink
        self.epoch = epoch
        self.snapshot = snapshot

    def write_epoch(self, delta: EpochDelta) -> None:
        if delta.epoch > self.epoch:
            self.sink.write_epoch(delta)
            self.epoch = delta.epoch

    def write_snapshot(self, k: int, rows: Sequence[tuple[int, Row]]) -> None:
        if k > self.snapshot:
            self.sink.write_snapshot(k, rows)
            self.snapshot = k

    def close(self) -> None:
        self.sink.close()

    def __getattr__(self, name: str) -> Any:
        # count, path, stream, ...: the wrapped sink's own attributes.
        return getattr(self.sink, name)
