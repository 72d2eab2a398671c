"""Whole epochs of a change stream (``format=debezium-json`` or ``upsert-json``) read
from explicit offsets: the Spark and Flink runners' reader of change streams, as
:class:`~connectors.kafka.epochs.EpochReader` is theirs of ivmflow's own records.

Each read cuts anew: a fresh :class:`~connectors.kafka.changes.ChangeCutter` is fed the
records from the position's offsets, in stream order, and what it releases is numbered
(its epoch ends are the markers). The position after a read is the cutter's
:meth:`~connectors.kafka.changes.ChangeCutter.positions`, each stream's oldest record
not released, so the events a transaction still waits for (the cutter's held-back
events) are simply read again next time: nothing of them is kept.

An epoch longer than a read's limit (``max_records`` per stream, ``--batch-lines``:
TPC-H SF 0.1's load is one transaction of 879,309 events) is released in parts: when a
read fetched its limit of a stream that holds more and no whole epoch, it releases
what of the oldest epoch may go before the epoch is complete
(:meth:`~connectors.kafka.changes.ChangeCutter.release_partial`: updates without an
epoch end; the end comes after the epoch's last event, in a later read), and the
position moves past exactly those records. So a Spark micro-batch (a Flink tick) holds
at most the limit's records per stream, the epochs are those of a whole release, and a
restart from a position inside an epoch goes on inside it. Where nothing may go yet
(the oldest transaction's END not fetched, events without a transaction held before
it), the read's limit doubles until a whole epoch or a part of one arrives, as before;
such a retry is not decoded again (:class:`~connectors.kafka.epochs.EpochReader`
fetches only the records it lacks and the cutter of the attempt, which released
nothing, is fed them). Besides the offsets the position keeps, in its ``cut`` (plain
data, in the runner's checkpoint):

* ``windows``: with ``--epoch-ms``, each stream's window of its last event released (a
  stream's windows never go back, so the next read must know where it stood);
* ``open``: the epoch released in part, if any
  (:meth:`~connectors.kafka.changes.ChangeCutter.open_state`: the events released in
  it and its oldest transaction's per relation, checked against the END's counts;
  with ``--epoch N`` each stream's events of it; with ``--epoch-ms`` its window);
* ``fetched``, ``idle`` and ``partial``: the offsets the read fetched to, whether it
  had caught up with the topics and whether it released part of an epoch, so that
  :meth:`~connectors.kafka.epochs.EpochReader.read_between` (a Spark micro-batch
  planned before a crash) cuts exactly the same records again.

The upsert state (the current row per key of the keyed tables,
:class:`~connectors.kafka.upsert.ChangeApplier`) lives in the reader across reads, and
in an :class:`UpsertStore` of the runner's checkpoint, versioned by the position's
sequence number (``cursor.seq``: every update takes one, and only updates change the
state). A reader whose state is not that of the position it is asked to read from (a
restart) restores it from the store. Why a store and not a rebuild from the topic (the
local runner replays the whole topic when it starts without a checkpoint): a
distributed runner goes on from its checkpoint's offsets, and the history before them
may be gone (retention) or compacted, which keeps only a key's latest record, one that
may lie after the position, so a replay would lose rows the view still holds; nor can
the view's own state give the rows back (it keeps row digests, not rows, for the delete
check). The store writes only the keys each read changed: O(changes) per epoch.

``--transaction-timeout`` counts from the first time an END record was fetched (kept
by the reader in memory across reads; a restart counts anew).

This module imports kafka-python; ``operators/`` and ``plans/`` never do.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from connectors.kafka.changes import TRANSACTION_TIMEOUT_S, ChangeCutter, check_change_options
from connectors.kafka.config import KafkaEndpoint
from connectors.kafka.debezium import SKIP_HINT, ChangeError
from connectors.kafka.epochs import EpochReader, ReadPosition, _Fetched, stream_key
from connectors.kafka.upsert import ChangeApplier
from core.epochs import NumberedRecord
from core.errors import InputError
from core.records import Record
from core.schema import Row, Schema, Value

__all__ = ["ChangeReader", "UpsertStore", "state_note", "upsert_note", "write_state_summary"]

Changes = dict[tuple[str, tuple[Value, ...]], Row | None]
"""Keys changed by a read: ``(relation, key)`` -> the row now (None: deleted)."""


class UpsertStore(Protocol):
    """Where a runner keeps the upsert state with its checkpoints."""

    def restore(self, seq: int, applier: ChangeApplier) -> None:
        """Load the state at the position numbered up to ``seq`` into the empty
        ``applier`` (and forget any saved after it: those reads are done again)."""

    def save(self, seq: int, changes: Changes) -> None:
        """The keys a read that ended at ``seq`` changed (called after every read:
        empty, a read that applied nothing)."""


class ChangeReader(EpochReader):
    """Reads whole epochs of a change stream from explicit offsets (module docstring).

    The cut options are the local runner's (:class:`~connectors.kafka.changes.
    ChangeCutter`); ``store`` keeps the upsert state (None: in memory only, a reader
    that never restarts); ``summary``: a JSON file the reader keeps the state's size in
    (keys and bytes), for the run's summary line. A bad event raises its
    :class:`~core.errors.InputError` (topic, partition, offset, field)."""

    def __init__(self, endpoint: KafkaEndpoint, schema: Schema, *,
                 epoch_size: int | None = None, min_epoch_events: int = 1,
                 transaction_timeout: float = TRANSACTION_TIMEOUT_S,
                 epoch_ms: int | None = None, store: UpsertStore | None = None,
                 summary: str | None = None) -> None:
        check_change_options(endpoint, schema, epoch_size, epoch_ms)
        super().__init__(endpoint, schema)
        self.cut_options: dict[str, Any] = {
            "epoch_size": epoch_size, "min_epoch_events": min_epoch_events,
            "transaction_timeout": transaction_timeout, "epoch_ms": epoch_ms}
        self.store = store
        self.summary = summary
        self.applier = self._fresh_applier()
        self._state_seq: int | None = None
        """The position (its ``cursor.seq``) the upsert state is that of; None: unknown
        (not loaded yet, or a read changed it and has not returned)."""
        self._arrived: dict[tuple[int, int], float] = {}
        """END records' first fetch (``time.monotonic()``) by (stream, offset)."""
        self._summary_due = 0.0
        self._summary_cost = 0.0
        self._partial: tuple[ReadPosition, ChangeCutter, list[int]] | None = None
        """Within one :meth:`read`: the cutter of an attempt that released nothing (a
        transaction longer than the read's limit), its position and the records fed
        per stream: the next attempt, with the limit doubled, feeds it the records
        fetched since instead of decoding them all again."""

    def _fresh_applier(self) -> ChangeApplier:
        applier = ChangeApplier(self.schema, upsert=self.endpoint.format == "upsert-json")
        applier.track()
        return applier

    def _input_topics(self) -> list[tuple[str, str | None]]:
        topics = super()._input_topics()
        tx = self.endpoint.transactions_topic
        return [*topics, (tx, None)] if tx is not None else topics

    def _decode(self, topic: str, partition: int, message: Any, relation: str | None) -> Any:
        # Decoded by the cutter, which needs the key and timestamp too.
        return message.key, message.value, message.timestamp

    def _replay_targets(self, end: ReadPosition) -> dict[str, int]:
        return dict(end.cut["fetched"]) if end.cut else end.offsets

    # -- the upsert state ------------------------------------------------------------

    def _restore(self, pos: ReadPosition) -> None:
        """Make the upsert state that of ``pos``."""
        seq = pos.cursor.seq
        if self._state_seq == seq:
            return
        if self.store is None:
            if seq != 0 or self._state_seq is not None:
                msg = (f"{self.endpoint.url}: expected the upsert state at sequence {seq}, "
                       f"found it at {self._state_seq} and no store to restore it from")
                raise RuntimeError(msg)
        else:
            self.applier = self._fresh_applier()
            self.store.restore(seq, self.applier)
            self.applier.take_changes()  # (what the restore put is not a change)
        self._state_seq = seq

    def _saved(self, end: ReadPosition) -> None:
        """Write back the keys the read that ended at ``end`` changed."""
        changes = self.applier.take_changes()
        if self.store is not None:
            self.store.save(end.cursor.seq, changes)
        self._state_seq = end.cursor.seq
        now = time.monotonic()
        if self.summary is not None and (end.done or now >= self._summary_due):
            write_state_summary(self.summary, self.applier)
            self._summary_cost = time.monotonic() - now
            # Counting the bytes walks the state: at most a tenth of the time on it.
            self._summary_due = now + max(2.0, 10 * self._summary_cost)

    # -- reading ---------------------------------------------------------------------

    def read(self, pos: ReadPosition, max_records: int = 10_000, epoch_size: int | None = None,
             timeout_s: float = 5.0) -> tuple[list[NumberedRecord], ReadPosition]:
        """The next whole epochs after ``pos`` (``epoch_size`` is ignored: ``--epoch N``
        is a cut option, N events per stream) and the position after them."""
        del epoch_size
        self._partial = None
        try:
            numbered, end = super().read(pos, max_records, None, timeout_s)
        finally:
            self._partial = None
        if not pos.done:
            self._saved(end)
        return numbered, end

    def read_between(self, start: ReadPosition, end: ReadPosition,
                     epoch_size: int | None = None) -> list[NumberedRecord]:
        del epoch_size
        numbered = super().read_between(start, end, None)
        if not start.done:
            self._saved(end)
        return numbered

    def _cut(self, pos: ReadPosition, fetched: Sequence[_Fetched], *, final: bool,
             idle: bool, capped: bool = False, replay: ReadPosition | None = None
             ) -> tuple[list[Record], list[int], dict[str, Any] | None]:
        streams = self.streams()
        keys = list(pos.offsets)
        index = {stream_key(t, p): i for i, (t, p, _r) in enumerate(streams)}
        partial, self._partial = self._partial, None
        if replay is None and partial is not None and partial[0] is pos:
            _pos, cutter, fed = partial  # (the state is untouched: it released nothing)
        else:
            self._restore(pos)
            self._state_seq = None  # (the release below changes the state)
            cutter = ChangeCutter(self.endpoint, self.schema, streams, applier=self.applier,
                                  **self.cut_options)
            windows = (pos.cut or {}).get("windows", {})
            for k in keys:
                cutter.start(index[k], pos.offsets[k], windows.get(k))
            cutter.resume(_indexed((pos.cut or {}).get("open"), index))
            fed = [0] * len(keys)
        now = time.monotonic()
        for j, (k, f) in enumerate(zip(keys, fetched)):
            i = index[k]
            ends = streams[i][2] is None  # the transaction topic
            for offset, (key, value, timestamp) in f.records[fed[j]:]:
                arrived = self._arrived.setdefault((i, offset), now) if ends else None
                cutter.feed(i, offset, key, value, timestamp, arrived)
        if replay is not None:
            # Cut as the read that ended at ``replay`` cut; its ENDs were not overdue.
            idle, final, now = bool((replay.cut or {}).get("idle")), replay.done, -float("inf")
        out: list[Record] = []
        for rec in cutter.release(idle=idle, final=final, now=now):
            if isinstance(rec, InputError):
                raise _stopping(rec)
            out.append(rec)
        # An epoch longer than the read's limit goes in parts (its end after its last
        # event): the read holds at most the limit's records per stream, never the
        # whole epoch (a transaction of 879,309 events, TPC-H SF 0.1's load, planned as
        # one Spark micro-batch ran the driver out of heap).
        if replay is not None:
            in_parts = bool((replay.cut or {}).get("partial"))
        else:
            in_parts = not out and capped and not final
        if in_parts:
            for rec in cutter.release_partial():
                if isinstance(rec, InputError):
                    raise _stopping(rec)
                out.append(rec)
            in_parts = bool(out)
        released = cutter.positions()
        nxt = [released.get(index[k], pos.offsets[k]) for k in keys]
        if not out and not final and nxt == list(pos.offsets.values()):
            self._partial = (pos, cutter, [len(f.records) for f in fetched])
        for (i, offset) in list(self._arrived):
            if offset < released.get(i, 0):
                del self._arrived[i, offset]
        by_key = {i: k for k, i in index.items()}
        cut = {"fetched": {k: f.end for k, f in zip(keys, fetched)}, "idle": idle,
               "windows": {by_key[i]: w for i, w in cutter.windows().items()},
               "open": _indexed(cutter.open_state(), by_key), "partial": in_parts}
        return out, nxt, cut


def _indexed(state: dict[str, Any] | None, names: Mapping[Any, Any]) -> dict[str, Any] | None:
    """An open epoch's state (:meth:`ChangeCutter.open_state`) with its streams renamed
    by ``names`` (stream index <-> ``topic:partition``, as the position names them)."""
    if not state or "segments" not in state:
        return state
    return {**state, "segments": {names[s]: n for s, n in state["segments"].items()}}


RUNNER_HINT = ("fix the event (the spark and flink runners stop at a bad event; the local "
               "runner's --on-error skip sends it to the dead-letter topic)")


def _stopping(err: InputError) -> InputError:
    """``err`` as the distributed runners raise it: they have no dead-letter output, so
    the hint that says to skip the event says what they do instead."""
    if err.hint != SKIP_HINT:
        return err
    return ChangeError(err.source, err.record, err.expected, err.found, RUNNER_HINT)


def write_state_summary(path: str, applier: ChangeApplier) -> None:
    """Write the upsert state's size (``{"keys": ..., "bytes": ...}``) to ``path``
    (atomically: the runner reads it after the job); nothing without a keyed table."""
    if not applier.state:
        return
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps({"keys": applier.keys, "bytes": applier.state_bytes()}))
    os.replace(tmp, target)


def state_note(path: str | Path) -> str | None:
    """The summary line's words for the upsert state a reader wrote to ``path``
    (None: no state kept)."""
    try:
        got = json.loads(Path(path).read_text(encoding="utf-8"))
        keys, size = int(got["keys"]), int(got["bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return upsert_note(keys, size)


def upsert_note(keys: int, size: int) -> str:
    """``upsert state 1,204 keys, 0.3 MB`` for the run's summary line.

    >>> upsert_note(1204, 310_000)
    'upsert state 1,204 keys, 0.3 MB'
    """
    return f"upsert state {keys:,} keys, {size / 1e6:.1f} MB"
