"""Change events to updates: before-images, the upsert state per key, and upsert
topics (``format=upsert-json``, as Flink's ``upsert-kafka``).

:class:`ChangeApplier` turns each :class:`~connectors.kafka.debezium.ChangeEvent` into
the deletes and inserts it means, in the order the events are released (an epoch's):

* a relation with a declared ``PRIMARY KEY`` keeps its current row per key (the upsert
  state). ``c``/``r`` insert ``after`` (replacing the key's row if it has one: Kafka
  Connect may deliver an event twice), ``u`` deletes the key's current row and inserts
  ``after``, ``d`` deletes the key's row, ``t`` deletes every row; the before-image
  only has to hold the key (Postgres' default REPLICA IDENTITY). A ``u``/``d`` whose key
  holds no row is refused (``delete of a key not present``), except in upsert topics,
  where a tombstone of an unknown key is skipped (compaction keeps tombstones whose
  inserts it removed);
* a relation without a key needs full before-images (REPLICA IDENTITY FULL): ``u``
  deletes ``before`` and inserts ``after``, ``d`` deletes ``before``; an event without
  a full before-image is refused with one line saying to declare the key.

A refused event changes nothing (neither the state nor the view).

:func:`decode_upsert` reads one record of an upsert topic: key = the declared primary
key (a JSON object of the key columns, or the bare value of a one-column key), value =
the row as a JSON object (values as in ivmflow's JSON records: numbers, text, ISO
dates), a null value deletes the key.

    >>> from core.schema import Column, Relation, Schema
    >>> r = Relation("R", (Column("id", "INT"), Column("v", "TEXT")), key=(0,))
    >>> a = ChangeApplier(Schema({"R": r}))
    >>> [(u.op, u.row) for u in a.updates(decode_upsert(b'{"id": 1}', b'{"id": 1, "v": "x"}',
    ...                                                r, source="t"))]
    [('+', (1, 'x'))]
    >>> [(u.op, u.row) for u in a.updates(decode_upsert(b'{"id": 1}', b'{"id": 1, "v": "y"}',
    ...                                                r, source="t"))]
    [('-', (1, 'x')), ('+', (1, 'y'))]
    >>> [(u.op, u.row) for u in a.updates(decode_upsert(b'1', None, r, source="t"))]
    [('-', (1, 'y'))]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import NoReturn

from connectors.kafka.debezium import (
    MISSING,
    SKIP_HINT,
    Bad,
    ChangeError,
    ChangeEvent,
    fast_value,
    kind,
    load_json,
    plan,
    shown,
)
from core.records import Update
from core.schema import Relation, Row, Schema, Value, ValueParseError

KEY_HINT = ("declare the table's PRIMARY KEY in CREATE TABLE (ivmflow then keeps the "
            "current row per key), or set REPLICA IDENTITY FULL on the source table")


class ChangeApplier:
    """The upsert state of the keyed relations and the rules of the module docstring.

    ``upsert``: the source is an upsert topic (a delete of an unknown key is skipped)."""

    def __init__(self, schema: Schema, *, upsert: bool = False) -> None:
        self.schema = schema
        self.upsert = upsert
        self.state: dict[str, dict[tuple[Value, ...], Row]] = {
            r.name: {} for r in schema.relations.values() if r.key}
        self.skipped_deletes = 0
        """Upsert topics: tombstones of keys without a row."""
        self._dirty: set[tuple[str, tuple[Value, ...]]] | None = None

    def load(self, tuples: Iterable[tuple[str, Row]]) -> None:
        """Rebuild the state from the base relations' current tuples (a restored
        checkpoint's), ``(relation, row)`` pairs."""
        for name, row in tuples:
            rel = self.schema.lookup(name)
            if rel is not None and rel.name in self.state:
                self.state[rel.name][tuple(row[i] for i in rel.key)] = row

    def track(self) -> None:
        """Remember the keys changed from now on (:meth:`take_changes`): a runner that
        checkpoints the state writes back only those, O(changes) per epoch."""
        if self._dirty is None:
            self._dirty = set()

    def take_changes(self) -> dict[tuple[str, tuple[Value, ...]], Row | None]:
        """The keys changed since the last call, ``(relation, key)`` -> the key's row now
        (None: deleted); needs :meth:`track`."""
        assert self._dirty is not None, "take_changes() without track()"
        out = {(rel, k): self.state[rel].get(k) for rel, k in self._dirty}
        self._dirty.clear()
        return out

    def entries(self) -> Iterable[tuple[str, tuple[Value, ...], Row]]:
        """Every ``(relation, key, row)`` of the state (a full snapshot)."""
        for rel, rows in self.state.items():
            for k, row in rows.items():
                yield rel, k, row

    def put(self, relation: str, key: tuple[Value, ...], row: Row | None) -> None:
        """Set ``key``'s row (None: remove it): rebuilding the state from a checkpoint."""
        if row is None:
            self.state[relation].pop(key, None)
        else:
            self.state[relation][key] = row

    @property
    def keys(self) -> int:
        """Rows held in the upsert state."""
        return sum(len(s) for s in self.state.values())

    def state_bytes(self) -> int:
        """The upsert state's size in bytes (dicts, key tuples and rows, shallowly: the
        values themselves are shared with the view's state)."""
        total = 0
        for s in self.state.values():
            total += sys.getsizeof(s)
            for k, row in s.items():
                total += sys.getsizeof(k) + sys.getsizeof(row)
        return total

    def updates(self, ev: ChangeEvent) -> list[Update]:
        """The updates ``ev`` means (module docstring); raises :class:`ChangeError`."""
        rel = self.schema.relation(ev.relation)
        state = self.state.get(rel.name)
        src = ev.source

        def bad(expected: str, found: str, hint: str = SKIP_HINT) -> NoReturn:
            raise ChangeError(src, ev.record, expected, found, hint, txid=ev.txid)

        if state is None:
            return self._unkeyed(rel, ev, bad)
        out: list[Update] = []
        if ev.op == "t":
            out = [Update("-", rel.name, row, 1, src) for row in state.values()]
            if self._dirty is not None:
                self._dirty.update((rel.name, k) for k in state)
            state.clear()
            return out
        old_key: tuple[Value, ...] | None = None
        if ev.op in ("u", "d"):
            if ev.before is not None and all(ev.before[i] is not None for i in rel.key):
                old_key = tuple(ev.before[i] for i in rel.key)
            elif ev.op == "u" and ev.after is not None:
                old_key = tuple(ev.after[i] for i in rel.key)
            else:
                names = ", ".join(rel.columns[i].name for i in rel.key)
                bad(f"before: the key ({names}) of the deleted row of {rel.name}",
                    "no before-image" if ev.before is None else "a before-image without it")
            if old_key not in state:
                if self.upsert and ev.op == "d":
                    self.skipped_deletes += 1
                    return []
                bad(f"{'an update' if ev.op == 'u' else 'a delete'} of a row of "
                    f"{rel.name} ivmflow holds", f"{_key_text(rel, old_key)}, a key not "
                    "present (its insert was not read: the topic does not start at the "
                    "table's snapshot, or the event came twice)")
        new_key = tuple(ev.after[i] for i in rel.key) if ev.after is not None else None
        if new_key is not None and any(v is None for v in new_key):
            bad(f"after: a non-null key of {rel.name}", f"{_key_text(rel, new_key)}")
        if self._dirty is not None:  # (nothing below refuses the event)
            for k in (old_key, new_key):
                if k is not None:
                    self._dirty.add((rel.name, k))
        if old_key is not None:
            out.append(Update("-", rel.name, state.pop(old_key), 1, src))
        if new_key is not None and ev.after is not None:
            prior = state.get(new_key)
            if prior is not None:
                out.append(Update("-", rel.name, prior, 1, src))
            state[new_key] = ev.after
            out.append(Update("+", rel.name, ev.after, 1, src))
        return out

    def _unkeyed(self, rel: Relation, ev: ChangeEvent,
                 bad: Callable[..., NoReturn]) -> list[Update]:
        out: list[Update] = []
        if ev.op == "t":
            bad(f"no truncate of {rel.name} (ivmflow keeps no rows of a table without a "
                "PRIMARY KEY)", "op 't'", KEY_HINT)
        if ev.op in ("u", "d"):
            if ev.before is None or not ev.before_full:
                what = "an update" if ev.op == "u" else "a delete"
                found = ("no before-image" if ev.before is None
                         else "a before-image without all columns (a key only?)")
                bad(f"{what} of {rel.name} with its full before-image (the table has no "
                    "declared PRIMARY KEY)", found, KEY_HINT)
            assert ev.before is not None
            out.append(Update("-", rel.name, ev.before, 1, ev.source))
        if ev.after is not None and ev.op != "d":
            out.append(Update("+", rel.name, ev.after, 1, ev.source))
        return out


def _key_text(rel: Relation, key: tuple[Value, ...] | None) -> str:
    if key is None:
        return "no key"
    return "key " + ", ".join(f"{rel.columns[i].name}={v!r}" for i, v in zip(rel.key, key))


def decode_upsert(key: bytes | None, value: bytes | None, relation: Relation, *,
                  source: str) -> ChangeEvent:
    """One record of an upsert topic as a change event: ``c`` with the row (replacing
    the key's row), or ``d`` of the key for a null value (module docstring)."""
    text = shown(value) if value is not None else f"<null value, key {shown(key)}>"

    def bad(expected: str, found: str) -> NoReturn:
        raise ChangeError(source, text, expected, found)

    if not relation.key:
        bad(f"a PRIMARY KEY declared for {relation.name} (an upsert topic is keyed by it)",
            "none")
    if value is not None:
        obj = load_json(value, bad, "a JSON object of the row's columns")
        if not isinstance(obj, dict):
            bad(f"the row of {relation.name} as a JSON object", kind(obj))
        vals = [obj.get(c.name, MISSING) for c in relation.columns]  # names as declared
        if MISSING in vals:
            by_name = {str(k).lower(): v for k, v in obj.items()}
            vals = [by_name.get(c.name.lower(), MISSING) for c in relation.columns]
            missing = [c.name for c, v in zip(relation.columns, vals) if v is MISSING]
            if missing:
                bad(f"columns {relation.name}({', '.join(relation.column_names)})",
                    f"no {', '.join(missing)}")
        row: list[Value] = []
        for i, ((_col, how, a, b), v) in enumerate(zip(plan(relation), vals)):
            fast = None if v is None else fast_value(how, a, b, v, days=False)
            row.append(_typed(relation, i, v, bad) if fast is MISSING else fast)
        return ChangeEvent("c", relation.name, None, tuple(row), False, None, None, source,
                           text)
    if key is None:
        bad("a record key (the primary key) with a null value", "neither key nor value")
    k = load_json(key, bad, "the key as JSON")
    before: list[Value] = [None] * relation.arity
    if isinstance(k, dict):
        by_name = {str(n).lower(): v for n, v in k.items()}
        for i in relation.key:
            name = relation.columns[i].name
            if name.lower() not in by_name:
                bad(f"key column {name} in the record key", f"key {shown(key)}")
            before[i] = _typed(relation, i, by_name[name.lower()], bad)
    elif len(relation.key) == 1:
        before[relation.key[0]] = _typed(relation, relation.key[0], k, bad)
    else:
        bad("the record key as a JSON object of the key columns", kind(k))
    return ChangeEvent("d", relation.name, tuple(before), None, False, None, None, source,
                       text)


def _typed(relation: Relation, i: int, v: object, bad: Bad) -> Value:
    col = relation.columns[i]
    if isinstance(v, (dict, list)):
        bad(f"{col.name}: a {col.type_text}", kind(v))
    try:
        return col.coerce(v)
    except ValueParseError:
        bad(f"{col.name}: a {col.type_text}", kind(v))
