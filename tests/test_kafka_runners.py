"""The Spark and Flink runners on Kafka, against a real broker (``kafka_bootstrap``).

A randomized update stream with deletes is produced to a 2-partition topic (markers to
every partition, each tuple's updates to one partition), the runner reads it with
``--stop-at-end`` and writes the delta topic; consumed ``read_committed``, every epoch
equals (as a multiset) the local runner's delta on the same stream as a CSV file. Then
kill -9 mid-run and restart from the checkpoint: the delta topic holds each epoch exactly
once and equals the uninterrupted run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kafka_broker import unique_name
from test_runners import (
    QUERIES,
    ROOT,
    SCHEMA,
    _ivmflow,
    _run_and_kill,
    g_stream,
    read_parts,
    write_stream,
)

from core.records import EPOCH_END
from dataflow.api import compile_query

pytestmark = pytest.mark.integration
kafka = pytest.importorskip("connectors.kafka")

Epochs = dict[int, Counter[tuple[int, tuple[Any, ...]]]]
QUERY = SCHEMA + QUERIES["endpoints_sum"] + ";\n"


def local_epochs(sql_path: Path, updates: Path, tmp: Path) -> Epochs:
    """Per-epoch deltas of the local runner on the CSV file."""
    out = tmp / "local.csv"
    subprocess.run(_ivmflow(str(sql_path), "--updates", str(updates), "--deltas", str(out)),
                   cwd=ROOT, check=True, timeout=120)
    return read_parts(out)


def topic_epochs(bootstrap: str, topic: str) -> Epochs:
    """Per-epoch delta records of the topic, consumed read_committed."""
    epochs: Epochs = {}
    for epoch, mult, row in kafka.read_deltas(kafka.parse_kafka_url(f"kafka://{bootstrap}/{topic}")):
        values = tuple(int(v) if v is not None else None for v in row.values())
        epochs.setdefault(epoch, Counter())[(mult, values)] += 1
    return epochs


def setup_stream(bootstrap: str, tmp: Path, seed: int, n: int,
                 closed: bool = False) -> tuple[Path, Path, str]:
    """The query file, the stream as CSV, and the update topic (2 partitions) holding it
    (``closed``: ending with a marker, so that an unbounded run releases every epoch)."""
    sql_path = tmp / "q.sql"
    sql_path.write_text(QUERY)
    records = g_stream(seed, n=n) + ([EPOCH_END] if closed else [])
    updates = tmp / "u.csv"
    write_stream(updates, records)
    topic = unique_name("updates")
    endpoint = kafka.parse_kafka_url(f"kafka://{bootstrap}/{topic}")
    kafka.produce_updates(endpoint, records, compile_query(QUERY).schema, partitions=2)
    return sql_path, updates, topic


def runner_cmd(runner: str, sql_path: Path, bootstrap: str, topic: str, deltas: str,
               tmp: Path, batch: int) -> list[str]:
    return _ivmflow(str(sql_path), "--updates", f"kafka://{bootstrap}/{topic}",
                    "--deltas", f"kafka://{bootstrap}/{deltas}", "--runner", runner,
                    "--parallelism", "2", "--stop-at-end", "--batch-lines", str(batch),
                    "--checkpoint", str(tmp / f"{runner}-ckpt"))


RUNNERS = ["spark", "flink"]


def _needs(runner: str) -> None:
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")


@pytest.mark.parametrize("runner", RUNNERS)
def test_runner_on_kafka_matches_local_file_run(runner: str, kafka_bootstrap: str,
                                                tmp_path: Path) -> None:
    _needs(runner)
    sql_path, updates, topic = setup_stream(kafka_bootstrap, tmp_path, seed=11, n=90)
    expected = local_epochs(sql_path, updates, tmp_path)
    deltas = unique_name("deltas")
    cmd = runner_cmd(runner, sql_path, kafka_bootstrap, topic, deltas, tmp_path, 7)
    cmd.remove("--quiet")  # keep the summary line
    proc = subprocess.run(cmd, cwd=ROOT, check=True, timeout=300, capture_output=True, text=True)
    got = topic_epochs(kafka_bootstrap, deltas)
    assert len(expected) >= 3, "the stream should span several non-empty epochs"
    assert got == expected
    summary = proc.stderr.strip().splitlines()[-1]
    # The summary must not claim "0 updates": Spark's driver counts them, Flink's job does.
    assert ("flink job done" in summary) if runner == "flink" else (" 0 updates" not in summary)


@pytest.mark.parametrize("runner", RUNNERS)
def test_kill_and_restart_writes_every_epoch_once(runner: str, kafka_bootstrap: str,
                                                  tmp_path: Path) -> None:
    _needs(runner)
    # Killed while the sink's transaction of an epoch is open (its records sent, not
    # committed). Flink writes every epoch from one operator: its 5th epoch with rows.
    # Spark writes a batch's epochs from an executor's Python worker, which counts its
    # own: the 3rd epoch one of the (at most two) workers writes.
    n, batch, fault = (160, 4, "sink.write@3") if runner == "spark" else (400, 3, "sink.write@5")
    sql_path, updates, topic = setup_stream(kafka_bootstrap, tmp_path, seed=5, n=n)
    expected = local_epochs(sql_path, updates, tmp_path)
    deltas = unique_name("deltas")
    cmd = runner_cmd(runner, sql_path, kafka_bootstrap, topic, deltas, tmp_path, batch)
    env = _run_and_kill(cmd, f"{fault}:KILL")
    partial = topic_epochs(kafka_bootstrap, deltas)
    assert partial and partial != expected, "the kill should have interrupted the run"
    assert all(partial[e] == expected[e] for e in partial), "committed epochs are whole"

    subprocess.run(cmd, cwd=ROOT, env=env, check=True, timeout=300)
    assert topic_epochs(kafka_bootstrap, deltas) == expected


@pytest.mark.parametrize("runner", RUNNERS)
def test_on_error_skip_with_kafka_is_refused_on_spark_and_flink(
    runner: str, kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _needs(runner)
    from dataflow.cli import main

    sql_path = tmp_path / "q.sql"
    sql_path.write_text(QUERY)
    code = main(["run", str(sql_path), "--updates", f"kafka://{kafka_bootstrap}/{unique_name('u')}",
                 "--runner", runner, "--on-error", "skip", "--deltas",
                 str(tmp_path / "d.csv"), "--quiet"])
    assert code == 2
    assert "--on-error skip with a kafka:// source" in capsys.readouterr().err


@pytest.mark.parametrize("runner", RUNNERS)
def test_unbounded_run_stops_cleanly_on_sigterm(runner: str, kafka_bootstrap: str,
                                                tmp_path: Path) -> None:
    """Without --stop-at-end the run goes on after the topic's end (an epoch is released
    only once every partition closed it); SIGTERM stops it with exit 0, every epoch
    written once."""
    _needs(runner)
    sql_path, updates, topic = setup_stream(kafka_bootstrap, tmp_path, seed=3, n=50,
                                            closed=True)
    expected = local_epochs(sql_path, updates, tmp_path)
    deltas = unique_name("deltas")
    cmd = [a for a in runner_cmd(runner, sql_path, kafka_bootstrap, topic, deltas, tmp_path, 50)
           if a != "--stop-at-end"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while topic_epochs(kafka_bootstrap, deltas) != expected and time.time() < deadline:
            assert proc.poll() is None, "an unbounded run must not end by itself"
            time.sleep(0.5)
        assert proc.poll() is None, "an unbounded run must not end by itself"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert topic_epochs(kafka_bootstrap, deltas) == expected


@pytest.mark.parametrize("parallelism", [1, 2])
def test_spark_writes_kafka_deltas_from_an_executor_not_through_the_driver(
        kafka_bootstrap: str, tmp_path: Path, parallelism: int) -> None:
    """With Kafka delta and snapshot sinks, the driver's sinks are never handed a row: the
    one task that merges a batch's bundles writes the topics (P=2), or the only
    partition's task itself (P=1). Per-epoch deltas and the snapshots equal the local
    run's; the counters still add up."""
    pytest.importorskip("pyspark")
    from connectors.base import Outputs
    from dataflow.circuit.drive import DriveStats
    from dataflow.runners.spark.job import SparkJob

    class DriverMustNotWrite(kafka.KafkaDeltaSink):  # type: ignore[misc, name-defined]
        def write_epoch(self, delta: Any) -> None:
            raise AssertionError(f"the driver was handed epoch {delta.epoch}'s rows")

        def write_snapshot(self, k: int, rows: Any) -> None:
            raise AssertionError(f"the driver was handed snapshot {k}'s rows")

    sql_path = tmp_path / "q.sql"
    sql_path.write_text(QUERY)
    updates = tmp_path / "u.csv"
    write_stream(updates, g_stream(21, n=80))
    expected = local_epochs(sql_path, updates, tmp_path)
    snapshots_file = tmp_path / "local-snapshots.csv"
    subprocess.run(_ivmflow(str(sql_path), "--updates", str(updates), "--deltas",
                            str(tmp_path / "d.csv"), "--snapshots", str(snapshots_file)),
                   cwd=ROOT, check=True, timeout=120)
    expected_snapshots = read_parts(snapshots_file)
    topic, snap_topic = unique_name("deltas"), unique_name("snapshots")
    q = compile_query(QUERY)
    sink = DriverMustNotWrite(kafka.parse_kafka_url(f"kafka://{kafka_bootstrap}/{topic}"),
                              q.output_columns, transactional_id=unique_name("txn"))
    snap_endpoint = kafka.parse_kafka_url(f"kafka://{kafka_bootstrap}/{snap_topic}")
    snap_sink = DriverMustNotWrite(snap_endpoint, q.output_columns, kind="snapshot",
                                   transactional_id=unique_name("snap"))
    stats = DriveStats()
    job = SparkJob(q, str(updates), epoch_size=None, parallelism=parallelism,
                   checkpoint=str(tmp_path / "ckpt"), batch_lines=9)
    job.run(Outputs(sink, snap_sink), stats)
    got = topic_epochs(kafka_bootstrap, topic)
    assert len(expected) >= 3
    assert got == expected
    assert stats.delta_rows == sum(sum(c.values()) for c in expected.values())
    got_snapshots: Epochs = {}
    for k, mult, row in kafka.read_deltas(snap_endpoint, key="snapshot"):
        values = tuple(int(v) if v is not None else None for v in row.values())
        got_snapshots.setdefault(k, Counter())[(mult, values)] += 1
    assert len(expected_snapshots) >= 2
    assert got_snapshots == expected_snapshots


def test_batch_writer_writes_each_epoch_once_and_fences_an_older_attempt(
        kafka_bootstrap: str) -> None:
    """The Spark batch writer sums the partitions' bundles per epoch; a replayed batch
    (a retried task) writes nothing twice, a later batch only its new epochs; and a
    producer of an older attempt with the same transactional id can commit nothing
    once a writer has opened after it."""
    import pickle

    pd = pytest.importorskip("pandas")  # comes with the spark (or flink) extra

    from connectors.kafka import KafkaFencedError
    from core.records import EpochDelta
    from dataflow.runners.spark import output
    from dataflow.runners.spark.output import BatchWriter, KafkaTopicSink

    topic, txn = unique_name("deltas"), unique_name("txn")
    endpoint = kafka.parse_kafka_url(f"kafka://{kafka_bootstrap}/{topic}")
    spec = KafkaTopicSink(endpoint, ("a",), txn, "epoch")
    writer = BatchWriter({"delta": spec})

    def batch(*bundles: tuple[int, list[tuple[int, tuple[int]]]]) -> list[Any]:
        frame = pd.DataFrame({"kind": ["delta"] * len(bundles),
                              "epoch": [e for e, _ in bundles],
                              "rows": [pickle.dumps(rows) for _, rows in bundles]})
        out = pd.concat(list(writer([frame])))
        assert out["rows"].isna().all(), "rows written to Kafka must not go back"
        return sorted(zip(out["epoch"].tolist(), out["n"].tolist()))

    # Two partitions' bundles of epoch 1 (one row cancels), epoch 2 from one partition.
    first = ((1, [(1, (5,)), (1, (7,))]), (1, [(-1, (7,)), (2, (9,))]), (2, [(-1, (5,))]))
    assert batch(*first) == [(1, 2), (2, 1)]
    want = {1: Counter({(1, (5,)): 1, (2, (9,)): 1}), 2: Counter({(-1, (5,)): 1})}
    assert topic_epochs(kafka_bootstrap, topic) == want
    assert batch(*first) == [(1, 2), (2, 1)]  # a replay: counted, not written again
    assert topic_epochs(kafka_bootstrap, topic) == want
    assert batch((2, [(-1, (5,))]), (3, [(1, (4,))])) == [(2, 1), (3, 1)]
    want[3] = Counter({(1, (4,)): 1})
    assert topic_epochs(kafka_bootstrap, topic) == want

    # Another worker takes a batch: its sink's producer fences this worker's, and it
    # commits epoch 4. This worker's next batch (epochs 4 and 5) finds its producer
    # fenced, opens its sink again (fencing the other), skips 4 and writes 5.
    other = spec.open()
    other.write_epoch(EpochDelta(4, ((1, (6,)),)))
    assert batch((4, [(1, (6,))]), (5, [(1, (8,))])) == [(4, 1), (5, 1)]
    with pytest.raises(KafkaFencedError, match="took over"):
        other.write_epoch(EpochDelta(6, ((1, (3,)),)))
    other.close()
    want[4], want[5] = Counter({(1, (6,)): 1}), Counter({(1, (8,)): 1})
    assert topic_epochs(kafka_bootstrap, topic) == want
    for sink in output._OPEN_SINKS.values():
        sink.close()
    output._OPEN_SINKS.clear()
