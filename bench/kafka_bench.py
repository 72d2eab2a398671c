"""Kafka in and out vs file in and out for the local runner (updates/s), same process run.

    python -m bench.kafka_bench [--edges 20000] [--query star_count] [--epoch-every 1000]
                                [--bootstrap 127.0.0.1:9092] [--repeat 3] [--quick]

The same update stream (a benchmark workload with a ``*`` marker every
``--epoch-every`` updates) runs through ``ivmflow run`` (in this process, ``main()``):

* ``file -> file``: update CSV in, delta CSV out (fsync per epoch, the default);
* ``kafka -> kafka``: the stream produced to a topic of 1 and of 3 partitions
  (``ivmflow produce``, timed separately), deltas to a topic (one transaction per epoch
  with the source offsets), ``--stop-at-end``;
* ``kafka replay``: the same Kafka run again: every epoch is already committed, so this is
  the restart cost (re-read and rebuild state, write nothing);
* ``kafka -> file`` and ``file -> kafka``: Kafka on one side only (where the time goes).

Without ``--bootstrap`` a ``noida-db`` broker process is started on a free loopback port
(tests/kafka_broker.py).  Writes bench/results/kafka_local.json (``_quick`` with
``--quick``) and prints a table; the ratios are Kafka over file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, command_line, result_record
from bench.harness.brokers import kafka_bootstrap
from bench.workloads import make_workload
from connectors.kafka import parse_kafka_url, read_deltas
from core.records import format_update
from dataflow.cli import main


def _timed(argv: list[str]) -> float:
    t = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - t
    if code != 0:
        msg = f"ivmflow {' '.join(argv)} exited {code}"
        raise RuntimeError(msg)
    return elapsed


def run(args: argparse.Namespace) -> dict[str, Any]:
    wl = make_workload(args.query, args.edges, seed=1)
    tmp = Path(tempfile.mkdtemp(prefix="ivmflow-kafkabench-"))
    q, u = tmp / "q.sql", tmp / "updates.csv"
    q.write_text(wl.sql + "\n")
    lines = []
    for i, upd in enumerate(wl.updates, 1):
        lines.append(format_update(upd))
        if i % args.epoch_every == 0:
            lines.append("*")
    lines.append("*")
    u.write_text("\n".join(lines) + "\n")
    n = len(wl.updates)
    rows: dict[str, list[float]] = {}
    produce: dict[str, list[float]] = {}
    delta_rows = 0
    with kafka_bootstrap(args.bootstrap) as bootstrap:
        for rep in range(args.repeat):
            out = tmp / f"deltas-{rep}.csv"
            rows.setdefault("file -> file", []).append(
                _timed(["run", str(q), "--updates", str(u), "--deltas", str(out), "-q"]))
            delta_rows = len(out.read_text().splitlines()) - 1
            for parts in (1, 3):
                tag = uuid.uuid4().hex[:8]
                up = f"kafka://{bootstrap}/bench-up-{tag}"
                dl = f"kafka://{bootstrap}/bench-deltas-{tag}"
                produce.setdefault(f"produce ({parts} partition{'s' * (parts > 1)})", []
                                   ).append(_timed(["produce", str(u), up, "--partitions",
                                                    str(parts), "-q"]))
                cmd = ["run", str(q), "--updates", up, "--deltas", dl, "--stop-at-end", "-q"]
                rows.setdefault(f"kafka -> kafka ({parts} partition{'s' * (parts > 1)})",
                                []).append(_timed(cmd))
                if parts == 3:
                    rows.setdefault("kafka replay (3 partitions, all committed)", []).append(
                        _timed(cmd))
                    # Where the time goes: Kafka only in, Kafka only out.
                    rows.setdefault("kafka -> file (3 partitions)", []).append(_timed(
                        ["run", str(q), "--updates", up, "--deltas", str(tmp / f"kf-{rep}.csv"),
                         "--stop-at-end", "-q"]))
                    rows.setdefault("file -> kafka", []).append(_timed(
                        ["run", str(q), "--updates", str(u), "--deltas", f"{dl}-f", "-q"]))
                    got = len(read_deltas(parse_kafka_url(dl)))
                    if got != delta_rows:
                        msg = f"Kafka run wrote {got} delta rows, the file run {delta_rows}"
                        raise RuntimeError(msg)
    base = statistics.median(rows["file -> file"])
    table = [
        {
            "run": name,
            "seconds_median": statistics.median(ts),
            "seconds_all": ts,
            "updates_per_s": n / statistics.median(ts),
            "ratio_vs_file": statistics.median(ts) / base,
        }
        for name, ts in {**rows, **produce}.items()
    ]
    return {
        "query": args.query, "edges": args.edges, "updates": n,
        "epoch_every": args.epoch_every, "epochs": n // args.epoch_every + 1,
        "delta_rows": delta_rows, "repeat": args.repeat, "runs": table,
        "note": "seconds of one `ivmflow run` (compile, connect, read, maintain, write); "
                "ratio_vs_file = seconds / seconds of file -> file (lower is faster)",
    }


def format_table(res: dict[str, Any]) -> str:
    lines = [f"{res['query']}: {res['updates']} updates, {res['epochs']} epochs, "
             f"{res['delta_rows']} delta rows, median of {res['repeat']}",
             f"{'run':<44}{'seconds':>10}{'updates/s':>12}{'x file':>9}"]
    for r in res["runs"]:
        lines.append(f"{r['run']:<44}{r['seconds_median']:>10.2f}{r['updates_per_s']:>12.0f}"
                     f"{r['ratio_vs_file']:>9.2f}")
    return "\n".join(lines)


def main_bench(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", type=int, default=20_000)
    ap.add_argument("--query", default="star_count")
    ap.add_argument("--epoch-every", type=int, default=1000)
    ap.add_argument("--bootstrap", default=None, help="use this broker (default: start one)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2000 edges, one repetition")
    args = ap.parse_args(argv)
    if args.quick:
        args.edges, args.repeat, args.epoch_every = 2000, 1, 200
    res = run(args)
    table = format_table(res)
    result_record("kafka_local", res.pop("runs"), command=command_line("bench.kafka_bench", argv),
                  extra=res, table=table,
                  out=RESULTS / ("kafka_local_quick.json" if args.quick else "kafka_local.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main_bench())
