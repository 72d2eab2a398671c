"""The Spark micro-batch runner (Structured Streaming, local mode by default).

Job shape: the update source (numbers records and cuts epochs, offsets in the
checkpoint) -> ``mapInPandas`` tagging each update with its partitions (HyperCube
shares; epoch closes broadcast) -> ``groupBy(partition).transformWithStateInPandas``:
per partition the same engine and output finalizer as the local runner process the
sub-batch in stream order -> ``foreachBatch``: one task sums the changes per (epoch,
row) over partitions and writes each closed epoch atomically, skipping epochs the sink
already committed (a replayed batch after a crash): Kafka topics from that executor
task, files on the driver (:mod:`dataflow.runners.spark.output`).

State (docs/runners.md): per entry, one MapState per named map of the State protocol
under the partition key, on the RocksDB state store with changelog checkpointing; the
engine works on a cache kept by the Python worker between batches, and each batch
writes back only the entries it changed (:mod:`dataflow.runners.spark.state`). No
state reaches the driver, and no output row either when the sinks are Kafka topics.

Stops (SIGINT, SIGTERM): an epoch may span micro-batches (its open changes travel with
the partition's state) and is written only once closed, so a batch boundary never cuts
one. A stop waits for the batch in progress to be written, then stops the query; the
next one, if Spark started it, fails before writing and is run again by the restart.
Fault points (:mod:`core.faults`): ``read`` in the source's reader (one Python process
on the driver plans every batch), ``epoch`` on the driver as it learns of each epoch.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from core.epochs import CLOSE, NumberedRecord
from core.errors import JobError, JobStartError, SparkJobError
from core.faults import fault_point
from core.records import EpochDelta, Update
from dataflow.distributed.partitions import (
    PartitionLayout,
    PartitionTask,
    WorkerPlan,
    stamp_checkpoint_dir,
)
from dataflow.distributed.stages import StagePlan, needs_stages, plan_tags
from dataflow.runners.jvm import (
    append,
    find_java,
    needs,
    new_log,
    output_to,
    python_error,
    require_java,
)
from dataflow.runners.spark.output import (
    OUTPUT_COLUMNS,
    WRITTEN_SCHEMA,
    BatchWriter,
    KafkaTopicSink,
    merge_on_driver,
    write_bundles,
    written_by_executor,
)
from dataflow.runners.spark.source import SOURCE_NAME, TAGGED_SCHEMA, UpdateCsvSource
from dataflow.runners.spark.stages import staged_job, tagged_frame
from dataflow.runners.spark.state import STATE_STORE_CONF, PartitionStore
from dataflow.runners.spark.trace import TRACE as _TRACE
from dataflow.runners.spark.trace import trace as _trace

OUTPUT_SCHEMA = WRITTEN_SCHEMA
"""One row per (kind, epoch) and partition: ``n`` changes, and ``rows`` the pickled list
of that partition's consolidated ``(mult, row)`` changes, or null when the partition
wrote them to Kafka itself (the only partition of a run with a Kafka sink)."""

def _restore_open_epoch(task: PartitionTask, extra: bytes | None) -> None:
    task.restore_checkpoint(pickle.loads(extra) if extra else None)


class PartitionProcessor(StatefulProcessor):
    """Hosts one partition's engine per grouping key (the partition number), its state
    per entry in MapStates (:mod:`dataflow.runners.spark.state`): the batch's rows run
    through the cached engine, and only the entries they changed are written back."""

    def __init__(self, plan: WorkerPlan, kafka: Mapping[str, KafkaTopicSink]) -> None:
        self.plan = plan
        self.kafka = dict(kafka)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.store = PartitionStore(handle, self.plan.map_names(), self.plan.layout_stamp())

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        q, layout = self.plan.compiled()
        part = int(key[0])
        clock = time.perf_counter
        t0 = clock()
        hit = self.store.cache(part, self.plan,
                               lambda state: PartitionTask(
                                   q, layout, state=state,
                                   trust_deletes=self.plan.trust_deletes),
                               _restore_open_epoch)
        task: PartitionTask = hit.payload
        t1 = clock()
        tagged: list[tuple[Any, ...]] = []
        loads = pickle.loads
        for pdf in rows:
            # Whole columns to Python lists (plain ints), zipped into plain row tuples
            # in TaggedRow's field order: no per-row pandas or dataclass objects.
            cols = [pdf[c].tolist() for c in ("seq", "epoch", "kind", "atom", "tup", "dm",
                                              "snapshot")]
            tagged.extend((part, seq, epoch, kind, atom, None if tup is None else loads(tup),
                           dm, snap) for seq, epoch, kind, atom, tup, dm, snap in zip(*cols))
        t2 = clock()
        out = task.process_bundles(tagged)
        t3 = clock()
        # The open epoch's accumulated delta lives outside the maps; an epoch may span
        # batches, so it travels with the stamp (O(the open epoch's changes)).
        acc = task.checkpoint()
        self.store.commit(part, self.plan, hit,
                          pickle.dumps(acc, pickle.HIGHEST_PROTOCOL) if acc else None)
        t4 = clock()
        if _TRACE:
            end = time.time()
            _trace(task_start=end - (t4 - t0), task_end=end, partition=part,
                   rows=len(tagged), out=sum(map(len, out.values())),
                   cache_s=t1 - t0, read_s=t2 - t1, engine_s=t3 - t2, write_back_s=t4 - t3,
                   written=self.store.written,
                   rebuilds=self.store.rebuilds, catchups=self.store.catchups,
                   **self.store.times)
        # One output row per (kind, epoch) and partition, its rows pickled together: a
        # batch's output crosses Arrow, the shuffle-free collect and the driver as a few
        # blobs, not as one Spark row per delta row (a 4-hop join emits ~10 per update).
        # With self.kafka (only for the run's only partition, whose bundles are the
        # merged output), the Kafka kinds are written from here, without another Python
        # hop (dataflow.runners.spark.output); the other kinds go out pickled.
        yield pd.DataFrame(write_bundles(out, self.kafka),
                           columns=OUTPUT_COLUMNS)

    def close(self) -> None:
        pass



def spark_session(master: str | None = None, partitions: int = 2,
                  log: str | None = None) -> SparkSession:
    """A SparkSession bound to loopback, quiet, sized for ``partitions``. A JVM started
    here writes its console output (and its Python workers theirs) to ``log`` when
    given (:func:`~dataflow.runners.jvm.output_to`); Java is checked first (no Java, or
    older than Spark needs: :class:`~core.errors.JobStartError`)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    master = master or os.environ.get("IVMFLOW_SPARK_MASTER") or None
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[2]"  # not under spark-submit (which sets the cluster's master)
    builder = SparkSession.builder
    if master is not None:
        builder = builder.master(master)
    builder = (
        builder.appName("ivmflow")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(max(1, partitions)))
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.python.worker.reuse", "true")
    )
    for name, value in STATE_STORE_CONF.items():
        builder = builder.config(name, value)
    from pyspark import SparkContext

    if SparkContext._active_spark_context is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        require_java("spark", SPARK_JAVA)  # a JVM is started here (not by spark-submit)
    interrupt = signal.getsignal(signal.SIGINT)
    try:
        with output_to(log):
            spark = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - the JVM did not come up: say why
        java = find_java()
        trace = _trace_text(exc)
        cause = _jvm_error(log) or (str(exc).strip().splitlines() or [repr(exc)])[0]
        msg = (f"the spark job could not start: {cause}; it needs Java "
               f"{needs(SPARK_JAVA)}, {java.describe()}")
        append(log, trace)
        raise JobStartError(msg, trace, log) from None
    spark.sparkContext.setLogLevel("ERROR")
    _keep_sigint_handler(interrupt)
    return spark


def _keep_sigint_handler(handler: Any) -> None:
    """A new SparkContext takes SIGINT over (it cancels every job and raises
    KeyboardInterrupt): give it back to the handler that was there, when that is a stop
    handler (the command line's, :func:`dataflow.runners.run.stop_on_signals`, which stops the
    run after the micro-batch in progress), not Python's default."""
    if (callable(handler) and handler is not signal.default_int_handler
            and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not handler):
        signal.signal(signal.SIGINT, handler)


SPARK_JAVA = (17, 21)
"""The Java versions Spark 4.0 runs on."""


def _jvm_error(log: str | None) -> str | None:
    """The first error line a JVM that died while starting wrote to ``log``."""
    if log is None:
        return None
    with contextlib.suppress(OSError), open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "Error" in line or "Exception" in line:
                return line.strip()
    return None


def _trace_text(exc: BaseException) -> str:
    """The whole text of a failure (PySpark's message carries the JVM trace)."""
    import traceback

    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def job_failure(exc: Exception, log: str | None) -> Exception:
    """The user's error for a failed query: a bad record found inside Spark as ivmflow's
    own :class:`~core.errors.InputError`; anything else as a
    :class:`~core.errors.SparkJobError` naming the worker's Python error taken out of
    Spark's trace (else the innermost Java cause), the full trace appended to ``log``."""
    unwrapped = _unwrap(exc)
    if unwrapped is not exc:
        return unwrapped
    trace = _trace_text(exc)
    jvm = str(getattr(exc, "_stackTrace", "") or "")  # the JVM's trace with its causes
    if jvm and jvm not in trace:
        trace += "\nJVM stack trace:\n" + jvm
    logged = ""
    if log is not None:
        with contextlib.suppress(OSError):
            logged = Path(log).read_text(encoding="utf-8", errors="replace")
    append(log, trace)
    text = f"{exc}\n{jvm}"
    cause = python_error(text) or python_error(logged)  # a worker's, not this driver's
    if cause is None:
        causes = [line.split("Caused by: ", 1)[1].strip()
                  for line in text.splitlines() if line.startswith("Caused by: ")]
        cause = (causes or [text.strip().splitlines()[0] if text.strip() else repr(exc)])[-1]
    if cause.split(":", 1)[0].rsplit(".", 1)[-1] in ("ImportError", "ModuleNotFoundError"):
        cause += " (install ivmflow[spark])"
    return SparkJobError(f"the spark job failed: {cause}", trace, log)


def _kafka_sinks(outputs: Any) -> dict[str, KafkaTopicSink]:
    """The run's sinks that are Kafka topics, by output kind, for the executor that
    writes them. The driver's own producers are closed: each batch's writer opens its
    own with the same transactional id (which would fence the driver's anyway)."""
    try:
        from connectors.kafka import KafkaDeltaSink
    except ImportError:  # pragma: no cover - kafka-python is a core dependency
        return {}
    found: dict[str, KafkaTopicSink] = {}
    for kind, sink in (("delta", outputs.deltas), ("snapshot", outputs.snapshots)):
        if isinstance(sink, KafkaDeltaSink):
            found[kind] = KafkaTopicSink.of(sink)
            sink.close()
    return found


def _remove(log: str | None) -> None:
    if log is not None:
        with contextlib.suppress(OSError):
            os.unlink(log)


def _unwrap(exc: Exception) -> Exception:
    """A bad record found inside Spark surfaces as a StreamingQueryException holding a
    Python traceback; give the user ivmflow's own message instead."""
    from core.errors import InputError

    text = str(exc)
    marker = "InputError: "
    if marker in text:
        line = text.split(marker, 1)[1].splitlines()[0]
        err = InputError("spark", "", "", "")
        err.args = (line,)
        return err
    return exc


STOP_COMMIT_WAIT_S = 10.0
"""How long a stop waits for Spark to commit the micro-batch whose sink ran."""


class _StopRequested(Exception):  # noqa: N818 - not an error: a stop on request
    """Raised by the sink of a micro-batch that starts after a stop request: the batch
    fails before writing anything, and Spark does not commit it."""


def _epochs_closed(progress: Sequence[Mapping[str, Any]]) -> int:
    """Epochs closed by the last micro-batch Spark committed, from its source's end
    offset (the epoch cursor of :mod:`dataflow.runners.spark.source` or, under
    ``cursor``, of the Kafka source): 0 if none is known."""
    import json

    for p in reversed(progress):
        with contextlib.suppress(TypeError, ValueError, AttributeError, KeyError):
            for src in p.get("sources") or []:
                end = src.get("endOffset")
                offset = json.loads(end) if isinstance(end, str) else end
                cursor = offset.get("cursor", offset)
                return max(0, int(cursor["epoch"]) - 1)
    return 0


class SparkJob:
    """One streaming query: build with the run's settings, then :meth:`run`."""

    def __init__(
        self,
        query: Any,
        updates: str,
        *,
        epoch_size: int | None,
        parallelism: int,
        checkpoint: str | None,
        batch_lines: int = 10_000,
        bounded: bool = True,
        master: str | None = None,
        kafka_options: Sequence[str] = (),
        verbose: bool = False,
        change: Mapping[str, Any] | None = None,
        trust_deletes: bool = False,
    ) -> None:
        self.query = query
        self.plan = WorkerPlan.of(query, parallelism, trust_deletes)
        self.layout = PartitionLayout(query, parallelism)
        self.staged = needs_stages(query)
        """A DAG of views or a top-k: one chained operator per stage
        (:mod:`dataflow.runners.spark.stages`)."""
        self.partitions = (max(s.layout.partitions for s in StagePlan.of(query, parallelism).stages)
                           if self.staged else self.layout.partitions)
        self.updates = updates
        self.epoch_size = epoch_size
        self.batch_lines = batch_lines
        self.bounded = bounded
        self.checkpoint = checkpoint or tempfile.mkdtemp(prefix="ivmflow-spark-")
        self.master = master
        self.kafka_options = tuple(kafka_options)
        self.change = dict(change) if change is not None else None
        """A change stream's cut options (:class:`connectors.kafka.change_epochs.
        ChangeReader`); None for ivmflow's own records."""
        self.verbose = verbose
        """Leave the JVM's output on this process's stdout and stderr (else it goes to
        a log file, kept and named in the error when the job fails)."""
        self.batches = 0
        self.progress: list[dict[str, Any]] = []
        """Spark's progress reports of the run's micro-batches (durations, rows)."""
        self._query: Any = None
        self._kafka_in_partition: dict[str, KafkaTopicSink] = {}
        self._sink_lock = threading.Lock()
        """Held while a micro-batch runs its sink (:meth:`_stop_after_batch`)."""
        self._stopping = False
        self._last_batch: int | None = None
        """The last micro-batch whose sink ran to its end."""
        self._last_epoch_seen = 0

    def stop(self) -> None:
        """Stop a running (unbounded) job after its current micro-batch."""
        if self._query is not None:
            self._stop_after_batch(self._query)

    def stream(self, spark: SparkSession) -> DataFrame:
        if self.updates.lower().startswith("kafka://"):
            from dataflow.runners.spark.kafka import kafka_update_stream

            source = kafka_update_stream(
                spark, self.updates, self.query.schema, epoch_size=self.epoch_size,
                batch_records=self.batch_lines, stop_at_end=self.bounded,
                kafka_options=self.kafka_options, change=self.change,
                state_dir=str(self.upsert_dir) if self.change is not None else None,
            )
            return self._job(source, tagged=False)
        return self._job(self._file_stream(spark), tagged=True)

    @property
    def upsert_dir(self) -> Path:
        """Where a change stream's upsert state goes: next to Spark's offset log in the
        checkpoint (:class:`connectors.kafka.upsert_store.FileUpsertStore`)."""
        return Path(self.checkpoint.removeprefix("file://")) / "ivmflow-upsert"

    def _file_stream(self, spark: SparkSession) -> DataFrame:
        spark.dataSource.register(UpdateCsvSource)
        return (
            spark.readStream.format(SOURCE_NAME)
            .option("path", self.updates)
            .option("schema", pickle.dumps(self.query.schema).hex())
            .option("epoch", str(self.epoch_size or 0))
            .option("batch_lines", str(self.batch_lines))
            .option("bounded", "true" if self.bounded else "false")
            .option("plan", pickle.dumps(self.plan).hex())
            .load()
        )

    def _job(self, source: DataFrame, tagged: bool) -> DataFrame:
        """Tag the source's rows with their partitions (unless the source did), then
        run each partition's engine in ``transformWithStateInPandas``."""
        plan = self.plan
        if tagged:
            return self._partitions(source)

        def tag(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            for pdf in batches:
                numbered = []
                for r in pdf.itertuples(index=False):
                    if r.kind == CLOSE:
                        numbered.append(
                            NumberedRecord(int(r.seq), int(r.epoch), CLOSE, None, int(r.snapshot))
                        )
                    else:
                        row, src = pickle.loads(r.payload)
                        u = Update(r.op, r.relation, row, int(r.mult), src)
                        numbered.append(NumberedRecord(int(r.seq), int(r.epoch), "u", u, 0))
                yield tagged_frame(plan_tags(plan, numbered))

        tag_fn: Any = tag  # pyspark's stubs want pandas' own iterable types
        return self._partitions(source.mapInPandas(tag_fn, schema=TAGGED_SCHEMA))

    def _partitions(self, tagged: DataFrame) -> DataFrame:
        if self.staged:
            return staged_job(tagged, self.plan, OUTPUT_SCHEMA)
        return tagged.groupBy("partition").transformWithStateInPandas(
            PartitionProcessor(self.plan, self._kafka_in_partition), OUTPUT_SCHEMA,
            "Append", "None"
        )

    def _stamp_checkpoint(self) -> None:
        """Fail before the query starts if the checkpoint's state was written under
        another plan (:func:`stamp_checkpoint_dir`). Only a local checkpoint directory
        is checked here; every partition checks its own stamp as well."""
        local = self.checkpoint.removeprefix("file://")
        if "://" in local:
            return
        Path(local).mkdir(parents=True, exist_ok=True)
        offsets = Path(local) / "offsets"
        resuming = offsets.is_dir() and any(offsets.iterdir())
        stamp_checkpoint_dir(local, self.plan.layout_stamp(), resuming,
                             where=f"spark checkpoint {local}")

    def run(self, outputs: Any, stats: Any = None,
            should_stop: Callable[[], bool] | None = None) -> None:
        """Run until the bounded source is consumed (or forever for a growing
        directory or a Kafka topic, until stopped: :meth:`stop`, or ``should_stop()``
        turning true, e.g. on SIGTERM), writing each closed epoch once. A stop ends the
        run after the micro-batch in progress (:meth:`_stop_after_batch`): the sinks
        hold whole epochs, the checkpoint the state after the last committed batch, and
        ``stats.stopped`` says whether a bounded source was stopped before its end."""
        # (closes ask the partitions for snapshots only if this run writes them)
        self.plan = replace(self.plan, snapshots=getattr(outputs, "snapshots", None) is not None)
        self._stamp_checkpoint()
        log = None if self.verbose else new_log("spark")
        try:
            spark = spark_session(self.master, self.partitions, log)
            self._run(spark, outputs, stats, should_stop, log)
        except JobError as exc:
            if log is not None and os.path.getsize(log) == 0:
                os.unlink(log)
                exc.log = None
            raise
        except BaseException:
            _remove(log)
            raise
        _remove(log)  # nothing went wrong: no log to keep

    def _run(self, spark: SparkSession, outputs: Any, stats: Any,
             should_stop: Callable[[], bool] | None, log: str | None) -> None:

        kafka_sinks = _kafka_sinks(outputs)
        partitions = self.layout.partitions
        # A single partition's output needs no merging: it writes Kafka itself.
        self._kafka_in_partition = kafka_sinks if partitions == 1 and not self.staged else {}
        writer: Any = BatchWriter(kafka_sinks)  # pyspark's stubs want pandas' own types

        def sink_batch(df: DataFrame, batch_id: int) -> None:
            # A stop waits for the batch in this function (it runs the batch: collect)
            # and then stops the query; a batch that comes here after it fails before
            # writing anything, so Spark never commits it and a restart runs it again.
            with self._sink_lock:
                if self._stopping:
                    raise _StopRequested(batch_id)
                write_batch(df)
                self._last_batch = batch_id

        def write_batch(df: DataFrame) -> None:
            # With a Kafka sink, one task merges the partitions' bundles per epoch and
            # writes the topic from the executor (dataflow.runners.spark.output): only
            # counts, and the rows of file sinks, come back here. The only partition of
            # a run writes them itself. Without a Kafka sink the bundles come here (no
            # extra stage) and are merged and written by the driver.
            t0 = time.time()
            if self._kafka_in_partition:
                written = written_by_executor(df.collect())
            elif kafka_sinks:
                written = written_by_executor(
                    df.repartition(1).mapInPandas(writer, WRITTEN_SCHEMA).collect())
            else:
                written = merge_on_driver(df.collect())
            t1 = time.time()
            for kind, n, count, rows in written:
                if kind == "delta":
                    self._closed_epochs(n)
                    if rows is not None:
                        outputs.deltas.write_epoch(EpochDelta(n, tuple(rows)))
                    if stats is not None:
                        stats.delta_rows += count
                        stats.epochs = max(stats.epochs, n)
                elif outputs.snapshots is not None and rows is not None:
                    outputs.snapshots.write_snapshot(n, rows)
            self.batches += 1
            _trace(sink_start=t0, collected=t1, sink_end=time.time(), epochs=len(written))

        if should_stop is not None and should_stop():  # (while the JVM came up)
            if stats is not None:
                stats.stopped = self.bounded
            return
        query = (
            self.stream(spark)
            .writeStream.foreachBatch(sink_batch)
            .option("checkpointLocation", self.checkpoint)
            .trigger(processingTime="0 seconds")
            .start()
        )
        self._query = query
        stopped = False
        try:
            stopped = self._await(query, should_stop)
        except Exception as exc:  # noqa: BLE001 - re-raised with the user's message
            if not self._stopping:
                raise job_failure(exc, log) from None
            stopped = True  # (the batch after the stop failed on purpose: _StopRequested)
        finally:
            self.progress = [dict(p) for p in (query.recentProgress or [])]
            if stats is not None:
                stats.updates = sum(int(p.get("numInputRows", 0)) for p in self.progress)
            query.stop()
        if stats is not None:
            stats.epochs = max(stats.epochs, _epochs_closed(self.progress))
            if stopped and self.bounded:
                stats.stopped = True  # (before the end of a bounded source)

    def _await(self, query: Any, should_stop: Callable[[], bool] | None) -> bool:
        """Wait until the bounded source is read to its end, or the unbounded query
        ends, or ``should_stop()`` turns true: then stop after the micro-batch in
        progress (:meth:`_stop_after_batch`). Whether it was stopped on request."""
        if should_stop is None:
            if self.bounded:
                query.processAllAvailable()
            else:
                query.awaitTermination()
            return False
        if not self.bounded:
            while not query.awaitTermination(1):
                if should_stop():
                    self._stop_after_batch(query)
                    return True
            return False
        # processAllAvailable blocks in the JVM: in a thread, so that this (main)
        # thread runs the signal handlers and watches for a stop request.
        failure: list[BaseException] = []

        def drain() -> None:
            try:
                query.processAllAvailable()
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                failure.append(exc)

        waiter = threading.Thread(target=drain, name="ivmflow-spark-drain", daemon=True)
        waiter.start()
        while waiter.is_alive():
            if should_stop():
                self._stop_after_batch(query)
                waiter.join(60)
                return True
            waiter.join(0.2)
        if failure:
            raise failure[0]
        return False

    def _stop_after_batch(self, query: Any) -> None:
        """Stop the query at a micro-batch boundary: wait for the batch being written
        (the sink holds the lock while it runs and writes the batch: its closed epochs
        are whole), then stop. Epochs are written only when closed, so the sinks hold
        whole epochs; the open epoch's updates are in the checkpoint's state (a batch
        Spark committed) or not read yet (one it did not: a restart runs it again).
        Spark commits a batch just after its sink: that is waited for too (a few
        seconds at most), so that the restart does not run it again."""
        with self._sink_lock:
            self._stopping = True
            written = self._last_batch
        deadline = time.monotonic() + STOP_COMMIT_WAIT_S
        while written is not None and time.monotonic() < deadline and query.isActive:
            last = query.lastProgress
            if last is not None and int(last["batchId"]) >= written:
                break
            time.sleep(0.05)
        query.stop()

    def _closed_epochs(self, n: int) -> None:
        """The driver learns of epoch ``n`` (one with rows; the ones before it without
        rows closed too): the ``epoch`` fault point once per epoch closed since the last
        one seen (:mod:`core.faults`)."""
        first = self._last_epoch_seen + 1 if self._last_epoch_seen else n
        for _ in range(first, n + 1):
            fault_point("epoch")
        self._last_epoch_seen = max(self._last_epoch_seen, n)
