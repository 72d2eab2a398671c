"""The JSON records of docs/formats.md: update records in (:func:`decode_update`,
with an :class:`InputError` naming topic, partition and offset), delta records out.

    >>> encode_delta(7, -1, (1, 2), ("src", "dst"))
    b'{"epoch":7,"mult":-1,"row":{"src":1,"dst":2}}'
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, NoReturn

from core.errors import InputError
from core.records import EpochEnd, Record, Update, format_value
from core.schema import Row, Schema, Value, ValueParseError

SKIP_HINT = "fix the record or run with --on-error skip to send it to the dead-letter topic"



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
    """Decode one JSON update record (docs/formats.md).

    ``source`` names the record in errors and ``Update.source``; by default it is
    :func:`record_source` of ``topic``, ``partition`` and ``offset``.  ``relation`` is the relation of a per-relation topic (the record may then omit its
    ``relation`` field).  Raises :class:`InputError` (source = ``source``) on malformed
    JSON, a missing or unknown op or relation, wrong arity, a value of the wrong type or
    a bad multiplicity.

    >>> from core.schema import Column, Relation, Schema
    >>> s = Schema({"G": Relation("G", (Column("src", "INT"), Column("dst", "INT")))})
    >>> decode_update(b'{"op": "*"}', s, source="t")
    EpochEnd(source='t')
    >>> decode_update(b'{"op": "+", "row": [1, 2]}', s, source="t", relation="G").row
    (1, 2)
    >>> decode_update(b'{"op": "+", "relation": "G", "row": [1]}', s, source="t")
    Traceback (most recent call last):
    ...
    core.errors.InputError: t: bad update record '{"op": "+", "relation": "G", "row": [1]}': expected 2 values for G(src, dst), found 1 value; fix the record or run with --on-error skip to send it to the dead-letter topic
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
        except ValueParseError as err:
            if err.out_of_range:  # (the type's range: DECIMAL digits, integer width)
                bad(f"{err.expected} for column {rel.name}.{col.name}", err.found)
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
    return json.dumps(obj, separators=(",", ":"), default=json_value).encode()


def json_value(value: object) -> str:
    """A value JSON has no type for, as text: a DECIMAL exactly as the CSV sinks write
    it (a JSON number would go through a float), a DATE or TIMESTAMP in ISO form.

    >>> import datetime, decimal
    >>> encode_delta(1, 1, (decimal.Decimal("1.50"), datetime.date(1995, 3, 15)), ("p", "d"))
    b'{"epoch":1,"mult":1,"row":{"p":"1.50","d":"1995-03-15"}}'
    """
    if isinstance(value, (Decimal, datetime.date)):
        return format_value(value)
    msg = f"no JSON form for {type(value).__name__} {value!r}"
    raise TypeError(msg)


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
    return json.dumps(obj, separators=(",", ":"), default=json_value).encode()


def decode_delta(value: bytes, *, key: str = "epoch") -> tuple[int, int, dict[str, Value]]:
    """``(epoch, mult, row)`` of a delta record (``key="snapshot"``: of a snapshot record).

    >>> decode_delta(b'{"epoch":3,"mult":-2,"row":{"a":1}}')
    (3, -2, {'a': 1})
    """
    obj = json.loads(value)
    return int(obj[key]), int(obj["mult"]), dict(obj["row"])
