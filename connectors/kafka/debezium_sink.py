"""Deltas as Debezium change events: ``--deltas kafka://HOST:PORT/TOPIC?format=debezium-json``.

Each epoch's delta is one source transaction ``<k>`` (the epoch number), written in ONE
Kafka transaction with the source offsets (exactly once, as
:class:`~connectors.kafka.KafkaDeltaSink`): a BEGIN record on ``TOPIC.transaction``
(or ``transactions=``), the change events on ``TOPIC`` (partition 0, in epoch order),
an END record counting them (data collection ``ivmflow.TOPIC``). Every event has a
``transaction`` block (``id`` = the epoch, ``total_order``). A deleted row is a ``d``
event (``before`` = the row), an inserted one a ``c`` (``after``); with the output's
key (the GROUP BY columns of an aggregate query) a deleted and an inserted row of one
key are a ``u`` with both images (an aggregate that changes). A multiplicity above one
is that many events. Values as :func:`~connectors.kafka.debezium.json_field` writes
them (DECIMAL as text, ``decimal.handling.mode=string``; DATE as days, TIMESTAMP as
microseconds since the epoch), so Flink SQL (``debezium-json``), Kafka Connect sinks
and Materialize read the topic; an epoch without rows writes no events.

    >>> events(3, ((-1, ("a", 1)), (1, ("a", 2)), (1, ("b", 1))), ("g", "n"), (0,), "out")
    ... # doctest: +NORMALIZE_WHITESPACE
    [('u', ('a', 1), ('a', 2)), ('c', None, ('b', 1))]
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from connectors.kafka.config import KafkaEndpoint
from connectors.kafka.debezium import encode_change, encode_transaction
from connectors.kafka.sink import KafkaDeltaSink
from connectors.kafka.topics import _read_committed, ensure_topic
from core.schema import Row, Value

Event = tuple[str, Row | None, Row | None]


def events(k: int, rows: Sequence[tuple[int, Row]], columns: Sequence[str],
           key: Sequence[int] | None, topic: str) -> list[Event]:
    """The change events of epoch ``k``'s delta rows (module docstring): ``(op, before,
    after)``, deletes and inserts of one key paired as ``u`` in their order."""
    del k, columns, topic
    out: list[Event] = []
    if key is None:
        for mult, row in rows:
            op = "c" if mult > 0 else "d"
            out += [(op, None, row) if op == "c" else (op, row, None)] * abs(mult)
        return out
    olds: dict[tuple[Value, ...], list[Row]] = {}
    news: dict[tuple[Value, ...], list[Row]] = {}
    order: list[tuple[Value, ...]] = []
    for mult, row in rows:
        kv = tuple(row[i] for i in key)
        if kv not in olds:
            olds[kv], news[kv] = [], []
            order.append(kv)
        (news if mult > 0 else olds)[kv].extend([row] * abs(mult))
    for kv in order:
        o, n = olds[kv], news[kv]
        pairs = min(len(o), len(n))
        out += [("u", o[i], n[i]) for i in range(pairs)]
        out += [("d", r, None) for r in o[pairs:]]
        out += [("c", None, r) for r in n[pairs:]]
    return out


class DebeziumDeltaSink(KafkaDeltaSink):
    """A :class:`~connectors.kafka.KafkaDeltaSink` writing Debezium change events and
    transaction metadata (module docstring). ``key``: the output columns that identify a
    row (None: no ``u`` events)."""

    def __init__(self, endpoint: KafkaEndpoint, columns: Sequence[str], *,
                 transactional_id: str, key: Sequence[int] | None = None,
                 kind: Literal["epoch", "snapshot"] = "epoch") -> None:
        self.key = tuple(key) if key is not None else None
        self.transaction_topic = endpoint.transactions_topic or f"{endpoint.topic}.transaction"
        self.collection = f"ivmflow.{endpoint.topic}"
        ensure_topic(endpoint, self.transaction_topic, 1)
        super().__init__(endpoint, columns, transactional_id=transactional_id, kind=kind)

    def _records(self, k: int, rows: Sequence[tuple[int, Row]]
                 ) -> list[tuple[str, bytes | None, bytes]]:
        evs = events(k, rows, self.columns, self.key, self.topic)
        if not evs:
            return []
        txid = str(k)
        key = txid.encode()
        out: list[tuple[str, bytes | None, bytes]] = [
            (self.transaction_topic, key, encode_transaction("BEGIN", txid, ts_ms=k))]
        for i, (op, before, after) in enumerate(evs, 1):
            out.append((self.topic, key, encode_change(
                op, before, after, self.columns, name="ivmflow", schema="ivmflow",
                table=self.topic, txid=txid, total_order=i, collection_order=i, ts_ms=k)))
        out.append((self.transaction_topic, key,
                    encode_transaction("END", txid, [(self.collection, len(evs))], ts_ms=k)))
        return out

    def _read_last(self) -> int:
        """The id of the last END record on the transaction topic (0: none)."""
        return read_last_transaction(self.endpoint)

    def _check_committed(self, k: int, rows: Sequence[tuple[int, Row]]) -> None:
        """Read epoch ``k`` back after a fencing: its events must be exactly those
        written (see :meth:`KafkaDeltaSink._check_committed`)."""
        from connectors.kafka.sink import KafkaEpochMismatchError

        wrote = Counter(v for t, _k, v in self._records(k, rows) if t == self.topic)
        window = 4 * len(wrote) + 64
        while True:
            recs, whole = _read_committed(self.endpoint, self.topic,
                                          lambda b, e, w=window: e - w)  # type: ignore[misc]
            ids = [_event_txid(r.value) for r in recs]
            if whole or any(i is not None and i < k for i in ids):
                break
            window *= 16
        found = Counter(r.value for r, i in zip(recs, ids) if i == k)
        if found != wrote:
            msg = (f"Kafka sink {self.endpoint.url}: epoch {k}, the first committed after "
                   f"this sink fenced an older producer, was read back: the topic "
                   f"{self.topic!r} holds {sum(found.values())} events of transaction {k} "
                   f"where this run wrote {sum(wrote.values())}: the broker took a record "
                   "of the fenced producer into the committed transaction.")
            raise KafkaEpochMismatchError(msg)


def read_last_transaction(endpoint: KafkaEndpoint) -> int:
    """The last epoch a Debezium delta topic holds: the id of the last committed END
    record on its transaction topic (0: none), read from the end in growing windows."""
    topic = endpoint.transactions_topic or f"{endpoint.topic}.transaction"
    window = 64
    while True:
        recs, whole = _read_committed(endpoint, topic,
                                      lambda b, e, w=window: e - w)  # type: ignore[misc]
        found = [e for e in map(_end_id, (r.value for r in recs)) if e is not None]
        if found or whole:
            return max(found, default=0)
        window *= 16


def _end_id(value: bytes | None) -> int | None:
    try:
        obj = json.loads(value or b"")
        return int(obj["id"]) if obj.get("status") == "END" else None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _event_txid(value: bytes | None) -> int | None:
    try:
        return int(json.loads(value or b"")["transaction"]["id"])
    except (ValueError, TypeError, KeyError):
        return None


def output_key(cq: object) -> tuple[int, ...] | None:
    """The output columns that identify a row of ``cq`` (a
    :class:`plans.cq.ConjunctiveQuery`): the GROUP BY columns of an aggregate query
    without computed columns after the aggregate (``()`` for a global aggregate), else
    None."""
    if not getattr(cq, "is_aggregate", False) or getattr(cq, "post", None) is not None:
        return None
    columns = getattr(cq, "columns", ())
    return tuple(i for i, c in enumerate(columns) if getattr(c, "var", None) is not None)
