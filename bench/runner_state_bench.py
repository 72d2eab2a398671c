"""Does a runner keep IVM's promise? Steady per-update cost vs state size.

The stream: a skewed graph under a FIFO window of W edges (W inserts, then 10k more
inserts each followed by the delete of the oldest edge: 20k steady updates), epochs of
1000 updates, maintained for the 2-hop ``GROUP BY COUNT`` (``--query 3star``: a 2-path
and an in-edge at its start, whose root has two children). The steady phase changes as
much at every W while the state grows with W, so its cost per update must stay flat
(log-log slope near 0) on every runner.

* local: the engine in this process, timed around the steady epochs;
* local-cli: ``ivmflow run --runner local`` in a subprocess, timed exactly as flink
  below (the same update file parsed, the same delta file written and committed per
  epoch): the like-for-like baseline of the Flink runner;
* flink: ``ivmflow run --runner flink`` in a subprocess (mini-cluster, RocksDB with
  incremental checkpoints, the default); the steady phase is timed between the commit
  of the last warm-up epoch and of the last epoch in the delta file (polled), so job
  start-up and warm-up are left out. Also the checkpoint directory's largest size
  during the run (Flink discards a finished job's checkpoints).

    python -m bench.runner_state_bench [--windows 5000,40000,160000] [--runners local,flink]
        [--parallelism 1,2] [--repeat 3] [--quick] [--query 2hop|3star]

Prints a table and writes bench/results/runner_state.json and runner_state.png.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, ROOT, command_line, loglog_slope, result_record
from bench.harness.plots import loglog, save, subplots
from bench.harness.streams import window_files
from bench.harness.timing import CommitWatcher, read_phase_logs
from connectors.files import read_updates
from dataflow.api import compile_query
from dataflow.circuit.drive import drive

SQL = ("CREATE TABLE G(src INT, dst INT);\n"
       "SELECT G1.src AS a, COUNT(*) AS n FROM G G1, G G2 WHERE G1.dst = G2.src "
       "GROUP BY G1.src;\n")
QUERIES = {
    "2hop": SQL,
    # (a root over two children: its count of supporting children is read from their
    # projections on every change, not stored, so it is one more read per key there)
    "3star": ("CREATE TABLE G(src INT, dst INT);\n"
              "SELECT G1.src AS a, COUNT(*) AS n FROM G G1, G G2, G G3 "
              "WHERE G1.dst = G2.src AND G1.src = G3.dst GROUP BY G1.src;\n"),
}
EPOCH = 1000
STEADY_EDGES = 10_000  # each: one insert and one delete


def run_local(query: Path, updates: Path, warm_epochs: int) -> dict[str, Any]:
    q = compile_query(query.read_text())
    view = q.maintain()
    marks: dict[int, float] = {}
    rows: dict[int, int] = {}

    def on_delta(d: Any) -> None:
        marks[d.epoch] = time.perf_counter()
        rows[d.epoch] = len(d.rows)

    records = list(read_updates(str(updates), q.schema))
    stats = drive(view, records, epoch_size=EPOCH, on_delta=on_delta)
    steady = stats.updates - warm_epochs * EPOCH
    secs = marks[stats.epochs] - marks[warm_epochs]
    steady_rows = sum(n for e, n in rows.items() if e > warm_epochs)
    return {"steady_updates": steady, "steady_s": secs, "us_per_update": 1e6 * secs / steady,
            "state_entries": view.state_entries(),
            "delta_rows_per_epoch": steady_rows / (stats.epochs - warm_epochs)}


def run_flink(query: Path, updates: Path, warm_epochs: int, parallelism: int,
              directory: Path) -> dict[str, Any]:
    return run_cli("flink", query, updates, warm_epochs, parallelism, directory)


def read_phases(prefix: Path, warm_epochs: int) -> dict[str, float]:
    """The Flink partitions' phase logs (``IVMFLOW_FLINK_PHASES``) over the steady
    epochs: per epoch, the milliseconds of engine, write-back and sinks, summed over the
    partitions, and the state entries put and removed."""
    per_epoch = {e: v + [0.0] * (6 - len(v))
                 for e, v in read_phase_logs(prefix).items() if e > warm_epochs}
    n = len(per_epoch) or 1
    sums = [sum(v[i] for v in per_epoch.values()) for i in range(6)]
    return {"engine_ms": 1e3 * sums[0] / n, "write_back_ms": 1e3 * sums[1] / n,
            "sink_ms": 1e3 * sums[2] / n, "puts": sums[3] / n, "removes": sums[4] / n,
            "epochs": len(per_epoch)}


def run_cli(runner: str, query: Path, updates: Path, warm_epochs: int, parallelism: int,
            directory: Path) -> dict[str, Any]:
    """``ivmflow run --runner RUNNER`` in a subprocess, from the update file to a delta
    file, timed between delta-file commits (start-up and warm-up left out). A Flink run
    also logs its phases per epoch (``IVMFLOW_FLINK_PHASES``, see :func:`read_phases`)."""
    deltas = directory / f"{runner}-{updates.stem}-p{parallelism}.csv"
    ckpt = directory / f"ckpt-{updates.stem}-p{parallelism}"
    commit = Path(f"{deltas}.commit")
    extra = [] if runner == "local" else ["--parallelism", str(parallelism),
                                          "--checkpoint", str(ckpt)]
    phases = directory / f"phases-{runner}-{updates.stem}-p{parallelism}"
    # (checkpoints are discarded when the job finishes: sized while it runs)
    with CommitWatcher([commit], ckpt, tick=0.005, size_every=0.25) as watch:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "dataflow", "run", str(query), "--updates", str(updates),
             "--runner", runner, "--epoch", str(EPOCH), "--deltas", str(deltas), "-q",
             *extra],
            cwd=ROOT, capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), "IVMFLOW_FLINK_PHASES": str(phases)},
            timeout=3600,
        )
        total = time.perf_counter() - start
    if proc.returncode != 0:
        msg = f"{runner} run failed ({proc.returncode}): {proc.stderr[-2000:]}"
        raise RuntimeError(msg)
    marks, last = watch.marks, watch.last()
    steady_epochs = last - warm_epochs
    secs = marks[last] - marks[warm_epochs]
    size = max(watch.sizes)
    out = {"steady_updates": steady_epochs * EPOCH, "steady_s": secs,
           "us_per_update": 1e6 * secs / (steady_epochs * EPOCH), "run_s": total,
           "checkpoint_bytes": size, "deltas": deltas.read_text()}
    if runner == "flink":
        out["phases"] = read_phases(phases, warm_epochs)
    return out


def median_run(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median cost per update (the lower middle one of an even
    count), with every run's cost in ``runs_us``."""
    ordered = sorted(results, key=lambda r: r["us_per_update"])
    return {**ordered[(len(ordered) - 1) // 2],
            "runs_us": [round(r["us_per_update"], 2) for r in results]}


def slopes_by_runner(rows: list[dict[str, Any]], field: str = "us_per_update"
                     ) -> dict[str, float]:
    """Per (runner, parallelism): the log-log slope of ``field`` over the window W."""
    slopes = {}
    for key in sorted({(r["runner"], r["parallelism"]) for r in rows}):
        pts = [(r["window"], r[field]) for r in rows
               if (r["runner"], r["parallelism"]) == key]
        slopes[f"{key[0]} P={key[1]}"] = loglog_slope(pts)
    return slopes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", default="5000,40000,160000")
    ap.add_argument("--runners", default="local,flink")
    ap.add_argument("--parallelism", default="1,2")
    ap.add_argument("--steady-edges", type=int, default=STEADY_EDGES)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per setting, taking turns; the median run is reported")
    ap.add_argument("--quick", action="store_true", help="small windows, for a smoke test")
    ap.add_argument("--query", choices=sorted(QUERIES), default="2hop",
                    help="2hop: the GROUP BY COUNT of 2-paths; 3star: of a path and an "
                    "in-edge at its start (a root over two children)")
    ap.add_argument("--out", default=str(RESULTS / "runner_state"))
    args = ap.parse_args(argv)
    windows = [2000, 4000] if args.quick else [int(w) for w in args.windows.split(",")]
    steady_edges = 2000 if args.quick else args.steady_edges
    runners = args.runners.split(",")
    pars = [int(p) for p in args.parallelism.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="ivmflow-statebench-"))
    sql = QUERIES[args.query]
    rows: list[dict[str, Any]] = []
    for w in windows:
        updates, query, warm = window_files(w, steady_edges, tmp, sql, EPOCH)
        reference = None
        if "flink" in runners:
            reference = subprocess.run(
                [sys.executable, "-m", "dataflow", "run", str(query), "--updates",
                 str(updates), "--epoch", str(EPOCH), "-q"], cwd=ROOT, capture_output=True,
                text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
        # Every setting runs --repeat times, the settings taking turns (drift of the
        # machine's speed spreads over all of them); the median run is reported.
        runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for i in range(args.repeat):
            rep = tmp / f"w{w}-run{i}"
            rep.mkdir()  # fresh checkpoint directories: a second run must not resume
            runs.setdefault(("local", 1), []).append(run_local(query, updates, warm))
            if reference is None:
                continue
            # The local runner the way the Flink run is measured: the same update file
            # parsed, the same delta file written and committed per epoch, the same
            # clock (the engine-only "local" row leaves parsing and output out).
            e2e = run_cli("local", query, updates, warm, 1, rep)
            if e2e.pop("deltas") != reference:
                raise SystemExit(f"local CLI W={w}: deltas differ from stdout's")
            e2e.pop("checkpoint_bytes", None)
            runs.setdefault(("local-cli", 1), []).append(e2e)
            for p in pars:
                res = run_flink(query, updates, warm, p, rep)
                if res.pop("deltas") != reference:
                    msg = f"flink P={p} W={w}: deltas differ from the local runner's"
                    raise SystemExit(msg)
                runs.setdefault(("flink", p), []).append(res)
        picked = {key: median_run(results) for key, results in runs.items()}
        local = picked["local", 1]
        rows.append({"runner": "local", "parallelism": 1, "window": w, **local})
        print(f"W={w} local: {local['us_per_update']:.1f} us/update", flush=True)
        if reference is None:
            continue
        e2e = picked["local-cli", 1]
        rows.append({"runner": "local-cli", "parallelism": 1, "window": w, **e2e})
        print(f"W={w} local, end to end (file in, delta file out): "
              f"{e2e['us_per_update']:.1f} us/update", flush=True)
        for p in pars:
            res = picked["flink", p]
            rows.append({"runner": "flink", "parallelism": p, "window": w, **res,
                         "ratio_to_local": res["us_per_update"] / local["us_per_update"],
                         "ratio_to_local_cli": res["us_per_update"] / e2e["us_per_update"]})
            print(f"W={w} flink P={p}: {res['us_per_update']:.1f} us/update "
                  f"({rows[-1]['ratio_to_local']:.1f}x the local engine, "
                  f"{rows[-1]['ratio_to_local_cli']:.1f}x the local runner end to end), "
                  f"checkpoint "
                  f"{res['checkpoint_bytes'] / 2**20:.1f} MiB", flush=True)
    # An epoch's net change is not the same at every W: at a small W its 1000 updates
    # hit fewer distinct nodes, so more of them coalesce (fewer delta rows and written
    # entries per epoch). Cost per delta row divides that out.
    rows_per_epoch = {r["window"]: r["delta_rows_per_epoch"] for r in rows
                      if r["runner"] == "local"}
    for r in rows:
        r["us_per_delta_row"] = r["us_per_update"] * EPOCH / rows_per_epoch[r["window"]]
    slopes = slopes_by_runner(rows)
    slopes_per_row = slopes_by_runner(rows, "us_per_delta_row")
    print()
    print("| runner | P | W | us/update (steady) | x local engine | x local end to end "
          "| checkpoint MiB | state entries |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['ratio_to_local']:.1f}" if "ratio_to_local" in r else "-"
        ratio_cli = f"{r['ratio_to_local_cli']:.1f}" if "ratio_to_local_cli" in r else "-"
        ck = f"{r['checkpoint_bytes'] / 2**20:.1f}" if "checkpoint_bytes" in r else "-"
        ent = str(r.get("state_entries", "-"))
        print(f"| {r['runner']} | {r['parallelism']} | {r['window']} | "
              f"{r['us_per_update']:.1f} | {ratio} | {ratio_cli} | {ck} | {ent} |")
    print()
    for k, v in slopes.items():
        print(f"log-log slope of steady us/update vs W, {k}: {v:.2f} "
              f"(per delta row: {slopes_per_row[k]:.2f})")
    print()
    print("Steady epoch, phase by phase (Flink partitions' own clocks, summed over them):")
    print("| P | W | delta rows/epoch | engine ms | write-back ms | sink or emit ms "
          "| entries put | removed | us/delta row |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ph = r.get("phases")
        if ph:
            print(f"| {r['parallelism']} | {r['window']} | {rows_per_epoch[r['window']]:.0f} "
                  f"| {ph['engine_ms']:.1f} | {ph['write_back_ms']:.1f} | {ph['sink_ms']:.1f} "
                  f"| {ph['puts']:.0f} | {ph['removes']:.0f} | {r['us_per_delta_row']:.1f} |")
    out = Path(args.out)
    result_record("runner_state", rows, command=command_line("bench.runner_state_bench", argv),
                  extra={"query": sql, "epoch": EPOCH, "steady_edges": steady_edges,
                         "repeat": args.repeat, "slopes": slopes,
                         "slopes_per_delta_row": slopes_per_row},
                  out=out.with_suffix(".json"), table=False)
    plot_slopes(rows, slopes, out.with_suffix(".png"), "live window W (edges)",
                "2-hop GROUP BY COUNT, epochs of 1000: cost vs state size")
    return 0


def plot_slopes(rows: list[dict[str, Any]], slopes: dict[str, float], path: Path,
                xlabel: str, title: str) -> None:
    """Steady cost per update against the window, a line per runner and P with its
    slope (``slopes`` as :func:`slopes_by_runner` gives them)."""
    made = subplots(figsize=(6, 4))
    if made is None:
        return
    fig, ax = made
    for key in sorted({(r["runner"], r["parallelism"]) for r in rows}):
        pts = sorted((r["window"], r["us_per_update"]) for r in rows
                     if (r["runner"], r["parallelism"]) == key)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                label=f"{key[0]} P={key[1]} (slope {slopes[f'{key[0]} P={key[1]}']:.2f})")
    loglog(ax, xlabel, "steady cost per update (us)", title)
    save(fig, path)


if __name__ == "__main__":
    sys.exit(main())
