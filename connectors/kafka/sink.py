"""The delta and snapshot sink (one producer transaction per epoch) and the
dead-letter sink.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from connectors.kafka.codec import (
    encode_delta,
    unique_columns,
)
from connectors.kafka.config import (
    KafkaEndpoint,
    TopicPartitionKey,
)
from connectors.kafka.source import KafkaUpdateSource
from connectors.kafka.topics import (
    ensure_topic,
    read_epoch_records,
    read_last_epoch,
)
from core.errors import InputError, IvmflowError
from core.faults import fault_point
from core.records import EpochDelta
from core.schema import Row

EPOCH_ATTEMPTS = 3
"""How often the delta sink tries an epoch's transaction before it stops the run."""

ANSWER_MARGIN_S = 5.0
"""Seconds beyond the producer's own delivery and request timeouts that the sink waits
for the broker to take an epoch's records, commit or abort, before it calls the attempt
failed: kafka-python's ``flush()`` and ``commit_transaction()`` wait without a bound."""


def answer_timeout_s(producer_config: Mapping[str, Any]) -> float:
    """How long one step of an epoch's transaction may wait for the broker: the
    producer's delivery timeout plus its request timeout (kafka-python's defaults when
    unset) plus :data:`ANSWER_MARGIN_S`.

    >>> answer_timeout_s({"delivery_timeout_ms": 2000, "request_timeout_ms": 1000})
    8.0
    >>> answer_timeout_s({})
    155.0
    """
    delivery = int(producer_config.get("delivery_timeout_ms", 120_000))
    request = int(producer_config.get("request_timeout_ms", 30_000))
    return (delivery + request) / 1000 + ANSWER_MARGIN_S


def end_transaction(producer: Any, commit: bool, timeout_s: float) -> None:
    """Commit (or abort) ``producer``'s open transaction, waiting at most ``timeout_s``
    for the broker's answer: a broker that stops answering mid-commit raises
    ``KafkaTimeoutError`` (the epoch is then in doubt, and the sink's next producer
    settles it) instead of hanging the run. kafka-python's own ``commit_transaction``
    waits on the same result without a bound."""
    from kafka.errors import KafkaTimeoutError

    manager = getattr(producer, "_transaction_manager", None)
    sender = getattr(producer, "_sender", None)
    if manager is None or sender is None:  # (another client version: its own wait)
        (producer.commit_transaction if commit else producer.abort_transaction)()
        return
    result = manager.begin_commit() if commit else manager.begin_abort()
    sender.wakeup()
    if not result.wait(timeout_ms=timeout_s * 1000):
        what = "commit" if commit else "abort"
        msg = f"the broker did not answer the transaction's {what} in {timeout_s:.0f} s"
        raise KafkaTimeoutError(msg)


class KafkaDeliveryError(IvmflowError):
    """An epoch could not be delivered to the broker; nothing of it was committed."""


class KafkaEpochMismatchError(KafkaDeliveryError):
    """An epoch committed right after a fencing (a restart, a retry) does not hold what
    the sink wrote: the broker took records of the fenced producer into the committed
    transaction."""


class KafkaFencedError(KafkaDeliveryError):
    """A newer producer with the sink's transactional id took over: nothing of the epoch
    was committed, and this sink's producer can commit nothing any more."""




_SOURCE_RE = re.compile(r"kafka topic '(.*)' partition (-?[0-9]+) offset (-?[0-9]+)")
"""Parses :func:`record_source` (topic names hold no quote: Kafka allows ``[a-zA-Z0-9._-]``)."""


def _dead_letter_record(
    error: InputError, raw: bytes | None
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """Value = the original record bytes; headers ``reason``, ``source``, ``hint`` and
    (for Kafka records) ``topic``, ``partition``, ``offset``.

    >>> from connectors.kafka.codec import record_source
    >>> err = InputError(record_source("u", 1, 9), "{", "JSON", "'{'")
    >>> value, headers = _dead_letter_record(err, b"{")
    >>> value, dict(headers)["offset"], dict(headers)["reason"]
    (b'{', b'9', b"expected JSON, found '{'")
    """
    value = raw if raw is not None else error.record.encode("utf-8")
    headers = [("reason", error.reason.encode()), ("source", error.source.encode())]
    m = _SOURCE_RE.fullmatch(error.source)
    if m is not None:  # machine-readable too
        headers += [("topic", m.group(1).encode()), ("partition", m.group(2).encode()),
                    ("offset", m.group(3).encode())]
    if error.hint:
        headers.append(("hint", error.hint.encode()))
    return value, headers


class KafkaDeltaSink:
    """Deltas (or snapshots) to a Kafka topic, one producer transaction per epoch.

    Implements :class:`~connectors.base.DeltaSink` and ``SnapshotSink``.  Records are
    :func:`encode_delta` JSON, keyed by the epoch, all in partition 0 (so a reader sees
    epochs in order).  ``last_committed`` is the highest
    epoch (snapshot) already in the topic, read ``read_committed`` at start: writes of
    epochs up to it are skipped, so re-running epochs never duplicates them.

    Call :meth:`bind_source` with a :class:`KafkaUpdateSource` to commit its epoch-end
    offsets in each epoch's transaction (also for epochs without rows).  Dead letters
    given to :meth:`dead_letter_sink` are buffered and written in the next epoch's
    transaction (and dropped while epochs are being re-run), so they are exactly-once too.
    The topic is created (one partition) when missing.
    """

    def __init__(
        self,
        endpoint: KafkaEndpoint,
        columns: Sequence[str],
        *,
        transactional_id: str,
        kind: Literal["epoch", "snapshot"] = "epoch",
    ) -> None:
        self.endpoint = endpoint
        self.topic = endpoint.topic
        self.columns = unique_columns(columns)
        self.kind = kind
        self.transactional_id = endpoint.transactional_id or transactional_id
        ensure_topic(endpoint, self.topic, 1)
        # The producer first: its init fences every older producer with this id, so no
        # epoch can be committed between reading the topic's last epoch and writing.
        self._producer: Any = self._new_producer()
        self.last_committed = self._read_last()
        self._read_back = True
        """Read the next committed epoch back (:meth:`_check_committed`): this sink's
        producer has just fenced every older one with its id."""
        self._source: KafkaUpdateSource | None = None
        self._dead: list[tuple[str, bytes, list[tuple[str, bytes]]]] = []
        self._seen = 0
        self.failed_attempts = 0
        """Epoch transactions aborted because the broker did not take a record."""
        self._answer_timeout_s = answer_timeout_s(endpoint.client_config("producer"))
        self.closed = False

    @property
    def last_committed_epoch(self) -> int:
        return self.last_committed

    @property
    def last_committed_snapshot(self) -> int:
        return self.last_committed

    def bind_source(self, source: KafkaUpdateSource) -> None:
        """Commit ``source.positions()`` for its group in every epoch's transaction."""
        self._source = source

    def dead_letter_sink(self, topic: str, raw: Callable[[str], bytes | None] | None = None
                         ) -> KafkaDeadLetterSink:
        """A dead-letter sink writing to ``topic`` inside this sink's epoch transactions."""
        ensure_topic(self.endpoint, topic, 1)
        return KafkaDeadLetterSink(self.endpoint, topic, raw=raw, via=self)

    def _buffer_dead(self, topic: str, value: bytes, headers: list[tuple[str, bytes]]) -> None:
        if self._seen + 1 > self.last_committed:  # not a re-run epoch
            self._dead.append((topic, value, headers))

    def write_epoch(self, delta: EpochDelta) -> None:
        """Write the epoch's rows (and the bound source's offsets, buffered dead
        letters) in one transaction; epochs up to :attr:`last_committed` are skipped."""
        self._write(delta.epoch, delta.rows)

    def write_snapshot(self, k: int, rows: Sequence[tuple[int, Row]]) -> None:
        self._write(k, rows)

    def _write(self, k: int, rows: Sequence[tuple[int, Row]]) -> None:
        self._seen = max(self._seen, k)
        if k <= self.last_committed:
            self._dead.clear()
            return
        offsets = self._offsets()
        if not rows and not offsets and not self._dead:
            return
        from kafka.errors import KafkaError

        failure = ""
        in_doubt = False  # (the last transaction's commit was sent and not answered)
        retried = False
        for _ in range(EPOCH_ATTEMPTS):
            if self._producer is None:
                try:
                    self._producer = self._new_producer()
                except KafkaError as e:  # the broker did not answer in max.block.ms
                    failure = f"{type(e).__name__}: {e}"
                    continue
                # The failed attempt's commit may have reached the broker; the new
                # producer's fencing has settled it either way, so the topic now says.
                in_doubt = False
                if rows and self._read_last() >= k:
                    failure = ""
                    break
            failed = self._transaction(k, rows, offsets)
            if failed is None:
                break
            failure, in_doubt = failed
            retried = True
            self.failed_attempts += 1
            # The epoch was aborted (or is in doubt); a fresh producer with the same id
            # fences this one, then the epoch is written again, whole.
            with contextlib.suppress(Exception):
                self._producer.close(timeout=1)
            self._producer = None
        else:
            last = self.last_committed
            if in_doubt:
                # No producer could be made since: nothing has settled that commit, and
                # a broker that takes it late commits the epoch whole (the restart's
                # fencing producer settles it either way before the topic is read).
                msg = (f"Kafka sink {self.endpoint.url}: {self.kind} {k} could not be "
                       f"confirmed in {EPOCH_ATTEMPTS} attempts ({failure}); its last "
                       "commit was sent but not answered, so the broker may still commit "
                       "it, whole, with its source offsets; nothing else of it can land. "
                       "Check the broker, then run again: the run resumes after the last "
                       f"{self.kind} the topic holds ({last}, or {k} if that commit landed).")
            else:
                msg = (f"Kafka sink {self.endpoint.url}: {self.kind} {k} could not be "
                       f"written in {EPOCH_ATTEMPTS} attempts ({failure}); nothing of it was "
                       "committed, nor were its source offsets. Check the broker, then run "
                       f"again: the run resumes after the last committed {self.kind} "
                       f"({last}).")
            raise KafkaDeliveryError(msg)
        self._dead.clear()
        if rows:
            if retried or self._read_back:
                self._read_back = False
                self._check_committed(k, rows)
            self.last_committed = k

    def _check_committed(self, k: int, rows: Sequence[tuple[int, Row]]) -> None:
        """After the first epoch a producer commits once it has fenced an older one (a
        restart, or a retry after a failed attempt): fail loud unless the topic holds
        exactly the epoch's records. A broker must reject a record of the fenced
        producer that reaches it after the fencing (its producer epoch is stale); one
        that does not (noida-db frozen under CPU starvation, about 1 in 8 trials)
        commits it with the new transaction, and readers would see the epoch wrong."""
        from collections import Counter

        wrote = Counter(encode_delta(k, mult, row, self.columns, key=self.kind)
                        for mult, row in rows)
        found = Counter(read_epoch_records(self.endpoint, k, key=self.kind))
        if found == wrote:
            return
        extra, missing = found - wrote, wrote - found
        msg = (f"Kafka sink {self.endpoint.url}: {self.kind} {k}, the first committed "
               "after this sink fenced an older producer (a restart or a failed attempt: "
               f"{self.failed_attempts} so far), was read back: the topic {self.topic!r} "
               f"holds {sum(found.values())} records for it where this run wrote "
               f"{len(rows)} ({sum(extra.values())} extra, {sum(missing.values())} "
               f"missing; e.g. {next(iter(extra or missing))!r}): the broker took a record "
               "of the fenced producer into the committed transaction. Readers of the "
               f"topic see {self.kind} {k} wrong from here on. Check the broker's "
               "transaction fencing, then write the deltas again from the start to a "
               "new topic.")
        raise KafkaEpochMismatchError(msg)

    def _read_last(self) -> int:
        """The highest epoch (snapshot) committed to the output (0: none)."""
        return read_last_epoch(self.endpoint, key=self.kind)

    def _records(self, k: int, rows: Sequence[tuple[int, Row]]
                 ) -> list[tuple[str, bytes | None, bytes]]:
        """``(topic, key, value)`` of epoch ``k``'s records, all to partition 0 (the
        Debezium sink, :mod:`connectors.kafka.debezium_sink`, writes others)."""
        key = str(k).encode()
        return [(self.topic, key, encode_delta(k, mult, row, self.columns, key=self.kind))
                for mult, row in rows]

    def _new_producer(self) -> Any:
        from kafka import KafkaProducer

        cfg = self.endpoint.client_config("producer")
        cfg.update(transactional_id=self.transactional_id, enable_idempotence=True, acks="all")
        # kafka-python sleeps retry.backoff.ms between finding the transaction coordinator
        # and asking it for a producer id: 100 ms by default made every sink's start (and
        # every Spark batch writing from an executor) 0.2 s; loopback answers in 10 ms.
        cfg.setdefault("retry_backoff_ms", 10)
        producer = KafkaProducer(**cfg)
        # Fences an older producer with this id (a crashed run, or a failed attempt) and
        # aborts its open transaction, so its half-written epoch never becomes visible.
        producer.init_transactions()
        return producer

    def _transaction(self, k: int, rows: Sequence[tuple[int, Row]],
                     offsets: Mapping[TopicPartitionKey, int]) -> tuple[str, bool] | None:
        """Write one epoch in one transaction: None when committed, else why not (a
        Kafka error) and whether it is in doubt (its commit was sent and not answered;
        otherwise the transaction is aborted)."""
        from kafka import OffsetAndMetadata, TopicPartition
        from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError

        p = self._producer
        committing = False  # (from the commit on, a failure leaves the epoch in doubt)
        bound = self._answer_timeout_s
        p.begin_transaction()
        try:
            sent = [p.send(topic, value, key=key, partition=0)  # (topic order = epoch order)
                    for topic, key, value in self._records(k, rows)]
            sent += [p.send(topic, value, headers=headers) for topic, value, headers in self._dead]
            if offsets and self._source is not None:
                p.send_offsets_to_transaction(
                    {TopicPartition(t, q): OffsetAndMetadata(o, "", -1)
                     for (t, q), o in offsets.items()},
                    self._source.group_id,
                )
            p.flush(timeout=bound)  # (raises KafkaTimeoutError past it)
            # kafka-python fails a batch that timed out without failing the transaction,
            # so committing now would lose its records silently.
            failed = next((f.exception for f in sent if f.failed()), None)
            if failed is None:
                fault_point("sink.write")  # (the records are sent, not committed)
                committing = True
                end_transaction(p, commit=True, timeout_s=bound)
                fault_point("sink.commit")
                return None
        except KafkaError as e:
            failed = e
        except BaseException:
            with contextlib.suppress(Exception):
                end_transaction(p, commit=False, timeout_s=bound)
            raise
        if isinstance(failed, (ProducerFencedError, InvalidProducerEpochError)):
            # Not retried: taking the id back would fence the run that took it over.
            msg = (f"Kafka sink {self.endpoint.url}: {self.kind} {k} was not written: "
                   f"another producer with transactional.id {self.transactional_id!r} took "
                   "over (a second run of the same query and output?). Stop the other run, "
                   "or give each run its own transactional.id / output topic.")
            raise KafkaFencedError(msg) from failed
        with contextlib.suppress(Exception):
            end_transaction(p, commit=False, timeout_s=bound)
        return f"{type(failed).__name__}: {failed}", committing

    def _offsets(self) -> dict[TopicPartitionKey, int]:
        return self._source.positions() if self._source is not None else {}

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._producer is not None:
                self._producer.close()


class KafkaDeadLetterSink:
    """Rejected records to a dead-letter topic: value = the original record bytes
    (``raw(source)``, else the record text), headers ``reason``, ``source`` (topic,
    partition, offset), ``hint``.  Standalone it sends and flushes each record (at least
    once); made by :meth:`KafkaDeltaSink.dead_letter_sink` it rides the epoch
    transactions (exactly once).  ``count`` counts records written by this run."""

    def __init__(
        self,
        endpoint: KafkaEndpoint,
        topic: str,
        *,
        raw: Callable[[str], bytes | None] | None = None,
        via: KafkaDeltaSink | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.topic = topic
        self.raw = raw
        self._via = via
        self._producer: Any = None
        self.count = 0
        self.skip_while: Callable[[], bool] | None = None
        """Standalone sinks: drop records while this holds (a runner re-running epochs
        that are already committed sets it, so their bad records are not sent again)."""
        if via is None:
            from kafka import KafkaProducer

            ensure_topic(endpoint, topic, 1)
            cfg = endpoint.client_config("producer")
            cfg.update(acks="all")
            self._producer = KafkaProducer(**cfg)

    def write(self, error: InputError) -> None:
        if self.skip_while is not None and self.skip_while():
            return
        raw = self.raw(error.source) if self.raw is not None else None
        value, headers = _dead_letter_record(error, raw)
        self.count += 1
        if self._via is not None:
            self._via._buffer_dead(self.topic, value, headers)
        else:
            self._producer.send(self.topic, value, headers=headers)
            self._producer.flush()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None
