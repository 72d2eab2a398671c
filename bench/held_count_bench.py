"""What a count view costs with its counts held by its reader (``HeldCount``,
docs/architecture.md, "What a view keeps") next to the view keeping its own, on TPC-H
queries whose ``EXISTS`` correlated by ``<>`` becomes count views (Q21).

Each run is its own process (resident memory is per process), the two ways
alternating, ``--repeat`` times each: the load as one epoch, then the refresh stream
in epochs of ``--epoch`` updates. Per run: resident MiB after the load (over the
process before it) and bytes per base tuple, peak MiB, refresh p50 ms per epoch and
process CPU per update; and a digest of every epoch's delta, which must be the same
both ways (the run fails otherwise).

    python -m bench.held_count_bench [--sf 0.1] [--queries q21] [--repeat 2]

Prints a table and writes ``bench/results/held_count.json``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, command_line, result_record

WAYS = ("held", "own")
"""``held``: the counts in the reader (the default); ``own``: each view keeps its own."""


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run_once(data: Path, name: str, way: str, epoch: int) -> dict[str, Any]:
    """One run in this process: load, then the refresh in epochs of ``epoch``."""
    from connectors.files import read_updates
    from core.records import Update
    from dataflow.api import compile_query
    from dataflow.circuit.heldcount import HeldCount
    from dataflow.circuit.views import DagView

    q = compile_query((data / "queries" / f"{name}.sql").read_text(), source_name=name)
    if not hasattr(q, "inner"):
        raise SystemExit(f"{name} has no inner views: nothing to compare")
    view = DagView(q, 1, None, True, None, shared_counts=way == "held")  # type: ignore[arg-type]
    held = sum(isinstance(node, HeldCount) for _, node in view.views)
    gc.collect()
    before = _rss_mib()
    records = iter(read_updates(str(data / "updates.csv"), q.schema))
    loaded = 0
    digest = hashlib.sha256()

    def close() -> None:
        rows = sorted(view.end_epoch().rows, key=repr)
        digest.update(repr(rows).encode())

    for rec in records:
        if not isinstance(rec, Update):
            break
        view.apply(rec)
        loaded += 1
    close()
    gc.collect()
    state = _rss_mib() - before
    gc.freeze()
    times: list[float] = []
    batch: list[Update] = []
    updates = 0
    cpu = time.process_time()
    for rec in records:
        if not isinstance(rec, Update):
            continue  # (epochs of a fixed size: the stream's own bounds are not kept)
        batch.append(rec)
        if len(batch) == epoch:
            t = time.perf_counter()
            for u in batch:
                view.apply(u)
            close()
            times.append(time.perf_counter() - t)
            updates += len(batch)
            batch = []
    cpu = time.process_time() - cpu
    return {"query": name, "way": way, "held_views": held, "views": len(view.views),
            "load_updates": loaded, "state_mib": round(state, 1),
            "bytes_per_base_tuple": round(state * 2**20 / loaded, 1),
            "peak_mib": round(_peak_mib(), 1), "epochs": len(times),
            "p50_ms": round(statistics.median(times) * 1e3, 3) if times else None,
            "cpu_us_per_update": round(cpu / updates * 1e6, 2) if updates else None,
            "deltas_sha256": digest.hexdigest()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--refresh-pairs", type=int, default=8)
    ap.add_argument("--queries", default="q21")
    ap.add_argument("--epoch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "held_count.json"))
    ap.add_argument("--worker", nargs=4, metavar=("DATA", "QUERY", "WAY", "EPOCH"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        data, name, way, size = args.worker
        print(json.dumps(run_once(Path(data), name, way, int(size))))
        return
    from bench.tpch_bench import ensure_data

    data = ensure_data(args.sf, args.refresh_pairs)
    runs: list[dict[str, Any]] = []
    for name in args.queries.split(","):
        for _ in range(args.repeat):
            for way in WAYS:
                out = subprocess.run(
                    [sys.executable, "-m", "bench.held_count_bench", "--worker", str(data),
                     name, way, str(args.epoch)], check=True, capture_output=True, text=True)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = []
    print(f"{'query':6} {'way':5} {'B/tuple':>8} {'state MiB':>10} {'peak MiB':>9} "
          f"{'p50 ms':>8} {'cpu us/upd':>10}")
    for name in args.queries.split(","):
        mine = {way: [r for r in runs if r["query"] == name and r["way"] == way]
                for way in WAYS}
        digests = {r["deltas_sha256"] for r in mine["held"] + mine["own"]}
        if len(digests) != 1:
            raise SystemExit(f"{name}: the deltas differ between the two ways")
        summary: dict[str, Any] = {"query": name, "deltas": "same"}
        for way in WAYS:
            rs = mine[way]
            med = {k: statistics.median(r[k] for r in rs)
                   for k in ("bytes_per_base_tuple", "state_mib", "peak_mib", "p50_ms",
                             "cpu_us_per_update")}
            summary[way] = {**med, "held_views": rs[0]["held_views"], "runs": len(rs)}
            print(f"{name:6} {way:5} {med['bytes_per_base_tuple']:8.0f} "
                  f"{med['state_mib']:10.1f} {med['peak_mib']:9.1f} {med['p50_ms']:8.2f} "
                  f"{med['cpu_us_per_update']:10.2f}")
        for k in ("bytes_per_base_tuple", "peak_mib", "p50_ms", "cpu_us_per_update"):
            summary[f"{k}_held_over_own"] = round(summary["held"][k] / summary["own"][k], 3)
        print(f"{name:6} held/own: B/tuple {summary['bytes_per_base_tuple_held_over_own']}, "
              f"peak {summary['peak_mib_held_over_own']}, p50 {summary['p50_ms_held_over_own']}, "
              f"cpu/update {summary['cpu_us_per_update_held_over_own']}")
        rows.append(summary)
    result_record("held_count", rows, command=command_line("bench.held_count_bench", argv),
                  out=args.out, table=False, extra={"data": data.name, "runs": runs})


if __name__ == "__main__":
    main()
