"""The PyFlink runner (in-process mini-cluster by default).

Job shape (DESIGN section 6): a checkpointed sequence source over the numbered,
epoch-cut records (spooled once per run next to the checkpoint, so a restarted job
reads exactly the same stream) -> partitioner (``flat_map``: tags each update with its
HyperCube partitions, broadcasts epoch closes; parallelism 1 so that every partition
sees its rows in stream order) -> ``key_by(partition)`` -> one keyed process function
hosting the partition's engine and output finalizer -> ``key_by(0)`` -> the epoch
merger, which sums the partitions' changes per (epoch, row) once every partition has
closed the epoch and writes the epoch atomically to the sink. Python operators
exchange pickled objects in thread mode (typed tuples are an order of magnitude slower
through PyFlink).

State in Flink: a partition keeps its engine in memory and writes it to keyed
``ValueState`` at every epoch close; the updates since then go to a ``ListState``, so a
checkpoint taken mid-epoch is complete (restore = last blob + replay of the list). The
merger keeps unfinished epochs in ``ValueState``. Checkpoints are retained; a run
started again with the same ``--checkpoint`` resumes from the newest one, and the sink
skips epochs it already committed: every epoch is written exactly once.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.datastream import (
    KeyedProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

from core.epochs import CLOSE, EpochCursor, NumberedRecord
from core.records import EpochDelta, Record
from dataflow.partitioned import (
    OutputRow,
    PartitionLayout,
    PartitionTask,
    TaggedRow,
    WorkerPlan,
    merge_outputs,
    tag_records,
)

_SPOOLS: dict[str, list[NumberedRecord]] = {}
DONE = "done"


def _spool(path: str) -> list[NumberedRecord]:
    hit = _SPOOLS.get(path)
    if hit is None:
        hit = pickle.loads(Path(path).read_bytes())
        _SPOOLS[path] = hit
    return hit


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


class PartitionFunction(KeyedProcessFunction):
    """Hosts one partition's engine per key."""

    def __init__(self, plan: WorkerPlan) -> None:
        self.plan = plan
        self.tasks: dict[int, PartitionTask] = {}

    def open(self, runtime_context: RuntimeContext) -> None:
        self.blob = runtime_context.get_state(
            ValueStateDescriptor("partition_state", Types.PICKLED_BYTE_ARRAY())
        )
        self.pending = runtime_context.get_list_state(
            ListStateDescriptor("open_epoch_rows", Types.PICKLED_BYTE_ARRAY())
        )

    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        row: TaggedRow = value[1]
        task = self.tasks.get(row.partition)
        if task is None:
            q, layout = self.plan.compiled()
            task = PartitionTask(q, layout, self.blob.value())
            replay = [r for r in (self.pending.get() or [])]
            task.process(replay)  # updates only: they emit nothing
            self.tasks[row.partition] = task
        out: list[OutputRow] = task.process([row])
        if row.kind == CLOSE:
            self.blob.update(task.dump())
            self.pending.clear()
            yield from out
            yield OutputRow(DONE, row.epoch, row.snapshot, ())
        else:
            self.pending.add(row)


class EpochMerger(KeyedProcessFunction):
    """Sums the partitions' changes of an epoch once all partitions closed it, and
    writes the epoch (deltas, and the snapshot it asked for) to the sinks."""

    def __init__(self, partitions: int, deltas: str | None, snapshots: str | None,
                 columns: tuple[str, ...], kafka_options: Sequence[str] = ()) -> None:
        self.partitions = partitions
        self.kafka_options = list(kafka_options)
        self.deltas_path, self.snapshots_path, self.columns = deltas, snapshots, columns

    def open(self, runtime_context: RuntimeContext) -> None:
        self.open_epochs = runtime_context.get_state(
            ValueStateDescriptor("open_epochs", Types.PICKLED_BYTE_ARRAY())
        )
        opts = self.kafka_options
        self.deltas = _open_sink(self.deltas_path, self.columns, "epoch", opts)
        self.snapshots = _open_sink(self.snapshots_path, self.columns, "snapshot", opts)

    def close(self) -> None:
        for sink in (self.deltas, self.snapshots):
            if sink is not None:
                sink.close()

    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        out: OutputRow = value
        epochs: dict[int, dict[str, Any]] = self.open_epochs.value() or {}
        key = out.epoch if out.kind != "snapshot" else -out.epoch
        if out.kind == DONE:
            entry = epochs.setdefault(out.epoch, {"rows": [], "done": 0, "snap": 0})
            entry["done"] += 1
            entry["snap"] = out.mult
            if entry["done"] == self.partitions:
                self._write(out.epoch, entry, epochs.pop(-entry["snap"], None))
                del epochs[out.epoch]
        else:
            epochs.setdefault(key, {"rows": [], "done": 0, "snap": 0})["rows"].append(out)
        self.open_epochs.update(epochs)
        return iter(())

    def _write(self, epoch: int, entry: dict[str, Any], snap: dict[str, Any] | None) -> None:
        merged = merge_outputs(entry["rows"])
        # Both sinks skip the epochs (snapshots) they already hold: a restored job
        # recomputes them.
        if self.deltas is not None:
            self.deltas.write_epoch(EpochDelta(epoch, tuple(merged.get(("delta", epoch), []))))
        k = entry["snap"]
        if k and self.snapshots is not None:
            rows = merge_outputs(snap["rows"]).get(("snapshot", k), []) if snap else []
            self.snapshots.write_snapshot(k, rows)


def _open_sink(target: str | None, columns: tuple[str, ...], kind: str,
               kafka_options: Sequence[str] = ()) -> Any:
    """The merger's sink: a CSV file (resumed) or a Kafka topic (transactional, skipping
    the epochs already in the topic; a stable transactional id per topic, so a
    restarted job fences the crashed one and aborts its open transaction)."""
    if not target:
        return None
    if target.lower().startswith("kafka://"):
        from connectors.kafka import KafkaDeltaSink, default_id, parse_kafka_url

        return KafkaDeltaSink(parse_kafka_url(target, kafka_options), columns, kind=kind,  # type: ignore[arg-type]
                              transactional_id=default_id("flink", kind, target))
    from connectors.base import SkipCommitted
    from connectors.files import DeltaCsvSink, SnapshotCsvSink

    if kind == "epoch":
        dsink = DeltaCsvSink(target, columns, resume=True)
        return SkipCommitted(dsink, epoch=dsink.last_committed_epoch)
    ssink = SnapshotCsvSink(target, columns, resume=True)
    return SkipCommitted(ssink, snapshot=ssink.last_committed_snapshot)


class FlinkJob:
    """Build and run the job on a mini-cluster."""

    def __init__(self, query: Any, *, epoch_size: int | None, parallelism: int,
                 checkpoint: str | None = None, checkpoint_interval_ms: int = 1000) -> None:
        self.query = query
        self.plan = WorkerPlan.of(query, parallelism)
        self.layout = PartitionLayout(query, parallelism)
        self.epoch_size = epoch_size
        self.checkpoint = checkpoint
        self.interval = checkpoint_interval_ms

    def run(self, records: Iterable[Record], deltas: str | None, snapshots: str | None = None,
            stats: Any = None) -> None:
        import tempfile

        ckpt = Path(self.checkpoint or tempfile.mkdtemp(prefix="ivmflow-flink-"))
        ckpt.mkdir(parents=True, exist_ok=True)
        spool = ckpt / "records.pkl"
        restore = latest_checkpoint(str(ckpt))
        if restore is None or not spool.exists():
            numbered = list(EpochCursor().number(records, self.epoch_size, final=True))
            tmp = ckpt / "records.pkl.tmp"
            tmp.write_bytes(pickle.dumps(numbered, protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, spool)
            restore = None
        numbered = _spool(str(spool))
        env = self._environment(ckpt, restore)
        plan, spool_path = self.plan, str(spool)

        def tag(seq: int) -> Iterator[Any]:
            _q, layout = plan.compiled()
            rec = _spool(spool_path)[int(seq)]
            for t in tag_records(layout, [rec]):
                yield (t.partition, t)

        if not numbered:
            return
        source = env.from_source(
            NumberSequenceSource(0, len(numbered) - 1), WatermarkStrategy.no_watermarks(),
            "numbered updates",
        ).set_parallelism(1)
        tagged = source.flat_map(tag, output_type=Types.PICKLED_BYTE_ARRAY()).set_parallelism(1)
        self._partitions_and_merger(tagged, deltas, snapshots)
        env.execute("ivmflow")
        if stats is not None:
            stats.updates = sum(1 for n in numbered if n.kind != CLOSE)
            stats.epochs = sum(1 for n in numbered if n.kind == CLOSE)

    def _environment(self, ckpt: Path, restore: str | None) -> StreamExecutionEnvironment:
        conf = Configuration()
        conf.set_string("python.execution-mode", "thread")
        conf.set_string("execution.checkpointing.interval", f"{self.interval}ms")
        conf.set_string("execution.checkpointing.dir", ckpt.resolve().as_uri())
        conf.set_string("execution.checkpointing.externalized-checkpoint-retention",
                        "RETAIN_ON_CANCELLATION")
        if restore is not None:
            conf.set_string("execution.state-recovery.path", restore)
            print(f"ivmflow: flink: resuming from checkpoint {restore}", file=sys.stderr)
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        env.set_parallelism(max(1, self.layout.partitions))
        return env

    def _partitions_and_merger(self, tagged: Any, deltas: str | None,
                               snapshots: str | None, kafka_options: Sequence[str] = ()
                               ) -> None:
        """``(partition, TaggedRow)`` stream -> partition engines -> epoch merger/sink."""
        outputs = tagged.key_by(lambda v: v[0], key_type=Types.INT()).process(
            PartitionFunction(self.plan), output_type=Types.PICKLED_BYTE_ARRAY()
        )
        merger = EpochMerger(self.layout.partitions, deltas, snapshots,
                             tuple(self.query.output_columns), kafka_options)
        outputs.key_by(lambda o: 0, key_type=Types.INT()).process(
            merger, output_type=Types.PICKLED_BYTE_ARRAY()
        ).set_parallelism(1).print()

    def run_kafka(self, url: str, deltas: str | None, snapshots: str | None = None, *,
                  stop_at_end: bool = False, batch_records: int = 10_000,
                  should_stop: Callable[[], bool] | None = None,
                  kafka_options: Sequence[str] = ()) -> None:
        """Read the update topic(s) at ``url`` (:mod:`dataflow.runners.flink.kafka`: a source in
        the job, read position in Flink state) until the end known at the first start
        (``stop_at_end``) or until ``should_stop()`` (then the job is cancelled; its
        checkpoints are kept, and the same command resumes from the newest)."""
        import tempfile

        from dataflow.runners.flink.kafka import KafkaEpochSource, start_position

        ckpt = Path(self.checkpoint or tempfile.mkdtemp(prefix="ivmflow-flink-"))
        ckpt.mkdir(parents=True, exist_ok=True)
        restore = latest_checkpoint(str(ckpt))
        start, ticks = start_position(url, self.query.schema, ckpt, stop_at_end,
                                      fresh=restore is None, kafka_options=kafka_options)
        env = self._environment(ckpt, restore)
        source = env.from_source(
            NumberSequenceSource(0, ticks - 1), WatermarkStrategy.no_watermarks(), "ticks"
        ).set_parallelism(1)
        kafka = KafkaEpochSource(url, self.query.schema, start, self.plan, self.epoch_size,
                                 batch_records, kafka_options)
        tagged = source.key_by(lambda t: 0, key_type=Types.INT()).process(
            kafka, output_type=Types.PICKLED_BYTE_ARRAY()
        ).set_parallelism(1)
        self._partitions_and_merger(tagged, deltas, snapshots, kafka_options)
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
                client.cancel().result()  # checkpoints are retained on cancellation
                waiter.join(30)
                return
            waiter.join(0.3)
        if failure:
            raise failure[0]
