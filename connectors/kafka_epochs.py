"""Whole epochs of a Kafka update topic read from explicit offsets: the reading core that
the Spark and Flink runners share (the local runner reads through
:mod:`connectors.kafka`'s consumer-group source).

A distributed runner keeps its read position in its own fault-tolerant store (the Spark
checkpoint's offset log, Flink operator state), not in a consumer group. So the
position is plain data, :class:`ReadPosition`: the next offset of every partition, the
stop offsets of ``--stop-at-end`` (taken once, when the run first starts, and carried
along so that a restarted run stops at the same place), the
:class:`dataflow.partitioned.EpochCursor` (sequence and epoch numbers) and ``done``.

Positions always sit at epoch boundaries: :meth:`EpochReader.read` fetches what the
partitions hold, releases only the epochs that every partition has closed with its
``{"op": "*"}`` marker, in the order of :mod:`connectors.kafka` (epoch k = partition 0's
records before its k-th marker, then partition 1's, ...), and moves each partition's
offset just past its k-th marker. Records after the last complete epoch are read again
next time, so nothing has to be buffered in the position. At the end of a
``--stop-at-end`` run the remaining records (a last epoch without markers) are released
in partition order and the stream ends like a file: the open epoch closes if it holds
updates. Re-reading a range between two positions (:meth:`EpochReader.read_between`,
a replayed Spark micro-batch) gives exactly the same records.

This module imports kafka-python; ``operators/`` and ``plans/`` never do.

Example (needs a broker; ``updates`` holds the stream of ``ivmflow produce``)::

    reader = EpochReader(KafkaUrl.parse("kafka://127.0.0.1:9092/updates"), schema)
    pos = reader.initial(stop_at_end=True)
    while not pos.done:
        numbered, pos = reader.read(pos, max_records=10_000)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dataflow.partitioned import EpochCursor, NumberedRecord
from dataflow.records import EpochEnd, Record
from plans.schema import Schema

Decoder = Callable[[bytes, str, int, int], Record]
"""Decodes one record's value: (value, topic, partition, offset) -> Update / EpochEnd."""

POLL_MS = 200
"""How long one poll waits for data (also the idle wait of an unbounded run)."""


@dataclass
class ReadPosition:
    """Where a runner stands in the update topic (plain data for checkpoints).

    >>> p = ReadPosition({0: 5, 1: 3}, {0: 9, 1: 9}, EpochCursor(8, 3, 0, 2))
    >>> ReadPosition.from_dict(p.to_dict()) == p
    True
    """

    offsets: dict[int, int]
    """Next offset to read per partition (just past a marker, or the start)."""
    stop: dict[int, int] | None = None
    """``--stop-at-end``: the end offsets when the run first started; None = unbounded."""
    cursor: EpochCursor = field(default_factory=EpochCursor)
    done: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (Spark keeps offsets as JSON: partition keys become strings)."""
        return {
            "offsets": {str(p): o for p, o in self.offsets.items()},
            "stop": None if self.stop is None else {str(p): o for p, o in self.stop.items()},
            "cursor": self.cursor.to_dict(),
            "done": self.done,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReadPosition:
        stop = d.get("stop")
        return cls(
            {int(p): int(o) for p, o in d["offsets"].items()},
            None if stop is None else {int(p): int(o) for p, o in stop.items()},
            EpochCursor.from_dict(d["cursor"]),
            bool(d.get("done", False)),
        )


@dataclass
class _Fetched:
    """One partition's records from a start offset: (offset, record) pairs, and the
    offset just past the last one fetched."""

    records: list[tuple[int, Record]]
    end: int

    def marker_ends(self) -> list[int]:
        """Offsets just past each marker."""
        return [off + 1 for off, rec in self.records if isinstance(rec, EpochEnd)]


def align(
    fetched: Sequence[_Fetched], final: bool
) -> tuple[list[Record], list[int], int]:
    """The complete epochs of per-partition fetches in the deterministic order (epoch by
    epoch: partition 0's records, then partition 1's, ..., then one epoch end), and with
    ``final`` the rest in partition order. Returns (records, next offset per partition,
    epochs released).

    >>> from dataflow.records import Update, EPOCH_END
    >>> u = lambda v: Update("+", "G", (v,))
    >>> p0 = _Fetched([(0, u(1)), (1, EPOCH_END), (2, u(3))], 3)
    >>> p1 = _Fetched([(0, u(2)), (1, EPOCH_END)], 2)
    >>> recs, nxt, k = align([p0, p1], final=False)
    >>> [getattr(r, "row", "*") for r in recs], nxt, k
    ([(1,), (2,), '*'], [2, 2], 1)
    >>> recs, nxt, k = align([p0, p1], final=True)
    >>> [getattr(r, "row", "*") for r in recs], nxt
    ([(1,), (2,), '*', (3,)], [3, 2])
    """
    ends = [f.marker_ends() for f in fetched]
    complete = min((len(e) for e in ends), default=0)
    out: list[Record] = []
    idx = [0] * len(fetched)
    for _ in range(complete):
        marker: Record | None = None
        for p, f in enumerate(fetched):
            recs = f.records
            while not isinstance(recs[idx[p]][1], EpochEnd):
                out.append(recs[idx[p]][1])
                idx[p] += 1
            if marker is None:
                marker = recs[idx[p]][1]
            idx[p] += 1
        assert marker is not None
        out.append(marker)
    nxt = [e[complete - 1] if complete else None for e in ends]
    offsets = [
        n if n is not None else (f.records[0][0] if f.records else f.end)
        for n, f in zip(nxt, fetched)
    ]
    if final:
        # What is left has fewer markers on some partitions: partition order, markers
        # kept where they are (a file-like tail).
        for p, f in enumerate(fetched):
            out.extend(rec for _off, rec in f.records[idx[p]:])
        offsets = [f.end for f in fetched]
    return out, offsets, complete


class EpochReader:
    """Reads whole epochs of one topic from explicit offsets (no consumer group:
    partitions are assigned, never subscribed, so nothing is committed to Kafka).

    ``url`` is a :class:`connectors.kafka.KafkaUrl` (bootstrap servers, topic, client
    options); ``decode`` turns a record value into an update (default: the JSON
    update-record codec of :mod:`connectors.kafka`, typed by ``schema``).
    """

    def __init__(self, url: Any, schema: Schema, decode: Decoder | None = None) -> None:
        self.url = url
        self.topic: str = url.topic
        self.schema = schema
        self.decode = decode or _default_decoder(schema)
        self._consumer: Any = None
        self._parts: list[int] | None = None

    # -- connection -----------------------------------------------------------------

    def consumer(self) -> Any:
        if self._consumer is None:
            from kafka import KafkaConsumer

            config = dict(self.url.consumer_config())
            config.pop("group_id", None)
            config.update(enable_auto_commit=False, isolation_level="read_committed")
            self._consumer = KafkaConsumer(**config)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def partitions(self) -> list[int]:
        """The topic's partitions, sorted (the order of the epoch alignment)."""
        if self._parts is None:
            deadline = time.monotonic() + 10
            while True:
                parts = self.consumer().partitions_for_topic(self.topic)
                if parts:
                    self._parts = sorted(parts)
                    break
                if time.monotonic() > deadline:
                    msg = (f"kafka topic {self.topic!r} on {self.url.bootstrap}: not found "
                           f"(create it, or produce to it with `ivmflow produce`)")
                    raise FileNotFoundError(2, msg, f"kafka://{self.url.bootstrap}/{self.topic}")
                time.sleep(0.1)
        return self._parts

    def _tps(self) -> list[Any]:
        from kafka import TopicPartition

        return [TopicPartition(self.topic, p) for p in self.partitions()]

    def end_offsets(self) -> dict[int, int]:
        ends = self.consumer().end_offsets(self._tps())
        return {tp.partition: int(o) for tp, o in ends.items()}

    def initial(self, stop_at_end: bool) -> ReadPosition:
        """The start of the topic; with ``stop_at_end`` the end offsets of now."""
        begins = self.consumer().beginning_offsets(self._tps())
        offsets = {tp.partition: int(o) for tp, o in begins.items()}
        return ReadPosition(offsets, self.end_offsets() if stop_at_end else None)

    # -- reading --------------------------------------------------------------------

    def _fetch(self, starts: dict[int, int], targets: dict[int, int],
               timeout_s: float) -> list[_Fetched]:
        """Records of every partition in ``[starts[p], targets[p])`` (fewer when the
        timeout passes first: an unbounded topic's end moves)."""
        consumer = self.consumer()
        tps = self._tps()
        consumer.assign(tps)
        got: dict[int, list[tuple[int, Record]]] = {tp.partition: [] for tp in tps}
        pos = dict(starts)
        for tp in tps:
            consumer.seek(tp, starts[tp.partition])
        deadline = time.monotonic() + timeout_s
        while any(pos[p] < targets[p] for p in pos):
            batch = consumer.poll(timeout_ms=POLL_MS)
            for tp, msgs in batch.items():
                p = tp.partition
                for m in msgs:
                    if m.offset < pos[p] or m.offset >= targets[p]:
                        continue
                    got[p].append((m.offset, self.decode(m.value, self.topic, p, m.offset)))
                    pos[p] = m.offset + 1
            for tp in tps:
                # Transaction markers take offsets without being records.
                pos[tp.partition] = max(pos[tp.partition],
                                        min(consumer.position(tp), targets[tp.partition]))
            if time.monotonic() > deadline:
                break
        return [_Fetched(got[p], pos[p]) for p in sorted(got)]

    def read(self, pos: ReadPosition, max_records: int = 10_000, epoch_size: int | None = None,
             timeout_s: float = 5.0) -> tuple[list[NumberedRecord], ReadPosition]:
        """The next complete epochs after ``pos`` (about ``max_records`` records per
        partition at most), numbered (``epoch_size``: also close an epoch every N
        updates), and the position after them. A single-partition topic needs no
        alignment: everything fetched is released, as from a file."""
        if pos.done:
            return [], pos
        ends = pos.stop if pos.stop is not None else self.end_offsets()
        targets = {p: min(ends.get(p, o), o + max_records) for p, o in pos.offsets.items()}
        fetched = self._fetch(pos.offsets, targets, timeout_s)
        at_stop = pos.stop is not None and all(
            f.end >= pos.stop[p] for p, f in zip(sorted(pos.offsets), fetched)
        )
        recs, nxt, _k = align(fetched, final=at_stop or len(fetched) == 1)
        cursor = EpochCursor(**vars(pos.cursor))
        numbered = list(cursor.number(recs, epoch_size, final=at_stop))
        offsets = dict(zip(sorted(pos.offsets), nxt))
        return numbered, ReadPosition(offsets, pos.stop, cursor, at_stop)

    def read_between(self, start: ReadPosition, end: ReadPosition,
                     epoch_size: int | None = None) -> list[NumberedRecord]:
        """Exactly the records :meth:`read` returned for ``start`` -> ``end``."""
        if start.done:
            return []
        fetched = self._fetch(start.offsets, end.offsets, timeout_s=60.0)
        recs, _nxt, _k = align(fetched, final=end.done or len(fetched) == 1)
        cursor = EpochCursor(**vars(start.cursor))
        return list(cursor.number(recs, epoch_size, final=end.done))


def _default_decoder(schema: Schema) -> Decoder:
    try:
        from connectors import kafka
    except ImportError:
        return _dev_decoder(schema)

    def decode(value: bytes, topic: str, partition: int, offset: int) -> Record:
        return kafka.decode_update(value, schema, topic=topic, partition=partition,
                                   offset=offset)

    return decode


def parse_url(text: str) -> Any:
    """``kafka://host:port/topic?...`` parsed by :mod:`connectors.kafka`."""
    try:
        from connectors.kafka import KafkaUrl
    except ImportError:
        return _DevUrl.parse(text)
    return KafkaUrl.parse(text)


@dataclass
class _DevUrl:
    bootstrap: str
    topic: str

    @classmethod
    def parse(cls, text: str) -> _DevUrl:
        rest = text.split("://", 1)[1]
        host, topic = rest.split("/", 1)
        return cls(host, topic.split("?", 1)[0])

    def consumer_config(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap}


def _dev_decoder(schema: Schema) -> Decoder:
    import json

    from dataflow.records import EPOCH_END, Update

    def decode(value: bytes, topic: str, partition: int, offset: int) -> Record:
        d = json.loads(value)
        if d["op"] == "*":
            return EPOCH_END
        rel = schema.relation(d["relation"])
        row = d["row"]
        if isinstance(row, dict):
            row = [row[c] for c in rel.column_names]
        return Update(d["op"], rel.name, rel.coerce_row(row), int(d.get("mult", 1)),
                      f"{topic}[{partition}]@{offset}")

    return decode
