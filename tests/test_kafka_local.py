"""Kafka connectors and the local runner on Kafka (issue 5).

Fast tests (no broker): the JSON codec, URL parsing and the epoch aligner (hypothesis:
the aligned order never depends on how partition fetches interleave, and each epoch
holds exactly the file epoch's updates).  Integration tests against the real broker of
the ``kafka_bootstrap`` fixture: randomized streams with deletes produced to multi-
partition topics and run by the CLI, compared epoch by epoch with the local runner on
the same CSV file; ``kill -9`` and restart (every epoch exactly once); SIGTERM (exit 0,
whole epochs); bad records in both modes; consumer-group resume.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import random_case

from connectors.files import read_updates
from connectors.kafka import (
    EpochAligner,
    KafkaConfigError,
    decode_update,
    encode_update,
    parse_kafka_url,
    partition_of,
    read_deltas,
    read_last_epoch,
    unique_columns,
)
from core.errors import InputError
from core.records import EPOCH_END, EpochEnd, Record, Update, format_update
from core.schema import Column, Relation, Schema
from dataflow.api import compile_query
from dataflow.cli import main

ROOT = Path(__file__).resolve().parent.parent
G = Schema({"G": Relation("G", (Column("src", "INT"), Column("dst", "INT")))})
RS = Schema({
    "R": Relation("R", (Column("a", "INT"), Column("t", "TEXT"))),
    "S": Relation("S", (Column("a", "INT"), Column("x", "FLOAT"), Column("b", "BOOL"))),
})
TWO_HOP = ("CREATE TABLE G(src INT, dst INT);\n"
           "SELECT G1.src, G2.dst, COUNT(*) FROM G G1, G G2 WHERE G1.dst = G2.src "
           "GROUP BY G1.src, G2.dst;\n")

Epochs = dict[int, Counter[tuple[Any, ...]]]


# ---------------------------------------------------------------------------------------
# Codec and URLs (no broker)


def _bad(value: bytes, schema: Schema = G, relation: str | None = None) -> InputError:
    with pytest.raises(InputError) as info:
        decode_update(value, schema, source="kafka topic 'u' partition 1 offset 7",
                      relation=relation)
    return info.value


@pytest.mark.parametrize(
    ("value", "expected", "found"),
    [
        (b'{"op": "+", "relation": "G", "row": [1, 2', "a JSON object", "malformed JSON"),
        (b"[1, 2]", "a JSON object", "an array of 2"),
        (b'{"op": "x", "relation": "G", "row": [1, 2]}', "op '+', '-' or '*'", 'op "x"'),
        (b'{"op": "+", "relation": "H", "row": [1, 2]}', "a relation the query declares (G)",
         "relation 'H'"),
        (b'{"op": "+", "relation": "G", "row": [1]}', "2 values for G(src, dst)", "1 value"),
        (b'{"op": "+", "relation": "G", "row": {"src": 1}}', "columns G(src, dst)",
         "missing dst"),
        (b'{"op": "+", "relation": "G", "row": ["a", 2]}', "a INT for column G.src",
         "string 'a'"),
        (b'{"op": "+", "relation": "G", "row": [1, 2], "mult": 0}', "a positive integer mult",
         "number 0"),
        (b'{"op": "+", "relation": "G"}', "row: an array or object", "no row"),
        (b"\xff\xfe", "UTF-8 JSON", "not valid UTF-8"),
    ],
)
def test_bad_records_name_topic_partition_offset(value: bytes, expected: str, found: str
                                                 ) -> None:
    err = _bad(value)
    assert err.source == "kafka topic 'u' partition 1 offset 7"
    assert expected in err.expected and found in err.found
    assert str(err).startswith("kafka topic 'u' partition 1 offset 7: bad update record")
    assert "--on-error skip" in str(err)


def test_per_relation_topic_record_must_match_its_relation() -> None:
    rec = decode_update(b'{"op": "-", "row": [3, "x"], "mult": 2}', RS, source="s",
                        relation="R")
    assert rec == Update("-", "R", (3, "x"), 2)
    err = _bad(b'{"op": "+", "relation": "S", "row": [1, 2.0, true]}', RS, relation="R")
    assert "this topic holds R" in err.expected


rows_r = st.tuples(st.integers(-5, 5) | st.none(), st.text(max_size=4) | st.none())
rows_s = st.tuples(st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False)
                   | st.none(), st.booleans() | st.none())
updates = st.one_of(
    st.builds(Update, st.sampled_from(["+", "-"]), st.just("R"), rows_r, st.integers(1, 5)),
    st.builds(Update, st.sampled_from(["+", "-"]), st.just("S"), rows_s, st.integers(1, 5)),
    st.just(EPOCH_END),
)


@given(st.lists(updates, max_size=20))
def test_encode_decode_round_trip(records: list[Record]) -> None:
    for rec in records:
        back = decode_update(encode_update(rec), RS, source="s")
        assert back == rec
        if isinstance(rec, Update):  # the per-relation form leaves the relation out
            slim = encode_update(rec, with_relation=False)
            assert b"relation" not in slim
            assert decode_update(slim, RS, source="s", relation=rec.relation) == rec


def test_url_options_pass_through() -> None:
    ep = parse_kafka_url(
        "kafka://b1:9092,b2:9092/upd?group.id=g1&security.protocol=SASL_SSL"
        "&sasl.mechanism=PLAIN&sasl.username=u&sasl.password=p&dead-letter=bad",
        ["request.timeout.ms=7000", "group.id=g2"],
    )
    assert (ep.bootstrap, ep.topic, ep.group_id, ep.dead_letter_topic) == (
        "b1:9092,b2:9092", "upd", "g2", "bad")
    cons = ep.client_config("consumer")
    assert cons["group_id"] == "g2" and cons["request_timeout_ms"] == 7000
    assert cons["sasl_plain_username"] == "u" and cons["sasl_plain_password"] == "p"
    assert cons["security_protocol"] == "SASL_SSL" and cons["sasl_mechanism"] == "PLAIN"
    assert "group_id" not in ep.client_config("producer")
    per = parse_kafka_url("kafka://h:1/in?topics=per-relation&topic.S=s-topic")
    assert per.input_topics(RS) == [("in.R", "R"), ("s-topic", "S")]
    for bad, msg in [("kafka://h:1", "expected kafka://host:port/topic"),
                     ("kafka://h:1/t?nope=1", "unknown Kafka client property 'nope'"),
                     ("kafka://h:1/t?topics=many", "topics= expects")]:
        with pytest.raises(KafkaConfigError, match=msg):
            parse_kafka_url(bad)
    assert unique_columns(["src", "src", "n"]) == ("src", "src_2", "n")


# ---------------------------------------------------------------------------------------
# Epoch alignment (no broker)


def _split(records: Sequence[Record], partitions: int) -> list[list[Record]]:
    """What ``ivmflow produce`` writes: updates by key, every marker to every partition."""
    parts: list[list[Record]] = [[] for _ in range(partitions)]
    for rec in records:
        if isinstance(rec, EpochEnd):
            for p in parts:
                p.append(rec)
        else:
            parts[partition_of(rec, partitions)].append(rec)
    return parts


def _aligned(parts: list[list[Record]], schedule: list[int]) -> list[list[Update]]:
    """Feed the partitions in the order ``schedule`` picks (a fetch interleaving), return
    the released epochs (then the tail as a last epoch)."""
    aligner: EpochAligner[int, Record] = EpochAligner(range(len(parts)))
    pos = [0] * len(parts)
    out: list[list[Update]] = []
    pending = [i for i, p in enumerate(parts) for _ in p]
    order = [pending.pop(s % len(pending)) for s in schedule[: len(pending)]] + pending
    for i in order:
        rec = parts[i][pos[i]]
        pos[i] += 1
        if isinstance(rec, EpochEnd):
            aligner.mark(i, rec)
        else:
            aligner.push(i, rec)
        out.extend([r for r in e.items if isinstance(r, Update)] for e in aligner.pop_epochs())
    tail = [r for r in aligner.tail() if isinstance(r, Update)]
    return [*out, tail] if tail else out


def _file_epochs(records: Sequence[Record]) -> list[list[Update]]:
    epochs: list[list[Update]] = [[]]
    for rec in records:
        if isinstance(rec, EpochEnd):
            epochs.append([])
        else:
            epochs[-1].append(rec)
    return epochs if epochs[-1] else epochs[:-1]


@given(st.lists(updates, max_size=40), st.integers(1, 4),
       st.lists(st.integers(0, 1000), max_size=200))
def test_aligner_gives_the_file_epochs_whatever_the_fetch_order(
    records: list[Record], partitions: int, schedule: list[int]
) -> None:
    parts = _split(records, partitions)
    got = _aligned(parts, schedule)
    assert got == _aligned(parts, [])  # independent of the interleaving
    want = _file_epochs(records)
    assert [Counter(e) for e in got] == [Counter(e) for e in want]
    for epoch in got:  # each tuple's updates keep their stream order (valid prefixes)
        for rec in epoch:
            same = [u for u in epoch if (u.relation, u.row) == (rec.relation, rec.row)]
            orig = next(e for e in want if Counter(e) == Counter(epoch))
            assert same == [u for u in orig if (u.relation, u.row) == (rec.relation, rec.row)]


# ---------------------------------------------------------------------------------------
# With the broker


def _topic(prefix: str) -> str:
    return f"{prefix}-{os.urandom(6).hex()}"


def _reference(sql: str, path: Path, epoch: int | None) -> Epochs:
    q = compile_query(sql)
    return {d.epoch: Counter(_norm(d.rows)) for d in
            q.run(read_updates(path, q.schema), epoch_size=epoch) if d.rows}


def _norm(rows: Any) -> list[tuple[Any, ...]]:
    return [(m, *(round(v, 6) if isinstance(v, float) else v for v in r)) for m, r in rows]


def _kafka_epochs(url: str) -> Epochs:
    out: Epochs = {}
    for epoch, mult, row in read_deltas(parse_kafka_url(url)):
        out.setdefault(epoch, Counter()).update(_norm([(mult, tuple(row.values()))]))
    return out


def _write(tmp: Path, sql: str, records: Sequence[Record]) -> tuple[Path, Path]:
    q, u = tmp / "q.sql", tmp / "u.csv"
    q.write_text(sql)
    u.write_text("".join(format_update(r) + "\n" for r in records))
    return q, u


def _run(*args: Any) -> int:
    return main([str(a) for a in args])


def _markers_every(records: Sequence[Record], n: int) -> list[Record]:
    """The same epochs as ``--epoch n`` (no markers in ``records``), cut by markers."""
    out: list[Record] = []
    for i, rec in enumerate(records, 1):
        out.append(rec)
        if i % n == 0:
            out.append(EPOCH_END)
    return out


def _interesting_case(seed: int, family: str) -> tuple[str, list[Record], int | None]:
    """The first seeded random case (query + stream with deletes) from ``seed`` on whose
    deltas hold at least 5 rows, so that the comparison has something to compare."""
    for s in range(seed, seed + 100):
        case = random_case(random.Random(s), family, max_updates=120)
        q = compile_query(case.sql)
        rows = sum(len(d.rows) for d in q.run(case.records, epoch_size=case.epoch_size))
        if rows >= 5:
            return case.sql, case.records, case.epoch_size
    raise AssertionError(f"no case with deltas for {family} from seed {seed}")  # pragma: no cover


E2E_CASES = [(1000 + 10 * i, fam, parts) for i, (fam, parts) in enumerate(
    [(f, p) for f in ("path", "star", "comb", "snowflake") for p in (1, 3)])]


@pytest.mark.parametrize(("seed", "family", "partitions"), E2E_CASES)
def test_local_runner_on_kafka_equals_the_file_run(
    kafka_bootstrap: str, tmp_path: Path, seed: int, family: str, partitions: int
) -> None:
    sql, records, epoch = _interesting_case(seed, family)
    if partitions > 1 and epoch is not None:
        # Several partitions: epochs come from markers in every partition only.
        records, epoch = _markers_every([r for r in records if isinstance(r, Update)],
                                        epoch), None
    q, u = _write(tmp_path, sql, records)
    base = f"kafka://{kafka_bootstrap}"
    up, out = f"{base}/{_topic('up')}", f"{base}/{_topic('deltas')}"
    assert _run("produce", u, up, "--partitions", partitions, "--query", q, "-q") == 0
    cut = ["--epoch", epoch] if epoch else []
    assert _run("run", q, "--updates", up, "--deltas", out, "--stop-at-end", "-q", *cut) == 0
    want = _reference(sql, u, epoch)
    assert want and _kafka_epochs(out) == want


def test_per_relation_topics_and_consume(kafka_bootstrap: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    sql = ("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT);\n"
           "SELECT R.a, S.c FROM R, S WHERE R.b = S.b;\n")
    rng = random.Random(5)
    live: Counter[tuple[str, tuple[int, int]]] = Counter()
    records: list[Record] = []
    for i in range(150):
        if i % 17 == 16:
            records.append(EPOCH_END)
        elif live and rng.random() < 0.3:
            key = rng.choice(sorted(live))
            live[key] -= 1
            live += Counter()
            records.append(Update("-", key[0], key[1]))
        else:
            key = (rng.choice("RS"), (rng.randrange(4), rng.randrange(4)))
            live[key] += 1
            records.append(Update("+", *key))
    records.append(EPOCH_END)
    q, u = _write(tmp_path, sql, records)
    up = f"kafka://{kafka_bootstrap}/{_topic('in')}?topics=per-relation"
    out = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    snaps = f"kafka://{kafka_bootstrap}/{_topic('snaps')}"
    assert _run("produce", u, up, "--partitions", 2, "--query", q, "-q") == 0
    assert _run("run", q, "--updates", up, "--deltas", out, "--snapshots", snaps,
                "--stop-at-end", "-q") == 0
    want = _reference(sql, u, None)
    assert _kafka_epochs(out) == want
    # Snapshots (full results after each marker) equal the file run's.
    assert _run("run", q, "--updates", u, "--deltas", tmp_path / "d.csv", "--snapshots",
                tmp_path / "s.csv", "-q") == 0
    file_snaps = Counter(tuple(map(int, line.split(",")))
                         for line in (tmp_path / "s.csv").read_text().splitlines()[1:])
    kafka_snaps = Counter((k, m, *row.values()) for k, m, row in
                          read_deltas(parse_kafka_url(snaps), key="snapshot"))
    assert kafka_snaps == file_snaps and len(file_snaps) > 10
    capsys.readouterr()
    assert _run("consume", out) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "epoch,mult,a,c"
    got: Epochs = {}
    for line in lines[1:]:
        e, m, a, c = map(int, line.split(","))
        got.setdefault(e, Counter())[(m, a, c)] += 1
    assert got == want


def test_epoch_n_needs_a_single_partition(kafka_bootstrap: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    q, u = _write(tmp_path, TWO_HOP, [Update("+", "G", (1, 2)), EPOCH_END])
    up = f"kafka://{kafka_bootstrap}/{_topic('up')}"
    assert _run("produce", u, up, "--partitions", 2, "-q") == 0
    capsys.readouterr()
    assert _run("run", q, "--updates", up, "--epoch", 5, "--stop-at-end", "-q") == 2
    err = capsys.readouterr().err
    assert "--epoch 5" in err and "2 partitions" in err and '{"op": "*"}' in err


def test_unreachable_broker_is_a_clear_error(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listens on the port: the run fails naming the address, the reason and
    the knob (bootstrap.timeout.ms, passed through here so the test waits 1 s)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    q, _ = _write(tmp_path, TWO_HOP, [])
    code = _run("run", q, "--updates", f"kafka://127.0.0.1:{port}/updates", "--stop-at-end",
                "--kafka-option", "bootstrap.timeout.ms=1000", "-q")
    out, err = capsys.readouterr()
    assert code != 0
    assert out == ""  # no CSV header for a run that never started
    assert f"Kafka at 127.0.0.1:{port} failed" in err
    assert "Unable to bootstrap" in err and "bootstrap.timeout.ms" in err


def _long_stream(tmp: Path, n: int, every: int, seed: int) -> tuple[Path, Path]:
    rng = random.Random(seed)
    window: list[tuple[int, int]] = []
    lines = []
    for i in range(n):
        edge = (rng.randrange(40), rng.randrange(40))
        window.append(edge)
        lines.append(f"+,G,{edge[0]},{edge[1]}")
        if len(window) > 150:
            old = window.pop(0)
            lines.append(f"-,G,{old[0]},{old[1]}")
        if i % every == every - 1:
            lines.append("*")
    lines.append("*")
    q, u = tmp / "q.sql", tmp / "u.csv"
    q.write_text(TWO_HOP)
    u.write_text("\n".join(lines) + "\n")
    return q, u


def _cli(*args: Any) -> list[str]:
    return [sys.executable, "-m", "dataflow.cli", *map(str, args)]


def _start(cmd: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True,
                            stderr=subprocess.PIPE)


def _wait(cond: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"the run ended first: {proc.stderr and proc.stderr.read()!r}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_kill_9_and_restart_writes_every_epoch_exactly_once(kafka_bootstrap: str,
                                                            tmp_path: Path) -> None:
    q, u = _long_stream(tmp_path, 3000, 15, seed=7)
    want = _reference(TWO_HOP, u, None)
    up = f"kafka://{kafka_bootstrap}/{_topic('up')}"
    out = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    assert _run("produce", u, up, "--partitions", 3, "-q") == 0
    cmd = _cli("run", q, "--updates", up, "--deltas", out, "--stop-at-end", "-q")
    proc = _start(cmd)
    _wait(lambda: read_last_epoch(parse_kafka_url(out)) >= 20, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = _kafka_epochs(out)
    assert 20 <= max(partial) < max(want), "the kill should land mid-run"
    assert partial == {e: want[e] for e in partial}  # whole epochs only
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=120, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert _kafka_epochs(out) == want  # Counter equality: a duplicated epoch would differ


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_finishes_the_epoch_and_exits_0(kafka_bootstrap: str, tmp_path: Path,
                                               sig: signal.Signals) -> None:
    q, u = _long_stream(tmp_path, 3000, 15, seed=8)
    want = _reference(TWO_HOP, u, None)
    up = f"kafka://{kafka_bootstrap}/{_topic('up')}"
    out = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    assert _run("produce", u, up, "--partitions", 2, "-q") == 0
    proc = _start(_cli("run", q, "--updates", up, "--deltas", out))  # unbounded
    _wait(lambda: read_last_epoch(parse_kafka_url(out)) >= 10, proc)
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 0
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert "stopped by signal after epoch" in err
    got = _kafka_epochs(out)
    assert got and got == {e: want[e] for e in want if e <= max(got)}  # whole epochs
    assert max(got) < max(want), "the signal should land mid-run"
    # The next run continues exactly where the stopped one committed.
    assert _run("run", q, "--updates", up, "--deltas", out, "--stop-at-end", "-q") == 0
    assert _kafka_epochs(out) == want


def _send_raw(bootstrap: str, topic: str, values: Sequence[bytes]) -> None:
    from kafka import KafkaProducer
    from kafka_broker import create_topic

    create_topic(bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for v in values:
        producer.send(topic, v, partition=0)
    producer.flush()
    producer.close()


BAD = [
    b'{"op": "+", "relation": "G", "row": [1, ',
    b'{"op": "+", "relation": "Nope", "row": [1, 2]}',
    b'{"op": "+", "relation": "G", "row": [1, 2, 3]}',
    b'{"op": "+", "relation": "G", "row": ["one", 2]}',
    b'{"op": "-", "relation": "G", "row": [99, 99]}',  # valid JSON, invalid delete
]


def _mixed(seed: int) -> tuple[list[bytes], list[Record], list[int]]:
    """Good records (a stream with deletes and markers) with the bad ones spread in."""
    rng = random.Random(seed)
    good: list[Record] = []
    live: list[tuple[int, int]] = []
    for i in range(120):
        if i % 10 == 9:
            good.append(EPOCH_END)
        elif live and rng.random() < 0.3:
            good.append(Update("-", "G", live.pop(rng.randrange(len(live)))))
        else:
            live.append((rng.randrange(6), rng.randrange(6)))
            good.append(Update("+", "G", live[-1]))
    good.append(EPOCH_END)
    values = [encode_update(r) for r in good]
    bad_at: list[int] = []
    for k, bad in enumerate(BAD):
        at = 25 + 20 * k + k  # offsets after the previous insertions
        values.insert(at, bad)
        bad_at.append(at)
    return values, good, bad_at


def test_bad_records_go_to_the_dead_letter_topic(kafka_bootstrap: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from kafka import KafkaConsumer

    values, good, bad_at = _mixed(3)
    topic = _topic("mixed")
    _send_raw(kafka_bootstrap, topic, values)
    q, u = _write(tmp_path, TWO_HOP, good)
    out = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    assert _run("run", q, "--updates", f"kafka://{kafka_bootstrap}/{topic}", "--deltas", out,
                "--stop-at-end", "--on-error", "skip") == 0
    err = capsys.readouterr().err
    assert f"skipped 5 bad records; see kafka://{kafka_bootstrap}/{topic}.dead-letter" in err
    assert _kafka_epochs(out) == _reference(TWO_HOP, u, None)  # accepted records all there
    consumer = KafkaConsumer(f"{topic}.dead-letter", bootstrap_servers=kafka_bootstrap,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             consumer_timeout_ms=3000)
    dead = list(consumer)
    consumer.close()
    assert [r.value for r in dead] == BAD
    for rec, at in zip(dead, bad_at):
        headers = dict(rec.headers)
        assert headers["source"].decode() == f"kafka topic {topic!r} partition 0 offset {at}"
        assert headers["reason"].decode().startswith("expected ")
        assert (headers["topic"], headers["partition"], headers["offset"]) == (
            topic.encode(), b"0", str(at).encode())
    assert b"not present" in dict(dead[-1].headers)["reason"] or b"delete" in dict(
        dead[-1].headers)["reason"]


def test_bad_record_stops_the_run_with_a_clear_error(kafka_bootstrap: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    values, good, bad_at = _mixed(4)
    topic = _topic("mixed")
    _send_raw(kafka_bootstrap, topic, values)
    out = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    assert _run("run", TWO_HOP_FILE(tmp_path), "--updates", f"kafka://{kafka_bootstrap}/{topic}",
                "--deltas", out, "--stop-at-end") == 1
    err = capsys.readouterr().err
    assert f"kafka topic {topic!r} partition 0 offset {bad_at[0]}: bad update record" in err
    assert "malformed JSON" in err and "--on-error skip" in err
    # The epochs completed before the bad record are committed, whole.
    prefix = good[: bad_at[0]]
    last_marker = max(i for i, r in enumerate(prefix) if isinstance(r, EpochEnd))
    q, u = _write(tmp_path, TWO_HOP, prefix[: last_marker + 1])
    assert _kafka_epochs(out) == _reference(TWO_HOP, u, None) != {}


def TWO_HOP_FILE(tmp: Path) -> Path:  # noqa: N802 - reads like the constant it writes
    p = tmp / "two_hop.sql"
    p.write_text(TWO_HOP)
    return p


def test_consumer_group_resume_continues_where_the_group_stopped(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    from kafka import KafkaConsumer, TopicPartition

    q, u = _long_stream(tmp_path, 400, 20, seed=11)
    lines = u.read_text().splitlines(keepends=True)
    cut = [i for i, line in enumerate(lines) if line == "*\n"][len(lines) // 60]
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text("".join(lines[: cut + 1]))
    second.write_text("".join(lines[cut + 1:]))
    up_topic, group = _topic("up"), _topic("group")
    up = f"kafka://{kafka_bootstrap}/{up_topic}?group.id={group}"
    out = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    assert _run("produce", first, up, "--partitions", 2, "-q") == 0
    assert _run("run", q, "--updates", up, "--deltas", out, "--stop-at-end", "-q") == 0
    after_first = _kafka_epochs(out)
    assert after_first == _reference(TWO_HOP, first, None)
    assert _run("produce", second, up, "-q") == 0
    assert _run("run", q, "--updates", up, "--deltas", out, "--stop-at-end", "-q") == 0
    assert _kafka_epochs(out) == _reference(TWO_HOP, u, None)
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group,
                             enable_auto_commit=False)
    tps = [TopicPartition(up_topic, p) for p in (0, 1)]
    ends = consumer.end_offsets(tps)
    assert {tp: consumer.committed(tp) for tp in tps} == ends  # offsets at the last epoch
    consumer.close()


# ---------------------------------------------------------------------------------------
# A broker that stops answering in the middle of an epoch (its own broker process, frozen
# with SIGSTOP): the epoch is retried whole, or the run stops; never committed in part.


def test_an_epoch_the_broker_did_not_take_is_retried_whole_or_stops_the_run() -> None:
    import kafka_broker as kb

    from connectors.kafka import KafkaDeliveryError, KafkaDeltaSink, KafkaEpochMismatchError
    from connectors.kafka.sink import EPOCH_ATTEMPTS, answer_timeout_s
    from core.records import EpochDelta

    if kb.noida_version() is None:
        pytest.skip("noida-db is not installed (pip install -e .[dev])")
    broker, stop = kb._start_process()  # its own broker: this test freezes it
    assert broker.pid is not None
    fast = {"delivery.timeout.ms": "2000", "request.timeout.ms": "1000", "linger.ms": "0",
            "max.block.ms": "2000", "retry.backoff.ms": "50"}
    url, tx = f"kafka://{broker.bootstrap}/{_topic('deltas')}", _topic("tx")

    def stopped_loudly(sink: KafkaDeltaSink, delta: EpochDelta) -> bool:
        """Write ``delta``; True if the sink stopped because the broker let a record of
        the producer it fenced into the epoch (noida-db frozen under CPU starvation
        does, about once in 8 trials; Kafka rejects such records): then the topic holds
        more records of the epoch than were written, as the error says."""
        try:
            sink.write_epoch(delta)
        except KafkaEpochMismatchError as err:
            held = sum(1 for e, _m, _r in read_deltas(parse_kafka_url(url)) if e == delta.epoch)
            assert held > len(delta.rows) and f"holds {held} records" in str(err), str(err)
            return True
        return False

    sink = KafkaDeltaSink(parse_kafka_url(url, fast), ["v"], transactional_id=tx)
    again = None
    try:
        sink.write_epoch(EpochDelta(1, ((1, (1,)), (1, (2,)))))
        # Frozen through the first attempt, back for the second: epoch 2 lands once, whole.
        # (Thawed once the sink saw an attempt fail, not after a fixed time: on a loaded
        # machine the client's own timeout can fire after any fixed thaw.)
        os.kill(broker.pid, signal.SIGSTOP)
        t0 = time.monotonic()

        def thaw_after_a_failed_attempt() -> None:
            deadline = time.monotonic() + 30.0
            while sink.failed_attempts < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(broker.pid, signal.SIGCONT)

        thaw = threading.Thread(target=thaw_after_a_failed_attempt, daemon=True)
        thaw.start()
        stopped = stopped_loudly(sink, EpochDelta(2, tuple((1, (v,)) for v in range(3, 40))))
        thaw.join()
        if stopped:
            return
        # (at least one attempt timed out: request.timeout.ms is 1000)
        assert sink.failed_attempts >= 1 and time.monotonic() - t0 >= 0.9
        want = {1: Counter({(1, 1): 1, (1, 2): 1}),
                2: Counter({(1, v): 1 for v in range(3, 40)})}
        assert _kafka_epochs(url) == want
        # Frozen for good: the run stops with a clear error. Either nothing of epoch 3
        # was committed, or (its commit sent, unanswered) the error says it is in doubt.
        os.kill(broker.pid, signal.SIGSTOP)
        t3 = time.monotonic()
        with pytest.raises(KafkaDeliveryError) as err:
            sink.write_epoch(EpochDelta(3, ((1, (99,)),)))
        os.kill(broker.pid, signal.SIGCONT)
        # Within a bound, never a hang: each attempt waits at most its timeouts (the
        # new producer's max.block.ms, then flush and abort answer_timeout_s each).
        bound = EPOCH_ATTEMPTS * (2.0 + 2 * answer_timeout_s(
            parse_kafka_url(url, fast).client_config("producer")))
        assert time.monotonic() - t3 < bound
        said = str(err.value)
        in_doubt = "may still commit it" in said
        assert re.search(
            r"epoch 3 could not be confirmed in 3 attempts .*resumes after the last epoch "
            r"the topic holds \(2, or 3 if that commit landed\)" if in_doubt else
            r"epoch 3 could not be written in 3 attempts .*nothing of it was committed.*"
            r"resumes after the last committed epoch \(2\)", said), said
        # The restart: its producer fences the frozen one (settling a commit in doubt),
        # then reads where to resume. Epoch 3 lands once, whole, whatever happened.
        again = KafkaDeltaSink(parse_kafka_url(url, fast), ["v"], transactional_id=tx)
        assert again.last_committed == 2 or (in_doubt and again.last_committed == 3)
        three = {3: Counter({(1, 99): 1})}
        assert _kafka_epochs(url) == (want if again.last_committed == 2 else {**want, **three})
        if stopped_loudly(again, EpochDelta(3, ((1, (99,)),))):
            return
        assert _kafka_epochs(url) == {**want, **three}
        assert read_last_epoch(parse_kafka_url(url)) == 3
    finally:
        os.kill(broker.pid, signal.SIGCONT)
        sink.close()
        if again is not None:
            again.close()
        stop()


def test_an_epoch_committed_after_a_retry_is_read_back_and_a_stray_record_stops_the_run(
        kafka_bootstrap: str) -> None:
    """The check a sink runs after an epoch that took more than one attempt: the topic
    must hold exactly the epoch's records. A broker that lets a record of the aborted
    attempt into the retry's transaction is imitated by a second producer writing one
    more record of the epoch; the sink then stops with what it found."""
    from kafka import KafkaProducer

    from connectors.kafka import KafkaDeltaSink, KafkaEpochMismatchError
    from connectors.kafka.codec import encode_delta
    from core.records import EpochDelta

    url = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    sink = KafkaDeltaSink(parse_kafka_url(url), ["v"], transactional_id=_topic("tx"))
    rows = tuple((1, (v,)) for v in range(3, 40))
    try:
        sink.write_epoch(EpochDelta(1, ((1, (1,)),)))  # (read back: the sink's first)
        sink.write_epoch(EpochDelta(2, rows))
        sink._check_committed(2, rows)  # what it wrote: nothing to say
        stray = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        stray.send(sink.topic, encode_delta(2, 1, (7,), ["v"]), key=b"2", partition=0)
        stray.flush()
        stray.close()
        with pytest.raises(KafkaEpochMismatchError, match=(
                r"epoch 2, the first committed after this sink fenced an older producer "
                r"\(a restart or a failed attempt: 0 so far\), was read back: the topic '.*' "
                r"holds 38 records for it where this run wrote 37 \(1 extra, 0 missing")):
            sink._check_committed(2, rows)
    finally:
        sink.close()


def test_a_fenced_sink_stops_instead_of_taking_its_id_back(kafka_bootstrap: str) -> None:
    from connectors.kafka import KafkaDeliveryError, KafkaDeltaSink
    from core.records import EpochDelta

    url, tx = f"kafka://{kafka_bootstrap}/{_topic('deltas')}", _topic("tx")
    first = KafkaDeltaSink(parse_kafka_url(url), ["v"], transactional_id=tx)
    first.write_epoch(EpochDelta(1, ((1, (1,)),)))
    second = KafkaDeltaSink(parse_kafka_url(url), ["v"], transactional_id=tx)  # fences first
    try:
        with pytest.raises(KafkaDeliveryError, match=f"another producer with transactional.id "
                                                     f"'{tx}' took over"):
            first.write_epoch(EpochDelta(2, ((1, (2,)),)))
        assert second.last_committed == 1
        second.write_epoch(EpochDelta(2, ((1, (3,)),)))
        assert _kafka_epochs(url) == {1: Counter({(1, 1): 1}), 2: Counter({(1, 3): 1})}
    finally:
        first.close()
        second.close()


def test_a_stop_at_end_run_stopped_by_sigterm_exits_143_and_the_rerun_completes_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``--stop-at-end`` makes the topic a bounded source: a SIGTERM before its end (a
    fault point: the 10th epoch's end) stops at the last whole epoch with exit 143, and
    the same command again writes exactly the missing epochs."""
    q, u = _long_stream(tmp_path, 3000, 15, seed=9)
    want = _reference(TWO_HOP, u, None)
    up = f"kafka://{kafka_bootstrap}/{_topic('up')}"
    out = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    assert _run("produce", u, up, "--partitions", 2, "-q") == 0
    cmd = _cli("run", q, "--updates", up, "--deltas", out, "--stop-at-end", "-q")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IVMFLOW_FAULT": "epoch@10:TERM"}
    env.pop("IVMFLOW_FAULT_TARGET", None)
    stopped = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=120, start_new_session=True, check=False)
    assert stopped.returncode == 143, stopped.stderr
    assert "stopped by SIGTERM before the end of" in stopped.stderr
    got = _kafka_epochs(out)
    assert got == {e: want[e] for e in want if e <= max(got)}  # whole epochs only
    assert max(got) < max(want)
    assert _run(*cmd[3:]) == 0
    assert _kafka_epochs(out) == want  # Counter equality: a doubled epoch would differ
