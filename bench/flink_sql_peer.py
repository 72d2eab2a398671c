"""Flink SQL peer (issue 14): ivmflow on Flink against Flink SQL's regular streaming joins
on the same changelog, 3-hop (with an end filter) and 4-hop join-project, FIFO windows
of 8k and 80k edges, time and state size, side by side in one run.

The stream (the crossover bench's, ``bench.harness.streams.zipf_stream``): a skewed
graph (3000 nodes per 8k live edges, Zipf-like degrees), W inserts (warm-up), then
``--steady`` updates, each new edge followed by the delete of the oldest one; epochs of
1000 updates.

* **ivmflow local**: the engine in this process, steady epochs timed
  (``bench/runner_state_bench.py``'s ``run_local``); state entries.
* **ivmflow flink**: ``ivmflow run --runner flink`` (mini-cluster, parallelism 1,
  RocksDB with incremental checkpoints every second), the steady phase timed between
  the commits of the last warm-up epoch and the last epoch (``run_flink``), the fastest
  of ``--repeat`` runs like Flink SQL's; state size = the largest checkpoint directory
  during that run.
* **Flink SQL**: the query's SELECT through PyFlink's Table API over a changelog stream
  (``from_changelog_stream``: the same inserts and deletes, a blackhole sink), in a
  subprocess with the same state backend and checkpoint settings, parallelism 1. Its
  steady time = the run over warm-up + steady minus the run over the warm-up alone (so
  start-up and warm-up cancel; each the fastest of ``--repeat`` runs, and 100k steady
  updates by default, so that start-up noise stays small against the difference);
  state size = the largest checkpoint directory.

Before timing, each query's result on a small window is checked: Flink SQL's collected
changelog, summed, must equal the sum of ivmflow's deltas.

    python -m bench.flink_sql_peer [--windows 8000,80000] [--queries hop3_filter,hop4_bag]
        [--steady 100000] [--repeat 2] [--quick]

Prints a table with ratios, writes ``bench/results/flink_sql_peer.json`` and
``flink_sql_peer.png`` (``flink_sql_peer_quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.crossover_bench import query_sql
from bench.harness import RESULTS, ROOT, command_line, result_record
from bench.harness.plots import save, subplots
from bench.harness.streams import zipf_stream
from bench.harness.timing import CommitWatcher
from bench.runner_state_bench import EPOCH, run_flink, run_local
from core.records import Update, format_update

QUERY_NAMES = ("hop3_filter", "hop4_bag")


def write_stream(path: Path, updates: list[Update]) -> None:
    path.write_text("\n".join(format_update(u) for u in updates) + "\n")


# -- Flink SQL (run in a subprocess: one PyFlink job per process) ------------------------
def _select_only(sql: str) -> str:
    return re.sub(r"CREATE TABLE[^;]*;", "", sql, flags=re.I).strip().rstrip(";")


def table_env(checkpoint: str, extra: dict[str, str] | None = None) -> tuple[Any, Any]:
    """PyFlink's stream and table environments as every Flink SQL run here uses them:
    parallelism 1, RocksDB with incremental checkpoints every second into ``checkpoint``
    (``extra``: more Flink settings, as ``IVMFLOW_FLINK_CONF`` gives ivmflow's runner)."""
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    conf = Configuration()
    conf.set_string("python.execution-mode", "thread")
    conf.set_string("state.backend.type", "rocksdb")
    conf.set_string("execution.checkpointing.incremental", "true")
    conf.set_string("execution.checkpointing.interval", "1000ms")
    conf.set_string("execution.checkpointing.dir", Path(checkpoint).resolve().as_uri())
    for key, value in (extra or {}).items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    return env, StreamTableEnvironment.create(env)


def to_blackhole(t_env: Any, result: Any) -> None:
    """Run the table ``result`` into a blackhole sink until its sources end."""
    schema = result.get_schema()
    fields = ", ".join(f"`{n}` {ty}" for n, ty in zip(schema.get_field_names(),
                                                       schema.get_field_data_types()))
    t_env.execute_sql(f"CREATE TEMPORARY TABLE sink_out ({fields}) "
                      "WITH ('connector' = 'blackhole')")
    result.execute_insert("sink_out").wait()


def flink_sql_job(sql: str, updates_csv: str, collect: bool, checkpoint: str) -> dict[str, Any]:
    """Run the query on Flink SQL over the changelog of ``updates_csv``."""
    from pyflink.common import Row, RowKind, Types

    env, t_env = table_env(checkpoint)
    rows = []
    for line in Path(updates_csv).read_text().splitlines():
        op, _rel, src, dst = line.split(",")
        row = Row(int(src), int(dst))
        row.set_row_kind(RowKind.INSERT if op.startswith("+") else RowKind.DELETE)
        rows.append(row)
    ds = env.from_collection(rows, type_info=Types.ROW_NAMED(["src", "dst"],
                                                             [Types.LONG(), Types.LONG()]))
    t_env.create_temporary_view("G", t_env.from_changelog_stream(ds))
    result = t_env.sql_query(_select_only(sql))
    t = time.perf_counter()
    if not collect:
        to_blackhole(t_env, result)
        return {"seconds": time.perf_counter() - t}
    acc: Counter[str] = Counter()
    with result.execute().collect() as it:
        for row in it:
            kind = row.get_row_kind()
            sign = 1 if kind in (RowKind.INSERT, RowKind.UPDATE_AFTER) else -1
            acc[json.dumps(list(row))] += sign
    return {"seconds": time.perf_counter() - t, "result": dict(+acc)}


def run_flink_sql(sql_path: Path, updates: Path, collect: bool, directory: Path,
                  timeout: float) -> dict[str, Any]:
    """``flink_sql_job`` in a subprocess, its checkpoint directory's largest size sampled."""
    ckpt = directory / f"sql-ckpt-{updates.stem}-{int(time.time() * 1000)}"
    ckpt.mkdir(parents=True)
    out = directory / f"sql-{updates.stem}.json"
    start = time.perf_counter()
    try:
        with CommitWatcher([], ckpt, tick=0.25, size_every=0.0) as watch:
            proc = subprocess.run(
                [sys.executable, "-m", "bench.flink_sql_peer", "--flink-sql-worker",
                 str(sql_path), str(updates), str(out), str(ckpt),
                 "collect" if collect else "blackhole"],
                cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    if proc.returncode != 0:
        msg = f"Flink SQL run failed ({proc.returncode}): {proc.stderr[-2000:]}"
        raise RuntimeError(msg)
    rec: dict[str, Any] = json.loads(out.read_text())
    rec["run_s"] = time.perf_counter() - start
    rec["checkpoint_bytes"] = max(watch.sizes)
    return rec


# -- the comparison ----------------------------------------------------------------------
def ivmflow_result(deltas_csv: str) -> dict[str, int]:
    """The final result from a delta file's text (sum of every epoch's changes)."""
    acc: Counter[str] = Counter()
    for line in deltas_csv.splitlines()[1:]:
        fields = line.split(",")
        acc[json.dumps([int(v) for v in fields[2:]])] += int(fields[1])
    return dict(+acc)


def check_agreement(name: str, directory: Path) -> bool:
    """Flink SQL's and ivmflow's results on a small window (900 edges, 2000 updates)."""
    stream = zipf_stream(900, 2000, seed=2)
    sql = query_sql(name, stream.threshold)
    qpath = directory / f"check-{name}.sql"
    qpath.write_text(sql)
    upath = directory / f"check-{name}.csv"
    write_stream(upath, stream.warm + stream.timed)
    from dataflow.cli import main as cli

    deltas = directory / f"check-{name}-deltas.csv"
    assert cli(["run", str(qpath), "--updates", str(upath), "--epoch", str(EPOCH),
                "--deltas", str(deltas), "-q"]) == 0
    sql_rec = run_flink_sql(qpath, upath, True, directory, timeout=600)
    return bool(sql_rec.get("result") == ivmflow_result(deltas.read_text()))


def measure(name: str, window: int, steady: int, directory: Path, timeout: float,
            repeat: int = 2) -> dict[str, Any]:
    stream = zipf_stream(window, steady, seed=1)
    sql = query_sql(name, stream.threshold)
    qpath = directory / f"{name}-{window}.sql"
    qpath.write_text(sql)
    full = directory / f"{name}-{window}.csv"
    warm = directory / f"{name}-{window}-warm.csv"
    write_stream(full, stream.warm + stream.timed)
    write_stream(warm, stream.warm)
    warm_epochs = window // EPOCH
    rec: dict[str, Any] = {"query": name, "window": window, "steady_updates": steady,
                           "epoch": EPOCH}
    local = run_local(qpath, full, warm_epochs)
    rec["ivmflow_local"] = {k: v for k, v in local.items() if k != "deltas"}
    print(f"  ivmflow local: {local['us_per_update']:.1f} us/update", flush=True)
    # The fastest of ``repeat`` runs, as for Flink SQL below (each in its own directory:
    # a run must not resume from another's checkpoint).
    flinks = []
    for i in range(repeat):
        rep = directory / f"{name}-{window}-ivmflow-run{i}"
        rep.mkdir(exist_ok=True)
        flinks.append(run_flink(qpath, full, warm_epochs, 1, rep))
    flink = min(flinks, key=lambda r: r["us_per_update"])
    rec["ivmflow_flink"] = {k: v for k, v in flink.items() if k != "deltas"}
    rec["ivmflow_flink"]["runs_us"] = [round(r["us_per_update"], 2) for r in flinks]
    print(f"  ivmflow flink: {flink['us_per_update']:.1f} us/update, checkpoint "
          f"{flink['checkpoint_bytes'] / 2**20:.1f} MiB", flush=True)
    # The steady time is a difference of two runs: each is taken as the fastest of
    # ``repeat`` runs, so that start-up noise does not swamp it.
    sql_full = min((run_flink_sql(qpath, full, False, directory, timeout)
                    for _ in range(repeat)), key=lambda r: r.get("seconds", float("inf")))
    sql_warm = min((run_flink_sql(qpath, warm, False, directory, timeout)
                    for _ in range(repeat)), key=lambda r: r.get("seconds", float("inf")))
    if "timeout" in sql_full or "timeout" in sql_warm:
        rec["flink_sql"] = {"timeout_s": timeout}
        print(f"  Flink SQL: over {timeout:.0f} s, stopped", flush=True)
        return rec
    steady_s = max(1e-9, sql_full["seconds"] - sql_warm["seconds"])
    rec["flink_sql"] = {
        "steady_s": steady_s, "us_per_update": 1e6 * steady_s / steady,
        "run_s": sql_full["seconds"], "warm_run_s": sql_warm["seconds"], "repeat": repeat,
        "checkpoint_bytes": sql_full["checkpoint_bytes"],
    }
    print(f"  Flink SQL: {rec['flink_sql']['us_per_update']:.1f} us/update, checkpoint "
          f"{sql_full['checkpoint_bytes'] / 2**20:.1f} MiB", flush=True)
    return rec


def plot(records: list[dict[str, Any]], path: Path) -> bool:
    done = [r for r in records if "us_per_update" in r.get("flink_sql", {})]
    if not done:
        return False
    labels = [f"{r['query']}\nW={r['window'] // 1000}k" for r in done]
    made = subplots(1, 2, figsize=(11, 4))
    if made is None:
        return False
    fig, (ax1, ax2) = made
    width = 0.27
    xs = range(len(done))
    for k, (key, label) in enumerate((("ivmflow_local", "ivmflow local"),
                                      ("ivmflow_flink", "ivmflow on Flink"),
                                      ("flink_sql", "Flink SQL"))):
        ax1.bar([x + (k - 1) * width for x in xs], [r[key]["us_per_update"] for r in done],
                width, label=label)
    ax1.set_yscale("log")
    ax1.set_ylabel("us per update (steady)")
    ax1.set_xticks(list(xs), labels)
    ax1.legend(fontsize=8)
    for k, (key, label) in enumerate((("ivmflow_flink", "ivmflow on Flink"),
                                      ("flink_sql", "Flink SQL"))):
        ax2.bar([x + (k - 0.5) * width for x in xs],
                [r[key]["checkpoint_bytes"] / 2**20 for r in done], width, label=label)
    ax2.set_yscale("log")
    ax2.set_ylabel("largest checkpoint (MiB)")
    ax2.set_xticks(list(xs), labels)
    ax2.legend(fontsize=8)
    save(fig, path, dpi=90)
    return True


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--flink-sql-worker":
        sql_path, updates, rec_path, ckpt, mode = sys.argv[2:7]
        rec = flink_sql_job(Path(sql_path).read_text(), updates, mode == "collect", ckpt)
        Path(rec_path).write_text(json.dumps(rec))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", default="8000,80000")
    ap.add_argument("--queries", default=",".join(QUERY_NAMES))
    ap.add_argument("--steady", type=int, default=100_000, help="timed updates")
    ap.add_argument("--repeat", type=int, default=2,
                    help="Flink SQL runs per measure (the fastest is kept)")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds per Flink SQL run before it is stopped")
    ap.add_argument("--quick", action="store_true", help="W = 2k, 4k steady updates")
    ap.add_argument("--out", type=Path, default=None, help="JSON path")
    args = ap.parse_args(argv)
    windows = [int(w) for w in args.windows.split(",")]
    if args.quick:
        windows, args.steady = [2000], 4000
    names = args.queries.split(",")
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ivmflow-peer-") as tmp:
        directory = Path(tmp)
        agree = {name: check_agreement(name, directory) for name in names}
        print(f"Flink SQL = ivmflow on the check window: {agree}", flush=True)
        for name in names:
            for window in windows:
                print(f"{name} W={window}", flush=True)
                rec = measure(name, window, args.steady, directory, args.timeout,
                              1 if args.quick else args.repeat)
                rec["agree_on_check"] = agree[name]
                records.append(rec)
    print("\n| query | W | ivmflow local | ivmflow flink | Flink SQL | SQL / ivmflow flink "
          "(time) | checkpoint flink / SQL (MiB) | SQL / ivmflow flink (state) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in records:
        sql = r["flink_sql"]
        fl = r["ivmflow_flink"]
        if "us_per_update" not in sql:
            print(f"| {r['query']} | {r['window']} | {r['ivmflow_local']['us_per_update']:.1f} us"
                  f" | {fl['us_per_update']:.1f} us | over {sql['timeout_s']:.0f} s | - | "
                  f"{fl['checkpoint_bytes'] / 2**20:.1f} / - | - |")
            continue
        r["ratios"] = {"sql_over_flink_time": sql["us_per_update"] / fl["us_per_update"],
                       "sql_over_flink_state": sql["checkpoint_bytes"]
                       / max(1, fl["checkpoint_bytes"])}
        print(f"| {r['query']} | {r['window']} | {r['ivmflow_local']['us_per_update']:.1f} us"
              f" | {fl['us_per_update']:.1f} us | {sql['us_per_update']:.1f} us | "
              f"{r['ratios']['sql_over_flink_time']:.2f}x | "
              f"{fl['checkpoint_bytes'] / 2**20:.1f} / {sql['checkpoint_bytes'] / 2**20:.1f} | "
              f"{r['ratios']['sql_over_flink_state']:.2f}x |")
    stem = "flink_sql_peer_quick" if args.quick else "flink_sql_peer"
    out = args.out or RESULTS / f"{stem}.json"
    result_record("flink_sql_peer", records, command=command_line("bench.flink_sql_peer", argv),
                  extra={"agree_on_check": agree}, out=out, table=False)
    plot(records, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
