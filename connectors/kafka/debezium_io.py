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
per update and copy (a multiplicity m is m events). Events of a keyed relation are
keyed (and partitioned) by their key, others by their row.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

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


def produce_changes(endpoint: KafkaEndpoint, records: Iterable[Record], schema: Schema, *,
                    partitions: int = 1, before_images: BeforeImages = "full",
                    name: str = "ivmflow") -> tuple[int, int]:
    """Write update records as Debezium change events with transaction metadata
    (module docstring); returns (updates read, transactions written)."""
    from kafka import KafkaProducer

    if before_images == "key":
        unkeyed = [r.name for r in schema.relations.values() if not r.key]
        if unkeyed:
            msg = (f"--before-images key needs a PRIMARY KEY in CREATE TABLE for "
                   f"{', '.join(unkeyed)} (key-only before-images name the row by it)")
            raise KafkaConfigError(msg)
    ep = endpoint
    schema_name = ep.format_options.get("schema", "public")
    tx_topic = transactions_topic(ep)
    topics = {r: ep.topic_for(r) for r in schema.relations}
    counts = {t: ensure_topic(ep, t, partitions) for t in topics.values()}
    ensure_topic(ep, tx_topic, 1)
    cfg = ep.client_config("producer")
    cfg.update(acks="all", enable_idempotence=True, linger_ms=5)
    producer: Any = KafkaProducer(**cfg)
    n = txns = 0
    epoch: list[Update] = []
    writer = ChangeWriter(schema)

    def flush_epoch() -> None:
        nonlocal txns
        events = writer.epoch(epoch)
        epoch.clear()
        if not events:
            return
        txns += 1
        txid = str(txns)
        producer.send(tx_topic, encode_transaction("BEGIN", txid, ts_ms=txns), partition=0)
        per: Counter[str] = Counter()
        for total, (rel, op, before, after) in enumerate(events, 1):
            collection = f"{schema_name}.{rel.name}"
            per[collection] += 1
            bcols = None
            if before_images == "key" and rel.key:
                bcols = [rel.columns[i].name for i in rel.key]
                if op == "u":
                    before = None
            value = encode_change(op, before, after, rel.column_names, name=name,
                                  schema=schema_name, table=rel.name, txid=txid,
                                  total_order=total, collection_order=per[collection],
                                  ts_ms=txns, before_columns=bcols)
            row = after if after is not None else before
            assert row is not None
            key = _key_bytes(rel, row)
            topic = topics[rel.name]
            producer.send(topic, value, key=key, partition=zlib.crc32(key) % counts[topic])
        producer.send(tx_topic, encode_transaction("END", txid, sorted(per.items()),
                                                   ts_ms=txns), partition=0)

    try:
        for rec in records:
            if isinstance(rec, EpochEnd):
                flush_epoch()
                continue
            n += 1
            epoch.append(rec)
        flush_epoch()
        producer.flush()
    finally:
        producer.close()
    return n, txns
