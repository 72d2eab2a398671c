"""TPC-H under faults: a runner on Kafka killed with SIGKILL and restarted, against the
uninterrupted run (issue 33, item 3).

The TPC-H refresh stream (``ivmflow generate tpch``; the initial load cut into epochs of
``--every`` updates by ``*`` markers, so that a run spans many epochs) goes to a
2-partition Kafka topic. For each runner (local with ``--checkpoint``, Spark and Flink
at ``--parallelism 2``) a TPC-H query that runs as a DAG of stages (Q3: the join block
and the global top-k window) reads it with ``--stop-at-end`` and writes its deltas to a
Kafka topic. The run's process group is killed with SIGKILL at ``--kills`` points and
the same command started again each time:

- ``checkpoint``: right when the checkpoint directory changes (a local checkpoint file
  being written, a Flink ``chk-N`` or a Spark offset/commit/state file appearing);
- ``output``: right when the delta topic grows (an epoch's transaction being written,
  seen through its uncommitted records);
- ``random``: a random delay after the start.

The delta topic, read committed, is compared epoch by epoch with the local runner's
uninterrupted in-process run over the same stream as a file: an epoch missing rows is
*lost*, one with rows beyond it *duplicated*.

Run (starts a broker from the ``dev`` extra unless ``--bootstrap`` is given)::

    python -m bench.tpch_faults --sf 0.01 --kills 3 --runners local,spark,flink

prints a table (runner, kills, epochs, lost, duplicated, seconds) and writes
``bench/results/tpch_faults.json``. ``tests/test_tpch_faults.py`` runs one kill per
runner at SF 0.01 with the same functions.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, ROOT, command_line, result_record
from connectors.files import read_updates
from connectors.kafka import parse_kafka_url, read_deltas, read_last_epoch
from core.records import format_value
from dataflow.api import compile_query

Epochs = dict[int, Counter[tuple[Any, ...]]]
RUNNERS = ("local", "spark", "flink")
KILL_KINDS = ("checkpoint", "output", "random")
QUERY = "q03"
"""Q3 runs as two stages on Spark and Flink (its join block grouped by order, then the
global top-10 window) and is the cheapest such query at SF 0.01 (Q13 and Q18 take 3-10x
longer on the local runner alone)."""


def cut_epochs(updates: Path, out: Path, every: int) -> Path:
    """``updates`` with a ``*`` marker after every ``every`` updates of an epoch (the
    initial load is one epoch of the whole database otherwise)."""
    n = 0
    with open(updates, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as o:
        for line in f:
            o.write(line)
            n = 0 if line.startswith("*") else n + 1
            if n == every:
                o.write("*\n")
                n = 0
    return out


def _text(mult: int, row: Any) -> tuple[Any, ...]:
    # Both sides as the CSV text of their values: the topic holds DECIMAL and DATE as text.
    return (mult, *(format_value(v) for v in row))


def reference_epochs(sql: Path, updates: Path) -> Epochs:
    """Per-epoch deltas of the local runner's uninterrupted in-process run on the file."""
    q = compile_query(sql.read_text())
    return {d.epoch: Counter(_text(m, r) for m, r in d.rows)
            for d in q.run(read_updates(str(updates), q.schema)) if d.rows}


def topic_epochs(url: str) -> Epochs:
    """Per-epoch deltas of a delta topic, read committed."""
    out: Epochs = {}
    for epoch, mult, row in read_deltas(parse_kafka_url(url)):
        out.setdefault(epoch, Counter())[_text(mult, row.values())] += 1
    return out


def compare(expected: Epochs, got: Epochs) -> tuple[list[int], list[int]]:
    """Epochs missing rows (lost) and epochs holding rows beyond the expected ones
    (duplicated, or wrong)."""
    epochs = sorted(set(expected) | set(got))
    lost = [e for e in epochs if expected.get(e, Counter()) - got.get(e, Counter())]
    extra = [e for e in epochs if got.get(e, Counter()) - expected.get(e, Counter())]
    return lost, extra


FRAME_MAX = 1_000_000_000
"""kafka-python's largest response (default 100 MB): the broker (noida-db 0.2.3) answers
a fetch with every record from the offset on, whatever its max bytes, so at SF 0.1 a
fetch of both partitions from the start (~120 MB) was refused again and again."""


def run_command(runner: str, sql: Path, updates_url: str, deltas_url: str, ckpt: Path,
                batch_lines: int = 10_000, checkpoint_interval: float = 0) -> list[str]:
    """The ``ivmflow run`` command of one runner (P=2 on Spark and Flink; the local
    runner with a state checkpoint every ``checkpoint_interval`` seconds, at an epoch
    boundary)."""
    cmd = [sys.executable, "-m", "dataflow.cli", "run", str(sql), "--updates", updates_url,
           "--deltas", deltas_url, "--stop-at-end", "--checkpoint", str(ckpt), "-q",
           "--kafka-option", f"receive.message.max.bytes={FRAME_MAX}"]
    if runner == "local":
        return [*cmd, "--checkpoint-interval", str(checkpoint_interval)]
    return [*cmd, "--runner", runner, "--parallelism", "2", "--batch-lines", str(batch_lines)]


def run_to_end(cmd: list[str]) -> None:
    """Run ``cmd`` (a restart) to its end; raise with its stderr if it fails."""
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, timeout=3600)
    if done.returncode != 0:
        msg = f"the restarted run failed: {done.stderr.decode(errors='replace')[-3000:]}"
        raise RuntimeError(msg)


def start(cmd: list[str]) -> subprocess.Popen[bytes]:
    """``cmd`` in its own process group (so SIGKILL reaches the JVM and the workers)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def checkpoint_files(ckpt: Path) -> frozenset[tuple[str, int]]:
    """What the checkpoint directory holds: (path, mtime) of every file."""
    out = set()
    for dirpath, _dirs, files in os.walk(ckpt):
        for name in files:
            p = os.path.join(dirpath, name)
            try:
                out.add((p, os.stat(p).st_mtime_ns))
            except FileNotFoundError:  # replaced while we looked: a change all the same
                out.add((p, -1))
    return frozenset(out)


class TopicGrowth:
    """The delta topic's end offsets, uncommitted records included: they grow when an
    epoch's transaction starts writing, before it commits."""

    def __init__(self, url: str) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.endpoint = parse_kafka_url(url)
        self.consumer = KafkaConsumer(**self.endpoint.client_config("consumer"))
        self._tp = TopicPartition
        self._tps: list[Any] = []

    def ends(self) -> int:
        if not self._tps:
            parts = self.consumer.partitions_for_topic(self.endpoint.topic) or set()
            self._tps = [self._tp(self.endpoint.topic, p) for p in sorted(parts)]
            if not self._tps:
                return 0
        return sum(self.consumer.end_offsets(self._tps).values())

    def close(self) -> None:
        self.consumer.close()


def kill_when(cmd: list[str], ready: Callable[[], bool], timeout: float = 1800
              ) -> dict[str, Any]:
    """Start ``cmd``, SIGKILL its process group as soon as ``ready()`` holds. Returns
    ``killed`` (False: the run ended first, with its exit code) and the seconds."""
    t0 = time.monotonic()
    proc = start(cmd)
    try:
        while proc.poll() is None:
            if ready():
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return {"killed": True, "seconds": time.monotonic() - t0}
            if time.monotonic() - t0 > timeout:
                msg = f"no kill point within {timeout:.0f} s: {' '.join(cmd)}"
                raise TimeoutError(msg)
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        msg = f"the run failed (exit {proc.returncode}) before its kill point: {err[-3000:]}"
        raise RuntimeError(msg)
    return {"killed": False, "seconds": time.monotonic() - t0}


def trigger(kind: str, ckpt: Path, deltas_url: str, rng: random.Random,
            first_epoch: int, max_delay: float = 3.0) -> Callable[[], bool]:
    """When to kill: see the module docstring. Every kind waits until the delta topic
    holds epoch ``first_epoch`` (or a later one) so that the kill is mid-run; ``random``
    then waits up to ``max_delay`` seconds."""
    growth = TopicGrowth(deltas_url) if kind == "output" else None
    state: dict[str, Any] = {"armed": False}

    def armed() -> bool:
        if not state["armed"] and read_last_epoch(parse_kafka_url(deltas_url)) >= first_epoch:
            state.update(armed=True, t=time.monotonic(), files=checkpoint_files(ckpt),
                         ends=growth.ends() if growth else 0,
                         delay=rng.uniform(0.0, max_delay))
            return False
        return bool(state["armed"])

    def ready() -> bool:
        if not armed():
            return False
        if kind == "checkpoint":
            return checkpoint_files(ckpt) != state["files"]
        if kind == "output":
            assert growth is not None
            return growth.ends() > state["ends"]
        return bool(time.monotonic() - state["t"] >= state["delay"])

    return ready


def fault_run(runner: str, sql: Path, updates_url: str, deltas_url: str, ckpt: Path,
              kinds: list[str], rng: random.Random, first_epoch: int,
              batch_lines: int = 10_000) -> dict[str, Any]:
    """One runner killed at each of ``kinds`` in turn and restarted after each kill,
    then run to its end. Returns the kills made and the total seconds."""
    cmd = run_command(runner, sql, updates_url, deltas_url, ckpt, batch_lines)
    t0 = time.monotonic()
    kills = []
    for kind in kinds:
        at = kill_when(cmd, trigger(kind, ckpt, deltas_url, rng, first_epoch))
        if not at["killed"]:
            break  # the run ended before this kill point: nothing left to interrupt
        kills.append({"kind": kind, "after_s": round(at["seconds"], 2),
                      "topic_epoch": read_last_epoch(parse_kafka_url(deltas_url))})
    else:
        run_to_end(cmd)
    return {"kills": kills, "seconds": time.monotonic() - t0}


def _line(r: dict[str, Any]) -> str:
    points = " ".join(f"{k['kind']}@{k['topic_epoch']}" for k in r["kill_points"])
    return (f"{r['runner']:8} {r['kills']:5} {r['epochs']:6} {r['lost']:4} "
            f"{r['duplicated']:10} {r['seconds']:8.1f}   {points}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--data", type=Path, help="an `ivmflow generate tpch` directory "
                    "(default: generated into the work directory)")
    ap.add_argument("--every", type=int, default=8000, help="updates per epoch of the load")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--runners", default=",".join(RUNNERS))
    ap.add_argument("--bootstrap", help="a Kafka broker (default: start one)")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=RESULTS / "tpch_faults.json")
    args = ap.parse_args(argv)
    args.command = command_line("bench.tpch_faults", argv)
    import tempfile

    work = args.work or Path(tempfile.mkdtemp(prefix="ivmflow-tpch-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    stop_broker: Callable[[], None] = lambda: None  # noqa: E731
    bootstrap = args.bootstrap
    if bootstrap is None:
        from tests import kafka_broker

        broker, stop_broker = kafka_broker.launch_broker()
        bootstrap = broker.bootstrap
    try:
        return _bench(args, work, bootstrap)
    finally:
        stop_broker()


def _bench(args: argparse.Namespace, work: Path, bootstrap: str) -> int:
    from connectors.tpch import TpchSpec, write_tpch
    from dataflow.runners.kafka import produce

    data = args.data
    if data is None:
        data = work / "tpch"
        write_tpch(TpchSpec(args.sf, 2, 0), data)
    sql = data / "queries" / f"{QUERY}.sql"
    stream = cut_epochs(data / "updates.csv", work / "updates.csv", args.every)
    expected = reference_epochs(sql, stream)
    tag = os.urandom(4).hex()
    updates_url = f"kafka://{bootstrap}/tpch-updates-{tag}"
    produce(str(stream), updates_url, partitions=2, query=str(sql))
    rng = random.Random(args.seed)
    kinds = [KILL_KINDS[i % len(KILL_KINDS)] for i in range(args.kills)]
    rows = []
    for runner in args.runners.split(","):
        deltas_url = f"kafka://{bootstrap}/tpch-deltas-{runner}-{tag}"
        res = fault_run(runner, sql, updates_url, deltas_url, work / f"{runner}-ckpt", kinds,
                        rng, first_epoch=min(expected))
        got = topic_epochs(deltas_url)
        lost, dup = compare(expected, got)
        rows.append({"runner": runner, "kills": len(res["kills"]), "kill_points": res["kills"],
                     "epochs": len(expected), "epochs_in_topic": len(got), "lost": len(lost),
                     "duplicated": len(dup), "lost_epochs": lost, "duplicated_epochs": dup,
                     "seconds": round(res["seconds"], 1)})
        print(_line(rows[-1]), flush=True)
    header = (f"TPC-H {QUERY} SF {args.sf}, load cut every {args.every} updates, topic of 2 "
              f"partitions, Spark/Flink P=2")
    table = [header, "runner   kills epochs lost duplicated  seconds   kill points "
             "(kind@last epoch in the topic)", *map(_line, rows)]
    result_record("tpch_faults", rows, command=args.command, out=args.out,
                  table="\n".join(table),
                  extra={"query": QUERY, "sf": args.sf, "every": args.every,
                         "seed": args.seed})
    return 0 if all(r["lost"] == 0 and r["duplicated"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
