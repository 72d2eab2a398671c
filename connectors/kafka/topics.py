"""Broker-bound helpers: create topics, read committed outputs, produce update
streams.
"""

from __future__ import annotations

import contextlib
import json
import time
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from connectors.kafka.codec import (
    decode_delta,
    encode_update,
    json_value,
)
from connectors.kafka.config import (
    KafkaConfigError,
    KafkaEndpoint,
)
from core.records import EpochEnd, Record, Update
from core.schema import Schema, Value


def ensure_topic(endpoint: KafkaEndpoint, topic: str, partitions: int = 1) -> int:
    """Create ``topic`` with ``partitions`` partitions unless it exists; returns its
    partition count (an existing topic keeps its own)."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(**endpoint.client_config("admin"))
    try:
        count = _partition_count(admin, topic)
        if count:
            return count
        with contextlib.suppress(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, partitions, 1)])
        deadline = time.monotonic() + 15
        while True:
            count = _partition_count(admin, topic)
            if count:
                return count
            if time.monotonic() > deadline:
                msg = f"topic {topic!r} on {endpoint.bootstrap} did not appear after creation"
                raise KafkaConfigError(msg)
            time.sleep(0.05)
    finally:
        admin.close()


def _partition_count(admin: Any, topic: str) -> int:
    described = admin.describe_topics([topic])
    if not described or described[0].get("error_code", 0) != 0:
        return 0
    return len(described[0].get("partitions") or [])


def _partitions(consumer: Any, endpoint: KafkaEndpoint, topic: str, timeout: float = 10.0
                ) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return sorted(parts)
        if time.monotonic() > deadline:
            msg = (f"topic {topic!r} does not exist on {endpoint.bootstrap}: expected an "
                   f"existing update topic; create it or write it with `ivmflow produce`")
            raise KafkaConfigError(msg)
        time.sleep(0.1)



# ---------------------------------------------------------------------------------------
# Reading outputs, producing inputs


def _read_committed(endpoint: KafkaEndpoint, topic: str, start: Callable[[int, int], int],
                    timeout: float = 30.0) -> tuple[list[Any], bool]:
    """The committed records of ``topic`` from ``start(begin, end)`` per partition up to
    the end offsets at call time, in (partition, offset) order; and whether every
    partition was read from its beginning."""
    from kafka import KafkaConsumer, TopicPartition

    cfg = endpoint.client_config("consumer")
    cfg.update(group_id=None, enable_auto_commit=False, isolation_level="read_committed")
    consumer = KafkaConsumer(**cfg)
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            return [], True
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        begins = consumer.beginning_offsets(tps)
        ends = consumer.end_offsets(tps)
        whole = True
        for tp in tps:
            first = max(begins[tp], start(begins[tp], ends[tp]))
            whole = whole and first <= begins[tp]
            consumer.seek(tp, first)
        out: dict[int, list[Any]] = {tp.partition: [] for tp in tps}
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                msg = f"reading {topic!r} on {endpoint.bootstrap} timed out"
                raise TimeoutError(msg)
            for tp, recs in consumer.poll(timeout_ms=200).items():
                out[tp.partition].extend(r for r in recs if r.offset < ends[tp])
        return [r for p in sorted(out) for r in out[p]], whole
    finally:
        consumer.close()


def _read_tail(endpoint: KafkaEndpoint, key: str,
               enough: Callable[[list[int | None]], bool]) -> tuple[list[Any], list[int | None]]:
    """The committed records at the end of the endpoint's topic and their epochs (None:
    not a delta record), read in growing windows until ``enough(epochs)`` or the window
    reaches the topic's beginning."""
    window = 1024
    while True:
        recs, whole = _read_committed(endpoint, endpoint.topic,
                                      lambda b, e, w=window: e - w)  # type: ignore[misc]
        epochs: list[int | None] = []
        for r in recs:
            try:
                epochs.append(decode_delta(r.value, key=key)[0])
            except (ValueError, KeyError, TypeError):
                epochs.append(None)
        if whole or enough(epochs):
            return recs, epochs
        window *= 16


def read_last_epoch(endpoint: KafkaEndpoint, *, key: str = "epoch") -> int:
    """The highest ``epoch`` (or ``snapshot``) among the committed records of the
    endpoint's topic, 0 when there is none: read from the end in growing windows."""
    def last(epochs: list[int | None]) -> int:
        return max((e for e in epochs if e is not None), default=0)

    return last(_read_tail(endpoint, key, lambda epochs: last(epochs) > 0)[1])


def read_epoch_records(endpoint: KafkaEndpoint, k: int, *, key: str = "epoch"
                       ) -> list[bytes]:
    """The committed record values of epoch (or snapshot) ``k`` in the endpoint's topic,
    whose last epoch is ``k``: read from the end in growing windows, until a window
    starts at an earlier epoch or at the topic's beginning."""
    recs, epochs = _read_tail(
        endpoint, key, lambda epochs: any(e is not None and e < k for e in epochs))
    return [r.value for r, e in zip(recs, epochs) if e == k]


def read_deltas(endpoint: KafkaEndpoint, *, key: str = "epoch"
                ) -> list[tuple[int, int, dict[str, Value]]]:
    """All committed delta (or snapshot) records of the topic as ``(epoch, mult, row)``,
    sorted by epoch (stable: rows of one epoch keep their order)."""
    recs, _ = _read_committed(endpoint, endpoint.topic, lambda b, e: b)
    rows = [decode_delta(r.value, key=key) for r in recs]
    return sorted(rows, key=lambda t: t[0])


def partition_of(update: Update, partitions: int) -> int:
    """The partition of an update: a stable hash of (relation, row), so that all updates
    of one tuple go to one partition (in order).

    >>> partition_of(Update("+", "G", (1, 2)), 4) == partition_of(Update("-", "G", (1, 2)), 4)
    True

    DECIMAL and DATE values (a row read with the query's schema) hash as their text:

    >>> import datetime, decimal
    >>> partition_of(Update("+", "R", (decimal.Decimal("1.50"), datetime.date(1995, 3, 15))), 2)
    1
    """
    key = json.dumps([update.relation.lower(), list(update.row)], separators=(",", ":"),
                     default=json_value)
    return zlib.crc32(key.encode()) % partitions


def produce_updates(endpoint: KafkaEndpoint, records: Iterable[Record], schema: Schema | None,
                    *, partitions: int = 1) -> int:
    """Write update records as JSON to the endpoint's topic(s) (created with
    ``partitions`` partitions when missing): updates to :func:`partition_of`, each
    marker to every partition of every topic.  Returns the number of records read."""
    from kafka import KafkaProducer

    relations = sorted(schema.relations) if schema is not None else []
    if endpoint.per_relation and not relations:
        msg = "producing to per-relation topics needs the query (--query) for the relations"
        raise KafkaConfigError(msg)
    topics = ([endpoint.topic_for(r) for r in relations] if endpoint.per_relation
              else [endpoint.topic])
    counts = {t: ensure_topic(endpoint, t, partitions) for t in topics}
    cfg = endpoint.client_config("producer")
    cfg.update(acks="all", enable_idempotence=True, linger_ms=5)
    producer = KafkaProducer(**cfg)
    n = 0
    try:
        for rec in records:
            n += 1
            if isinstance(rec, EpochEnd):
                for t in topics:
                    for p in range(counts[t]):
                        producer.send(t, encode_update(rec), partition=p)
                continue
            topic = endpoint.topic_for(rec.relation) if endpoint.per_relation else endpoint.topic
            if topic not in counts:
                counts[topic] = ensure_topic(endpoint, topic, partitions)
            producer.send(topic, encode_update(rec, with_relation=not endpoint.per_relation),
                          partition=partition_of(rec, counts[topic]))
        producer.flush()
    finally:
        producer.close()
    return n
