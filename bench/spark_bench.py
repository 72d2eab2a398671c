"""Spark runner benchmark: per-micro-batch latency (median, p95), updates/s for
micro-batch sizes 1k, 10k and 100k updates, and the fixed per-batch overhead, next to
the local runner on the same stream in the same process run.

    python -m bench.spark_bench [--edges 40000] [--query star_count] [--quick]
    python -m bench.spark_bench --parts overhead --parallelism 1 2 [--tag _before]

Parts: ``state`` (steady cost per update against the live window W, local next to spark:
spark_state.json), ``batches`` (latency and throughput per batch size:
spark_runner.json), ``overhead`` (median per-batch durations of tiny batches, by Spark's
phase: spark_overhead<tag>.json; copy the script into an older checkout to measure
that checkout's overhead the same way). Each prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, command_line, dir_bytes, percentile, result_record
from bench.harness.brokers import kafka_bootstrap
from bench.harness.streams import window_files
from bench.workloads import make_workload
from connectors.files import CollectingSink
from core.epochs import EpochCursor
from core.records import format_update
from dataflow.api import compile_query
from dataflow.circuit.drive import DriveStats
from dataflow.distributed.partitions import PartitionLayout, tag_records


@dataclass
class Outputs:
    deltas: Any
    snapshots: Any = None
    resume_epoch: int = 0
    resume_snapshot: int = 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    from dataflow.runners.spark.job import SparkJob, spark_session

    wl = make_workload(args.query, args.edges, seed=1)
    tmp = Path(tempfile.mkdtemp(prefix="ivmflow-sparkbench-"))
    path = tmp / "updates.csv"
    path.write_text("\n".join(format_update(u) for u in wl.updates) + "\n")
    q = compile_query(wl.sql)
    n = len(wl.updates)

    t = time.perf_counter()
    local = list(q.run(wl.updates, epoch_size=args.epoch))
    local_s = time.perf_counter() - t
    local_rows = sum(len(d.rows) for d in local)
    results: dict[str, Any] = {
        "query": args.query, "edges": args.edges, "updates": n, "epoch": args.epoch,
        "local": {"seconds": local_s, "updates_per_s": n / local_s, "delta_rows": local_rows},
        "spark": [],
    }
    layout = PartitionLayout(q, 2)
    tagged_per_update = len(
        tag_records(layout, EpochCursor().number(wl.updates, args.epoch, final=True))) / n
    spark_session(None, 2)  # start the JVM once, outside the timings
    sizes = [int(s) for s in args.batch_sizes]
    for size in [args.overhead_batch, *sizes]:
        sink = CollectingSink()
        job = SparkJob(q, str(path), epoch_size=args.epoch, parallelism=2,
                       checkpoint=str(tmp / f"ckpt-{size}"), batch_lines=size)
        t = time.perf_counter()
        if size == args.overhead_batch:
            # fixed overhead: a short prefix of the stream in tiny batches
            small = tmp / "prefix.csv"
            small.write_text("\n".join(format_update(u) for u in wl.updates[: size * 20]) + "\n")
            job.updates = str(small)
        job.run(Outputs(sink))
        wall = time.perf_counter() - t
        batches = [p for p in job.progress if int(p.get("numInputRows", 0)) > 0]
        durations = [float(p["durationMs"]["triggerExecution"]) for p in batches]
        # Source rows are tagged rows (one per partition and self-join copy: the source
        # tags them itself); throughput counts updates. Spark keeps the last 100
        # progress reports only, so the updates are taken from their rows.
        rows_in = sum(int(p["numInputRows"]) for p in batches)
        updates = rows_in / tagged_per_update
        rec = {
            "batch_lines": size, "wall_s": wall, "batches": len(batches),
            "median_batch_ms": statistics.median(durations) if durations else None,
            "p95_batch_ms": percentile(durations, 0.95, "round"), "input_rows": rows_in,
            "updates_per_s": updates / (sum(durations) / 1000) if durations else None,
            "delta_rows": sum(len(d.rows) for d in sink.deltas),
            "overhead_probe": size == args.overhead_batch,
        }
        if size != args.overhead_batch:
            same = [(d.epoch, d.rows) for d in sink.deltas if d.rows] == [
                (d.epoch, d.rows) for d in local if d.rows]
            rec["matches_local"] = same
            if not same:
                raise SystemExit(f"spark deltas differ from local at batch size {size}")
        results["spark"].append(rec)
        print(f"  batch {size:>7}: {len(batches):4d} batches, "
              f"median {rec['median_batch_ms']:.0f} ms, p95 {rec['p95_batch_ms']:.0f} ms, "
              f"{rec['updates_per_s'] or 0:,.0f} updates/s", flush=True)
    return results


class MarkingSink(CollectingSink):
    """Collects the deltas and notes when each epoch reached the sink."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: dict[int, float] = {}

    def write_epoch(self, delta: Any) -> None:
        super().write_epoch(delta)
        self.marks[delta.epoch] = time.perf_counter()


def run_state(args: argparse.Namespace) -> dict[str, Any]:
    """Steady cost per update vs the live window W (state size), local vs spark."""
    from bench.runner_state_bench import EPOCH, SQL, run_local, slopes_by_runner
    from dataflow.runners.spark.job import SparkJob, spark_session

    tmp = Path(tempfile.mkdtemp(prefix="ivmflow-sparkstate-"))
    rows: list[dict[str, Any]] = []
    spark_session(None, 2)  # start the JVM once, outside the timings
    for w in args.windows:
        updates, query, warm = window_files(w, args.steady_edges, tmp, SQL, EPOCH)
        local = run_local(query, updates, warm)
        rows.append({"runner": "local", "parallelism": 1, "window": w, **local})
        print(f"W={w} local: {local['us_per_update']:.1f} us/update", flush=True)
        q = compile_query(query.read_text())
        reference = [(d.epoch, d.rows) for d in q.run(
            _read(updates, q), epoch_size=EPOCH) if d.rows]
        for par in args.parallelism:
            sink = MarkingSink()
            ckpt = tmp / f"ckpt-w{w}-p{par}"
            job = SparkJob(q, str(updates), epoch_size=EPOCH, parallelism=par,
                           checkpoint=str(ckpt), batch_lines=args.state_batch)
            t = time.perf_counter()
            job.run(Outputs(sink))
            wall = time.perf_counter() - t
            if [(d.epoch, d.rows) for d in sink.deltas if d.rows] != reference:
                raise SystemExit(f"spark P={par} W={w}: deltas differ from the local runner's")
            last = max(sink.marks)
            steady = (last - warm) * EPOCH
            secs = sink.marks[last] - sink.marks[warm]
            batches = [p for p in job.progress if int(p.get("numInputRows", 0)) > 0]
            rec = {"runner": "spark", "parallelism": par, "window": w, "run_s": wall,
                   "steady_updates": steady, "steady_s": secs,
                   "us_per_update": 1e6 * secs / steady,
                   "median_batch_ms": statistics.median(
                       float(p["durationMs"]["triggerExecution"]) for p in batches),
                   "checkpoint_bytes": dir_bytes(ckpt / "state"),
                   "state_entries": local["state_entries"]}
            rec["ratio_to_local"] = rec["us_per_update"] / local["us_per_update"]
            rows.append(rec)
            print(f"W={w} spark P={par}: {rec['us_per_update']:.1f} us/update "
                  f"({rec['ratio_to_local']:.1f}x local), state "
                  f"{rec['checkpoint_bytes'] / 2**20:.1f} MiB", flush=True)
    slopes = slopes_by_runner(rows)
    return {"epoch": EPOCH, "batch_lines": args.state_batch,
            "steady_edges": args.steady_edges, "rows": rows, "slopes": slopes}


def run_overhead(args: argparse.Namespace) -> dict[str, Any]:
    """The fixed cost of a micro-batch: a short prefix of the stream in batches of
    ``--overhead-batch`` lines (the engine's own work is negligible there), per P; the
    median of Spark's per-batch durations (the first two batches, which plan and warm
    up, are left out)."""
    from dataflow.runners.spark.job import SparkJob, spark_session

    wl = make_workload(args.query, 20000, seed=1)
    tmp = Path(tempfile.mkdtemp(prefix="ivmflow-sparkovh-"))
    prefix = tmp / "prefix.csv"
    prefix.write_text("\n".join(format_update(u) for u in
                                wl.updates[: args.overhead_batch * 20]) + "\n")
    q = compile_query(wl.sql)
    rows = []
    with contextlib.ExitStack() as stack:
        bootstrap = (stack.enter_context(kafka_bootstrap(args.bootstrap))
                     if "kafka" in args.sinks else "")
        for par in args.parallelism:
            spark_session(None, par)
            for sink_kind in args.sinks:
                ckpt = tmp / f"ckpt-p{par}-{sink_kind}"
                job = SparkJob(q, str(prefix), epoch_size=args.epoch, parallelism=par,
                               checkpoint=str(ckpt), batch_lines=args.overhead_batch)
                if sink_kind == "kafka":
                    from connectors.kafka import KafkaDeltaSink, parse_kafka_url, read_deltas

                    topic = f"ovh-{uuid.uuid4().hex[:8]}"
                    endpoint = parse_kafka_url(f"kafka://{bootstrap}/{topic}")
                    ksink = KafkaDeltaSink(endpoint, q.output_columns,
                                           transactional_id=f"txn-{topic}")
                    stats = DriveStats()
                    job.run(Outputs(ksink), stats)
                    ksink.close()
                    if len(read_deltas(endpoint)) != stats.delta_rows:
                        raise SystemExit(f"P={par}: the topic does not hold the run's deltas")
                else:
                    job.run(Outputs(CollectingSink()))
                batches = [p for p in job.progress if int(p.get("numInputRows", 0)) > 0][2:]
                parts = sorted({k for p in batches for k in p["durationMs"]})
                rec = {"parallelism": par, "sink": sink_kind,
                       "batch_lines": args.overhead_batch, "batches": len(batches),
                       "median_ms": {k: statistics.median(float(p["durationMs"].get(k, 0))
                                                          for p in batches) for k in parts}}
                rows.append(rec)
                med = rec["median_ms"]
                print(f"P={par} {sink_kind}: median batch {med.get('triggerExecution', 0):.0f} "
                      f"ms ({', '.join(f'{k} {v:.0f}' for k, v in med.items())})", flush=True)
    return {"query": args.query, "rows": rows}


def _read(path: Path, q: Any) -> list[Any]:
    from connectors.files import read_updates

    return list(read_updates(str(path), q.schema))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--query", default="star_count")
    p.add_argument("--edges", type=int, default=60000)
    p.add_argument("--epoch", type=int, default=1000)
    p.add_argument("--batch-sizes", nargs="+", default=["1000", "10000", "100000"])
    p.add_argument("--overhead-batch", type=int, default=10)
    p.add_argument("--windows", type=int, nargs="+", default=[5000, 40000, 160000],
                   help="live windows W for the cost-vs-state part")
    p.add_argument("--parallelism", type=int, nargs="+", default=[1, 2])
    p.add_argument("--steady-edges", type=int, default=10000,
                   help="edges after the window fills (each: an insert and a delete)")
    p.add_argument("--state-batch", type=int, default=10000,
                   help="micro-batch size (lines) of the cost-vs-state part")
    p.add_argument("--parts", nargs="+", default=["state", "batches"],
                   choices=["state", "batches", "overhead"])
    p.add_argument("--sinks", nargs="+", default=["file"], choices=["file", "kafka"],
                   help="the overhead part's delta sinks (kafka: written from an executor)")
    p.add_argument("--bootstrap", help="a Kafka broker for --sinks kafka (default: start "
                   "a noida-db process, tests/kafka_broker.py)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--tag", default="", help="suffix of the overhead part's JSON name")
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    if args.quick:
        args.edges, args.batch_sizes = 2000, ["500", "2000"]
        args.windows, args.steady_edges, args.parallelism = [2000, 4000], 2000, [2]
        args.state_batch = 500  # the steady phase must span several batches
    out = Path(args.out)
    command = command_line("bench.spark_bench", argv)
    suffix = "_quick" if args.quick else ""
    if "state" in args.parts:
        from bench.runner_state_bench import plot_slopes

        state = run_state(args)
        rows = state.pop("rows")
        lines = ["", "| runner | P | W | us/update (steady) | x local | state MiB |",
                 "|---|---|---|---|---|---|"]
        for r in rows:
            ratio = f"{r.get('ratio_to_local', 1.0):.1f}"
            mib = f"{r['checkpoint_bytes'] / 2**20:.1f}" if "checkpoint_bytes" in r else "-"
            lines.append(f"| {r['runner']} | {r['parallelism']} | {r['window']} | "
                         f"{r['us_per_update']:.1f} | {ratio} | {mib} |")
        lines += [f"log-log slope of steady us/update vs W, {k}: {v:.2f}"
                  for k, v in state["slopes"].items()]
        result_record("spark_state", rows, command=command, extra=state,
                      out=out / f"spark_state{suffix}.json", table="\n".join(lines))
        plot_slopes(rows, state["slopes"], out / f"spark_state{suffix}.png",
                    "live window W (edges)",
                    f"Spark runner, 2-hop GROUP BY COUNT, batches of {state['batch_lines']}")
    if "overhead" in args.parts:
        ovh = run_overhead(args)
        result_record("spark_overhead", ovh.pop("rows"), command=command, extra=ovh,
                      out=out / f"spark_overhead{args.tag}{suffix}.json", table=False)
    if "batches" not in args.parts:
        return 0
    res = run(args)
    loc = res["local"]
    print(f"\n{'runner':8s} {'batch':>7s} {'batches':>7s} {'median ms':>9s} {'p95 ms':>8s} "
          f"{'upd/s':>10s} {'local/x':>8s}")
    print(f"{'local':8s} {'-':>7s} {'-':>7s} {'-':>9s} {'-':>8s} {loc['updates_per_s']:>10,.0f} "
          f"{1.0:>8.2f}")
    for r in res["spark"]:
        ups = r["updates_per_s"] or 0.0
        ratio = loc["updates_per_s"] / ups if ups else float("nan")
        label = f"{r['batch_lines']}*" if r["overhead_probe"] else str(r["batch_lines"])
        print(f"{'spark':8s} {label:>7s} {r['batches']:>7d} {r['median_batch_ms']:>9.0f} "
              f"{r['p95_batch_ms']:>8.0f} {ups:>10,.0f} {ratio:>8.1f}")
    print("* fixed-overhead probe: tiny batches, median batch time ~ per-batch overhead")
    name = "spark_runner_quick.json" if args.quick else "spark_runner.json"
    result_record("spark_runner", res.pop("spark"), command=command, extra=res,
                  out=out / name, table=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
