"""A Kafka update source hosted in the PyFlink job, its read position in Flink state.

Why not Flink's own Kafka connector: the only registry copy of its jars here is the
PyPI wheel ``shigawire-apache-flink-libraries`` 2.0.0.post1, built for Flink 2.0. It
installs into ``pyflink/lib`` a Flink 2.0 ``flink-core.jar``, ``flink-runtime.jar``,
``flink-streaming-java.jar`` ... next to apache-flink 2.3.0's ``flink-dist-2.3.0.jar``
(two Flink versions on one classpath), so it cannot go into the ``flink`` extra. Its
two connector jars alone (``flink-connector-kafka.jar`` + ``kafka-clients.jar``, added
with ``add_jars``) do read a topic with ``KafkaSource.set_topics`` on 2.3.0 (tested),
but they are unshaded while PyFlink's Python API builds
``org.apache.flink.kafka.shaded...TopicPartition`` objects, so
``KafkaSource.set_partitions`` fails ("Could not found the Java class"), and PyFlink
exposes only value deserializers, so a whole-topic source loses each record's
partition. The deterministic epoch order of :mod:`connectors.kafka` needs both.

So the source is Python, in the job: a tick source (``NumberSequenceSource``,
parallelism 1) drives :class:`KafkaEpochSource`, a keyed process function (one key)
that on every tick reads the next whole epochs with :class:`connectors.kafka.epochs.
EpochReader` from the :class:`~connectors.kafka.epochs.ReadPosition` kept in its
``ValueState``, numbers them, tags them with their partitions and emits them. A
checkpoint barrier passes between two ticks, so the position in a checkpoint is exactly
that of the records emitted before it: a job restored from a checkpoint goes on from
there and re-reads nothing twice. ``--stop-at-end``: the end offsets are taken when the
run first starts (kept in the position and in ``kafka-start.json`` next to the
checkpoints, so a restarted run stops at the same place), and the tick count is bounded
by the number of records (every tick that is not done releases at least one epoch), so
the job finishes. Unbounded: ticks never end; the runner cancels the job on SIGTERM.

A change stream (``format=debezium-json`` or ``upsert-json``) is read by a
:class:`connectors.kafka.change_epochs.ChangeReader` (the cut's state in the position),
and its upsert state lives in a ``MapState`` of the same function (one entry per key,
the keys a tick changed written back after it): a checkpoint holds it with the position
it belongs to, so a job restored from one goes on with both.

This module imports pyflink and kafka-python; ``operators/`` and ``plans/`` never do.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from connectors.kafka.change_epochs import ChangeReader, Changes
from connectors.kafka.epochs import EpochReader, ReadPosition, parse_kafka_url
from connectors.kafka.upsert import ChangeApplier
from core.schema import Schema
from dataflow.distributed.partitions import WorkerPlan
from dataflow.runners.flink.reader import IDLE_SLEEP_S, UNBOUNDED_TICKS, ReadCounters


def new_reader(url: str, schema: Schema, kafka_options: Sequence[str] = (),
               change: Mapping[str, Any] | None = None, store: Any = None,
               summary: str | None = None) -> EpochReader:
    """The reader of ``url``: of a change stream when ``change`` (its cut options)."""
    endpoint = parse_kafka_url(url, kafka_options)
    if change is None:
        return EpochReader(endpoint, schema)
    return ChangeReader(endpoint, schema, store=store, summary=summary, **change)


class MapStateUpsertStore:
    """A change stream's upsert state in the reading function's ``MapState`` (module
    docstring): Flink restores it with the position, so :meth:`restore` loads what
    is there whatever ``seq``."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def restore(self, seq: int, applier: ChangeApplier) -> None:
        for (relation, key), row in self.state.items():
            applier.put(relation, key, row)

    def save(self, seq: int, changes: Changes) -> None:
        for entry, row in changes.items():
            if row is None:
                self.state.remove(entry)
            else:
                self.state.put(entry, row)


def start_position(url: str, schema: Schema, checkpoint_dir: Path, stop_at_end: bool,
                   fresh: bool, kafka_options: Sequence[str] = (),
                   change: Mapping[str, Any] | None = None) -> tuple[ReadPosition, int]:
    """The first run's start position and tick count, kept in ``kafka-start.json`` so
    that a restarted run uses the same ones (``fresh``: a new run, take them anew)."""
    path = checkpoint_dir / "kafka-start.json"
    if not fresh and path.exists():
        saved = json.loads(path.read_text())
        return ReadPosition.from_dict(saved["position"]), int(saved["ticks"])
    reader = new_reader(url, schema, kafka_options, change)
    try:
        pos = reader.initial(stop_at_end)
    finally:
        reader.close()
    if pos.stop is not None:
        # Every tick that is not done releases an epoch (one record at least); the
        # margin covers ticks that time out on a slow broker.
        ticks = 2 * sum(max(0, pos.stop[k] - o) for k, o in pos.offsets.items()) + 100
    else:
        ticks = UNBOUNDED_TICKS
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"position": pos.to_dict(), "ticks": ticks}))
    os.replace(tmp, path)
    return pos, ticks


class KafkaEpochSource(KeyedProcessFunction):
    """Per tick: the next whole epochs of the input, tagged ``(partition, TaggedRow)``."""

    def __init__(self, url: str, schema: Schema, start: ReadPosition, plan: WorkerPlan,
                 epoch_size: int | None, batch_records: int,
                 kafka_options: Sequence[str] = (), change: Mapping[str, Any] | None = None,
                 summary: str | None = None) -> None:
        self.url = url
        self.change = dict(change) if change is not None else None
        """A change stream's cut options (None: ivmflow's own records)."""
        self.summary = summary
        self.kafka_options = list(kafka_options)
        self.schema_blob = pickle.dumps(schema)
        self.start = start.to_dict()
        self.plan = plan
        self.epoch_size = epoch_size
        self.batch_records = batch_records
        self.reader: EpochReader | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self.position = runtime_context.get_state(
            ValueStateDescriptor("kafka_position", Types.PICKLED_BYTE_ARRAY())
        )
        self.upsert = runtime_context.get_map_state(MapStateDescriptor(
            "upsert_state", Types.PICKLED_BYTE_ARRAY(), Types.PICKLED_BYTE_ARRAY()
        )) if self.change is not None else None
        # The driver never sees the updates of a Kafka run, so the job counts them.
        self.counters = ReadCounters(runtime_context)
        self.finished = False  # read to the stop offsets (idle ticks skip the state)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        if self.finished:
            return
        saved = self.position.value()
        pos = ReadPosition.from_dict(saved if saved is not None else self.start)
        if pos.done:
            self.finished = True
            return
        if self.reader is None:
            # (here, not in open(): the MapState is read under the function's key)
            store = MapStateUpsertStore(self.upsert) if self.upsert is not None else None
            self.reader = new_reader(self.url, pickle.loads(self.schema_blob),
                                     self.kafka_options, self.change, store, self.summary)
        numbered, nxt = self.reader.read(pos, self.batch_records,
                                         None if self.change is not None else self.epoch_size,
                                         timeout_s=1.0)
        self.position.update(nxt.to_dict())
        if not numbered:
            if not nxt.done:
                time.sleep(IDLE_SLEEP_S)
            return
        yield from self.counters.emit(self.plan, numbered)
