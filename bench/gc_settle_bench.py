"""What the cyclic garbage collector costs an epoch, with and without the run loop's
heap settling (``core.memory.HeapSettler``: a collection and ``gc.freeze`` after an epoch of at
least 100k updates, the load).

A query's stream (a load, then refresh updates) goes through ``ivmflow run``'s loop
(``dataflow.circuit.drive.drive``), the load as one epoch and the refresh in epochs
of ``--epoch`` updates, once with
``IVMFLOW_GC_FREEZE=1`` (the default) and once with ``0``, each in its own process, the
two side by side in one run of this script. Per epoch after the load: its wall time
from its first record read to its delta, and the collector's own time inside it
(``gc.callbacks``); the settles' time is counted apart (they run after a delta is out,
before the next record is read).

    python -m bench.gc_settle_bench --data bench/.cache/tpcds_sf1_r2_t200_d1_u100/by_query/q47

Prints a table and writes ``bench/results/gc_settle.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import command_line, result_record

ROOT = Path(__file__).resolve().parent.parent


def worker(data: Path, query: str, epoch: int) -> dict[str, Any]:
    """One run in this process: per-epoch times of the refresh epochs."""
    import gc

    import dataflow.circuit.drive as drive_module
    from connectors.files import read_updates
    from core.memory import HeapSettler
    from core.records import EPOCH_END, EpochEnd
    from dataflow.api import compile_query

    gc_time = [0.0, 0.0]  # [collector time inside the current epoch, its start]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_time[1] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_time[1]

    settles = [0, 0.0]
    real = HeapSettler

    class Timed(real):  # type: ignore[misc, valid-type]
        def epoch_closed(self, updates: int) -> bool:
            t = time.perf_counter()
            done = bool(super().epoch_closed(updates))
            if done:
                settles[0] += 1
                settles[1] += time.perf_counter() - t
            return done

    drive_module.HeapSettler = Timed  # type: ignore[misc]
    q = compile_query((data / "queries" / f"{query}.sql").read_text())
    epochs: list[tuple[float, float, int]] = []
    start = [0.0]
    loaded = [False]

    def records() -> Any:
        # (the load is one epoch, up to the stream's first mark, as `ivmflow run` takes
        # it; then an epoch mark after every `epoch` refresh updates)
        fresh, after_load, n = True, False, 0
        for rec in read_updates(str(data / "updates.csv"), q.schema):
            if fresh:
                start[0], gc_time[0], fresh = time.perf_counter(), 0.0, False
            if isinstance(rec, EpochEnd):
                after_load = True
                yield rec
            else:
                yield rec
                n += after_load
                if after_load and n % epoch == 0:
                    yield EPOCH_END
            if start[0] == 0.0:
                fresh = True

    def on_delta(d: Any) -> None:
        if loaded[0]:
            epochs.append((time.perf_counter() - start[0], gc_time[0], len(d.rows)))
        loaded[0] = loaded[0] or d.closed_by_marker
        start[0] = 0.0

    gc.callbacks.append(on_gc)
    t0 = time.perf_counter()
    drive_module.drive(q.maintain(), records(), epoch_size=None, on_delta=on_delta)
    total = time.perf_counter() - t0
    walls = sorted(e[0] for e in epochs)

    def pct(p: float) -> float:
        return walls[min(len(walls) - 1, int(p * len(walls)))] * 1000 if walls else 0.0

    return {"epochs": len(epochs), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
            "max_ms": walls[-1] * 1000 if walls else 0.0,
            "gc_in_epochs_ms": sum(e[1] for e in epochs) * 1000,
            "worst_gc_in_an_epoch_ms": max((e[1] for e in epochs), default=0.0) * 1000,
            "settles": settles[0], "settle_s": settles[1], "total_s": total}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a folder with queries/ and updates.csv "
                    "(the load, an epoch mark, the refresh)")
    ap.add_argument("--query", default=None, help="the query (default: the folder's name)")
    ap.add_argument("--epoch", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gc_settle.json"))
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    data = Path(args.data)
    query = args.query or data.name
    if args.worker:
        print(json.dumps(worker(data, query, args.epoch)))
        return
    rows = []
    for setting in ("1", "0"):
        env = dict(os.environ, IVMFLOW_GC_FREEZE=setting)
        out = subprocess.run([sys.executable, "-m", "bench.gc_settle_bench", "--data",
                              str(data), "--query", query, "--epoch", str(args.epoch),
                              "--worker", setting, "x"], env=env, cwd=ROOT, check=True,
                             capture_output=True, text=True)
        row = {"query": query, "settling": "on" if setting == "1" else "off",
               **json.loads(out.stdout.strip().splitlines()[-1])}
        rows.append(row)
        print(f"settling {row['settling']}: done in {row['total_s']:.0f} s", flush=True)
    result_record("gc_settle", rows, command=command_line("bench.gc_settle_bench", argv),
                  out=Path(args.out))


if __name__ == "__main__":
    main()
