"""Kafka connectors (kafka-python): update source, delta/snapshot sink, dead letters.

Reusable by every runner.  The pieces, from pure to broker-bound:

* **URLs** -- :func:`parse_kafka_url` turns ``kafka://host:port[,host:port]/topic?k=v``
  into a :class:`KafkaEndpoint`.  Query parameters are Kafka client properties in
  Kafka's own dotted spelling (``group.id``, ``security.protocol``, ``sasl.mechanism``,
  ``sasl.username``, ``sasl.password``, ``ssl.ca.location``, ``transactional.id``, any
  kafka-python option with ``.`` for ``_``) and are passed through
  (:meth:`KafkaEndpoint.client_config`), except three that are ivmflow's own:
  ``topics=per-relation`` (one topic per relation, named ``<topic>.<relation>``),
  ``topic.<R>=NAME`` (relation ``R`` reads topic ``NAME``; implies per-relation) and
  ``dead-letter=TOPIC``.  With one topic (the default) every record names its relation.
* **Codec** -- :func:`decode_update` (JSON update record -> :class:`Update` /
  :class:`EpochEnd`, or :class:`InputError` naming topic, partition and offset),
  :func:`encode_update`, :func:`encode_delta`, :func:`decode_delta` (docs/formats.md).
* **Epoch order** -- :class:`EpochAligner` (pure): how the records of several
  partitions (and topics) become one deterministic stream, see below.
* **Broker-bound** -- :class:`KafkaUpdateSource`, :class:`KafkaDeltaSink` (the
  ``DeltaSink`` and ``SnapshotSink`` protocols of :mod:`connectors.base`, transactional),
  :class:`KafkaDeadLetterSink` (value = the original record bytes; headers ``reason``,
  ``source``, ``topic``, ``partition``, ``offset``), :func:`read_deltas`,
  :func:`read_last_epoch`, :func:`produce_updates` (updates to :func:`partition_of`,
  markers to every partition), :func:`ensure_topic`.  kafka-python is imported lazily,
  so the pure parts import without it.  The source turns kafka-python's pure-Python CRC
  check off unless ``check.crcs=true`` is given (it cost a tenth of the run time).

Deterministic order of a multi-partition input
----------------------------------------------
The streams of an input are its ``(topic, partition)`` pairs, ordered by topic (the
single topic, or the relation topics sorted by relation name) then partition number.
A marker ``{"op": "*"}`` must be written to *every* stream (``ivmflow produce`` does).
Epoch ``k`` is: stream 0's records between its ``(k-1)``-th and ``k``-th marker, then
stream 1's, and so on, then an :class:`EpochEnd`.  An epoch is released only when every
stream has reached its ``k``-th marker, so the order never depends on fetch timing.  At
the end of a bounded read (``--stop-at-end``) the records after the last marker of each
stream follow in the same stream order and form the final epoch.  Producers must send
all updates of one tuple to one partition (key by relation and row, as ``produce``
does): Kafka keeps per-partition order, so every prefix of the aligned stream is a valid
bag.  ``--epoch N`` (epochs of N updates) is only defined for a single stream; with more
streams it is refused, because "N updates" would depend on how partitions interleave.

Delivery guarantee (exactly once, per epoch)
--------------------------------------------
:class:`KafkaDeltaSink` writes each epoch's delta records in ONE producer transaction
(``transactional.id`` stable: derived from the query and the output topic, or given),
together with the source offsets of the epoch's end (``send_offsets_to_transaction``),
so the group's committed offsets always sit at an epoch boundary and a
``read_committed`` consumer sees an epoch entirely or not at all.  Every record carries
its ``epoch``; on start the sink reads (read_committed) the highest epoch already in
the delta topic and skips writing epochs up to it, so a runner that re-runs epochs
after a crash (Spark batch replays, Flink restores, the local runner's replay) never
duplicates one.  An epoch whose records the broker did not take (kafka-python fails a
timed-out batch without failing the transaction, so the sink checks every record before
committing) is aborted and retried whole by a fresh producer, at most
:data:`EPOCH_ATTEMPTS` times, then :class:`KafkaDeliveryError` stops the run; a sink
fenced by another producer with its ``transactional.id`` stops at once. The first epoch
a producer commits after fencing an older one (a restart, a retry) is read back: if the
broker took a record of the fenced producer into it, :class:`KafkaEpochMismatchError`
stops the run (it cannot be undone, but it is never silent).

Engine state on restart (local runner): the update topic is re-read from its beginning
and the state rebuilt, already-committed epochs suppressed -- the same path as the file
``--resume``.  Chosen over a state checkpoint because it is correct by
construction (the state is a function of the update prefix) and needs no second store;
the price is replay time and an update topic that keeps its whole history (no deletion
by retention).  The committed group offsets then serve monitoring (lag) and
:meth:`KafkaUpdateSource.committed` lets a runner with a state checkpoint resume there.

Example (pure parts)::

    >>> from core.schema import Column, Relation, Schema
    >>> s = Schema({"G": Relation("G", (Column("src", "INT"), Column("dst", "INT")))})
    >>> decode_update(b'{"op": "-", "relation": "G", "row": {"src": 1, "dst": 2}, "mult": 2}',
    ...               s, source="kafka topic 'u' partition 0 offset 5")
    Update(op='-', relation='G', row=(1, 2), mult=2, source="kafka topic 'u' partition 0 offset 5")
    >>> encode_delta(7, -1, (1, 2), ("src", "dst"))
    b'{"epoch":7,"mult":-1,"row":{"src":1,"dst":2}}'
    >>> ep = parse_kafka_url("kafka://127.0.0.1:9092/updates?group.id=g&topics=per-relation")
    >>> ep.bootstrap, ep.topic, ep.group_id, ep.topic_for("G")
    ('127.0.0.1:9092', 'updates', 'g', 'updates.G')
"""

from __future__ import annotations

from connectors.kafka.align import AlignedEpoch, EpochAligner
from connectors.kafka.codec import (
    SKIP_HINT,
    decode_delta,
    decode_update,
    encode_delta,
    encode_update,
    record_source,
    unique_columns,
)
from connectors.kafka.config import (
    BOOTSTRAP_TIMEOUT_MS,
    KafkaConfigError,
    KafkaEndpoint,
    KafkaUrl,
    TopicPartitionKey,
    default_id,
    parse_kafka_url,
)
from connectors.kafka.sink import (
    EPOCH_ATTEMPTS,
    KafkaDeadLetterSink,
    KafkaDeliveryError,
    KafkaDeltaSink,
    KafkaEpochMismatchError,
    KafkaFencedError,
)
from connectors.kafka.source import (
    KafkaHistoryError,
    KafkaStallError,
    KafkaUpdateSource,
    OnError,
    StopRequested,
)
from connectors.kafka.topics import (
    ensure_topic,
    partition_of,
    produce_updates,
    read_deltas,
    read_last_epoch,
)

__all__ = [
    "BOOTSTRAP_TIMEOUT_MS",
    "EPOCH_ATTEMPTS",
    "SKIP_HINT",
    "OnError",
    "TopicPartitionKey",
    "AlignedEpoch",
    "EpochAligner",
    "KafkaConfigError",
    "KafkaDeliveryError",
    "KafkaEpochMismatchError",
    "KafkaFencedError",
    "KafkaDeadLetterSink",
    "KafkaDeltaSink",
    "KafkaEndpoint",
    "KafkaUrl",
    "KafkaUpdateSource",
    "StopRequested",
    "KafkaHistoryError",
    "KafkaStallError",
    "decode_delta",
    "decode_update",
    "default_id",
    "encode_update",
    "encode_delta",
    "ensure_topic",
    "parse_kafka_url",
    "partition_of",
    "produce_updates",
    "read_deltas",
    "read_last_epoch",
    "record_source",
    "unique_columns",
]

