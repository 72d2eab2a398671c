"""Deterministic cost of the hot path: CPU instructions (valgrind callgrind) spent on
the crossover stream's timed updates, per system, for A/B comparisons and for ratios
against the first-order baseline on a machine whose clock varies by 10-50% from one
minute to the next.

    python -m bench.instructions --query hop4_bag --epoch 1000 --updates 10000
    python -m bench.instructions --root /tmp/old-checkout --query hop3_filter --epoch 1
    python -m bench.instructions --queries hop3_filter hop4_bag --epochs 1 10 100 1000 \
        --systems ivmflow ivmflow_native delta_ivm --out bench/results/instructions.json

The stream is :mod:`bench.crossover_bench`'s (W live edges warmed up untimed, then
alternating inserts and deletes); the systems are its systems. Each point runs twice
under callgrind, once with the warm-up only and once with the warm-up and ``--updates``
timed updates in epochs of ``--epoch``; the difference is the timed part's instruction
count (the same for the same checkout, inputs and Python, whatever else the machine
does). ``--root`` measures another checkout's engine with this checkout's bench code. The table
gives each system's instructions per update and, with ``delta_ivm`` among the systems,
its ratio over each ivmflow system. Instructions are not seconds (a cache miss costs
more than an add); they are the steady A/B signal. Needs valgrind (Debian package
``valgrind``); a run takes about 50x the plain run time.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from bench.harness import ROOT, command_line, result_record
from bench.harness.checkout import child_setup

QUERIES = ("hop3_filter", "hop4_bag", "star_count")
_COLLECTED = re.compile(r"Collected : (\d+)")


def run_workload(root: str, query: str, window: int, epoch: int, updates: int,
                 timed: bool, system: str = "ivmflow") -> None:
    """The measured program: warm-up, then (``timed``) the timed updates; this
    checkout's bench code over the engine of checkout ``root`` (the child's import path:
    :func:`~bench.harness.checkout.child_setup`)."""
    from bench.crossover_bench import hold_out_of_gc, make_system
    from bench.harness.streams import zipf_stream

    stream = zipf_stream(window, updates)
    hold_out_of_gc()
    view = make_system(system, query, stream)
    for u in stream.warm:
        view.apply(u)
    view.end_epoch()
    if timed:
        part = stream.timed[:updates]
        for i in range(0, len(part), epoch):
            for u in part[i:i + epoch]:
                view.apply(u)
            view.end_epoch()


def instructions(root: str, query: str, window: int, epoch: int, updates: int,
                 timed: bool, system: str = "ivmflow") -> int:
    """Instructions of one run of the workload under callgrind (``ivmflow_native``: its
    module built beforehand outside valgrind, so that both runs load it)."""
    child = [sys.executable, "-m", "bench.instructions", "--child", "--root", root,
             "--query", query, "--window", str(window), "--epoch", str(epoch),
             "--updates", str(updates), "--system", system]
    cwd, env = child_setup(root)
    if system == "ivmflow_native":
        subprocess.run([*child[:-4], "--updates", "0", "--system", system], check=True,
                       cwd=cwd, env=env)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *child]
    if timed:
        cmd.append("--timed")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd, env=env)
    found = _COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        msg = (f"valgrind run failed (exit {proc.returncode}): {' '.join(cmd)}\n"
               f"{proc.stderr[-2000:]}")
        raise RuntimeError(msg)
    return int(found.group(1))


def measure(root: str, query: str, window: int, epoch: int, updates: int,
            system: str) -> dict[str, Any]:
    """One point: the timed part's instructions (full run minus warm-up run)."""
    base = instructions(root, query, window, epoch, updates, False, system)
    full = instructions(root, query, window, epoch, updates, True, system)
    return {"root": root, "query": query, "system": system, "window": window,
            "epoch": epoch, "updates": updates, "warm_up_instructions": base,
            "timed_instructions": full - base,
            "instructions_per_update": round((full - base) / updates)}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: prints a table of the timed parts' instructions, writes JSON."""
    p = argparse.ArgumentParser(description="instructions of the timed crossover updates")
    p.add_argument("--root", default=str(ROOT),
                   help="ivmflow checkout to measure (default: this one)")
    p.add_argument("--queries", "--query", nargs="+", choices=QUERIES, default=["hop4_bag"])
    p.add_argument("--window", type=int, default=8000)
    p.add_argument("--epochs", "--epoch", nargs="+", type=int, default=[1000])
    p.add_argument("--updates", type=int, default=10000)
    p.add_argument("--systems", "--system", nargs="+", default=["ivmflow"],
                   choices=("ivmflow", "ivmflow_native", "delta_ivm"))
    p.add_argument("--out", default=None, help="also write the results as JSON here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        run_workload(args.root, args.queries[0], args.window, args.epochs[0], args.updates,
                     args.timed, args.systems[0])
        return 0
    results: list[dict[str, Any]] = []
    print(f"W={args.window}, {args.updates} timed updates; instructions per update"
          + (" (ratio: delta_ivm's over this system's)" if "delta_ivm" in args.systems
             else ""))
    for q in args.queries:
        for e in args.epochs:
            point = {s: measure(args.root, q, args.window, e, args.updates, s)
                     for s in args.systems}
            base = point.get("delta_ivm")
            cells = []
            for s, r in point.items():
                if base is not None and s != "delta_ivm":
                    r["delta_ivm_ratio"] = round(
                        base["timed_instructions"] / r["timed_instructions"], 2)
                    cells.append(f"{s} {r['instructions_per_update']} "
                                 f"(x{r['delta_ivm_ratio']})")
                else:
                    cells.append(f"{s} {r['instructions_per_update']}")
                results.append(r)
            print(f"  {q:11s} epoch={e:<5d} " + "  ".join(cells), flush=True)
            if args.out:
                result_record("instructions", results,
                              command=command_line("bench.instructions", argv),
                              out=args.out, table=False, quiet=True)
    if args.out:
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
