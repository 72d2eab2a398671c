"""What an epoch of a DAG of views costs on the Flink runner as the state grows: a
TPC-H query that runs as keyed stages (default Q17: a correlated scalar subquery, a
grouped view read by the query) over ``ivmflow generate tpch`` streams at several
scale factors (state ~ SF), timed per stage slot and epoch
(``IVMFLOW_FLINK_PHASES``: engine and finalizer, write-back; entries put and removed).

The refresh epochs after the load are the steady part: each inserts and deletes
~0.1% of the orders with their lineitems (so their updates grow with SF too). Their
cost per update (summed over every stage) staying flat while the state grows 10x is
IVM's promise, O(changes) per epoch; a whole-state write or scan per epoch would grow
with the state.

    python bench/stage_cost_bench.py [--sfs 0.01,0.1] [--query q17] [--parallelism 1]

Prints a table and writes bench/results/stage_cost.json (``--out``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


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


def run(sf: float, query: str, parallelism: int, work: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    data = work / f"sf{sf}"
    subprocess.run([sys.executable, "-m", "dataflow", "generate", "tpch", "--sf", str(sf),
                    "--out", str(data), "--refresh-pairs", "2", "--seed", "0"],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    prefix = str(work / f"phases-sf{sf}")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dataflow", "run", str(data / "queries" / f"{query}.sql"),
                    "--updates", str(data / "updates.csv"), "--deltas", str(work / "d.csv"),
                    "--quiet", "--runner", "flink", "--parallelism", str(parallelism),
                    "--checkpoint", str(work / f"ckpt-{sf}")],
                   cwd=ROOT, env={**env, "IVMFLOW_FLINK_PHASES": prefix}, check=True)
    wall = time.perf_counter() - t0
    per_epoch: dict[int, list[float]] = {}
    for path in glob.glob(prefix + ".*.tsv"):
        for line in Path(path).read_text().splitlines():
            epoch, engine, write_back, _sink, puts, removes, _rows = line.split("\t")
            acc = per_epoch.setdefault(int(epoch), [0.0, 0.0, 0.0])
            acc[0] += float(engine)
            acc[1] += float(write_back)
            acc[2] += float(puts) + float(removes)
    updates = epoch_updates(data / "updates.csv")
    load = updates[0]
    steady = [e for e in sorted(per_epoch) if e >= 2]
    n = sum(updates[e - 1] for e in steady)
    engine = sum(per_epoch[e][0] for e in steady)
    written = sum(per_epoch[e][1] for e in steady)
    entries = sum(per_epoch[e][2] for e in steady)
    return {"sf": sf, "load_updates": load, "steady_epochs": len(steady), "steady_updates": n,
            "engine_us_per_update": 1e6 * engine / n, "write_back_us_per_update": 1e6 * written / n,
            "us_per_update": 1e6 * (engine + written) / n, "entries_per_update": entries / n,
            "load_entries": per_epoch.get(1, [0, 0, 0])[2], "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sfs", default="0.01,0.1")
    ap.add_argument("--query", default="q17")
    ap.add_argument("--parallelism", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/stage_cost")
    opts = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ivmflow-stage-cost-"))
    rows = [run(float(sf), opts.query, opts.parallelism, work) for sf in opts.sfs.split(",")]
    head = ("sf", "load_updates", "load_entries", "steady_updates", "engine_us_per_update",
            "write_back_us_per_update", "us_per_update", "entries_per_update", "wall_s")
    print(f"{opts.query} on flink P={opts.parallelism}: steady (refresh) epochs, all stages")
    print(" | ".join(head))
    for r in rows:
        print(" | ".join(f"{r[h]:.4g}" if isinstance(r[h], float) else str(r[h]) for h in head))
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    path = opts.out.with_suffix(".json")
    path.write_text(json.dumps({"query": opts.query, "runner": "flink",
                                "parallelism": opts.parallelism, "rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
