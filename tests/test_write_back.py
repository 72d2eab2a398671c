"""The write-back cache (:class:`~operators.writeback.WriteBackState`) misses no change.

The Flink and Spark runners keep a partition's state per entry in their stores and
write back, per epoch or batch, only the keys the cache marked. Reads do not always
mark (a map holding only immutable values, a read-only walk of an enumeration), so a
value changed in place without a mark would be lost at the next restore. Here, for every
kind of engine, a store is kept from the written-back entries alone, and after every
epoch it must equal the cache, map by map; the engine's output must equal the local
runner's.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest

from core.epochs import EpochCursor
from core.records import EPOCH_END, Record, Update
from dataflow.api import compile_query
from dataflow.distributed.partitions import (
    PartitionLayout,
    PartitionTask,
    bundle_outputs,
    merge_outputs,
    tag_records,
)
from operators.writeback import (
    BIG_CONTAINER,
    ITEM,
    MEMBER,
    SMALL_CONTAINER,
    TrackedDict,
    TrackedMap,
    TrackedSet,
    WriteBackState,
    decode_entry,
    encode_entry,
    encode_key,
)

G = "CREATE TABLE G(src INT, dst INT);\n"
TRIANGLE = "FROM G a, G b, G c WHERE a.dst = b.src AND b.dst = c.src AND c.dst = a.src"
QUERIES: dict[str, tuple[str, float | None]] = {
    "hop2_groupby": ("SELECT G1.src, COUNT(*) FROM G G1, G G2 WHERE G1.dst = G2.src "
                     "GROUP BY G1.src", None),
    "hop4_bag": ("SELECT G2.src, G3.src, G3.dst FROM G G1, G G2, G G3, G G4 "
                 "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G4.src", None),
    "hop3_distinct": ("SELECT DISTINCT G1.src, G3.dst FROM G G1, G G2, G G3 "
                      "WHERE G1.dst = G2.src AND G2.dst = G3.src", None),
    "star_avg": ("SELECT G1.src, AVG(G3.dst) FROM G G1, G G2, G G3 "
                 "WHERE G1.src = G2.src AND G1.src = G3.src GROUP BY G1.src", None),
    "triangle_count": (f"SELECT COUNT(*) {TRIANGLE}", None),
    "triangle_listing": (f"SELECT a.src, b.src, c.src {TRIANGLE}", None),
    "four_cycle": ("SELECT a.src, b.src, c.src, d.src FROM G a, G b, G c, G d "
                   "WHERE a.dst = b.src AND b.dst = c.src AND c.dst = d.src "
                   "AND d.dst = a.src", None),
    "view_trees_eps_half": ("SELECT G1.src, G2.dst FROM G G1, G G2 "
                            "WHERE G1.dst = G2.src", 0.5),
    "view_trees_count": ("SELECT G1.src, COUNT(*) FROM G G1, G G2 WHERE G1.dst = G2.src "
                         "GROUP BY G1.src", 0.25),
}


def _stream(seed: int, n: int = 400, nodes: int = 12) -> list[Record]:
    """Skewed edges with deletes of live copies, epochs every 5 to 40 records."""
    rng = random.Random(seed)
    live: dict[tuple[int, int], int] = {}
    out: list[Record] = []
    for _ in range(n):
        if rng.random() < 0.06:
            out.append(EPOCH_END)
        elif live and rng.random() < 0.4:
            row = rng.choice(sorted(live))
            m = rng.randint(1, live[row])
            live[row] -= m
            if not live[row]:
                del live[row]
            out.append(Update("-", "G", row, m))
        else:
            row = (int(rng.paretovariate(1.0)) % nodes, int(rng.paretovariate(1.0)) % nodes)
            live[row] = live.get(row, 0) + 1
            out.append(Update("+", "G", row))
    return out


def _written_back(state: WriteBackState, store: dict[str, dict[str, bytes]]) -> None:
    _write(state.changes(), store)


def _plain(state: WriteBackState) -> dict[str, dict[Any, Any]]:
    """Every non-empty map as plain dicts, sets and dicts (tracked containers unwrapped)."""
    def value(v: Any) -> Any:
        return set(v) if isinstance(v, set) else dict(v) if isinstance(v, dict) else v
    return {name: {k: value(v) for k, v in dict.items(state.map(name))}
            for name in state.names() if dict.__len__(state.map(name))}


def _restored(store: dict[str, dict[str, bytes]]) -> WriteBackState:
    """What a runner's restore builds from the stored entries."""
    state = WriteBackState()
    for name, m in store.items():
        state.load(name, (decode_entry(k, pickle.loads(b)) for k, b in m.items()))
    return state


@pytest.mark.parametrize("name", sorted(QUERIES))
@pytest.mark.parametrize("seed", [1, 2])
def test_the_written_back_entries_equal_the_cache_after_every_epoch(name: str, seed: int
                                                                     ) -> None:
    sql, eps = QUERIES[name]
    q = compile_query(G + sql, eps=eps, view_trees=True) if eps is not None \
        else compile_query(G + sql)
    layout = PartitionLayout(q, 1)
    tagged = tag_records(layout, EpochCursor().number(_stream(seed), final=True))
    reference = merge_outputs(PartitionTask(q, layout, None).process(tagged))

    state = WriteBackState()
    task = PartitionTask(q, layout, state=state)
    store: dict[str, dict[str, bytes]] = {}
    out = []
    closes = 0
    for row in tagged:
        out += task.process([row])
        if row.kind != "c":
            continue
        closes += 1
        _written_back(state, store)
        assert _plain(_restored(store)) == _plain(state), \
            f"{name}: the store lost a change at epoch {row.epoch}"
    assert closes > 5
    assert merge_outputs(out) == reference


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_process_bundles_are_the_rows_of_process_grouped_per_epoch(name: str) -> None:
    """What the Flink partition at P=1 writes and Spark ships (process_bundles) is what
    the merger would make of process's rows, epoch by epoch, deltas and snapshots."""
    sql, eps = QUERIES[name]
    q = compile_query(G + sql, eps=eps, view_trees=True) if eps is not None \
        else compile_query(G + sql)
    layout = PartitionLayout(q, 1)
    tagged = tag_records(layout, EpochCursor().number(_stream(3), final=True))
    rows_task = PartitionTask(q, layout, None)
    bundles_task = PartitionTask(q, layout, state=WriteBackState())
    start = kinds = 0
    for i, row in enumerate(tagged):
        if row.kind != "c":
            continue
        part = tagged[start:i + 1]
        start = i + 1
        bundles = bundles_task.process_bundles(part)
        assert bundles == bundle_outputs(rows_task.process(part)), f"{name}: epoch {row.epoch}"
        kinds |= (1 if ("delta", row.epoch) in bundles else 0) | (2 if row.snapshot else 0)
    assert kinds == 3, "the stream must close epochs with deltas and take snapshots"


def test_a_map_of_counts_reads_at_dict_speed_and_switches_on_a_mutable_value() -> None:
    m = TrackedMap()
    m[1] = 5
    assert type(m) is TrackedMap and type(m).get is dict.get
    m.take_dirty()
    assert m.get(1) == 5 and m[1] == 5 and not m.dirty
    m[2] = {7}
    assert type(m) is not TrackedMap and isinstance(m, TrackedMap)
    m.take_dirty()
    m[2].add(8)
    assert m.take_dirty() == {2}


def test_a_big_group_is_stored_per_element_and_a_small_one_whole() -> None:
    state = WriteBackState()
    groups = state.map("root.proj")
    groups[()] = set(range(10))
    assert state.changes() == [("root.proj", {(): set(range(10))}, [])]
    groups[()].update(range(10, BIG_CONTAINER + 1))  # past the bound: per element from now
    name, puts, gone = state.changes()[0]
    assert gone == [()] and puts == {(MEMBER, (), e): None for e in range(BIG_CONTAINER + 1)}
    assert type(groups[()]) is TrackedSet
    groups.get(())
    groups[()].add(-1)  # one element of a big group: one entry, however big the group
    groups[()].discard(5)
    assert state.changes() == [("root.proj", {(MEMBER, (), -1): None}, [(MEMBER, (), 5)])]
    for e in range(BIG_CONTAINER + 1):  # shrunk below SMALL_CONTAINER: whole again
        if e >= SMALL_CONTAINER - 2 and e != 5:
            groups[()].discard(e)
    name, puts, gone = state.changes()[0]
    assert puts == {(): groups[()]} and type(groups[()]) is set
    assert set(gone) == {(MEMBER, (), e) for e in range(-1, BIG_CONTAINER + 1) if e != 5}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_changes_to_groups_and_buckets_restore_from_the_store(seed: int) -> None:
    """Sets and dicts crossing the bounds both ways, removed and re-created: after every
    write-back, a restore from the store equals the cache, and so does a worker that
    catches up from the written changes (apply_stored, as Spark does)."""
    rng = random.Random(seed)
    state = WriteBackState()
    store: dict[str, dict[str, bytes]] = {}
    follower = WriteBackState()
    switches: set[tuple[bool, bool]] = set()  # (per element before, per element after)
    for step in range(60):
        for name, tag in (("groups", MEMBER), ("buckets", ITEM)):
            m = state.map(name)
            for _ in range(rng.randrange(1, 200)):
                key = rng.randrange(4)
                value = m.get(key)
                if value is None:
                    m[key] = {0} if tag is MEMBER else {0: 1}
                elif rng.random() < 0.002:
                    del m[key]
                elif rng.random() < (0.8 if step % 20 < 10 else 0.2):  # grow, shrink
                    e = rng.randrange(200)
                    if tag is MEMBER:
                        value.add(e)
                    else:
                        value[e] = value.get(e, 0) + 1
                elif value:
                    e = rng.choice(list(value))
                    if tag is MEMBER:
                        value.discard(e)
                    else:
                        del value[e]
                    if not value:
                        del m[key]
        before = {(n, k): type(v) for n in ("groups", "buckets")
                  for k, v in dict.items(state.map(n))}
        changes = state.changes()
        for (n, k), kind in before.items():
            now = type(dict.get(state.map(n), k))
            if now in (set, dict, TrackedSet, TrackedDict):
                switches.add((kind in (TrackedSet, TrackedDict), now in (TrackedSet, TrackedDict)))
        _write(changes, store)
        for name, puts, gone in changes:
            follower.apply_stored(name, puts, gone)
        assert _plain(_restored(store)) == _plain(state), f"step {step}"
        assert _plain(follower) == _plain(state), f"step {step}"
    assert (False, True) in switches, "no value grew into per-element storage"
    assert (True, False) in switches, "no value went back to a whole entry"


def _write(changes: list[tuple[str, dict[Any, Any], list[Any]]],
           store: dict[str, dict[str, bytes]]) -> None:
    for name, puts, gone in changes:
        m = store.setdefault(name, {})
        for k in gone:
            m.pop(encode_key(k), None)
        for k, v in puts.items():
            m[encode_key(k)] = encode_entry(k, v)


def test_a_restored_map_of_sets_tracks_reads() -> None:
    state = WriteBackState()
    state.load("index", [((1,), {(1, 2)})])
    state.map("index")[(1,)].add((1, 3))
    assert [(n, p) for n, p, _ in state.changes()] == [("index", {(1,): {(1, 2), (1, 3)}})]


@pytest.mark.parametrize("name", ["hop2_groupby", "star_avg"])
def test_grouped_aggregates_over_one_top_node_keep_no_copy_of_the_groups(name: str) -> None:
    """The engine maintains these groups' payloads (the lower children's projections at
    the group key): the finalizer reads them there and writes nothing of its own, and
    the output still equals the blob round-trip's (checked above against the cache)."""
    q = compile_query(G + QUERIES[name][0])
    layout = PartitionLayout(q, 1)
    tagged = tag_records(layout, EpochCursor().number(_stream(3), final=True))
    state = WriteBackState()
    task = PartitionTask(q, layout, state=state)
    out = task.process(tagged)
    assert task.finalizer.current is not None
    assert not dict(state.map("finalize.output"))
    assert sum(1 for o in out if o.kind == "delta") > 10
