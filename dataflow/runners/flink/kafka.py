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

This module imports pyflink and kafka-python; ``operators/`` and ``plans/`` never do.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from connectors.kafka.epochs import EpochReader, ReadPosition, parse_kafka_url
from core.schema import Schema
from dataflow.distributed import WorkerPlan
from dataflow.runners.flink.reader import IDLE_SLEEP_S, UNBOUNDED_TICKS, ReadCounters


def start_position(url: str, schema: Schema, checkpoint_dir: Path, stop_at_end: bool,
                   fresh: bool, kafka_options: Sequence[str] = ()) -> tuple[ReadPosition, int]:
    """The first run's start position and tick count, kept in ``kafka-start.json`` so
    that a restarted run uses the same ones (``fresh``: a new run, take them anew)."""
    path = checkpoint_dir / "kafka-start.json"
    if not fresh and path.exists():
        saved = json.loads(path.read_text())
        return ReadPosition.from_dict(saved["position"]), int(saved["ticks"])
    reader = EpochReader(parse_kafka_url(url, kafka_options), schema)
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
                 kafka_options: Sequence[str] = ()) -> None:
        self.url = url
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
            endpoint = parse_kafka_url(self.url, self.kafka_options)
            self.reader = EpochReader(endpoint, pickle.loads(self.schema_blob))
        numbered, nxt = self.reader.read(pos, self.batch_records, self.epoch_size,
                                         timeout_s=1.0)
        self.position.update(nxt.to_dict())
        if not numbered:
            if not nxt.done:
                time.sleep(IDLE_SLEEP_S)
            return
        yield from self.counters.emit(self.plan, numbered)
