"""Protocols shared by every connector (files now, Kafka later).

A *source* is any iterable of records (:class:`~dataflow.records.Update` and
:class:`~dataflow.records.EpochEnd`).  Sinks receive one consolidated epoch delta, one
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
from typing import Protocol, runtime_checkable

from dataflow.errors import InputError
from dataflow.records import EpochDelta, Record
from plans.schema import Row

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
