"""The change-stream source: Debezium (``format=debezium-json``) or upsert
(``format=upsert-json``) topics, one per relation, read as updates in epochs.

:class:`ChangeCutter` is the broker-free core (records in, updates and epoch ends out),
:class:`ChangeStreamSource` the local runner's consumer-group source around it (a
:class:`~connectors.kafka.KafkaUpdateSource`, so the delta sink commits its offsets in
each epoch's transaction and the state checkpoint stores them).

Epochs:

* with ``transactions=TOPIC`` (Debezium's transaction metadata topic) one epoch per
  source transaction, in commit order (:mod:`connectors.kafka.transactions`);
  ``--min-epoch-events N`` lets consecutive small transactions share one; an END whose
  events do not all arrive within ``--transaction-timeout`` seconds (or by the end of a
  ``--stop-at-end`` read) is an error naming the transaction and the transaction
  topic's offset; transactions still open at the end of a bounded read are left for
  the next run;
* without transaction metadata, ``--epoch N``: every stream's next N events are one
  epoch (with one stream: every N events), the streams' segments in stream order, so
  the epochs are the same on every run; they are NOT transactionally consistent (an
  order can be visible without its lineitems), and an idle topic holds epochs back;
* or ``--epoch-ms T``: by the events' source timestamps (Debezium's ``source.ts_ms``,
  else the Kafka record's timestamp, which is all an upsert topic has), epoch = the
  events whose time falls in one window ``[kT, (k+1)T)``, the streams' events of the
  window in stream order (windows without events make no epoch). A stream's windows
  never go back: an event older than its stream's latest one joins that one's window.
  A window closes once every stream has an event of a later one (an idle stream holds
  epochs back) or at the end of a bounded read. Not transactionally consistent either
  in general (docs/change-streams.md says when a window keeps transactions whole).

Offsets: :meth:`ChangeStreamSource.positions` is, per stream, the offset of the oldest
record not yet released in an epoch (or the next to fetch), so that right after an
epoch end it is where a restart must read from.

An epoch in parts (the Spark and Flink runners' reader,
:mod:`connectors.kafka.change_epochs`, whose reads hold at most ``--batch-lines``
records per stream): :meth:`ChangeCutter.release_partial` releases the events of the
oldest epoch not yet released that have arrived, without its end: with transactions,
the group's complete transactions and, of the oldest END's transaction, each stream's
leading events (only records from a stream's position on, so that the position moves
past exactly them); with ``--epoch N``, every stream's events of the epoch fetched;
with ``--epoch-ms``, the oldest window's events once every stream has reached it (no
stream can still have an event of an earlier one). The epoch's end comes after its
last event, as when it is released whole, so the epochs are the same.
:meth:`ChangeCutter.open_state` is what a cutter started anew at the positions needs
of the open epoch (:meth:`ChangeCutter.resume`): the events released in it and the
transaction's per relation (transactions), each stream's events of it (``--epoch
N``), its window (``--epoch-ms``).
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from connectors.base import DeadLetterSink
from connectors.kafka.align import EpochAligner
from connectors.kafka.codec import record_source
from connectors.kafka.config import KafkaConfigError, KafkaEndpoint, TopicPartitionKey
from connectors.kafka.debezium import (
    ChangeError,
    ChangeEvent,
    DecodeOptions,
    TransactionEnd,
    decode_change,
    decode_transaction,
    shown,
)
from connectors.kafka.source import KafkaUpdateSource, OnError, StopRequested
from connectors.kafka.transactions import TransactionAligner, TxnEpoch, describe_missing
from connectors.kafka.upsert import ChangeApplier, decode_upsert
from core.errors import InputError
from core.records import EpochEnd, Record, Update
from core.schema import Schema

TRANSACTION_TIMEOUT_S = 60.0
"""``--transaction-timeout``'s default: how long an END may wait for its events."""


@dataclass
class _Item:
    stream: int
    offset: int
    payload: ChangeEvent | TransactionEnd | ChangeError
    raw: bytes | None


Out = Update | EpochEnd | InputError
"""What :meth:`ChangeCutter.release` yields: updates, epoch ends, and refused records
(the caller raises them or sends them to the dead-letter output)."""


class ChangeCutter:
    """Decodes change-stream records and cuts them into epochs (module docstring).

    ``streams`` are ``(topic, partition, relation)`` in stream order; the relation is
    None for the transaction topic's streams. Feed records with :meth:`feed` (each
    stream's in offset order), then take what is ready with :meth:`release`."""

    def __init__(self, endpoint: KafkaEndpoint, schema: Schema,
                 streams: list[tuple[str, int, str | None]], *, epoch_size: int | None = None,
                 min_epoch_events: int = 1,
                 transaction_timeout: float = TRANSACTION_TIMEOUT_S,
                 epoch_ms: int | None = None, applier: ChangeApplier | None = None) -> None:
        check_change_options(endpoint, schema, epoch_size, epoch_ms)
        self.endpoint = endpoint
        self.schema = schema
        self.streams = streams
        self.format = endpoint.format
        self.options = DecodeOptions.of(endpoint.format_options)
        self.transactional = endpoint.transactions_topic is not None
        self.epoch_size = epoch_size
        self.timeout = transaction_timeout
        self.applier = applier if applier is not None else ChangeApplier(
            schema, upsert=self.format == "upsert-json")
        """The upsert state (a runner that cuts each read anew passes its own, which
        lives across reads and in its checkpoints)."""
        data = [i for i, s in enumerate(streams) if s[2] is not None]
        self.txns: TransactionAligner[_Item] = TransactionAligner(
            sorted(schema.relations), min_events=min_epoch_events)
        self.counts: EpochAligner[int, _Item | None] = EpochAligner(data or [0])
        self._in_segment = dict.fromkeys(data, 0)
        self.epoch_ms = epoch_ms
        self._data = data
        self._window: dict[int, int] = {}
        """``--epoch-ms``: per stream, the window of its latest event."""
        self._released_window: dict[int, int] = {}
        """``--epoch-ms``: per stream, the window of its latest event released (where a
        read from :meth:`positions` goes on: :meth:`windows`)."""
        self._item_window: dict[tuple[int, int], int] = {}
        """``--epoch-ms``: the window of each (stream, offset) cut into an epoch and not
        yet released (:meth:`release` yields an epoch at a time: a checkpoint taken at
        an epoch boundary must see the window of the last event before it, as it sees
        its position)."""
        self._timed: dict[int, deque[tuple[int, _Item]]] = {s: deque() for s in data}
        self._next: dict[int, int] = {}
        self._pending: list[list[int]] = [[] for _ in streams]
        self._released: list[set[int]] = [set() for _ in streams]
        self.fatal: list[InputError] = []
        """Refused records that cannot wait for their epoch: raised at once by
        :meth:`release` (also with skip: they are ``stops``)."""
        self._unplaced: list[ChangeError] = []
        """Refused events without a readable transaction id fed since the last
        :meth:`release` (raised there at once unless ``skip``)."""
        self._open_segments: dict[int, int] | None = None
        """``--epoch N``: an epoch is open (:meth:`release_partial`): per stream, its
        events released."""
        self._open_window: int | None = None
        """``--epoch-ms``: the window of the open epoch (:meth:`release_partial`)."""

    # -- input -----------------------------------------------------------------------

    def start(self, stream: int, offset: int, window: int | None = None) -> None:
        """Where ``stream`` is read from; ``window``: with ``--epoch-ms``, the window of
        the stream's event before ``offset`` (:meth:`windows` of the cutter that read
        up to there), since a stream's windows never go back."""
        self._next[stream] = offset
        if window is not None:
            self._window[stream] = self._released_window[stream] = window

    def windows(self) -> dict[int, int]:
        """``--epoch-ms``: per stream, the window of its last event released (what
        :meth:`start` needs to go on from :meth:`positions`)."""
        return dict(self._released_window)

    def feed(self, stream: int, offset: int, key: bytes | None, value: bytes | None,
             timestamp: int | None = None, arrived: float | None = None) -> None:
        """One record of ``stream``; ``timestamp``: the Kafka record's (ms), for
        ``--epoch-ms`` where an event has no source timestamp; ``arrived``: when an END
        record was first fetched (``time.monotonic()``, the default: now), from which
        ``--transaction-timeout`` counts."""
        topic, partition, relation = self.streams[stream]
        self._next[stream] = offset + 1
        src = record_source(topic, partition, offset)
        payload: ChangeEvent | TransactionEnd | ChangeError | None
        try:
            if relation is None:
                payload = decode_transaction(value, source=src)
            elif self.format == "upsert-json":
                payload = decode_upsert(key, value, self.schema.relation(relation), source=src)
            else:
                payload = decode_change(value, self.schema.relation(relation), source=src,
                                        options=self.options)
        except ChangeError as err:
            payload = err
        if payload is None:
            return  # a tombstone, a BEGIN record, a logical message
        item = _Item(stream, offset, payload, value)
        heapq.heappush(self._pending[stream], offset)
        if not self.transactional and self.epoch_ms is not None:
            ts = payload.ts_ms if isinstance(payload, ChangeEvent) else None
            ts = ts if ts is not None else timestamp
            last = self._window.get(stream)
            window = ts // self.epoch_ms if ts is not None else last if last is not None else 0
            window = window if last is None else max(window, last)
            self._window[stream] = window
            self._timed[stream].append((window, item))
        elif not self.transactional:
            assert relation is not None
            self.counts.push(stream, item)
            self._in_segment[stream] += 1
            if self.epoch_size is not None and self._in_segment[stream] >= self.epoch_size:
                self.counts.mark(stream, None)
                self._in_segment[stream] = 0
        elif isinstance(payload, TransactionEnd):
            self.txns.end(payload, item, arrived)
        elif isinstance(payload, ChangeError) and relation is None:
            # A BEGIN or END that cannot be read: its transaction's events would have no
            # epoch (or be merged into another), so this stops even with skip.
            self._done(item)
            self.fatal.append(ChangeError(
                payload.source, payload.record, payload.expected, payload.found,
                "a transaction topic's record that cannot be read leaves a transaction "
                "without its boundary (--on-error skip cannot skip it); fix the topic or "
                "read without transactions=", stops=True))
        elif isinstance(payload, ChangeError) and payload.txid is None:
            # Placed by its position (connectors.kafka.transactions): with --on-error
            # skip a refused event of its transaction; without, it stops the run now.
            assert relation is not None
            self._unplaced.append(payload)
            self.txns.orphan(stream, relation, item)
        else:
            assert relation is not None
            txid = payload.txid
            self.txns.event(stream, relation, txid, item)

    # -- output ----------------------------------------------------------------------

    def release(self, *, idle: bool = False, final: bool = False,
                now: float | None = None, skip: bool = False,
                stop: Callable[[], bool] = lambda: False) -> Iterator[Out]:
        """Updates and epoch ends that are ready. ``idle``: nothing more was fetched
        (events without a transaction may go; an END overdue is reported); ``final``:
        the end of a bounded read; ``skip``: ``--on-error skip`` (an incomplete
        transaction is released with what arrived). ``stop()`` is asked before each
        epoch: true raises :class:`StopRequested` at that boundary."""
        while self.fatal:
            yield self.fatal.pop(0)
        if self._unplaced and not skip:
            yield self._unplaced[0]
        self._unplaced.clear()
        epochs: list[TxnEpoch[_Item]] = []
        if self.transactional:
            epochs = self.txns.pop_epochs(final=final)
            yield from self._problems()
            t = time.monotonic() if now is None else now
            if idle or final:
                late = self.txns.overdue(t, 0 if final else self.timeout)
                while late is not None:
                    if self.txns.settle():  # orphans placed now that everything arrived
                        epochs.extend(self.txns.pop_epochs(final=final))
                        late = self.txns.overdue(t, 0 if final else self.timeout)
                        continue
                    end, item, want, got = late
                    after = f"after {'the end of the input' if final else f'{self.timeout:g} s'}"
                    suspects = self.txns.suspects(end)
                    if suspects:
                        # Where the missing events may be refused events without a
                        # readable transaction id: stop, even with skip, rather than
                        # apply the transaction without them.
                        where = "; ".join(self._where(i) for i in suspects)
                        yield ChangeError(
                            end.source, shown(item.raw), f"the {sum(want.values())} events "
                            f"of transaction {end.txid} its END counts for the query's "
                            "tables", f"{describe_missing(end, want, got)} {after}, and "
                            f"refused events without a readable transaction id that may be "
                            f"the missing ones ({where})", "the transaction is not applied: "
                            "without those events it would be a wrong result that no error "
                            "reports, so --on-error skip does not skip it; repair the "
                            "events (or remove them and their transaction's END) and rerun",
                            stops=True)
                        return
                    yield ChangeError(
                        end.source, shown(item.raw), f"the {sum(want.values())} events "
                        f"of transaction {end.txid} its END counts for the query's tables",
                        f"{describe_missing(end, want, got)} {after}",
                        "check the connector's topics (a missing partition, a lost event) "
                        "or raise --transaction-timeout; with --on-error skip the "
                        "transaction is applied with the events that arrived")
                    if not skip:
                        return
                    epochs.extend(self.txns.force_head())
                    epochs.extend(self.txns.pop_epochs(final=final))
                    late = self.txns.overdue(t, 0 if final else self.timeout)
                epochs.extend(self.txns.flush_untransacted())
            for stray in self.txns.strays:  # refused, in no transaction still open
                self._done(stray)
                assert isinstance(stray.payload, ChangeError)
                yield stray.payload
            self.txns.strays.clear()
        elif self.epoch_ms is not None:
            epochs = self._time_epochs(final)
        else:
            for ep in self.counts.pop_epochs():
                epochs.append(TxnEpoch([i for i in ep.items if i is not None], [], [],
                                       self._open_segments is not None))
                self._open_segments = None
            if final:
                rest = [i for i in self.counts.tail() if i is not None]
                if rest or self._open_segments is not None:
                    epochs.append(TxnEpoch(rest, [], [], self._open_segments is not None))
                    self._open_segments = None
        for epoch in epochs:
            if stop():
                raise StopRequested
            yield from self._epoch(epoch)

    def _time_epochs(self, final: bool) -> list[TxnEpoch[_Item]]:
        """``--epoch-ms``: the windows every stream has passed (all at ``final``)."""
        if final:
            below = None
        elif len(self._window) < len(self._data):
            return []  # a stream without an event yet holds every window back
        else:
            below = min(self._window[s] for s in self._data)
        out: list[TxnEpoch[_Item]] = []
        while True:
            heads = [q[0][0] for q in self._timed.values() if q]
            if self._open_window is not None:
                heads.append(self._open_window)  # (it may have no events left)
            if not heads or (below is not None and min(heads) >= below):
                return out
            w = min(heads)
            out.append(TxnEpoch(self._take_window(w), [], [], self._open_window == w))
            if self._open_window == w:
                self._open_window = None

    def _take_window(self, w: int) -> list[_Item]:
        """The events of window ``w`` in hand, stream by stream (removed)."""
        items = []
        for s in self._data:
            q = self._timed[s]
            while q and q[0][0] == w:
                item = q.popleft()[1]
                items.append(item)
                self._item_window[s, item.offset] = w
        return items

    def _where(self, item: _Item) -> str:
        return record_source(*self.streams[item.stream][:2], item.offset)

    def _problems(self) -> Iterator[Out]:
        while self.txns.problems:
            item, expected, found = self.txns.problems.pop(0)
            src = record_source(*self.streams[item.stream][:2], item.offset)
            yield ChangeError(src, shown(item.raw), expected, found)

    def _epoch(self, epoch: TxnEpoch[_Item]) -> Iterator[Out]:
        if not epoch.items and not epoch.txids and not epoch.open:
            for marker in epoch.markers:  # transactions without events for the query
                self._done(marker)
            return
        yield from self._apply(epoch.items)
        for marker in epoch.markers:
            self._done(marker)
        last = epoch.markers[-1].payload if epoch.markers else None
        yield EpochEnd(last.source if isinstance(last, TransactionEnd) else "")

    def _apply(self, items: Iterable[_Item]) -> Iterator[Out]:
        """The updates of released events (through the upsert state)."""
        for item in items:
            self._done(item)
            p = item.payload
            if isinstance(p, ChangeError):
                yield p
                continue
            assert isinstance(p, ChangeEvent)
            try:
                yield from self.applier.updates(p)
            except ChangeError as err:
                yield err

    # -- an epoch in parts ---------------------------------------------------------------

    def release_partial(self) -> list[Out]:
        """The events of the oldest epoch not yet released that may go before the
        epoch is complete (module docstring, "An epoch in parts"), as updates without
        an epoch end: call after :meth:`release` gave nothing. Empty: none may go yet
        (nothing changed)."""
        if self.fatal or self._unplaced:
            return []
        if self.transactional:
            taken = self.txns.take_partial(self._releasable)
            if taken is None:
                return []
            items, markers = taken
            out = list(self._apply(items))
            for marker in markers:
                self._done(marker)
            return out
        if self.epoch_ms is not None:
            heads = [q[0][0] for q in self._timed.values() if q]
            if not heads or len(self._window) < len(self._data):
                return []
            w = min(heads)
            if (self._open_window not in (None, w)
                    or min(self._window[s] for s in self._data) < w):
                return []  # a stream may still have events of an earlier window
            self._open_window = w
            return list(self._apply(self._take_window(w)))
        head = self.counts.take_head()
        items = [i for s in self._data for i in head[s] if i is not None]
        if not items:
            return []
        released = self._open_segments or {}
        self._open_segments = {s: released.get(s, 0) + len(head[s]) for s in self._data}
        return list(self._apply(items))

    def _releasable(self, stream: int, candidates: list[_Item]) -> int:
        """How many of ``candidates`` (in order) are ``stream``'s oldest records not
        released."""
        done = self._released[stream]
        unreleased = sorted(o for o in self._pending[stream] if o not in done)
        n = 0
        for item, offset in zip(candidates, unreleased):
            if item.offset != offset:
                break
            n += 1
        return n

    def open_state(self) -> dict[str, Any] | None:
        """The open epoch (module docstring), as plain data (streams by index); None:
        no epoch is open."""
        if self.transactional:
            return self.txns.open_state()
        if self.epoch_ms is not None:
            return None if self._open_window is None else {"window": self._open_window}
        if self._open_segments is None:
            return None
        return {"segments": dict(self._open_segments)}

    def resume(self, state: Mapping[str, Any] | None) -> None:
        """Go on with an open epoch (:meth:`open_state` of the cutter that read up to
        the positions given to :meth:`start`), before any :meth:`feed`."""
        if not state:
            return
        if self.transactional:
            self.txns.resume(state)
        elif self.epoch_ms is not None:
            self._open_window = int(state["window"])
        else:
            segments = {int(s): int(n) for s, n in state["segments"].items()}
            self._open_segments = segments
            for s, n in segments.items():
                self._in_segment[s] = n
                if self.epoch_size is not None and n >= self.epoch_size:
                    self.counts.mark(s, None)
                    self._in_segment[s] = 0

    def _done(self, item: _Item) -> None:
        self._released[item.stream].add(item.offset)
        w = self._item_window.pop((item.stream, item.offset), None)
        if w is not None:
            self._released_window[item.stream] = w

    def positions(self) -> dict[int, int]:
        """Per stream: the offset of its oldest record not yet released, else the next
        to fetch (streams not started are left out)."""
        out: dict[int, int] = {}
        for s, nxt in self._next.items():
            heap, done = self._pending[s], self._released[s]
            while heap and heap[0] in done:
                done.discard(heapq.heappop(heap))
            out[s] = heap[0] if heap else nxt
        return out


def check_change_options(endpoint: KafkaEndpoint, schema: Schema, epoch_size: int | None,
                         epoch_ms: int | None = None) -> None:
    """Refuse a change-stream input that cannot be cut into epochs or keyed."""
    if endpoint.format == "upsert-json":
        unkeyed = [r.name for r in schema.relations.values() if not r.key]
        if unkeyed:
            msg = (f"{endpoint.url}: format=upsert-json keys each table by its PRIMARY KEY; "
                   f"expected one declared in CREATE TABLE for {', '.join(unkeyed)}")
            raise KafkaConfigError(msg)
    if epoch_ms is not None and (endpoint.transactions_topic is not None
                                 or epoch_size is not None):
        other = ("transactions= (one epoch per source transaction; --min-epoch-events N "
                 "for fewer, larger ones)" if endpoint.transactions_topic is not None
                 else "--epoch N")
        msg = (f"{endpoint.url}: --epoch-ms cuts epochs by the events' timestamps; "
               f"expected it without {other}")
        raise KafkaConfigError(msg)
    if endpoint.transactions_topic is None and epoch_size is None and epoch_ms is None:
        msg = (f"{endpoint.url}: format={endpoint.format} needs epochs: expected "
               "transactions=TOPIC (Debezium's transaction metadata topic, "
               "provide.transaction.metadata=true: one epoch per source transaction), "
               "--epoch N (N events per topic partition) or --epoch-ms T (by the events' "
               "source timestamps); the last two are not transactionally consistent")
        raise KafkaConfigError(msg)


class ChangeStreamSource(KafkaUpdateSource):
    """The update records of a change-stream input (module docstring), for the local
    runner: the relations' topics (and the transaction topic) read as one consumer
    group, updates and epoch ends yielded in the cutter's order. Bad events raise their
    :class:`~core.errors.InputError` (topic, partition, offset, field) or with
    ``on_error="skip"`` go to ``dead_letter``; nothing of a refused event is applied."""

    def __init__(
        self,
        endpoint: KafkaEndpoint,
        schema: Schema,
        *,
        group_id: str,
        epoch_size: int | None = None,
        min_epoch_events: int = 1,
        transaction_timeout: float = TRANSACTION_TIMEOUT_S,
        epoch_ms: int | None = None,
        on_error: OnError = "fail",
        dead_letter: DeadLetterSink | None = None,
        stop_at_end: bool = False,
        stop_requested: Callable[[], bool] = lambda: False,
        poll_timeout_ms: int = 200,
        start_offsets: Mapping[TopicPartitionKey, int] | None = None,
        start_windows: Mapping[TopicPartitionKey, int] | None = None,
    ) -> None:
        check_change_options(endpoint, schema, epoch_size, epoch_ms)
        super().__init__(endpoint, schema, group_id=group_id, on_error=on_error,
                         dead_letter=dead_letter, stop_at_end=stop_at_end,
                         stop_requested=stop_requested, poll_timeout_ms=poll_timeout_ms,
                         start_offsets=start_offsets)
        self.cutter = ChangeCutter(
            endpoint, schema, [(t, p, r) for (t, p), r in zip(self.streams, self._relations)],
            epoch_size=epoch_size, min_epoch_events=min_epoch_events,
            transaction_timeout=transaction_timeout, epoch_ms=epoch_ms)
        starts, windows = start_offsets or {}, start_windows or {}
        for i, key in enumerate(self.streams):
            self.cutter.start(i, starts.get(key, 0), windows.get(key))

    def _input_topics(self) -> list[tuple[str, str | None]]:
        topics = self.endpoint.input_topics(self.schema)
        tx = self.endpoint.transactions_topic
        return [*topics, (tx, None)] if tx is not None else topics

    @property
    def applier(self) -> ChangeApplier:
        return self.cutter.applier

    def positions(self) -> dict[TopicPartitionKey, int]:
        return {self.streams[s]: o for s, o in self.cutter.positions().items()}

    def windows(self) -> dict[TopicPartitionKey, int]:
        """``--epoch-ms``: per stream, the window of its last event released (a
        checkpoint keeps it with :meth:`positions`: ``start_windows``)."""
        return {self.streams[s]: w for s, w in self.cutter.windows().items()}

    def __iter__(self) -> Iterator[Record]:
        ends = self._end_offsets() if self.stop_at_end else None
        skip = self.on_error == "skip"
        while True:
            polled = time.monotonic()
            fetched = self._fetch()
            idle_s = time.monotonic() - polled
            final = not fetched and ends is not None and self._reached(ends)
            for out in self.cutter.release(idle=not fetched, final=final, skip=skip,
                                           stop=self.stop_requested):
                if isinstance(out, InputError):
                    self._refuse(out)
                else:
                    if isinstance(out, Update):
                        self._remember(out.source, self._raw_of(out.source))
                    yield out
            if final:
                break
            if fetched:
                self._idle_s = 0.0
            else:
                self._idle(ends, idle_s)
                if self.stop_requested():
                    raise StopRequested

    def _fetch(self) -> int:
        got = self.consumer.poll(timeout_ms=self.poll_timeout_ms, max_records=5000)
        n = 0
        for tp, recs in sorted(got.items(), key=lambda kv: self._index[kv[0]]):
            i = self._index[tp]
            for r in recs:
                self._recent[record_source(tp.topic, tp.partition, r.offset)] = r.value
                self.cutter.feed(i, r.offset, r.key, r.value, r.timestamp)
                n += 1
        self.records_read += n
        while len(self._recent) > 20_000:
            self._recent.pop(next(iter(self._recent)))
        return n

    @property
    def _recent(self) -> dict[str, bytes | None]:
        recent: dict[str, bytes | None] | None = getattr(self, "_recent_raw", None)
        if recent is None:
            recent = {}
            self._recent_raw = recent
        return recent

    def _raw_of(self, source: str) -> bytes | None:
        return self._recent.get(source)

    def _refuse(self, err: InputError) -> None:
        self._remember(err.source, self._raw_of(err.source))
        if self.on_error == "fail" or getattr(err, "stops", False):
            raise err
        if self.dead_letter is not None:
            self.dead_letter.write(err)


def change_source_kwargs(opts: Any) -> dict[str, Any]:
    """The :class:`ChangeStreamSource` options of a run's options (``RunOptions``;
    fields a version without them lacks take their defaults)."""
    return {"epoch_size": opts.epoch,
            "min_epoch_events": getattr(opts, "min_epoch_events", 1) or 1,
            "transaction_timeout": getattr(opts, "transaction_timeout", None)
            or TRANSACTION_TIMEOUT_S,
            "epoch_ms": getattr(opts, "epoch_ms", None)}
