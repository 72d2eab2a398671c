"""Triangle benchmark, part 2 (issue 6): the double-partitioned count's space against
single partitioning, and the queries with two and one free variables (per-edge and
per-node triangle counts) at eps = 1/2 against classical first-order IVM (eps = 1),
on the triangle bench's hub-heavy FIFO-window streams (``bench.harness.streams``;
self-join over
``G(src, dst)``; ``--hubs``/``--hub-exp``/``--hub-scale`` as there).

Queries::

    count   SELECT COUNT(*) FROM G a, G b, G c WHERE a.dst = b.src AND ...
    binary  SELECT a.src, a.dst, COUNT(*) ... GROUP BY a.src, a.dst   (triangles per edge)
    unary   SELECT a.src, COUNT(*) ... GROUP BY a.src                 (triangles per node)

Measured per |D| (live edges) and system, in one process: mean and p99 CPU time per
update over the FIFO tail (``view.apply`` + ``end_epoch``, epoch size 1); for the count
the auxiliary view entries (V_RS + V_ST + V_TR) and all state entries at the end; for
binary/unary the full enumeration from the views through the union and hop iterators
(``op.enumerate()``): total time, rows, and the largest gap between two consecutive
rows (the measured delay). Ratios are against the baseline run in the same process:
single partitioning for the count's space, eps = 1 for update times. Every system's
final result must agree, or the script fails.

Writes ``bench/results/triangle_free.json`` (``triangle_free_quick.json`` with
``--quick``) and a PNG of update time and view entries against |D|.

Run from the repository root::

    python -m bench.triangle_free_bench            # |D| = 1k..8k, a few minutes
    python -m bench.triangle_free_bench --quick    # seconds
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, command_line, loglog_slope, percentile, result_record
from bench.harness.plots import save, subplots
from bench.harness.streams import GraphSpec, hub_stream
from core.records import Update
from dataflow.api import compile_query

_DDL = "CREATE TABLE G(src INT, dst INT);\n"
_WHERE = "FROM G a, G b, G c WHERE a.dst = b.src AND b.dst = c.src AND c.dst = a.src"
SQL = {
    "count": f"{_DDL}SELECT COUNT(*) {_WHERE};",
    "binary": f"{_DDL}SELECT a.src, a.dst, COUNT(*) {_WHERE} GROUP BY a.src, a.dst;",
    "unary": f"{_DDL}SELECT a.src, COUNT(*) {_WHERE} GROUP BY a.src;",
}
# (query, partitioning, eps) per system
SYSTEMS: dict[str, tuple[str, str, float]] = {
    "count single eps=0.25": ("count", "single", 0.25),
    "count double eps=0.25": ("count", "double", 0.25),
    "count single eps=0.5": ("count", "single", 0.5),
    "count double eps=0.5": ("count", "double", 0.5),
    "count single eps=0.75": ("count", "single", 0.75),
    "count double eps=0.75": ("count", "double", 0.75),
    "binary eps=0.5": ("binary", "single", 0.5),
    "binary eps=1": ("binary", "single", 1.0),
    "unary eps=0.5": ("unary", "single", 0.5),
    "unary eps=1": ("unary", "single", 1.0),
}


def run_system(name: str, n_live: int, seed: int, spec: GraphSpec) -> dict[str, Any]:
    query, part, eps = SYSTEMS[name]
    stream = hub_stream(n_live, seed, 0.5, spec, hot=0)
    view = compile_query(SQL[query], eps=eps, triangle_partitioning=part).maintain()
    ups = [Update(op, "G", e) for op, e in stream.updates]
    t_lo, t_hi = stream.phases["tail"]
    clock = time.thread_time
    times: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for i, u in enumerate(ups):
            t0 = clock()
            view.apply(u)
            view.end_epoch()
            if t_lo <= i < t_hi:
                times.append(clock() - t0)
    finally:
        gc.enable()
    op = view.engines[0].op  # type: ignore[union-attr]
    out: dict[str, Any] = {
        "system": name, "query": query, "partitioning": part, "eps": eps, "D": n_live,
        "mean_us": 1e6 * sum(times) / len(times),
        "p99_us": 1e6 * percentile(times, 0.99, empty=0.0),
        "state_entries": view.state_entries(), "minor": op.router.stats["minor"],
        "major": op.router.stats["major"],
    }
    if query == "count":
        views = op.vs if part == "double" else op.views
        out["view_entries"] = sum(len(v) for v in views)
        out["result"] = op.count
    else:
        gaps: list[float] = []
        rows: dict[Any, int] = {}
        gc.collect()
        gc.disable()  # a collection inside the loop is not enumeration delay
        try:
            start = last = time.perf_counter()
            for key, m in op.enumerate():
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
                rows[key] = m
        finally:
            gc.enable()
        out["enum_ms"] = 1e3 * (last - start)
        out["enum_rows"] = len(rows)
        out["max_gap_us"] = 1e6 * max(gaps, default=0.0)
        out["result"] = sorted(rows.items())
    return out


def run_all(sizes: Sequence[int], seed: int, spec: GraphSpec,
            log: Any = print) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for n in sizes:
        by_name = {name: run_system(name, n, seed, spec) for name in SYSTEMS}
        for query in ("count", "binary", "unary"):
            finals = {repr(r["result"]) for r in by_name.values() if r["query"] == query}
            if len(finals) != 1:
                msg = f"|D| = {n}: the {query} systems disagree"
                raise SystemExit(msg)
        for r in by_name.values():
            q, eps = r["query"], r["eps"]
            if q == "count":
                base = by_name[f"count single eps={eps:g}"]
                r["view_ratio"] = r["view_entries"] / max(1, base["view_entries"])
            else:
                base = by_name[f"{q} eps=1"]
            r["time_ratio"] = r["mean_us"] / base["mean_us"]
            r.pop("result")
            results.append(r)
            log(format_row(r))
    return results


HEADER = (f"{'|D|':>6} {'system':<22} {'mean us':>9} {'p99 us':>9} {'x base':>7} "
          f"{'views':>8} {'x single':>8} {'enum ms':>8} {'rows':>6} {'max gap us':>10}")


def format_row(r: dict[str, Any]) -> str:
    views = f"{r['view_entries']:>8}" if "view_entries" in r else f"{'':>8}"
    vr = f"{r['view_ratio']:>8.3f}" if "view_ratio" in r else f"{'':>8}"
    enum = (f"{r['enum_ms']:>8.1f} {r['enum_rows']:>6} {r['max_gap_us']:>10.0f}"
            if "enum_ms" in r else "")
    return (f"{r['D']:>6} {r['system']:<22} {r['mean_us']:>9.1f} {r['p99_us']:>9.1f} "
            f"{r['time_ratio']:>7.2f} {views} {vr} {enum}")


def slopes(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name in SYSTEMS:
        rows = [r for r in results if r["system"] == name]
        if len(rows) < 2:
            continue
        xs = [r["D"] for r in rows]
        out[name] = {"mean_us": loglog_slope(zip(xs, [r["mean_us"] for r in rows]))}
        if "view_entries" in rows[0]:
            out[name]["view_entries"] = loglog_slope(
                zip(xs, [max(1, r["view_entries"]) for r in rows]))
    return out


def plot(results: Sequence[dict[str, Any]], path: Path) -> None:
    made = subplots(1, 2, figsize=(11, 4))
    if made is None:
        return
    fig, (ax1, ax2) = made
    for name in SYSTEMS:
        rows = [r for r in results if r["system"] == name]
        xs = [r["D"] for r in rows]
        style = "--" if "eps=1" in name and "count" not in name else "-"
        ax1.loglog(xs, [r["mean_us"] for r in rows], style, marker="o", label=name)
        if rows and "view_entries" in rows[0]:
            ax2.loglog(xs, [max(1, r["view_entries"]) for r in rows], marker="o", label=name)
    ax1.set(xlabel="|D| (live edges)", ylabel="mean CPU us per update (tail)")
    ax2.set(xlabel="|D| (live edges)", ylabel="auxiliary view entries (count)")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    save(fig, path)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="|D| = 300, 600: a smoke run")
    p.add_argument("--sizes", default="1000,2000,4000,8000")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--hubs", type=int, default=GraphSpec.hubs)
    p.add_argument("--hub-exp", type=float, default=GraphSpec.hub_exp)
    p.add_argument("--hub-scale", type=float, default=GraphSpec.hub_scale)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--no-plot", action="store_true")
    args = p.parse_args(argv)
    sizes = [300, 600] if args.quick else [int(x) for x in args.sizes.split(",")]
    spec = GraphSpec(hubs=args.hubs, hub_exp=args.hub_exp, hub_scale=args.hub_scale)
    print(HEADER)
    results = run_all(sizes, args.seed, spec)
    sl = slopes(results)
    print("\nlog-log slopes (mean update time; count: view entries) against |D|:")
    for name, s in sl.items():
        print(f"  {name:<22} " + ", ".join(f"{k} {v:.2f}" for k, v in s.items()))
    extra = {
        "sizes": sizes, "seed": args.seed,
        "graph_params": {"hubs": spec.hubs, "hub_exp": spec.hub_exp,
                         "hub_scale": spec.hub_scale},
        "graph": spec.describe(), "sql": SQL, "clock": "thread_time (CPU)", "slopes": sl,
    }
    stem = "triangle_free_quick" if args.quick else "triangle_free"
    doc = result_record("triangle_free", results,
                        command=command_line("bench.triangle_free_bench", argv), extra=extra,
                        out=args.out_dir / f"{stem}.json", table=False)
    if not args.no_plot:
        plot(results, args.out_dir / f"{stem}.png")
    # tests/test_triangles_freevars.py reads the rows as "results" (their name before the
    # one schema)
    return {**doc, "results": results}


if __name__ == "__main__":
    main()
