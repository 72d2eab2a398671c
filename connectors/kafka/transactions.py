"""One epoch per source transaction: cutting the change events of several topics into
epochs with Debezium's transaction metadata (pure: no broker; the local runner's
:class:`~connectors.kafka.changes.ChangeStreamSource` and the distributed runners'
reader feed it).

Debezium (``provide.transaction.metadata=true``) writes a BEGIN and an END record per
transaction to ``<topic.prefix>.transaction``, in commit order; END says how many events
the transaction wrote to each data collection (``schema.table``), and every change
event names its transaction (``transaction.id``). :class:`TransactionAligner`:

* takes each stream's events (:meth:`~TransactionAligner.event`) and the END records
  (:meth:`~TransactionAligner.end`) in the order they are fetched, in any interleaving;
* releases transaction T, the oldest END not yet released, once every relation the
  query reads holds exactly the events END counts for its data collection
  (collections the query does not read are not waited for; a transaction with no
  event for the query's relations makes no epoch);
* an epoch is one transaction, numbered in commit order, or with ``min_events`` several
  consecutive ones until it holds at least that many events; its events come stream by
  stream (stream order: the relations' topics sorted by relation, then partition),
  each stream's in its own order, so the epochs never depend on fetch timing;
* events without a transaction (the snapshot's ``r`` events) are released, before the
  next transaction, as an epoch of their own (:meth:`~TransactionAligner.pop_epochs`),
  or when the source is idle (:meth:`~TransactionAligner.flush_untransacted`);
* what does not add up is reported in :attr:`~TransactionAligner.problems` (an event
  of a transaction already released, an END counting fewer events than arrived), and
  :meth:`~TransactionAligner.overdue` names the oldest END still incomplete;
* an event refused without a readable transaction id (malformed JSON, say:
  :meth:`~TransactionAligner.orphan`) is placed by its position in its stream, where
  each transaction's events are contiguous and transactions come in commit order: it
  belongs to a transaction from that of the event before it to that of the event after
  it. Between two events of one transaction (or of the snapshot) that is the one; else
  the one of those transactions that lacks an event of its table, when exactly one does
  (the transaction it belongs to surely does; one whose END has not arrived is waited
  for), and it counts there as a refused event. An orphan with no event after it yet is
  placed so only once everything has arrived (:meth:`~TransactionAligner.settle`: an
  END overdue). Where two or more transactions it may belong to lack events,
  :meth:`~TransactionAligner.suspects` names it for the oldest (the caller stops rather
  than release that transaction without it); one whose possible transactions were all
  released complete is handed back in :attr:`~TransactionAligner.strays`;
* an epoch longer than a reader's batch may be released in parts
  (:meth:`~TransactionAligner.take_partial`: the complete transactions of its group and
  the events of the oldest END's transaction that have arrived, without the epoch's
  end, which comes after the last one); a reader that cuts each read anew carries the
  open epoch over in its position (:meth:`~TransactionAligner.open_state`,
  :meth:`~TransactionAligner.resume`).

    >>> a: TransactionAligner[str] = TransactionAligner(["R", "S"], {"public.r": "R",
    ...                                                              "public.s": "S"})
    >>> a.event(1, "S", "t1", "s1"); a.event(0, "R", "t1", "r1"); a.event(0, "R", "t2", "r2")
    >>> from connectors.kafka.debezium import TransactionEnd
    >>> a.end(TransactionEnd("t1", 2, (("public.r", 1), ("public.s", 1)), "tx@0"), "END1")
    >>> [(e.items, e.markers, e.txids) for e in a.pop_epochs()]
    [(['r1', 's1'], ['END1'], ['t1'])]
    >>> a.end(TransactionEnd("t2", 2, (("public.r", 2),), "tx@1"), "END2")
    >>> a.pop_epochs(), a.overdue(now=1e12, timeout=0)[0].txid
    ([], 't2')
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from connectors.kafka.debezium import TransactionEnd

T = TypeVar("T")


@dataclass
class TxnEpoch(Generic[T]):
    """One released epoch: its events (stream by stream), the END records it consumed
    (also those of transactions without events for the query) and its transactions
    (empty: the events without a transaction)."""

    items: list[T]
    markers: list[T]
    txids: list[str]
    open: bool = False
    """It ends an epoch whose first events were released before (in parts,
    :meth:`TransactionAligner.take_partial`): it has an end even with no events left."""


@dataclass
class _Pending(Generic[T]):
    by_stream: dict[int, list[T]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    front: Counter[int] = field(default_factory=Counter)
    """Per stream: orphans placed before the transaction's first event there."""


@dataclass
class _Orphan(Generic[T]):
    """A refused event without a readable transaction id, and the transactions of its
    stream's neighbours: ``prev`` of the event before it (None: an event without a
    transaction; ``first``: none before it in this run, i.e. only released ones), and
    once the next event arrived (``pinned``) its transaction ``next``."""

    stream: int
    relation: str
    item: T
    prev: str | None
    first: bool
    pinned: bool = False
    next: str | None = None


def collection_relation(collection: str, relations: Sequence[str],
                        names: Mapping[str, str] | None = None) -> str | None:
    """The relation a data collection (``schema.table``, ``db.table``) is, or None
    (not read by the query): ``names`` first (lower-case collection -> relation),
    else by the table name after the last dot, case-insensitively.

    >>> collection_relation("public.Orders", ["orders", "items"])
    'orders'
    """
    low = collection.lower()
    if names is not None and low in names:
        return names[low]
    table = low.rsplit(".", 1)[-1]
    for r in relations:
        if r.lower() == table:
            return r
    return None


class TransactionAligner(Generic[T]):
    """Releases the events of several streams as one epoch per source transaction (see
    the module docstring). ``relations`` are the stream-independent relation names the
    query reads; ``collections`` maps data collection names (lower case) to them
    (others resolve by table name)."""

    def __init__(self, relations: Sequence[str], collections: Mapping[str, str] | None = None,
                 *, min_events: int = 1, released_memory: int = 100_000) -> None:
        self.relations = list(relations)
        self.collections = {k.lower(): v for k, v in (collections or {}).items()}
        self.min_events = max(1, min_events)
        self._pending: dict[str, _Pending[T]] = {}
        self._untransacted: dict[int, list[T]] = {}
        self._ends: deque[tuple[TransactionEnd, T, float]] = deque()
        self._released: dict[str, None] = {}
        self._released_memory = released_memory
        self._group: list[tuple[str, _Pending[T]]] = []
        self._group_markers: list[T] = []
        self._group_events = 0
        self.problems: list[tuple[T, str, str]] = []
        """``(item, expected, found)`` of what did not add up (taken by the caller)."""
        self._last: dict[int, str | None] = {}
        self._waiting: dict[int, list[_Orphan[T]]] = {}
        self._orphans: list[_Orphan[T]] = []
        self.strays: list[T] = []
        """Refused events without a transaction id whose possible transactions were all
        released without them (taken by the caller: they belong to no epoch)."""
        self._open = False
        """An epoch is open: some of its events were released (:meth:`take_partial`),
        its end was not."""
        self._carried: dict[str, Counter[str]] = {}
        """Per transaction, its events (per relation) released in parts before."""
        self._relation: dict[int, str] = {}
        """Each data stream's relation (as its events said)."""

    # -- input -----------------------------------------------------------------------

    def event(self, stream: int, relation: str, txid: str | None, item: T) -> None:
        """A change event of ``relation`` fetched from ``stream``."""
        for o in self._waiting.pop(stream, ()):
            o.pinned, o.next = True, txid
            if o.prev == txid and not o.first:  # inside one transaction's run of events
                self._add(o.stream, o.relation, txid, o.item)
            elif txid is None and (o.first or o.prev is None):  # inside the snapshot's
                self._add(o.stream, o.relation, None, o.item)
            else:
                self._orphans.append(o)
        self._last[stream] = txid
        self._relation[stream] = relation
        self._add(stream, relation, txid, item)

    def orphan(self, stream: int, relation: str, item: T) -> None:
        """A refused event of ``stream`` whose transaction id could not be read (module
        docstring), in the stream's order among :meth:`event` calls."""
        self._waiting.setdefault(stream, []).append(
            _Orphan(stream, relation, item, self._last.get(stream), stream not in self._last))

    def _add(self, stream: int, relation: str, txid: str | None, item: T) -> None:
        if txid is None:
            self._untransacted.setdefault(stream, []).append(item)
            return
        if txid in self._released:
            self.problems.append((item, f"no more events of transaction {txid} (its "
                                  "END's count was reached and it was released)",
                                  "one more"))
            return
        p = self._pending.setdefault(txid, _Pending())
        p.by_stream.setdefault(stream, []).append(item)
        p.counts[relation] += 1
        self._relation[stream] = relation

    def end(self, end: TransactionEnd, item: T, now: float | None = None) -> None:
        """An END record of the transaction topic (BEGIN records are not needed)."""
        self._ends.append((end, item, time.monotonic() if now is None else now))

    def expected(self, end: TransactionEnd) -> Counter[str]:
        """The events ``end`` counts per relation the query reads."""
        out: Counter[str] = Counter()
        for collection, n in end.collections:
            rel = collection_relation(collection, self.relations, self.collections)
            if rel is not None:
                out[rel] += n
        return out

    # -- output ----------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Events held back."""
        return (sum(len(v) for p in self._pending.values() for v in p.by_stream.values())
                + sum(len(v) for v in self._untransacted.values())
                + len(self._orphans) + sum(len(v) for v in self._waiting.values()))

    def pop_epochs(self, final: bool = False) -> list[TxnEpoch[T]]:
        """The epochs whose transactions are complete, oldest first (``final``: also a
        last group smaller than ``min_events``)."""
        out: list[TxnEpoch[T]] = []
        while self._ends:
            end, item, _t = self._ends[0]
            want = self.expected(end)
            self._place()
            p = self._pending.get(end.txid, _Pending())
            got = p.counts + self._carried.get(end.txid, Counter())
            over = [r for r in got if got[r] > want.get(r, 0)]
            if over:
                r = over[0]
                self.problems.append((item, f"transaction {end.txid}: at most "
                                      f"{want.get(r, 0)} events of {r} (its END's count)",
                                      f"{got[r]} events"))
            elif any(got.get(r, 0) < n for r, n in want.items()):
                break
            self._take_head()
            if self._group_events >= self.min_events:
                out.extend(self._close())
        if final and (self._group or self._group_markers or self._open):
            out.extend(self._close())
        return out

    def _take_head(self) -> None:
        end, item, _t = self._ends.popleft()
        p = self._pending.pop(end.txid, _Pending())
        self._carried.pop(end.txid, None)
        self._released[end.txid] = None
        if len(self._released) > self._released_memory:
            self._released.pop(next(iter(self._released)))
        self._group_markers.append(item)
        self._drop_strays()
        n = sum(p.counts.values())
        if n:
            self._group.append((end.txid, p))
            self._group_events += n

    def _close(self) -> list[TxnEpoch[T]]:
        """The group as an epoch, after the events without a transaction as one of
        their own; those go after it when the group's epoch was open (its first events
        already released: the epoch they would precede has begun)."""
        if self._open:
            return [self._close_group(), *self._untransacted_epoch()]
        return [*self._untransacted_epoch(), self._close_group()]

    def _close_group(self) -> TxnEpoch[T]:
        items: list[T] = []
        for _txid, p in self._group:
            for s in sorted(p.by_stream):
                items.extend(p.by_stream[s])
        epoch = TxnEpoch(items, self._group_markers, [t for t, _ in self._group], self._open)
        self._group, self._group_markers, self._group_events = [], [], 0
        self._open = False
        return epoch

    # -- an epoch in parts -------------------------------------------------------------

    def take_partial(self, releasable: Callable[[int, list[T]], int]
                     ) -> tuple[list[T], list[T]] | None:
        """Release the head epoch's events that have arrived without ending it: the
        group's complete transactions (all their events, or nothing is released) and,
        of the oldest END's transaction, each stream's leading events that
        ``releasable(stream, candidates)`` allows (how many of the stream's candidates,
        in order, may go: a reader releases only a stream's oldest records, so that its
        position can move past them). Returns (events, END records consumed), or None:
        nothing to release (then nothing changed), e.g. no END waits, or events
        without a transaction are held (they make an epoch of their own before the
        group's). The epoch's end comes with its last transaction (:meth:`pop_epochs`:
        :attr:`TxnEpoch.open`)."""
        if (self._untransacted and not self._open) or self._orphans or any(
                self._waiting.values()):
            return None
        by_stream: dict[int, list[T]] = {}
        for _txid, p in self._group:
            for s, evs in p.by_stream.items():
                by_stream.setdefault(s, []).extend(evs)
        whole = {s: len(evs) for s, evs in by_stream.items()}
        head = self._pending.get(self._ends[0][0].txid) if self._ends else None
        if head is not None:
            for s, evs in head.by_stream.items():
                by_stream.setdefault(s, []).extend(evs)
        take = {s: releasable(s, evs) for s, evs in sorted(by_stream.items())}
        if any(take[s] < n for s, n in whole.items()):
            return None  # (a group's transaction is released whole or not at all)
        from_head = {s: take[s] - whole.get(s, 0) for s in take}
        if not self._group and not self._group_markers and not any(from_head.values()):
            return None
        items = [i for s in sorted(take) for i in by_stream[s][:take[s]]]
        markers = self._group_markers
        self._group, self._group_markers = [], []
        if head is not None and self._ends:
            txid = self._ends[0][0].txid
            carried = self._carried.setdefault(txid, Counter())
            for s, n in from_head.items():
                if n:
                    del head.by_stream[s][:n]
                    relation = self._relation[s]
                    head.counts[relation] -= n
                    carried[relation] += n
                    self._group_events += n
            head.counts = +head.counts
        self._open = True
        return items, markers

    def open_state(self) -> dict[str, Any] | None:
        """What a reader that cuts each read anew carries over of an open epoch (plain
        data; None: no epoch open): the events released in it, and the oldest END's
        transaction's events released per relation."""
        if not self._open:
            return None
        head = self._ends[0][0].txid if self._ends else None
        counts = dict(self._carried.get(head, Counter())) if head is not None else {}
        return {"events": self._group_events, "txid": head if counts else None,
                "counts": counts}

    def resume(self, state: Mapping[str, Any] | None) -> None:
        """Go on with the open epoch of :meth:`open_state` (before any input)."""
        if not state:
            return
        self._open = True
        self._group_events = int(state["events"])
        if state.get("txid") is not None:
            self._carried[str(state["txid"])] = Counter(
                {str(r): int(n) for r, n in state["counts"].items()})

    def _untransacted_epoch(self) -> list[TxnEpoch[T]]:
        if not self._untransacted:
            return []
        items = [i for s in sorted(self._untransacted) for i in self._untransacted[s]]
        self._untransacted = {}
        return [TxnEpoch(items, [], [])]

    def flush_untransacted(self) -> list[TxnEpoch[T]]:
        """The events without a transaction as an epoch, when no transaction is waiting
        (an idle source after a snapshot)."""
        if self._pending or self._ends or self._group or self._open:
            return []
        return self._untransacted_epoch()

    def _short(self, end: TransactionEnd, relation: str) -> bool:
        got = (self._pending.get(end.txid, _Pending()).counts.get(relation, 0)
               + self._carried.get(end.txid, Counter()).get(relation, 0))
        return got < self.expected(end).get(relation, 0)

    def _place(self, settled: bool = False) -> bool:
        """Count each orphan toward its transaction where its position leaves one
        possible (module docstring): of the transactions from its previous event's
        (the oldest unreleased one if that was released) to its next event's, in commit
        order, the only one that lacks an event of its relation (the one it belongs to
        lacks it for sure). ``settled``: everything has arrived (an END overdue, the
        end of the input), so an orphan with no next event may be any transaction from
        its previous one on. Returns whether one was placed."""
        waiting = [o for os in self._waiting.values() for o in os] if settled else []
        if not self._orphans and not waiting:
            return False
        ends = [e for e, _item, _t in self._ends]
        order = {e.txid: i for i, e in enumerate(ends)}
        placed = False
        for o in [*self._orphans, *waiting]:
            if o.pinned and o.next is not None:
                hi = order.get(o.next)
            else:
                hi = len(ends) - 1 if settled else None
            lo = 0 if o.first or o.prev is None or o.prev in self._released \
                else order.get(o.prev)
            if hi is None or lo is None:
                continue
            short = [ends[i].txid for i in range(lo, hi + 1) if self._short(ends[i], o.relation)]
            if len(short) != 1:
                continue
            if o.pinned:
                self._orphans.remove(o)
            else:
                self._waiting[o.stream].remove(o)
            p = self._pending.setdefault(short[0], _Pending())
            events = p.by_stream.setdefault(o.stream, [])
            if o.pinned and o.next == short[0]:  # before its first event of the stream
                events.insert(p.front[o.stream], o.item)
                p.front[o.stream] += 1
            else:
                events.append(o.item)
            p.counts[o.relation] += 1
            placed = True
        return placed

    def settle(self) -> bool:
        """Place the orphans that everything having arrived lets place (see
        :meth:`_place`); call when an END is overdue, before :meth:`suspects`."""
        return self._place(settled=True)

    def _drop_strays(self) -> None:
        """Orphans whose next event's transaction was released (or, next to the
        snapshot's events, whose previous one was): theirs were all released without
        them."""
        keep = []
        for o in self._orphans:
            gone = (o.next in self._released if o.next is not None
                    else o.prev is not None and o.prev in self._released)
            if gone:
                self.strays.append(o.item)
            else:
                keep.append(o)
        self._orphans = keep

    def suspects(self, end: TransactionEnd) -> list[T]:
        """The orphans that may be events the oldest unreleased END's transaction
        lacks (of a relation it lacks events of, with nothing but released transactions
        or its own events before them in their stream), in stream order."""
        want = self.expected(end)
        got = self._pending.get(end.txid, _Pending()).counts + self._carried.get(
            end.txid, Counter())
        short = {r for r, n in want.items() if got.get(r, 0) < n}
        waiting = [o for os in self._waiting.values() for o in os]
        return [o.item for o in sorted([*self._orphans, *waiting], key=lambda o: o.stream)
                if o.relation in short
                and (o.first or o.prev is None or o.prev == end.txid
                     or o.prev in self._released)
                and (not o.pinned or o.next is None or o.next not in self._released)]

    def overdue(self, now: float, timeout: float
                ) -> tuple[TransactionEnd, T, Counter[str], Counter[str]] | None:
        """The oldest END still incomplete ``timeout`` seconds after it arrived: (END,
        its item, the events it counts per relation, those arrived); else None."""
        if not self._ends:
            return None
        end, item, t = self._ends[0]
        if now - t < timeout:
            return None
        want = self.expected(end)
        got = self._pending.get(end.txid, _Pending()).counts
        return end, item, want, got + self._carried.get(end.txid, Counter())

    def force_head(self) -> list[TxnEpoch[T]]:
        """Release the oldest END's transaction with the events that arrived (``--on-error
        skip`` after :meth:`overdue`)."""
        if not self._ends:
            return []
        self._take_head()
        return self._close()

    def open_transactions(self) -> int:
        """Transactions with events but no END yet (left unreleased at a bounded end)."""
        ended = {e.txid for e, _i, _t in self._ends}
        return sum(1 for t in self._pending if t not in ended)


def describe_missing(end: TransactionEnd, want: Counter[str], got: Counter[str]) -> str:
    """``orders 1 of 2, lineitem 0 of 3`` for an incomplete transaction."""
    return ", ".join(f"{r} {got.get(r, 0)} of {n}" for r, n in sorted(want.items())
                     if got.get(r, 0) != n)
