"""The Flink runner's state per entry, and its failure behavior.

* Without Flink: a partition's state kept in a :class:`~operators.writeback.WriteBackState`
  and written back per epoch as only the changed entries (what the job does with Flink
  MapState) restores to the same results as the uninterrupted run, and an epoch writes
  back entries in proportion to its changes, not to the state.
* With Flink (integration): the ``ivmflow`` script of a virtual environment run by its
  absolute path, with PATH lacking the environment, completes (the Python workers use
  the interpreter that runs ivmflow); a job whose worker fails ends the run with exit 1
  and the worker's error, within seconds of the failure, not in a restart loop.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from core.epochs import EpochCursor
from core.records import EPOCH_END, Record, Update
from dataflow.api import compile_query
from dataflow.distributed.partitions import (
    PartitionLayout,
    PartitionTask,
    merge_outputs,
    tag_records,
)
from operators.writeback import WriteBackState, encode_key

ROOT = Path(__file__).resolve().parent.parent
TWO_HOP = ("CREATE TABLE G(src INT, dst INT); SELECT G1.src, COUNT(*) AS n FROM G G1, G G2 "
           "WHERE G1.dst = G2.src GROUP BY G1.src")


def _window_stream(n: int, window: int, seed: int, epoch: int, nodes: int = 50) -> list[Record]:
    rng = random.Random(seed)
    live: list[tuple[int, int]] = []
    out: list[Record] = []
    for i in range(n):
        e = (int(rng.paretovariate(1.2)) % nodes, int(rng.paretovariate(1.2)) % nodes)
        live.append(e)
        out.append(Update("+", "G", e))
        if len(live) > window:
            out.append(Update("-", "G", live.pop(0)))
        if (i + 1) % epoch == 0:
            out.append(EPOCH_END)
    return out


class _Store:
    """A stand-in for Flink's MapStates: name -> encoded key -> pickled (key, value)."""

    def __init__(self) -> None:
        self.maps: dict[str, dict[str, bytes]] = {}
        self.writes = 0
        self.bytes = 0

    def write_back(self, state: WriteBackState) -> None:
        for name, puts, gone in state.changes():
            m = self.maps.setdefault(name, {})
            for k, v in puts.items():
                m[encode_key(k)] = blob = pickle.dumps((k, v))
                self.bytes += len(blob)
            for k in gone:
                m.pop(encode_key(k), None)
            self.writes += len(puts) + len(gone)

    def restore(self) -> WriteBackState:
        state = WriteBackState()
        for name, m in self.maps.items():
            state.load(name, (pickle.loads(b) for b in m.values()))
        return state


@pytest.mark.parametrize("sql", [
    TWO_HOP,
    "CREATE TABLE G(src INT, dst INT); SELECT DISTINCT G1.src, G2.dst FROM G G1, G G2 "
    "WHERE G1.dst = G2.src",
    "CREATE TABLE G(src INT, dst INT); SELECT COUNT(*) FROM G a, G b, G c "
    "WHERE a.dst = b.src AND b.dst = c.src AND c.dst = a.src",
], ids=["groupby", "distinct", "triangle"])
def test_write_back_per_epoch_restores_to_the_same_results(sql: str) -> None:
    q = compile_query(sql)
    layout = PartitionLayout(q, 1)
    numbered = list(EpochCursor().number(_window_stream(600, 150, 3, 40), final=True))
    tagged = tag_records(layout, numbered)
    reference = merge_outputs(PartitionTask(q, layout, None).process(tagged))

    store = _Store()
    task = PartitionTask(q, layout, state=store.restore())
    out = []
    for i, row in enumerate(tagged):
        out += task.process([row])
        if row.kind == "c":
            assert isinstance(task.state, WriteBackState)
            store.write_back(task.state)
            if i % 3 == 0:  # a restore at this epoch boundary: rebuild from the store
                task = PartitionTask(q, layout, state=store.restore())
    assert merge_outputs(out) == reference


def test_an_epoch_writes_back_in_proportion_to_its_changes() -> None:
    q = compile_query(TWO_HOP)
    layout = PartitionLayout(q, 1)
    store = _Store()
    task = PartitionTask(q, layout, state=WriteBackState())
    # Uniform edges over nodes 0..2999 (a state of thousands of entries); the small
    # epoch below touches nodes none of them reaches.
    rng = random.Random(1)
    edges = [Update("+", "G", (rng.randrange(3000), rng.randrange(3000))) for _ in range(5000)]
    big = list(EpochCursor().number([*edges, EPOCH_END], final=True))
    task.process(tag_records(layout, big))
    assert isinstance(task.state, WriteBackState)
    store.write_back(task.state)
    entries = sum(len(m) for m in store.maps.values())
    stored_bytes = sum(len(b) for m in store.maps.values() for b in m.values())
    before, bytes_before = store.writes, store.bytes
    # Two new edges between nodes of degree 0.
    small = [Update("+", "G", (4001, 4002)), Update("+", "G", (4002, 4003)), EPOCH_END]
    cursor = EpochCursor(seq=len(big), epoch=2)
    task.process(tag_records(layout, cursor.number(small)))
    store.write_back(task.state)
    written = store.writes - before
    written_bytes = store.bytes - bytes_before
    # The state holds thousands of entries and the small epoch writes a few dozen at
    # most: the write-back follows the changes, not the state. In bytes too: no entry
    # holds a whole group (the root's group holds every top tuple; stored whole, it
    # was rewritten at every epoch that changed it).
    assert entries > 800
    assert 0 < written < 30, (written, entries)
    assert entries > 25 * written, (written, entries)
    assert written_bytes < 40 * written, (written_bytes, written)
    assert stored_bytes > 25 * written_bytes, (written_bytes, stored_bytes)


def _venv_script() -> Path:
    script = Path(sys.executable).with_name("ivmflow")
    if not script.exists():
        pytest.skip("no ivmflow script next to this interpreter")
    return script


@pytest.mark.integration
def test_venv_script_run_by_path_without_the_venv_on_path(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    q = ROOT / "examples" / "paths.sql"
    u = ROOT / "examples" / "paths_updates.csv"
    local = tmp_path / "local.csv"
    subprocess.run([sys.executable, "-m", "dataflow", "run", str(q), "--updates", str(u),
                    "--deltas", str(local), "-q"], cwd=ROOT, check=True, timeout=120)
    out = tmp_path / "flink.csv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([str(_venv_script()), "run", str(q), "--updates", str(u),
                           "--runner", "flink", "--parallelism", "2", "--deltas", str(out),
                           "-q"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.read_text() == local.read_text()


@pytest.mark.integration
def test_a_failing_job_fails_loud_with_the_workers_error(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    q = ROOT / "examples" / "paths.sql"
    u = tmp_path / "bad.csv"
    u.write_text("+,follows,1,2\n+,follows,2,3\n*\n-,follows,5,6\n+,follows,3,1\n")
    done = subprocess.run([sys.executable, "-m", "dataflow", "run", str(q), "--updates",
                           str(u), "--runner", "flink", "--deltas", str(tmp_path / "o.csv")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ivmflow: error: the flink job failed:"), last
    assert "InputError" in last and "a delete of at most 0 copies" in last, last
    assert "Traceback" not in done.stderr
    # The whole trace is in a file named on that line (or on the terminal with --verbose).
    log = Path(last.split("; full trace in ", 1)[1].split(" ", 1)[0])
    try:
        trace = log.read_text()
    finally:
        log.unlink(missing_ok=True)
    assert "InputError" in trace
    # A bounded restart, not a retry loop: Flink gave up after RESTART_ATTEMPTS restarts.
    from dataflow.runners.flink.job import RESTART_ATTEMPTS

    assert ("Recovery is suppressed by FixedDelayRestartBackoffTimeStrategy("
            f"maxNumberRestartAttempts={RESTART_ATTEMPTS},") in trace, trace[-3000:]


@pytest.mark.integration
def test_flink_stdout_is_the_local_runners_bytes(tmp_path: Path) -> None:
    """Deltas to stdout: the header line, then the rows, as the local runner prints."""
    pytest.importorskip("pyflink")
    q = ROOT / "examples" / "paths.sql"
    u = ROOT / "examples" / "paths_updates.csv"
    runs = {}
    for runner in ("local", "flink"):
        done = subprocess.run([sys.executable, "-m", "dataflow", "run", str(q), "--updates",
                               str(u), "--runner", runner, "-q"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=240,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stderr[-3000:]
        runs[runner] = done.stdout
    assert runs["local"].startswith("epoch,mult,a,b,c\n")
    assert runs["flink"] == runs["local"]
    # An epoch closed without rows: the header alone; no epoch closed: nothing.
    for text, printed in (("+,follows,1,2\n", "epoch,mult,a,b,c\n"), ("# none\n", "")):
        (tmp_path / "u.csv").write_text(text)
        for runner in ("local", "flink"):
            done = subprocess.run([sys.executable, "-m", "dataflow", "run", str(q),
                                   "--updates", "u.csv", "--runner", runner, "-q"],
                                  cwd=tmp_path, capture_output=True, text=True, timeout=240,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
            assert done.returncode == 0, done.stderr[-3000:]
            assert done.stdout == printed, (runner, text)



@pytest.mark.integration
def test_the_phase_log_has_a_line_per_epoch_with_its_rows(tmp_path: Path) -> None:
    """IVMFLOW_FLINK_PHASES (what bench/runner_state_bench.py reads): one line per
    closed epoch, its phases' seconds, the entries written back and the rows out, which
    add up to the delta file's rows."""
    pytest.importorskip("pyflink")
    from dataflow.runners.flink.reader import PhaseLog

    q = ROOT / "examples" / "paths.sql"
    u = tmp_path / "u.csv"
    u.write_text("".join(f"+,follows,{i % 7},{(i * 3) % 7}\n" for i in range(1, 60)
                         if i % 7 != (i * 3) % 7))
    out = tmp_path / "o.csv"
    prefix = tmp_path / "phases"
    done = subprocess.run([sys.executable, "-m", "dataflow", "run", str(q), "--updates",
                           str(u), "--runner", "flink", "--epoch", "10", "--deltas",
                           str(out), "-q"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT),
                                            "IVMFLOW_FLINK_PHASES": str(prefix)})
    assert done.returncode == 0, done.stderr[-3000:]
    logs = list(tmp_path.glob("phases.*.tsv"))
    assert len(logs) == 1, logs
    lines = [line.split("\t") for line in logs[0].read_text().splitlines()]
    assert all(len(f) == len(PhaseLog.FIELDS) for f in lines)
    assert [int(f[0]) for f in lines] == list(range(1, len(lines) + 1)) and len(lines) >= 4
    assert all(float(x) >= 0 for f in lines for x in f[1:4])
    assert sum(int(f[4]) for f in lines) > 0
    delta_rows = len(out.read_text().splitlines()) - 1  # the header
    assert sum(int(f[6]) for f in lines) == delta_rows


def _local_deltas(q: Path, updates: Path, tmp: Path) -> str:
    out = tmp / "local.csv"
    subprocess.run([sys.executable, "-m", "dataflow", "run", str(q), "--updates", str(updates),
                    "--deltas", str(out), "-q"], cwd=ROOT, check=True, timeout=120)
    return out.read_text()


def _stream_lines(n: int, seed: int) -> list[str]:
    from core.records import format_update

    return [format_update(r) for r in _window_stream(n, n // 3, seed, 25, nodes=40)]


@pytest.mark.integration
def test_a_growing_directory_is_followed_until_sigterm(tmp_path: Path) -> None:
    """The streaming file source: files read as they appear (a half-written last line
    waits), no whole-input spool; SIGTERM stops the run after whole epochs (exit 0), and
    the deltas equal the local runner's over the concatenated files."""
    pytest.importorskip("pyflink")
    import signal

    q = tmp_path / "q.sql"
    q.write_text(TWO_HOP + ";\n")
    lines = _stream_lines(300, 5)
    first, second = lines[: len(lines) // 2], lines[len(lines) // 2:]
    d = tmp_path / "in"
    d.mkdir()
    (d / "001.csv").write_text("\n".join(first) + "\n")
    whole = tmp_path / "all.csv"
    whole.write_text("\n".join(lines) + "\n")
    reference = _local_deltas(q, whole, tmp_path)
    out = tmp_path / "flink.csv"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dataflow", "run", str(q), "--updates", str(d), "--runner",
         "flink", "--parallelism", "2", "--deltas", str(out), "-q"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        commit = Path(f"{out}.commit")
        deadline = time.time() + 180
        while not commit.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        # The second file appears in two writes: a partial last line must wait.
        part = "\n".join(second)
        (d / "002.csv").write_text(part[: len(part) - 3])
        time.sleep(2)
        with open(d / "002.csv", "a") as f:
            f.write(part[len(part) - 3:] + "\n*\n")
        want = reference.count("\n")
        while time.time() < deadline and out.read_text().count("\n") < want:
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert out.read_text() == reference


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def flink_cluster(tmp_path: Path) -> Any:
    """A standalone Flink cluster from the installed apache-flink's own scripts: a
    JobManager and a TaskManager as separate processes on 127.0.0.1; yields its REST
    address (host:port), the ``flink`` client script and the environment to run it in."""
    pyflink = pytest.importorskip("pyflink")
    import json as _json
    import shutil
    import urllib.request

    import yaml

    home = Path(pyflink.__file__).parent
    conf_dir = tmp_path / "flink-conf"
    shutil.copytree(home / "conf", conf_dir)
    conf = yaml.safe_load((conf_dir / "config.yaml").read_text())
    rest, rpc = _free_port(), _free_port()
    conf["jobmanager"].update({"bind-host": "127.0.0.1", "rpc": {"address": "127.0.0.1",
                                                                   "port": rpc},
                               "memory": {"process": {"size": "1024m"}}})
    conf["taskmanager"] = {"bind-host": "127.0.0.1", "host": "127.0.0.1",
                           "numberOfTaskSlots": 4, "memory": {"process": {"size": "1728m"}}}
    conf["rest"] = {"address": "127.0.0.1", "bind-address": "127.0.0.1", "port": rest}
    conf["python"] = {"executable": sys.executable, "client": {"executable": sys.executable}}
    (conf_dir / "config.yaml").write_text(yaml.safe_dump(conf))
    env = {**os.environ, "FLINK_CONF_DIR": str(conf_dir), "FLINK_LOG_DIR": str(tmp_path / "logs"),
           "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs = [subprocess.Popen([str(home / "bin" / f"{role}.sh"), "start-foreground"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
             for role in ("jobmanager", "taskmanager")]
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{rest}/overview", timeout=2) as r:
                    if _json.load(r).get("taskmanagers", 0) >= 1:
                        break
            except OSError:
                pass
            assert time.time() < deadline, "the standalone cluster did not come up"
            assert all(p.poll() is None for p in procs), "a cluster process died"
            time.sleep(0.5)
        yield f"127.0.0.1:{rest}", home / "bin" / "flink", env
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 9)
            p.wait()


@pytest.mark.integration
def test_a_job_runs_on_a_standalone_cluster(flink_cluster: Any, tmp_path: Path) -> None:
    """``flink run -m host:port -py dataflow/cli.py run ... --runner flink`` (Flink's
    PythonDriver, as the FlinkDeployment runs it) submits the job to the separate
    JobManager/TaskManager; the deltas equal the local runner's."""
    address, flink, env = flink_cluster
    q = tmp_path / "q.sql"
    q.write_text(TWO_HOP + ";\n")
    u = tmp_path / "u.csv"
    u.write_text("\n".join(_stream_lines(400, 8)) + "\n")
    reference = _local_deltas(q, u, tmp_path)
    out = tmp_path / "flink.csv"
    done = subprocess.run(
        [str(flink), "run", "-m", address, "-pyexec", sys.executable,
         "-py", str(ROOT / "dataflow" / "cli.py"), "run", str(q), "--updates", str(u),
         "--runner", "flink", "--parallelism", "2", "--deltas", str(out), "--checkpoint",
         str(tmp_path / "ckpt"), "-q"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert out.read_text() == reference
