"""The update source: a consumer-group reader of one topic or one per relation,
releasing whole epochs in the order of :class:`EpochAligner`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from connectors.base import DeadLetterSink
from connectors.kafka.align import EpochAligner
from connectors.kafka.codec import (
    decode_update,
    record_source,
)
from connectors.kafka.config import (
    KafkaEndpoint,
    TopicPartitionKey,
)
from connectors.kafka.topics import (
    _partitions,
)
from core.errors import InputError, IvmflowError
from core.records import EpochEnd, Record, Update
from core.schema import Schema

OnError = Literal["fail", "skip"]

class StopRequested(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by a source (or a runner's delta callback) to stop at an epoch boundary
    after SIGINT/SIGTERM; the open, incomplete epoch is not emitted."""


class KafkaHistoryError(IvmflowError):
    """The update topic no longer holds records the run needs (exit code 1)."""


class KafkaStallError(IvmflowError):
    """A bounded read (``--stop-at-end``) got no record for :func:`stall_limit` seconds
    though the partitions' end offsets say more exist (exit code 1)."""


STALL_S = 8.0
"""How long a ``--stop-at-end`` read may fetch nothing while records it knows of are
still unread before it fails (a broker gone, or one that cannot serve them)."""


RECEIVE_RATE = 20e6
"""Bytes per second a loaded machine is sure to receive a fetch response at (the stall
limit grows with the largest response the client accepts)."""


def stall_limit(endpoint: KafkaEndpoint) -> float:
    """How long polls may fetch nothing while records are known to be unread: at least
    :data:`STALL_S`, or the time to receive the largest response the client accepts
    (``receive.message.max.bytes``) at :data:`RECEIVE_RATE` (such a response arrives
    over many polls that return nothing).

    >>> from connectors.kafka.config import parse_kafka_url
    >>> stall_limit(parse_kafka_url("kafka://h:1/t"))
    8.0
    >>> stall_limit(parse_kafka_url("kafka://h:1/t?receive.message.max.bytes=2000000000"))
    100.0
    """
    frame = endpoint.client_config("consumer").get("receive_message_max_bytes", 100_000_000)
    return max(STALL_S, int(frame) / RECEIVE_RATE)


def missing_records(bootstrap: str, behind: Mapping[str, tuple[int, int]],
                    seconds: float) -> str:
    """The message of a read that fetched nothing for ``seconds`` while ``behind``
    (``"topic:partition"`` -> (the next offset to read, the end offset)) says records
    exist.

    >>> print(missing_records("h:1", {"u:0": (380000, 879334)}, 8))  # doctest: +ELLIPSIS
    kafka topic 'u' partition 0: expected the records from offset 380000 up to 879334, ...
    """
    where = "; ".join(
        f"kafka topic {k.rsplit(':', 1)[0]!r} partition {k.rsplit(':', 1)[1]}: expected the "
        f"records from offset {nxt} up to {end}" for k, (nxt, end) in behind.items())
    return (f"{where}, fetched none in {seconds:.0f} s from {bootstrap}; the broker holds "
            f"them (its end offsets say so) but did not serve them: check that it runs, "
            f"and if the consumer logged 'Invalid frame length', a fetch response was "
            f"larger than the client accepts (a broker that ignores fetch.max.bytes, such "
            f"as noida-db, sends every unread record of the fetched partitions at once): "
            f"raise receive.message.max.bytes (a URL option, kafka-python's default is "
            f"100000000) above the unread bytes")


@dataclass
class _Item:
    stream: int
    offset: int
    record: Record | InputError
    raw: bytes | None


class KafkaUpdateSource:
    """The update records of an input topic (or per-relation topics), in the
    deterministic epoch order of the module docstring.  Iterate it once.

    Reads from the beginning of every stream (see "Delivery guarantee"), or from
    ``start_offsets`` (a state checkpoint's, :mod:`dataflow.runners.local.checkpoint`), as consumer
    group ``group_id`` (``read_committed``; offsets are committed by the sink's
    transaction, never automatically).  Bad records raise :class:`InputError` naming
    topic, partition and offset at their place in the stream, or with
    ``on_error="skip"`` go to ``dead_letter`` (:meth:`raw_record` gives their original
    bytes).  ``stop_at_end``: stop after the records that were in the topics when the
    iteration started.  Otherwise the source is unbounded and ends only by raising
    :class:`StopRequested` once ``stop_requested()`` is true and it is idle or between
    two aligned epochs.

    :meth:`positions` is the next offset to read per ``(topic, partition)`` after the
    last record yielded: right after an :class:`EpochEnd` (or the N-th update of a
    count-cut epoch) these are the epoch-end offsets to commit.
    """

    def __init__(
        self,
        endpoint: KafkaEndpoint,
        schema: Schema,
        *,
        group_id: str,
        on_error: OnError = "fail",
        dead_letter: DeadLetterSink | None = None,
        stop_at_end: bool = False,
        stop_requested: Callable[[], bool] = lambda: False,
        poll_timeout_ms: int = 200,
        start_offsets: Mapping[TopicPartitionKey, int] | None = None,
    ) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.endpoint = endpoint
        self.schema = schema
        self.group_id = group_id
        self.on_error = on_error
        self.dead_letter = dead_letter
        self.stop_at_end = stop_at_end
        self.stop_requested = stop_requested
        self.poll_timeout_ms = poll_timeout_ms
        cfg = endpoint.client_config("consumer")
        # kafka-python checks CRCs in pure Python (a tenth of the run time); the broker
        # has checked them on write and TCP guards the wire. ``check.crcs=true`` restores.
        cfg.setdefault("check_crcs", False)
        cfg.update(group_id=group_id, enable_auto_commit=False, isolation_level="read_committed",
                   auto_offset_reset="earliest")
        self.consumer = KafkaConsumer(**cfg)
        self._relations: list[str | None] = []
        self.streams: list[TopicPartitionKey] = []
        try:
            for topic, relation in self._input_topics():
                for p in _partitions(self.consumer, endpoint, topic):
                    self.streams.append((topic, p))
                    self._relations.append(relation)
        except BaseException:
            self.consumer.close()
            raise
        self._tps = [TopicPartition(t, p) for t, p in self.streams]
        self._index = {tp: i for i, tp in enumerate(self._tps)}
        self.consumer.assign(self._tps)
        try:
            self._positions: dict[TopicPartitionKey, int] = self._seek(start_offsets or {})
        except BaseException:
            self.consumer.close()
            raise
        self._raw: OrderedDict[str, bytes | None] = OrderedDict()
        self.records_read = 0
        self.stall_s = stall_limit(endpoint)
        self._idle_s = 0.0
        self._idle_at: dict[TopicPartitionKey, int] | None = None

    def _seek(self, start: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """Position every stream at ``start`` (default: offset 0), refusing to start
        where records the state needs were deleted (retention): reading from a later
        offset would silently give a wrong result."""
        firsts = self.consumer.beginning_offsets(self._tps)
        for key, tp in zip(self.streams, self._tps):
            want = start.get(key, 0)
            if firsts[tp] > want:
                what = (f"the checkpoint's offset {want}" if key in start
                        else "offset 0 (the local runner rebuilds its state from the "
                             "whole topic)")
                msg = (f"kafka topic {tp.topic!r} partition {tp.partition}: expected the "
                       f"records from {what} on, found the partition starting at offset "
                       f"{firsts[tp]} (deleted by retention or DeleteRecords); keep the "
                       f"history (retention.ms=-1) or run with --checkpoint DIR, which "
                       f"needs the records after its newest checkpoint only")
                raise KafkaHistoryError(msg)
            self.consumer.seek(tp, want)
        known = set(self.streams)
        return {k: o for k, o in start.items() if k in known}

    def _input_topics(self) -> list[tuple[str, str | None]]:
        """``(topic, relation)`` of the streams, in stream order (subclasses add)."""
        return self.endpoint.input_topics(self.schema)

    # -- what runners use ------------------------------------------------------------

    def positions(self) -> dict[TopicPartitionKey, int]:
        """Next offset per stream after the last yielded record (only streams read)."""
        return dict(self._positions)

    def committed(self) -> dict[TopicPartitionKey, int]:
        """The group's committed offsets (streams without a commit are left out)."""
        out = {}
        for key, tp in zip(self.streams, self._tps):
            off = self.consumer.committed(tp)
            if off is not None:
                out[key] = off
        return out

    def commit(self) -> None:
        """Commit :meth:`positions` for the group outside any transaction (sinks that
        are not Kafka; the Kafka sink commits in its transaction instead)."""
        from kafka import OffsetAndMetadata, TopicPartition

        pos = self.positions()
        if pos:
            self.consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                                  for (t, p), o in pos.items()})

    def raw_record(self, source: str) -> bytes | None:
        """The original bytes of a recently yielded or rejected record, by its source."""
        return self._raw.get(source)

    def close(self) -> None:
        self.consumer.close()

    # -- iteration -------------------------------------------------------------------

    def __iter__(self) -> Iterator[Record]:
        aligner: EpochAligner[int, _Item] | None = (
            EpochAligner(range(len(self.streams))) if len(self.streams) > 1 else None
        )
        ends = self._end_offsets() if self.stop_at_end else None
        while True:
            polled = time.monotonic()
            batch = self._poll()
            if not batch:
                if ends is not None and self._reached(ends):
                    break
                self._idle(ends, time.monotonic() - polled)
                if self.stop_requested():
                    raise StopRequested
                continue
            self._idle_s = 0.0
            for item in batch:
                if aligner is None:
                    yield from self._release(item)
                elif isinstance(item.record, EpochEnd):
                    aligner.mark(item.stream, item)
                else:
                    aligner.push(item.stream, item)
            if aligner is not None:
                for epoch in aligner.pop_epochs():
                    if self.stop_requested():
                        raise StopRequested  # at an epoch boundary: nothing half-done
                    for item in epoch.items:
                        yield from self._release(item)
                    for marker in epoch.markers:
                        self._advance(marker)
                    yield EpochEnd(epoch.markers[0].record.source
                                   if isinstance(epoch.markers[0].record, EpochEnd) else "")
        if aligner is not None:
            for item in aligner.tail():
                yield from self._release(item)

    def _end_offsets(self) -> dict[TopicPartitionKey, int]:
        ends = self.consumer.end_offsets(self._tps)
        return {(tp.topic, tp.partition): off for tp, off in ends.items()}

    def _reached(self, ends: Mapping[TopicPartitionKey, int]) -> bool:
        from kafka import TopicPartition

        return all(self.consumer.position(TopicPartition(t, p)) >= end
                   for (t, p), end in ends.items())

    def _idle(self, ends: Mapping[TopicPartitionKey, int] | None, seconds: float) -> None:
        """A bounded read's poll of ``seconds`` fetched nothing though records before
        ``ends`` are unread: after :attr:`stall_s` seconds of such polls in a row (the time
        spent between polls, maintaining the view, does not count) with no partition's
        position moving, raise :class:`KafkaStallError` naming what is missing, rather
        than wait for it without end."""
        if ends is None:
            return
        from kafka import TopicPartition

        at = {k: self.consumer.position(TopicPartition(*k)) for k in ends}
        if at != self._idle_at:
            self._idle_at, self._idle_s = at, 0.0  # (past transaction markers: progress)
        self._idle_s += seconds
        if self._idle_s >= self.stall_s:
            behind = {f"{t}:{p}": (at[t, p], end) for (t, p), end in ends.items()
                      if at[t, p] < end}
            raise KafkaStallError(missing_records(self.endpoint.bootstrap, behind,
                                                  self._idle_s))

    def _poll(self) -> list[_Item]:
        got = self.consumer.poll(timeout_ms=self.poll_timeout_ms, max_records=5000)
        items: list[_Item] = []
        # A poll may return several partitions; keep each partition's order (the aligner
        # orders across partitions, a single stream has only one).
        for tp, recs in sorted(got.items(), key=lambda kv: self._index[kv[0]]):
            i = self._index[tp]
            relation = self._relations[i]
            for r in recs:
                source = record_source(tp.topic, tp.partition, r.offset)
                try:
                    rec: Record | InputError = decode_update(
                        r.value, self.schema, source=source, relation=relation
                    )
                except InputError as err:
                    rec = err
                items.append(_Item(i, r.offset, rec, r.value))
        self.records_read += len(items)
        return items

    def _advance(self, item: _Item) -> None:
        self._positions[self.streams[item.stream]] = item.offset + 1

    def _release(self, item: _Item) -> Iterator[Record]:
        self._advance(item)
        rec = item.record
        if isinstance(rec, InputError):
            self._remember(rec.source, item.raw)
            if self.on_error == "fail":
                raise rec
            if self.dead_letter is not None:
                self.dead_letter.write(rec)
            return
        if isinstance(rec, Update):
            self._remember(rec.source, item.raw)
        yield rec

    def _remember(self, source: str, raw: bytes | None) -> None:
        self._raw[source] = raw
        if len(self._raw) > 10_000:
            self._raw.popitem(last=False)
