"""Where a Flink job's epochs go: the delta and snapshot sinks, opened in the one
operator that writes them (the epoch merger, or the last stage), a CSV file resumed at
its commit record or a transactional Kafka topic (of Debezium change events for
``format=debezium-json``), each skipping the epochs it already holds, so that after a
restore every epoch is written exactly once. No pyflink here: the job pickles an
:class:`EpochSinks` into its operator.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> sinks = EpochSinks(str(d / "out.csv"), None, ("a",))
    >>> sinks.write(1, 0, {("delta", 1): [(1, (7,))]})
    >>> sinks.close()
    >>> (d / "out.csv").read_text().splitlines()
    ['epoch,mult,a', '1,1,7']
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from core.consolidate import OrderBy
from core.faults import fault_point
from core.records import EpochDelta

__all__ = ["STOP_MARKER", "EpochSinks", "StopRequested", "open_sink"]

STOP_MARKER = "stop-requested"
"""The file (in the run's checkpoint directory) the run's process writes on Ctrl-C or
SIGTERM, before it cancels the job: the sinks write no epoch once it exists, so a stop
takes effect at the next epoch boundary, not when the cancellation reaches the tasks
(meanwhile a fast job would have written on to its end)."""


class StopRequested(RuntimeError):
    """The run was asked to stop: the epoch about to be written is left to the resumed
    run. Raised in the writing operator, so that no checkpoint past this epoch completes
    (the job's restore point still holds the epoch, and a resumed run writes it)."""


class EpochSinks:
    """The delta and snapshot sinks of a run, opened in the operator that writes them:
    each epoch once, in order (sinks skip epochs they already hold, so epochs replayed
    after a restore are not written twice)."""

    def __init__(self, deltas: str | None, snapshots: str | None,
                 columns: tuple[str, ...], kafka_options: Sequence[str] = (),
                 order_by: OrderBy = (),
                 debezium_key: Sequence[int] | None = None,
                 stop_marker: str | None = None) -> None:
        self.stop_marker = stop_marker
        """:data:`STOP_MARKER`'s path for this run (None: no check; a cluster's task
        managers may not see the client's files, and then the cancellation stops it)."""
        self.deltas_path, self.snapshots_path, self.columns = deltas, snapshots, columns
        self.debezium_key = tuple(debezium_key) if debezium_key is not None else None
        """The output's key for Debezium change events (``u`` pairs), if any."""
        self.kafka_options = list(kafka_options)
        self.order_by = tuple(order_by)
        """The query's ORDER BY: a snapshot file lists the merged rows in that order."""
        self.deltas: Any = None
        self.snapshots: Any = None
        self.opened = False

    def open(self) -> None:
        self.opened = True
        opts = self.kafka_options
        self.deltas = open_sink(self.deltas_path, self.columns, "epoch", opts,
                                 debezium_key=self.debezium_key)
        self.snapshots = open_sink(self.snapshots_path, self.columns, "snapshot", opts,
                                    self.order_by)

    def write(self, epoch: int, snapshot: int,
              merged: Mapping[tuple[str, int], list[tuple[int, Any]]]) -> None:
        """Write the epoch's merged delta (and the snapshot its marker asked for),
        opening the sinks first if :meth:`open` was not called yet."""
        fault_point("epoch")  # (one operator writes the epochs: the count is the run's)
        if self.stop_marker is not None and os.path.exists(self.stop_marker):
            # Raise rather than skip: a skipped epoch whose state a later checkpoint
            # holds would be lost; a failed task completes no checkpoint past it.
            msg = f"{STOP_MARKER}: the run was stopped before epoch {epoch} was written"
            raise StopRequested(msg)
        if not self.opened:
            self.open()
        if self.deltas is not None:
            self.deltas.write_epoch(EpochDelta(epoch, tuple(merged.get(("delta", epoch), []))))
        if snapshot and self.snapshots is not None:
            self.snapshots.write_snapshot(snapshot, merged.get(("snapshot", snapshot), []))

    def close(self) -> None:
        for sink in (self.deltas, self.snapshots):
            if sink is not None:
                sink.close()


def open_sink(target: str | None, columns: tuple[str, ...], kind: str,
               kafka_options: Sequence[str] = (),
               order_by: OrderBy = (),
               debezium_key: Sequence[int] | None = None) -> Any:
    """The merger's sink: a CSV file (resumed) or a Kafka topic (transactional, skipping
    the epochs already in the topic; a stable transactional id per topic, so a
    restarted job fences the crashed one and aborts its open transaction), of Debezium
    change events for ``format=debezium-json`` (``debezium_key``: the output columns
    that pair a deleted and an inserted row as a ``u``)."""
    if not target:
        return None
    if target.lower().startswith("kafka://"):
        from connectors.kafka import KafkaDeltaSink, default_id, parse_kafka_url

        ep = parse_kafka_url(target, kafka_options)
        txn = default_id("flink", kind, target)
        if ep.format == "debezium-json" and kind == "epoch":  # change events
            from connectors.kafka.debezium_sink import DebeziumDeltaSink

            return DebeziumDeltaSink(ep, columns, key=debezium_key, transactional_id=txn)
        return KafkaDeltaSink(ep, columns, kind=kind,  # type: ignore[arg-type]
                              transactional_id=txn)
    from connectors.base import SkipCommitted
    from connectors.files import DeltaCsvSink, SnapshotCsvSink

    if kind == "epoch":
        dsink = DeltaCsvSink(target, columns, resume=True)
        return SkipCommitted(dsink, epoch=dsink.last_committed_epoch)
    ssink = SnapshotCsvSink(target, columns, resume=True, order_by=order_by)
    return SkipCommitted(ssink, snapshot=ssink.last_committed_snapshot)
