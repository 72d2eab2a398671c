"""Change streams (issue 43): Debezium JSON and upsert topics in, one epoch per source
transaction.

Fast tests (no broker): the Debezium decoder on events copied from Debezium's
documentation (tests/fixtures/debezium/README.md says where from), the types as its JSON
converter writes them, the upsert state (key-only before-images), the transaction
aligner (hypothesis: the epochs never depend on how the topics' fetches interleave),
``PRIMARY KEY`` in ``CREATE TABLE``. Integration tests against the real broker of the
``kafka_bootstrap`` fixture: a two-table stream with inserts, updates and deletes,
written by ``ivmflow produce --format debezium-json`` (full and key-only before-images,
transaction metadata, two partitions per table) and run by the local runner, gives
epoch by epoch the deltas of the same update CSV; bad events stop the run naming topic,
partition, offset and field, or go to the dead-letter topic.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import random
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.files import read_updates
from connectors.kafka import KafkaConfigError, parse_kafka_url, read_deltas
from connectors.kafka.debezium import (
    ChangeError,
    TransactionEnd,
    decode_change,
    decode_transaction,
    encode_change,
)
from connectors.kafka.transactions import TransactionAligner
from connectors.kafka.upsert import ChangeApplier, decode_upsert
from core.records import format_value
from core.schema import Column, Relation, Schema
from dataflow.api import compile_query
from dataflow.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "debezium"
SRC = "kafka topic 'pg.public.customers' partition 0 offset 4"
CUSTOMERS = Relation("customers", (Column("id", "INT"), Column("first_name", "TEXT"),
                                   Column("last_name", "TEXT"), Column("email", "TEXT")))
KEYED = Relation(CUSTOMERS.name, CUSTOMERS.columns, key=(0,))


def _fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


# ---------------------------------------------------------------------------------------
# Decoding Debezium's own examples


def test_create_event_with_schema_envelope() -> None:
    ev = decode_change(_fixture("pg_create.json"), CUSTOMERS, source=SRC)
    assert ev is not None
    assert (ev.op, ev.before, ev.txid, ev.ts_ms) == ("c", None, None, 1559033904863)
    assert ev.after == (1, "Anne", "Kretchmar", "annek@noanswer.org")


def test_key_only_update_and_delete_need_the_declared_key() -> None:
    create = decode_change(_fixture("pg_create.json"), KEYED, source=SRC)
    update = decode_change(_fixture("pg_update_key_only.json"), KEYED, source=SRC)
    delete = decode_change(_fixture("pg_delete_key_only.json"), KEYED, source=SRC)
    assert update is not None and delete is not None and create is not None
    assert update.before == (1, None, None, None) and not update.before_full
    keyed = ChangeApplier(Schema({"customers": KEYED}))
    got = [(u.op, u.row) for ev in (create, update, delete) for u in keyed.updates(ev)]
    anne = (1, "Anne", "Kretchmar", "annek@noanswer.org")
    marie = (1, "Anne Marie", "Kretchmar", "annek@noanswer.org")
    assert got == [("+", anne), ("-", anne), ("+", marie), ("-", marie)]
    assert keyed.keys == 0
    # Without a declared key the key-only update is refused, in one line.
    plain = ChangeApplier(Schema({"customers": CUSTOMERS}))
    plain.updates(create)
    with pytest.raises(ChangeError) as info:
        plain.updates(update)
    msg = str(info.value)
    assert "\n" not in msg and SRC in msg and "declare the table's PRIMARY KEY" in msg
    assert "found a before-image without all columns" in msg


def test_delete_of_a_key_not_present_is_refused_and_changes_nothing() -> None:
    keyed = ChangeApplier(Schema({"customers": KEYED}))
    delete = decode_change(_fixture("pg_delete_key_only.json"), KEYED, source=SRC)
    assert delete is not None
    with pytest.raises(ChangeError, match="key id=1, a key not present"):
        keyed.updates(delete)
    assert keyed.keys == 0


def test_transaction_records_and_the_enriched_event() -> None:
    assert decode_transaction(_fixture("pg_transaction_begin.json"), source="t") is None
    end = decode_transaction(_fixture("pg_transaction_end.json"), source="t")
    assert end == TransactionEnd("571:53195832", 2, (("s1.a", 1), ("s2.a", 1)), "t")
    a = Relation("a", (Column("pk", "TEXT"), Column("aa", "TEXT")))
    ev = decode_change(_fixture("pg_transaction_event.json"), a, source="t")
    assert ev is not None and ev.txid == "571:53195832" and ev.after == ("2", "1")


def _value(after: dict[str, Any], schema: dict[str, Any] | None = None) -> bytes:
    payload = {"before": None, "after": after, "source": {"ts_ms": 0}, "op": "r",
               "transaction": None}
    return json.dumps({"schema": schema, "payload": payload} if schema else payload).encode()


def _b64(unscaled: int) -> str:
    n = (unscaled.bit_length() + 8) // 8
    return base64.b64encode(unscaled.to_bytes(n, "big", signed=True)).decode()


TYPED = Relation("t", (Column("d", "DECIMAL", 2), Column("day", "DATE"),
                       Column("ts", "TIMESTAMP"), Column("f", "FLOAT"), Column("b", "BOOL")))


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        # DECIMAL: Debezium's default (precise) writes base64 bytes of the unscaled value
        ({"d": _b64(-12345)}, Decimal("-123.45")),
        ({"d": "123.45"}, Decimal("123.45")),  # decimal.handling.mode=string
        ({"d": 123.45}, Decimal("123.45")),  # decimal.handling.mode=double
        ({"d": {"scale": 3, "value": _b64(5)}}, Decimal("0.01")),  # VariableScaleDecimal
    ],
)
def test_decimal_forms(after: dict[str, Any], expected: Decimal) -> None:
    row = {"d": None, "day": None, "ts": None, "f": None, "b": None, **after}
    ev = decode_change(_value(row), TYPED, source="t")
    assert ev is not None and ev.after is not None and ev.after[0] == expected


def test_dates_timestamps_by_field_schema() -> None:
    def field(name: str, typ: str, sem: str | None, params: dict[str, str] | None = None
              ) -> dict[str, Any]:
        f: dict[str, Any] = {"type": typ, "optional": True, "field": name}
        if sem:
            f["name"] = sem
        if params:
            f["parameters"] = params
        return f

    fields = [field("d", "bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "2"}),
              field("day", "int32", "io.debezium.time.Date"),
              field("ts", "int64", "io.debezium.time.Timestamp"),
              field("f", "double", None), field("b", "boolean", None)]
    schema = {"type": "struct", "fields": [
        {"type": "struct", "fields": fields, "optional": True, "field": "before"},
        {"type": "struct", "fields": fields, "optional": True, "field": "after"}]}
    # "1234" is a decimal number as text, but the schema says bytes: base64.
    row = {"d": "1234", "day": 9204, "ts": 795_225_600_123, "f": 2.5, "b": True}
    ev = decode_change(_value(row, schema), TYPED, source="t")
    assert ev is not None and ev.after == (
        Decimal(int.from_bytes(base64.b64decode("1234"), "big", signed=True)).scaleb(-2),
        datetime.date(1995, 3, 15), datetime.datetime(1995, 3, 15, 0, 0, 0, 123000), 2.5, True)
    # Without a schema an integer TIMESTAMP is microseconds (Postgres' TIMESTAMP).
    ev = decode_change(_value({**row, "d": "1.5", "ts": 795_225_600_000_001}), TYPED,
                       source="t")
    assert ev is not None and ev.after is not None
    assert ev.after[0] == Decimal("1.50")
    assert ev.after[2] == datetime.datetime(1995, 3, 15, 0, 0, 0, 1)
    # ZonedTimestamp text (TIMESTAMPTZ) is converted to UTC, zone dropped.
    ev = decode_change(_value({**row, "d": "1", "ts": "1995-03-15T02:00:00+02:00"}), TYPED,
                       source="t")
    assert ev is not None and ev.after is not None
    assert ev.after[2] == datetime.datetime(1995, 3, 15)


@pytest.mark.parametrize(
    ("value", "expected", "found"),
    [
        (b'{"before": null, "after": {"id": 1', "a Debezium change event", "malformed JSON"),
        (b'{"before": null, "after": {"id": "one", "first_name": "a", "last_name": "b", '
         b'"email": "c"}, "op": "c"}', "after.id: INT as a JSON integer", "string 'one'"),
        (b'{"before": null, "after": {"id": 1}, "op": "c"}',
         "field after: the columns customers(id, first_name, last_name, email)",
         "no first_name, last_name, email"),
        (b'{"before": null, "after": null, "op": "x"}', "field op", "string 'x'"),
        (b'{"before": null, "after": {"id": 1, "first_name": "a", "last_name": "b", '
         b'"email": "c"}, "op": "c", "source": {"table": "orders"}}',
         "source.table 'customers'", "table 'orders'"),
    ],
)
def test_bad_events_name_the_record_and_field(value: bytes, expected: str, found: str) -> None:
    with pytest.raises(ChangeError) as info:
        decode_change(value, CUSTOMERS, source=SRC)
    err = info.value
    assert err.source == SRC and expected in err.expected and found in err.found, str(err)
    assert "--on-error skip" in str(err)


_VALUES = st.one_of(
    st.integers(-(2**40), 2**40), st.none(), st.booleans(), st.floats(allow_nan=False),
    st.text(max_size=12), st.from_regex(r"[+-]?\d{1,7}\.\d{0,3}", fullmatch=True),
    st.from_regex(r"\d{4}-\d\d-\d\d", fullmatch=True), st.integers(-800_000, 3_000_000))


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_fast_paths_give_what_the_general_path_gives(v: Any) -> None:
    """The decoders' fast paths (connectors.kafka.debezium.fast_value) change no value:
    where they apply they give what Debezium's converter rules (``convert``) and the
    upsert topics' ``Column.coerce`` give, or those refuse it."""
    from connectors.kafka.debezium import MISSING, DecodeOptions, convert, fast_value, plan
    from core.schema import ValueParseError

    def bad(expected: str, found: str) -> Any:
        raise ChangeError("t", "", expected, found)

    for col in (Column("i", "INT"), Column("d", "DECIMAL", 2),
                Column("t", "TEXT"), Column("day", "DATE"), Column("b", "BOOL")):
        _c, how, a, b = plan(Relation("r", (col,)))[0]
        for debezium in (True, False):  # convert for Debezium, coerce for upsert topics
            fast = fast_value(how, a, b, v, days=debezium)
            if fast is MISSING or v is None:
                continue
            try:
                want = convert(col, v, None, DecodeOptions(), bad) if debezium \
                    else col.coerce(v)
            except (ChangeError, ValueParseError):
                raise AssertionError(f"{col} {v!r}: fast {fast!r}, the general path "
                                     "refuses") from None
            assert (type(fast), str(fast)) == (type(want), str(want)), (col, v)


def test_tombstones_and_messages_are_skipped() -> None:
    assert decode_change(None, CUSTOMERS, source="t") is None
    assert decode_change(b'{"schema": null, "payload": null}', CUSTOMERS, source="t") is None
    assert decode_change(b'{"op": "m", "message": {"prefix": "p"}}', CUSTOMERS,
                         source="t") is None


def test_encode_change_is_read_back() -> None:
    row = (Decimal("-1.25"), datetime.date(1995, 3, 15),
           datetime.datetime(1995, 3, 15, 1, 2, 3, 4), 0.5, False)
    value = encode_change("u", row, row, TYPED.column_names, name="x", schema="public",
                          table="t", txid="7")
    ev = decode_change(value, TYPED, source="t")
    assert ev is not None and ev.before == row and ev.after == row and ev.txid == "7"


def test_upsert_topic_records() -> None:
    r = Relation("R", (Column("a", "INT"), Column("b", "INT"), Column("v", "TEXT")),
                 key=(0, 1))
    app = ChangeApplier(Schema({"R": r}), upsert=True)
    ev = decode_upsert(b'{"a": 1, "b": 2}', b'{"a": 1, "b": 2, "v": "x"}', r, source="t")
    assert [(u.op, u.row) for u in app.updates(ev)] == [("+", (1, 2, "x"))]
    gone = decode_upsert(b'{"a": 1, "b": 2}', None, r, source="t")
    assert [(u.op, u.row) for u in app.updates(gone)] == [("-", (1, 2, "x"))]
    # A tombstone of a key without a row (compaction removed its insert): skipped.
    assert app.updates(gone) == [] and app.skipped_deletes == 1
    with pytest.raises(ChangeError, match="the record key as a JSON object"):
        decode_upsert(b"1", None, r, source="t")


# ---------------------------------------------------------------------------------------
# PRIMARY KEY, URLs


def test_primary_key_in_create_table() -> None:
    q = compile_query("CREATE TABLE R(a INT, b INT PRIMARY KEY); CREATE TABLE S(a INT, "
                      "b INT, c INT, PRIMARY KEY (c, a)); CREATE TABLE T(a INT); "
                      "SELECT R.a FROM R, S, T WHERE R.a = S.a AND S.b = T.a")
    assert [q.schema.relation(n).key for n in "RST"] == [(1,), (2, 0), ()]


def test_urls() -> None:
    ep = parse_kafka_url("kafka://h:1/pg?format=debezium-json&schema=inv"
                         "&transactions=pg.transaction&topic.S=other&group.id=g")
    assert ep.topic_for("R") == "pg.inv.R" and ep.topic_for("s") == "other"
    assert ep.transactions_topic == "pg.transaction" and ep.group_id == "g"
    assert parse_kafka_url("kafka://h:1/up?format=upsert-json").topic_for("R") == "up.R"
    with pytest.raises(KafkaConfigError, match="format= expects"):
        parse_kafka_url("kafka://h:1/t?format=avro")
    with pytest.raises(KafkaConfigError, match="only go with"):
        parse_kafka_url("kafka://h:1/t?transactions=x")


# ---------------------------------------------------------------------------------------
# The transaction aligner


def _txn_streams(seed: int) -> tuple[list[list[tuple[str | None, str]]], list[TransactionEnd]]:
    """Three streams (R: 2 partitions, S: 1) of events of transactions t1..t8 in commit
    order, and the ENDs."""
    rnd = random.Random(seed)
    streams: list[list[tuple[str | None, str]]] = [[], [], []]
    ends = []
    for k in range(1, 9):
        per: Counter[str] = Counter()
        for j in range(rnd.randint(0, 4)):
            s = rnd.randrange(3)
            rel = "S" if s == 2 else "R"
            streams[s].append((f"t{k}", f"e{k}.{j}"))
            per[f"public.{rel}"] += 1
        per["public.other"] += rnd.randint(0, 2)  # a table the query does not read
        ends.append(TransactionEnd(f"t{k}", sum(per.values()), tuple(sorted(per.items())),
                                   f"tx@{k}"))
    return streams, ends


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.integers(0, 3), max_size=200),
       st.integers(1, 4))
def test_aligner_epochs_do_not_depend_on_fetch_order(seed: int, schedule: list[int],
                                                     min_events: int) -> None:
    streams, ends = _txn_streams(seed)
    relation = ["R", "R", "S"]

    def run(order: list[int]) -> list[tuple[list[str], list[str]]]:
        a: TransactionAligner[str] = TransactionAligner(["R", "S"], min_events=min_events)
        pos = [0, 0, 0, 0]
        out = []
        queues: list[list[Any]] = [*streams, ends]
        for pick in [*order, *([0, 1, 2, 3] * 40)]:
            if pos[pick] < len(queues[pick]):
                item = queues[pick][pos[pick]]
                pos[pick] += 1
                if pick == 3:
                    assert isinstance(item, TransactionEnd)
                    a.end(item, item.source)
                else:
                    assert isinstance(item, tuple)
                    a.event(pick, relation[pick], item[0], item[1])
            out += [(e.items, e.txids) for e in a.pop_epochs()]
        out += [(e.items, e.txids) for e in a.pop_epochs(final=True)]
        assert not a.problems and a.buffered == 0
        return out

    reference = run([])
    assert run(schedule) == reference
    # Each epoch holds whole transactions, in commit order, at least min_events events
    # (but the last), stream by stream.
    txids = [t for _items, ts in reference for t in ts]
    assert txids == sorted(txids, key=lambda t: int(t[1:]))
    for items, _ts in reference[:-1]:
        assert len(items) >= min_events


def test_aligner_reports_what_does_not_add_up() -> None:
    a: TransactionAligner[str] = TransactionAligner(["R"])
    a.event(0, "R", "t1", "a")
    a.end(TransactionEnd("t1", 1, (("public.R", 1),), "tx@0"), "END1")
    assert [e.items for e in a.pop_epochs()] == [["a"]]
    a.event(0, "R", "t1", "late")
    assert a.problems[0][0] == "late" and "transaction t1" in a.problems[0][1]
    a.end(TransactionEnd("t2", 3, (("public.R", 3),), "tx@1"), "END2", now=0.0)
    a.event(0, "R", "t2", "b")
    assert a.pop_epochs() == [] and a.overdue(now=5.0, timeout=10) is None
    late = a.overdue(now=11.0, timeout=10)
    assert late is not None and late[0].txid == "t2" and late[3]["R"] == 1


def _orphan_run(streams: list[list[tuple[str | None, str]]], ends: list[TransactionEnd],
                orphans: set[str], order: list[int], min_events: int = 1
                ) -> tuple[list[tuple[list[str], list[str]]], str | None, list[str]]:
    """Feed the streams (the events named in ``orphans`` as refused events without a
    transaction id) and the ENDs in the fetch ``order``, then settle as the change
    source does at the end of the input: (epochs, the transaction it stops at, strays)."""
    relation = ["R", "R", "S"]
    a: TransactionAligner[str] = TransactionAligner(["R", "S"], min_events=min_events)
    pos = [0, 0, 0, 0]
    out: list[tuple[list[str], list[str]]] = []
    queues: list[list[Any]] = [*streams, ends]
    for pick in [*order, *([0, 1, 2, 3] * 40)]:
        if pos[pick] < len(queues[pick]):
            item = queues[pick][pos[pick]]
            pos[pick] += 1
            if pick == 3:
                a.end(item, item.source)
            elif item[1] in orphans:
                a.orphan(pick, relation[pick], item[1])
            else:
                a.event(pick, relation[pick], item[0], item[1])
        out += [(e.items, e.txids) for e in a.pop_epochs()]
    out += [(e.items, e.txids) for e in a.pop_epochs(final=True)]
    stop = None
    while (late := a.overdue(now=1e12, timeout=0)) is not None:
        if a.settle():
            out += [(e.items, e.txids) for e in a.pop_epochs(final=True)]
        elif a.suspects(late[0]):
            stop = late[0].txid
            break
        else:
            raise AssertionError(f"{late[0].txid} incomplete without a suspect")
    assert not a.problems
    return out, stop, list(a.strays)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.integers(0, 3), max_size=200),
       st.lists(st.integers(0, 40), max_size=3), st.integers(1, 3))
def test_events_without_a_transaction_id_are_placed_by_position_or_stop(
        seed: int, schedule: list[int], picks: list[int], min_events: int) -> None:
    """A refused event whose transaction id cannot be read counts toward the transaction
    it belongs to wherever its position in its partition says which (the epochs are then
    exactly those without the fault, whatever the fetch order), else the source stops at
    that transaction: no epoch ever holds part of a transaction or another's event."""
    streams, ends = _txn_streams(seed)
    names = [name for s in streams for _t, name in s]
    orphans = {names[i % len(names)] for i in picks} if names else set()
    truth = {name: txid for s in streams for txid, name in s}
    reference, stop, strays = _orphan_run(streams, ends, orphans, [], min_events)
    assert _orphan_run(streams, ends, orphans, schedule, min_events) == \
        (reference, stop, strays)
    assert not strays  # (every orphan here is an event some END counts)
    released = [t for _items, txids in reference for t in txids]
    for items, txids in reference:  # whole transactions, each stream's events in order
        assert items == [n for t in txids for s in streams for tt, n in s if tt == t]
    if stop is None:
        assert released == [e.txid for e in ends if truth_has(truth, e.txid)]
    else:
        # Stopped at the oldest transaction an unplaced orphan may belong to; every
        # transaction before it was released.
        assert released == [e.txid for e in ends[:int(stop[1:]) - 1] if truth_has(truth, e.txid)]


def truth_has(truth: dict[str, str | None], txid: str) -> bool:
    """Whether ``txid`` has events of the query's tables (else it makes no epoch)."""
    return txid in truth.values()


def test_an_orphan_inside_a_transaction_or_before_the_oldest_one_is_placed() -> None:
    r0: list[tuple[str | None, str]] = [("t1", "a"), ("t1", "BAD1"), ("t1", "b"),
                                       ("t2", "BAD2"), ("t2", "c")]
    ends = [TransactionEnd("t1", 3, (("public.R", 3),), "tx@0"),
            TransactionEnd("t2", 2, (("public.R", 2),), "tx@1")]
    out, stop, strays = _orphan_run([r0, [], []], ends, {"BAD1", "BAD2"}, [0, 0, 0, 3, 3])
    assert out == [(["a", "BAD1", "b"], ["t1"]), (["BAD2", "c"], ["t2"])]
    assert stop is None and not strays
    # The last event of t1 and the first of t2 both unreadable, adjacent: either may be
    # either transaction's, both lack one: the source stops at t1.
    r0 = [("t1", "a"), ("t1", "BAD1"), ("t2", "BAD2"), ("t2", "c")]
    ends = [TransactionEnd("t1", 2, (("public.R", 2),), "tx@0"),
            TransactionEnd("t2", 2, (("public.R", 2),), "tx@1")]
    out, stop, strays = _orphan_run([r0, [], []], ends, {"BAD1", "BAD2"}, [])
    assert out == [] and stop == "t1"
    # An unreadable record that no END counts (not the connector's), between two whole
    # transactions: handed back as a stray once both are released.
    r0 = [("t1", "a"), ("t1", "JUNK"), ("t2", "c")]
    ends = [TransactionEnd("t1", 1, (("public.R", 1),), "tx@0"),
            TransactionEnd("t2", 1, (("public.R", 1),), "tx@1")]
    out, stop, strays = _orphan_run([r0, [], []], ends, {"JUNK"}, [])
    assert out == [(["a"], ["t1"]), (["c"], ["t2"])] and stop is None and strays == ["JUNK"]


def test_epochs_by_source_timestamps() -> None:
    """--epoch-ms: windows of source.ts_ms; a stream's windows never go back; a window
    is released once every stream has passed it (all at the end of the input)."""
    from connectors.kafka.changes import ChangeCutter
    from core.records import EpochEnd, Update

    schema = compile_query(ONE).schema
    ep = parse_kafka_url("kafka://h:1/pg?format=debezium-json")
    cutter = ChangeCutter(ep, schema, [("pg.public.R", 0, "R"), ("pg.public.R", 1, "R")],
                          epoch_ms=10)

    def ev(a: int, ts: int | None) -> bytes:
        return json.dumps({"before": None, "after": {"a": a, "b": 0}, "op": "c",
                           "source": {"table": "R", "ts_ms": ts}}).encode()

    def take(**kw: Any) -> list[Any]:
        return [o.row[0] if isinstance(o, Update) else "*" if isinstance(o, EpochEnd) else o
                for o in cutter.release(**kw)]

    for off, (a, ts) in enumerate([(1, 5), (2, 12), (3, 8), (4, 25)]):
        cutter.feed(0, off, None, ev(a, ts))
    assert take(idle=True) == []  # stream 1 has no event yet: every window waits
    cutter.feed(1, 0, None, ev(5, 3))
    cutter.feed(1, 1, None, ev(6, None), timestamp=31)  # no source.ts_ms: the record's
    # a=3 (ts 8) comes after ts 12 in its stream: it joins window 1.
    assert take(idle=True) == [1, 5, "*", 2, 3, "*"]
    assert take(final=True) == [4, "*", 6, "*"]
    with pytest.raises(KafkaConfigError, match="expected it without transactions="):
        ChangeCutter(parse_kafka_url("kafka://h:1/pg?format=debezium-json&transactions=t"),
                     schema, [("pg.public.R", 0, "R")], epoch_ms=10)


def test_epoch_ms_windows_go_with_the_positions_at_an_epoch_boundary() -> None:
    """A cutter that cut several --epoch-ms epochs at once, read up to the first one's
    end (where the local runner checkpoints): its windows are those of the events
    before that boundary, as its positions are, so a cutter started there with both cuts
    the rest as the first goes on to (with the window of the last epoch cut instead,
    a=2's window 2 would be raised to 3 and join a=3's epoch)."""
    from connectors.kafka.changes import ChangeCutter
    from core.records import EpochEnd, Update

    schema = compile_query(ONE).schema
    ep = parse_kafka_url("kafka://h:1/up?format=upsert-json")
    events = [(a, b'{"a": %d, "b": 0}' % a, 1000 * a) for a in (1, 2, 3)]  # windows 1-3

    def cutter(start: int = 0, window: int | None = None) -> ChangeCutter:
        c = ChangeCutter(ep, schema, [("up.R", 0, "R")], epoch_ms=1000)
        c.start(0, start, window)
        for off, (a, value, ts) in enumerate(events[start:], start):
            c.feed(0, off, b"%d" % a, value, ts)
        return c

    def cut(it: Any) -> list[Any]:
        return [o.row[0] if isinstance(o, Update) else "*" for o in it
                if isinstance(o, (Update, EpochEnd))]

    first = cutter()
    out = first.release(final=True)
    assert cut(next(out) for _ in range(2)) == [1, "*"]  # (up to the first epoch's end)
    assert first.positions() == {0: 1} and first.windows() == {0: 1}
    again = cutter(1, first.windows()[0])
    assert cut(again.release(final=True)) == cut(out) == [2, "*", 3, "*"]


def test_a_checkpoint_keeps_each_partitions_epoch_ms_window(kafka_bootstrap: str,
                                                            tmp_path: Path) -> None:
    """--checkpoint keeps each partition's --epoch-ms window with its offset: after a
    restart from it, events older than the partition's latest window still join that
    window (one epoch), as they would have without the restart."""
    up = _name("up")
    now = time.time_ns() // 1_000_000_000 * 1000  # (of now: the broker's retention)
    _send(kafka_bootstrap, f"{up}.R", [b'{"a": 1, "b": 5}', b'{"a": 2, "b": 5}'],
          [b'{"a": 1}', b'{"a": 2}'], [now + 1000, now + 3000])
    q = tmp_path / "one.sql"
    q.write_text(ONE)
    deltas = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    run = ["run", q, "--updates", f"kafka://{kafka_bootstrap}/{up}?format=upsert-json",
           "--epoch-ms", 1000, "--deltas", deltas, "--stop-at-end", "--quiet",
           "--checkpoint", tmp_path / "ckpt"]
    assert _run(*run) == 0
    header = json.loads((tmp_path / "ckpt" / "local-state.jsonl").read_text().split("\n")[0])
    assert header["windows"] == [[f"{up}.R", 0, now // 1000 + 3]]
    # Two events whose timestamps went back below the partition's window, in two
    # windows of their own: they join the partition's window, one epoch.
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    for a, ts in ((3, now + 1500), (4, now + 2500)):
        producer.send(f"{up}.R", b'{"a": %d, "b": 7}' % a, key=b'{"a": %d}' % a,
                      partition=0, timestamp_ms=ts)
    producer.flush()
    producer.close()
    assert _run(*run) == 0
    assert _kafka_epochs(deltas) == {
        1: Counter({("1", "5", "1"): 1}),
        2: Counter({("-1", "5", "1"): 1, ("1", "5", "2"): 1}),
        3: Counter({("1", "7", "2"): 1}),
    }


# ---------------------------------------------------------------------------------------
# End to end on the broker: the local runner


SQL = """CREATE TABLE orders(o_id INT PRIMARY KEY, cust INT, total DECIMAL(10,2), day DATE,
                     ts TIMESTAMP);
CREATE TABLE items(o_id INT, line INT, qty INT, price DECIMAL(8,2), PRIMARY KEY (o_id, line));
SELECT o.cust, COUNT(*) AS n, SUM(i.qty) AS q, SUM(i.price) AS p
FROM orders o, items i WHERE o.o_id = i.o_id GROUP BY o.cust;
"""


def _stream(seed: int, epochs: int = 12) -> str:
    """An update CSV of orders and their items: inserts, updates (a delete and an insert
    of the key, in either order) and deletes, every epoch with a new order."""
    rnd = random.Random(seed)
    orders: dict[int, tuple[Any, ...]] = {}
    items: dict[tuple[int, int], tuple[Any, ...]] = {}
    lines: list[str] = []
    next_id = 1

    def order_row(o: int) -> tuple[Any, ...]:
        day = datetime.date(1995, 1, 1) + datetime.timedelta(days=rnd.randrange(400))
        ts = datetime.datetime(1995, 1, 1, rnd.randrange(24), rnd.randrange(60), 0,
                               rnd.randrange(3) * 1000)
        return (o, rnd.randrange(4), Decimal(rnd.randrange(1, 99999)).scaleb(-2), day, ts)

    def item_row(o: int, line: int) -> tuple[Any, ...]:
        return (o, line, rnd.randrange(1, 9), Decimal(rnd.randrange(1, 9999)).scaleb(-2))

    def put(op: str, rel: str, row: tuple[Any, ...]) -> None:
        lines.append(",".join([op, rel, *(format_value(v) for v in row)]))

    def replace(rel: str, old: tuple[Any, ...], new: tuple[Any, ...]) -> None:
        pair = [("-", old), ("+", new)]
        if rnd.random() < 0.3:
            pair.reverse()  # the CSV may insert the new row first
        for op, row in pair:
            put(op, rel, row)

    for _ in range(epochs):
        o = next_id
        next_id += 1
        orders[o] = order_row(o)
        put("+", "orders", orders[o])
        for line in range(1, rnd.randint(2, 4)):
            items[o, line] = item_row(o, line)
            put("+", "items", items[o, line])
        for _ in range(rnd.randint(0, 3)):
            choice = rnd.random()
            if choice < 0.3 and len(orders) > 1:
                k = rnd.choice(sorted(orders)[:-1])
                new = order_row(k)
                replace("orders", orders[k], new)
                orders[k] = new
            elif choice < 0.6 and items:
                k2 = rnd.choice(sorted(items))
                new = item_row(*k2)
                replace("items", items[k2], new)
                items[k2] = new
            elif choice < 0.8 and items:
                k2 = rnd.choice(sorted(items))
                put("-", "items", items.pop(k2))
            elif len(orders) > 1:
                k = rnd.choice(sorted(orders)[:-1])
                for k2 in [k2 for k2 in items if k2[0] == k]:
                    put("-", "items", items.pop(k2))
                put("-", "orders", orders.pop(k))
        lines.append("*")
    return "\n".join(lines) + "\n"


Epochs = dict[int, Counter[tuple[str, ...]]]


def _text(mult: int, row: Any) -> tuple[str, ...]:
    return (str(mult), *(format_value(v) for v in row))


def _reference(q_path: Path, u_path: Path) -> Epochs:
    q = compile_query(q_path.read_text())
    return {d.epoch: Counter(_text(m, r) for m, r in d.rows)
            for d in q.run(read_updates(u_path, q.schema)) if d.rows}


def _kafka_epochs(url: str) -> Epochs:
    out: Epochs = {}
    for epoch, mult, row in read_deltas(parse_kafka_url(url)):
        out.setdefault(epoch, Counter())[_text(mult, row.values())] += 1
    return out


def _name(prefix: str) -> str:
    return f"{prefix}{os.urandom(5).hex()}"


def _files(tmp: Path, seed: int) -> tuple[Path, Path]:
    q, u = tmp / "q.sql", tmp / "u.csv"
    q.write_text(SQL)
    u.write_text(_stream(seed))
    return q, u


def _run(*args: Any) -> int:
    return main([str(a) for a in args])


@pytest.mark.parametrize("before_images", ["full", "key"])
def test_debezium_stream_gives_the_csv_deltas(kafka_bootstrap: str, tmp_path: Path,
                                              before_images: str) -> None:
    q, u = _files(tmp_path, seed=7 if before_images == "full" else 8)
    prefix = _name("pg")
    assert _run("produce", u, f"kafka://{kafka_bootstrap}/{prefix}", "--format",
                "debezium-json", "--query", q, "--partitions", 2, "--before-images",
                before_images, "--quiet") == 0
    deltas = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    source = (f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
              f"&transactions={prefix}.transaction")
    assert _run("run", q, "--updates", source, "--deltas", deltas, "--stop-at-end",
                "--quiet", "--no-native") == 0
    assert _kafka_epochs(deltas) == _reference(q, u) != {}


def test_min_epoch_events_and_epoch_n(kafka_bootstrap: str, tmp_path: Path) -> None:
    q, u = _files(tmp_path, seed=3)
    prefix = _name("pg")
    assert _run("produce", u, f"kafka://{kafka_bootstrap}/{prefix}", "--format",
                "debezium-json", "--query", q, "--quiet") == 0
    base = f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
    grouped = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    assert _run("run", q, "--updates", f"{base}&transactions={prefix}.transaction",
                "--deltas", grouped, "--stop-at-end", "--quiet", "--no-native",
                "--min-epoch-events", 1000) == 0
    final = _reference(q, u)
    total: Counter[tuple[str, ...]] = Counter()
    for rows in final.values():
        for (m, *r), n in rows.items():
            total[tuple(r)] += int(m) * n
    got = _kafka_epochs(grouped)
    assert list(got) == [1]  # one epoch: every transaction is below the minimum
    assert {tuple(r): int(m) * n for (m, *r), n in got[1].items()} == \
        {r: m for r, m in total.items() if m}
    # Without transaction metadata: --epoch N (not transactionally consistent), the
    # same final result.
    counted = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    assert _run("run", q, "--updates", base, "--deltas", counted, "--epoch", 5,
                "--stop-at-end", "--quiet", "--no-native") == 0
    net: Counter[tuple[str, ...]] = Counter()
    for rows in _kafka_epochs(counted).values():
        for (m, *r), n in rows.items():
            net[tuple(r)] += int(m) * n
    assert {r: m for r, m in net.items() if m} == {r: m for r, m in total.items() if m}


def test_epoch_ms_on_the_broker(kafka_bootstrap: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """--epoch-ms T: ivmflow produce writes each transaction k with source.ts_ms = k, so
    T = 1 gives the update CSV's epochs and T = 3 the CSV's epochs 3w..3w+2 netted as
    one; an upsert topic is cut by its records' timestamps."""
    q, u = _files(tmp_path, seed=5)
    prefix = _name("pg")
    assert _run("produce", u, f"kafka://{kafka_bootstrap}/{prefix}", "--format",
                "debezium-json", "--query", q, "--partitions", 2, "--quiet") == 0
    base = f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
    reference = _reference(q, u)
    for t in (1, 3):
        deltas = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
        assert _run("run", q, "--updates", base, "--deltas", deltas, "--epoch-ms", t,
                    "--stop-at-end", "--quiet", "--no-native") == 0
        want: dict[int, Counter[tuple[str, ...]]] = {}
        for k, rows in reference.items():
            net = want.setdefault(k // t, Counter())
            for (m, *r), n in rows.items():
                net[tuple(r)] += int(m) * n
        windows = [{r: m for r, m in c.items() if m} for _w, c in sorted(want.items())]
        got = [{tuple(r): int(m) * n for (m, *r), n in rows.items()}
               for _e, rows in sorted(_kafka_epochs(deltas).items())]
        assert got == [w for w in windows if w], t
    # The same stream as upsert topics (ivmflow produce: record timestamps 1 ms apart
    # per epoch): --epoch-ms 1 gives the CSV's epochs again.
    up = _name("up")
    assert _run("produce", u, f"kafka://{kafka_bootstrap}/{up}", "--format", "upsert-json",
                "--query", q, "--partitions", 2, "--quiet") == 0
    deltas = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    assert _run("run", q, "--updates", f"kafka://{kafka_bootstrap}/{up}?format=upsert-json",
                "--deltas", deltas, "--epoch-ms", 1, "--stop-at-end", "--quiet",
                "--no-native") == 0
    assert _kafka_epochs(deltas) == reference
    up = _name("up")
    # (timestamps of now, on a whole second: a broker deletes records older than its
    # retention, 1970's at once)
    now = time.time_ns() // 1_000_000_000 * 1000
    _send(kafka_bootstrap, f"{up}.R", [b'{"a": 1, "b": 5}', b'{"a": 2, "b": 5}',
                                       b'{"a": 1, "b": 6}', None],
          [b'{"a": 1}', b'{"a": 2}', b'{"a": 1}', b'{"a": 2}'],
          [now + 1000, now + 1999, now + 2000, now + 2500])
    plain = tmp_path / "one.sql"
    plain.write_text(ONE)
    deltas = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    assert _run("run", plain, "--updates", f"kafka://{kafka_bootstrap}/{up}?format=upsert-json",
                "--epoch-ms", 1000, "--deltas", deltas, "--stop-at-end", "--quiet") == 0
    assert _kafka_epochs(deltas) == {
        1: Counter({("1", "5", "2"): 1}),
        2: Counter({("-1", "5", "2"): 1, ("1", "6", "1"): 1}),
    }
    capsys.readouterr()
    assert _run("run", q, "--updates", u, "--epoch-ms", 10, "--quiet") == 2
    assert "--epoch-ms: epochs by the events' source timestamps are for a change stream" \
        in capsys.readouterr().err


def test_without_epochs_or_key_the_run_is_refused(kafka_bootstrap: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    q, _u = _files(tmp_path, seed=1)
    url = f"kafka://{kafka_bootstrap}/{_name('pg')}?format=debezium-json"
    assert _run("run", q, "--updates", url, "--stop-at-end", "--quiet") == 2
    assert "expected transactions=TOPIC" in capsys.readouterr().err
    plain = tmp_path / "plain.sql"
    plain.write_text("CREATE TABLE R(a INT); SELECT COUNT(*) FROM R;")
    up = f"kafka://{kafka_bootstrap}/{_name('up')}?format=upsert-json"
    assert _run("run", plain, "--updates", up, "--epoch", 1, "--stop-at-end") == 2
    assert "expected one declared in CREATE TABLE for R" in capsys.readouterr().err


def _send(bootstrap: str, topic: str, values: list[bytes | None],
          keys: list[bytes | None] | None = None, times: list[int] | None = None) -> None:
    from kafka import KafkaProducer
    from kafka_broker import create_topic

    create_topic(bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i, v in enumerate(values):
        producer.send(topic, v, key=keys[i] if keys else None, partition=0,
                      timestamp_ms=times[i] if times else None)
    producer.flush()
    producer.close()


def _ev(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
        txid: str) -> bytes:
    return json.dumps({"before": before, "after": after, "op": op,
                       "source": {"table": "R", "ts_ms": 0},
                       "transaction": {"id": txid, "total_order": 1,
                                       "data_collection_order": 1}}).encode()


def _end(txid: str, n: int) -> bytes:
    return json.dumps({"status": "END", "id": txid, "event_count": n,
                       "data_collections": [{"data_collection": "public.R",
                                             "event_count": n}]}).encode()


ONE = "CREATE TABLE R(a INT PRIMARY KEY, b INT); SELECT b, COUNT(*) FROM R GROUP BY b;\n"


def _bad_stream(bootstrap: str) -> tuple[str, str, int]:
    """Transactions 1 and 3 are good; 2 deletes a key not present (offset 2 of R)."""
    prefix = _name("pg")
    r_topic, tx = f"{prefix}.public.R", f"{prefix}.transaction"
    _send(bootstrap, r_topic, [
        _ev("c", None, {"a": 1, "b": 10}, "1"),
        _ev("c", None, {"a": 2, "b": 10}, "2"),
        _ev("d", {"a": 9}, None, "2"),  # no row with key 9
        None,  # a tombstone, skipped
        _ev("u", None, {"a": 1, "b": 20}, "3"),
    ], [b'{"a":1}', b'{"a":2}', b'{"a":9}', b'{"a":9}', b'{"a":1}'])
    _send(bootstrap, tx, [_end("1", 1), _end("2", 2), _end("3", 1)])
    return prefix, r_topic, 2


def test_bad_event_stops_the_run_naming_topic_partition_offset_and_field(
        kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = tmp_path / "q.sql"
    q.write_text(ONE)
    prefix, r_topic, bad_at = _bad_stream(kafka_bootstrap)
    deltas = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    url = f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json&transactions={prefix}.transaction"
    assert _run("run", q, "--updates", url, "--deltas", deltas, "--stop-at-end",
                "--quiet") == 1
    err = capsys.readouterr().err
    assert f"kafka topic {r_topic!r} partition 0 offset {bad_at}" in err, err
    assert "key a=9, a key not present" in err
    # Epoch 1 (transaction 1) is committed; nothing of transaction 2 is.
    assert _kafka_epochs(deltas) == {1: Counter({("1", "10", "1"): 1})}


def test_bad_events_go_to_the_dead_letter_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    q = tmp_path / "q.sql"
    q.write_text(ONE)
    prefix, r_topic, bad_at = _bad_stream(kafka_bootstrap)
    dead = _name("dead")
    deltas = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    url = (f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
           f"&transactions={prefix}.transaction&dead-letter={dead}")
    assert _run("run", q, "--updates", url, "--deltas", deltas, "--stop-at-end",
                "--on-error", "skip", "--quiet") == 0
    assert _kafka_epochs(deltas) == {
        1: Counter({("1", "10", "1"): 1}),
        2: Counter({("-1", "10", "1"): 1, ("1", "10", "2"): 1}),
        3: Counter({("-1", "10", "2"): 1, ("1", "10", "1"): 1, ("1", "20", "1"): 1}),
    }
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
    tp = TopicPartition(dead, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = [m for ms in consumer.poll(timeout_ms=5000).values() for m in ms]
    consumer.close()
    assert len(got) == 1
    headers = dict(got[0].headers)
    assert headers["topic"] == r_topic.encode() and headers["offset"] == str(bad_at).encode()
    assert b"a key not present" in headers["reason"]


def test_an_incomplete_transaction_is_an_error(kafka_bootstrap: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    q = tmp_path / "q.sql"
    q.write_text(ONE)
    prefix = _name("pg")
    _send(kafka_bootstrap, f"{prefix}.public.R", [_ev("c", None, {"a": 1, "b": 1}, "1")])
    _send(kafka_bootstrap, f"{prefix}.transaction", [_end("1", 2)])
    url = f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json&transactions={prefix}.transaction"
    assert _run("run", q, "--updates", url, "--stop-at-end", "--quiet") == 1
    err = capsys.readouterr().err
    assert f"kafka topic '{prefix}.transaction' partition 0 offset 0" in err
    assert "transaction 1" in err and "R 1 of 2 after the end of the input" in err


def test_unreadable_events_with_skip_count_toward_their_transaction_or_stop(
        kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Malformed events (no transaction id to read) with --on-error skip: one between two
    events of transaction 2 is that transaction's refused event (dead-lettered; the
    rest of transaction 2 is epoch 2, without waiting for --transaction-timeout); two
    side by side at the boundary of transactions 2 and 3, each of which lacks one, stop
    the run at transaction 2 (exit 1), naming both: either may be either's."""
    q = tmp_path / "q.sql"
    q.write_text(ONE)
    for case in ("placed", "ambiguous"):
        prefix = _name("pg")
        bad = b'{"before": null, "after": {"a": 3, "b"'
        events: list[bytes | None]
        if case == "placed":
            events = [_ev("c", None, {"a": 1, "b": 10}, "1"),
                      _ev("c", None, {"a": 2, "b": 10}, "2"), bad,
                      _ev("c", None, {"a": 3, "b": 10}, "2"),
                      _ev("u", None, {"a": 1, "b": 20}, "3")]
            counts = [1, 3, 1]
        else:
            events = [_ev("c", None, {"a": 1, "b": 10}, "1"),
                      _ev("c", None, {"a": 2, "b": 10}, "2"), bad, bad,
                      _ev("u", None, {"a": 1, "b": 20}, "3")]
            counts = [1, 2, 2]
        _send(kafka_bootstrap, f"{prefix}.public.R", events)
        _send(kafka_bootstrap, f"{prefix}.transaction",
              [_end(str(k), n) for k, n in enumerate(counts, 1)])
        dead = _name("dead")
        deltas = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
        url = (f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
               f"&transactions={prefix}.transaction&dead-letter={dead}")
        code = _run("run", q, "--updates", url, "--deltas", deltas, "--stop-at-end",
                    "--on-error", "skip", "--transaction-timeout", 600, "--quiet")
        err = capsys.readouterr().err
        if case == "placed":
            assert code == 0, err
            assert _kafka_epochs(deltas) == {
                1: Counter({("1", "10", "1"): 1}),
                2: Counter({("-1", "10", "1"): 1, ("1", "10", "3"): 1}),
                3: Counter({("-1", "10", "3"): 1, ("1", "10", "2"): 1, ("1", "20", "1"): 1}),
            }
            letters = _read_all(kafka_bootstrap, dead)
            assert [dict(r.headers)["offset"] for r in letters] == [b"2"]
            assert b"malformed JSON" in dict(letters[0].headers)["reason"]
        else:
            assert code == 1
            assert f"kafka topic '{prefix}.transaction' partition 0 offset 1" in err, err
            assert "R 1 of 2 after the end of the input" in err
            assert (f"kafka topic '{prefix}.public.R' partition 0 offset 2; kafka topic "
                    f"'{prefix}.public.R' partition 0 offset 3") in err
            assert "--on-error skip does not skip it" in err
            assert _kafka_epochs(deltas) == {1: Counter({("1", "10", "1"): 1})}


def test_upsert_topic_end_to_end(kafka_bootstrap: str, tmp_path: Path) -> None:
    q = tmp_path / "q.sql"
    q.write_text(ONE)
    prefix = _name("up")
    _send(kafka_bootstrap, f"{prefix}.R",
          [b'{"a": 1, "b": 5}', b'{"a": 2, "b": 5}', b'{"a": 1, "b": 6}', None, None],
          [b'{"a": 1}', b'{"a": 2}', b'{"a": 1}', b'{"a": 2}', b'{"a": 3}'])
    deltas = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    assert _run("run", q, "--updates", f"kafka://{kafka_bootstrap}/{prefix}?format=upsert-json",
                "--epoch", 2, "--deltas", deltas, "--stop-at-end", "--quiet") == 0
    assert _kafka_epochs(deltas) == {
        1: Counter({("1", "5", "2"): 1}),
        2: Counter({("-1", "5", "2"): 1, ("1", "6", "1"): 1}),
    }


# ---------------------------------------------------------------------------------------
# Debezium JSON out


def _read_all(bootstrap: str, topic: str) -> list[Any]:
    from connectors.kafka.topics import _read_committed

    recs, _whole = _read_committed(parse_kafka_url(f"kafka://{bootstrap}/{topic}"), topic,
                                   lambda b, e: b)
    return recs


def test_debezium_deltas_read_back_equal_the_csv_deltas(kafka_bootstrap: str,
                                                        tmp_path: Path) -> None:
    q, u = _files(tmp_path, seed=11)
    prefix = _name("pg")
    assert _run("produce", u, f"kafka://{kafka_bootstrap}/{prefix}", "--format",
                "debezium-json", "--query", q, "--before-images", "key", "--quiet") == 0
    out = _name("out")
    source = (f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
              f"&transactions={prefix}.transaction")
    assert _run("run", q, "--updates", source, "--deltas",
                f"kafka://{kafka_bootstrap}/{out}?format=debezium-json", "--stop-at-end",
                "--quiet", "--no-native") == 0
    columns = compile_query(SQL).output_columns
    rel = Relation(out, tuple(Column(c, "TEXT") for c in columns))
    got: Epochs = {}
    ops: Counter[str] = Counter()
    per_txn: Counter[str] = Counter()
    for r in _read_all(kafka_bootstrap, out):
        obj = json.loads(r.value)
        txid = obj["transaction"]["id"]
        per_txn[txid] += 1
        ops[obj["op"]] += 1
        text = json.dumps({**obj, "before": _strs(obj["before"]), "after": _strs(obj["after"])})
        ev = decode_change(text.encode(), rel, source="out")
        assert ev is not None
        rows = got.setdefault(int(txid), Counter())
        if ev.before is not None:
            rows[("-1", *map(str, ev.before))] += 1
        if ev.after is not None:
            rows[("1", *map(str, ev.after))] += 1
    want = _reference(q, u)
    assert got == {k: Counter({r: n for r, n in v.items()}) for k, v in want.items()}
    assert ops["u"] > 0  # aggregates that change are updates with both images
    ends = [json.loads(r.value) for r in _read_all(kafka_bootstrap, f"{out}.transaction")]
    assert [e["status"] for e in ends] == ["BEGIN", "END"] * len(want)
    assert {e["id"]: e["event_count"] for e in ends if e["status"] == "END"} == per_txn
    # What Flink's stop message names: the last epoch the topic holds, by its last END.
    from dataflow.runners.flink import last_written_epoch

    assert last_written_epoch(f"kafka://{kafka_bootstrap}/{out}?format=debezium-json") \
        == max(want) > 1
    # A second run (a restart) finds the epochs in the topic and writes none again.
    before = len(_read_all(kafka_bootstrap, out))
    assert _run("run", q, "--updates", source, "--deltas",
                f"kafka://{kafka_bootstrap}/{out}?format=debezium-json", "--stop-at-end",
                "--quiet", "--no-native") == 0
    assert len(_read_all(kafka_bootstrap, out)) == before


def _strs(row: dict[str, Any] | None) -> dict[str, str] | None:
    return None if row is None else {k: format_value(v) for k, v in row.items()}
