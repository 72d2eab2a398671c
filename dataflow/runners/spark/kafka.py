"""A PySpark streaming data source over a Kafka update topic (``kafka://host:port/topic``).

The Spark offset of a micro-batch is a :class:`connectors.kafka.epochs.ReadPosition`
(next offset per topic partition, at an epoch boundary, plus the epoch cursor and the
``--stop-at-end`` target): Spark writes it to the query's checkpoint before the batch
runs, so a restarted query re-reads exactly the batch it had planned
(``readBetweenOffsets``) and goes on from there. No consumer group is used.

Rows have the schema of :mod:`dataflow.runners.spark.source` (the file source), so the
Spark runner's job is the same after the source.

A change stream (``format=debezium-json`` or ``upsert-json``) is read by a
:class:`connectors.kafka.change_epochs.ChangeReader` instead: the same positions, with
the cut's state in them, and the upsert state in files of the query's checkpoint
(:class:`connectors.kafka.upsert_store.FileUpsertStore`, ``<checkpoint>/ivmflow-upsert``),
versioned by position, folded into a whole state as Spark commits positions.

This module imports pyspark and kafka-python; ``operators/`` and ``plans/`` never do.

Example (needs a broker and a SparkSession)::

    source = kafka_update_stream(spark, "kafka://127.0.0.1:9092/updates", schema,
                                 epoch_size=None, batch_records=10_000, stop_at_end=True)
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.types import StructType

from connectors.kafka.change_epochs import ChangeReader
from connectors.kafka.epochs import EpochReader, ReadPosition, parse_kafka_url
from connectors.kafka.upsert_store import FileUpsertStore
from core.epochs import CLOSE, NumberedRecord
from core.schema import Schema
from dataflow.runners.spark.source import ROW_SCHEMA, read_fault_points

SOURCE_NAME = "ivmflow_kafka_updates"


def kafka_update_stream(
    spark: SparkSession,
    url: str,
    schema: Schema,
    *,
    epoch_size: int | None,
    batch_records: int,
    stop_at_end: bool,
    kafka_options: Sequence[str] = (),
    change: Mapping[str, Any] | None = None,
    state_dir: str | None = None,
) -> DataFrame:
    """The streaming DataFrame of numbered updates read from the topic at ``url``
    (``kafka_options``: ``KEY=VALUE`` client properties, as ``--kafka-option``). A change
    stream's cut options (:class:`~connectors.kafka.change_epochs.ChangeReader`) are
    ``change``, and its upsert state goes to ``state_dir``."""
    spark.dataSource.register(KafkaUpdateSource)
    reader = spark.readStream.format(SOURCE_NAME)
    if change is not None:
        reader = reader.option("change", json.dumps(dict(change)))
    if state_dir is not None:
        reader = reader.option("state_dir", state_dir)
    return (
        reader
        .option("url", url)
        .option("schema", pickle.dumps(schema).hex())
        .option("epoch", str(epoch_size or 0))
        .option("batch_records", str(batch_records))
        .option("stop_at_end", "true" if stop_at_end else "false")
        .option("kafka_options", json.dumps(list(kafka_options)))
        .load()
    )


def to_rows(numbered: list[NumberedRecord]) -> list[tuple[Any, ...]]:
    """Numbered records as rows of the file source's schema."""
    rows: list[tuple[Any, ...]] = []
    for n in numbered:
        if n.kind == CLOSE:
            rows.append((n.seq, n.epoch, CLOSE, None, None, 0, None, n.snapshot))
        else:
            u = n.update
            assert u is not None
            rows.append((n.seq, n.epoch, "u", u.relation, u.op, u.mult,
                         pickle.dumps((u.row, u.source)), 0))
    return rows


class KafkaUpdateSource(DataSource):
    """``spark.readStream.format("ivmflow_kafka_updates")``. Options: ``url``,
    ``schema`` (pickled-then-hex :class:`Schema`), ``epoch`` (updates per epoch, 0 =
    markers only), ``batch_records`` (records per partition and micro-batch, at most),
    ``stop_at_end``, ``kafka_options`` (JSON list of ``KEY=VALUE``); for a change stream
    ``change`` (JSON of the cut options) and ``state_dir`` (the upsert state's files)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return ROW_SCHEMA

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return KafkaUpdateStreamReader(dict(self.options))


class KafkaUpdateStreamReader(SimpleDataSourceStreamReader):
    """Runs on the driver (Spark's simple stream reader): one kafka-python consumer for
    the query's life, positioned by the offsets Spark hands in."""

    def __init__(self, options: dict[str, str]) -> None:
        schema: Schema = pickle.loads(bytes.fromhex(options["schema"]))
        extra = json.loads(options.get("kafka_options", "[]"))
        endpoint = parse_kafka_url(options["url"], extra)
        self.schema = schema
        self.store: FileUpsertStore | None = None
        self.reader: EpochReader
        self.epoch_size = int(options.get("epoch", "0")) or None
        if endpoint.format != "json":
            state = options.get("state_dir")
            self.store = FileUpsertStore(state) if state else None
            self.reader = ChangeReader(
                endpoint, schema, store=self.store,
                summary=f"{state}/summary.json" if state else None,
                **json.loads(options.get("change", "{}")))
            self.epoch_size = None  # (--epoch N is the cutter's: N events per stream)
        else:
            self.reader = EpochReader(endpoint, schema)
        self.batch_records = int(options.get("batch_records", "10000"))
        self.stop_at_end = options.get("stop_at_end", "false") == "true"

    def initialOffset(self) -> dict[str, Any]:
        return self.reader.initial(self.stop_at_end).to_dict()

    def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[Any, ...]], dict[str, Any]]:
        pos = ReadPosition.from_dict(start)
        numbered, end = self.reader.read(pos, self.batch_records, self.epoch_size,
                                         timeout_s=1.0)
        if not numbered and end.offsets == pos.offsets and end.done == pos.done:
            return iter(()), start  # nothing new: Spark runs no batch
        # (No records but offsets moved: a change stream's transactions of other tables,
        # or tombstones. An empty batch, so that they are not read again and again.)
        read_fault_points(pos.cursor, end.cursor)
        return iter(to_rows(numbered)), end.to_dict()

    def readBetweenOffsets(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[tuple[Any, ...]]:
        numbered = self.reader.read_between(
            ReadPosition.from_dict(start), ReadPosition.from_dict(end), self.epoch_size
        )
        return iter(to_rows(numbered))

    def commit(self, end: dict[str, Any]) -> None:
        # Spark will not ask for a position before ``end`` again: the upsert state's
        # changes up to it may be folded into a whole state.
        if self.store is not None:
            self.store.compact(ReadPosition.from_dict(end).cursor.seq, self.schema)
