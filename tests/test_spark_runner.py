"""The Spark runner's state per entry (transformWithStateInPandas MapStates), on real Spark.

* Per-epoch deltas equal the local runner's at parallelism 1, 2 and 4, on a stream with
  deletes, in batches small enough that partitions move between Python workers (so the
  worker caches are reused, caught up from the journal, or rebuilt).
* Kill -9 in the middle of an epoch's output of a run over a FIFO window of 40k edges
  (a fault point), restart with the same command and checkpoint: the delta file equals
  an uninterrupted run's.
* A Spark standalone master and two workers, started from the installed pyspark as
  separate processes on 127.0.0.1, run the job (``IVMFLOW_SPARK_MASTER``): same deltas.
* The cache coherence rules of :class:`~dataflow.runners.spark.state.PartitionStore`
  (current, behind, ahead after a rolled-back batch) over an in-memory stand-in for the
  state handle.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from connectors.generators import fifo_window_stream, skewed_graph, write_update_csv
from core.records import EPOCH_END, Record, Update, format_update
from operators.writeback import decode_entry

ROOT = Path(__file__).resolve().parent.parent
TWO_HOP = ("CREATE TABLE G(src INT, dst INT);\nSELECT G1.src, COUNT(*) AS n FROM G G1, G G2 "
           "WHERE G1.dst = G2.src GROUP BY G1.src;\n")
THREE_HOP = ("CREATE TABLE G(src INT, dst INT);\nSELECT G1.src, G3.dst FROM G G1, G G2, G G3 "
             "WHERE G1.dst = G2.src AND G2.dst = G3.src;\n")


def _stream(seed: int, n: int, nodes: int = 12) -> list[Record]:
    """Inserts and deletes of live edges (some duplicates), with epoch markers."""
    rng = random.Random(seed)
    live: list[tuple[int, int]] = []
    out: list[Record] = []
    for _ in range(n):
        if live and rng.random() < 0.35:
            out.append(Update("-", "G", live.pop(rng.randrange(len(live)))))
        else:
            e = (rng.randrange(nodes), rng.randrange(nodes))
            live.append(e)
            out.append(Update("+", "G", e))
        if rng.random() < 0.15:
            out.append(EPOCH_END)
    return out


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "dataflow", "run", *args, "--quiet"]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _write(path: Path, records: list[Record]) -> None:
    path.write_text("".join(
        ("*\n" if not isinstance(r, Update) else format_update(r) + "\n") for r in records))


def _local(sql: Path, updates: Path, out: Path, *extra: str) -> str:
    subprocess.run(_cli(str(sql), "--updates", str(updates), "--deltas", str(out), *extra),
                   cwd=ROOT, env=_env(), check=True, timeout=300)
    return out.read_text()


@pytest.mark.integration
@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_spark_deltas_equal_local_at_every_parallelism(tmp_path: Path, parallelism: int) -> None:
    pytest.importorskip("pyspark")
    sql = tmp_path / "q.sql"
    sql.write_text(THREE_HOP)
    updates = tmp_path / "u.csv"
    _write(updates, _stream(parallelism, 220))
    expected = _local(sql, updates, tmp_path / "local.csv")
    got = tmp_path / "spark.csv"
    # In this process (its JVM shared with the other Spark tests this process runs); a
    # Spark run in the command's own process: the test after the next, the Kafka and
    # change-stream tests, .ci/extras_check.sh.
    from dataflow.cli import main

    assert main(["run", str(sql), "--updates", str(updates), "--runner", "spark",
                 "--parallelism", str(parallelism), "--batch-lines", "25",
                 "--deltas", str(got), "--checkpoint", str(tmp_path / "ckpt"),
                 "--quiet"]) == 0
    assert expected.strip(), "the stream should produce deltas"
    assert got.read_text() == expected


@pytest.mark.integration
def test_spark_kill_mid_output_of_a_40k_window_run_then_restart(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    window = 40_000
    sql = tmp_path / "q.sql"
    sql.write_text(TWO_HOP)
    updates = tmp_path / "u.csv"
    edges = skewed_graph(window + 4_000, window // 2, seed=3, alpha=0.0)
    write_update_csv(updates, "G", fifo_window_stream(edges, window))
    expected = _local(sql, updates, tmp_path / "local.csv", "--epoch", "1000")

    deltas = tmp_path / "spark.csv"
    cmd = _cli(str(sql), "--updates", str(updates), "--epoch", "1000", "--runner", "spark",
               "--parallelism", "2", "--batch-lines", "4000", "--deltas", str(deltas),
               "--checkpoint", str(tmp_path / "ckpt"))
    # Killed (the whole process group, JVM too) while the driver writes epoch 18 of 48
    # (:mod:`core.faults`): its rows are in the file, not its commit record; the
    # micro-batch of epochs 17-20 is not committed in Spark's checkpoint either.
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(IVMFLOW_FAULT="sink.write@18:KILL"),
                          start_new_session=True, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=600)
    assert proc.returncode == -9, proc.stderr[-3000:]
    partial = deltas.read_text() if deltas.exists() else ""
    assert partial != expected, "the kill should have interrupted the run"

    subprocess.run(cmd, cwd=ROOT, env=_env(), check=True, timeout=900)
    assert deltas.read_text() == expected


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Any:
    """A standalone master and two one-core workers, as separate processes."""
    pyspark = pytest.importorskip("pyspark")
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not spark_class.exists() or shutil.which("java") is None:
        pytest.skip("this pyspark ships no spark-class, or no java")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    env = _env(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_WORKER_DIR=str(tmp_path / "work"), PYSPARK_PYTHON=sys.executable)
    stack = contextlib.ExitStack()
    logs = [stack.enter_context(open(tmp_path / f"{name}.log", "w"))  # noqa: SIM115
            for name in ("master", "worker1", "worker2")]
    procs = [subprocess.Popen(
        [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(_free_port())],
        env=env, stdout=logs[0], stderr=subprocess.STDOUT, start_new_session=True)]
    try:
        deadline = time.time() + 60
        while "I have been elected leader" not in (tmp_path / "master.log").read_text():
            assert time.time() < deadline, (tmp_path / "master.log").read_text()[-2000:]
            assert procs[0].poll() is None, (tmp_path / "master.log").read_text()[-2000:]
            time.sleep(0.3)
        for i in (1, 2):
            procs.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", url, "--host",
                 "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port",
                 str(_free_port())],
                env=env, stdout=logs[i], stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.time() + 60
        while (tmp_path / "master.log").read_text().count("Registering worker") < 2:
            assert time.time() < deadline, (tmp_path / "master.log").read_text()[-2000:]
            time.sleep(0.3)
        yield url
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
            p.wait()
        stack.close()


@pytest.mark.integration
def test_spark_job_on_a_standalone_cluster_equals_local(spark_cluster: str,
                                                        tmp_path: Path) -> None:
    sql = tmp_path / "q.sql"
    sql.write_text(THREE_HOP)
    updates = tmp_path / "u.csv"
    _write(updates, _stream(5, 150))
    expected = _local(sql, updates, tmp_path / "local.csv")
    got = tmp_path / "spark.csv"
    proc = subprocess.run(
        _cli(str(sql), "--updates", str(updates), "--runner", "spark", "--parallelism", "2",
             "--batch-lines", "40", "--deltas", str(got), "--checkpoint", str(tmp_path / "ck")),
        cwd=ROOT, env=_env(IVMFLOW_SPARK_MASTER=spark_cluster), capture_output=True,
        text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert expected.strip()
    assert got.read_text() == expected


# ---------------------------------------------------------------------------------------
# Cache coherence of PartitionStore, over an in-memory stand-in for the state handle.


class _Map:
    def __init__(self) -> None:
        self.d: dict[Any, tuple[Any, ...]] = {}

    def getValue(self, key: tuple[Any, ...]) -> Any:  # noqa: N802 - pyspark's names
        return self.d.get(key)

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:  # noqa: N802
        self.d[key] = value

    def removeKey(self, key: tuple[Any, ...]) -> None:  # noqa: N802
        self.d.pop(key, None)

    def values(self) -> Any:
        return iter(list(self.d.values()))

    def iterator(self) -> Any:
        return iter(list(self.d.items()))


class _Value:
    def __init__(self) -> None:
        self.v: Any = None

    def get(self) -> Any:
        return self.v

    def update(self, v: Any) -> None:
        self.v = v


class _Handle:
    """Spark's state handle reduced to dicts; ``snapshot``/``rollback`` model a batch
    whose commit Spark discards."""

    def __init__(self) -> None:
        self.maps: dict[str, _Map] = {}
        self.value = _Value()

    def getMapState(self, name: str, *_schemas: Any) -> _Map:  # noqa: N802
        return self.maps.setdefault(name, _Map())

    def getValueState(self, _name: str, _schema: Any) -> _Value:  # noqa: N802
        return self.value

    def snapshot(self) -> Any:
        return ({n: dict(m.d) for n, m in self.maps.items()}, self.value.v)

    def rollback(self, snap: Any) -> None:
        for n, m in self.maps.items():
            m.d = dict(snap[0][n])
        self.value.v = snap[1]


def test_partition_store_caches_are_current_caught_up_or_rebuilt() -> None:
    pytest.importorskip("pyspark")
    from dataflow.runners.spark import state as st

    handle = _Handle()
    store = st.PartitionStore(handle, ["m"])
    st._CACHES.clear()

    restored: list[bytes | None] = []

    def run_batch(puts: dict[Any, int]) -> st.CachedPartition:
        hit = store.cache(0, "q", lambda s: None, lambda _p, extra: restored.append(extra))
        for k, v in puts.items():
            hit.state.map("m")[k] = v
        store.commit(0, "q", hit, repr(sorted(puts)).encode())
        return hit

    def stored() -> dict[Any, Any]:
        return dict(decode_entry(bytes(k[0]).decode(), pickle.loads(bytes(v[0])))
                    for k, v in handle.maps["map:m"].d.items())

    run_batch({1: 1})
    other_worker = st._CACHES.pop(("q", 0))  # worker A's cache, at version 1
    run_batch({2: 2})  # worker B rebuilds from the store and runs version 2
    run_batch({1: 5})
    assert store.rebuilds == 2
    st._CACHES["q", 0] = other_worker  # the partition returns to worker A: two behind
    hit = run_batch({3: 3})
    assert store.catchups == 1 and store.rebuilds == 2
    assert restored[-1] == b"[1]"  # the extra bytes of the last commit, not of version 1
    assert dict(hit.state.map("m")) == {1: 5, 2: 2, 3: 3} == stored()

    snap = handle.snapshot()  # a batch runs, then Spark discards its commit
    run_batch({4: 4})
    handle.rollback(snap)
    hit = run_batch({5: 5})  # the worker's cache is ahead of the store: rebuilt
    assert store.rebuilds == 3
    assert dict(hit.state.map("m")) == {1: 5, 2: 2, 3: 3, 5: 5} == stored()

    st._CACHES.clear()
    for _ in range(st.JOURNAL + 2):  # the journal stays bounded
        run_batch({6: 6})
    assert len(handle.maps["journal"].d) <= st.JOURNAL


@pytest.mark.parametrize("sql", [
    TWO_HOP,
    "CREATE TABLE G(src INT, dst INT);\nSELECT COUNT(*) FROM G G1, G G2, G G3 WHERE "
    "G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G1.src;\n",
])
def test_partition_store_results_do_not_depend_on_which_worker_runs_a_batch(sql: str) -> None:
    """Batches of one partition go to two alternating 'workers' (their own caches), with
    epochs spanning batches: every cache is current, caught up or rebuilt in turn, and
    the output equals one uninterrupted engine's."""
    pytest.importorskip("pyspark")
    from core.epochs import EpochCursor
    from dataflow.api import compile_query
    from dataflow.distributed.partitions import (
        PartitionLayout,
        PartitionTask,
        merge_outputs,
        tag_records,
    )
    from dataflow.runners.spark import state as st

    q = compile_query(sql)
    layout = PartitionLayout(q, 1)
    rows = tag_records(layout, list(EpochCursor().number(_stream(9, 400, nodes=6))))
    reference = merge_outputs(PartitionTask(q, layout, state=st.WriteBackState()).process(rows))

    handle = _Handle()
    store = st.PartitionStore(handle, PartitionTask(q, layout, state=st.WriteBackState())
                              .state.names())
    workers: list[dict[Any, Any]] = [{}, {}]
    out = []
    rng = random.Random(1)
    for i in range(0, len(rows), 7):
        worker = workers[rng.randrange(2)]
        st._CACHES.clear()
        st._CACHES.update(worker)
        hit = store.cache(0, "q", lambda s: PartitionTask(q, layout, state=s),
                          lambda task, extra: setattr(
                              task.engine, "acc", pickle.loads(extra) if extra else {}))
        out += hit.payload.process(rows[i:i + 7])
        acc = hit.payload.engine.acc
        store.commit(0, "q", hit, pickle.dumps(acc) if acc else None)
        worker.clear()
        worker.update(st._CACHES)
    assert store.catchups > 0 and store.rebuilds > 1
    assert merge_outputs(out) == reference


# ---------------------------------------------------------------------------------------
# Failing loud, and the same bytes as the local runner


def _paths_run(cwd: Path, *extra: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dataflow", "run", str(ROOT / "examples" / "paths.sql"),
         "--updates", str(ROOT / "examples" / "paths_updates.csv"), *extra],
        cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_a_worker_that_cannot_import_fails_in_one_line_naming_the_cause(tmp_path: Path) -> None:
    """The issue's case, for real: Spark's transformWithState worker imports
    ``google.protobuf.descriptor``; a ``google`` package earlier on the workers'
    PYTHONPATH, with an empty ``protobuf`` in it, makes that import fail as a missing
    protobuf does. The run ends at that first failure (one run of the query, no retry)
    with one line naming the ImportError and the extra to install; the full trace is in
    the log file that line names."""
    pytest.importorskip("pyspark")
    shadow = tmp_path / "shadow" / "google" / "protobuf"
    shadow.mkdir(parents=True)
    (shadow.parent / "__init__.py").write_text("")
    (shadow / "__init__.py").write_text("")
    done = _paths_run(tmp_path, "--runner", "spark",
                      env=_env(PYTHONPATH=os.pathsep.join([str(shadow.parent.parent), str(ROOT)])))
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    line = lines[0]
    assert line.startswith("ivmflow: error: the spark job failed: ImportError: cannot import "
                           "name 'descriptor' from 'google.protobuf'"), line
    assert "(install ivmflow[spark]); full trace in " in line, line
    log = Path(line.split("full trace in ", 1)[1].split(" ", 1)[0])
    try:
        trace = log.read_text()
        assert "StateMessage_pb2" in trace and "Caused by" in trace  # the JVM's whole story
    finally:
        log.unlink(missing_ok=True)
    # Counted, not timed: the streaming query ended once, at its first failure.
    assert trace.count("terminated with error") == 1, trace[-3000:]


@pytest.mark.integration
def test_verbose_shows_the_trace_and_still_ends_in_the_one_line(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    shadow = tmp_path / "shadow" / "google" / "protobuf"
    shadow.mkdir(parents=True)
    (shadow.parent / "__init__.py").write_text("")
    (shadow / "__init__.py").write_text("")
    done = _paths_run(tmp_path, "--runner", "spark", "--verbose",
                      env=_env(PYTHONPATH=os.pathsep.join([str(shadow.parent.parent), str(ROOT)])))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ivmflow: error: the spark job failed: ImportError: "), last
    assert "full trace in" not in last
    assert "Traceback (most recent call last)" in done.stderr  # the worker's, shown


@pytest.mark.integration
def test_spark_stdout_is_the_local_runners_bytes(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    local = _paths_run(tmp_path, "-q")
    spark = _paths_run(tmp_path, "-q", "--runner", "spark")
    assert local.returncode == 0 and spark.returncode == 0, spark.stderr[-3000:]
    assert local.stdout.startswith("epoch,mult,a,b,c\n")
    assert spark.stdout == local.stdout
    assert spark.stderr == ""  # the JVM's console output went to its log, then away


@pytest.mark.integration
@pytest.mark.parametrize(("text", "printed"), [("+,follows,1,2\n", "epoch,mult,a,b,c\n"),
                                               ("# no records\n", "")])
def test_spark_stdout_without_rows_is_the_local_runners_bytes(tmp_path: Path, text: str,
                                                              printed: str) -> None:
    """An epoch closed without rows: the header alone; no epoch closed: nothing."""
    pytest.importorskip("pyspark")
    u = tmp_path / "u.csv"
    u.write_text(text)
    outs = []
    for runner in ("local", "spark"):
        done = subprocess.run(_cli(str(ROOT / "examples" / "paths.sql"), "--updates", str(u),
                                   "--runner", runner), cwd=tmp_path, env=_env(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        outs.append(done.stdout)
    assert outs == [printed, printed]


def test_no_java_fails_before_the_job_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    done = _paths_run(tmp_path, "--runner", "spark",
                      env=_env(JAVA_HOME=str(tmp_path / "nojdk")))
    assert done.returncode == 1
    assert done.stderr == (
        f"ivmflow: error: the spark job could not start: it needs Java 17 or 21; found no "
        f"Java (JAVA_HOME={tmp_path / 'nojdk'} holds no bin/java) (install e.g. "
        f"openjdk-17-jre-headless, or set JAVA_HOME)\n")
