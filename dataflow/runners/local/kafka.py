"""The local runner over a Kafka update topic (see :mod:`connectors.kafka` for the epoch
order and the delivery guarantee):

* the engine replays the update topic from its beginning on every start (a partition
  whose first records were deleted is refused), or, with ``--checkpoint DIR``, loads the
  newest state checkpoint and reads on from its offsets (:mod:`dataflow.runners.local.checkpoint`;
  taken at epoch boundaries every ``--checkpoint-interval`` seconds, when a signal stops
  the run and at its end); epochs already in a Kafka delta topic (read
  ``read_committed`` at start) are recomputed but not written again, each later epoch is
  written in one transaction with the source offsets of its end, so after ``kill -9``
  and a restart every epoch is in the topic exactly once;
* ``--stop-at-end`` stops after the records present at start; otherwise the run goes on
  until SIGINT/SIGTERM: it then finishes the epoch it is in if that epoch's records are
  already in the topic (else the incomplete epoch is left for the next run), commits and
  exits 0;
* bad records stop the run (exit 1, the error names topic, partition and offset) or,
  with ``--on-error skip``, go to the dead-letter topic ``<updates topic>.dead-letter``
  (or ``dead-letter=`` in the URL, or ``--dead-letter FILE|kafka://...``), written in the
  epoch transactions when deltas go to Kafka on the same broker (exactly once); otherwise
  sent at once, at least once: a restart does not resend those of epochs up to the last
  epoch with rows in a resumed delta file, but may resend later ones;
* the rate-based re-planning of file runs (buffering a prefix) is not done: it would hold
  back live input.

"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from connectors.kafka import (
    KafkaConfigError,
    KafkaDeadLetterSink,
    KafkaDeltaSink,
    KafkaEndpoint,
    KafkaUpdateSource,
    StopRequested,
    default_id,
)
from connectors.kafka.change_epochs import upsert_note
from connectors.kafka.changes import ChangeStreamSource, change_source_kwargs
from core.errors import UsageError
from core.records import EpochDelta, Record
from core.schema import Row
from dataflow.circuit.drive import DriveStats, drive
from dataflow.runners.kafka import endpoint, kafka_errors, query_text
from dataflow.runners.local.checkpoint import (
    Checkpoint,
    CheckpointError,
    fingerprint,
    read_checkpoint,
    write_checkpoint,
)

if TYPE_CHECKING:
    from dataflow.circuit.drive import LiveView
    from dataflow.runners.run import Progress, RunContext

__all__ = ["run_local_kafka"]


def run_local_kafka(ctx: RunContext) -> DriveStats:
    """The local runner fed from a ``kafka://`` update source (module docstring)."""
    opts, out = ctx.options, ctx.outputs
    ep = endpoint(opts.updates, opts)
    group = ep.group_id or default_id("group", query_text(opts), opts.deltas or "-")
    checkpointer = _Checkpointer.open(ctx, ep) if opts.checkpoint else None
    restored = checkpointer.restored if checkpointer is not None else None
    with kafka_errors(f"--updates {ep.url}", ep.bootstrap):
        common: dict[str, Any] = {"group_id": group, "on_error": opts.on_error,
                  "dead_letter": out.dead_letter, "stop_at_end": opts.stop_at_end,
                  "stop_requested": lambda: ctx.progress.stop_requested,
                  "start_offsets": restored.positions if restored is not None else None}
        source: KafkaUpdateSource
        if ep.format != "json":  # Debezium or upsert topics (connectors.kafka.changes)
            try:
                source = ChangeStreamSource(
                    ep, ctx.query.schema, **common, **change_source_kwargs(opts),
                    start_windows=restored.windows if restored is not None else None)
            except KafkaConfigError as exc:
                raise UsageError(str(exc)) from None
        else:
            source = KafkaUpdateSource(ep, ctx.query.schema, **common)
    try:
        if opts.epoch is not None and len(source.streams) > 1 and ep.format == "json":
            msg = (f"--epoch {opts.epoch}: epochs of N updates are defined for a "
                   f"single-partition update topic only, and {ep.url} has "
                   f"{len(source.streams)} partitions (streams); cut epochs with "
                   f'{{"op": "*"}} markers in every partition instead (ivmflow produce '
                   f"writes them for every '*' line)")
            raise UsageError(msg)
        dead = out.dead_letter
        if isinstance(dead, KafkaDeadLetterSink):
            dead.raw = source.raw_record
            # A standalone dead-letter topic (deltas not in a Kafka transaction): the
            # bad records of epochs re-run on restart are not sent again.
            dead.skip_while = lambda: ctx.progress.stats.epochs < out.resume_epoch
        with kafka_errors(f"run over {ep.url}", ep.bootstrap):
            return _drive(ctx, source, checkpointer)
    finally:
        source.close()


def _drive(ctx: RunContext, source: KafkaUpdateSource,
           checkpointer: _Checkpointer | None = None) -> DriveStats:
    from dataflow.runners.run import maintain_view, state_limit

    opts, out = ctx.options, ctx.outputs
    deltas, snapshots = out.deltas, out.snapshots
    if isinstance(deltas, KafkaDeltaSink):
        deltas.bind_source(source)
    view = maintain_view(ctx)
    if checkpointer is not None:
        checkpointer.start(view, source)

    def at_boundary(delta_or_snapshot: bool) -> None:
        # The state is exactly that of an epoch end whose output is committed: the only
        # moment a checkpoint may be taken.
        if checkpointer is not None and delta_or_snapshot:
            checkpointer.at_boundary(force=ctx.progress.stop_requested)

    def on_delta(delta: EpochDelta) -> None:
        deltas.write_epoch(delta)  # epochs the sink already holds are skipped there
        if not isinstance(deltas, KafkaDeltaSink):
            source.commit()  # after the file commit: offsets never run ahead of output
        if checkpointer is not None:
            checkpointer.saw(delta)
        cut_by_count = opts.epoch is not None and delta.updates == opts.epoch
        # A marker's snapshot comes after this call: checkpoint after the snapshot then.
        at_boundary(cut_by_count or (delta.closed_by_marker and snapshots is None))
        if ctx.progress.stop_requested:
            raise StopRequested

    on_snapshot: Callable[[int, Sequence[tuple[int, Row]]], None] | None = None
    if snapshots is not None:
        def on_snapshot(k: int, rows: Sequence[tuple[int, Row]]) -> None:
            snapshots.write_snapshot(k, rows)
            at_boundary(True)

    records: Iterable[Record] = _drawing(ctx.progress, source)
    if checkpointer is not None:
        records = checkpointer.watch(records)
    # StopRequested: stopped by a signal at an epoch boundary, everything written is whole.
    # With --stop-at-end the source is bounded: stopping before its end is then said in
    # the exit code (130/143), as for a file.
    try:
        drive(
            view,
            records,
            # (a change-stream source cuts its own epochs, --epoch included)
            epoch_size=None if isinstance(source, ChangeStreamSource) else opts.epoch,
            on_delta=on_delta,
            on_snapshot=on_snapshot,
            on_error=opts.on_error,
            dead_letter=out.dead_letter,
            stats=ctx.progress.stats,
            limit=state_limit(
                ctx, view, "running again (from the newest --checkpoint, else replaying "
                "the topic)"),
        )
    except StopRequested:
        ctx.progress.stats.stopped = opts.stop_at_end
    if checkpointer is not None:
        checkpointer.at_end()
    if isinstance(source, ChangeStreamSource) and source.applier.state:
        applier = source.applier
        ctx.progress.state_note = upsert_note(applier.keys, applier.state_bytes())
    return ctx.progress.stats


class _Checkpointer:
    """Takes the local runner's state checkpoints (:mod:`dataflow.runners.local.checkpoint`): at an
    epoch boundary once ``--checkpoint-interval`` seconds have passed since the last one,
    at a boundary where a signal stops the run, and at the end of the run when nothing
    was read after the last boundary."""

    def __init__(self, ctx: RunContext, directory: str, fp: str,
                 restored: Checkpoint | None) -> None:
        self.ctx = ctx
        self.directory = directory
        self.fingerprint = fp
        self.restored = restored
        from dataflow.runners.run import LOCAL_CHECKPOINT_S

        interval = ctx.options.checkpoint_interval
        self.interval = LOCAL_CHECKPOINT_S if interval is None else interval
        self.written = 0
        self._view: LiveView | None = None
        self._source: KafkaUpdateSource | None = None
        self._last = time.monotonic()
        self._read = 0  # records yielded by the source
        self._boundary_at: int | None = None  # ``_read`` at the last unsaved boundary
        self._last_rows_epoch = restored.last_rows_epoch if restored is not None else 0

    @classmethod
    def open(cls, ctx: RunContext, ep: KafkaEndpoint) -> _Checkpointer:
        """Read the checkpoint of ``--checkpoint`` (if any) and check it against the
        output: a checkpoint past the output's last epoch would skip epochs."""
        opts, out = ctx.options, ctx.outputs
        assert opts.checkpoint is not None
        topics = ",".join(t for t, _ in ep.input_topics(ctx.query.schema))
        fp = fingerprint(query_text(opts), f"kafka://{ep.bootstrap}/{topics}")
        restored = read_checkpoint(opts.checkpoint, fp, ctx.query.schema)
        if restored is not None and restored.last_rows_epoch > out.resume_epoch:
            where = opts.deltas or "stdout"
            msg = (f"{opts.checkpoint}: expected a checkpoint no newer than the delta "
                   f"output, found one at epoch {restored.epoch} (with rows up to epoch "
                   f"{restored.last_rows_epoch}) while {where} holds epochs up to "
                   f"{out.resume_epoch}: resuming would leave epochs "
                   f"{out.resume_epoch + 1}..{restored.epoch} out; point --deltas at the "
                   f"run's output (with --resume for a file), or delete "
                   f"{opts.checkpoint} to recompute from the beginning of the topic")
            raise CheckpointError(msg)
        return cls(ctx, opts.checkpoint, fp, restored)

    def start(self, view: LiveView, source: KafkaUpdateSource) -> None:
        """Load the restored state (if any) into the fresh ``view``."""
        self._view, self._source = view, source
        ck = self.restored
        if ck is None:
            return
        view.restore_checkpoint((ck.epoch, ck.base))
        if isinstance(source, ChangeStreamSource):  # the upsert state is the base's rows
            source.applier.load((rel, row) for rel, row, _mult in ck.base)
        stats = self.ctx.progress.stats
        stats.epochs, stats.snapshots, stats.updates = ck.epoch, ck.snapshots, ck.updates
        if not self.ctx.options.quiet:
            from dataflow.runners.run import PROG

            print(f"{PROG}: resumed from checkpoint {self.directory} at epoch {ck.epoch} "
                  f"({len(ck.base)} base tuples)", file=sys.stderr)

    def watch(self, records: Iterable[Record]) -> Iterator[Record]:
        for rec in records:
            self._read += 1
            yield rec

    def saw(self, delta: EpochDelta) -> None:
        if delta.rows:
            self._last_rows_epoch = delta.epoch

    def at_boundary(self, force: bool) -> None:
        self._boundary_at = self._read
        if force or time.monotonic() - self._last >= self.interval:
            self._write()

    def at_end(self) -> None:
        # Only if the state is still that of the last boundary (nothing read since).
        if self._boundary_at is not None and self._boundary_at == self._read:
            self._write()

    def _write(self) -> None:
        assert self._view is not None and self._source is not None
        stats = self.ctx.progress.stats
        write_checkpoint(self.directory, Checkpoint(
            self.fingerprint, epoch=stats.epochs, snapshots=stats.snapshots,
            updates=stats.updates, last_rows_epoch=self._last_rows_epoch,
            positions=self._source.positions(),
            base=self._view.checkpoint()[1],  # (a live view's: its base tuples)
            windows=self._source.windows() if isinstance(self._source, ChangeStreamSource)
            else {},
        ))
        self._last = time.monotonic()
        self._boundary_at = None
        self.written += 1


def _drawing(progress: Progress, records: Iterable[Record]) -> Iterator[Record]:
    """Pass records through, redrawing the progress line now and then (unlike
    ``Progress.watch`` this never ends early: the source stops at epoch boundaries)."""
    for i, rec in enumerate(records, 1):
        yield rec
        progress.tick(i)
