r"""Running a query: the options of a run, its sinks (chosen by URL scheme), the progress
counters, and :func:`run`, which compiles the query, opens the outputs and hands the run
to the chosen runner (:mod:`dataflow.runners`). The command line is a thin layer over
this module; it can be used from Python the same way.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "q.sql").write_text("CREATE TABLE R(a INT); SELECT COUNT(*) AS n FROM R;")
    >>> _ = (d / "u.csv").write_text("+,R,1\n+,R,2\n*\n-,R,1\n")
    >>> ctx = run(RunOptions(str(d / "q.sql"), str(d / "u.csv"), deltas=str(d / "out.csv")))
    >>> ctx.progress.stats.epochs, (d / "out.csv").read_text().splitlines()
    (2, ['epoch,mult,n', '1,1,2', '2,1,1', '2,-1,2'])
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, BinaryIO, TextIO

from connectors.base import DeadLetterSink, Outputs, SkipCommitted
from connectors.files import (
    CsvStreamSink,
    DeadLetterCsvSink,
    DeltaCsvSink,
    OnError,
    SnapshotCsvSink,
)
from core.consolidate import OrderBy
from core.errors import UnavailableError, UsageError
from core.memory import StateLimit
from core.native import NativeFallbackWarning
from core.records import Record
from dataflow import runners
from dataflow.circuit.drive import DriveStats, LiveView

__all__ = [
    "PROG", "Outputs", "Progress", "RunContext", "RunOptions", "compile_file", "maintain_view",
    "open_outputs", "run", "scheme", "stop_on_signals",
]

PROG = "ivmflow"
"""The command's name, which every message starts with."""


def scheme(target: str | None) -> str | None:
    """The URL scheme of a source or sink (None for a path).

    >>> scheme("kafka://h:9092/t"), scheme("out.csv")
    ('kafka', None)
    """
    if target and "://" in target:
        return target.split("://", 1)[0].lower()
    return None


CONNECTOR_SCHEMES = ("kafka",)
"""URL schemes a source or sink may use."""


def _kafka_io() -> ModuleType:
    """The Kafka glue (:mod:`dataflow.runners.kafka`), imported on first use."""
    try:
        from dataflow.runners import kafka as kafka_io
    except ImportError as err:  # pragma: no cover - depends on the installation
        msg = f"the kafka:// connector needs kafka-python: pip install -e '.[kafka]' ({err})"
        raise UnavailableError(msg) from None
    return kafka_io


# ---------------------------------------------------------------------------------------
# Run options, outputs, progress


LOCAL_CHECKPOINT_S = 30.0
"""The local runner's default seconds between state checkpoints (over Kafka)."""

FLINK_CHECKPOINT_S = 1.0
"""The Flink runner's default checkpoint interval in seconds."""


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
    Local runner over Kafka: the state checkpoint (:mod:`dataflow.runners.local.checkpoint`), only
    when given."""
    checkpoint_interval: float | None = None
    """Seconds between state checkpoints. Local runner over Kafka: taken at epoch
    boundaries (0: at every boundary), default :data:`LOCAL_CHECKPOINT_S`; Flink: the job's
    checkpoint interval, default :data:`FLINK_CHECKPOINT_S`."""
    batch_lines: int = 10_000
    """Spark: input lines per micro-batch."""
    kafka_options: list[str] = field(default_factory=list)
    """``KEY=VALUE`` Kafka client properties for every ``kafka://`` source and sink."""
    native: bool | None = None
    """Local runner: compile the view's hot path (``View(native=...)``): ``None`` auto
    (where Cython and a C compiler are present; ``$IVMFLOW_NATIVE`` 1 or 0 decides
    when set), ``True`` required (``--native``), ``False`` never (``--no-native``)."""
    verbose: bool = False
    """Spark, Flink: leave the JVM's output on the terminal and print a failed job's
    full trace (else the trace goes to a log file whose path the error names)."""
    min_epoch_events: int = 1
    """Change streams with transaction metadata: consecutive source transactions share
    an epoch until it holds this many events (docs/change-streams.md)."""
    transaction_timeout: float = 60.0
    """Change streams: seconds an END record may wait for its transaction's events."""
    epoch_ms: int | None = None
    """Change streams without transaction metadata: epochs of T milliseconds of the
    events' source timestamps (docs/change-streams.md; not transactionally consistent)."""

    max_state: int | None = None
    """Local runner: bytes the process may hold resident (``--max-state``): the run stops
    at the end of the first epoch after which it holds more, or inside an epoch that
    grows past it, nothing of that epoch written (:mod:`core.memory`)."""
    trust_deletes: bool = False
    """No delete check (``validate=False``): for a source consistent by construction,
    such as a database's change stream (a delete of a row that is not there is then
    not refused, and the results are wrong from there on). On Spark and Flink the join
    partitions check none and keep no tuple for it (an aggregate's leaves keep sums)."""

    def maintain_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``CompiledQuery.maintain`` (``eps`` only when given;
        the delete check off with ``--trust-deletes``; the rows kept whole for a local
        state checkpoint, which saves them)."""
        kwargs: dict[str, Any] = {"parallelism": self.parallelism}
        if self.eps is not None:
            kwargs["eps"] = self.eps
        if self.native is not None:
            kwargs["native"] = self.native
        if self.trust_deletes:
            kwargs["validate"] = False
        if self.checkpoint and self.runner == "local":
            kwargs["keep_rows"] = True
        return kwargs

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
        """``--dead-letter``, or ``<deltas>.dead-letter.csv`` beside the delta file, as
        its ``.commit`` and ``.checkpoint`` are (``ivmflow.dead-letter.csv`` in the
        working directory when deltas go to stdout).

        >>> RunOptions("q.sql", "u.csv", deltas="out/d.csv").dead_letter_path
        'out/d.csv.dead-letter.csv'
        """
        if self.dead_letter:
            return self.dead_letter
        return f"{self.deltas or 'ivmflow'}.dead-letter.csv"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Progress:
    """The live progress line (terminal only) and the run's counters.

    The rate is the pace of the run itself: updates applied per second since the
    runner took its first record (:meth:`watch` notes when). What comes before is not
    counted: compiling the query and its hot path, the local runner's read-ahead (it
    reads a prefix of the stream to estimate update rates before applying any), waiting
    for a first record that has not arrived. A hot-path build during the run is not
    counted either. ``clock`` is the time source (seconds; tests pass a fake one).

    >>> import io
    >>> now = [0.0]
    >>> p = Progress(io.StringIO(), enabled=False, clock=lambda: now[0])
    >>> records = p.watch(range(4))
    >>> now[0] = 5.0  # (compiling, reading ahead)
    >>> _ = next(records)  # the runner takes its first record at 5.0
    >>> p.stats.updates = 3; now[0] = 6.5
    >>> p.rate()
    2.0
    """

    def __init__(self, stream: TextIO, enabled: bool, interval: float = 0.2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.enabled = enabled
        self.interval = interval
        self.clock = clock
        self.stats = DriveStats()
        self.start = clock()
        self.began: float | None = None
        """When the runner took its first record (the rate counts from there)."""
        self._began_compile = 0.0
        self.stop_requested = False
        self.stop_signal: int | None = None
        """The signal that asked for the stop (SIGINT, SIGTERM)."""
        # Set by a runner whose updates are read inside the job (Flink on Kafka): the
        # driver never sees them, so the summary must not claim "0 updates".
        self.counted_in_job: str | None = None
        self._last_draw = self.start
        self._began_part: float | None = None
        self._width = 0
        # A bounded file source of known size (track_files): bytes read -> percent, ETA.
        self.total_bytes: int | None = None
        self._file: BinaryIO | None = None
        self._file_size = 0
        self._done_bytes = 0
        self.native_note: str | None = None
        """Which hot path runs and why (``compiled``, ``interpreted: <why>``; the local
        runner sets it), shown at the end of the line and of the summary."""
        self.compile_seconds = 0.0
        """Time spent compiling the hot path (not counted in the rate)."""
        self.check_note: str | None = None
        """Which delete check runs (``row digests (64-bit)``, ``off (--trust-deletes)``;
        the local runner sets it), shown at the end of the summary."""
        self.state_note: str | None = None
        """A change stream's upsert state (keys and bytes) where the runner keeps one."""
        self._compile_start: float | None = None

    def track_files(self, paths: Sequence[Path]) -> Callable[[BinaryIO], None]:
        """Show percent and ETA while reading ``paths`` (a bounded file source): returns
        the callback that the reader calls with each file it opens (its position is
        read from it at each redraw)."""
        self.total_bytes = sum(p.stat().st_size for p in paths)

        def opened(f: BinaryIO) -> None:
            self._done_bytes += self._file_size if self._file is not None else 0
            self._file = f
            self._file_size = os.fstat(f.fileno()).st_size

        return opened

    def fraction(self) -> float | None:
        """The part of a tracked source read so far (``None``: size unknown)."""
        if not self.total_bytes or self._file is None:
            return None
        try:
            pos = self._file.tell()
        except (OSError, ValueError):  # closed: read to its end
            pos = self._file_size
        return min(1.0, (self._done_bytes + pos) / self.total_bytes)

    def tick(self, i: int) -> None:
        """Redraw now and then (call with a running record count)."""
        if self.enabled and not i & 255:
            now = self.clock()
            if now - self._last_draw >= self.interval:
                self._last_draw = now
                self.draw(now)

    def watch(self, records: Iterable[Record]) -> Iterator[Record]:
        """Pass records through, redrawing now and then (a stop request is the runner's
        to act on: it ends at the last whole epoch, see :func:`dataflow.circuit.drive.drive`).
        The rate counts from when the runner takes the first record (:meth:`begin`)."""
        it = iter(records)
        for rec in it:
            self.begin()
            yield rec
            break
        for i, rec in enumerate(it, 2):
            yield rec
            self.tick(i)

    def begin(self) -> None:
        """The runner takes its first record (the view is built, any read-ahead
        done): the rate counts from now."""
        if self.began is None:
            self.began = self.clock()
            self._began_compile = self.compile_seconds
            self._began_part = self.fraction()

    def _busy(self, now: float) -> float:
        """Seconds the runner has been at its records (see the class docstring)."""
        if self.began is None:
            return max(now - self.start - self.compile_seconds, 1e-9)
        compiled = self.compile_seconds - self._began_compile  # (a build during the run)
        return max(now - self.began - compiled, 1e-9)

    def rate(self, now: float | None = None) -> float:
        """Updates applied per second since the runner took its first record."""
        now = self.clock() if now is None else now
        return self.stats.updates / self._busy(now)

    def draw(self, now: float) -> None:
        st = self.stats
        elapsed = max(now - self.start, 1e-9)
        busy = self._busy(now)
        line = (f"{PROG}: {st.updates} updates read, {plural(st.epochs, 'epoch')}, "
                f"{plural(st.delta_rows, 'delta row')}, {self.rate(now):.0f} updates/s")
        part = self.fraction()
        if part is not None:
            # As tqdm draws it: percent, a bar, elapsed and what remains at this pace
            # (of the bytes read since the runner took its first record: the
            # read-ahead's bytes were read before).
            filled = int(part * 20)
            done = part - (self._began_part or 0.0) if self.began is not None else part
            eta = _clock(busy * (1 - part) / done) if done > 0 else "?"
            line = (f"{PROG}: {part:4.0%} |{'#' * filled}{' ' * (20 - filled)}| "
                    f"{line.removeprefix(PROG + ': ')}, {_clock(elapsed)}<{eta}")
        if self.native_note:  # (its short form: "compiled", "interpreted: <why>")
            line += f", {self.native_note.split(' (')[0]}"
        self._write(line)

    def _write(self, line: str) -> None:
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def compiling(self) -> None:
        """Show that the hot path is being compiled (first use of a query shape: a few
        seconds before the first update is applied)."""
        self._compile_start = self.clock()
        if self.enabled:
            self._write(f"{PROG}: compiling the hot path (first use of this query shape)...")

    def compiled(self) -> None:
        """The compile that :meth:`compiling` announced is over (or failed)."""
        if self._compile_start is not None:
            self.compile_seconds += self.clock() - self._compile_start
            self._compile_start = None

    def warn(self, message: str) -> None:
        """A one-line warning (``ivmflow: warning: ...``) on the progress stream, also
        when the progress line is off."""
        self.clear()
        self.stream.write(f"{PROG}: warning: {message}\n")
        self.stream.flush()

    def clear(self) -> None:
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def summary(self) -> str:
        st = self.stats
        now = self.clock()
        secs = now - self.start
        state = f", {self.state_note}" if self.state_note else ""
        if self.counted_in_job is not None:
            return f"{PROG}: {self.counted_in_job} in {secs:.1f}s{state}"
        rate = self.rate(now)
        snaps = f", {plural(st.snapshots, 'snapshot')}" if st.snapshots else ""
        note = f", {self.native_note}" if self.native_note else ""
        if self.check_note:
            note += f", delete check: {self.check_note}"
        note += state
        return (f"{PROG}: {plural(st.updates, 'update')}, {plural(st.epochs, 'epoch')}, "
                f"{plural(st.delta_rows, 'delta row')}{snaps} in {secs:.1f}s "
                f"({rate:.0f} updates/s){note}")


def _clock(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour on), as tqdm writes times.

    >>> _clock(75.4), _clock(3725)
    ('1:15', '1:02:05')
    """
    s = int(seconds + 0.5)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


@dataclass
class RunContext:
    """Everything a runner gets: the compiled query, the options, the opened sinks and
    the progress counters (a runner updates ``progress.stats``)."""

    query: Any
    options: RunOptions
    outputs: Outputs
    progress: Progress = field(default_factory=lambda: Progress(sys.stderr, False))


def open_outputs(opts: RunOptions, columns: Sequence[str],
                 order_by: OrderBy = ()) -> Outputs:
    """The sinks of a run, chosen by URL scheme: CSV files (or stdout), or Kafka topics
    (:func:`dataflow.runners.kafka.open_outputs`) when any source or sink is ``kafka://``.
    File sinks of a resumed run skip the epochs they already hold."""
    targets = (opts.updates, opts.deltas, opts.snapshots, opts.dead_letter)
    if any(scheme(t) == "kafka" for t in targets):
        return _kafka_io().open_outputs(opts, columns)
    dead: DeadLetterSink | None = None
    out: Outputs | None = None
    try:
        if opts.on_error == "skip":
            dead = DeadLetterCsvSink(opts.dead_letter_path)
        if opts.deltas:
            dsink = DeltaCsvSink(opts.deltas, columns, resume=opts.resume_outputs, fsync=opts.fsync)
            out = Outputs(SkipCommitted(dsink, epoch=dsink.last_committed_epoch),
                          dead_letter=dead, resume_epoch=dsink.last_committed_epoch)
        else:
            out = Outputs(CsvStreamSink(sys.stdout, columns), dead_letter=dead)
        if opts.snapshots:
            ssink = SnapshotCsvSink(
                opts.snapshots, columns, resume=opts.resume_outputs, fsync=opts.fsync,
                order_by=order_by,
            )
            out.snapshots = SkipCommitted(ssink, snapshot=ssink.last_committed_snapshot)
            out.resume_snapshot = ssink.last_committed_snapshot
        return out
    except BaseException:
        if out is not None:
            out.close()
        elif dead is not None:
            dead.close()
        raise



@contextlib.contextmanager
def stop_on_signals(progress: Progress) -> Iterator[None]:
    """SIGINT/SIGTERM set ``progress.stop_requested`` (the runner finishes the open
    epoch and stops); a second SIGINT aborts."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if progress.stop_requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        progress.stop_requested = True
        if progress.stop_signal is None:
            progress.stop_signal = signum

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



# ---------------------------------------------------------------------------------------
# Running


def compile_file(path: str, eps: float | None = None, partitioning: str = "single") -> Any:
    """Compile a query file (errors name the file). A given ``eps`` also selects view
    trees for a hierarchical query that is not q-hierarchical (the knob applies there)."""
    text = Path(path).read_text(encoding="utf-8")
    from dataflow.api import compile_query

    kwargs: dict[str, Any] = {}
    if eps is not None:
        kwargs["eps"] = eps
        kwargs["view_trees"] = True
    if partitioning != "single":
        kwargs["triangle_partitioning"] = partitioning
    return compile_query(text, source_name=path, **kwargs)


RUNNER_CHECK = {False: "the tuples the joins keep, in the keyed state",
                True: "off in the joins (--trust-deletes)"}
"""The delete check of the Spark and Flink runners, for the run's summary line."""


def state_limit(ctx: RunContext, view: LiveView, resume: str) -> StateLimit | None:
    """``--max-state``'s check (None without it), at each epoch's end and inside an
    epoch: the run stops there with :class:`core.memory.StateLimitError`; ``resume``
    says how it goes on."""
    if ctx.options.max_state is None:
        return None
    return StateLimit(ctx.options.max_state, view.state_entries, resume)


def maintain_view(ctx: RunContext, query: Any = None) -> LiveView:
    """``query.maintain`` (default ``ctx.query``) with the run's options, for a runner
    that hosts the view in this process: a first-use compile of the hot path shows on
    the progress line, a failed build's fallback warning is one line there, and the
    line and the summary say which hot path runs and why."""
    progress = ctx.progress
    query = ctx.query if query is None else query
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NativeFallbackWarning)
        try:
            view: LiveView = query.maintain(**ctx.options.maintain_kwargs(),
                                            on_compile=progress.compiling)
        finally:
            progress.compiled()
    for w in caught:
        if issubclass(w.category, NativeFallbackWarning):
            progress.warn(str(w.message))
        else:  # (someone else's: shown as it would have been)
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    progress.native_note = view.native_note or None
    progress.check_note = view.delete_check or None
    if progress.enabled:
        progress.draw(progress.clock())
    return view


def _check_available(opts: RunOptions) -> runners.Runner:
    if opts.max_state is not None and opts.runner != "local":
        where = ("RocksDB can keep it on disk" if opts.runner == "flink"
                 else "its state store, per partition")
        msg = (f"--max-state is for the local runner; the {opts.runner} runner keeps its "
               f"state in its workers ({where}): size them instead")
        raise UsageError(msg)
    if opts.epoch_ms is not None and (scheme(opts.updates) != "kafka" or
                                      _kafka_io().endpoint(opts.updates, opts).format == "json"):
        msg = (f"--epoch-ms: epochs by the events' source timestamps are for a change "
               f"stream (kafka://...?format=debezium-json or upsert-json), not "
               f"{opts.updates}: cut epochs with --epoch N or '*' markers")
        raise UsageError(msg)
    runner = runners.get(opts.runner)
    for what, target in (("--updates", opts.updates), ("--deltas", opts.deltas),
                         ("--snapshots", opts.snapshots)):
        s = scheme(target)
        if s is not None and s not in CONNECTOR_SCHEMES:
            msg = f"the {s}:// connector ({what} {target}) is not available in this build"
            raise UnavailableError(msg)
    return runner


def run(opts: RunOptions, progress: Progress | None = None) -> RunContext:
    """Compile ``opts.query``, open the source and the sinks, and run to the end of a
    bounded source or until ``progress.stop_requested`` (set by a signal handler, see
    :func:`stop_on_signals`). Returns the run's context (its counters are in
    ``ctx.progress.stats``); raises :class:`~core.errors.IvmflowError` subclasses on
    bad queries, bad input and bad usage, with the outputs closed and every epoch
    written so far complete."""
    runner = _check_available(opts)
    # Unsupported SQL fails before any input is read; eps and the partitioning are
    # compiled in so that the Spark and Flink workers plan the same engine.
    query = compile_file(opts.query, opts.eps, opts.partitioning)
    if scheme(opts.updates) is None and opts.updates != "-" and not Path(opts.updates).exists():
        raise FileNotFoundError(2, "update source not found", opts.updates)
    outputs = open_outputs(opts, tuple(query.output_columns), query.cq.order_by)
    ctx = RunContext(query, opts, outputs,
                     progress if progress is not None else Progress(sys.stderr, False))
    if opts.runner != "local":  # (the local runner's view says which, maintain_view)
        ctx.progress.check_note = RUNNER_CHECK[opts.trust_deletes]
    try:
        runner(ctx)
    finally:
        ctx.progress.clear()
        outputs.close()
    return ctx
