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
