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
  :func:`encode_update`, :func:`encode_delta`, :func:`decode_delta` (DESIGN section 3).
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
fenced by another producer with its ``transactional.id`` stops at once.

Engine state on restart (local runner): the update topic is re-read from its beginning
and the state rebuilt, already-committed epochs suppressed -- the same path as the file
``--resume``.  Chosen over a state checkpoint because it is correct by
construction (the state is a function of the update prefix) and needs no second store;
the price is replay time and an update topic that keeps its whole history (no deletion
by retention).  The committed group offsets then serve monitoring (lag) and
:meth:`KafkaUpdateSource.committed` lets a runner with a state checkpoint resume there.

Example (pure parts)::

    >>> from plans.schema import Column, Relation, Schema
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

import contextlib
import hashlib
import json
import re
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NoReturn, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from connectors.base import DeadLetterSink
from dataflow.errors import InputError, IvmflowError
from dataflow.records import EpochDelta, EpochEnd, Record, Update
from plans.schema import Row, Schema, Value, ValueParseError

__all__ = [
    "SKIP_HINT",
    "AlignedEpoch",
    "EpochAligner",
    "KafkaConfigError",
    "KafkaDeliveryError",
    "KafkaDeadLetterSink",
    "KafkaDeltaSink",
    "KafkaEndpoint",
    "KafkaUrl",
    "KafkaUpdateSource",
    "StopRequested",
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

BOOTSTRAP_TIMEOUT_MS = 10_000
"""How long a client waits for an unreachable broker (``bootstrap.timeout.ms``)."""

EPOCH_ATTEMPTS = 3
"""How often the delta sink tries an epoch's transaction before it stops the run."""

SKIP_HINT = "fix the record or run with --on-error skip to send it to the dead-letter topic"

OnError = Literal["fail", "skip"]
TopicPartitionKey = tuple[str, int]
"""``(topic, partition)``: one stream of an input."""

_OWN_PARAMS = ("topics", "dead-letter")
_ALIASES = {
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "bootstrap.servers": "bootstrap_servers",
}


class KafkaConfigError(IvmflowError):
    """A bad ``kafka://`` URL or option, or a topic that does not fit (usage error)."""


class KafkaDeliveryError(IvmflowError):
    """An epoch could not be delivered to the broker; nothing of it was committed."""


class StopRequested(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by a source (or a runner's delta callback) to stop at an epoch boundary
    after SIGINT/SIGTERM; the open, incomplete epoch is not emitted."""


# ---------------------------------------------------------------------------------------
# URLs and client configuration


@dataclass(frozen=True)
class KafkaEndpoint:
    """A parsed ``kafka://`` URL: where the broker is, which topic(s), client options.

    ``config`` holds Kafka client properties in dotted Kafka spelling (passed through);
    ``relation_topics`` maps relation names to topics when each relation has its own
    topic (``per_relation``).
    """

    bootstrap: str
    topic: str
    config: Mapping[str, str] = field(default_factory=dict)
    per_relation: bool = False
    relation_topics: Mapping[str, str] = field(default_factory=dict)
    dead_letter_topic: str | None = None

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}/{self.topic}"

    @property
    def group_id(self) -> str | None:
        return self.config.get("group.id")

    @property
    def transactional_id(self) -> str | None:
        return self.config.get("transactional.id")

    def topic_for(self, relation: str) -> str:
        """The topic relation ``relation`` is read from (per-relation inputs)."""
        for name, topic in self.relation_topics.items():
            if name.lower() == relation.lower():
                return topic
        return f"{self.topic}.{relation}" if self.per_relation else self.topic

    def input_topics(self, schema: Schema) -> list[tuple[str, str | None]]:
        """``(topic, relation)`` pairs to read, in stream order (relation ``None``: the
        records name their relation).

        >>> from plans.schema import Column, Relation, Schema
        >>> s = Schema({r: Relation(r, (Column("a", "INT"),)) for r in ("S", "R")})
        >>> parse_kafka_url("kafka://h:1/u?topics=per-relation").input_topics(s)
        [('u.R', 'R'), ('u.S', 'S')]
        """
        if not self.per_relation:
            return [(self.topic, None)]
        return [(self.topic_for(r), r) for r in sorted(schema.relations)]

    @classmethod
    def parse(cls, url: str, options: Iterable[str] | Mapping[str, str] = ()) -> KafkaEndpoint:
        """Same as :func:`parse_kafka_url`."""
        return parse_kafka_url(url, options)

    def consumer_config(self) -> dict[str, Any]:
        """``client_config("consumer")``."""
        return self.client_config("consumer")

    def producer_config(self) -> dict[str, Any]:
        """``client_config("producer")``."""
        return self.client_config("producer")

    def with_defaults(self, **props: str) -> KafkaEndpoint:
        """A copy with Kafka properties set where the URL did not set them."""
        config = {**props, **self.config}
        return KafkaEndpoint(self.bootstrap, self.topic, config, self.per_relation,
                             self.relation_topics, self.dead_letter_topic)

    def client_config(self, role: Literal["consumer", "producer", "admin"]) -> dict[str, Any]:
        """kafka-python keyword arguments for a client of ``role``: the bootstrap servers
        plus every passed-through property that this client type knows (``group.id`` is
        a consumer property, ``transactional.id`` a producer one, ...).

        >>> ep = parse_kafka_url("kafka://h:1/t?security.protocol=SASL_SSL&sasl.username=u"
        ...                      "&request.timeout.ms=5000&group.id=g")
        >>> sorted(ep.client_config("producer").items())  # doctest: +NORMALIZE_WHITESPACE
        [('bootstrap_servers', 'h:1'), ('bootstrap_timeout_ms', 10000),
         ('request_timeout_ms', 5000), ('sasl_plain_username', 'u'),
         ('security_protocol', 'SASL_SSL')]
        """
        known = _known_options(role)
        out: dict[str, Any] = {"bootstrap_servers": self.bootstrap}
        if "bootstrap_timeout_ms" in known:
            # kafka-python waits 30 s for an unreachable broker before it says so; a
            # typo in the address should fail faster.  bootstrap.timeout.ms overrides.
            out["bootstrap_timeout_ms"] = BOOTSTRAP_TIMEOUT_MS
        for key, value in self.config.items():
            name = _option_name(key)
            if name in known:
                out[name] = _option_value(value)
        return out


KafkaUrl = KafkaEndpoint
"""Alias: ``KafkaUrl.parse("kafka://h:p/topic")``."""


def _option_name(key: str) -> str:
    return _ALIASES.get(key, key.replace(".", "_").replace("-", "_"))


def _option_value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


def _known_options(role: str) -> set[str]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient

    cls = {"consumer": KafkaConsumer, "producer": KafkaProducer, "admin": KafkaAdminClient}
    return set(cls[role].DEFAULT_CONFIG)


def parse_kafka_url(url: str, options: Iterable[str] | Mapping[str, str] = ()) -> KafkaEndpoint:
    """Parse ``kafka://host:port[,host:port]/topic[?key=value&...]``; ``options`` adds
    ``KEY=VALUE`` properties (the CLI's ``--kafka-option``), overriding the URL's.

    Raises :class:`KafkaConfigError` on a URL without host or topic, a malformed option,
    or a property kafka-python does not know (checked when kafka-python is installed).

    >>> parse_kafka_url("kafka://b1:9092,b2:9092/deltas", ["client.id=x"]).config
    {'client.id': 'x'}
    >>> parse_kafka_url("kafka://h:1/u?topic.G=edges").topic_for("g")
    'edges'
    """
    parts = urlsplit(url)
    if parts.scheme.lower() != "kafka":
        msg = f"{url!r}: expected a kafka://host:port/topic URL, found scheme {parts.scheme!r}"
        raise KafkaConfigError(msg)
    bootstrap = parts.netloc
    topic = unquote(parts.path.lstrip("/"))
    if not bootstrap or not topic or "/" in topic:
        msg = (f"{url!r}: expected kafka://host:port/topic (one topic name after the "
               f"broker address), found host {bootstrap!r} and topic {topic!r}")
        raise KafkaConfigError(msg)
    pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False)
    extra = options.items() if isinstance(options, Mapping) else [_split_option(o) for o in options]
    config: dict[str, str] = {}
    relation_topics: dict[str, str] = {}
    per_relation = False
    dead_letter: str | None = None
    for key, value in [*pairs, *extra]:
        if key == "topics":
            if value not in ("per-relation", "single"):
                msg = f"{url!r}: topics= expects 'per-relation' or 'single', found {value!r}"
                raise KafkaConfigError(msg)
            per_relation = value == "per-relation"
        elif key.startswith("topic."):
            relation_topics[key[len("topic."):]] = value
            per_relation = True
        elif key == "dead-letter":
            dead_letter = value
        else:
            config[key] = value
    _check_options(url, config)
    return KafkaEndpoint(bootstrap, topic, config, per_relation, relation_topics, dead_letter)


def _split_option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        msg = f"Kafka option {text!r}: expected KEY=VALUE, e.g. security.protocol=SASL_SSL"
        raise KafkaConfigError(msg)
    return key.strip(), value


def _check_options(url: str, config: Mapping[str, str]) -> None:
    try:
        known = _known_options("consumer") | _known_options("producer") | _known_options("admin")
    except ImportError:  # pragma: no cover - checked again when a client is built
        return
    for key in config:
        if _option_name(key) not in known:
            msg = (f"{url!r}: unknown Kafka client property {key!r}; expected a "
                   f"kafka-python option in dotted form (e.g. group.id, security.protocol,"
                   f" sasl.mechanism, sasl.username) or topics=, topic.<R>=, dead-letter=")
            raise KafkaConfigError(msg)


def default_id(kind: str, *parts: str) -> str:
    """A stable id (group or transactional id) from the parts that identify a run.

    >>> default_id("txn", "SELECT 1", "kafka://h:1/d") == default_id("txn", "SELECT 1",
    ...                                                               "kafka://h:1/d")
    True
    """
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return f"ivmflow-{kind}-{digest}"


# ---------------------------------------------------------------------------------------
# Codec (pure)


def record_source(topic: str, partition: int, offset: int) -> str:
    """How errors and ``Update.source`` name a Kafka record.

    >>> record_source("updates", 2, 41)
    "kafka topic 'updates' partition 2 offset 41"
    """
    return f"kafka topic {topic!r} partition {partition} offset {offset}"


def _shown(value: bytes | None) -> str:
    if value is None:
        return "<null value>"
    text = value.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= 300 else text[:300] + "..."


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    return "an object"


def decode_update(
    value: bytes | None,
    schema: Schema,
    *,
    source: str | None = None,
    relation: str | None = None,
    topic: str = "?",
    partition: int = -1,
    offset: int = -1,
) -> Record:
    """Decode one JSON update record (DESIGN section 3).

    ``source`` names the record in errors and ``Update.source``; by default it is
    :func:`record_source` of ``topic``, ``partition`` and ``offset``.  ``relation`` is the relation of a per-relation topic (the record may then omit its
    ``relation`` field).  Raises :class:`InputError` (source = ``source``) on malformed
    JSON, a missing or unknown op or relation, wrong arity, a value of the wrong type or
    a bad multiplicity.

    >>> from plans.schema import Column, Relation, Schema
    >>> s = Schema({"G": Relation("G", (Column("src", "INT"), Column("dst", "INT")))})
    >>> decode_update(b'{"op": "*"}', s, source="t")
    EpochEnd(source='t')
    >>> decode_update(b'{"op": "+", "row": [1, 2]}', s, source="t", relation="G").row
    (1, 2)
    >>> decode_update(b'{"op": "+", "relation": "G", "row": [1]}', s, source="t")
    Traceback (most recent call last):
    ...
    dataflow.errors.InputError: t: bad update record '{"op": "+", "relation": "G", "row": [1]}': expected 2 values for G(src, dst), found 1 value; fix the record or run with --on-error skip to send it to the dead-letter topic
    """  # noqa: E501
    if source is None:
        source = record_source(topic, partition, offset)
    shown = _shown(value)

    def bad(expected: str, found: str) -> NoReturn:
        raise InputError(source, shown, expected, found, SKIP_HINT)

    if value is None:
        bad("a JSON update record", "a record without value (tombstone)")
    try:
        obj = json.loads(value.decode("utf-8"))  # bytes: json would guess UTF-16/32 too
    except UnicodeDecodeError:
        bad("UTF-8 JSON", "bytes that are not valid UTF-8")
    except ValueError as exc:
        bad('a JSON object such as {"op": "+", "relation": "G", "row": [1, 2]}',
                  f"malformed JSON ({exc})")
    if not isinstance(obj, dict):
        bad("a JSON object", _kind(obj))
    op = obj.get("op")
    if op == "*":
        return EpochEnd(source)
    if op not in ("+", "-"):
        bad("op '+', '-' or '*'", "no op" if op is None else f"op {json.dumps(op)}")
    name = obj.get("relation", relation)
    if not isinstance(name, str):
        bad("a relation name (string)", "no relation" if name is None else _kind(name))
    rel = schema.lookup(name)
    if rel is None or (relation is not None and rel.name.lower() != relation.lower()):
        if rel is None:
            known = ", ".join(sorted(schema.relations)) or "none"
            bad(f"a relation the query declares ({known})", f"relation {name!r}")
        bad(f"relation {relation!r} (this topic holds {relation})", f"relation {name!r}")
    mult = obj.get("mult", 1)
    if not isinstance(mult, int) or isinstance(mult, bool) or mult < 1:
        bad("a positive integer mult", _kind(mult))
    row = obj.get("row")
    signature = f"{rel.name}({', '.join(rel.column_names)})"
    if isinstance(row, dict):
        missing = [c for c in rel.column_names if c not in row]
        extra = [k for k in row if k not in rel.column_names]
        if missing or extra:
            what = []
            if missing:
                what.append(f"missing {', '.join(missing)}")
            if extra:
                what.append(f"unknown {', '.join(map(str, extra))}")
            bad(f"columns {signature}", "; ".join(what))
        values = [row[c] for c in rel.column_names]
    elif isinstance(row, list):
        if len(row) != rel.arity:
            n = len(row)
            bad(f"{rel.arity} value{'s' if rel.arity != 1 else ''} for {signature}",
                      f"{n} value{'s' if n != 1 else ''}")
        values = row
    else:
        bad(f"row: an array or object of values for {signature}",
                  "no row" if row is None else _kind(row))
    typed: list[Value] = []
    for col, v in zip(rel.columns, values):
        try:
            typed.append(col.coerce(v))
        except ValueParseError:
            bad(f"a {col.type} for column {rel.name}.{col.name}", _kind(v))
    return Update(op, rel.name, tuple(typed), mult, source)


def encode_update(record: Record, *, with_relation: bool = True) -> bytes:
    """The JSON update record of an :class:`Update` or :class:`EpochEnd` (compact).

    >>> encode_update(Update("-", "G", (1, None), 3))
    b'{"op":"-","relation":"G","row":[1,null],"mult":3}'
    >>> encode_update(EpochEnd())
    b'{"op":"*"}'
    """
    if isinstance(record, EpochEnd):
        return b'{"op":"*"}'
    obj: dict[str, Any] = {"op": record.op}
    if with_relation:
        obj["relation"] = record.relation
    obj["row"] = list(record.row)
    if record.mult != 1:
        obj["mult"] = record.mult
    return json.dumps(obj, separators=(",", ":")).encode()


def unique_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """Output column names as JSON object keys: a repeated name gets ``_2``, ``_3``...

    >>> unique_columns(["x", "y", "x"])
    ('x', 'y', 'x_2')
    """
    seen: dict[str, int] = {}
    out = []
    for c in columns:
        n = seen.get(c, 0) + 1
        seen[c] = n
        out.append(c if n == 1 else f"{c}_{n}")
    return tuple(out)


def encode_delta(epoch: int, mult: int, row: Row, columns: Sequence[str],
                 *, key: str = "epoch") -> bytes:
    """One delta record ``{"epoch": k, "mult": m, "row": {...}}`` (``key="snapshot"``
    for snapshot records).  ``columns`` must be unique (see :func:`unique_columns`).

    >>> encode_delta(2, 1, ("a", True), ("s", "b"), key="snapshot")
    b'{"snapshot":2,"mult":1,"row":{"s":"a","b":true}}'
    """
    obj = {key: epoch, "mult": mult, "row": dict(zip(columns, row))}
    return json.dumps(obj, separators=(",", ":")).encode()


def decode_delta(value: bytes, *, key: str = "epoch") -> tuple[int, int, dict[str, Value]]:
    """``(epoch, mult, row)`` of a delta record (``key="snapshot"``: of a snapshot record).

    >>> decode_delta(b'{"epoch":3,"mult":-2,"row":{"a":1}}')
    (3, -2, {'a': 1})
    """
    obj = json.loads(value)
    return int(obj[key]), int(obj["mult"]), dict(obj["row"])


# ---------------------------------------------------------------------------------------
# Epoch alignment (pure)

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


@dataclass
class AlignedEpoch(Generic[T]):
    """One whole epoch: its records in stream order, and the marker that closed it in
    each stream (stream order)."""

    items: list[T]
    markers: list[T]


class EpochAligner(Generic[K, T]):
    """Cut several ordered streams into common epochs at their markers (module
    docstring, "Deterministic order").

    Push each stream's records in its own order with :meth:`push` (and its markers with
    :meth:`mark`); :meth:`pop_epochs` returns the epochs that every stream has closed,
    each with the streams' records concatenated in stream order; :meth:`tail` returns
    what follows the last complete epoch (end of a bounded read).

    >>> a: EpochAligner[int, str] = EpochAligner([0, 1])
    >>> a.push(1, "b1"); a.mark(1, "*1"); a.push(1, "b2")
    >>> a.pop_epochs()                   # stream 0 has not reached its marker yet
    []
    >>> a.push(0, "a1"); a.mark(0, "*0")
    >>> [(e.items, e.markers) for e in a.pop_epochs()]
    [(['a1', 'b1'], ['*0', '*1'])]
    >>> a.tail()
    ['b2']
    """

    def __init__(self, streams: Sequence[K]) -> None:
        if not streams:
            msg = "an EpochAligner needs at least one stream"
            raise ValueError(msg)
        if len(set(streams)) != len(streams):
            msg = f"streams must be distinct, found {list(streams)!r}"
            raise ValueError(msg)
        self.streams = tuple(streams)
        self._open: dict[K, list[T]] = {s: [] for s in self.streams}
        self._closed: dict[K, deque[tuple[list[T], T]]] = {s: deque() for s in self.streams}

    def push(self, stream: K, item: T) -> None:
        """Append a record to ``stream``'s open epoch."""
        self._open[stream].append(item)

    def mark(self, stream: K, marker: T) -> None:
        """``stream`` reached its next marker (``marker`` is returned with the epoch)."""
        self._closed[stream].append((self._open[stream], marker))
        self._open[stream] = []

    @property
    def buffered(self) -> int:
        """Records held back (closed in some streams but not yet in all, or open)."""
        closed = sum(len(seg) for q in self._closed.values() for seg, _ in q)
        return closed + sum(len(v) for v in self._open.values())

    def pop_epochs(self) -> list[AlignedEpoch[T]]:
        """The epochs every stream has closed, oldest first (removed from the buffer)."""
        out: list[AlignedEpoch[T]] = []
        while all(self._closed[s] for s in self.streams):
            items: list[T] = []
            markers: list[T] = []
            for s in self.streams:
                seg, marker = self._closed[s].popleft()
                items.extend(seg)
                markers.append(marker)
            out.append(AlignedEpoch(items, markers))
        return out

    def tail(self) -> list[T]:
        """Everything not yet released, in stream order: each stream's closed segments
        (markers dropped) then its open one.  Call at the end of a bounded read, after
        :meth:`pop_epochs`; the buffer is emptied."""
        out: list[T] = []
        for s in self.streams:
            for seg, _ in self._closed[s]:
                out.extend(seg)
            self._closed[s].clear()
            out.extend(self._open[s])
            self._open[s] = []
        return out


# ---------------------------------------------------------------------------------------
# Topics


def ensure_topic(endpoint: KafkaEndpoint, topic: str, partitions: int = 1) -> int:
    """Create ``topic`` with ``partitions`` partitions unless it exists; returns its
    partition count (an existing topic keeps its own)."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(**endpoint.client_config("admin"))
    try:
        count = _partition_count(admin, topic)
        if count:
            return count
        with contextlib.suppress(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, partitions, 1)])
        deadline = time.monotonic() + 15
        while True:
            count = _partition_count(admin, topic)
            if count:
                return count
            if time.monotonic() > deadline:
                msg = f"topic {topic!r} on {endpoint.bootstrap} did not appear after creation"
                raise KafkaConfigError(msg)
            time.sleep(0.05)
    finally:
        admin.close()


def _partition_count(admin: Any, topic: str) -> int:
    described = admin.describe_topics([topic])
    if not described or described[0].get("error_code", 0) != 0:
        return 0
    return len(described[0].get("partitions") or [])


def _partitions(consumer: Any, endpoint: KafkaEndpoint, topic: str, timeout: float = 10.0
                ) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return sorted(parts)
        if time.monotonic() > deadline:
            msg = (f"topic {topic!r} does not exist on {endpoint.bootstrap}: expected an "
                   f"existing update topic; create it or write it with `ivmflow produce`")
            raise KafkaConfigError(msg)
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------
# Source


@dataclass
class _Item:
    stream: int
    offset: int
    record: Record | InputError
    raw: bytes | None


class KafkaUpdateSource:
    """The update records of an input topic (or per-relation topics), in the
    deterministic epoch order of the module docstring.  Iterate it once.

    Reads from the beginning of every stream (see "Delivery guarantee"), as consumer
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
            for topic, relation in endpoint.input_topics(schema):
                for p in _partitions(self.consumer, endpoint, topic):
                    self.streams.append((topic, p))
                    self._relations.append(relation)
        except BaseException:
            self.consumer.close()
            raise
        self._tps = [TopicPartition(t, p) for t, p in self.streams]
        self._index = {tp: i for i, tp in enumerate(self._tps)}
        self.consumer.assign(self._tps)
        self.consumer.seek_to_beginning(*self._tps)
        self._positions: dict[TopicPartitionKey, int] = {}
        self._raw: OrderedDict[str, bytes | None] = OrderedDict()
        self.records_read = 0

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
            batch = self._poll()
            if not batch:
                if ends is not None and self._reached(ends):
                    break
                if self.stop_requested():
                    raise StopRequested
                continue
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


# ---------------------------------------------------------------------------------------
# Sinks


_SOURCE_RE = re.compile(r"kafka topic '(.*)' partition (-?[0-9]+) offset (-?[0-9]+)")
"""Parses :func:`record_source` (topic names hold no quote: Kafka allows ``[a-zA-Z0-9._-]``)."""


def _dead_letter_record(
    error: InputError, raw: bytes | None
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """Value = the original record bytes; headers ``reason``, ``source``, ``hint`` and
    (for Kafka records) ``topic``, ``partition``, ``offset``.

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
        self.last_committed = read_last_epoch(endpoint, key=kind)
        self._producer: Any = self._new_producer()
        self._source: KafkaUpdateSource | None = None
        self._dead: list[tuple[str, bytes, list[tuple[str, bytes]]]] = []
        self._seen = 0
        self.failed_attempts = 0
        """Epoch transactions aborted because the broker did not take a record."""
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
        for _ in range(EPOCH_ATTEMPTS):
            if self._producer is None:
                try:
                    self._producer = self._new_producer()
                except KafkaError as e:  # the broker did not answer in max.block.ms
                    failure = f"{type(e).__name__}: {e}"
                    continue
                # The failed attempt's commit may have reached the broker; the new
                # producer's fencing has settled it either way, so the topic now says.
                if rows and read_last_epoch(self.endpoint, key=self.kind) >= k:
                    failure = ""
                    break
            failure = self._transaction(k, rows, offsets) or ""
            if not failure:
                break
            self.failed_attempts += 1
            # The epoch was aborted (or is in doubt); a fresh producer with the same id
            # fences this one, then the epoch is written again, whole.
            with contextlib.suppress(Exception):
                self._producer.close(timeout=1)
            self._producer = None
        else:
            msg = (f"Kafka sink {self.endpoint.url}: {self.kind} {k} could not be written "
                   f"in {EPOCH_ATTEMPTS} attempts ({failure}); nothing of it was committed, "
                   "nor were its source offsets. Check the broker, then run again: the run "
                   f"resumes after the last committed {self.kind} ({self.last_committed}).")
            raise KafkaDeliveryError(msg)
        self._dead.clear()
        if rows:
            self.last_committed = k

    def _new_producer(self) -> Any:
        from kafka import KafkaProducer

        cfg = self.endpoint.client_config("producer")
        cfg.update(transactional_id=self.transactional_id, enable_idempotence=True, acks="all")
        producer = KafkaProducer(**cfg)
        # Fences an older producer with this id (a crashed run, or a failed attempt) and
        # aborts its open transaction, so its half-written epoch never becomes visible.
        producer.init_transactions()
        return producer

    def _transaction(self, k: int, rows: Sequence[tuple[int, Row]],
                     offsets: Mapping[TopicPartitionKey, int]) -> str | None:
        """Write one epoch in one transaction: None when committed, else why not (a
        Kafka error; the transaction is aborted, or in doubt if the commit failed)."""
        from kafka import OffsetAndMetadata, TopicPartition
        from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError

        p = self._producer
        p.begin_transaction()
        try:
            key = str(k).encode()
            sent = [p.send(self.topic, encode_delta(k, mult, row, self.columns, key=self.kind),
                           key=key, partition=0)  # one partition: topic order = epoch order
                    for mult, row in rows]
            sent += [p.send(topic, value, headers=headers) for topic, value, headers in self._dead]
            if offsets and self._source is not None:
                p.send_offsets_to_transaction(
                    {TopicPartition(t, q): OffsetAndMetadata(o, "", -1)
                     for (t, q), o in offsets.items()},
                    self._source.group_id,
                )
            p.flush()
            # kafka-python fails a batch that timed out without failing the transaction,
            # so committing now would lose its records silently.
            failed = next((f.exception for f in sent if f.failed()), None)
            if failed is None:
                p.commit_transaction()
                return None
        except KafkaError as e:
            failed = e
        except BaseException:
            with contextlib.suppress(Exception):
                p.abort_transaction()
            raise
        if isinstance(failed, (ProducerFencedError, InvalidProducerEpochError)):
            # Not retried: taking the id back would fence the run that took it over.
            msg = (f"Kafka sink {self.endpoint.url}: {self.kind} {k} was not written: "
                   f"another producer with transactional.id {self.transactional_id!r} took "
                   "over (a second run of the same query and output?). Stop the other run, "
                   "or give each run its own transactional.id / output topic.")
            raise KafkaDeliveryError(msg) from failed
        with contextlib.suppress(Exception):
            p.abort_transaction()
        return f"{type(failed).__name__}: {failed}"

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


# ---------------------------------------------------------------------------------------
# Reading outputs, producing inputs


def _read_committed(endpoint: KafkaEndpoint, topic: str, start: Callable[[int, int], int],
                    timeout: float = 30.0) -> tuple[list[Any], bool]:
    """The committed records of ``topic`` from ``start(begin, end)`` per partition up to
    the end offsets at call time, in (partition, offset) order; and whether every
    partition was read from its beginning."""
    from kafka import KafkaConsumer, TopicPartition

    cfg = endpoint.client_config("consumer")
    cfg.update(group_id=None, enable_auto_commit=False, isolation_level="read_committed")
    consumer = KafkaConsumer(**cfg)
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            return [], True
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        begins = consumer.beginning_offsets(tps)
        ends = consumer.end_offsets(tps)
        whole = True
        for tp in tps:
            first = max(begins[tp], start(begins[tp], ends[tp]))
            whole = whole and first <= begins[tp]
            consumer.seek(tp, first)
        out: dict[int, list[Any]] = {tp.partition: [] for tp in tps}
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                msg = f"reading {topic!r} on {endpoint.bootstrap} timed out"
                raise TimeoutError(msg)
            for tp, recs in consumer.poll(timeout_ms=200).items():
                out[tp.partition].extend(r for r in recs if r.offset < ends[tp])
        return [r for p in sorted(out) for r in out[p]], whole
    finally:
        consumer.close()


def read_last_epoch(endpoint: KafkaEndpoint, *, key: str = "epoch") -> int:
    """The highest ``epoch`` (or ``snapshot``) among the committed records of the
    endpoint's topic, 0 when there is none: read from the end in growing windows."""
    window = 1024
    while True:
        recs, whole = _read_committed(endpoint, endpoint.topic,
                                      lambda b, e, w=window: e - w)  # type: ignore[misc]
        best = 0
        for r in recs:
            try:
                best = max(best, decode_delta(r.value, key=key)[0])
            except (ValueError, KeyError, TypeError):
                continue
        if best or whole:
            return best
        window *= 16


def read_deltas(endpoint: KafkaEndpoint, *, key: str = "epoch"
                ) -> list[tuple[int, int, dict[str, Value]]]:
    """All committed delta (or snapshot) records of the topic as ``(epoch, mult, row)``,
    sorted by epoch (stable: rows of one epoch keep their order)."""
    recs, _ = _read_committed(endpoint, endpoint.topic, lambda b, e: b)
    rows = [decode_delta(r.value, key=key) for r in recs]
    return sorted(rows, key=lambda t: t[0])


def partition_of(update: Update, partitions: int) -> int:
    """The partition of an update: a stable hash of (relation, row), so that all updates
    of one tuple go to one partition (in order).

    >>> partition_of(Update("+", "G", (1, 2)), 4) == partition_of(Update("-", "G", (1, 2)), 4)
    True
    """
    key = json.dumps([update.relation.lower(), list(update.row)], separators=(",", ":"))
    return zlib.crc32(key.encode()) % partitions


def produce_updates(endpoint: KafkaEndpoint, records: Iterable[Record], schema: Schema | None,
                    *, partitions: int = 1) -> int:
    """Write update records as JSON to the endpoint's topic(s) (created with
    ``partitions`` partitions when missing): updates to :func:`partition_of`, each
    marker to every partition of every topic.  Returns the number of records read."""
    from kafka import KafkaProducer

    relations = sorted(schema.relations) if schema is not None else []
    if endpoint.per_relation and not relations:
        msg = "producing to per-relation topics needs the query (--query) for the relations"
        raise KafkaConfigError(msg)
    topics = ([endpoint.topic_for(r) for r in relations] if endpoint.per_relation
              else [endpoint.topic])
    counts = {t: ensure_topic(endpoint, t, partitions) for t in topics}
    cfg = endpoint.client_config("producer")
    cfg.update(acks="all", enable_idempotence=True, linger_ms=5)
    producer = KafkaProducer(**cfg)
    n = 0
    try:
        for rec in records:
            n += 1
            if isinstance(rec, EpochEnd):
                for t in topics:
                    for p in range(counts[t]):
                        producer.send(t, encode_update(rec), partition=p)
                continue
            topic = endpoint.topic_for(rec.relation) if endpoint.per_relation else endpoint.topic
            if topic not in counts:
                counts[topic] = ensure_topic(endpoint, topic, partitions)
            producer.send(topic, encode_update(rec, with_relation=not endpoint.per_relation),
                          partition=partition_of(rec, counts[topic]))
        producer.flush()
    finally:
        producer.close()
    return n
