"""The test broker does what the Kafka connectors rely on.

Each test uses its own topic and consumer-group names (``unique_name``), so the tests
share one session broker without seeing each other's records. Payloads are random so a
broker that returned stale or fixed data would fail.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterable

import kafka_broker as kb
import pytest
from kafka_broker import KafkaBroker, create_topic, unique_name

kafka = pytest.importorskip("kafka", reason="kafka-python is not installed")
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

if kb.noida_version() is None:
    pytest.skip("noida-db is not installed (pip install -e .[dev])", allow_module_level=True)

pytestmark = pytest.mark.integration


def _consume(consumer: KafkaConsumer, expected: int, timeout_s: float = 15.0) -> list[bytes]:
    """Poll until ``expected`` records arrived (or the timeout passed); return values."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(r.value for r in records)
    return got


def _payloads(n: int, rng: random.Random) -> list[bytes]:
    return [
        json.dumps({"op": "+", "relation": "G", "row": [rng.randrange(10**6), i]}).encode()
        for i in range(n)
    ]


def _send_all(producer: KafkaProducer, topic: str, values: Iterable[bytes], **kw: object) -> None:
    for v in values:
        producer.send(topic, v, **kw)
    producer.flush()


def test_fixture_reports_its_mode(kafka_broker: KafkaBroker, kafka_bootstrap: str) -> None:
    assert kafka_broker.mode in ("container:docker", "container:podman", "process")
    host, port = kafka_bootstrap.rsplit(":", 1)
    assert host == "127.0.0.1" and 0 < int(port) < 65536


def test_fixture_uses_a_container_whenever_one_can_run(kafka_broker: KafkaBroker) -> None:
    """No silent fallback: with a reachable runtime and the built image, auto mode must
    have taken the testcontainers path (CI sets both up in .ci/podman_setup.sh)."""
    if os.environ.get("IVMFLOW_KAFKA_MODE", "auto") == "process":
        pytest.skip("IVMFLOW_KAFKA_MODE=process forces the broker process")
    runtime = kb.find_container_runtime([])
    if runtime is None or not kb._image_present(runtime[1], kb.default_image()):
        assert kafka_broker.mode == "process"
        return
    assert kafka_broker.mode == f"container:{runtime[0]}", kafka_broker.notes


def test_bad_mode_is_named() -> None:
    with pytest.raises(ValueError, match="IVMFLOW_KAFKA_MODE.*'podman'"):
        kb.launch_broker("podman")


def test_missing_image_falls_back_to_a_process_with_a_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IVMFLOW_KAFKA_IMAGE", "ivmflow/no-such-image:0")
    with kb.start_broker("auto") as broker:
        assert broker.mode == "process"
        create_topic(broker.bootstrap, unique_name("fallback"), partitions=2)
    if kb.find_container_runtime([]) is not None:
        assert any("no-such-image" in n for n in broker.notes), broker.notes
    with pytest.raises(kb.BrokerUnavailable, match="container"):
        kb.launch_broker("container")


def test_round_trip_preserves_order_and_bytes(kafka_bootstrap: str) -> None:
    topic = unique_name("roundtrip")
    create_topic(kafka_bootstrap, topic, partitions=1)
    sent = _payloads(200, random.Random(1))
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    _send_all(producer, topic, sent)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest")
    try:
        assert _consume(consumer, len(sent)) == sent
    finally:
        consumer.close()


def test_multi_partition_topic_routes_by_key(kafka_bootstrap: str) -> None:
    topic = unique_name("parts")
    create_topic(kafka_bootstrap, topic, partitions=4)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    assert producer.partitions_for(topic) == {0, 1, 2, 3}
    rng = random.Random(2)
    keyed = [(f"k{rng.randrange(20)}".encode(), v) for v in _payloads(120, rng)]
    partition_of: dict[bytes, set[int]] = {}
    for key, value in keyed:
        meta = producer.send(topic, value, key=key).get(timeout=10)
        partition_of.setdefault(key, set()).add(meta.partition)
    producer.close()
    # Same key, same partition: what per-relation ordering in the connectors relies on.
    assert all(len(ps) == 1 for ps in partition_of.values())
    assert len(set().union(*partition_of.values())) > 1
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        assert sum(ends.values()) == len(keyed)
        assert sorted(_consume(consumer, len(keyed))) == sorted(v for _, v in keyed)
    finally:
        consumer.close()


def test_consumer_group_commit_and_resume(kafka_bootstrap: str) -> None:
    topic, group = unique_name("resume"), unique_name("group")
    create_topic(kafka_bootstrap, topic, partitions=2)
    sent = _payloads(100, random.Random(3))
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    _send_all(producer, topic, sent[:60])

    def group_consumer() -> KafkaConsumer:
        return KafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )

    first = group_consumer()
    try:
        got_first = _consume(first, 60)
        first.commit()
    finally:
        first.close()
    _send_all(producer, topic, sent[60:])
    producer.close()
    second = group_consumer()
    try:
        got_second = _consume(second, 40)
        # Nothing more than the 40 new records: poll once more to catch redelivery.
        got_second += _consume(second, 1, timeout_s=0.5)
        committed = {p: second.committed(TopicPartition(topic, p)) for p in (0, 1)}
    finally:
        second.close()
    assert sorted(got_first) == sorted(sent[:60])
    assert sorted(got_second) == sorted(sent[60:])
    assert sum(v or 0 for v in committed.values()) == 60


def test_transactions_hide_aborted_records_from_read_committed(kafka_bootstrap: str) -> None:
    topic = unique_name("txn")
    create_topic(kafka_bootstrap, topic, partitions=1)
    rng = random.Random(4)
    committed_a, aborted, committed_b = _payloads(20, rng), _payloads(15, rng), _payloads(5, rng)
    producer = KafkaProducer(
        bootstrap_servers=kafka_bootstrap,
        enable_idempotence=True,
        transactional_id=unique_name("txid"),
        acks="all",
    )
    try:
        producer.init_transactions()
        for batch, commit in ((committed_a, True), (aborted, False), (committed_b, True)):
            producer.begin_transaction()
            _send_all(producer, topic, batch)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()

    def read(isolation: str, expected: int) -> list[bytes]:
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            auto_offset_reset="earliest",
            isolation_level=isolation,
        )
        try:
            return _consume(consumer, expected) + _consume(consumer, 1, timeout_s=0.5)
        finally:
            consumer.close()

    assert read("read_committed", 25) == committed_a + committed_b
    # The aborted records are in the log: read_uncommitted sees them, in order.
    assert read("read_uncommitted", 40) == committed_a + aborted + committed_b


def test_idempotent_producer_writes_each_record_once(kafka_bootstrap: str) -> None:
    topic = unique_name("idem")
    create_topic(kafka_bootstrap, topic, partitions=1)
    sent = _payloads(300, random.Random(5))
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, enable_idempotence=True, acks="all")
    _send_all(producer, topic, sent)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        assert consumer.end_offsets([tp])[tp] == len(sent)
        assert _consume(consumer, len(sent)) == sent
    finally:
        consumer.close()
