"""Change streams on the Spark and Flink runners (issue 43), against the real broker of
the ``kafka_bootstrap`` fixture.

The stream is the one of tests/test_change_streams.py (orders and their items: inserts,
updates in either order, deletes, one transaction per epoch), written by ``ivmflow
produce --format debezium-json --before-images key`` over a schema where ``orders`` has a
``PRIMARY KEY`` (key-only before-images: the upsert state) and ``items`` has none (full
before-images), two partitions per table, with transaction metadata; or as upsert
topics. Every runner must give, epoch by epoch, the deltas of the local runner on the
same topics (which tests/test_change_streams.py checks against the update CSV).

* without a JVM: :class:`connectors.kafka.change_epochs.ChangeReader` read a few records
  at a time gives the local runner's epochs; a reader started anew from any position
  with the upsert state store replays the batch that ended there exactly (Spark's
  ``readBetweenOffsets``) and goes on to the same end;
* Spark and Flink over the Debezium topics (Spark writing Debezium events, read back),
  and over upsert topics;
* a run killed mid-stream and run again with its checkpoint: every epoch once, equal.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_change_streams import _kafka_epochs, _name, _reference, _stream, _text

from connectors.kafka import parse_kafka_url
from connectors.kafka.change_epochs import ChangeReader
from connectors.kafka.debezium import decode_change
from connectors.kafka.epochs import ReadPosition
from connectors.kafka.topics import _read_committed
from connectors.kafka.upsert_store import FileUpsertStore
from core.epochs import CLOSE, NumberedRecord
from core.records import EPOCH_END, Record
from core.schema import Column, Relation
from dataflow.api import compile_query
from dataflow.cli import main

ROOT = Path(__file__).resolve().parent.parent

MIXED = """CREATE TABLE orders(o_id INT PRIMARY KEY, cust INT, total DECIMAL(10,2), day DATE,
                     ts TIMESTAMP);
CREATE TABLE items(o_id INT, line INT, qty INT, price DECIMAL(8,2));
SELECT o.cust, COUNT(*) AS n, SUM(i.qty) AS q, SUM(i.price) AS p
FROM orders o, items i WHERE o.o_id = i.o_id GROUP BY o.cust;
"""
"""orders keyed (key-only before-images), items not (full before-images)."""

KEYED = MIXED.replace("price DECIMAL(8,2));", "price DECIMAL(8,2), PRIMARY KEY (o_id, line));")
"""Every table keyed: upsert topics."""

Epochs = dict[int, Counter[tuple[str, ...]]]


def _produce(bootstrap: str, tmp: Path, fmt: str, seed: int,
             stream: Callable[[int], str] | None = None) -> tuple[Path, Path, str]:
    """The query, the update CSV (``stream(seed)``, :func:`_stream` by default) and the
    source URL of its events in ``fmt`` (Debezium: with the transaction topic)."""
    q, u = tmp / "q.sql", tmp / "u.csv"
    q.write_text(MIXED if fmt == "debezium-json" else KEYED)
    u.write_text((stream or _stream)(seed))
    prefix = _name("pg" if fmt == "debezium-json" else "up")
    assert main(["produce", str(u), f"kafka://{bootstrap}/{prefix}", "--format", fmt,
                 "--query", str(q), "--partitions", "2", "--before-images", "key",
                 "--quiet"]) == 0
    url = f"kafka://{bootstrap}/{prefix}?format={fmt}"
    if fmt == "debezium-json":
        url += f"&transactions={prefix}.transaction"
    return q, u, url


def _cut_args(url: str) -> list[str]:
    # Upsert topics carry no transactions: ivmflow produce stamps each epoch's records
    # 1 ms apart, so --epoch-ms 1 gives the update CSV's epochs back.
    return [] if "debezium" in url else ["--epoch-ms", "1"]


def _local(q: Path, url: str) -> Epochs:
    """The local runner's deltas on the topics."""
    deltas = f"{url.split('/')[0]}//{url.split('/')[2]}/{_name('local')}"
    assert main(["run", str(q), "--updates", url, "--deltas", deltas, "--stop-at-end",
                 "--quiet", *_cut_args(url)]) == 0
    return _kafka_epochs(deltas)


# ---------------------------------------------------------------------------------------
# The upsert state store (Spark's), without a broker


def test_store_folds_committed_changes_into_a_whole_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from connectors.kafka import upsert_store
    from connectors.kafka.upsert import ChangeApplier
    from connectors.kafka.upsert_store import UpsertStoreError

    monkeypatch.setattr(upsert_store, "MIN_COMPACT_BYTES", 0)
    schema = compile_query(KEYED).schema
    store = FileUpsertStore(tmp_path)
    truth: dict[int, dict[tuple[Any, ...], Any]] = {0: {}}
    rows: dict[tuple[Any, ...], Any] = {}
    for seq in range(1, 40):
        key = (seq % 7,)
        row = None if seq % 5 == 0 else (seq % 7, seq, None, None, None)
        rows = {k: v for k, v in {**rows, key: row}.items() if v is not None}
        truth[seq] = dict(rows)
        store.save(seq, {("orders", key): row})
        if seq % 10 == 9:
            store.compact(seq - 3, schema)  # (Spark commits a batch before the last)

    def state(seq: int) -> dict[tuple[Any, ...], Any]:
        a = ChangeApplier(schema)
        store.restore(seq, a)
        return a.state["orders"]

    assert len(list(tmp_path.iterdir())) < 20, "the changes were folded"
    assert state(39) == truth[39]
    assert state(36) == truth[36]  # (and the files after 36 are gone)
    with pytest.raises(UpsertStoreError, match="expected the state at sequence 3"):
        state(3)  # folded into a later whole state: never asked for after a commit


# ---------------------------------------------------------------------------------------
# The reader, without a JVM


def _records(numbered: list[NumberedRecord]) -> list[Record]:
    return [EPOCH_END if n.kind == CLOSE else n.update for n in numbered]  # type: ignore[misc]


def _by_epoch(numbered: list[NumberedRecord]) -> dict[int, Counter[Any]]:
    """The updates of each epoch (as a multiset: their order within it aside), and
    each epoch's close (as the update ``CLOSE``)."""
    out: dict[int, Counter[Any]] = {}
    for n in numbered:
        u = n.update
        key = CLOSE if u is None else (u.op, u.relation, u.row, u.mult, u.source)
        out.setdefault(n.epoch, Counter())[key] += 1
    return out


def _deltas(sql: str, records: list[Record]) -> Epochs:
    q = compile_query(sql)
    return {d.epoch: Counter(_text(m, r) for m, r in d.rows) for d in q.run(records) if d.rows}


@pytest.mark.parametrize("fmt", ["debezium-json", "upsert-json"])
def test_reader_gives_the_local_epochs_and_replays_any_batch(
        kafka_bootstrap: str, tmp_path: Path, fmt: str) -> None:
    q, u, url = _produce(kafka_bootstrap, tmp_path, fmt, seed=21)
    sql = q.read_text()
    schema = compile_query(sql).schema
    cut = {"epoch_ms": 1} if fmt == "upsert-json" else {}

    def reader(store: str) -> ChangeReader:
        return ChangeReader(parse_kafka_url(url), schema, store=FileUpsertStore(store),
                            summary=str(tmp_path / "summary.json"), **cut)

    first = reader(str(tmp_path / "store"))
    pos = first.initial(stop_at_end=True)
    batches: list[tuple[ReadPosition, list[NumberedRecord], ReadPosition]] = []
    while not pos.done:
        numbered, end = first.read(pos, max_records=3)
        batches.append((pos, numbered, end))
        pos = end
    first.close()
    records = [r for _s, n, _e in batches for r in _records(n)]
    assert _deltas(sql, records) == _reference(q, u) != {}
    assert len([b for b in batches if b[1]]) > 3, "several batches"
    assert json.loads((tmp_path / "summary.json").read_text())["keys"] > 0

    # A restart at batch k (a new reader, the store as the first reader left it: the
    # restore cuts it back to k's start): the batch that ended there replays exactly,
    # the rest follows as before, in batches of another size (the same epochs, each with
    # the same updates; a transaction longer than a batch goes in parts, the streams'
    # parts interleaved as the batches' size has them).
    for k in (1, len(batches) // 2, len(batches) - 1):
        store = tmp_path / f"store-{k}"
        shutil.copytree(tmp_path / "store", store)
        again = reader(str(store))
        start, numbered, end = batches[k]
        assert again.read_between(start, end) == numbered
        pos, rest = end, []
        while not pos.done:
            got, pos = again.read(pos, max_records=5)
            rest.extend(got)
        again.close()
        later = [n for _s, nb, _e in batches[k + 1:] for n in nb]
        assert _by_epoch(rest) == _by_epoch(later)


def test_reader_stops_at_a_bad_event_and_at_an_overdue_transaction(
        kafka_bootstrap: str) -> None:
    """A bad event raises its error naming topic, partition, offset and field (the
    runners have no dead-letter output: the hint says so); an END whose events do not
    arrive is an error --transaction-timeout seconds after it was first fetched, across
    reads of an unbounded run (each read cuts anew)."""
    from test_change_streams import ONE, _bad_stream, _end, _ev, _send

    from connectors.kafka.debezium import ChangeError

    schema = compile_query(ONE).schema
    prefix, r_topic, bad_at = _bad_stream(kafka_bootstrap)
    url = (f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
           f"&transactions={prefix}.transaction")
    reader = ChangeReader(parse_kafka_url(url), schema)
    with pytest.raises(ChangeError) as info:
        reader.read(reader.initial(stop_at_end=True))
    reader.close()
    msg = str(info.value)
    assert f"kafka topic {r_topic!r} partition 0 offset {bad_at}" in msg
    assert "key a=9, a key not present" in msg and "runners stop at a bad event" in msg

    prefix = _name("pg")
    _send(kafka_bootstrap, f"{prefix}.public.R", [_ev("c", None, {"a": 1, "b": 1}, "1")])
    _send(kafka_bootstrap, f"{prefix}.transaction", [_end("1", 2)])
    url = (f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
           f"&transactions={prefix}.transaction")
    reader = ChangeReader(parse_kafka_url(url), schema, transaction_timeout=1.5)
    pos = reader.initial(stop_at_end=False)
    numbered, pos = reader.read(pos, timeout_s=0.5)  # the END is fetched: not overdue
    assert numbered == []
    time.sleep(1.6)
    with pytest.raises(ChangeError) as info:
        reader.read(pos, timeout_s=0.5)
    reader.close()
    msg = str(info.value)
    assert f"kafka topic '{prefix}.transaction' partition 0 offset 0" in msg
    assert "R 1 of 2 after 1.5 s" in msg


# ---------------------------------------------------------------------------------------
# Spark and Flink


def _ivmflow(*args: Any) -> list[str]:
    return [sys.executable, "-m", "dataflow.cli", "run", *map(str, args)]


def _runner_cmd(runner: str, q: Path, url: str, deltas: str, tmp: Path) -> list[str]:
    return _ivmflow(q, "--updates", url, "--deltas", deltas, "--runner", runner,
                    "--parallelism", "2", "--stop-at-end", "--batch-lines", "4",
                    "--checkpoint", tmp / f"{runner}-ckpt", "--quiet", *_cut_args(url))


def _needs(runner: str) -> None:
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")


def _debezium_epochs(bootstrap: str, topic: str, columns: list[str]) -> Epochs:
    """A Debezium delta topic read back (read_committed) as delta rows per epoch."""
    rel = Relation(topic, tuple(Column(c, "TEXT") for c in columns))
    recs, _whole = _read_committed(parse_kafka_url(f"kafka://{bootstrap}/{topic}"), topic,
                                   lambda b, e: b)
    out: Epochs = {}
    for r in recs:
        obj = json.loads(r.value)
        text = {k: None if v is None else str(v) for k, v in (obj["after"] or {}).items()}
        old = {k: None if v is None else str(v) for k, v in (obj["before"] or {}).items()}
        ev = decode_change(json.dumps({**obj, "before": old or None,
                                       "after": text or None}).encode(), rel, source=topic)
        assert ev is not None
        rows = out.setdefault(int(obj["transaction"]["id"]), Counter())
        if ev.before is not None:
            rows[_text(-1, ev.before)] += 1
        if ev.after is not None:
            rows[_text(1, ev.after)] += 1
    return out


@pytest.mark.parametrize(("runner", "fmt"), [("spark", "debezium-json"),
                                             ("flink", "debezium-json"),
                                             ("spark", "upsert-json"),
                                             ("flink", "upsert-json")])
def test_runner_gives_the_local_runners_deltas(kafka_bootstrap: str, tmp_path: Path,
                                               runner: str, fmt: str) -> None:
    """Debezium topics (key-only and full before-images, transaction metadata) or upsert
    topics: the runner's deltas equal the local runner's epoch by epoch; Spark writes
    them as Debezium events (read back), Flink as ivmflow's records."""
    _needs(runner)
    q, _u, url = _produce(kafka_bootstrap, tmp_path, fmt, seed=31)
    expected = _local(q, url)
    assert len(expected) >= 5
    out = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    debezium = runner == "spark" and fmt == "debezium-json"
    cmd = _runner_cmd(runner, q, url, out + ("?format=debezium-json" if debezium else ""),
                      tmp_path)
    cmd.remove("--quiet")  # the summary line names the upsert state
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if debezium:
        columns = list(compile_query(q.read_text()).output_columns)
        got = _debezium_epochs(kafka_bootstrap, out.rsplit("/", 1)[1], columns)
    else:
        got = _kafka_epochs(out)
    assert got == expected
    summary = proc.stderr.strip().splitlines()[-1]
    assert "upsert state " in summary and " keys, " in summary, summary


@pytest.mark.parametrize("runner", ["flink", "spark"])
def test_killed_mid_stream_and_run_again_loses_and_repeats_nothing(
        kafka_bootstrap: str, tmp_path: Path, runner: str) -> None:
    """SIGKILL while the runner reads (the ``read`` fault point: the reader has cut a
    batch and changed its upsert state, the checkpoint does not hold it yet), then the
    same command with the same checkpoint: the Debezium stream's deltas, every epoch
    once, equal to the local runner's. The restart restores the upsert state with the
    position (Flink: from its checkpoint; Spark: the store cut back to the offset log)."""
    from test_runners import _run_and_kill

    _needs(runner)
    q, u, url = tmp_path / "q.sql", tmp_path / "u.csv", ""
    q.write_text(MIXED)
    u.write_text(_stream(41, epochs=40))
    prefix = _name("pg")
    assert main(["produce", str(u), f"kafka://{kafka_bootstrap}/{prefix}", "--format",
                 "debezium-json", "--query", str(q), "--partitions", "2",
                 "--before-images", "key", "--quiet"]) == 0
    url = (f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
           f"&transactions={prefix}.transaction")
    expected = _local(q, url)
    updates = sum(1 for line in u.read_text().splitlines() if line[:1] in "+-")
    out = f"kafka://{kafka_bootstrap}/{_name('deltas')}"
    cmd = _runner_cmd(runner, q, url, out, tmp_path)
    await_ckpt = None
    if runner == "flink":  # (the kill waits for a retained checkpoint, else the whole
        # read can fall before the first one and the restart restores nothing)
        cmd += ["--checkpoint-interval", "0.1"]
        await_ckpt = str(tmp_path / "flink-ckpt" / "*" / "chk-*" / "_metadata")
    env = _run_and_kill(cmd, f"read@{updates * 2 // 3}:KILL", await_file=await_ckpt)
    partial = _kafka_epochs(out)
    assert partial != expected, "the kill should have interrupted the run"
    assert all(partial[e] == expected[e] for e in partial), "committed epochs are whole"
    cmd.remove("--quiet")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if runner == "flink":  # (else the restart did not test the restored state)
        assert "resuming from checkpoint" in proc.stderr
    assert _kafka_epochs(out) == expected


def test_flink_stopped_names_the_last_epoch_of_its_debezium_output(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """SIGTERM once Flink's merger has committed its second epoch, the deltas going out
    as Debezium events: exit 143, and the stop line names the last epoch the topic holds
    (its transaction topic's last END), the whole ones a consumer reads (it said 'no
    epoch was completed' when it read the Debezium topic as ivmflow's records)."""
    from connectors.kafka.debezium_sink import read_last_transaction

    _needs("flink")
    q, _u, url = _produce(kafka_bootstrap, tmp_path, "debezium-json", seed=31)
    expected = _local(q, url)
    out = f"kafka://{kafka_bootstrap}/{_name('deltas')}?format=debezium-json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IVMFLOW_FAULT": "sink.commit@2:TERM"}
    env.pop("IVMFLOW_FAULT_TARGET", None)
    proc = subprocess.run(_runner_cmd("flink", q, url, out, tmp_path), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 143, proc.stderr[-3000:]
    last = read_last_transaction(parse_kafka_url(out))
    assert last >= sorted(expected)[1], (last, proc.stderr[-1500:])  # (maybe all: the
    # job may finish the few epochs left before it is cancelled)
    columns = list(compile_query(q.read_text()).output_columns)
    got = _debezium_epochs(kafka_bootstrap, parse_kafka_url(out).topic, columns)
    assert got == {e: rows for e, rows in expected.items() if e <= last}
    assert f"epochs 1-{last} are whole" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("fmt", ["json", "debezium-json"])
def test_a_bounded_read_the_broker_stops_serving_fails_within_seconds(
        tmp_path: Path, fmt: str) -> None:
    """Before: at TPC-H SF 0.1 the broker (noida-db 0.2.3) stopped serving a topic's
    records (it answered each fetch with all the partition's unread records, more than
    kafka-python accepts in one response, which it drops and asks again) and the local
    runner's --stop-at-end read, its end offsets known, polled for them without end and
    said nothing. Now polls that fetch nothing for STALL_S seconds while records are
    known to be unread stop it, naming each such topic, partition and offset. Here the
    broker is frozen right after the read took its end offsets: nothing more arrives."""
    import os
    import signal
    import threading

    import kafka_broker as kb

    from connectors.kafka import KafkaStallError, KafkaUpdateSource
    from connectors.kafka.changes import ChangeStreamSource

    if kb.noida_version() is None:
        pytest.skip("noida-db is not installed (pip install -e .[dev])")
    broker, stop = kb._start_process()  # its own broker: this test freezes it
    assert broker.pid is not None
    source: KafkaUpdateSource | None = None
    try:
        if fmt == "json":
            q, u = tmp_path / "q.sql", tmp_path / "u.csv"
            q.write_text(MIXED)
            u.write_text(_stream(7))
            topic = _name("updates")
            url = f"kafka://{broker.bootstrap}/{topic}"
            assert main(["produce", str(u), url, "--query", str(q), "--quiet"]) == 0
        else:
            q, u, url = _produce(broker.bootstrap, tmp_path, fmt, seed=7)
        ep, schema = parse_kafka_url(url), compile_query(q.read_text()).schema
        source = (KafkaUpdateSource(ep, schema, group_id=_name("g"), stop_at_end=True)
                  if fmt == "json" else
                  ChangeStreamSource(ep, schema, group_id=_name("g"), stop_at_end=True))
        ends = source._end_offsets
        pid = broker.pid

        def ends_then_freeze() -> dict[tuple[str, int], int]:
            got = ends()
            os.kill(pid, signal.SIGSTOP)
            return got

        source._end_offsets = ends_then_freeze  # type: ignore[method-assign]
        outcome: list[BaseException | int] = []

        def read() -> None:
            try:
                outcome.append(sum(1 for _ in source))
            except BaseException as err:  # noqa: BLE001 - handed to the test's thread
                outcome.append(err)

        t0 = time.monotonic()
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout=60)
        took = time.monotonic() - t0
        assert outcome, "the bounded read still waits after 60 s (it hangs)"
        err = outcome[0]
        assert isinstance(err, KafkaStallError), err
        assert took < 30, took
        said = str(err)
        assert "expected the records from offset 0 up to" in said, said
        assert "fetched none in 8 s" in said and "receive.message.max.bytes" in said, said
        first = url.split("/")[3].split("?")[0]
        assert f"kafka topic '{first}" in said, said
    finally:
        os.kill(broker.pid, signal.SIGCONT)
        if source is not None:
            source.close()
        stop()
