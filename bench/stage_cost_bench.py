"""What an update costs on the Spark and Flink runners, next to the local runner, on the
TPC-H refresh stream: per query, the steady (refresh) epochs' cost per update on each
runner and parallelism, the local runner's on the same epochs in the same run, their
ratio, the checkpoint's size, and on Flink the split of an epoch between engine (and
finalizer) and write-back with the state entries written per update
(``IVMFLOW_FLINK_PHASES``).

The stream is ``ivmflow generate tpch`` (the initial load, then per refresh pair an RF1
epoch inserting SF x 1500 orders with their lineitems, an RF2 epoch deleting as many,
and an UPD epoch changing customer, supplier and partsupp rows). The load is left out
(and so is the JVM's start): a runner's steady cost is the time from the commit of the
load's epoch to the commit of the last epoch that changed the result, in its delta
file, over those epochs' updates (the runs write no snapshots, on any runner). Their
cost per update staying flat while the state grows 10x (``--sfs 0.01,0.1``) is IVM's
promise, O(changes) per epoch.

Spark cuts micro-batches by lines, not epochs: its copy of the stream has each epoch
padded with comment lines to a multiple of ``--batch-lines``, so no micro-batch holds
the load and a refresh epoch together (each refresh epoch is one micro-batch). The
checkpoint size is the largest the run's ``--checkpoint`` directory got (sampled every
half second): RocksDB files (Flink: incremental; Spark: the state store's snapshots and
changelogs) and the runner's own.

    python -m bench.stage_cost_bench [--sfs 0.1] [--queries q01,q17]
        [--runners local,flink1,flink2,spark1,spark2] [--batch-lines 100000]
    python -m bench.stage_cost_bench --write-back-only --sfs 0.01 --queries q01,q17

Prints a table and writes bench/results/stage_cost.json (``--out``), rewritten after
every run.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, ROOT, command_line, result_record
from bench.harness.timing import CommitWatcher, committed_epoch, read_phase_logs

RUNNERS = {"flink1": ("flink", 1), "flink2": ("flink", 2),
           "spark1": ("spark", 1), "spark2": ("spark", 2)}


def epoch_updates(path: Path) -> list[int]:
    """Updates per epoch of an update file (``*`` closes an epoch)."""
    counts, n = [], 0
    with open(path) as f:
        for line in f:
            if line.startswith("*"):
                counts.append(n)
                n = 0
            elif line.strip() and not line.startswith("#"):
                n += 1
    if n:
        counts.append(n)
    return counts


def _env() -> dict[str, str]:
    return {**os.environ, "IVMFLOW_NATIVE": os.environ.get("IVMFLOW_NATIVE", "0"),
            "PYTHONPATH": str(ROOT)}


def generate(sf: float, work: Path) -> Path:
    """The stream of ``bench/tpch_bench.py`` (2 refresh pairs, seed 0), cached."""
    data = ROOT / "bench" / ".cache" / f"tpch_sf{sf:g}_rf2"
    if not (data / "manifest.json").exists():
        data = work / f"sf{sf:g}"
        subprocess.run([sys.executable, "-m", "dataflow", "generate", "tpch", "--sf", str(sf),
                        "--out", str(data), "--refresh-pairs", "2", "--seed", "0"],
                       cwd=ROOT, env=_env(), check=True, capture_output=True)
    return data


def padded(updates: Path, batch: int, out: Path) -> Path:
    """``updates`` with each epoch (its ``*`` line included) padded with comment lines
    to a multiple of ``batch`` lines: a runner reading ``batch`` lines per micro-batch
    then starts every epoch in a fresh one."""
    if out.exists():
        return out
    with open(updates) as src, open(out, "w") as dst:
        n = 0
        for line in src:
            dst.write(line)
            n += 1
            if line.startswith("*"):
                pad = -n % batch
                dst.write("#\n" * pad)
                n = 0
    return out


def local_worker(query: Path, updates: Path, out: Path) -> None:
    """The local runner in this process (interpreted unless IVMFLOW_NATIVE=1): the clock
    at each epoch's close, pickled to ``out``."""
    from connectors.files import read_updates
    from dataflow.api import compile_query
    from dataflow.circuit.drive import drive

    q = compile_query(query.read_text())
    view = q.maintain()
    marks: dict[int, float] = {}
    records = read_updates(str(updates), q.schema)
    t0 = time.perf_counter()
    # The clock at each epoch's delta (every epoch has one, empty or not); no
    # snapshots: the local runner enumerates a result with ORDER BY ... LIMIT whole
    # (O(result)), where the runners' top-k stage keeps its window.
    drive(view, records, on_delta=lambda d: marks.__setitem__(d.epoch, time.perf_counter()))
    with open(out, "wb") as f:
        pickle.dump({"marks": marks, "load_s": marks.get(1, t0) - t0,
                     "state_entries": view.state_entries()}, f)


def run_local(query: Path, updates: Path, counts: list[int], work: Path) -> dict[str, Any]:
    out = work / "local.pickle"
    subprocess.run([sys.executable, "-m", "bench.stage_cost_bench", "--local-worker",
                    str(query), str(updates), str(out)],
                   cwd=ROOT, env=_env(), check=True, timeout=3600)
    with open(out, "rb") as f:
        got = pickle.load(f)
    marks = got["marks"]
    last = max(marks)
    n = sum(counts[1:last])
    secs = marks[last] - marks[1]
    per_epoch = [1e6 * (marks[e] - marks[e - 1]) / max(1, counts[e - 1])
                 for e in range(2, last + 1)]
    return {"steady_updates": n, "steady_s": secs, "us_per_update": 1e6 * secs / n,
            "epoch_us_per_update": per_epoch, "load_s": got["load_s"],
            "state_entries": got["state_entries"]}


def write_back_only(query: Path, updates: Path) -> dict[str, Any]:
    """The write-back's Python side alone, as the Flink runner does it at each close
    (``changes()``, then ``encode_key`` and ``encode_entry`` per entry), over every stage
    slot of the query at P=1 in this process: its time, entries and bytes per refresh
    update (``--write-back-only``; no JVM, so a change to the encoding shows here first)."""
    from connectors.files import read_updates
    from core.epochs import CLOSE, EpochCursor
    from dataflow.api import compile_query
    from dataflow.distributed.stages import StagePlan, StageTask
    from operators.writeback import WriteBackState, encode_entry, encode_key

    q = compile_query(query.read_text())
    plan = StagePlan.of(q, 1)
    numbered = list(EpochCursor().number(read_updates(str(updates), q.schema), final=True))
    inbox: dict[int, list[tuple[Any, ...]]] = {}
    for r in plan.tag_base(numbered):
        inbox.setdefault(r[0], []).append(r)
    acc = {"s": 0.0, "entries": 0, "bytes": 0}
    for slot in range(plan.slots):
        state = WriteBackState()
        task = StageTask(plan, slot, state)
        rows = sorted(inbox.pop(slot, []), key=lambda r: (r[2], r[3] == CLOSE))

        def on_close(close: tuple[Any, ...], _out: Any, state: WriteBackState = state) -> None:
            t0 = time.perf_counter()
            for _name, puts, gone in state.changes():
                blobs = {encode_key(k): encode_entry(k, v) for k, v in puts.items()}
                keys = [encode_key(k) for k in gone]
                if close[2] >= 2:
                    acc["entries"] += len(blobs) + len(keys)
                    acc["bytes"] += sum(len(k) + len(b) for k, b in blobs.items())
            if close[2] >= 2:
                acc["s"] += time.perf_counter() - t0

        down, _final = task.feed(rows, on_close)
        for r in down:
            inbox.setdefault(r[0], []).append(r)
    n = sum(1 for r in numbered if r.kind != CLOSE and r.epoch >= 2)
    return {"query": query.stem, "steady_updates": n,
            "write_back_us_per_update": 1e6 * acc["s"] / n,
            "us_per_entry": 1e6 * acc["s"] / max(1, acc["entries"]),
            "entries_per_update": acc["entries"] / n, "put_bytes_per_update": acc["bytes"] / n}


def run_runner(name: str, query: Path, updates: Path, counts: list[int], work: Path,
               batch_lines: int) -> dict[str, Any]:
    """One ``ivmflow run --runner R --parallelism P`` in a subprocess, timed between the
    delta file's epoch commits (polled), its checkpoint directory sampled for size."""
    runner, parallelism = RUNNERS[name]
    deltas, ckpt = work / f"{name}.csv", work / f"ckpt-{name}"
    # No snapshots, as on the local runner (a snapshot enumerates the whole result: an
    # ungrouped aggregate over a join, Q14 or Q19, enumerates every joined row). An
    # epoch without changes commits no delta block: its time is counted up to the next
    # epoch that does, and the latency figure ends at the last one that does.
    commits = (Path(f"{deltas}.commit"),)
    prefix = str(work / f"phases-{name}")
    trace = work / f"trace-{name}.jsonl"

    env = {**_env(), "IVMFLOW_FLINK_PHASES": prefix, "IVMFLOW_SPARK_TRACE": str(trace)}
    with CommitWatcher(commits, ckpt, tick=0.002, size_every=0.5) as watch:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "dataflow", "run", str(query), "--updates", str(updates),
             "--deltas", str(deltas), "--quiet", "--runner", runner,
             "--parallelism", str(parallelism), "--checkpoint", str(ckpt),
             *(["--batch-lines", str(batch_lines)] if runner == "spark" else [])],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=5400)
        wall = time.perf_counter() - t0
    marks, walls = watch.marks, watch.walls
    if proc.returncode != 0:
        return {"status": "failed", "error": proc.stderr.strip()[-600:], "wall_s": wall}
    n = sum(counts[1:len(counts)])  # (every refresh epoch's updates: the phases, traces)
    out: dict[str, Any] = {"status": "ok", "steady_updates": n, "wall_s": wall,
                           "checkpoint_mib": max(watch.sizes) / 2**20}
    last = committed_epoch(commits[0])
    if last >= 2 and 1 in marks:  # (a top-k whose window the refreshes never change: no)
        secs = marks[last] - marks[1]
        out.update({
            "steady_s": secs, "latency_us_per_update": 1e6 * secs / sum(counts[1:last]),
            "epoch_us_per_update": [1e6 * (marks[e] - marks[e - 1]) / max(1, counts[e - 1])
                                    for e in range(2, last + 1)]})
    phases = read_phase_logs(prefix)
    steady = [e for e in phases if e >= 2]
    if steady:
        engine = sum(phases[e][0] for e in steady)
        written = sum(phases[e][1] for e in steady)
        out.update({
            "engine_us_per_update": 1e6 * engine / n,
            "write_back_us_per_update": 1e6 * written / n,
            "puts_per_update": sum(phases[e][3] for e in steady) / n,
            "removes_per_update": sum(phases[e][4] for e in steady) / n,
            "load_entries": sum(phases.get(1, [0.0] * 5)[3:5])})
        out["us_per_update"] = out["engine_us_per_update"] + out["write_back_us_per_update"]
        # Per epoch too: on a shared machine one epoch's pause (GC, a RocksDB flush, a
        # neighbour's job) can double a run's total; the median epoch shows it.
        per_epoch = [1e6 * (phases[e][0] + phases[e][1]) / max(1, counts[e - 1])
                     for e in sorted(steady)]
        out["epoch_cost_us_per_update"] = per_epoch
        out["median_epoch_us_per_update"] = statistics.median(per_epoch)
    tasks = [json.loads(line) for line in trace.read_text().splitlines()] \
        if trace.exists() else []
    tasks = [t for t in tasks if "engine_s" in t and t["task_start"] > walls.get(1, 0.0)]
    if tasks and "us_per_update" not in out:
        # Spark's partition tasks of the refresh micro-batches (IVMFLOW_SPARK_TRACE):
        # their time in Python, without the micro-batch's scheduling around them.
        engine = sum(t["cache_s"] + t["read_s"] + t["engine_s"] for t in tasks)
        written = sum(t["write_back_s"] for t in tasks)
        out.update({"engine_us_per_update": 1e6 * engine / n,
                    "write_back_us_per_update": 1e6 * written / n,
                    "us_per_update": 1e6 * (engine + written) / n,
                    # (of the engine's: bringing a worker's cache to the store's stamp,
                    # by the journal or, after a restart or a long absence, a rebuild)
                    "cache_us_per_update": 1e6 * sum(t["cache_s"] for t in tasks) / n,
                    "tasks": len(tasks)})
    if "us_per_update" not in out:
        if "latency_us_per_update" not in out:
            return {"status": "failed", "wall_s": wall, "error": "no phases, no trace and "
                    f"no refresh epoch changed the result (last delta: epoch {last})"}
        out["us_per_update"] = out["latency_us_per_update"]
    shutil.rmtree(ckpt, ignore_errors=True)
    return out


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sfs", default="0.1")
    ap.add_argument("--queries", default="q17")
    ap.add_argument("--runners", default="local,flink1,flink2,spark1,spark2")
    ap.add_argument("--batch-lines", type=int, default=100_000,
                    help="Spark's input lines per micro-batch")
    ap.add_argument("--out", type=Path, default=RESULTS / "stage_cost")
    ap.add_argument("--write-back-only", action="store_true",
                    help="only the write-back's Python side, in this process (no runner)")
    ap.add_argument("--local-worker", nargs=3, metavar=("QUERY", "UPDATES", "OUT"),
                    help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.local_worker:
        local_worker(*map(Path, opts.local_worker))
        return 0
    work = Path(tempfile.mkdtemp(prefix="ivmflow-stage-cost-"))
    if opts.write_back_only:
        for sf in map(float, opts.sfs.split(",")):
            data = generate(sf, work)
            for qname in opts.queries.split(","):
                got = write_back_only(data / "queries" / f"{qname}.sql", data / "updates.csv")
                print(json.dumps({"sf": sf, **got}), flush=True)
        return 0
    runners = opts.runners.split(",")
    rows: list[dict[str, Any]] = []
    path = opts.out.with_suffix(".json")
    command = command_line("bench.stage_cost_bench", argv)
    extra = {"sfs": opts.sfs, "batch_lines": opts.batch_lines}
    head = ("sf", "query", "runner", "us_per_update", "local_us_per_update", "ratio",
            "latency_us_per_update",
            "checkpoint_mib", "engine_us_per_update", "write_back_us_per_update",
            "puts_per_update", "removes_per_update", "wall_s")
    print(" | ".join(head), flush=True)
    for sf in map(float, opts.sfs.split(",")):
        data = generate(sf, work)
        updates = data / "updates.csv"
        spark_updates = padded(updates, opts.batch_lines,
                               work / f"sf{sf:g}-padded{opts.batch_lines}.csv")
        counts = epoch_updates(updates)
        for qname in opts.queries.split(","):
            query = data / "queries" / f"{qname}.sql"
            qwork = work / f"sf{sf:g}-{qname}"
            qwork.mkdir(parents=True, exist_ok=True)
            local = run_local(query, updates, counts, qwork) if "local" in runners else None
            base = {"sf": sf, "query": qname, "load_updates": counts[0],
                    "local_us_per_update": local and local["us_per_update"]}
            if local is not None:
                rows.append({**base, "runner": "local", **local, "ratio": 1.0})
                print(" | ".join(_fmt(rows[-1].get(h, "")) for h in head), flush=True)
            for name in (r for r in runners if r != "local"):
                src = spark_updates if name.startswith("spark") else updates
                got = run_runner(name, query, src, counts, qwork, opts.batch_lines)
                row = {**base, "runner": name, **got}
                if local is not None and "us_per_update" in got:
                    row["ratio"] = got["us_per_update"] / local["us_per_update"]
                rows.append(row)
                print(" | ".join(_fmt(row.get(h, "")) for h in head), flush=True)
                result_record("stage_cost", rows, command=command, extra=extra, out=path,
                              table=False, quiet=True)
    result_record("stage_cost", rows, command=command, extra=extra, out=path, table=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
