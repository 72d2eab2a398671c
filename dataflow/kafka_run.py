"""Kafka in the local runner and the command line: ``ivmflow run`` with ``kafka://``
sources and sinks, ``ivmflow produce`` and ``ivmflow consume``.

The local runner over a Kafka update topic (see :mod:`connectors.kafka` for the epoch
order and the delivery guarantee):

* the engine replays the update topic from its beginning on every start (a partition
  whose first records were deleted is refused), or, with ``--checkpoint DIR``, loads the
  newest state checkpoint and reads on from its offsets (:mod:`dataflow.checkpoint`;
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

Example (with a broker on 127.0.0.1:9092)::

    ivmflow produce updates.csv kafka://127.0.0.1:9092/updates --partitions 3
    ivmflow run q.sql --updates kafka://127.0.0.1:9092/updates \\
        --deltas kafka://127.0.0.1:9092/deltas --stop-at-end
    ivmflow consume kafka://127.0.0.1:9092/deltas
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.base import DeadLetterSink, DeltaSink, SnapshotSink
from connectors.files import (
    CsvStreamSink,
    DeadLetterCsvSink,
    DeltaCsvSink,
    SnapshotCsvSink,
    format_value,
    read_updates,
)
from connectors.kafka import (
    BOOTSTRAP_TIMEOUT_MS,
    KafkaConfigError,
    KafkaDeadLetterSink,
    KafkaDeltaSink,
    KafkaEndpoint,
    KafkaUpdateSource,
    StopRequested,
    default_id,
    parse_kafka_url,
    produce_updates,
    read_deltas,
    unique_columns,
)
from dataflow.checkpoint import (
    Checkpoint,
    CheckpointError,
    fingerprint,
    read_checkpoint,
    write_checkpoint,
)
from dataflow.errors import InputError, IvmflowError
from dataflow.local import DriveStats, drive
from dataflow.records import EpochDelta, EpochEnd, Op, Record, Update
from plans.schema import Row, Schema

if TYPE_CHECKING:
    from dataflow.api import View
    from dataflow.cli import Outputs, Progress, RunContext, RunOptions

__all__ = ["add_commands", "is_kafka", "open_outputs", "run_command", "run_local_kafka"]


class KafkaUnreachableError(IvmflowError):
    """kafka-python could not talk to the broker (exit code 1)."""


def is_kafka(target: str | None) -> bool:
    """True for a ``kafka://`` URL.

    >>> is_kafka("kafka://h:1/t"), is_kafka("out.csv"), is_kafka(None)
    (True, False, False)
    """
    return bool(target) and str(target).lower().startswith("kafka://")


def _endpoint(url: str, opts: RunOptions | None = None) -> KafkaEndpoint:
    from dataflow.cli import UsageError

    try:
        return parse_kafka_url(url, opts.kafka_options if opts is not None else ())
    except KafkaConfigError as exc:
        raise UsageError(str(exc)) from None


def _query_text(opts: RunOptions) -> str:
    try:
        return Path(opts.query).read_text(encoding="utf-8")
    except OSError:
        return opts.query


def _kafka_errors(what: str, bootstrap: str) -> Any:
    """Turn kafka-python's errors into a clear :class:`KafkaUnreachableError`."""
    from kafka.errors import KafkaError

    @contextlib.contextmanager
    def guard() -> Iterator[None]:
        try:
            yield
        except KafkaError as exc:
            name, text = type(exc).__name__, str(exc)
            detail = text if text.startswith(name) else f"{name}: {text}"
            msg = (f"{what}: Kafka at {bootstrap} failed: {detail}; check that the broker "
                   f"runs and the connection options are right (an unreachable broker "
                   f"is given up after bootstrap.timeout.ms, default "
                   f"{BOOTSTRAP_TIMEOUT_MS // 1000} s)")
            raise KafkaUnreachableError(msg) from None

    return guard()


# ---------------------------------------------------------------------------------------
# ivmflow run


def open_outputs(opts: RunOptions, columns: Sequence[str]) -> Outputs:
    """The sinks of a run where some source or sink is ``kafka://`` (files otherwise,
    as :func:`dataflow.cli._open_outputs`).  Kafka sinks always resume: epochs already in
    the topic are not written again."""
    from dataflow.cli import Outputs

    text = _query_text(opts)
    opened: list[Any] = []
    try:
        deltas: DeltaSink
        resume_epoch = 0
        if is_kafka(opts.deltas):
            ep = _endpoint(str(opts.deltas), opts)
            with _kafka_errors(f"--deltas {ep.url}", ep.bootstrap):
                ksink = KafkaDeltaSink(ep, columns,
                                       transactional_id=default_id("txn", text, ep.url))
            deltas, resume_epoch = ksink, ksink.last_committed_epoch
        elif opts.deltas:
            dsink = DeltaCsvSink(opts.deltas, columns, resume=opts.resume_outputs,
                                 fsync=opts.fsync)
            deltas, resume_epoch = dsink, dsink.last_committed_epoch
        else:
            deltas = CsvStreamSink(sys.stdout, columns)
        opened.append(deltas)
        snapshots: SnapshotSink | None = None
        resume_snapshot = 0
        if is_kafka(opts.snapshots):
            ep = _endpoint(str(opts.snapshots), opts)
            with _kafka_errors(f"--snapshots {ep.url}", ep.bootstrap):
                snap = KafkaDeltaSink(ep, columns, kind="snapshot",
                                      transactional_id=default_id("snap", text, ep.url))
            snapshots, resume_snapshot = snap, snap.last_committed_snapshot
        elif opts.snapshots:
            ssink = SnapshotCsvSink(opts.snapshots, columns, resume=opts.resume_outputs,
                                    fsync=opts.fsync)
            snapshots, resume_snapshot = ssink, ssink.last_committed_snapshot
        if snapshots is not None:
            opened.append(snapshots)
        dead = _open_dead_letter(opts, deltas) if opts.on_error == "skip" else None
        return Outputs(deltas, snapshots, dead, resume_epoch, resume_snapshot)
    except BaseException:
        for sink in opened:
            sink.close()
        raise


def dead_letter_target(opts: RunOptions) -> str:
    """Where ``--on-error skip`` sends bad records: ``--dead-letter``, else for a Kafka
    source its topic's ``dead-letter=`` or ``<topic>.dead-letter`` on the same broker,
    else the file default of the command line."""
    if opts.dead_letter:
        return opts.dead_letter
    if is_kafka(opts.updates):
        ep = _endpoint(opts.updates, opts)
        topic = ep.dead_letter_topic or f"{ep.topic}.dead-letter"
        query = opts.updates.split("?", 1)[1] if "?" in opts.updates else ""
        return f"kafka://{ep.bootstrap}/{topic}" + (f"?{query}" if query else "")
    return opts.dead_letter_path


def _open_dead_letter(opts: RunOptions, deltas: DeltaSink) -> DeadLetterSink:
    target = dead_letter_target(opts)
    if not is_kafka(target):
        return DeadLetterCsvSink(target)
    opts.dead_letter = target  # so that the run's summary names the topic
    ep = _endpoint(target, opts)
    with _kafka_errors(f"dead-letter topic {ep.url}", ep.bootstrap):
        if isinstance(deltas, KafkaDeltaSink) and deltas.endpoint.bootstrap == ep.bootstrap:
            return deltas.dead_letter_sink(ep.topic)
        return KafkaDeadLetterSink(ep, ep.topic)


def run_local_kafka(ctx: RunContext) -> DriveStats:
    """The local runner fed from a ``kafka://`` update source (module docstring)."""
    from dataflow.cli import UsageError

    opts, out = ctx.options, ctx.outputs
    ep = _endpoint(opts.updates, opts)
    group = ep.group_id or default_id("group", _query_text(opts), opts.deltas or "-")
    checkpointer = _Checkpointer.open(ctx, ep) if opts.checkpoint else None
    restored = checkpointer.restored if checkpointer is not None else None
    with _kafka_errors(f"--updates {ep.url}", ep.bootstrap):
        source = KafkaUpdateSource(
            ep, ctx.query.schema, group_id=group, on_error=opts.on_error,
            dead_letter=out.dead_letter, stop_at_end=opts.stop_at_end,
            stop_requested=lambda: ctx.progress.stop_requested,
            start_offsets=restored.positions if restored is not None else None,
        )
    try:
        if opts.epoch is not None and len(source.streams) > 1:
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
        with _kafka_errors(f"run over {ep.url}", ep.bootstrap):
            return _drive(ctx, source, checkpointer)
    finally:
        source.close()


def _drive(ctx: RunContext, source: KafkaUpdateSource,
           checkpointer: _Checkpointer | None = None) -> DriveStats:
    opts, out = ctx.options, ctx.outputs
    deltas, snapshots = out.deltas, out.snapshots
    if isinstance(deltas, KafkaDeltaSink):
        deltas.bind_source(source)
    view = ctx.query.maintain(**_maintain_kwargs(opts))
    if checkpointer is not None:
        checkpointer.start(view, source)

    def at_boundary(delta_or_snapshot: bool) -> None:
        # The state is exactly that of an epoch end whose output is committed: the only
        # moment a checkpoint may be taken.
        if checkpointer is not None and delta_or_snapshot:
            checkpointer.at_boundary(force=ctx.progress.stop_requested)

    def on_delta(delta: EpochDelta) -> None:
        if isinstance(deltas, KafkaDeltaSink):
            deltas.write_epoch(delta)  # skips the epochs already in the topic itself
        elif delta.epoch > out.resume_epoch:
            deltas.write_epoch(delta)
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
            if isinstance(snapshots, KafkaDeltaSink) or k > out.resume_snapshot:
                snapshots.write_snapshot(k, rows)
            at_boundary(True)

    records: Iterable[Record] = _drawing(ctx.progress, source)
    if checkpointer is not None:
        records = checkpointer.watch(records)
    # StopRequested: stopped by a signal at an epoch boundary, everything written is whole.
    with contextlib.suppress(StopRequested):
        drive(
            view,
            records,
            epoch_size=opts.epoch,
            on_delta=on_delta,
            on_snapshot=on_snapshot,
            on_error=opts.on_error,
            dead_letter=out.dead_letter,
            stats=ctx.progress.stats,
        )
    if checkpointer is not None:
        checkpointer.at_end()
    return ctx.progress.stats


class _Checkpointer:
    """Takes the local runner's state checkpoints (:mod:`dataflow.checkpoint`): at an
    epoch boundary once ``--checkpoint-interval`` seconds have passed since the last one,
    at a boundary where a signal stops the run, and at the end of the run when nothing
    was read after the last boundary."""

    def __init__(self, ctx: RunContext, directory: str, fp: str,
                 restored: Checkpoint | None) -> None:
        self.ctx = ctx
        self.directory = directory
        self.fingerprint = fp
        self.restored = restored
        self.interval = ctx.options.checkpoint_interval
        self.written = 0
        self._view: View | None = None
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
        fp = fingerprint(_query_text(opts), f"kafka://{ep.bootstrap}/{topics}")
        restored = read_checkpoint(opts.checkpoint, fp)
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

    def start(self, view: View, source: KafkaUpdateSource) -> None:
        """Load the restored state (if any) into the fresh ``view``."""
        self._view, self._source = view, source
        ck = self.restored
        if ck is None:
            return
        view.restore(ck.base, ck.epoch)
        stats = self.ctx.progress.stats
        stats.epochs, stats.snapshots, stats.updates = ck.epoch, ck.snapshots, ck.updates
        if not self.ctx.options.quiet:
            from dataflow.cli import PROG

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
            base=self._view.base_tuples(),
        ))
        self._last = time.monotonic()
        self._boundary_at = None
        self.written += 1


def _maintain_kwargs(opts: RunOptions) -> dict[str, Any]:
    from dataflow.cli import maintain_kwargs

    return maintain_kwargs(opts)


def _drawing(progress: Progress, records: Iterable[Record]) -> Iterator[Record]:
    """Pass records through, redrawing the progress line now and then (unlike
    ``Progress.watch`` this never ends early: the source stops at epoch boundaries)."""
    for i, rec in enumerate(records, 1):
        yield rec
        if progress.enabled and not i & 255:
            now = time.monotonic()
            if now - progress._last_draw >= progress.interval:
                progress._last_draw = now
                progress.draw(now)


# ---------------------------------------------------------------------------------------
# ivmflow produce / consume

_OP_RE = re.compile(r"([+-])([0-9]*)")


def _untyped_updates(path: str) -> Iterator[Record]:
    """Update-CSV records without a query: values stay text (the reader parses them by
    the column types, as for CSV files); empty fields are NULL."""
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8", newline="")  # noqa: SIM115
    try:
        for lineno, line in enumerate(stream, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            if text == "*":
                yield EpochEnd(f"{path}:{lineno}")
                continue
            fields = next(csv.reader([text]))
            m = _OP_RE.fullmatch(fields[0].strip())
            if m is None or len(fields) < 2 or (m.group(2) and int(m.group(2)) < 1):
                where = f"{path}:{lineno}"
                raise InputError(where, text, "op,relation,v1,...,vn with op +, -, +N or -N",
                                 f"{fields[0]!r}" if m is None else "no relation")
            op: Op = "+" if m.group(1) == "+" else "-"
            row = tuple(None if f == "" else f for f in fields[2:])
            yield Update(op, fields[1].strip(), row, int(m.group(2) or 1), f"{path}:{lineno}")
    finally:
        if stream is not sys.stdin:
            stream.close()


def _schema(query: str | None) -> tuple[Schema | None, tuple[str, ...]]:
    if not query:
        return None, ()
    from dataflow.api import compile_query

    q = compile_query(Path(query).read_text(encoding="utf-8"), source_name=query)
    return q.schema, tuple(q.output_columns)


def cmd_produce(args: argparse.Namespace) -> int:
    """``ivmflow produce UPDATES.csv kafka://.../topic``: update CSV -> JSON records."""
    from dataflow.cli import PROG, UsageError

    if not is_kafka(args.topic):
        msg = f"expected a kafka://host:port/topic URL, found {args.topic!r}"
        raise UsageError(msg)
    try:
        ep = parse_kafka_url(args.topic, args.kafka_option or ())
    except KafkaConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.partitions < 1:
        msg = f"--partitions: expected a positive integer, found {args.partitions}"
        raise UsageError(msg)
    schema, _ = _schema(args.query)
    if args.updates != "-" and not Path(args.updates).exists():
        raise FileNotFoundError(2, "update file not found", args.updates)
    records = (read_updates(args.updates, schema) if schema is not None
               else _untyped_updates(args.updates))
    with _kafka_errors(f"produce to {ep.url}", ep.bootstrap):
        n = produce_updates(ep, records, schema, partitions=args.partitions)
    if not args.quiet:
        print(f"{PROG}: wrote {n} records to {ep.url}", file=sys.stderr)
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    """``ivmflow consume kafka://.../deltas``: the committed delta (or snapshot) records
    as delta CSV (``epoch,mult,<columns>``) on stdout, in epoch order."""
    from dataflow.cli import UsageError

    if not is_kafka(args.topic):
        msg = f"expected a kafka://host:port/topic URL, found {args.topic!r}"
        raise UsageError(msg)
    try:
        ep = parse_kafka_url(args.topic, args.kafka_option or ())
    except KafkaConfigError as exc:
        raise UsageError(str(exc)) from None
    key = "snapshot" if args.snapshots else "epoch"
    _, columns = _schema(args.query)
    with _kafka_errors(f"consume {ep.url}", ep.bootstrap):
        rows = read_deltas(ep, key=key)
    names = list(unique_columns(columns)) if columns else (list(rows[0][2]) if rows else [])
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow([key, "mult", *names])
    for epoch, mult, row in rows:
        writer.writerow([epoch, mult, *(format_value(row.get(c)) for c in names)])
    sys.stdout.flush()
    return 0


def add_commands(sub: Any) -> None:
    """Add ``produce`` and ``consume`` to the ``ivmflow`` sub-command parsers."""
    prod = sub.add_parser("produce", help="write an update CSV file to a Kafka topic",
                          description="Write UPDATES.csv as JSON update records to a topic: "
                                      "updates keyed by relation and row, every '*' as a "
                                      "marker to every partition.")
    prod.add_argument("updates", metavar="UPDATES.csv", help="update CSV file ('-': stdin)")
    prod.add_argument("topic", metavar="kafka://HOST:PORT/TOPIC")
    prod.add_argument("--partitions", type=int, default=1, metavar="P",
                      help="partitions of a topic created here (default 1)")
    prod.add_argument("--query", metavar="QUERY.sql",
                      help="type the values by the query's CREATE TABLEs (default: text)")
    prod.add_argument("--kafka-option", action="append", metavar="KEY=VALUE")
    prod.add_argument("--quiet", "-q", action="store_true")
    cons = sub.add_parser("consume", help="print the committed deltas of a Kafka topic",
                          description="Print the committed (read_committed) delta records "
                                      "of a topic as delta CSV, in epoch order.")
    cons.add_argument("topic", metavar="kafka://HOST:PORT/TOPIC")
    cons.add_argument("--query", metavar="QUERY.sql", help="column order of the output")
    cons.add_argument("--snapshots", action="store_true",
                      help="the topic holds snapshots (snapshot,mult,...)")
    cons.add_argument("--kafka-option", action="append", metavar="KEY=VALUE")


def run_command(args: argparse.Namespace) -> int:
    """Dispatch ``produce`` / ``consume``."""
    if args.command == "produce":
        return cmd_produce(args)
    return cmd_consume(args)
