"""Deterministic cost of the engine's hot path: CPU instructions (valgrind callgrind) spent
on the crossover stream's timed updates, for A/B comparisons on a machine whose clock
varies by 10-50% from one minute to the next.

    python bench/instructions.py --query hop4_bag --epoch 1000 --updates 10000
    python bench/instructions.py --root /tmp/old-checkout --query hop3_filter --epoch 1

The stream is :mod:`bench.crossover_bench`'s (W live edges warmed up untimed, then
alternating inserts and deletes). It runs twice under callgrind, once with the warm-up
only and once with the warm-up and ``--updates`` timed updates in epochs of ``--epoch``;
the difference is the timed part's instruction count (the same for the same checkout,
inputs and Python, whatever else the machine does). ``--root`` measures another checkout
of ivmflow with this script. Needs valgrind (Debian package ``valgrind``); a run takes
about 50x the plain run time.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

QUERIES = ("hop3_filter", "hop4_bag", "star_count")
_COLLECTED = re.compile(r"Collected : (\d+)")


def run_workload(root: str, query: str, window: int, epoch: int, updates: int,
                 timed: bool, native: bool = False) -> None:
    """The measured program: warm-up, then (``timed``) the timed updates."""
    sys.path.insert(0, root)
    from bench.crossover_bench import make_stream, make_system

    stream = make_stream(window, updates)
    view = make_system("ivmflow_native" if native else "ivmflow", query, stream)
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
                 timed: bool, native: bool = False) -> int:
    """Instructions of one run of the workload under callgrind (``native``: with the
    compiled hot path, built beforehand outside valgrind so that both runs load it)."""
    child = [sys.executable, __file__, "--child", "--root", root, "--query", query,
             "--window", str(window), "--epoch", str(epoch), "--updates", str(updates)]
    if native:
        child.append("--native")
        subprocess.run([*child, "--updates", "0"], check=True)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *child]
    if timed:
        cmd.append("--timed")
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = _COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        msg = (f"valgrind run failed (exit {proc.returncode}): {' '.join(cmd)}\n"
               f"{proc.stderr[-2000:]}")
        raise RuntimeError(msg)
    return int(found.group(1))


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: prints the timed part's instructions and writes JSON."""
    p = argparse.ArgumentParser(description="instructions of the timed crossover updates")
    p.add_argument("--root", default=str(Path(__file__).resolve().parent.parent),
                   help="ivmflow checkout to measure (default: this one)")
    p.add_argument("--query", choices=QUERIES, default="hop4_bag")
    p.add_argument("--window", type=int, default=8000)
    p.add_argument("--epoch", type=int, default=1000)
    p.add_argument("--updates", type=int, default=10000)
    p.add_argument("--native", action="store_true",
                   help="measure the compiled hot path (needs Cython and a C compiler)")
    p.add_argument("--out", default=None, help="also write the result as JSON here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        run_workload(args.root, args.query, args.window, args.epoch, args.updates, args.timed,
                     args.native)
        return 0
    base = instructions(args.root, args.query, args.window, args.epoch, args.updates, False,
                        args.native)
    full = instructions(args.root, args.query, args.window, args.epoch, args.updates, True,
                        args.native)
    result = {"root": args.root, "query": args.query, "native": args.native,
              "window": args.window,
              "epoch": args.epoch, "updates": args.updates, "warm_up_instructions": base,
              "timed_instructions": full - base,
              "instructions_per_update": round((full - base) / args.updates)}
    print(f"{args.query}{' native' if args.native else ''} W={args.window} "
          f"epoch={args.epoch} updates={args.updates}: "
          f"{(full - base) / 1e6:.0f} M instructions "
          f"({result['instructions_per_update']} per update)")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
