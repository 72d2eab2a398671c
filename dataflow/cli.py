"""The ``ivmflow`` command line (DESIGN section 4): ``run``, ``explain``, ``generate``.

Exit codes: 0 success (also after SIGINT/SIGTERM, which finish the open epoch first),
1 bad input (bad update record, missing file, sink that cannot resume), 2 bad query or
bad usage (unsupported SQL, unknown option, runner or connector not in this build),
130 interrupted twice, 141 stdout closed.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> main(["generate", "graph", "--edges", "4", "--seed", "1", "--quiet",
    ...       "--out", str(d / "u.csv")])
    0
    >>> len((d / "u.csv").read_text().splitlines())
    4
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from connectors.base import DeadLetterSink, DeltaSink, SnapshotSink
from connectors.files import (
    CsvStreamSink,
    DeadLetterCsvSink,
    DeltaCsvSink,
    OnError,
    SnapshotCsvSink,
    read_updates,
)
from dataflow.errors import InputError, IvmflowError, QueryError
from dataflow.local import DriveStats, drive
from dataflow.records import EpochDelta, Record
from plans.schema import Row

__all__ = ["KNOWN_RUNNERS", "RUNNERS", "RunContext", "RunOptions", "main", "run_local"]

PROG = "ivmflow"
KNOWN_RUNNERS = ("local", "spark", "flink")
"""Runners the command line accepts; those missing from :data:`RUNNERS` are reported as
not available in this build."""


class UsageError(Exception):
    """Bad use of the command line found after parsing (exit code 2)."""


class UnavailableError(UsageError):
    """A runner or connector that this build does not have (exit code 2)."""


# ---------------------------------------------------------------------------------------
# Run options and context


@dataclass
class RunOptions:
    """The options of ``ivmflow run`` (also usable from Python)."""

    query: str
    updates: str
    runner: str = "local"
    epoch: int | None = None
    deltas: str | None = None
    snapshots: str | None = None
    parallelism: int = 1
    eps: float | None = None
    partitioning: str = "single"
    """Triangle count: ``single`` or ``double`` heavy/light partitioning."""
    on_error: OnError = "fail"
    dead_letter: str | None = None
    stop_at_end: bool = False
    quiet: bool = False
    resume: bool = False
    fsync: bool = True
    checkpoint: str | None = None
    """Spark and Flink: the streaming checkpoint (offsets and partition state); default
    ``<deltas>.checkpoint``. Restarting with the same checkpoint resumes the run.
    Local runner over Kafka: the state checkpoint (:mod:`dataflow.checkpoint`), only
    when given."""
    checkpoint_interval: float = 30.0
    """Local runner over Kafka: seconds between state checkpoints (taken at epoch
    boundaries; 0: at every boundary)."""
    batch_lines: int = 10_000
    """Spark: input lines per micro-batch."""
    kafka_options: list[str] = field(default_factory=list)
    """``KEY=VALUE`` Kafka client properties for every ``kafka://`` source and sink."""

    @property
    def spark_checkpoint(self) -> str | None:
        """The checkpoint directory of the Spark and Flink runners (for a Kafka delta
        topic: ``ivmflow-checkpoints/<runner>-<host_port>-<topic>`` in the working
        directory)."""
        if self.checkpoint or not self.deltas:
            return self.checkpoint
        if "://" in self.deltas:
            name = "".join(c if c.isalnum() or c in "-_." else "_"
                           for c in self.deltas.split("://", 1)[1].split("?", 1)[0])
            return str(Path("ivmflow-checkpoints") / f"{self.runner}-{name}")
        return f"{self.deltas}.checkpoint"

    @property
    def resume_outputs(self) -> bool:
        """``--resume``, or a Spark/Flink run restarted from an existing checkpoint."""
        ckpt = self.spark_checkpoint
        restarted = (
            self.runner in ("spark", "flink") and ckpt is not None and Path(ckpt).exists()
        )
        return self.resume or restarted

    @property
    def dead_letter_path(self) -> str:
        """``--dead-letter``, or ``<deltas without .csv>.dead-letter.csv`` (``ivmflow.…``
        when deltas go to stdout)."""
        if self.dead_letter:
            return self.dead_letter
        base = self.deltas or "ivmflow"
        if base.lower().endswith(".csv"):
            base = base[:-4]
        return f"{base}.dead-letter.csv"


@dataclass
class Outputs:
    """The sinks of a run, opened by the command line before the runner starts."""

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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Progress:
    """The live progress line (terminal only) and the run's counters."""

    def __init__(self, stream: TextIO, enabled: bool, interval: float = 0.2) -> None:
        self.stream = stream
        self.enabled = enabled
        self.interval = interval
        self.stats = DriveStats()
        self.start = time.monotonic()
        self.stop_requested = False
        # Set by a runner whose updates are read inside the job (Flink on Kafka): the
        # driver never sees them, so the summary must not claim "0 updates".
        self.counted_in_job: str | None = None
        self._last_draw = self.start
        self._width = 0

    def watch(self, records: Iterable[Record]) -> Iterator[Record]:
        """Pass records through, redrawing now and then; end early on a stop request."""
        for i, rec in enumerate(records, 1):
            if self.stop_requested:
                return
            yield rec
            if self.enabled and not i & 255:
                now = time.monotonic()
                if now - self._last_draw >= self.interval:
                    self._last_draw = now
                    self.draw(now)

    def draw(self, now: float) -> None:
        st = self.stats
        rate = st.updates / max(now - self.start, 1e-9)
        line = (f"{PROG}: {st.updates} updates read, {_plural(st.epochs, 'epoch')}, "
                f"{_plural(st.delta_rows, 'delta row')}, {rate:.0f} updates/s")
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def clear(self) -> None:
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def summary(self) -> str:
        st = self.stats
        secs = time.monotonic() - self.start
        if self.counted_in_job is not None:
            return f"{PROG}: {self.counted_in_job} in {secs:.1f}s"
        rate = st.updates / max(secs, 1e-9)
        snaps = f", {_plural(st.snapshots, 'snapshot')}" if st.snapshots else ""
        return (f"{PROG}: {_plural(st.updates, 'update')}, {_plural(st.epochs, 'epoch')}, "
                f"{_plural(st.delta_rows, 'delta row')}{snaps} in {secs:.1f}s "
                f"({rate:.0f} updates/s)")


@dataclass
class RunContext:
    """Everything a runner gets: the compiled query, the options, the opened sinks and
    the progress counters (a runner updates ``progress.stats``)."""

    query: Any
    options: RunOptions
    outputs: Outputs
    progress: Progress = field(default_factory=lambda: Progress(sys.stderr, False))


Runner = Callable[[RunContext], DriveStats]


def _accepts(func: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):  # no signature: let the call decide
        return True
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def maintain_kwargs(options: RunOptions) -> dict[str, Any]:
    """Keyword arguments for ``CompiledQuery.maintain`` (``eps`` only when given)."""
    kwargs: dict[str, Any] = {"parallelism": options.parallelism}
    if options.eps is not None:
        kwargs["eps"] = options.eps
    return kwargs


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


def run_local(ctx: RunContext) -> DriveStats:
    """The local runner: the engine in this process, fed from a file source.

    Epochs already committed in a resumed delta file are recomputed (the state is in
    memory) but not written again.
    """
    opts, out = ctx.options, ctx.outputs
    if _scheme(opts.updates) == "kafka":
        return CONNECTOR_SCHEMES["kafka"]().run_local_kafka(ctx)
    if opts.checkpoint:
        msg = (f"--checkpoint {opts.checkpoint}: the local runner keeps state checkpoints "
               f"for a kafka:// update source only, found {opts.updates!r}; restart a file "
               f"run with --resume (it replays the file and writes only the missing "
               f"epochs), or use --runner spark|flink")
        raise UsageError(msg)
    records = read_updates(
        opts.updates, ctx.query.schema, on_error=opts.on_error, dead_letter=out.dead_letter
    )
    query = ctx.query
    replanned = getattr(query, "replanned", None)
    if opts.updates != "-" and callable(replanned):
        # Re-plan with update rates estimated from the stream's first records (CROWN's
        # sum of depth x rate). Not for stdin: buffering would hold back live input.
        prefix, records = buffer_prefix(records, PREFIX_RECORDS)
        query = replanned(prefix)
    view = query.maintain(**maintain_kwargs(opts))
    deltas, snapshots = out.deltas, out.snapshots

    def on_delta(delta: EpochDelta) -> None:
        if delta.epoch > out.resume_epoch:
            deltas.write_epoch(delta)

    on_snapshot: Callable[[int, Sequence[tuple[int, Row]]], None] | None = None
    if snapshots is not None:
        def on_snapshot(k: int, rows: Sequence[tuple[int, Row]]) -> None:
            if k > out.resume_snapshot:
                snapshots.write_snapshot(k, rows)

    return drive(
        view,
        ctx.progress.watch(records),
        epoch_size=opts.epoch,
        on_delta=on_delta,
        on_snapshot=on_snapshot,
        on_error=opts.on_error,
        dead_letter=out.dead_letter,
        stats=ctx.progress.stats,
    )


def _refuse_kafka_skip(opts: RunOptions) -> None:
    """The Spark and Flink Kafka sources stop at a bad record (no dead-letter topic
    there yet): say so before the job starts."""
    if opts.on_error == "skip" and _scheme(opts.updates) == "kafka":
        msg = (f"--on-error skip with a kafka:// source runs on the local runner only; "
               f"the {opts.runner} runner stops at a bad record (run without --on-error "
               f"skip, or with --runner local)")
        raise UsageError(msg)


def run_spark(ctx: RunContext) -> DriveStats:
    """The Spark runner (``pip install -e '.[spark]'``, Java 17): see
    :mod:`dataflow.runners.spark`. The delta file is always resumed: after a crash, the
    same command with the same checkpoint writes exactly the epochs still missing."""
    opts, out = ctx.options, ctx.outputs
    try:
        from dataflow.runners.spark import SparkJob
    except ImportError as err:  # pragma: no cover - depends on the installation
        msg = f"the spark runner needs pyspark: pip install -e '.[spark]' ({err})"
        raise UnavailableError(msg) from None
    _refuse_kafka_skip(opts)
    checkpoint = opts.spark_checkpoint
    job = SparkJob(
        ctx.query,
        opts.updates,
        epoch_size=opts.epoch,
        parallelism=opts.parallelism,
        checkpoint=checkpoint,
        batch_lines=opts.batch_lines,
        bounded=opts.stop_at_end or not (
            _scheme(opts.updates) == "kafka" or Path(opts.updates).is_dir()
        ),
        kafka_options=opts.kafka_options,
    )
    job.run(out, ctx.progress.stats, should_stop=lambda: ctx.progress.stop_requested)
    return ctx.progress.stats


def run_flink(ctx: RunContext) -> DriveStats:
    """The PyFlink runner (``pip install -e '.[flink]'``, Java 17): see
    :mod:`dataflow.runners.flink`. Bounded file sources; mini-cluster in process. The
    job's epoch merger writes the delta file itself (exactly once per epoch, also
    across a restart from the checkpoint)."""
    import tempfile

    opts, out = ctx.options, ctx.outputs
    try:
        from dataflow.runners.flink import FlinkJob
    except ImportError as err:  # pragma: no cover - depends on the installation
        msg = f"the flink runner needs PyFlink: pip install -e '.[flink]' ({err})"
        raise UnavailableError(msg) from None
    _refuse_kafka_skip(opts)
    scratch = Path(tempfile.mkdtemp(prefix="ivmflow-flink-out-"))
    deltas = opts.deltas or str(scratch / "deltas.csv")
    if opts.deltas:
        out.deltas.close()  # the job's merger owns the file from here on
    if opts.snapshots and out.snapshots is not None:
        out.snapshots.close()
    job = FlinkJob(ctx.query, epoch_size=opts.epoch, parallelism=opts.parallelism,
                   checkpoint=opts.spark_checkpoint)
    if _scheme(opts.updates) == "kafka":
        ctx.progress.counted_in_job = (
            "flink job done (the job itself read the updates; Flink metrics"
            " ivmflow.updates_read and ivmflow.epochs_read count them)"
        )
        job.run_kafka(opts.updates, deltas, opts.snapshots, stop_at_end=opts.stop_at_end,
                      batch_records=opts.batch_lines,
                      should_stop=lambda: ctx.progress.stop_requested,
                      kafka_options=opts.kafka_options)
    else:
        records = read_updates(
            opts.updates, ctx.query.schema, on_error=opts.on_error, dead_letter=out.dead_letter
        )
        job.run(records, deltas, opts.snapshots, ctx.progress.stats)
    if _scheme(deltas) == "kafka":
        return ctx.progress.stats
    text = Path(deltas).read_text() if Path(deltas).exists() else ""
    body = "".join(text.splitlines(keepends=True)[1:])
    ctx.progress.stats.delta_rows = body.count("\n")
    if not opts.deltas:
        stream = getattr(out.deltas, "stream", sys.stdout)
        stream.write(body)
        stream.flush()
    return ctx.progress.stats


RUNNERS: dict[str, Runner] = {"local": run_local, "spark": run_spark, "flink": run_flink}
"""Runner name -> runner; the Spark and Flink runners register here when built."""

def _kafka_connector() -> Any:
    """The Kafka glue (:mod:`dataflow.kafka_run`), imported on first use."""
    try:
        from dataflow import kafka_run
    except ImportError as err:  # pragma: no cover - depends on the installation
        msg = f"the kafka:// connector needs kafka-python: pip install -e '.[kafka]' ({err})"
        raise UnavailableError(msg) from None
    return kafka_run


CONNECTOR_SCHEMES: dict[str, Callable[..., Any]] = {"kafka": _kafka_connector}
"""URL scheme -> function returning the connector module (``open_outputs``,
``run_local_kafka``)."""


# ---------------------------------------------------------------------------------------
# Commands


def _compile(path: str, eps: float | None = None, partitioning: str = "single") -> Any:
    text = Path(path).read_text(encoding="utf-8")
    from dataflow.api import compile_query

    kwargs: dict[str, Any] = {}
    if eps is not None and _accepts(compile_query, "eps"):
        kwargs["eps"] = eps
    if partitioning != "single":
        kwargs["triangle_partitioning"] = partitioning
    return compile_query(text, source_name=path, **kwargs)


def _scheme(target: str | None) -> str | None:
    if target and "://" in target:
        return target.split("://", 1)[0].lower()
    return None


def _check_available(opts: RunOptions) -> None:
    if opts.runner not in RUNNERS:
        msg = (f"the {opts.runner} runner is not available in this build "
               f"(available: {', '.join(sorted(RUNNERS))})")
        raise UnavailableError(msg)
    for what, target in (("--updates", opts.updates), ("--deltas", opts.deltas),
                         ("--snapshots", opts.snapshots)):
        scheme = _scheme(target)
        if scheme is not None and scheme not in CONNECTOR_SCHEMES:
            msg = f"the {scheme}:// connector ({what} {target}) is not available in this build"
            raise UnavailableError(msg)


def _open_outputs(opts: RunOptions, columns: Sequence[str]) -> Outputs:
    targets = (opts.updates, opts.deltas, opts.snapshots, opts.dead_letter)
    if any(_scheme(t) == "kafka" for t in targets):
        return CONNECTOR_SCHEMES["kafka"]().open_outputs(opts, columns)
    dead: DeadLetterSink | None = None
    out: Outputs | None = None
    try:
        if opts.on_error == "skip":
            dead = DeadLetterCsvSink(opts.dead_letter_path)
        if opts.deltas:
            dsink = DeltaCsvSink(opts.deltas, columns, resume=opts.resume_outputs, fsync=opts.fsync)
            out = Outputs(dsink, dead_letter=dead, resume_epoch=dsink.last_committed_epoch)
        else:
            out = Outputs(CsvStreamSink(sys.stdout, columns), dead_letter=dead)
        if opts.snapshots:
            ssink = SnapshotCsvSink(
                opts.snapshots, columns, resume=opts.resume_outputs, fsync=opts.fsync
            )
            out.snapshots = ssink
            out.resume_snapshot = ssink.last_committed_snapshot
        return out
    except BaseException:
        if out is not None:
            out.close()
        elif dead is not None:
            dead.close()
        raise


@contextlib.contextmanager
def _stop_on_signals(progress: Progress) -> Iterator[None]:
    """SIGINT/SIGTERM: finish the open epoch and stop; a second SIGINT aborts."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if progress.stop_requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        progress.stop_requested = True

    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def cmd_run(opts: RunOptions) -> int:
    """``ivmflow run``: compile, open the source and the sinks, run, report."""
    _check_available(opts)
    # Unsupported SQL fails before any input is read; eps and the partitioning are
    # compiled in so that the Spark and Flink workers plan the same triangle engine.
    query = _compile(opts.query, opts.eps, opts.partitioning)
    if opts.eps is not None and not _accepts(query.maintain, "eps"):
        msg = "--eps is not supported by the engine of this build"
        raise UsageError(msg)
    if _scheme(opts.updates) is None and opts.updates != "-" and not Path(opts.updates).exists():
        raise FileNotFoundError(2, "update source not found", opts.updates)
    outputs = _open_outputs(opts, tuple(query.output_columns))
    show = not opts.quiet
    # The progress line lives on a terminal's stderr, but not when deltas scroll by there.
    tty = sys.stderr.isatty() and not (opts.deltas is None and sys.stdout.isatty())
    progress = Progress(sys.stderr, enabled=show and tty)
    ctx = RunContext(query, opts, outputs, progress)
    try:
        with _stop_on_signals(progress):
            RUNNERS[opts.runner](ctx)
    except InputError as exc:
        progress.clear()
        code = _error(str(exc), 1)
        done = progress.stats.epochs
        if show and done and opts.deltas:
            print(f"{PROG}: the deltas of epochs 1-{done}, completed before the error, "
                  f"are in {opts.deltas}", file=sys.stderr)
        return code
    finally:
        progress.clear()
        outputs.close()
    if show:
        print(progress.summary(), file=sys.stderr)
        if progress.stop_requested:
            print(f"{PROG}: stopped by signal after epoch {progress.stats.epochs}",
                  file=sys.stderr)
    dead = outputs.dead_letter
    skipped = getattr(dead, "count", 0)
    if dead is not None and skipped:
        print(f"{PROG}: skipped {_plural(skipped, 'bad record')}; "
              f"see {opts.dead_letter_path}", file=sys.stderr)
    return 0


def cmd_explain(
    query_path: str, eps: float | None = None, parallelism: int = 1, partitioning: str = "single"
) -> int:
    """``ivmflow explain``: print the plan of a query file."""
    query = _compile(query_path, partitioning=partitioning)
    kwargs: dict[str, Any] = {}
    if parallelism != 1:
        kwargs["parallelism"] = parallelism
    if eps is not None and (
        getattr(query, "triangle", None) is not None or getattr(query, "ghd", None) is not None
    ):
        kwargs["eps"] = eps
    print(query.explain(**kwargs))
    return 0


def _window(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        msg = f"not a window size or fraction: {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not 0 < value <= 1:
        msg = f"a fractional window must be in (0, 1], not {text}"
        raise argparse.ArgumentTypeError(msg)
    return value


def cmd_generate(args: argparse.Namespace) -> int:
    """``ivmflow generate graph``: a skewed edge list, optionally as a FIFO window stream;
    ``ivmflow generate social``: person/knows/message tables (PySpark)."""
    if args.kind == "social":
        return _generate_social(args)
    try:
        from connectors import generators
    except ImportError:
        msg = "the generators are not available in this build"
        raise UnavailableError(msg) from None
    if args.engine == "spark":
        return _generate_on_spark(args, generators)
    if args.edge_list or args.min_dst is not None:
        msg = "--edge-list and --min-dst need --engine spark"
        raise UsageError(msg)
    try:
        edges = generators.skewed_graph(
            args.edges, args.nodes, seed=args.seed, alpha=args.alpha, model=args.model
        )
        stream: Iterable[tuple[str, Sequence[Any]]]
        if args.window is not None:
            stream = generators.fifo_window_stream(edges, args.window)
        else:
            stream = (("+", e) for e in edges)
        n = generators.write_update_csv(args.out, args.relation, stream, args.epoch_every)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not args.quiet and args.out != "-":
        print(f"{PROG}: wrote {n} updates ({len(edges)} edges of {args.relation}) "
              f"to {args.out}", file=sys.stderr)
    return 0


def _generate_social(args: argparse.Namespace) -> int:
    try:
        from connectors.spark_pipeline import SOCIAL_SCHEMA_SQL, social_updates, write_lines
        from dataflow.runners.spark import spark_session
    except ImportError as err:  # pragma: no cover - depends on the installation
        msg = f"generate social needs pyspark: pip install -e '.[spark]' ({err})"
        raise UnavailableError(msg) from None
    spark = spark_session(None, 2)
    df = social_updates(spark, args.persons, args.knows, args.messages, window=args.window,
                        seed=args.seed, epoch_every=args.epoch_every)
    n = write_lines(df, args.out)
    if not args.quiet:
        tables = " ".join(SOCIAL_SCHEMA_SQL.split())
        print(f"{PROG}: wrote {n} updates to {args.out} (spark); tables: {tables}",
              file=sys.stderr)
    return 0


def _generate_on_spark(args: argparse.Namespace, generators: Any) -> int:
    """The same streams built with PySpark: a generated graph (kept in its generated
    order, so the output equals the Python engine's) or an ``--edge-list`` file
    (shuffled with ``--seed``), FIFO windows, a ``--min-dst`` filter, epoch markers."""
    if args.out == "-":
        msg = "--engine spark writes a file: give --out"
        raise UsageError(msg)
    try:
        from connectors.spark_pipeline import read_edge_list, window_updates, write_lines
        from dataflow.runners.spark import spark_session
    except ImportError as err:  # pragma: no cover - depends on the installation
        msg = f"--engine spark needs pyspark: pip install -e '.[spark]' ({err})"
        raise UnavailableError(msg) from None
    spark = spark_session(None, 2)
    if args.edge_list:
        edges = read_edge_list(spark, args.edge_list)
        seed: int | None = args.seed
    else:
        pairs = generators.skewed_graph(
            args.edges, args.nodes, seed=args.seed, alpha=args.alpha, model=args.model
        )
        edges = spark.createDataFrame(
            [(s, d, i) for i, (s, d) in enumerate(pairs)], "src LONG, dst LONG, o LONG"
        )
        seed = None
    window = args.window
    if isinstance(window, float):
        window = max(1, int(window * (args.edges if not args.edge_list else edges.count())))
    df = window_updates(edges, window, relation=args.relation, seed=seed,
                        min_dst=args.min_dst, epoch_every=args.epoch_every)
    n = write_lines(df, args.out)
    if not args.quiet:
        print(f"{PROG}: wrote {n} updates of {args.relation} to {args.out} (spark)",
              file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------
# Argument parsing


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"expected a positive integer, found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):
        msg = f"expected a number of seconds (0 or more), found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        msg = f"expected a number between 0 and 1, found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ivmflow``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Incremental view maintenance of SQL join queries over update streams.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="maintain a query over an update stream",
                         description="Maintain QUERY.sql over an update stream and write "
                                     "the delta of every epoch.")
    run.add_argument("query", metavar="QUERY.sql")
    run.add_argument("--updates", required=True, metavar="SOURCE",
                     help="update CSV file, directory of *.csv, '-' for stdin, "
                          "or kafka://host:port/topic")
    run.add_argument("--runner", choices=KNOWN_RUNNERS, default="local")
    run.add_argument("--epoch", type=_positive_int, metavar="N",
                     help="end an epoch after every N updates (besides '*' lines)")
    run.add_argument("--deltas", metavar="OUT.csv", help="delta file (default: stdout)")
    run.add_argument("--snapshots", metavar="OUT.csv",
                     help="write the full result after every '*' line to this file")
    run.add_argument("--parallelism", type=_positive_int, default=1, metavar="P")
    run.add_argument("--eps", type=_unit_float, metavar="E",
                     help="IVM-epsilon heavy/light threshold exponent, 0 <= E <= 1 "
                          "(default: the engine's choice)")
    run.add_argument("--partitioning", choices=("single", "double"), default="single",
                     help="triangle COUNT(*): heavy/light partition each relation on one "
                          "column (default) or on both (lower space)")
    run.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                     help="on a bad record: stop (default) or write it to the dead-letter "
                          "file and go on")
    run.add_argument("--dead-letter", metavar="FILE",
                     help="dead-letter file for --on-error skip "
                          "(default: <deltas>.dead-letter.csv)")
    run.add_argument("--stop-at-end", action="store_true",
                     help="stop at the end of what an unbounded source holds at start")
    run.add_argument("--resume", action="store_true",
                     help="keep the committed epochs of existing --deltas/--snapshots files "
                          "and write only the later ones")
    run.add_argument("--no-fsync", dest="fsync", action="store_false",
                     help="do not fsync sinks per epoch (faster; still atomic per epoch "
                          "if the process dies, not if the machine does)")
    run.add_argument("--checkpoint", metavar="DIR",
                     help="spark, flink: streaming checkpoint (default: "
                          "<deltas>.checkpoint); local runner over kafka://: state "
                          "checkpoint, so that a restart reads on from it instead of "
                          "replaying the topic (default: none)")
    run.add_argument("--checkpoint-interval", type=_seconds, default=30.0, metavar="S",
                     help="local runner: seconds between state checkpoints, taken at "
                          "epoch boundaries (default 30; 0: every boundary)")
    run.add_argument("--batch-lines", type=_positive_int, default=10_000, metavar="N",
                     help="spark: input lines per micro-batch (default 10000)")
    run.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                     help="Kafka client property for kafka:// sources and sinks, e.g. "
                          "security.protocol=SASL_SSL (repeatable)")
    run.add_argument("--quiet", "-q", action="store_true",
                     help="no progress line and no summary")

    explain = sub.add_parser("explain", help="print the plan of a query")
    explain.add_argument("query", metavar="QUERY.sql")
    explain.add_argument("--eps", type=_unit_float, default=None, metavar="E",
                         help="IVM-epsilon exponent for triangle queries (default 0.5)")
    explain.add_argument("--parallelism", type=_positive_int, default=1, metavar="P",
                         help="show the partitioning for P partitions")
    explain.add_argument("--partitioning", choices=("single", "double"), default="single",
                         help="triangle COUNT(*): single or double heavy/light partitioning")

    CONNECTOR_SCHEMES["kafka"]().add_commands(sub)
    gen = sub.add_parser("generate", help="write synthetic update streams")
    gen_sub = gen.add_subparsers(dest="kind", required=True, metavar="KIND")
    graph = gen_sub.add_parser("graph", help="a skewed directed graph, optionally as a "
                                             "FIFO sliding-window stream")
    graph.add_argument("--edges", type=_positive_int, required=True)
    graph.add_argument("--nodes", type=_positive_int, default=None)
    graph.add_argument("--alpha", type=float, default=1.0, help="Zipf exponent (default 1)")
    graph.add_argument("--model", choices=("zipf", "powerlaw_cluster"), default="zipf")
    graph.add_argument("--window", type=_window, default=None,
                       help="live edges: a count, or a fraction of --edges such as 0.2")
    graph.add_argument("--seed", type=int, default=0)
    graph.add_argument("--relation", default="G")
    graph.add_argument("--out", default="-", help="output file (default: stdout)")
    graph.add_argument("--epoch-every", type=_positive_int, default=None, metavar="N",
                       help="write a '*' line after every N updates")
    social = gen_sub.add_parser(
        "social", help="person/knows/message tables under FIFO windows (built with PySpark)"
    )
    social.add_argument("--persons", type=_positive_int, required=True)
    social.add_argument("--knows", type=_positive_int, required=True)
    social.add_argument("--messages", type=_positive_int, required=True)
    social.add_argument("--window", type=float, default=0.2,
                        help="live fraction of each table (default 0.2)")
    social.add_argument("--seed", type=int, default=0)
    social.add_argument("--epoch-every", type=_positive_int, default=None, metavar="N")
    social.add_argument("--out", required=True)
    social.add_argument("--quiet", "-q", action="store_true")
    graph.add_argument("--engine", choices=("python", "spark"), default="python",
                       help="build the stream in-process (default) or with PySpark")
    graph.add_argument("--edge-list", metavar="FILE",
                       help="spark: read src,dst edges from FILE instead of generating")
    graph.add_argument("--min-dst", type=int, default=None, metavar="T",
                       help="spark: keep only edges with dst >= T")
    graph.add_argument("--quiet", "-q", action="store_true")
    return parser


def _options(args: argparse.Namespace) -> RunOptions:
    return RunOptions(
        query=args.query, updates=args.updates, runner=args.runner, epoch=args.epoch,
        deltas=args.deltas, snapshots=args.snapshots, parallelism=args.parallelism,
        eps=args.eps, partitioning=args.partitioning, on_error=args.on_error,
        dead_letter=args.dead_letter,
        stop_at_end=args.stop_at_end, quiet=args.quiet, resume=args.resume,
        fsync=args.fsync, checkpoint=args.checkpoint,
        checkpoint_interval=args.checkpoint_interval, batch_lines=args.batch_lines,
        kafka_options=args.kafka_option,
    )


def _error(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the ``ivmflow`` command line; returns the exit code (never raises on bad
    queries, bad input or missing files).

    >>> main(["run", "q.sql", "--updates", "u.csv", "--runner", "storm"])
    2
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, usage errors
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if args.command == "run":
            opts = _options(args)
            if opts.dead_letter and opts.on_error != "skip":
                return _error("--dead-letter needs --on-error skip", 2)
            return cmd_run(opts)
        if args.command in ("produce", "consume"):
            return CONNECTOR_SCHEMES["kafka"]().run_command(args)
        if args.command == "explain":
            return cmd_explain(args.query, args.eps, args.parallelism, args.partitioning)
        return cmd_generate(args)
    except QueryError as exc:
        return _error(str(exc), 2)
    except UsageError as exc:
        return _error(str(exc), 2)
    except IvmflowError as exc:  # InputError, ResumeError
        return _error(str(exc), 1)
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 141
    except FileNotFoundError as exc:
        return _error(f"no such file or directory: {exc.filename}", 1)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return _error(f"{exc.strerror or exc}{where}", 1)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
