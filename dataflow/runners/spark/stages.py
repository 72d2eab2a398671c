"""A query as keyed stages on Spark (:mod:`dataflow.distributed.stages`): a DAG of views, top-k.

Job shape: the source tags base updates with the slots of every stage reading their
table (closes to every slot) -> one ``groupBy(partition).transformWithStateInPandas``
per stage, in closing order, chained: a stage's operator runs the :class:`StageTask`
of each of its own slots and passes every other slot's rows through unchanged, so each
operator reads only the one before it (a DataFrame read twice would run its stateful
operator twice) and all of a micro-batch flows through every stage in that batch. A
stage's output rows are its readers' input rows, tagged with their slots (the shuffle
of the next ``groupBy``); the last stage's are the output bundles the driver merges as
for a one-stage query (:mod:`dataflow.runners.spark.job`).

A slot's state is per entry in its MapStates exactly as a one-stage partition's
(:mod:`dataflow.runners.spark.state`); what the slot keeps outside them (the open
epoch's changes, the channels' closes) rides in the stamp: O(the open epoch).

This module imports pyspark; ``operators/`` and ``plans/`` never do.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from core.epochs import CLOSE
from dataflow.distributed.partitions import WorkerPlan
from dataflow.distributed.stages import StageTask, stage_plan
from dataflow.runners.spark.output import OUTPUT_COLUMNS, write_bundles
from dataflow.runners.spark.source import TAGGED_SCHEMA
from dataflow.runners.spark.state import PartitionStore
from dataflow.runners.spark.trace import TRACE as _TRACE
from dataflow.runners.spark.trace import trace as _trace

TAGGED_COLUMNS = ["partition", "seq", "epoch", "kind", "atom", "tup", "dm", "snapshot"]


def tagged_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """Plain tagged row tuples as a :data:`TAGGED_SCHEMA` frame (tuples pickled)."""
    dumps = pickle.dumps
    return pd.DataFrame(
        [(p, seq, e, k, a, None if t is None else dumps(t), dm, s)
         for p, seq, e, k, a, t, dm, s in rows], columns=TAGGED_COLUMNS)


class StageProcessor(StatefulProcessor):
    """The operator of stage ``index``: its own slots' tasks, other slots passed on."""

    def __init__(self, plan: WorkerPlan, index: int) -> None:
        self.plan = plan
        self.index = index

    def init(self, handle: StatefulProcessorHandle) -> None:
        stages = stage_plan(self.plan)
        self.store = PartitionStore(handle, stages.map_names(self.index),
                                    self.plan.layout_stamp())

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        stages = stage_plan(self.plan)
        slot = int(key[0])
        stage = stages.stages[self.index]
        if slot not in stage.slots:
            for pdf in rows:  # a later stage's rows: on to it
                yield pdf[TAGGED_COLUMNS]
            return
        clock = time.perf_counter
        t0 = clock()
        hit = self.store.cache(slot, self.plan,
                               lambda state: StageTask(stages, slot, state),
                               lambda task, extra: task.restore_checkpoint(extra))
        task: StageTask = hit.payload
        t1 = clock()
        loads = pickle.loads
        tagged: list[tuple[Any, ...]] = []
        for pdf in rows:
            cols = [pdf[c].tolist() for c in TAGGED_COLUMNS[1:]]
            tagged.extend((slot, seq, epoch, kind, atom, None if tup is None else loads(tup),
                           dm, snap) for seq, epoch, kind, atom, tup, dm, snap in zip(*cols))
        # A shuffle keeps no channel's order: epochs in order, an epoch's updates (in
        # stream order) before its closes - what each channel sent, in its order.
        tagged.sort(key=lambda r: (r[2], r[3] == CLOSE, r[1]))
        t2 = clock()
        downstream, final = task.feed(tagged)
        t3 = clock()
        self.store.commit(slot, self.plan, hit, task.checkpoint())
        t4 = clock()
        if _TRACE:
            end = time.time()
            _trace(task_start=end - (t4 - t0), task_end=end, partition=slot,
                   stage=self.index, rows=len(tagged), cache_s=t1 - t0, read_s=t2 - t1,
                   engine_s=t3 - t2, write_back_s=t4 - t3)
        if stage.final:
            yield pd.DataFrame(write_bundles(final, {}), columns=OUTPUT_COLUMNS)
        elif downstream:
            yield tagged_frame(downstream)

    def close(self) -> None:
        pass


def staged_job(tagged: DataFrame, plan: WorkerPlan, output_schema: Any) -> DataFrame:
    """Tagged source rows -> every stage's operator in order -> the output bundles."""
    stages = stage_plan(plan).stages
    frame = tagged
    for stage in stages:
        schema = output_schema if stage.final else TAGGED_SCHEMA
        frame = frame.groupBy("partition").transformWithStateInPandas(
            StageProcessor(plan, stage.index), schema, "Append", "None")
    return frame
