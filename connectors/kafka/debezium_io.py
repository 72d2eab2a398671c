"""Writing Debezium change events to a broker: ``ivmflow produce --format
debezium-json`` (an update stream as a database's change events, one source transaction
per epoch, with transaction metadata) -- for tests, demos and benchmarks.

Each epoch of the update stream becomes one transaction ``T<k>`` (``k`` the epoch
number): a BEGIN record on the transaction topic, the events on the relations' topics
(``PREFIX.<schema>.R``, or ``topic.R=``), an END record counting them per data
collection (``<schema>.R``). The updates of a relation with a declared ``PRIMARY KEY``
are netted per key within the epoch (its rows at the epoch's start and end): ``c``
for a new key, ``d`` for a removed one, ``u`` for a changed one, with a full
before-image (``before_images="full"``, REPLICA IDENTITY FULL) or the key only
(``"key"``, Postgres' default REPLICA IDENTITY: ``u`` then has ``before = null`` and
``d`` the key). A relation without a key writes one ``c`` / ``d`` (full before-image)
per update and copy (a multiplicity m is m events), also with ``"key"`` (as a table
without a primary key needs REPLICA IDENTITY FULL; ``"key"`` needs one keyed table).
Events of a keyed relation are keyed (and partitioned) by their key, others by their
row.

``ivmflow produce --format upsert-json`` (:func:`produce_upserts`) writes upsert topics
(``PREFIX.R``) the same way: per epoch each key's net change, the new row (``c``,
``u``) or a tombstone (``d``), keyed by the key; the record timestamps are the write's
start plus the epoch number in milliseconds, so that ``--epoch-ms 1`` reads the epochs
back (upsert topics carry no transactions).
"""

from __future__ import annotations

import json
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from connectors.kafka.codec import json_value
from connectors.kafka.config import KafkaConfigError, KafkaEndpoint
from connectors.kafka.debezium import encode_change, encode_transaction, json_field
from connectors.kafka.topics import ensure_topic
from core.errors import InputError
from core.records import EpochEnd, Record, Update
from core.schema import Relation, Row, Schema, Value

BeforeImages = Literal["full", "key"]


def transactions_topic(endpoint: KafkaEndpoint) -> str:
    """The transaction metadata topic: ``transactions=``, else ``PREFIX.transaction``
    (Debezium's default name)."""
    return endpoint.transactions_topic or f"{endpoint.topic}.transaction"


def _key_bytes(rel: Relation, row: Row) -> bytes:
    cols = [rel.columns[i] for i in rel.key] if rel.key else list(rel.columns)
    vals = [row[i] for i in rel.key] if rel.key else list(row)
    return json.dumps({c.name: json_field(v) for c, v in zip(cols, vals)},
                      separators=(",", ":")).encode()


class ChangeWriter:
    """Turns each epoch's updates into change events (module docstring), keeping the
    current row per key of the keyed relations across epochs."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.current: dict[str, dict[tuple[Value, ...], Row]] = {}

    def epoch(self, updates: list[Update]
              ) -> list[tuple[Relation, str, Row | None, Row | None]]:
        """``(relation, op, before, after)`` per event, in the order of each key's (or,
        without a key, each update's) first update."""
        out: list[tuple[Relation, str, Row | None, Row | None]] = []
        keyed: dict[str, dict[tuple[Value, ...], Counter[Row]]] = {}
        order: list[tuple[Relation, tuple[Value, ...]]] = []
        for u in updates:
            rel = self.schema.relation(u.relation)
            if not rel.key:
                op = "c" if u.op == "+" else "d"
                for _ in range(u.mult):
                    out.append((rel, op, None if op == "c" else u.row,
                                u.row if op == "c" else None))
                continue
            k = tuple(u.row[i] for i in rel.key)
            per = keyed.setdefault(rel.name, {})
            if k not in per:
                per[k] = Counter()
                order.append((rel, k))
            per[k][u.row] += u.signed_mult
        for rel, k in order:
            state = self.current.setdefault(rel.name, {})
            old = state.get(k)
            rows = Counter({old: 1}) if old is not None else Counter()
            rows.update(keyed[rel.name][k])
            live = [r for r, m in rows.items() if m != 0]
            if len(live) > 1 or any(m not in (0, 1) for m in rows.values()):
                where = f"relation {rel.name}"
                raise InputError(where, repr(k), "at most one row per "
                                 "key (the table declares a PRIMARY KEY)",
                                 f"rows {dict(rows)!r} after the epoch")
            new = live[0] if live else None
            if new is not None:
                state[k] = new
            else:
                state.pop(k, None)
            if old is not None and new is not None:
                out.append((rel, "u", old, new))
            elif old is not None:
                out.append((rel, "d", old, None))
            elif new is not None:
                out.append((rel, "c", None, new))
            else:  # inserted and deleted within the epoch: both events, as a database
                r = next(r for r, m in keyed[rel.name][k].items() if m > 0) \
                    if any(m > 0 for m in keyed[rel.name][k].values()) else None
                if r is not None:
                    out += [(rel, "c", None, r), (rel, "d", r, None)]
        return out


@dataclass(frozen=True)
class Encoded:
    """One record to write: its relation's topic (None: the transaction topic), key,
    value (None: a tombstone) and timestamp (None: the producer's)."""

    relation: str | None
    key: bytes | None
    value: bytes | None
    timestamp: int | None = None


class ChangeEncoder:
    """Update records (epochs ended by :class:`~core.records.EpochEnd`) as the records
    of a database's change topics (module docstring): ``debezium-json`` events with a
    BEGIN and an END per transaction, or ``upsert-json`` rows and tombstones (record
    timestamps ``base_ms`` + the epoch number). Counts ``updates`` read and ``epochs``
    (transactions) written."""

    def __init__(self, schema: Schema, fmt: str = "debezium-json", *,
                 before_images: BeforeImages = "full", schema_name: str = "public",
                 name: str = "ivmflow", base_ms: int = 0) -> None:
        self.schema = schema
        self.format = fmt
        self.before_images = before_images
        self.schema_name = schema_name
        self.name = name
        self.base_ms = base_ms
        self.writer = ChangeWriter(schema)
        self.updates = 0
        self.epochs = 0

    def records(self, records: Iterable[Record]) -> Iterator[Encoded]:
        epoch: list[Update] = []
        for rec in records:
            if isinstance(rec, EpochEnd):
                yield from self._epoch(epoch)
                epoch = []
                continue
            self.updates += 1
            epoch.append(rec)
        yield from self._epoch(epoch)

    def _epoch(self, updates: list[Update]) -> Iterator[Encoded]:
        events = self.writer.epoch(updates)
        if not events:
            return
        self.epochs += 1
        k = self.epochs
        if self.format == "upsert-json":
            for rel, _op, before, after in events:
                row = after if after is not None else before
                assert row is not None
                value = None if after is None else json.dumps(
                    dict(zip(rel.column_names, after)), separators=(",", ":"),
                    default=json_value).encode()
                yield Encoded(rel.name, _key_bytes(rel, row), value, self.base_ms + k)
            return
        txid = str(k)
        yield Encoded(None, None, encode_transaction("BEGIN", txid, ts_ms=k))
        per: Counter[str] = Counter()
        for total, (rel, op, before, after) in enumerate(events, 1):
            collection = f"{self.schema_name}.{rel.name}"
            per[collection] += 1
            bcols = None
            if self.before_images == "key" and rel.key:
                bcols = [rel.columns[i].name for i in rel.key]
                if op == "u":
                    before = None
            value = encode_change(op, before, after, rel.column_names, name=self.name,
                                  schema=self.schema_name, table=rel.name, txid=txid,
                                  total_order=total, collection_order=per[collection],
                                  ts_ms=k, before_columns=bcols)
            row = after if after is not None else before
            assert row is not None
            yield Encoded(rel.name, _key_bytes(rel, row), value)
        yield Encoded(None, None, encode_transaction("END", txid, sorted(per.items()),
                                                     ts_ms=k))


def _write(endpoint: KafkaEndpoint, encoded: Iterable[Encoded], topics: Mapping[str, str],
           tx_topic: str | None, partitions: int) -> None:
    """Send the records: a relation's to its topic, on the partition of its key."""
    from kafka import KafkaProducer

    counts = {t: ensure_topic(endpoint, t, partitions) for t in topics.values()}
    if tx_topic is not None:
        ensure_topic(endpoint, tx_topic, 1)
    cfg = endpoint.client_config("producer")
    cfg.update(acks="all", enable_idempotence=True, linger_ms=5, batch_size=1 << 20)
    producer: Any = KafkaProducer(**cfg)
    try:
        for e in encoded:
            if e.relation is None:
                assert tx_topic is not None
                producer.send(tx_topic, e.value, partition=0)
                continue
            topic = topics[e.relation]
            assert e.key is not None
            producer.send(topic, e.value, key=e.key,
                          partition=zlib.crc32(e.key) % counts[topic], timestamp_ms=e.timestamp)
        producer.flush()
    finally:
        producer.close()


def produce_changes(endpoint: KafkaEndpoint, records: Iterable[Record], schema: Schema, *,
                    partitions: int = 1, before_images: BeforeImages = "full",
                    name: str = "ivmflow") -> tuple[int, int]:
    """Write update records as Debezium change events with transaction metadata
    (module docstring); returns (updates read, transactions written)."""
    if before_images == "key" and not any(r.key for r in schema.relations.values()):
        msg = ("--before-images key: expected a PRIMARY KEY in a CREATE TABLE (key-only "
               "before-images name the row by it), found none")
        raise KafkaConfigError(msg)
    enc = ChangeEncoder(schema, "debezium-json", before_images=before_images,
                        schema_name=endpoint.format_options.get("schema", "public"), name=name)
    _write(endpoint, enc.records(records), {r: endpoint.topic_for(r) for r in schema.relations},
           transactions_topic(endpoint), partitions)
    return enc.updates, enc.epochs


def produce_upserts(endpoint: KafkaEndpoint, records: Iterable[Record], schema: Schema, *,
                    partitions: int = 1) -> tuple[int, int]:
    """Write update records as upsert topics, one per relation (module docstring);
    returns (updates read, epochs written). Every relation needs a PRIMARY KEY."""
    unkeyed = sorted(r.name for r in schema.relations.values() if not r.key)
    if unkeyed:
        msg = (f"--format upsert-json keys each table by its PRIMARY KEY: expected one in "
               f"CREATE TABLE for {', '.join(unkeyed)}")
        raise KafkaConfigError(msg)
    enc = ChangeEncoder(schema, "upsert-json", base_ms=int(time.time() * 1000))
    _write(endpoint, enc.records(records), {r: endpoint.topic_for(r) for r in schema.relations},
           None, partitions)
    return enc.updates, enc.epochs
