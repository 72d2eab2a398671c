"""Profile one system's run of a benchmark query with pyinstrument and print the top of
the call tree.

    python -m bench.profile_hotpath --query hop4_project --edges 10000
    python -m bench.profile_hotpath --query star_count --system scp --lines 40
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from pyinstrument import Profiler

from bench.run_bench import make_system
from bench.workloads import QUERY_NAMES, make_workload


def profile(query: str, edges: int, epoch: int, system: str = "ivmflow",
            model: str = "scale_free", attach: int = 8, seed: int = 0,
            interval: float = 0.0005) -> tuple[str, float, int]:
    """Run ``system`` on the workload under pyinstrument (setup excluded).

    Returns the profile text, the profiled seconds and the number of updates.
    """
    wl = make_workload(query, edges, seed=seed, attach=attach, model=model)
    epochs = wl.epochs(epoch)
    inst = make_system(system, wl)
    prof = Profiler(interval=interval)
    t0 = time.perf_counter()
    prof.start()
    for ep in epochs:
        for u in ep:
            inst.apply(u)
        inst.end_epoch()
    prof.stop()
    dt = time.perf_counter() - t0
    text = prof.output_text(unicode=True, color=False, show_all=False)
    return text, dt, len(wl.updates)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    p = argparse.ArgumentParser(description="pyinstrument profile of a benchmark run")
    p.add_argument("--query", choices=QUERY_NAMES, default="hop4_project")
    p.add_argument("--edges", type=int, default=10000)
    p.add_argument("--epoch", type=int, default=1000)
    p.add_argument("--system", choices=("ivmflow", "scp"), default="ivmflow")
    p.add_argument("--model", choices=("ba", "scale_free"), default="ba")
    p.add_argument("--attach", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lines", type=int, default=60, help="how many lines of the tree to print")
    args = p.parse_args(argv)
    text, dt, n = profile(args.query, args.edges, args.epoch, args.system, args.model,
                          args.attach, args.seed)
    print(f"{args.system} {args.query} edges={args.edges} epoch={args.epoch}: {n} updates "
          f"in {dt:.2f} s under the profiler ({n / dt:,.0f} upd/s, profiler overhead "
          "included)")
    lines = text.splitlines()
    print("\n".join(lines[:args.lines]))
    if len(lines) > args.lines:
        print(f"... ({len(lines) - args.lines} more lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
