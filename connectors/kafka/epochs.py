"""Whole epochs of a Kafka update topic read from explicit offsets: the reading core that
the Spark and Flink runners share (the local runner reads through
:mod:`connectors.kafka`'s consumer-group source).

A distributed runner keeps its read position in its own fault-tolerant store (the Spark
checkpoint's offset log, Flink operator state), not in a consumer group. So the
position is plain data, :class:`ReadPosition`: the next offset of every partition, the
stop offsets of ``--stop-at-end`` (taken once, when the run first starts, and carried
along so that a restarted run stops at the same place), the
:class:`dataflow.distributed.partitions.EpochCursor` (sequence and epoch numbers) and ``done``.

Positions always sit at epoch boundaries: :meth:`EpochReader.read` fetches what the
streams (the ``(topic, partition)`` pairs of the input) hold, and releases, through
:class:`connectors.kafka.EpochAligner`, only the epochs that every stream has closed with
its ``{"op": "*"}`` marker, in the order of :mod:`connectors.kafka` (epoch k = stream 0's
records before its k-th marker, then stream 1's, ...), moving each stream's offset just
past its k-th marker. Records after the last complete epoch are read again next time,
so nothing has to be buffered in the position. At the end of a ``--stop-at-end`` run
the rest (:meth:`EpochAligner.tail`) is the final epoch. With a single stream every
record fetched is released, so ``--epoch N`` works as with a file (with several
streams it is refused, as by :mod:`connectors.kafka`). Re-reading a range between two
positions (:meth:`EpochReader.read_between`, a replayed Spark micro-batch) gives exactly
the same records.

This module imports kafka-python; ``operators/`` and ``plans/`` never do.

Example (needs a broker; ``updates`` holds the stream of ``ivmflow produce``)::

    reader = EpochReader(parse_kafka_url("kafka://127.0.0.1:9092/updates"), schema)
    pos = reader.initial(stop_at_end=True)
    while not pos.done:
        numbered, pos = reader.read(pos, max_records=10_000)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from connectors.kafka import (
    EpochAligner,
    KafkaConfigError,
    KafkaEndpoint,
    decode_update,
    parse_kafka_url,
    record_source,
)
from connectors.kafka.source import missing_records, stall_limit
from core.epochs import EpochCursor, NumberedRecord
from core.records import EpochEnd, Record
from core.schema import Schema

__all__ = ["EpochReader", "ReadPosition", "align", "parse_kafka_url", "stream_key"]

POLL_MS = 200
"""How long one poll waits for data."""

MAX_FETCH_S = 120.0
"""The longest :meth:`EpochReader.read` waits for records the end offsets say exist
before it fails (a fetch as long as :func:`~connectors.kafka.source.stall_limit` that
gets none at all fails at once: a failing broker ends the run within seconds, not
minutes)."""


def stream_key(topic: str, partition: int) -> str:
    """How a position names a stream (Kafka topic names have no ``:``).

    >>> stream_key("updates", 1)
    'updates:1'
    """
    return f"{topic}:{partition}"


@dataclass
class ReadPosition:
    """Where a runner stands in the input (plain data for checkpoints).

    >>> p = ReadPosition({"u:0": 5, "u:1": 3}, {"u:0": 9, "u:1": 9}, EpochCursor(8, 3, 0, 2))
    >>> ReadPosition.from_dict(p.to_dict()) == p
    True
    """

    offsets: dict[str, int]
    """Next offset to read per stream (just past a marker, or the start)."""
    stop: dict[str, int] | None = None
    """``--stop-at-end``: the end offsets when the run first started; None = unbounded."""
    cursor: EpochCursor = field(default_factory=EpochCursor)
    done: bool = False
    cut: dict[str, Any] | None = None
    """What a change-stream reader needs besides the offsets to go on from here, or to
    read the same records again (:mod:`connectors.kafka.change_epochs`); None for
    ivmflow's own records."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (Spark keeps offsets as JSON)."""
        out = {"offsets": dict(self.offsets),
               "stop": None if self.stop is None else dict(self.stop),
               "cursor": self.cursor.to_dict(), "done": self.done}
        if self.cut is not None:
            out["cut"] = self.cut
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReadPosition:
        stop = d.get("stop")
        return cls(
            {str(k): int(o) for k, o in d["offsets"].items()},
            None if stop is None else {str(k): int(o) for k, o in stop.items()},
            EpochCursor.from_dict(d["cursor"]),
            bool(d.get("done", False)),
            d.get("cut"),
        )


@dataclass
class _Fetched:
    """One stream's records from a start offset: (offset, record) pairs, and the offset
    just past the last one fetched."""

    records: list[tuple[int, Any]]
    """(A :class:`Record`, or what :meth:`EpochReader._decode` makes of a message.)"""
    end: int


def align(fetched: Sequence[_Fetched], final: bool) -> tuple[list[Record], list[int]]:
    """The complete epochs of per-stream fetches in the deterministic order of
    :class:`connectors.kafka.EpochAligner`, and with ``final`` (or a single stream) the
    rest. Returns the records and the next offset of each stream.

    >>> from core.records import Update, EPOCH_END
    >>> u = lambda v: Update("+", "G", (v,))
    >>> p0 = _Fetched([(0, u(1)), (1, EPOCH_END), (2, u(3))], 3)
    >>> p1 = _Fetched([(0, u(2)), (1, EPOCH_END)], 2)
    >>> recs, nxt = align([p0, p1], final=False)
    >>> [getattr(r, "row", "*") for r in recs], nxt
    ([(1,), (2,), '*'], [2, 2])
    >>> recs, nxt = align([p0, p1], final=True)
    >>> [getattr(r, "row", "*") for r in recs], nxt
    ([(1,), (2,), '*', (3,)], [3, 2])
    """
    aligner: EpochAligner[int, tuple[int, Record]] = EpochAligner(list(range(len(fetched))))
    for i, f in enumerate(fetched):
        for item in f.records:
            if isinstance(item[1], EpochEnd):
                aligner.mark(i, item)
            else:
                aligner.push(i, item)
    out: list[Record] = []
    nxt = [f.records[0][0] if f.records else f.end for f in fetched]
    for epoch in aligner.pop_epochs():
        out.extend(rec for _off, rec in epoch.items)
        out.append(epoch.markers[0][1])
        nxt = [off + 1 for off, _rec in epoch.markers]
    if final or len(fetched) == 1:
        out.extend(rec for _off, rec in aligner.tail())
        nxt = [f.end for f in fetched]
    return out, nxt


class EpochReader:
    """Reads whole epochs of an input from explicit offsets (no consumer group: the
    streams are assigned, never subscribed, and nothing is committed to Kafka).

    ``endpoint`` is a :class:`connectors.kafka.KafkaEndpoint` (one topic, or one per
    relation); records are decoded with :func:`connectors.kafka.decode_update` typed by
    ``schema``, and a bad one raises its :class:`core.errors.InputError` (topic,
    partition, offset).
    """

    def __init__(self, endpoint: KafkaEndpoint, schema: Schema) -> None:
        self.endpoint = endpoint
        self.schema = schema
        self._consumer: Any = None
        self._streams: list[tuple[str, int, str | None]] | None = None
        self._ahead: dict[str, tuple[int, list[Any], int]] = {}
        """Per stream: (the first offset, the messages from there, the consumer's
        position after them) of the last fetch (:meth:`_fetch`)."""
        self.stall_s = stall_limit(endpoint)

    # -- connection -----------------------------------------------------------------

    def consumer(self) -> Any:
        if self._consumer is None:
            from kafka import KafkaConsumer

            config = self.endpoint.client_config("consumer")
            config.pop("group_id", None)
            config.update(enable_auto_commit=False, isolation_level="read_committed")
            self._consumer = KafkaConsumer(**config)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._ahead = {}

    def _input_topics(self) -> list[tuple[str, str | None]]:
        """``(topic, relation)`` in stream order."""
        return self.endpoint.input_topics(self.schema)

    def streams(self) -> list[tuple[str, int, str | None]]:
        """``(topic, partition, relation)`` in stream order (relation None: records name
        their relation)."""
        if self._streams is None:
            out: list[tuple[str, int, str | None]] = []
            for topic, relation in self._input_topics():
                deadline = time.monotonic() + 10
                parts = self.consumer().partitions_for_topic(topic)
                while not parts:
                    if time.monotonic() > deadline:
                        msg = (f"topic {topic!r} does not exist on {self.endpoint.bootstrap}: "
                               f"expected an existing update topic; create it or write it "
                               f"with `ivmflow produce`")
                        raise KafkaConfigError(msg)
                    time.sleep(0.1)
                    parts = self.consumer().partitions_for_topic(topic)
                out.extend((topic, p, relation) for p in sorted(parts))
            self._streams = out
        return self._streams

    def _tps(self) -> list[Any]:
        from kafka import TopicPartition

        return [TopicPartition(t, p) for t, p, _r in self.streams()]

    def end_offsets(self) -> dict[str, int]:
        ends = self.consumer().end_offsets(self._tps())
        return {stream_key(tp.topic, tp.partition): int(o) for tp, o in ends.items()}

    def initial(self, stop_at_end: bool) -> ReadPosition:
        """The start of every stream; with ``stop_at_end`` the end offsets of now."""
        begins = self.consumer().beginning_offsets(self._tps())
        offsets = {stream_key(tp.topic, tp.partition): int(o) for tp, o in begins.items()}
        return ReadPosition(offsets, self.end_offsets() if stop_at_end else None)

    # -- reading --------------------------------------------------------------------

    def _decode(self, topic: str, partition: int, message: Any, relation: str | None) -> Any:
        """One fetched message as what :meth:`_cut` takes: an update record."""
        src = record_source(topic, partition, message.offset)
        return decode_update(message.value, self.schema, source=src, relation=relation)

    def _cut(self, pos: ReadPosition, fetched: Sequence[_Fetched], *, final: bool,
             idle: bool, capped: bool = False, replay: ReadPosition | None = None
             ) -> tuple[list[Record], list[int], dict[str, Any] | None]:
        """The records of the whole epochs in ``fetched`` (read from ``pos``), the next
        offset of every stream, and the position's ``cut`` (:class:`ReadPosition`).
        ``final``: the stop offsets are reached; ``idle``: every stream was read to its
        end; ``capped``: a stream holds more records than the read's limit let it fetch
        (a change stream's reader may then release part of an epoch);
        ``replay``: the position a previous cut of the same records ended at."""
        recs, nxt = align(fetched, final=final)
        return recs, nxt, None

    def _replay_targets(self, end: ReadPosition) -> dict[str, int]:
        """Where :meth:`read_between` fetches to, to get the records :meth:`read` cut."""
        return end.offsets

    def _fetch(self, starts: dict[str, int], targets: dict[str, int],
               timeout_s: float, keep_from: dict[str, int] | None = None) -> list[_Fetched]:
        """Records of every stream in ``[starts[s], targets[s])``, fewer when the timeout
        passes first.

        The messages fetched from ``keep_from`` (default ``starts``: a read's retry
        passes the read's start) on stay at hand (``_ahead``) with the consumer's
        position after them: a stream whose next fetch starts among them takes them
        from there and the consumer goes on where it is, without a seek. A seek drops what the
        consumer has fetched ahead, and the tests' broker answers each fetch of a large
        partition with all its unread records (``receive.message.max.bytes``): every
        read (and every retry of one) fetched the rest of the topic again."""
        consumer = self.consumer()
        tps = self._tps()
        consumer.assign(tps)
        keys = [stream_key(t, p) for t, p, _r in self.streams()]
        relation = {k: r for k, (_t, _p, r) in zip(keys, self.streams())}
        got: dict[str, list[tuple[int, Record]]] = {k: [] for k in keys}
        pos = {k: starts[k] for k in keys}
        kept: dict[str, list[Any]] = {k: [] for k in keys}
        keep = keep_from if keep_from is not None else starts
        first = dict(pos)
        ahead = self._ahead
        for tp, k in zip(tps, keys):
            entry = ahead.get(k)
            if entry is None or not entry[0] <= pos[k] <= entry[2] or \
                    consumer.position(tp) != entry[2]:
                consumer.seek(tp, pos[k])
                continue
            was, msgs, at = entry
            first[k] = max(was, min(keep[k], pos[k]))
            for m in msgs:
                if m.offset >= first[k]:
                    kept[k].append(m)
                if pos[k] <= m.offset < targets[k]:
                    got[k].append((m.offset, self._decode(tp.topic, tp.partition, m,
                                                          relation[k])))
            pos[k] = max(pos[k], min(at, targets[k]))
        deadline = time.monotonic() + timeout_s
        while any(pos[k] < targets[k] for k in keys):
            batch = consumer.poll(timeout_ms=POLL_MS)
            for tp, msgs in batch.items():
                k = stream_key(tp.topic, tp.partition)
                kept[k].extend(msgs)
                for m in msgs:
                    if m.offset < pos[k] or m.offset >= targets[k]:
                        continue
                    got[k].append((m.offset, self._decode(tp.topic, tp.partition, m,
                                                          relation[k])))
                    pos[k] = m.offset + 1
            for tp, k in zip(tps, keys):
                # Transaction markers take offsets without being records.
                pos[k] = max(pos[k], min(consumer.position(tp), targets[k]))
            if time.monotonic() > deadline:
                break
        self._ahead = {k: (first[k], kept[k], consumer.position(tp))
                       for tp, k in zip(tps, keys)}
        return [_Fetched(got[k], pos[k]) for k in keys]

    def read(self, pos: ReadPosition, max_records: int = 10_000, epoch_size: int | None = None,
             timeout_s: float = 5.0) -> tuple[list[NumberedRecord], ReadPosition]:
        """The next complete epochs after ``pos``, numbered (``epoch_size``: also close an
        epoch every N updates), and the position after them. At most about
        ``max_records`` records per stream, unless one epoch is longer.

        ``timeout_s`` bounds the wait when there is nothing to read. When the streams
        hold records (below their end offsets) but fetching them took longer, the fetch
        goes on with twice the time until a whole epoch arrives (an epoch longer than
        ``max_records``, every stream fetched to the limit, doubles the limit, where a
        change stream's reader does not release part of it at the limit:
        :mod:`connectors.kafka.change_epochs`; each retry fetches and decodes only the
        records the earlier attempts of the read did not get): returning nothing
        would start the next call over from the same position, forever, on a machine
        slow enough to never fetch one epoch within ``timeout_s``. Past
        :data:`MAX_FETCH_S`, or when a fetch of ``stall_s`` got nothing, it raises
        :class:`TimeoutError`."""
        if pos.done:
            return [], pos
        if epoch_size and len(pos.offsets) > 1:
            msg = (f"--epoch {epoch_size} with {len(pos.offsets)} input partitions: epochs of "
                   f"N updates are defined for a single partition only; cut epochs with "
                   f"'*' markers in every partition (ivmflow produce does) instead")
            raise KafkaConfigError(msg)
        ends = pos.stop if pos.stop is not None else self.end_offsets()
        limit = max_records
        keys = list(pos.offsets)
        fetched: list[_Fetched] = [_Fetched([], pos.offsets[k]) for k in keys]
        while True:
            targets = {k: min(ends.get(k, o), o + limit) for k, o in pos.offsets.items()}
            # A retry (a longer epoch, a slow fetch) fetches only what the previous
            # attempts did not: the records in hand stay, decoded once.
            before = {k: f.end for k, f in zip(keys, fetched)}
            more = self._fetch(before, targets, timeout_s, keep_from=pos.offsets)
            fetched = [_Fetched(f.records + m.records, m.end) for f, m in zip(fetched, more)]
            at_stop = pos.stop is not None and all(
                f.end >= pos.stop[k] for k, f in zip(keys, fetched)
            )
            idle = all(f.end >= ends.get(k, 0) for k, f in zip(keys, fetched))
            capped = any(f.end >= targets[k] and targets[k] < ends.get(k, 0)
                         for k, f in zip(keys, fetched))
            recs, nxt, cut = self._cut(pos, fetched, final=at_stop, idle=idle, capped=capped)
            short = any(f.end < targets[k] for k, f in zip(keys, fetched))
            if recs or at_stop or not (capped or short) or nxt != list(pos.offsets.values()):
                break
            if capped and not short:
                # An epoch longer than the limit: fetch more of it. (Not while a stream
                # still lacks records below its target: they may complete an epoch, or
                # be a transaction's END that lets a change stream release part of one.
                # TPC-H SF 0.1 over Debezium: the transaction topic's END came four
                # retries late, the broker busy sending lineitem; by then the limit was
                # 16 times --batch-lines, and the first micro-batch held 426,030 events.)
                limit *= 2
            if short:  # timed out before the records that exist arrived
                stalled = all(m.end == before[k] for k, m in zip(keys, more))
                if timeout_s >= MAX_FETCH_S or (stalled and timeout_s >= self.stall_s):
                    behind = {k: (f.end, targets[k]) for k, f in zip(keys, fetched)
                              if f.end < targets[k]}
                    raise TimeoutError(missing_records(self.endpoint.bootstrap, behind,
                                                       timeout_s))
                timeout_s = min(2 * timeout_s, MAX_FETCH_S)
        cursor = EpochCursor(**vars(pos.cursor))
        numbered = list(cursor.number(recs, epoch_size, final=at_stop))
        return numbered, ReadPosition(dict(zip(keys, nxt)), pos.stop, cursor, at_stop, cut)

    def read_between(self, start: ReadPosition, end: ReadPosition,
                     epoch_size: int | None = None) -> list[NumberedRecord]:
        """Exactly the records :meth:`read` returned for ``start`` -> ``end``."""
        if start.done:
            return []
        fetched = self._fetch(start.offsets, self._replay_targets(end), timeout_s=120.0)
        recs, _nxt, _cut = self._cut(start, fetched, final=end.done, idle=False, replay=end)
        cursor = EpochCursor(**vars(start.cursor))
        return list(cursor.number(recs, epoch_size, final=end.done))
