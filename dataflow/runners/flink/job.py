"""The PyFlink runner (in-process mini-cluster by default).

Job shape (docs/runners.md): a tick source (``NumberSequenceSource``, parallelism 1)
-> the reader, a keyed process function that reads the next records of the update file
or directory (:mod:`dataflow.runners.flink.files`) or Kafka topic
(:mod:`dataflow.runners.flink.kafka`) from the position in its keyed state, numbers and
cuts them into epochs once, tags each update with its HyperCube partitions (closes go to
every partition) and emits one bundle per partition -> ``key_by(partition)`` ->
:class:`PartitionFunction`, hosting the partition's engine and output finalizer ->
``key_by(epoch)`` -> :class:`EpochMerger`, which appends each partition's output of an
epoch and, once every partition has closed it, sums the changes per row and writes the
epoch atomically to the sink: O(rows) per epoch (a run with one partition has no
merger: the partition writes the sinks itself). Python operators exchange pickled
objects in thread mode (typed tuples are an order of magnitude slower through PyFlink).

State in Flink, per entry: every named map of the State protocol is a ``MapState``
under the partition key; the engine works on an in-memory cache and at each epoch close
writes back only the entries it touched. The rows of the open epoch go to a
``ListState`` once per bundle, compressed (:func:`pack_rows`), so a checkpoint taken
mid-epoch is complete (restore = the cache rebuilt from the MapStates + a replay of
that list). RocksDB with incremental
checkpoints is the state backend (``IVMFLOW_FLINK_STATE_BACKEND=hashmap`` for the heap);
``IVMFLOW_FLINK_CONF`` adds Flink settings (:func:`extra_flink_conf`).
Checkpoints are retained; a run started again with the same ``--checkpoint`` resumes
from the newest one, and the sinks skip epochs they already hold: every epoch is
written exactly once.

Failures are loud: the workers run this interpreter, a failed job is restarted once,
then the run fails with the worker's error (:class:`FlinkJobError`).
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from time import perf_counter
from typing import Any

from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.datastream import (
    KeyedProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

from connectors.files import OnError
from core.epochs import CLOSE
from core.errors import FlinkJobError, UsageError
from dataflow.distributed.partitions import (
    PartitionLayout,
    PartitionTask,
    TaggedRow,
    WorkerPlan,
    bundle_by_partition,
    check_layout,
    merge_epoch_parts,
    needs_stages,
    stamp_checkpoint_dir,
)
from dataflow.distributed.stages import StagePlan, StageTask, stage_plan
from dataflow.runners.flink.reader import PhaseLog, Profiling
from dataflow.runners.flink.sinks import STOP_MARKER, EpochSinks
from dataflow.runners.jvm import require_java
from operators.node import PartitionNode
from operators.writeback import WriteBackState, decode_entry, encode_entry, encode_key

_EPOCH, _KIND, _SNAPSHOT = (TaggedRow._fields.index(f) for f in ("epoch", "kind", "snapshot"))

RESTART_ATTEMPTS = 1
"""Restarts of a failed job before the run fails (deterministic failures, like a bad
record, fail again; the one restart covers a transient one)."""

BUNDLE_RECORDS = 10_000
"""Input lines (records) read per tick: a tick's records reach each partition as one
element."""


def _spool_stdin(ckpt: Path, fresh: bool) -> Path:
    """Standard input copied to a file next to the checkpoints (read once; a restarted
    run reads the copy)."""
    path = ckpt / "stdin.csv"
    if fresh or not path.exists():
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            while chunk := sys.stdin.buffer.read(1 << 20):
                f.write(chunk)
        os.replace(tmp, path)
    return path


def latest_checkpoint(directory: str) -> str | None:
    """The newest retained checkpoint (``<dir>/<job>/chk-N`` with ``_metadata``)."""
    best: tuple[float, str] | None = None
    root = Path(directory)
    if not root.exists():
        return None
    for meta in root.glob("*/chk-*/_metadata"):
        stamp = meta.stat().st_mtime
        if best is None or stamp > best[0]:
            best = (stamp, str(meta.parent))
    return None if best is None else best[1]


def _stored_entry(text: str, value: Any) -> tuple[Any, Any]:
    """A MapState entry back as its (key, value) pair (:func:`decode_entry`); checkpoints
    of ivmflow <= 0.2 hold the pair pickled once more (bytes)."""
    return decode_entry(text, pickle.loads(value) if isinstance(value, bytes) else value)


def _raw_remove(ms: Any) -> Callable[[str], None]:
    """``remove`` of the Java MapState behind a thread-mode (embedded) PyFlink MapState,
    bound once (a key is its text, passed as is), or the public ``remove``."""
    if type(ms).__module__ == "pyflink.fn_execution.datastream.embedded.state_impl":
        java = getattr(ms, "_state", None)
        remove = getattr(java, "remove", None)
        if remove is not None:
            return remove
    return ms.remove


def _raw_put_all(ms: Any) -> Callable[[dict[str, bytes]], None] | None:
    """``putAll`` of the Java MapState behind a thread-mode (embedded) PyFlink MapState,
    taking already pickled values; None for any other implementation (then the public
    ``put_all`` pickles them)."""
    if type(ms).__module__ != "pyflink.fn_execution.datastream.embedded.state_impl":
        return None
    java = getattr(ms, "_state", None)
    return getattr(java, "putAll", None)


def extra_flink_conf(text: str) -> list[tuple[str, str]]:
    """Flink configuration an operator adds to the runner's (``IVMFLOW_FLINK_CONF``:
    ``key=value`` entries separated by ``;`` or newlines), applied after ivmflow's own
    settings: RocksDB tuning, the REST endpoint of the mini-cluster (``rest.port``, for
    Flink's web UI and checkpoint statistics), and so on.

    >>> extra_flink_conf("rest.port=8081; state.backend.rocksdb.compression.per.level="
    ...                  "ZSTD_COMPRESSION")
    [('rest.port', '8081'), ('state.backend.rocksdb.compression.per.level', 'ZSTD_COMPRESSION')]
    >>> try:
    ...     extra_flink_conf("rest.port")
    ... except UsageError as err:
    ...     print(str(err)[:56])
    IVMFLOW_FLINK_CONF entry 'rest.port': expected key=value
    """
    out: list[tuple[str, str]] = []
    for entry in text.replace("\n", ";").split(";"):
        if not entry.strip():
            continue
        key, eq, value = entry.partition("=")
        if not eq or not key.strip() or not value.strip():
            msg = (f"IVMFLOW_FLINK_CONF entry {entry.strip()!r}: expected key=value "
                   "(entries separated by ';' or newlines)")
            raise UsageError(msg)
        out.append((key.strip(), value.strip()))
    return out


def pack_rows(rows: Sequence[Any]) -> bytes:
    """One bundle of the open epoch's rows as the ``open_epoch_rows`` list stores it:
    pickled, then compressed (zlib, level 1: about 0.4 us a row). Why: a cleared list
    stays in RocksDB's files until a compaction takes them with its tombstone, and
    incremental checkpoints count those files; after a load of one epoch that residue
    was most of a checkpoint (docs/benchmarks.md, "What the checkpoints hold").
    RocksDB's Snappy finds repeats but does not entropy-code; zlib makes these rows
    several times smaller.

    >>> import datetime
    >>> rows = [(0, i, 1, "u", 0, (i, datetime.date(1995, 1, 1)), 1, 0) for i in range(3)]
    >>> unpack_rows(pack_rows(rows)) == rows, unpack_rows(rows) is rows
    (True, True)
    """
    return zlib.compress(pickle.dumps(list(rows), pickle.HIGHEST_PROTOCOL), 1)


def unpack_rows(bundle: bytes | list[Any]) -> list[Any]:
    """A stored bundle's rows (:func:`pack_rows`'s bytes; a list as a checkpoint of
    before the compression holds it)."""
    if isinstance(bundle, bytes):
        rows: list[Any] = pickle.loads(zlib.decompress(bundle))
        return rows
    return bundle


class PartitionFunction(KeyedProcessFunction):
    """Hosts one partition's engine per key (the partition number).

    The engine works on a :class:`~operators.writeback.WriteBackState` cache; every named map
    of the State protocol is one Flink ``MapState`` (key: :func:`encode_key`, value:
    :func:`encode_entry`, the pickled value, or (key, value) pair for keys whose text
    does not read back), and at each epoch close only the entries touched during
    the epoch are written back (``putAll`` and removals). Rows of the open epoch are
    appended to a ``ListState`` per bundle (:func:`pack_rows`), so a checkpoint taken
    mid-epoch is complete:
    a restore rebuilds the cache from the MapStates and replays that list."""

    def __init__(self, plan: WorkerPlan, sinks: EpochSinks | None = None) -> None:
        self.plan = plan
        self.sinks = sinks
        """The run's sinks when this is its only partition: it writes each epoch itself
        (its output is the merged output), with no merger behind it."""
        self.tasks: dict[int, tuple[PartitionNode, WriteBackState]] = {}
        """Per partition (a stage's: per slot) its node and its state."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.profiling = Profiling("partition")
        self.phases = PhaseLog()
        # The sinks open on the first write, not here: a one-slot final stage runs in
        # an operator of P subtasks, and each subtask opening the Kafka sink's
        # transactional producer would fence the others, the slot's own included.
        self.maps = {
            name: runtime_context.get_map_state(
                MapStateDescriptor(f"map:{name}", Types.STRING(), Types.PICKLED_BYTE_ARRAY())
            )
            for name in self._map_names()
        }
        self.raw_put_all = {name: _raw_put_all(ms) for name, ms in self.maps.items()}
        self.raw_remove = {name: _raw_remove(ms) for name, ms in self.maps.items()}
        self.pending = runtime_context.get_list_state(
            ListStateDescriptor("open_epoch_rows", Types.PICKLED_BYTE_ARRAY())
        )
        self.layout = runtime_context.get_state(
            ValueStateDescriptor("state_layout", Types.STRING())
        )

    def _map_names(self) -> list[str]:
        return self.plan.map_names()

    def _restored(self, partition: int) -> WriteBackState:
        """The cache rebuilt from the MapStates, their layout stamp checked."""
        state = WriteBackState()
        for name, ms in self.maps.items():  # restore: rebuild the cache from MapState
            state.load(name, (_stored_entry(k, v) for k, v in ms.items()))
        expected = self.plan.layout_stamp()
        found = self.layout.value()
        check_layout(found, expected, any(len(state.map(n)) for n in self.maps),
                     f"flink partition {partition}")
        if found is None:
            self.layout.update(expected)
        return state

    def _task(self, partition: int) -> PartitionTask:
        hit = self.tasks.get(partition)
        if hit is not None:
            assert isinstance(hit[0], PartitionTask)
            return hit[0]
        q, layout = self.plan.compiled()
        state = self._restored(partition)
        task = PartitionTask(q, layout, state=state, trust_deletes=self.plan.trust_deletes)
        replay = [r for bundle in (self.pending.get() or []) for r in unpack_rows(bundle)]
        task.process(replay)  # updates only: they emit nothing
        self.tasks[partition] = (task, state)
        return task

    def _write_back(self, state: WriteBackState) -> tuple[int, int]:
        """Write the epoch's changed entries to the MapStates; (entries put, removed)."""
        n_puts = n_gone = 0
        for name, puts, gone in state.changes():
            n_puts += len(puts)
            n_gone += len(gone)
            ms = self.maps[name]
            if puts:
                raw = self.raw_put_all[name]
                if raw is not None:
                    # Bytes PyFlink's PICKLED_BYTE_ARRAY converter reads back
                    # (encode_entry's pickle), handed to Java in one call: the
                    # converter's two Python calls per entry were a fifth of the
                    # partition's time.
                    raw({encode_key(k): encode_entry(k, v) for k, v in puts.items()})
                else:
                    ms.put_all({encode_key(k): (k, v) for k, v in puts.items()})
            if gone:
                # One Java call each (MapState takes no bulk removal), bound once: the
                # Python wrapper's converter call per key cost as much again.
                remove = self.raw_remove[name]
                for k in gone:
                    remove(encode_key(k))
        return n_puts, n_gone

    def close(self) -> None:
        if self.sinks is not None:
            self.sinks.close()
        self.profiling.dump()
        self.phases.dump()

    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        yield from self.profiling.run(self._process, value)

    def _process(self, value: Any) -> Iterator[Any]:
        partition, rows = value  # rows: plain tuples of TaggedRow's fields
        sinks = self.sinks
        task = self._task(partition)
        state = self.tasks[partition][1]
        start = 0
        phases = self.phases
        for i, row in enumerate(rows):
            if row[_KIND] != CLOSE:
                continue
            t0 = perf_counter() if phases.on else 0.0
            # An epoch's changes per (kind, number), as the finalizer made them.
            out = task.process_bundles(rows[start:i + 1])
            start = i + 1
            t1 = perf_counter() if phases.on else 0.0
            written = self._write_back(state)
            self.pending.clear()
            t2 = perf_counter() if phases.on else 0.0
            if sinks is not None:
                # The only partition: its bundles are the epoch's merged output.
                sinks.write(row[_EPOCH], row[_SNAPSHOT], out)
            else:
                # Plain tuples: an epoch's rows pickle and unpickle several times faster.
                yield EpochOutput(row[_EPOCH], row[_SNAPSHOT], tuple(
                    (kind, n, mult, r) for (kind, n), part in out.items() for mult, r in part))
            if phases.on:
                phases.add(row[_EPOCH], t1 - t0, t2 - t1, perf_counter() - t2, *written,
                           sum(map(len, out.values())))
        if start < len(rows):
            task.process(rows[start:])
            self.pending.add(pack_rows(rows[start:]))


class StageFunction(PartitionFunction):
    """Hosts the slots of one stage of a query run as stages (:mod:`dataflow.distributed.stages`),
    one :class:`~dataflow.distributed.stages.StageTask` per key (the slot). State as a partition's:
    the maps per entry, written back at each epoch close; every row received since the
    last close (the open epoch's, and later epochs' rows that wait for a channel) in
    the ``open_epoch_rows`` list, replayed after a restore; the last epoch closed in a
    value state. A stage's delta goes on to its readers' slots, one element per slot;
    the final stage's output goes to the merger (or, its only partition, to the sinks)."""

    def __init__(self, plan: WorkerPlan, index: int, sinks: EpochSinks | None = None) -> None:
        super().__init__(plan, sinks)
        self.index = index
        self.slots: dict[int, StageTask] = {}
        self._engine_s = 0.0
        """Seconds the open epoch's rows took so far (IVMFLOW_FLINK_PHASES)."""

    def _map_names(self) -> list[str]:
        return stage_plan(self.plan).map_names(self.index)

    def open(self, runtime_context: RuntimeContext) -> None:
        super().open(runtime_context)
        self.plan_stages = stage_plan(self.plan)
        self.closed = runtime_context.get_state(
            ValueStateDescriptor("epochs_closed", Types.INT()))

    def _slot(self, slot: int) -> StageTask:
        task = self.slots.get(slot)
        if task is None:
            state = self._restored(slot)
            task = StageTask(stage_plan(self.plan), slot, state, self.closed.value() or 0)
            self.tasks[slot] = (task.task, state)
            task.feed([r for bundle in (self.pending.get() or []) for r in unpack_rows(bundle)])
            self.slots[slot] = task
        return task

    def _process(self, value: Any) -> Iterator[Any]:
        slot, rows = value
        if self.plan_stages.stage_of[slot] != self.index:
            yield value  # a later stage's bundle: on to it
            return
        task = self._slot(slot)
        state = self.tasks[slot][1]
        final = task.stage.final
        outputs: list[Any] = []
        phases = self.phases
        mark = perf_counter() if phases.on else 0.0

        def on_close(close: tuple[Any, ...], out: dict[tuple[str, int], Any]) -> None:
            nonlocal mark
            t1 = perf_counter() if phases.on else 0.0
            written = self._write_back(state)
            self.closed.update(close[_EPOCH])
            if phases.on:  # (IVMFLOW_FLINK_PHASES: one line per slot and epoch)
                t2 = perf_counter()
                phases.add(close[_EPOCH], self._engine_s + t1 - mark, t2 - t1, 0.0, *written,
                           sum(map(len, out.values())))
                self._engine_s, mark = 0.0, t2
            if not final:
                return
            if self.sinks is not None:
                self.sinks.write(close[_EPOCH], close[_SNAPSHOT], out)
            else:
                outputs.append(EpochOutput(close[_EPOCH], close[_SNAPSHOT], tuple(
                    (kind, n, mult, r) for (kind, n), part in out.items() for mult, r in part)))

        before = task.closed
        downstream, _final = task.feed(rows, on_close)
        if phases.on:
            self._engine_s += perf_counter() - mark
        if task.closed != before:
            self.pending.clear()
            if task.unclosed:
                self.pending.add(pack_rows(task.unclosed))
        else:
            self.pending.add(pack_rows(rows))
        yield from bundle_by_partition(downstream)
        yield from outputs


@dataclass(frozen=True)
class EpochOutput:
    """What one partition sends the merger when it closes an epoch: all its changes of
    the epoch (and of the snapshot the epoch's marker asked for) in one element."""

    epoch: int
    snapshot: int
    rows: tuple[tuple[Any, ...], ...]
    """Plain tuples of :class:`~dataflow.distributed.partitions.OutputRow`'s fields."""


class EpochMerger(KeyedProcessFunction):
    """Keyed by epoch: appends each partition's :class:`EpochOutput` to the epoch's
    ``ListState`` and, when the last partition has closed the epoch, sums the changes
    per row (:func:`~dataflow.distributed.partitions.merge_epoch_parts`), writes the epoch (and its
    snapshot) to the sinks and clears the epoch's state: O(rows) per epoch.

    Epochs complete in order (each partition closes them in stream order, and this
    runs at parallelism 1), and the sinks skip epochs they already hold, so after a
    restore every epoch is written exactly once."""

    def __init__(self, partitions: int, sinks: EpochSinks) -> None:
        self.partitions = partitions
        self.sinks = sinks

    def open(self, runtime_context: RuntimeContext) -> None:
        self.parts = runtime_context.get_list_state(
            ListStateDescriptor("epoch_parts", Types.PICKLED_BYTE_ARRAY())
        )
        self.closed = runtime_context.get_state(
            ValueStateDescriptor("partitions_closed", Types.INT())
        )
        self.sinks.open()
        self.profiling = Profiling("merger")

    def close(self) -> None:
        self.sinks.close()
        self.profiling.dump()

    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        yield from self.profiling.run(self._process, value)

    def _process(self, value: Any) -> Iterator[Any]:
        part: EpochOutput = value
        closed = (self.closed.value() or 0) + 1
        if closed < self.partitions:
            self.parts.add(part)
            self.closed.update(closed)
            return iter(())
        parts = [*(self.parts.get() or []), part]
        self.parts.clear()
        self.closed.clear()
        self.sinks.write(part.epoch, part.snapshot, merge_epoch_parts([p.rows for p in parts]))
        return iter(())


def _interpreter_first_on_path() -> None:
    """Put this interpreter's directory first on PATH for the JVM (started after this):
    the embedded (thread-mode) Python finds its prefix, and so a virtual environment's
    packages, by looking ``python`` up on PATH."""
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[:1] != [bindir]:
        os.environ["PATH"] = os.pathsep.join([bindir, path]) if path else bindir


FLINK_JAVA = (11, 17, 21)
"""The Java versions Flink 2.x runs on."""


def _cancelled(exc: BaseException) -> bool:
    """Whether a job's failure is its cancellation (or the sinks' refusal to write on
    once the run was asked to stop, :class:`~dataflow.runners.flink.sinks.StopRequested`)."""
    text = str(exc)
    return "JobCancellationException" in text or "CANCELED" in text or "StopRequested" in text


def job_failure(exc: BaseException) -> FlinkJobError:
    """The cause of a failed job, from Flink's nested exception text: the Python error
    raised in a worker if there is one, else the innermost Java cause (the whole text
    rides along as the error's ``trace``)."""
    text = str(exc)
    causes = [line.split("Caused by: ", 1)[1].strip()
              for line in text.splitlines() if line.startswith("Caused by: ")]
    python = [c for c in causes if c.startswith("pemja.core.PythonException")]
    cause = (python or causes or [text.strip().splitlines()[0] if text.strip() else repr(exc)])[-1]
    cause = cause.removeprefix("pemja.core.PythonException: ")
    if cause.split(":", 1)[0].rsplit(".", 1)[-1] in ("ImportError", "ModuleNotFoundError"):
        cause += " (install ivmflow[flink])"
    msg = f"the flink job failed: {cause}"
    return FlinkJobError(msg, text)


UPSERT_SUMMARY = "upsert-state.json"
"""A change stream's upsert state size, written by the job's reader (in the checkpoint
directory), for the run's summary line."""


class FlinkJob:
    """Build and run the job on a mini-cluster (or the cluster ``flink run`` submits to)."""

    def __init__(self, query: Any, *, epoch_size: int | None, parallelism: int,
                 checkpoint: str | None = None, checkpoint_interval_ms: int = 1000,
                 trust_deletes: bool = False) -> None:
        self.query = query
        self.plan = WorkerPlan.of(query, parallelism, trust_deletes)
        self.layout = PartitionLayout(query, parallelism)
        self.stages: StagePlan | None = (
            StagePlan.of(query, parallelism, trust_deletes) if needs_stages(query) else None)
        """A DAG of views or a top-k: one keyed operator per stage (:meth:`_stages`)."""
        self.epoch_size = epoch_size
        self.checkpoint = checkpoint
        self.interval = checkpoint_interval_ms
        self.upsert_summary: Path | None = None

    def _checkpoint_dir(self) -> tuple[Path, str | None]:
        import tempfile

        ckpt = Path(self.checkpoint or tempfile.mkdtemp(prefix="ivmflow-flink-"))
        ckpt.mkdir(parents=True, exist_ok=True)
        restore = latest_checkpoint(str(ckpt))
        (ckpt / STOP_MARKER).unlink(missing_ok=True)  # (a stopped run's; this one goes on)
        stamp_checkpoint_dir(ckpt, self.plan.layout_stamp(), resuming=restore is not None,
                             where=f"flink --checkpoint {ckpt}")
        return ckpt, restore

    def run_files(self, path: str, deltas: str | None, snapshots: str | None = None, *,
                  stop_at_end: bool = False, batch_lines: int = BUNDLE_RECORDS,
                  on_error: OnError = "fail", dead_letter: str | None = None,
                  should_stop: Callable[[], bool] | None = None) -> bool:
        """Read an update file (bounded) or a directory of them (followed until stopped,
        or to its end at start with ``stop_at_end``) inside the job
        (:mod:`dataflow.runners.flink.files`), ``-`` for stdin (spooled first)."""
        from dataflow.runners.flink.files import FileEpochSource, start_position

        self._snapshots_wanted(snapshots)
        ckpt, restore = self._checkpoint_dir()
        if path == "-":
            path = str(_spool_stdin(ckpt, fresh=restore is None))
        start, ticks = start_position(path, ckpt, stop_at_end, fresh=restore is None,
                                      batch_lines=batch_lines)
        source = FileEpochSource(path, self.query.schema, start, self.plan, self.epoch_size,
                                 batch_lines, on_error, dead_letter)
        return self._run(source, ticks, ckpt, restore, deltas, snapshots, (), should_stop)

    def run_kafka(self, url: str, deltas: str | None, snapshots: str | None = None, *,
                  stop_at_end: bool = False, batch_records: int = 10_000,
                  should_stop: Callable[[], bool] | None = None,
                  kafka_options: Sequence[str] = (),
                  change: Mapping[str, Any] | None = None) -> bool:
        """Read the update topic(s) at ``url`` (:mod:`dataflow.runners.flink.kafka`: a
        source in the job, read position in Flink state) until the end known at the first
        start (``stop_at_end``) or until ``should_stop()``. ``change``: the cut options
        of a change stream (:class:`connectors.kafka.change_epochs.ChangeReader`; its
        upsert state's size goes to :data:`UPSERT_SUMMARY` in the checkpoint dir)."""
        from dataflow.runners.flink.kafka import KafkaEpochSource, start_position

        self._snapshots_wanted(snapshots)
        ckpt, restore = self._checkpoint_dir()
        start, ticks = start_position(url, self.query.schema, ckpt, stop_at_end,
                                      fresh=restore is None, kafka_options=kafka_options,
                                      change=change)
        self.upsert_summary = ckpt / UPSERT_SUMMARY if change is not None else None
        kafka = KafkaEpochSource(url, self.query.schema, start, self.plan, self.epoch_size,
                                 batch_records, kafka_options, change,
                                 str(self.upsert_summary) if change is not None else None)
        return self._run(kafka, ticks, ckpt, restore, deltas, snapshots, kafka_options,
                         should_stop)

    def _snapshots_wanted(self, snapshots: str | None) -> None:
        """Ship a plan whose closes ask for snapshots only if this run writes them
        (:attr:`~dataflow.distributed.partitions.WorkerPlan.snapshots`)."""
        self.plan = replace(self.plan, snapshots=snapshots is not None)

    def _run(self, reader: Any, ticks: int, ckpt: Path, restore: str | None,
             deltas: str | None, snapshots: str | None, kafka_options: Sequence[str],
             should_stop: Callable[[], bool] | None) -> bool:
        """Ticks -> ``reader`` (a keyed process function keeping its read position in
        Flink state; bundles per partition) -> partitions -> merger -> sinks. Runs until
        the ticks end or ``should_stop()`` (then the job is cancelled; its checkpoints
        are kept, and the same command resumes from the newest). Whether it was
        stopped before its end."""
        env = self._environment(ckpt, restore)
        source = env.from_source(
            NumberSequenceSource(0, ticks - 1), WatermarkStrategy.no_watermarks(), "ticks"
        ).set_parallelism(1)
        tagged = source.key_by(lambda t: 0, key_type=Types.INT()).process(
            reader, output_type=Types.PICKLED_BYTE_ARRAY()
        ).set_parallelism(1)
        stop_marker = ckpt / STOP_MARKER
        self._partitions_and_merger(tagged, deltas, snapshots, kafka_options, stop_marker)
        client = env.execute_async("ivmflow")
        # Wait for the result in a thread (the mini-cluster shuts down with the job, so
        # its status cannot be polled afterwards) while watching for a stop request.
        failure: list[BaseException] = []

        def wait() -> None:
            try:
                client.get_job_execution_result().result()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                failure.append(exc)

        waiter = threading.Thread(target=wait, name="ivmflow-flink-wait", daemon=True)
        waiter.start()
        while waiter.is_alive():
            if should_stop is not None and should_stop():
                # (the sinks stop at the next epoch)
                stop_marker.write_text("stop\n", encoding="utf-8")
                return self._cancel(client, waiter, failure)
            waiter.join(0.05)
        if failure:
            raise job_failure(failure[0])
        return False

    @staticmethod
    def _cancel(client: Any, waiter: threading.Thread, failure: list[BaseException]) -> bool:
        """Cancel the job on a stop request and wait for its tasks to end. The epochs
        in the sinks are whole (each is written at once, by one operator, after every
        partition closed it); the open epoch is dropped, and the same command resumes
        from the newest checkpoint (retained on cancellation), whose epochs the sinks
        skip. Whether the job was stopped before its end (False: it ended first)."""
        try:
            client.cancel().result()
        except Exception:  # noqa: BLE001 - the job ended meanwhile: its result says how
            waiter.join(30)
            if failure and not _cancelled(failure[0]):
                raise job_failure(failure[0]) from None
            return bool(failure)
        waiter.join(60)
        return True

    def _environment(self, ckpt: Path, restore: str | None) -> StreamExecutionEnvironment:
        _interpreter_first_on_path()  # before Configuration() starts the JVM
        extra = extra_flink_conf(os.environ.get("IVMFLOW_FLINK_CONF", ""))  # (bad: no JVM)
        from pyflink.java_gateway import _gateway

        if _gateway is None:  # the JVM starts below: fail here, in one line, if it cannot
            require_java("flink", FLINK_JAVA)
        conf = Configuration()
        conf.set_string("python.execution-mode", "thread")
        # The Python workers run this interpreter, not whatever ``python`` PATH finds
        # (a venv's script run by path would otherwise fail to find libpython and the
        # job restart forever).
        conf.set_string("python.executable", sys.executable)
        conf.set_string("python.client.executable", sys.executable)
        # Fail loud: a failing job is restarted a bounded number of times, then fails
        # with its cause (a restart of the run resumes from the newest checkpoint).
        conf.set_string("restart-strategy.type", "fixed-delay")
        conf.set_string("restart-strategy.fixed-delay.attempts", str(RESTART_ATTEMPTS))
        conf.set_string("restart-strategy.fixed-delay.delay", "500 ms")
        backend = os.environ.get("IVMFLOW_FLINK_STATE_BACKEND", "rocksdb")
        if backend not in ("rocksdb", "hashmap"):
            msg = (f"IVMFLOW_FLINK_STATE_BACKEND={backend!r}: expected rocksdb (default) "
                   f"or hashmap (heap)")
            raise UsageError(msg)
        conf.set_string("state.backend.type", backend)
        conf.set_string("execution.checkpointing.incremental", str(backend == "rocksdb").lower())
        conf.set_string("execution.checkpointing.interval", f"{self.interval}ms")
        # Unaligned: a barrier overtakes the bundles queued under backpressure (aligned,
        # the first checkpoint waited behind them for the whole run).
        conf.set_string("execution.checkpointing.unaligned.enabled", "true")
        conf.set_string("execution.checkpointing.dir", ckpt.resolve().as_uri())
        conf.set_string("execution.checkpointing.externalized-checkpoint-retention",
                        "RETAIN_ON_CANCELLATION")
        for key, value in extra:
            conf.set_string(key, value)  # (last: the operator's word wins)
        if restore is not None:
            conf.set_string("execution.state-recovery.path", restore)
            print(f"ivmflow: flink: resuming from checkpoint {restore}", file=sys.stderr)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        widest = self.layout.partitions if self.stages is None else max(
            st.layout.partitions for st in self.stages.stages)
        env.set_parallelism(max(1, widest))
        return env

    def _partitions_and_merger(self, tagged: Any, deltas: str | None,
                               snapshots: str | None, kafka_options: Sequence[str],
                               stop_marker: Path) -> None:
        """``(partition, TaggedRow)`` stream -> partition engines -> epoch merger/sink.
        A run's only partition writes the sinks itself: its output needs no merging,
        and an epoch's rows then cross no operator boundary. The sinks write no epoch
        once ``stop_marker`` exists."""
        from connectors.kafka.debezium_sink import output_key

        sinks = EpochSinks(deltas, snapshots, tuple(self.query.output_columns), kafka_options,
                           self.query.cq.order_by, output_key(self.query.cq),
                           stop_marker=str(stop_marker))
        partitions = self.layout.partitions
        if self.stages is not None:
            outputs, partitions = self._stages(tagged, sinks)
        else:
            outputs = tagged.key_by(lambda v: v[0], key_type=Types.INT()).process(
                PartitionFunction(self.plan, sinks if partitions == 1 else None),
                output_type=Types.PICKLED_BYTE_ARRAY()
            )
        if partitions == 1:
            outputs.print()  # emits nothing: the job needs a sink
            return
        merger = EpochMerger(partitions, sinks)
        outputs.key_by(lambda o: o.epoch, key_type=Types.INT()).process(
            merger, output_type=Types.PICKLED_BYTE_ARRAY()
        ).set_parallelism(1).print()

    def _stages(self, tagged: Any, sinks: EpochSinks) -> tuple[Any, int]:
        """The reader's ``(slot, rows)`` bundles -> one keyed operator per stage in
        order, each running its own slots and passing every later slot's bundles on, so
        each reads only the one before it (as on Spark) and a channel's bundles for a
        slot take one path, in order, which :class:`~dataflow.distributed.stages.StageTask` relies
        on; the final stage's outputs and its number of partitions."""
        assert self.stages is not None
        stream = tagged
        last = self.stages.stages[-1]
        for stage in self.stages.stages:
            one = stage.final and stage.layout.partitions == 1
            stream = stream.key_by(lambda v: v[0], key_type=Types.INT()).process(
                StageFunction(self.plan, stage.index, sinks if one else None),
                output_type=Types.PICKLED_BYTE_ARRAY())
        return stream, last.layout.partitions
