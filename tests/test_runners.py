"""Runner equivalence: one test body, parametrized over runners, on randomized update
streams with deletes: per-epoch deltas (and snapshots) identical to the local runner's.
And the Spark restart test: kill the job mid-stream, restart from its checkpoint, the
delta file equals an uninterrupted run's."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from strategies import random_stream

from connectors.files import CollectingSink, read_updates
from core.records import EPOCH_END, Record, Update, format_update
from dataflow.api import compile_query

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "CREATE TABLE G(src INT, dst INT);\n"
TRIANGLE = "FROM G G1, G G2, G G3 WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G1.src"
QUERIES = {
    "hop3_filter": "SELECT G1.src, G2.src, G3.src, G3.dst FROM G G1, G G2, G G3 "
    "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst > 1",
    "hop4_distinct": "SELECT DISTINCT G2.src, G3.src, G3.dst FROM G G1, G G2, G G3, G G4 "
    "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G4.src",
    "star_count": "SELECT G1.src, COUNT(*) FROM G G1, G G2, G G3 "
    "WHERE G1.src = G2.src AND G1.src = G3.src GROUP BY G1.src",
    "endpoints_sum": "SELECT G1.src, G3.dst, SUM(G2.dst) FROM G G1, G G2, G G3 "
    "WHERE G1.dst = G2.src AND G2.dst = G3.src GROUP BY G1.src, G3.dst",
    # Triangles (IVM-epsilon): the same heavy/light operators on every runner.
    "triangle_count": f"SELECT COUNT(*) {TRIANGLE}",
    "triangle_listing": f"SELECT G1.src, G2.src, G3.src {TRIANGLE}",
    "triangle_pairs": f"SELECT DISTINCT G2.dst, G1.src {TRIANGLE}",
    # A hierarchical query that is not q-hierarchical: view trees with the knob eps.
    "view_trees_hop2": "SELECT G1.src, G2.dst FROM G G1, G G2 WHERE G1.dst = G2.src",
}
EPS = {"view_trees_hop2": 0.25}
"""Queries run with ``--eps`` (the hierarchical view trees); the reference is CROWN."""


def g_stream(seed: int, n: int = 60) -> list[Record]:
    """``n`` random updates of G over 0..4 (multiplicities 1, 2; deletes of present
    copies), epochs of random length, empty ones too."""
    return random_stream(random.Random(seed), ["G"], n, 5, 0.08, hot=0.0, deletes=0.35,
                         mults=(1, 2))


def write_stream(path: Path, records: list[Record]) -> None:
    lines = ["*" if not isinstance(r, Update) else format_update(r) for r in records]
    path.write_text("\n".join(lines) + "\n")


@dataclass
class Outputs:
    deltas: Any
    snapshots: Any = None
    resume_epoch: int = 0
    resume_snapshot: int = 0


def _compile(sql: str, eps: float | None) -> Any:
    return compile_query(sql) if eps is None else compile_query(sql, eps=eps, view_trees=True)


def run_local(sql: str, path: Path, epoch: int | None, parallelism: int,
              eps: float | None = None) -> list[Any]:
    q = _compile(sql, eps)
    return [
        (d.epoch, d.rows)
        for d in q.run(read_updates(path, q.schema), epoch_size=epoch, parallelism=parallelism)
        if d.rows
    ]


def run_spark(sql: str, path: Path, epoch: int | None, parallelism: int, tmp: Path,
              eps: float | None = None) -> list[Any]:
    pytest.importorskip("pyspark")
    from dataflow.runners.spark.job import SparkJob

    q = _compile(sql, eps)
    sink = CollectingSink()
    job = SparkJob(q, str(path), epoch_size=epoch, parallelism=parallelism,
                   checkpoint=str(tmp / "ckpt"), batch_lines=7)
    job.run(Outputs(sink, sink))
    return [(d.epoch, d.rows) for d in sink.deltas if d.rows]


def run_flink(sql: str, path: Path, epoch: int | None, parallelism: int,
              eps: float | None = None) -> list[Any]:
    """The Flink runner through the CLI, in its own process: PyFlink and PySpark each
    start a py4j gateway, and sharing one test process between them is flaky."""
    pytest.importorskip("pyflink")
    sql_path = path.parent / "flink-q.sql"
    sql_path.write_text(sql + ";\n")
    out = path.parent / "flink-deltas.csv"
    args = [str(sql_path), "--updates", str(path), "--runner", "flink",
            "--parallelism", str(parallelism), "--deltas", str(out),
            "--checkpoint", str(path.parent / "flink-ckpt")]
    if epoch:
        args += ["--epoch", str(epoch)]
    if eps is not None:
        args += ["--eps", str(eps)]
    subprocess.run(_ivmflow(*args), cwd=ROOT, check=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return read_delta_csv(out)


Parts = dict[int, Counter[tuple[int, tuple[Any, ...]]]]


def read_parts(path: Path) -> Parts:
    """A delta (or snapshot) CSV file as a multiset of ``(mult, values)`` per epoch (or
    snapshot number); values are ints, NULL is None."""
    parts: Parts = {}
    for line in path.read_text().splitlines()[1:]:
        f = line.split(",")
        row = tuple(int(v) if v else None for v in f[2:])
        parts.setdefault(int(f[0]), Counter())[(int(f[1]), row)] += 1
    return parts


def read_delta_csv(path: Path) -> list[Any]:
    """(epoch, rows) of a delta file, rows as (mult, tuple of ints) in file order."""
    epochs: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
    for line in path.read_text().splitlines()[1:]:
        fields = line.split(",")
        epochs.setdefault(int(fields[0]), []).append(
            (int(fields[1]), tuple(int(v) for v in fields[2:]))
        )
    return [(e, tuple(rows)) for e, rows in epochs.items()]


RUNNERS = [
    "local",
    pytest.param("spark", marks=pytest.mark.integration),
    pytest.param("flink", marks=pytest.mark.integration),
]


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_runner_matches_local_reference(runner: str, name: str, tmp_path: Path) -> None:
    seed = sorted(QUERIES).index(name)
    records = g_stream(seed)
    path = tmp_path / "updates.csv"
    write_stream(path, records)
    epoch = [None, 5, 3, 11][seed % 4]
    sql = SCHEMA + QUERIES[name]
    eps = EPS.get(name)
    reference = run_local(sql, path, epoch, 1)
    assert reference, "the stream should change the result"
    if runner == "local":
        got = run_local(sql, path, epoch, 4, eps)
        if eps is not None:
            assert run_local(sql, path, epoch, 1, eps) == reference
    elif runner == "spark":
        got = run_spark(sql, path, epoch, 2, tmp_path, eps)
    else:  # P = 1, 2, 4 over the query families
        got = run_flink(sql, path, epoch, [1, 2, 4, 2][seed % 4], eps)
    assert got == reference


def _ivmflow(*args: str) -> list[str]:
    return [sys.executable, "-m", "dataflow.cli", "run", *args, "--quiet"]


def _run_and_kill(cmd: list[str], fault: str, await_file: str | None = None) -> dict[str, str]:
    """Run ``cmd`` in its own process group with ``IVMFLOW_FAULT=fault`` (a fault point
    of :mod:`core.faults`, SIGKILL by default: when the point is reached the run kills
    its whole process group, JVM and workers too, as a container is killed); fail
    unless it died that way. ``await_file``: a glob the fault waits for
    (``IVMFLOW_FAULT_AWAIT``). Returns the environment to restart it with (no fault)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("IVMFLOW_FAULT", "IVMFLOW_FAULT_TARGET", "IVMFLOW_FAULT_AWAIT"):
        env.pop(name, None)
    armed = {**env, "IVMFLOW_FAULT": fault}
    if await_file is not None:
        armed["IVMFLOW_FAULT_AWAIT"] = await_file
    proc = subprocess.Popen(cmd, cwd=ROOT, env=armed,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # (whatever the kill left of the group)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, (
        f"the run should have been killed at {fault}, it ended with {proc.returncode}: "
        f"{err[-3000:]}")
    return env


def _resuming_under_another_parallelism_fails(cmd: list[str], env: dict[str, str],
                                              deltas: Path) -> None:
    """Resuming a killed run's checkpoint under another plan (another parallelism, so
    other partitions) fails before the job starts, with the cause named, and loses no
    committed epoch (a resumed sink first cuts the file back to its last commit)."""
    partial = deltas.read_text() if deltas.exists() else ""
    other = list(cmd)
    other[other.index("--parallelism") + 1] = "3"
    wrong = subprocess.run(other, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert wrong.returncode != 0, wrong.stderr[-3000:]
    assert "checkpoint's state was written under" in wrong.stderr, wrong.stderr[-3000:]
    assert partial.startswith(deltas.read_text() if deltas.exists() else "")


@pytest.mark.integration
def test_spark_restart_from_checkpoint_gives_uninterrupted_output(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    sql_path = tmp_path / "q.sql"
    sql_path.write_text(SCHEMA + QUERIES["hop3_filter"] + ";\n")
    updates = tmp_path / "u.csv"
    write_stream(updates, g_stream(7, n=120))
    local = tmp_path / "local.csv"
    subprocess.run(_ivmflow(str(sql_path), "--updates", str(updates), "--epoch", "4",
                            "--deltas", str(local)), cwd=ROOT, check=True)

    deltas = tmp_path / "spark.csv"
    cmd = _ivmflow(str(sql_path), "--updates", str(updates), "--epoch", "4", "--runner",
                   "spark", "--parallelism", "2", "--deltas", str(deltas), "--batch-lines", "6")
    # Killed while the driver writes the 10th epoch with rows (its rows in the file,
    # not its commit record), several micro-batches in: there is state to resume.
    env = _run_and_kill(cmd, "sink.write@10:KILL")
    partial = deltas.read_text() if deltas.exists() else ""
    assert partial != local.read_text(), "the kill should have interrupted the run"

    _resuming_under_another_parallelism_fails(cmd, env, deltas)
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, timeout=300)
    assert deltas.read_text() == local.read_text()


@pytest.mark.integration
def test_spark_reads_a_growing_directory(tmp_path: Path) -> None:
    """A directory source is unbounded: files added while the job runs are read in name
    order, and epochs (closed by markers) come out as on the local runner."""
    pytest.importorskip("pyspark")
    import threading

    from dataflow.runners.spark.job import SparkJob

    sql = SCHEMA + QUERIES["hop3_filter"]
    records = g_stream(11, n=80)
    cut = len(records) // 2
    first, second = records[:cut] + [EPOCH_END], records[cut:] + [EPOCH_END]
    whole = tmp_path / "whole.csv"
    write_stream(whole, first + second)
    reference = run_local(sql, whole, None, 1)

    src = tmp_path / "in"
    src.mkdir()
    write_stream(src / "001.csv", first)
    q = compile_query(sql)
    sink = CollectingSink()
    job = SparkJob(q, str(src), epoch_size=None, parallelism=2,
                   checkpoint=str(tmp_path / "ckpt"), batch_lines=9, bounded=False)
    runner = threading.Thread(target=lambda: job.run(Outputs(sink, sink)), daemon=True)
    runner.start()
    markers_first = sum(1 for r in first if not isinstance(r, Update))
    markers_all = markers_first + sum(1 for r in second if not isinstance(r, Update))

    def wait_for(epochs: int) -> None:
        deadline = time.time() + 180
        while time.time() < deadline:
            done = max((d.epoch for d in sink.deltas), default=0)
            if job.batches and done >= max((e for e, _ in reference if e <= epochs), default=0):
                return
            time.sleep(0.3)
        raise AssertionError(f"spark did not reach epoch {epochs}")

    wait_for(markers_first)
    write_stream(src / "002.csv", second)
    wait_for(markers_all)
    job.stop()
    runner.join(timeout=60)
    assert [(d.epoch, d.rows) for d in sink.deltas if d.rows] == reference


@pytest.mark.integration
def test_flink_restart_from_checkpoint_gives_uninterrupted_output(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    from dataflow.runners.flink.job import latest_checkpoint

    sql_path = tmp_path / "q.sql"
    sql_path.write_text(SCHEMA + QUERIES["star_count"] + ";\n")
    updates = tmp_path / "u.csv"
    # Long enough for checkpoints before the kill: the per-entry job gets through 4000
    # updates before its first one, and the kill comes some 17,000 updates in.
    write_stream(updates, g_stream(9, n=40_000))
    local = tmp_path / "local.csv"
    subprocess.run(_ivmflow(str(sql_path), "--updates", str(updates), "--epoch", "5",
                            "--deltas", str(local)), cwd=ROOT, check=True)

    deltas = tmp_path / "flink.csv"
    ckpt = tmp_path / "ckpt"
    cmd = _ivmflow(str(sql_path), "--updates", str(updates), "--epoch", "5", "--runner",
                   "flink", "--parallelism", "2", "--deltas", str(deltas),
                   "--checkpoint", str(ckpt))
    # Killed right after the merger committed the 4000th epoch with rows (of 9285) to
    # the delta file: the newest checkpoint is behind it, so the restart replays epochs
    # the file already holds.
    env = _run_and_kill(cmd, "sink.commit@4000:KILL")
    assert deltas.read_text() != local.read_text(), "the kill should have interrupted the run"
    assert latest_checkpoint(str(ckpt)) is not None

    _resuming_under_another_parallelism_fails(cmd, env, deltas)
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, timeout=300)
    assert deltas.read_text() == local.read_text()
