"""Change-stream epochs longer than a read, released in parts (issue 43; the Spark SF 0.1
bench: TPC-H's load, one source transaction of 879,309 events, planned as one Spark
micro-batch ran the driver out of heap in ``planInputPartitions``).

The reader of Spark and Flink (:class:`connectors.kafka.change_epochs.ChangeReader`)
reads at most ``--batch-lines`` records per stream: an epoch longer than that goes out
in several reads, its end after its last event, so that

* every read moves each stream's offset by at most the limit (no read doubles it);
* the epochs are those of the whole stream (the update CSV's, or the local runner's
  with the same cut options), with transactions (one per epoch, or several with
  ``--min-epoch-events``), with ``--epoch N`` and ``--epoch-ms`` (upsert topics);
* a reader started anew at a position inside an epoch (with the upsert state store as
  the first reader left it) replays the batch that ended there exactly and goes on to
  the same records;
* on Spark, ``--batch-lines 50`` over a transaction of hundreds of events, killed
  inside it and run again with its checkpoint: every epoch once, equal to the update
  CSV's, and no micro-batch over the limit (the offsets Spark logged).

The stream (orders and their items, as tests/test_change_streams.py's) opens with a
load of ~500 events in one transaction, then small transactions, one long transaction
of updates and deletes, and small ones again; written by ``ivmflow produce`` with two
partitions per table (key-only before-images for ``orders``, the upsert state).
"""

from __future__ import annotations

import datetime
import json
import random
import shutil
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from test_change_stream_runners import _by_epoch, _deltas, _records
from test_change_stream_runners import _produce as _produce_stream
from test_change_streams import _kafka_epochs, _name, _reference

from connectors.kafka import parse_kafka_url
from connectors.kafka.change_epochs import ChangeReader
from connectors.kafka.epochs import ReadPosition
from connectors.kafka.upsert_store import FileUpsertStore
from core.epochs import NumberedRecord
from core.records import format_value
from dataflow.api import compile_query
from dataflow.cli import main

ROOT = Path(__file__).resolve().parent.parent

LIMIT = 50
"""Records per stream and read (``--batch-lines``): a tenth of the load."""

Epochs = dict[int, Counter[tuple[str, ...]]]


def _long_stream(seed: int) -> str:
    """An update CSV: a load of 120 orders with 1-5 items each (one epoch), 30 small
    epochs, one of 150 changes (updates, deletes) and 10 new orders, 10 small ones."""
    rnd = random.Random(seed)
    orders: dict[int, tuple[Any, ...]] = {}
    items: dict[tuple[int, int], tuple[Any, ...]] = {}
    lines: list[str] = []
    next_id = [1]

    def order_row(o: int) -> tuple[Any, ...]:
        day = datetime.date(1995, 1, 1) + datetime.timedelta(days=rnd.randrange(400))
        ts = datetime.datetime(1995, 1, 1, rnd.randrange(24), rnd.randrange(60))
        return (o, rnd.randrange(6), Decimal(rnd.randrange(1, 99999)).scaleb(-2), day, ts)

    def item_row(o: int, line: int) -> tuple[Any, ...]:
        return (o, line, rnd.randrange(1, 9), Decimal(rnd.randrange(1, 9999)).scaleb(-2))

    def put(op: str, rel: str, row: tuple[Any, ...]) -> None:
        lines.append(",".join([op, rel, *(format_value(v) for v in row)]))

    def new_order() -> None:
        o = next_id[0]
        next_id[0] += 1
        orders[o] = order_row(o)
        put("+", "orders", orders[o])
        for line in range(1, rnd.randint(2, 6)):
            items[o, line] = item_row(o, line)
            put("+", "items", items[o, line])

    def change(touched: set[Any]) -> None:
        """One change of a row not changed yet in this epoch."""
        choice = rnd.random()
        free_orders = [k for k in sorted(orders)[:-1] if ("o", k) not in touched]
        free_items = [k for k in sorted(items) if ("i", k) not in touched
                      and ("o", k[0]) not in touched]
        if choice < 0.35 and free_orders:
            k = rnd.choice(free_orders)
            touched.add(("o", k))
            new = order_row(k)
            put("-", "orders", orders[k])
            put("+", "orders", new)
            orders[k] = new
        elif choice < 0.7 and free_items:
            k2 = rnd.choice(free_items)
            touched.add(("i", k2))
            new = item_row(*k2)
            put("-", "items", items[k2])
            put("+", "items", new)
            items[k2] = new
        elif choice < 0.85 and free_items:
            k2 = rnd.choice(free_items)
            touched.add(("i", k2))
            put("-", "items", items.pop(k2))
        elif free_orders:
            k = rnd.choice(free_orders)
            touched.add(("o", k))
            for k2 in [k2 for k2 in items if k2[0] == k]:
                touched.add(("i", k2))
                put("-", "items", items.pop(k2))
            put("-", "orders", orders.pop(k))

    def small() -> None:
        new_order()
        touched: set[Any] = set()
        for _ in range(rnd.randint(0, 3)):
            change(touched)
        lines.append("*")

    for _ in range(120):
        new_order()
    lines.append("*")
    for _ in range(30):
        small()
    touched: set[Any] = set()
    for _ in range(150):
        change(touched)
    for _ in range(10):
        new_order()
    lines.append("*")
    for _ in range(10):
        small()
    return "\n".join(lines) + "\n"


def _produce(bootstrap: str, tmp: Path, fmt: str, seed: int) -> tuple[Path, Path, str]:
    """:func:`test_change_stream_runners._produce` over :func:`_long_stream`."""
    return _produce_stream(bootstrap, tmp, fmt, seed, _long_stream)


def _local(q: Path, url: str, *args: str) -> Epochs:
    """The local runner's deltas on the topics (it reads each epoch whole)."""
    deltas = f"kafka://{url.split('/')[2]}/{_name('local')}"
    assert main(["run", str(q), "--updates", url, "--deltas", deltas, "--stop-at-end",
                 "--quiet", *args]) == 0
    return _kafka_epochs(deltas)


CASES: dict[str, tuple[str, dict[str, Any], list[str], bool]] = {
    # name: (format, the reader's cut options, the same as command-line options, the
    #        epochs are the update CSV's)
    "transactions": ("debezium-json", {}, [], True),
    "min-epoch-events": ("debezium-json", {"min_epoch_events": 200},
                         ["--min-epoch-events", "200"], False),
    "epoch-n": ("debezium-json", {"epoch_size": 70}, ["--epoch", "70"], False),
    "epoch-ms": ("upsert-json", {"epoch_ms": 1}, ["--epoch-ms", "1"], True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_epoch_longer_than_a_read_goes_in_parts(
        kafka_bootstrap: str, tmp_path: Path, case: str) -> None:
    fmt, cut, args, csv_epochs = CASES[case]
    q, u, url = _produce(kafka_bootstrap, tmp_path, fmt, seed=5)
    if case == "epoch-n":
        url = url.split("&transactions=")[0]  # (N events per stream, no metadata)
    sql = q.read_text()
    schema = compile_query(sql).schema
    expected = _reference(q, u) if csv_epochs else _local(q, url, *args)
    if csv_epochs:
        assert _local(q, url, *args) == expected

    def reader(store: Path) -> ChangeReader:
        return ChangeReader(parse_kafka_url(url), schema, store=FileUpsertStore(store), **cut)

    first = reader(tmp_path / "store")
    pos = first.initial(stop_at_end=True)
    batches: list[tuple[ReadPosition, list[NumberedRecord], ReadPosition]] = []
    while not pos.done:
        numbered, end = first.read(pos, max_records=LIMIT)
        over = {k: o - pos.offsets[k] for k, o in end.offsets.items()
                if o - pos.offsets[k] > LIMIT}
        # (--epoch N: epoch k holds every stream's k-th N events, so the items' topics,
        # three times the orders', hold epochs back until the end of the bounded read,
        # which releases them whole: held, as on the local runner)
        assert not over or case == "epoch-n", (
            f"read {len(batches)} moved past the limit of {LIMIT}: {over}")
        batches.append((pos, numbered, end))
        pos = end
    first.close()
    records = [r for _s, n, _e in batches for r in _records(n)]
    assert _deltas(sql, records) == expected != {}
    assert max(expected) >= {"min-epoch-events": 4, "epoch-n": 2}.get(case, 20)
    inside = [i for i, (_s, _n, e) in enumerate(batches) if (e.cut or {}).get("open")]
    assert len(inside) >= 3, "the long epochs went in parts"
    if case != "epoch-n":  # (4 data streams; a key-only before-image's update is a
        # delete and an insert)
        assert max(len(n) for _s, n, _e in batches) <= 4 * LIMIT * 2

    # A restart at a position inside an epoch: the batch that ended there replays
    # exactly (Spark's readBetweenOffsets, the store cut back to its start), the rest
    # follows as before; a reader started at the position itself (the batch committed)
    # goes on the same; with another limit, to the same epochs.
    for k in (inside[0], inside[len(inside) // 2], inside[-1]):
        start, numbered, end = batches[k]
        later = [n for _s, nb, _e in batches[k + 1:] for n in nb]
        for replay, limit in ((True, LIMIT), (False, LIMIT), (False, 3 * LIMIT)):
            store = tmp_path / f"store-{k}-{replay}-{limit}"
            shutil.copytree(tmp_path / "store", store)
            again = reader(store)
            if replay:
                assert again.read_between(start, end) == numbered
            pos, rest = end, []
            while not pos.done:
                got, pos = again.read(pos, max_records=limit)
                rest.extend(got)
            again.close()
            if limit == LIMIT:
                assert rest == later
            else:
                assert _by_epoch(rest) == _by_epoch(later)


def test_a_stream_served_late_does_not_double_the_read(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """A read whose transaction topic is served late (at TPC-H SF 0.1 the broker, busy
    sending lineitem, served the END four retries late, and the first Spark micro-batch
    held 426,030 events: the limit had doubled at each retry) waits for it at the same
    limit, then releases part of the load: no stream moves past the limit."""
    from connectors.kafka.epochs import _Fetched, stream_key

    q, _u, url = _produce(kafka_bootstrap, tmp_path, "debezium-json", seed=5)
    reader = ChangeReader(parse_kafka_url(url), compile_query(q.read_text()).schema)
    fetch = reader._fetch
    late = stream_key(url.split("transactions=")[1], 0)
    calls: list[dict[str, int]] = []

    def served_late(starts: dict[str, int], targets: dict[str, int], timeout_s: float,
                    keep_from: dict[str, int] | None = None) -> list[_Fetched]:
        got = fetch(starts, targets, timeout_s, keep_from)
        calls.append(dict(targets))
        if len(calls) > 3:
            return got
        keys = [stream_key(t, p) for t, p, _r in reader.streams()]
        return [_Fetched([], starts[k]) if k == late else f for k, f in zip(keys, got)]

    reader._fetch = served_late  # type: ignore[method-assign]
    pos = reader.initial(stop_at_end=True)
    numbered, end = reader.read(pos, max_records=LIMIT, timeout_s=0.1)
    reader.close()
    assert len(calls) >= 4 and numbered
    moved = {k: o - pos.offsets[k] for k, o in end.offsets.items()}
    assert max(moved.values()) <= LIMIT, moved
    assert all(t - pos.offsets[k] <= LIMIT for c in calls for k, t in c.items()), calls


def _spark_batches(ckpt: Path) -> list[dict[str, Any]]:
    """The source's offsets Spark logged, one per micro-batch, in batch order."""
    out = []
    logs = sorted((ckpt / "offsets").iterdir(), key=lambda p: int(p.name)
                  if p.name.isdigit() else -1)
    for path in logs:
        if path.name.isdigit():
            out.append(json.loads(path.read_text().strip().splitlines()[-1]))
    return out


@pytest.mark.parametrize("runner", ["spark", "flink"])
def test_runner_killed_inside_a_long_transaction_loses_and_repeats_nothing(
        kafka_bootstrap: str, tmp_path: Path, runner: str) -> None:
    """``--batch-lines 50`` over Debezium topics whose load is one transaction of ~500
    events: SIGKILL while the reader plans a batch inside it (Spark: after batches
    that ended inside it were logged and run), then the same command with the same
    checkpoint: every epoch once, equal to the update CSV's; every batch within the
    limit (Spark: the offsets it logged, each stream's moving at most 50)."""
    from test_runners import _run_and_kill

    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    q, u, url = _produce(kafka_bootstrap, tmp_path, "debezium-json", seed=9)
    expected = _reference(q, u)
    load = u.read_text().split("*", 1)[0].count("\n")
    out = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    ckpt = tmp_path / f"{runner}-ckpt"
    cmd = [sys.executable, "-m", "dataflow.cli", "run", str(q), "--updates", url,
           "--deltas", out, "--runner", runner, "--parallelism", "2", "--stop-at-end",
           "--batch-lines", str(LIMIT), "--checkpoint", str(ckpt), "--quiet"]
    await_ckpt = None
    if runner == "flink":  # (the kill waits for a retained checkpoint)
        cmd += ["--checkpoint-interval", "0.1"]
        await_ckpt = str(ckpt / "*" / "chk-*" / "_metadata")
    env = _run_and_kill(cmd, f"read@{load * 3 // 4}:KILL", await_file=await_ckpt)
    assert _kafka_epochs(out) == {}, "killed inside the first epoch: nothing written"
    if runner == "spark":
        logged = _spark_batches(ckpt)
        assert any((b.get("cut") or {}).get("open") for b in logged), logged
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _kafka_epochs(out) == expected
    if runner == "spark":
        logged = _spark_batches(ckpt)
        assert len(logged) >= 5
        starts = {k: 0 for k in logged[0]["offsets"]}  # (new topics)
        for a, b in zip([starts, *(x["offsets"] for x in logged)], logged):
            moved = {k: o - a[k] for k, o in b["offsets"].items()}
            assert max(moved.values()) <= LIMIT, moved
