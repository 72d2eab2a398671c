"""Faults on a real workload (issue 33, item 3): the TPC-H SF 0.01 refresh stream in a
2-partition Kafka topic (the load cut into epochs of 8000 updates), TPC-H Q3 (on Spark
and Flink two stages: the join block, then the global top-10 window) on the local runner
with ``--checkpoint``, and on Spark and Flink at P=2, writing deltas to a Kafka topic.
Each run is killed with SIGKILL (the whole process group) once at a random point after
its first epoch with rows was committed, then started again with the same command: the
delta topic, read committed, equals the uninterrupted local run's deltas epoch by epoch
(Counter equality: a lost or a duplicated epoch differs).

The three-kill run (at a checkpoint, during an epoch's output, at random) is
``bench/tpch_faults.py``, which these tests share their functions with.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from kafka_broker import unique_name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
tf = pytest.importorskip("bench.tpch_faults")


@pytest.fixture(scope="module")
def tpch_topic(tpch_sf001: Path, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Path, str, tf.Epochs]:
    """Q3's file, the update topic holding the stream, and the uninterrupted deltas."""
    from dataflow.runners.kafka import produce

    sql = tpch_sf001 / "queries" / f"{tf.QUERY}.sql"
    stream = tf.cut_epochs(tpch_sf001 / "updates.csv",
                           tmp_path_factory.mktemp("tpch_faults") / "updates.csv", 8000)
    url = f"kafka://{kafka_bootstrap}/{unique_name('tpch-updates')}"
    produce(str(stream), url, partitions=2, query=str(sql))
    expected = tf.reference_epochs(sql, stream)
    assert len(expected) >= 5, "the stream should span several epochs with rows"
    return sql, url, expected


@pytest.mark.parametrize("runner", tf.RUNNERS)
def test_tpch_killed_once_and_restarted_writes_every_epoch_once(
        runner: str, tpch_topic: tuple[Path, str, tf.Epochs], kafka_bootstrap: str,
        tmp_path: Path) -> None:
    if runner != "local":
        pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    sql, updates_url, expected = tpch_topic
    deltas_url = f"kafka://{kafka_bootstrap}/{unique_name('tpch-deltas')}"
    ckpt = tmp_path / "ckpt"
    # The local runner checkpoints every second (every boundary writes the whole
    # database: 87k tuples), so the restart resumes from one.
    cmd = tf.run_command(runner, sql, updates_url, deltas_url, ckpt, checkpoint_interval=1)
    # The kill: once a random one of the first half of the epochs with rows is in the
    # topic, after a random delay (seeded, printed on failure) short enough that later
    # epochs with rows are still to come (a Spark batch commits 2-3 epochs at once).
    seed = random.randrange(10**6)
    rng = random.Random(seed)
    with_rows = sorted(expected)
    at_epoch = rng.choice(with_rows[: max(1, len(with_rows) // 2)])
    ready = tf.trigger("random", ckpt, deltas_url, rng, first_epoch=at_epoch, max_delay=0.3)
    kill = tf.kill_when(cmd, ready)
    assert kill["killed"], f"the run ended before its kill point (seed {seed})"
    partial = tf.topic_epochs(deltas_url)
    # (On a loaded machine the kill can land after the last epoch with rows is in the
    # topic; the restart below must then still write nothing twice, which it checks.
    # CI on 7b3c105 saw this on Flink, seed 821593: not a lost or doubled epoch.)
    assert all(partial[e] == expected[e] for e in partial), "committed epochs are whole"

    tf.run_to_end(cmd)
    got = tf.topic_epochs(deltas_url)
    assert tf.compare(expected, got) == ([], []), f"seed {seed}"
    assert got == expected


def test_flink_subtasks_without_the_final_slot_do_not_fence_its_kafka_sink(
        kafka_bootstrap: str) -> None:
    """A one-slot final stage (Q3's top-k window) runs in an operator of P subtasks. Each
    used to open the Kafka delta sink in ``open()``, so the subtask opening last fenced
    the other's transactional producer; when the slot was on the fenced one the job
    failed with KafkaFencedError at its first epoch (seen on a restart of this file's
    Flink test). Now a sink opens on its first write: only the slot's subtask opens one."""
    pytest.importorskip("pyflink")
    from unittest import mock

    from dataflow.runners.flink.job import EpochSinks, PartitionFunction

    url = f"kafka://{kafka_bootstrap}/{unique_name('tpch-deltas')}"
    plan = mock.Mock(map_names=lambda: [])
    subtasks = [PartitionFunction(plan, EpochSinks(url, None, ("a",))) for _ in range(2)]
    for subtask in subtasks:  # both subtasks open; the one hosting the slot first
        subtask.open(mock.Mock())
    try:
        assert subtasks[0].sinks is not None
        subtasks[0].sinks.write(1, 0, {("delta", 1): [(1, (7,))]})
        assert tf.topic_epochs(url) == {1: {(1, "7"): 1}}
    finally:
        for subtask in subtasks:
            subtask.close()
