"""Debezium JSON change events (Flink SQL's ``format=debezium-json``), in and out.

Pure (no broker): :func:`decode_change` turns one record value of a Debezium table topic
into a :class:`ChangeEvent` typed by the ``CREATE TABLE`` of its relation (or ``None``
for a tombstone), :func:`decode_transaction` reads a record of Debezium's transaction
metadata topic, :func:`encode_change` / :func:`encode_transaction` write both for the
Debezium output of ``--deltas kafka://...?format=debezium-json`` and of ``ivmflow
produce --format debezium-json``. How events become updates (before-images, the upsert
state per key) is :mod:`connectors.kafka.upsert`; how they become epochs, one per source
transaction, is :mod:`connectors.kafka.transactions`.

What is read (docs/formats.md, "Change streams"):

* the value with or without the JSON converter's ``{"schema": ..., "payload": ...}``
  envelope (``schemas.enable`` true or false); a null value (tombstone) is skipped;
* ``op`` ``c`` and ``r`` (snapshot read) insert ``after``, ``u`` replaces ``before`` by
  ``after``, ``d`` deletes ``before``, ``t`` (truncate) empties the table, ``m``
  (logical message) is skipped;
* ``before`` / ``after`` fields matched to the declared columns by name (case-insensitive;
  fields the table does not declare are ignored, a declared column missing from
  ``after`` is an error);
* values as Debezium's JSON converter writes them for the declared type:

  ========== =========================================================================
  declared   accepted JSON
  ========== =========================================================================
  INT        a JSON integer
  FLOAT      a JSON number
  DECIMAL    ``decimal.handling.mode=precise`` (Debezium's default): base64 of the
             unscaled two's-complement big-endian integer, scale from the field schema
             (``org.apache.kafka.connect.data.Decimal``) or else the declared scale;
             ``io.debezium.data.VariableScaleDecimal`` ``{"scale": s, "value": b64}``;
             ``string`` mode: the number as text; ``double`` mode: a JSON number. A
             string is read as text when it is a decimal number and as base64 otherwise,
             unless the field schema or the URL's ``decimal.handling.mode=`` says which
  DATE       days since 1970-01-01 (``io.debezium.time.Date``), or ISO text
  TIMESTAMP  an integer: milliseconds (``io.debezium.time.Timestamp``, Kafka Connect's
             ``Timestamp``), microseconds (``io.debezium.time.MicroTimestamp``) or
             nanoseconds (``io.debezium.time.NanoTimestamp``) since the epoch, by the
             field schema's name; without a schema microseconds (Postgres' TIMESTAMP,
             precision 6), or ``timestamp.unit=millis|micros|nanos``; or ISO text
             (``io.debezium.time.ZonedTimestamp``: converted to UTC, zone dropped)
  TEXT       a JSON string
  BOOL       a JSON boolean
  ========== =========================================================================

Example (the create event of Debezium's PostgreSQL documentation, without its schema)::

    >>> from core.schema import Column, Relation
    >>> customers = Relation("customers", (Column("id", "INT"), Column("first_name", "TEXT")))
    >>> ev = decode_change(b'{"before": null, "after": {"id": 1, "first_name": "Anne", '
    ...                    b'"last_name": "Kretchmar"}, "op": "c", "transaction": null}',
    ...                    customers, source="t")
    >>> ev.op, ev.after, ev.txid
    ('c', (1, 'Anne'), None)
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn

from core.errors import InputError
from core.records import format_value
from core.schema import Column, Relation, Row, Value, ValueParseError

SKIP_HINT = "fix the event or run with --on-error skip to send it to the dead-letter topic"

OPS = ("c", "r", "u", "d", "t")
"""The ops that change rows (``m``, a logical message, is skipped)."""

Bad = Callable[[str, str], NoReturn]
"""Raises the error of a refused field: ``bad(expected, found)``."""

_EPOCH_DATE = datetime.date(1970, 1, 1)
_EPOCH_TS = datetime.datetime(1970, 1, 1)
_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_TS_UNITS = {"millis": 1_000, "micros": 1, "nanos": None}
_TS_SCHEMA_UNITS = {
    "io.debezium.time.Timestamp": "millis",
    "org.apache.kafka.connect.data.Timestamp": "millis",
    "io.debezium.time.MicroTimestamp": "micros",
    "io.debezium.time.NanoTimestamp": "nanos",
}


class ChangeError(InputError):
    """A change event ivmflow refuses; ``txid`` is its transaction when the event says
    (so that the transaction aligner still counts it); ``stops``: the run stops also
    with ``--on-error skip`` (skipping would apply part of a transaction unnoticed)."""

    def __init__(self, source: str, record: str, expected: str, found: str,
                 hint: str = SKIP_HINT, txid: str | None = None, stops: bool = False) -> None:
        super().__init__(source, record, expected, found, hint)
        self.txid = txid
        self.stops = stops


@dataclass(frozen=True)
class DecodeOptions:
    """How values without a field schema are read (the URL's options)."""

    decimal_mode: str = "auto"
    """``auto``, ``precise`` (base64), ``string`` or ``double``."""
    timestamp_unit: str = "micros"
    """``millis``, ``micros`` or ``nanos``: an integer TIMESTAMP without a field schema."""

    @classmethod
    def of(cls, options: Mapping[str, str]) -> DecodeOptions:
        return cls(options.get("decimal.handling.mode", "auto"),
                   options.get("timestamp.unit", "micros"))


@dataclass(frozen=True)
class ChangeEvent:
    """One Debezium change event, typed by the relation's declared columns.

    ``before`` holds the declared columns the event's ``before`` has (``None`` for a
    column it lacks: a key-only before-image); ``before_full`` says whether it has all
    of them. ``txid`` is ``transaction.id`` (None without transaction metadata, e.g.
    snapshot reads); ``ts_ms`` the source's commit time (``source.ts_ms``)."""

    op: str
    relation: str
    before: Row | None
    after: Row | None
    before_full: bool
    txid: str | None
    ts_ms: int | None
    source: str
    record: str = ""
    """The event as text (for errors the applier raises later)."""


def shown(value: bytes | None, limit: int = 300) -> str:
    """A record value as error messages quote it (cut at ``limit`` characters)."""
    if value is None:
        return "<null value>"
    text = value.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= limit else text[:limit] + "..."


def kind(value: object) -> str:
    """What a JSON value is, for "found ..." in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}" if len(value) <= 60 else f"string {value[:60]!r}..."
    if isinstance(value, list):
        return f"an array of {len(value)}"
    return "an object"


def load_json(value: bytes, bad: Bad, what: str) -> Any:
    """``json.loads`` of a record value; ``bad(expected, found)`` raises."""
    try:
        return json.loads(value.decode("utf-8"))
    except UnicodeDecodeError:
        bad("UTF-8 JSON", "bytes that are not valid UTF-8")
    except ValueError as exc:
        bad(what, f"malformed JSON ({exc})")


def _struct_fields(schema: object, field: str) -> dict[str, dict[str, Any]]:
    """The field schemas of the envelope schema's struct ``field`` (before/after), by
    lower-cased name; empty without a usable schema."""
    if not isinstance(schema, dict):
        return {}
    for f in schema.get("fields") or ():
        if isinstance(f, dict) and f.get("field") == field and isinstance(f.get("fields"), list):
            return {str(g.get("field", "")).lower(): g for g in f["fields"] if isinstance(g, dict)}
    return {}


def decode_change(value: bytes | None, relation: Relation, *, source: str,
                  options: DecodeOptions | None = None) -> ChangeEvent | None:
    """Decode one record value of ``relation``'s Debezium topic (module docstring);
    ``None`` for a tombstone or a logical message. Raises :class:`ChangeError` naming
    ``source`` (topic, partition, offset) and the field."""
    opts = options or DecodeOptions()
    text = shown(value)
    txid: str | None = None

    def bad(expected: str, found: str) -> NoReturn:
        raise ChangeError(source, text, expected, found, txid=txid)

    if value is None:
        return None
    obj = load_json(value, bad, 'a Debezium change event {"before": ..., "after": ..., '
                                '"op": "c"}')
    schema: object = None
    if isinstance(obj, dict) and "payload" in obj and "schema" in obj:
        schema, obj = obj["schema"], obj["payload"]
        if obj is None:
            return None  # a tombstone written with schemas.enable=true
    if not isinstance(obj, dict):
        bad("a Debezium change event (a JSON object with op, before, after)", kind(obj))
    txn = obj.get("transaction")
    if isinstance(txn, dict) and txn.get("id") is not None:
        txid = str(txn["id"])
    elif txn is not None:
        bad("field transaction: null or an object with id", kind(txn))
    op = obj.get("op")
    if op == "m":
        return None
    if op not in OPS:
        bad("field op: 'c', 'r', 'u', 'd' or 't'", "no op" if op is None else kind(op))
    src = obj.get("source")
    ts_ms = src.get("ts_ms") if isinstance(src, dict) else None
    if not isinstance(ts_ms, int) or isinstance(ts_ms, bool):
        ts_ms = None
    if isinstance(src, dict) and isinstance(src.get("table"), str) and src["table"] and \
            src["table"].lower() != relation.name.lower():
        bad(f"source.table {relation.name!r} (this topic holds {relation.name})",
            f"table {src['table']!r}")
    before = after = None
    before_full = False
    if op != "t":
        raw_after = obj.get("after")
        raw_before = obj.get("before")
        if op in ("c", "r", "u"):
            if not isinstance(raw_after, dict):
                bad(f"field after: the new row of {relation.name} (op {op!r})", kind(raw_after))
            after = _row(raw_after, relation, "after", _struct_fields(schema, "after"),
                         opts, bad, need_all=True)[0]
        if raw_before is not None:
            if not isinstance(raw_before, dict):
                bad(f"field before: null or the old row of {relation.name}", kind(raw_before))
            before, before_full = _row(raw_before, relation, "before",
                                       _struct_fields(schema, "before"), opts, bad,
                                       need_all=False)
    return ChangeEvent(op, relation.name, before, after, before_full, txid, ts_ms, source,
                       text)


MISSING: Any = object()
_DAYS = (-719_162, 2_932_896)
"""Days since 1970-01-01 of 0001-01-01 and 9999-12-31 (a DATE Python holds)."""
_PLAIN_DECIMAL = re.compile(r"[+-]?[0-9]+\.[0-9]+")
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9][0-9]-[0-9][0-9]")
_TEXT, _INT, _DEC, _DATE = 1, 2, 3, 4
_PLANS: dict[int, tuple[Relation, list[tuple[Column, int, int, int]]]] = {}


_UNBOUNDED = 1 << 400


def _int_range(col: Column) -> tuple[int, int]:
    """The integers ``col`` holds (a Column without ``int_range`` holds any)."""
    rng: tuple[int, int] = getattr(col, "int_range", (-_UNBOUNDED, _UNBOUNDED))
    return rng


def _int_digits(col: Column) -> int:
    """The digits a DECIMAL column holds before the point (any without ``precision``)."""
    precision: int | None = getattr(col, "precision", None)
    return _UNBOUNDED if precision is None else precision - col.scale


def plan(relation: Relation) -> list[tuple[Column, int, int, int]]:
    """Per column: (column, kind, a, b) for :func:`fast_value` (INT: its range a..b;
    DECIMAL: its scale a and digits before the point b)."""
    got = _PLANS.get(id(relation))
    if got is not None and got[0] is relation:
        return got[1]
    plan = []
    for c in relation.columns:
        if c.type == "INT":
            plan.append((c, _INT, *_int_range(c)))
        elif c.type == "DECIMAL":
            plan.append((c, _DEC, c.scale, _int_digits(c)))
        else:
            plan.append((c, {"TEXT": _TEXT, "DATE": _DATE}.get(c.type, 0), 0, 0))
    _PLANS[id(relation)] = (relation, plan)
    return plan


def fast_value(kind: int, a: int, b: int, v: Any, text_decimals: bool = True,
               days: bool = True) -> Any:
    """The value of the commonest JSON forms for a column of :func:`plan`'s ``kind``,
    ``a``, ``b`` (what converting or coercing it gives), else ``MISSING``: a string for
    TEXT; an integer in range for INT; a decimal number with exactly the column's scale
    (``text_decimals``) for DECIMAL; ``YYYY-MM-DD`` or (``days``) days since 1970-01-01
    for DATE."""
    tv = type(v)
    if tv is str:
        if kind == _TEXT:
            return v
        if kind == _DEC and text_decimals:
            dot = v.find(".")
            if len(v) - dot - 1 == a and dot - (v[:1] in "+-") <= b and \
                    _PLAIN_DECIMAL.fullmatch(v):
                return Decimal(v)
        elif kind == _DATE and len(v) == 10 and _ISO_DATE.fullmatch(v):
            try:
                return datetime.date(int(v[:4]), int(v[5:7]), int(v[8:]))
            except ValueError:
                return MISSING
    elif tv is int:
        if kind == _INT and a <= v <= b:
            return v
        if kind == _DATE and days and _DAYS[0] <= v <= _DAYS[1]:
            return _EPOCH_DATE + datetime.timedelta(days=v)
    return MISSING


def _row(obj: dict[str, Any], relation: Relation, part: str,
         fields: dict[str, dict[str, Any]], opts: DecodeOptions, bad: Bad,
         need_all: bool) -> tuple[Row, bool]:
    cols = relation.columns
    vals = [obj.get(c.name, MISSING) for c in cols]  # names as declared: the usual case
    full = True
    if MISSING in vals:
        by_name = {str(k).lower(): v for k, v in obj.items()}
        vals = [by_name.get(c.name.lower(), MISSING) for c in cols]
        missing = [c.name for c, v in zip(cols, vals) if v is MISSING]
        if missing and need_all:
            bad(f"field {part}: the columns {relation.name}"
                f"({', '.join(relation.column_names)})", f"no {', '.join(missing)}")
        full = not missing
    text_decimals = not fields and opts.decimal_mode in ("auto", "string")
    out: list[Value] = []
    for (col, kind, a, b), v in zip(plan(relation), vals):
        if v is None or v is MISSING:
            out.append(None)
            continue
        fast = fast_value(kind, a, b, v, text_decimals)
        if fast is not MISSING:
            out.append(fast)
            continue

        def bad_field(expected: str, found: str, c: Column = col) -> NoReturn:
            bad(f"{part}.{c.name}: {expected}", found)

        out.append(convert(col, v, fields.get(col.name.lower()), opts, bad_field))
    return tuple(out), full


def convert(col: Column, v: object, field: Mapping[str, Any] | None, opts: DecodeOptions,
            bad: Bad) -> Value:
    """One field as Debezium's JSON converter writes it, to ``col``'s type (module
    docstring); ``bad(expected, found)`` raises."""
    if v is None:
        return None
    name = field.get("name") if field else None
    ftype = field.get("type") if field else None
    try:
        if col.type == "INT":
            if isinstance(v, int) and not isinstance(v, bool):
                return col.coerce(v)
            bad(f"{col.type_text} as a JSON integer", kind(v))
        if col.type == "FLOAT":
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return col.coerce(v)
            bad("DOUBLE as a JSON number", kind(v))
        if col.type == "TEXT":
            if isinstance(v, str):
                return v
            bad("VARCHAR as a JSON string", kind(v))
        if col.type == "BOOL":
            if isinstance(v, bool):
                return v
            bad("BOOLEAN as a JSON boolean", kind(v))
        if col.type == "DECIMAL":
            d = _decimal(col, v, name, ftype, field, opts, bad)
            if d.as_tuple().exponent == -col.scale and d.adjusted() < _int_digits(col):
                return d  # (at the column's scale and in range: what coerce returns)
            return col.coerce(d)
        if col.type == "DATE":
            if isinstance(v, int) and not isinstance(v, bool):
                return _EPOCH_DATE + datetime.timedelta(days=v)
            if isinstance(v, str):
                return col.coerce(v)
            bad("DATE as days since 1970-01-01 (io.debezium.time.Date)", kind(v))
        if col.type == "TIMESTAMP":
            if isinstance(v, int) and not isinstance(v, bool):
                unit = _TS_SCHEMA_UNITS.get(str(name), opts.timestamp_unit)
                if unit == "nanos":
                    return _EPOCH_TS + datetime.timedelta(microseconds=v // 1000)
                return _EPOCH_TS + datetime.timedelta(microseconds=v * (_TS_UNITS[unit] or 1))
            if isinstance(v, str):
                return _timestamp_text(col, v)
            bad("TIMESTAMP as micro- or milliseconds since the epoch "
                "(io.debezium.time.MicroTimestamp, Timestamp)", kind(v))
    except ValueParseError as err:
        bad(f"{col.type_text}", f"{kind(v)} ({err})")
    except (OverflowError, ValueError) as err:
        bad(f"{col.type_text}", f"{kind(v)} ({err})")
    bad(f"a {col.type} value", kind(v))


def _decimal(col: Column, v: object, name: object, ftype: object,
             field: Mapping[str, Any] | None, opts: DecodeOptions, bad_value: Bad) -> Decimal:
    def bad(found: str, expected: str = "") -> NoReturn:  # (the text made only if need be)
        bad_value(f"{col.type_text} as Debezium writes it (base64 bytes, text or a number)"
                  f"{expected}", found)

    if isinstance(v, dict) and "value" in v:  # io.debezium.data.VariableScaleDecimal
        scale = v.get("scale")
        raw = v.get("value")
        if isinstance(scale, int) and isinstance(raw, str):
            return _unscaled(raw, scale, bad)
        bad("an object without an integer scale and a base64 value")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    if not isinstance(v, str):
        bad(kind(v))
    as_bytes = ftype == "bytes" or name == "org.apache.kafka.connect.data.Decimal"
    if not as_bytes and (ftype == "string" or opts.decimal_mode == "string"):
        as_text = True
    elif as_bytes or opts.decimal_mode == "precise":
        as_text = False
    else:
        as_text = _DECIMAL_TEXT.fullmatch(v.strip()) is not None
    if as_text:
        if _DECIMAL_TEXT.fullmatch(v.strip()) is None:
            bad(kind(v))
        return Decimal(v.strip())
    params = field.get("parameters") if field else None
    scale_text = params.get("scale") if isinstance(params, dict) else None
    scale = col.scale
    if scale_text is not None:
        try:
            scale = int(scale_text)
        except (TypeError, ValueError):
            bad(kind(scale_text), ": an integer scale parameter")
    return _unscaled(v, scale, bad)


def _unscaled(text: str, scale: int, bad: Callable[[str], NoReturn]) -> Decimal:
    if _BASE64.fullmatch(text) is None:
        bad(f"string {text!r} (neither a decimal number nor base64)")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        bad(f"string {text!r} (not base64)")
    return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)


def _timestamp_text(col: Column, v: str) -> Value:
    try:
        t = datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return col.coerce(v)
    if t.tzinfo is not None:
        t = t.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return t


# ---------------------------------------------------------------------------------------
# Transaction metadata


@dataclass(frozen=True)
class TransactionEnd:
    """An END record of the transaction metadata topic: the transaction's id and its
    event count per data collection (``schema.table`` as Debezium names it)."""

    txid: str
    event_count: int
    collections: tuple[tuple[str, int], ...]
    source: str


def decode_transaction(value: bytes | None, *, source: str) -> TransactionEnd | None:
    """A record of Debezium's transaction topic: a :class:`TransactionEnd` for END,
    ``None`` for BEGIN (and tombstones). Raises :class:`ChangeError` naming ``source``.

    >>> end = decode_transaction(b'{"status": "END", "id": "571:53195832", "ts_ms": 1, '
    ...     b'"event_count": 2, "data_collections": [{"data_collection": "s1.a", '
    ...     b'"event_count": 1}, {"data_collection": "s2.a", "event_count": 1}]}', source="t")
    >>> end.txid, end.collections
    ('571:53195832', (('s1.a', 1), ('s2.a', 1)))
    """
    text = shown(value)

    def bad(expected: str, found: str) -> NoReturn:
        raise ChangeError(source, text, expected, found)

    if value is None:
        return None
    obj = load_json(value, bad, 'a transaction record {"status": "BEGIN"|"END", "id": ...}')
    if isinstance(obj, dict) and "payload" in obj and "schema" in obj:
        obj = obj["payload"]
        if obj is None:
            return None
    if not isinstance(obj, dict):
        bad("a transaction record (a JSON object)", kind(obj))
    status = obj.get("status")
    if status == "BEGIN":
        return None
    if status != "END":
        bad("field status: 'BEGIN' or 'END'", "no status" if status is None else kind(status))
    txid = obj.get("id")
    if not isinstance(txid, (str, int)) or isinstance(txid, bool):
        bad("field id: the transaction id", kind(txid))
    count = obj.get("event_count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        bad("field event_count: a count of events", kind(count))
    pairs: list[tuple[str, int]] = []
    collections = obj.get("data_collections") or []
    if not isinstance(collections, list):
        bad("field data_collections: an array", kind(collections))
    for dc in collections:
        name = dc.get("data_collection") if isinstance(dc, dict) else None
        n = dc.get("event_count") if isinstance(dc, dict) else None
        if not isinstance(name, str) or not isinstance(n, int) or isinstance(n, bool):
            bad("data_collections: {\"data_collection\": NAME, \"event_count\": N}", kind(dc))
        pairs.append((name, n))
    return TransactionEnd(str(txid), count, tuple(pairs), source)


# ---------------------------------------------------------------------------------------
# Writing events (ivmflow produce, the Debezium delta sink)


def json_field(value: Value) -> Any:
    """A value as Debezium's JSON converter writes it with ``decimal.handling.mode=
    string`` (ivmflow's output): DECIMAL as text, DATE as days since the epoch,
    TIMESTAMP as microseconds since the epoch."""
    if isinstance(value, Decimal):
        return format_value(value)
    if isinstance(value, datetime.datetime):
        d = value - _EPOCH_TS
        return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds
    if isinstance(value, datetime.date):
        return (value - _EPOCH_DATE).days
    return value


def _row_obj(row: Sequence[Value] | None, columns: Sequence[str]) -> dict[str, Any] | None:
    if row is None:
        return None
    return {c: json_field(v) for c, v in zip(columns, row)}


def encode_change(op: str, before: Sequence[Value] | None, after: Sequence[Value] | None,
                  columns: Sequence[str], *, name: str, schema: str, table: str,
                  txid: str | None = None, total_order: int = 0, collection_order: int = 0,
                  ts_ms: int = 0, before_columns: Sequence[str] | None = None) -> bytes:
    """One change event value (no schema envelope), as Debezium's PostgreSQL connector
    writes it with ``provide.transaction.metadata=true``; ``before_columns`` writes a
    key-only before-image (REPLICA IDENTITY DEFAULT).

    >>> encode_change("c", None, (1, "Anne"), ("id", "first_name"), name="pg",
    ...               schema="public", table="customers", txid="7", total_order=1,
    ...               collection_order=1)[:60]
    b'{"before":null,"after":{"id":1,"first_name":"Anne"},"source"'
    """
    bcols = before_columns if before_columns is not None else columns
    b = None if before is None else {c: json_field(v) for c, v in zip(columns, before)
                                     if c in bcols}
    obj = {
        "before": b,
        "after": _row_obj(after, columns),
        "source": {"version": "ivmflow", "connector": "ivmflow", "name": name,
                   "ts_ms": ts_ms, "snapshot": "false", "db": name, "schema": schema,
                   "table": table},
        "op": op,
        "ts_ms": ts_ms,
        "transaction": None if txid is None else {
            "id": txid, "total_order": total_order,
            "data_collection_order": collection_order},
    }
    return json.dumps(obj, separators=(",", ":")).encode()


def encode_transaction(status: str, txid: str, counts: Sequence[tuple[str, int]] = (),
                       ts_ms: int = 0) -> bytes:
    """A BEGIN or END record of the transaction metadata topic.

    >>> encode_transaction("END", "3", [("public.R", 2)])
    b'{"status":"END","id":"3","ts_ms":0,"event_count":2,"data_collections":[{"data_collection":"public.R","event_count":2}]}'
    """  # noqa: E501
    obj: dict[str, Any] = {"status": status, "id": txid, "ts_ms": ts_ms}
    if status == "END":
        obj["event_count"] = sum(n for _, n in counts)
        obj["data_collections"] = [{"data_collection": c, "event_count": n}
                                   for c, n in counts]
    else:
        obj["event_count"] = None
        obj["data_collections"] = None
    return json.dumps(obj, separators=(",", ":")).encode()
