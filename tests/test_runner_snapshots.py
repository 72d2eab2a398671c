"""Snapshots on the Spark and Flink runners: with ``--snapshots``, every ``*`` marker
asks for the full result after its epoch. With one partition (Flink then has no epoch
merger: the partition writes both files itself) and with two, the snapshot file equals
the local runner's snapshot by snapshot, and the delta file its delta file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_runners import (
    QUERIES,
    ROOT,
    SCHEMA,
    Parts,
    _ivmflow,
    g_stream,
    read_parts,
    write_stream,
)

pytestmark = pytest.mark.integration

QUERY = SCHEMA + QUERIES["endpoints_sum"] + ";\n"

def run_cli(tmp: Path, runner: str, parallelism: int, sql: Path, updates: Path
            ) -> tuple[Parts, Parts]:
    deltas, snaps = tmp / f"{runner}-d.csv", tmp / f"{runner}-s.csv"
    args = [str(sql), "--updates", str(updates), "--deltas", str(deltas),
            "--snapshots", str(snaps), "--runner", runner]
    if runner != "local":
        args += ["--parallelism", str(parallelism), "--batch-lines", "9",
                 "--checkpoint", str(tmp / f"{runner}-ckpt")]
    subprocess.run(_ivmflow(*args), cwd=ROOT, check=True, timeout=300)
    return read_parts(deltas), read_parts(snaps)


@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("runner", ["spark", "flink"])
def test_snapshots_and_deltas_equal_the_local_runners(runner: str, parallelism: int,
                                                      tmp_path: Path) -> None:
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    sql = tmp_path / "q.sql"
    sql.write_text(QUERY)
    updates = tmp_path / "u.csv"
    write_stream(updates, g_stream(31, n=90))
    deltas, snaps = run_cli(tmp_path, "local", 1, sql, updates)
    assert len(snaps) >= 3 and any(snaps.values()), "the stream should ask for snapshots"
    got_deltas, got_snaps = run_cli(tmp_path, runner, parallelism, sql, updates)
    assert got_snaps == snaps
    assert got_deltas == deltas


@pytest.mark.parametrize("snapshots", [True, False])
def test_a_run_without_a_snapshot_sink_asks_its_partitions_for_none(snapshots: bool) -> None:
    """A snapshot costs the whole result (an ungrouped aggregate over a join enumerates
    every joined row; a staged query's partial stages ship all their payloads): the
    runners ship a plan whose closes ask for snapshots only when the run writes them."""
    from dataclasses import replace

    from core.epochs import CLOSE, EpochCursor
    from core.records import EPOCH_END, Update
    from dataflow.api import compile_query
    from dataflow.distributed.partitions import PartitionTask, WorkerPlan
    from dataflow.distributed.stages import plan_tags

    stream = [Update("+", "G", (1, 2)), Update("+", "G", (2, 3)), Update("+", "G", (3, 4)),
              EPOCH_END,
              Update("-", "G", (1, 2)), EPOCH_END]
    q = compile_query(SCHEMA + QUERIES["endpoints_sum"])
    plan = replace(WorkerPlan.of(q, 1), snapshots=snapshots)
    rows = plan_tags(plan, list(EpochCursor().number(stream)))
    task = PartitionTask(*plan.compiled())
    kinds = {kind for kind, _n in task.process_bundles(rows)}
    assert kinds == ({"delta", "snapshot"} if snapshots else {"delta"})
    # A query run as stages (a top-k): no close reaches a slot asking for one either.
    staged = compile_query(SCHEMA + "SELECT src, dst FROM G ORDER BY src LIMIT 1")
    staged_plan = replace(WorkerPlan.of(staged, 2), snapshots=snapshots)
    assert staged_plan.staged
    tagged = plan_tags(staged_plan, list(EpochCursor().number(stream)))
    asked = {r[-1] for r in tagged if r[3] == CLOSE}
    assert (asked - {0} != set()) is snapshots
