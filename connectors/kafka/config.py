"""Kafka URLs and client configuration: ``kafka://host:port/topic?k=v`` to a
:class:`KafkaEndpoint` whose properties pass through to kafka-python.

    >>> ep = parse_kafka_url("kafka://127.0.0.1:9092/updates?group.id=g&topics=per-relation")
    >>> ep.bootstrap, ep.topic, ep.group_id, ep.topic_for("G")
    ('127.0.0.1:9092', 'updates', 'g', 'updates.G')
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from core.errors import IvmflowError
from core.schema import Schema

BOOTSTRAP_TIMEOUT_MS = 10_000
"""How long a client waits for an unreachable broker (``bootstrap.timeout.ms``)."""

TopicPartitionKey = tuple[str, int]
"""``(topic, partition)``: one stream of an input."""

_OWN_PARAMS = ("topics", "dead-letter")
FORMATS = ("json", "debezium-json", "upsert-json")
"""``format=``: ivmflow's JSON update records (default), Debezium's change events, an
upsert topic (docs/formats.md)."""
_FORMAT_PARAMS = ("schema", "transactions", "decimal.handling.mode", "timestamp.unit")
"""Options of the change-stream formats (:mod:`connectors.kafka.debezium`)."""
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
    format: str = "json"
    """``json``, ``debezium-json`` or ``upsert-json`` (:data:`FORMATS`)."""
    format_options: Mapping[str, str] = field(default_factory=dict)
    """``schema=``, ``transactions=``, ``decimal.handling.mode=``, ``timestamp.unit=``."""

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}/{self.topic}"

    @property
    def group_id(self) -> str | None:
        return self.config.get("group.id")

    @property
    def transactional_id(self) -> str | None:
        return self.config.get("transactional.id")

    @property
    def transactions_topic(self) -> str | None:
        """Debezium's transaction metadata topic (``transactions=``), if given."""
        return self.format_options.get("transactions") or None

    def topic_for(self, relation: str) -> str:
        """The topic relation ``relation`` is read from (per-relation inputs): for
        ``format=debezium-json`` ``PREFIX.<schema>.R`` as Debezium names it (``schema=``,
        default ``public``), for ``upsert-json`` ``PREFIX.R``; ``topic.R=`` overrides.

        >>> parse_kafka_url("kafka://h:1/pg?format=debezium-json").topic_for("orders")
        'pg.public.orders'
        """
        for name, topic in self.relation_topics.items():
            if name.lower() == relation.lower():
                return topic
        if self.format == "debezium-json":
            return f"{self.topic}.{self.format_options.get('schema', 'public')}.{relation}"
        return f"{self.topic}.{relation}" if self.per_relation else self.topic

    def input_topics(self, schema: Schema) -> list[tuple[str, str | None]]:
        """``(topic, relation)`` pairs to read, in stream order (relation ``None``: the
        records name their relation).

        >>> from core.schema import Column, Relation, Schema
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
        return replace(self, config={**props, **self.config})

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
    fmt = "json"
    format_options: dict[str, str] = {}
    for key, value in [*pairs, *extra]:
        if key == "format":
            if value not in FORMATS:
                msg = f"{url!r}: format= expects one of {', '.join(FORMATS)}, found {value!r}"
                raise KafkaConfigError(msg)
            fmt = value
            per_relation = per_relation or value != "json"
        elif key in _FORMAT_PARAMS:
            format_options[key] = value
        elif key == "topics":
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
    if format_options and fmt == "json":
        msg = (f"{url!r}: {', '.join(sorted(format_options))}= only go with "
               "format=debezium-json or format=upsert-json")
        raise KafkaConfigError(msg)
    return KafkaEndpoint(bootstrap, topic, config, per_relation, relation_topics, dead_letter,
                         fmt, format_options)


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
                   f" sasl.mechanism, sasl.username) or topics=, topic.<R>=, dead-letter=, "
                   f"format=, schema=, transactions=")
            raise KafkaConfigError(msg)


def default_id(kind: str, *parts: str) -> str:
    """A stable id (group or transactional id) from the parts that identify a run.

    >>> default_id("txn", "SELECT 1", "kafka://h:1/d") == default_id("txn", "SELECT 1",
    ...                                                               "kafka://h:1/d")
    True
    """
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return f"ivmflow-{kind}-{digest}"
