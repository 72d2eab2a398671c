"""The PyFlink runner (in-process mini-cluster by default).

Job shape (DESIGN section 6): source (numbered, epoch-cut records) -> partitioner
(``flat_map``: tags each update with its HyperCube partitions, broadcasts epoch closes;
parallelism 1 so that every partition sees its rows in stream order) ->
``key_by(partition)`` -> one keyed process function hosting the engine and output
finalizer of that partition -> the client, which sums the final changes per
(epoch, row) over partitions and writes each epoch atomically. Python operators
exchange pickled objects in thread mode (typed tuples are an order of magnitude slower
through PyFlink).

State: each partition's engine lives in the operator; its whole state is written to
Flink keyed ``ValueState`` at every epoch close, so Flink checkpoints hold it.
Restoring a killed job from a retained checkpoint is not wired up yet.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from typing import Any

from pyflink.common import Configuration, Types
from pyflink.datastream import (
    KeyedProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from pyflink.datastream.state import ValueStateDescriptor

from dataflow.partitioned import (
    CLOSE,
    EpochCursor,
    NumberedRecord,
    OutputRow,
    PartitionLayout,
    PartitionTask,
    TaggedRow,
    merge_outputs,
    tag_records,
)
from dataflow.records import EpochDelta, Record

_COMPILED: dict[tuple[str, tuple[float, ...], int], tuple[Any, PartitionLayout]] = {}


def _compiled(sql: str, rates: tuple[float, ...], parallelism: int) -> tuple[Any, PartitionLayout]:
    key = (sql, rates, parallelism)
    hit = _COMPILED.get(key)
    if hit is None:
        from dataflow.api import compile_query

        q = compile_query(sql, rates=list(rates))
        hit = (q, PartitionLayout(q, parallelism))
        _COMPILED[key] = hit
    return hit


class PartitionFunction(KeyedProcessFunction):
    """Hosts one partition's engine per key; state to ValueState at epoch closes."""

    def __init__(self, sql: str, rates: tuple[float, ...], parallelism: int) -> None:
        self.sql, self.rates, self.parallelism = sql, rates, parallelism
        self.tasks: dict[int, PartitionTask] = {}

    def open(self, runtime_context: RuntimeContext) -> None:
        self.blob = runtime_context.get_state(
            ValueStateDescriptor("partition_state", Types.PICKLED_BYTE_ARRAY())
        )

    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        row: TaggedRow = value[1]
        task = self.tasks.get(row.partition)
        if task is None:
            q, layout = _compiled(self.sql, self.rates, self.parallelism)
            task = PartitionTask(q, layout, self.blob.value())
            self.tasks[row.partition] = task
        out: list[OutputRow] = task.process([row])
        if row.kind == CLOSE:
            self.blob.update(task.dump())
        yield from out


class FlinkJob:
    """Build and run the job on a mini-cluster (or a remote cluster via the
    ``IVMFLOW_FLINK_*`` configuration of PyFlink)."""

    def __init__(self, query: Any, *, epoch_size: int | None, parallelism: int) -> None:
        self.query = query
        self.sql = query.cq.sql
        self.rates = tuple(query.plan.rates)
        self.parallelism = parallelism
        self.layout = PartitionLayout(query, parallelism)
        self.epoch_size = epoch_size

    def run(self, records: Iterable[Record], outputs: Any, stats: Any = None) -> None:
        conf = Configuration()
        conf.set_string("python.execution-mode", "thread")
        env = StreamExecutionEnvironment.get_execution_environment(conf)
        env.set_parallelism(max(1, self.layout.partitions))
        numbered = list(EpochCursor().number(records, self.epoch_size, final=True))
        payload = [(n.seq, pickle.dumps(n)) for n in numbered]
        sql, rates, par = self.sql, self.rates, self.parallelism

        def tag(item: Any) -> Iterator[Any]:
            _q, layout = _compiled(sql, rates, par)
            rec: NumberedRecord = pickle.loads(bytes(item[1]))
            for t in tag_records(layout, [rec]):
                yield (t.partition, t)

        source = env.from_collection(
            payload, type_info=Types.TUPLE([Types.LONG(), Types.PRIMITIVE_ARRAY(Types.BYTE())])
        ).set_parallelism(1)
        tagged = source.flat_map(tag, output_type=Types.PICKLED_BYTE_ARRAY()).set_parallelism(1)
        out = tagged.key_by(lambda v: v[0], key_type=Types.INT()).process(
            PartitionFunction(sql, rates, par), output_type=Types.PICKLED_BYTE_ARRAY()
        )
        merged = merge_outputs(out.execute_and_collect())
        written = int(getattr(outputs, "resume_epoch", 0))
        for (kind, n), rows in sorted(merged.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            if kind == "delta":
                if n > written:
                    outputs.deltas.write_epoch(EpochDelta(n, tuple(rows)))
                if stats is not None:
                    stats.delta_rows += len(rows)
            elif outputs.snapshots is not None:
                outputs.snapshots.write_snapshot(n, rows)
        if stats is not None:
            stats.updates = sum(1 for n in numbered if n.kind != CLOSE)
            stats.epochs = sum(1 for n in numbered if n.kind == CLOSE)
