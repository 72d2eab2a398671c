r"""The local runner: the engine in this process, fed from files, stdin or Kafka
(:mod:`dataflow.runners.local.kafka`), with optional state checkpoints for Kafka
(:mod:`dataflow.runners.local.checkpoint`). :mod:`dataflow.circuit.drive` cuts
epochs; it is the reference semantics the other runners are checked against.

Example:
    >>> import tempfile, pathlib
    >>> from dataflow.runners.run import RunOptions, run
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "q.sql").write_text("CREATE TABLE R(a INT); SELECT a FROM R;")
    >>> _ = (d / "u.csv").write_text("+,R,1\n*\n+,R,2\n")
    >>> ctx = run(RunOptions(str(d / "q.sql"), str(d / "u.csv"), deltas=str(d / "o.csv")))
    >>> ctx.progress.stats.epochs
    2
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from connectors.files import DeadLetterCsvSink, SourceLines, read_updates, source_files
from connectors.position import InputTracker, digest_prefix
from core.errors import InputError, UsageError
from core.records import Record
from dataflow.circuit.drive import DriveStats, drive, input_changed
from dataflow.runners import register
from dataflow.runners.run import maintain_view, scheme, state_limit

if TYPE_CHECKING:
    from dataflow.runners.run import RunContext

__all__ = ["PREFIX_RECORDS", "buffer_prefix", "run_local"]

PREFIX_RECORDS = 10_000
"""How many leading records the local runner buffers to estimate update rates."""


def buffer_prefix(records: Iterable[Record], n: int) -> tuple[list[Record], Iterator[Record]]:
    """The first ``n`` records, and an iterator over the whole stream. A bad record met
    while buffering is raised again at its own position, so the epochs before it are
    still emitted.

    >>> head, stream = buffer_prefix(iter(range(5)), 2)
    >>> head, list(stream)
    ([0, 1], [0, 1, 2, 3, 4])
    """
    it = iter(records)
    head: list[Record] = []
    error: InputError | None = None
    if n <= 0:
        return head, it
    try:
        for rec in it:
            head.append(rec)
            if len(head) >= n:
                break
    except InputError as err:
        error = err

    def stream() -> Iterator[Record]:
        yield from head
        if error is not None:
            raise error
        yield from it

    return head, stream()


@register("local")
def run_local(ctx: RunContext) -> DriveStats:
    """The local runner: the engine in this process, fed from a file source.

    A ``kafka://`` source runs in :mod:`dataflow.runners.local.kafka`.
    """
    opts, out = ctx.options, ctx.outputs
    if scheme(opts.updates) == "kafka":
        from dataflow.runners.local.kafka import run_local_kafka

        return run_local_kafka(ctx)
    if opts.checkpoint:
        msg = (f"--checkpoint {opts.checkpoint}: the local runner keeps state checkpoints "
               f"for a kafka:// update source only, found {opts.updates!r}; restart a file "
               f"run with --resume (it replays the file and writes only the missing "
               f"epochs), or use --runner spark|flink")
        raise UsageError(msg)
    opened = None
    if ctx.progress.enabled and opts.updates != "-":
        # A bounded file source of known size: the progress line shows percent and ETA.
        src = Path(opts.updates)
        if src.is_dir():
            files = sorted(f for f in src.iterdir() if f.suffix == ".csv" and f.is_file())
        else:
            files = [src] if src.is_file() else []
        if files:
            opened = ctx.progress.track_files(files)
    # The input's position after each record: the delta file's commit record keeps it
    # with each epoch, so that --resume continues exactly there (connectors.position).
    tracker = InputTracker()
    if isinstance(out.dead_letter, DeadLetterCsvSink):
        # A dead letter holds the line as it was read, also for a record the view
        # refuses (an invalid delete), which the view names by its source only.
        lines = SourceLines(opts.updates)
        out.dead_letter.raw = lines
        tracker = lines.tracker  # (stdin: it keeps the line read last)
    resume = getattr(out.deltas, "committed_input", None) if opts.resume_outputs else None
    note_input = getattr(out.deltas, "note_input", None)
    if resume is not None:
        # Before anything is replayed: the bytes the committed epochs were read from
        # must be there unchanged (stdin is checked as it is replayed).
        files = source_files(opts.updates)
        if files:
            now = digest_prefix(files, resume.position.offset)
            if now.offset < resume.position.offset:
                raise input_changed(resume, f"the input holds {now.offset} bytes")
            if now != resume.position:
                raise input_changed(resume, "other bytes before it")
    records = read_updates(
        opts.updates, ctx.query.schema, on_error=opts.on_error, dead_letter=out.dead_letter,
        opened=opened, tracker=tracker,
    )
    query = ctx.query
    if opts.updates != "-":
        # Re-plan with update rates estimated from the stream's first records (CROWN's
        # sum of depth x rate). Not for stdin: buffering would hold back live input.
        prefix, records = buffer_prefix(records, PREFIX_RECORDS)
        query = query.replanned(prefix)
    view = maintain_view(ctx, query)
    snapshots = out.snapshots
    # Epochs a resumed sink already holds are recomputed (the state is in memory) and
    # skipped by the sink.
    return drive(
        view,
        ctx.progress.watch(records),
        epoch_size=opts.epoch,
        on_delta=out.deltas.write_epoch,
        on_snapshot=snapshots.write_snapshot if snapshots is not None else None,
        on_error=opts.on_error,
        dead_letter=out.dead_letter,
        stats=ctx.progress.stats,
        should_stop=lambda: ctx.progress.stop_requested,
        tracker=tracker,
        on_input=note_input,
        resume=resume,
        limit=state_limit(ctx, view, "--resume (with the same --deltas)"),
    )
