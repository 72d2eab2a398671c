"""Dumbbell benchmark (issue 6, part 5): the cyclic dumbbell query (two directed
triangles joined by an edge, CROWN Figure 5) maintained by ivmflow's GHD plan
(IVM-epsilon inside the two triangle bags, CROWN across the bags; eps = 1/2, 0, 1)
against standard change propagation (``bench/baseline_scp.py``: a left-deep chain of
materialized binary joins, the paper's plan 5c), in the same process.

Queries (self-joins over one edge table ``G(src, dst)``; triangle (x1, x2, x3), bridge
x3 -> x4, triangle (x4, x5, x6)):

- ``count``: ``SELECT COUNT(*) FROM G a, G b, G c, G d, G e, G f, G g WHERE ...``
- ``listing``: ``SELECT a.src, b.src, c.src, d.src, e.src, f.src FROM ...``

SCP joins in the connected order a, b, c, g, d, e, f (triangle, bridge, triangle), so
its views are the 2-paths, the triangles, triangles + bridge, ... (O(N^3) space in the
worst case), and an update of a late atom probes the large early views.

Graphs and stream: the triangle bench's hub-heavy graphs (``bench.harness.streams``:
``hub_graph``: a few
hubs of in- and out-degree ~ ``hub_scale * |D|`` on a Barabasi-Albert background, all
hub -> hub edges present, which makes the hubs the bridge ends of many dumbbells) and
stream (``hub_stream``: load |D| inserts, then a FIFO tail of ``tail * |D|`` insert +
delete steps, then ``hot`` updates toggling hub -> hub edges). Every update is timed
(``view.apply`` + ``view.end_epoch``, epoch size 1; SCP's ``apply`` + ``end_epoch``) with
``time.thread_time``, gc off; mean / p99 over the tail, hot-phase mean, throughput
(updates per second over the whole stream), state entries at the end. Every system's
per-update deltas (count after each update, or a digest of the listing delta) and final
result must agree, or the script fails. A system whose run exceeds ``--budget`` seconds
at one size is stopped there and skipped at larger sizes (reported as ``aborted``).

Writes ``bench/results/dumbbell.json`` and ``dumbbell.png`` (``dumbbell_quick.*`` with
``--quick``). Run from the repository root, one heavy job at a time::

    flock /tmp/ivmflow-heavy.lock python -m bench.dumbbell_bench          # ~3-5 minutes
    flock /tmp/ivmflow-heavy.lock python -m bench.dumbbell_bench --quick  # seconds
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.baseline_scp import CQ, SCP, Atom
from bench.harness import RESULTS, command_line, percentile, result_record
from bench.harness.plots import loglog, save, subplots
from bench.harness.streams import GraphSpec, HubStream, degree_stats, hub_stream
from core.records import Update
from dataflow.api import compile_query

QUERIES: tuple[str, ...] = ("count", "listing")
SYSTEMS: tuple[str, ...] = ("ivm_eps0.5", "ivm_eps0", "ivm_eps1", "scp")
EPS_OF: dict[str, float] = {"ivm_eps0.5": 0.5, "ivm_eps0": 0.0, "ivm_eps1": 1.0}
_DDL = "CREATE TABLE G(src INT, dst INT);\n"
_FROM = (
    "FROM G a, G b, G c, G d, G e, G f, G g WHERE a.dst = b.src AND b.dst = c.src "
    "AND c.dst = a.src AND d.dst = e.src AND e.dst = f.src AND f.dst = d.src "
    "AND c.src = g.src AND g.dst = d.src"
)
SQL: dict[str, str] = {
    "count": f"{_DDL}SELECT COUNT(*) {_FROM};",
    "listing": f"{_DDL}SELECT a.src, b.src, c.src, d.src, e.src, f.src {_FROM};",
}
_ATOMS = (
    Atom("G", ("x1", "x2"), label="a"), Atom("G", ("x2", "x3"), label="b"),
    Atom("G", ("x3", "x1"), label="c"), Atom("G", ("x3", "x4"), label="g"),
    Atom("G", ("x4", "x5"), label="d"), Atom("G", ("x5", "x6"), label="e"),
    Atom("G", ("x6", "x4"), label="f"),
)
SCP_CQ: dict[str, CQ] = {
    "count": CQ(_ATOMS, (), count=True),
    "listing": CQ(_ATOMS, ("x1", "x2", "x3", "x4", "x5", "x6")),
}
_MASK = (1 << 64) - 1


@dataclass
class Run:
    """One system on one query and size."""

    query: str
    size: int
    system: str
    us: list[float] = field(default_factory=list, repr=False)
    phases: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    digests: list[int] = field(default_factory=list, repr=False)
    final: Any = field(default=None, repr=False)
    state_entries: int = 0
    aborted: bool = False

    def stats(self) -> dict[str, Any]:
        def phase(name: str) -> list[float]:
            a, b = self.phases[name]
            return sorted(self.us[a:b])

        tail, hot = phase("tail"), phase("hot")
        total = sum(self.us)
        return {
            "query": self.query, "size": self.size, "system": self.system,
            "aborted": self.aborted, "updates": len(self.us),
            "mean_us": sum(tail) / len(tail) if tail else float("nan"),
            "p99_us": percentile(tail, 0.99, "nearest"),
            "hot_mean_us": sum(hot) / len(hot) if hot else float("nan"),
            "throughput_ups": len(self.us) / (total / 1e6) if total else float("nan"),
            "total_s": total / 1e6,
            "state_entries": self.state_entries,
        }


def _digest(i: int, rows: Any) -> int:
    h = 0
    for r, m in rows:
        h = (h + hash((i, tuple(r), m))) & _MASK
    return h


def run_ivm(query: str, eps: float, stream: HubStream, budget: float) -> Run:
    view = compile_query(SQL[query], eps=eps).maintain(eps=eps)
    ups = [Update(op, "G", e) for op, e in stream.updates]
    run = Run(query, stream.n_live, f"ivm_eps{eps:g}", phases=stream.phases)
    clock = time.thread_time
    count = 0
    apply, end = view.apply, view.end_epoch
    gc.collect()
    gc.disable()
    try:
        for i, u in enumerate(ups):
            t0 = clock()
            apply(u)
            d = end()
            t1 = clock()
            run.us.append(1e6 * (t1 - t0))
            if query == "count":
                for m, r in d.rows:
                    if m > 0:
                        count = int(r[0])
                run.digests.append(count)
            else:
                run.digests.append(_digest(i, ((r, m) for m, r in d.rows)))
            if (i & 255) == 0 and sum(run.us) > budget * 1e6:
                run.aborted = True
                break
    finally:
        gc.enable()
    snap = view.snapshot()
    if query == "count":
        run.final = int(snap[0][1][0]) if snap else 0
    else:
        run.final = {tuple(r): m for m, r in snap}
    run.state_entries = view.state_entries()
    return run


def run_scp(query: str, stream: HubStream, budget: float) -> Run:
    scp = SCP(SCP_CQ[query])
    run = Run(query, stream.n_live, "scp", phases=stream.phases)
    clock = time.thread_time
    count = 0
    gc.collect()
    gc.disable()
    try:
        for i, (op, e) in enumerate(stream.updates):
            u = Update(op, "G", e)
            t0 = clock()
            scp.apply(u)
            d = scp.end_epoch()
            t1 = clock()
            run.us.append(1e6 * (t1 - t0))
            if query == "count":
                for r, m in d.items():
                    if m > 0:
                        count = int(r[-1])
                    elif not any(mm > 0 for mm in d.values()):
                        count = 0
                run.digests.append(count)
            else:
                run.digests.append(_digest(i, d.items()))
            if (i & 255) == 0 and sum(run.us) > budget * 1e6:
                run.aborted = True
                break
    finally:
        gc.enable()
    snap = scp.snapshot()
    if query == "count":
        run.final = int(next(iter(snap))[-1]) if snap else 0
    else:
        run.final = dict(snap)
    run.state_entries = scp.state_entries()
    return run


class Disagreement(AssertionError):
    """Two systems' deltas or final results differ."""


def check_agreement(runs: Sequence[Run]) -> None:
    done = [r for r in runs if not r.aborted]
    if len(done) < 2:
        return
    ref = done[0]
    for r in done[1:]:
        if r.digests != ref.digests:
            i = next(j for j, (x, y) in enumerate(zip(r.digests, ref.digests)) if x != y)
            msg = f"{r.query} |D|={r.size}: {r.system} and {ref.system} disagree at update {i}"
            raise Disagreement(msg)
        if r.final != ref.final:
            msg = f"{r.query} |D|={r.size}: final results of {r.system} and {ref.system} differ"
            raise Disagreement(msg)


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """``scp_over`` (SCP mean / system mean) and the state ratio, per query and size."""
    for r in rows:
        base = next((b for b in rows if b["system"] == "scp" and b["query"] == r["query"]
                     and b["size"] == r["size"]), None)
        ok = base is not None and not base["aborted"] and not r["aborted"]
        r["scp_mean_over_this"] = base["mean_us"] / r["mean_us"] if ok and base else None
        r["scp_p99_over_this"] = base["p99_us"] / r["p99_us"] if ok and base else None
        r["scp_state_over_this"] = (base["state_entries"] / max(1, r["state_entries"])
                                    if ok and base else None)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    head = (f"{'query':8} {'|D|':>6} {'system':11} {'mean us':>10} {'p99 us':>10} "
            f"{'hot us':>10} {'upd/s':>9} {'state':>10} {'SCP/this mean':>13} "
            f"{'SCP/this state':>14}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["aborted"]:
            lines.append(f"{r['query']:8} {r['size']:>6} {r['system']:11} aborted after "
                         f"{r['updates']} updates ({r['total_s']:.0f} s budget)")
            continue
        ratio = r["scp_mean_over_this"]
        sratio = r["scp_state_over_this"]
        lines.append(
            f"{r['query']:8} {r['size']:>6} {r['system']:11} {r['mean_us']:10.1f} "
            f"{r['p99_us']:10.1f} {r['hot_mean_us']:10.1f} {r['throughput_ups']:9.0f} "
            f"{r['state_entries']:10d} "
            f"{(f'{ratio:.2f}x' if ratio else '-'):>13} "
            f"{(f'{sratio:.2f}x' if sratio else '-'):>14}"
        )
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    made = subplots(2, len(QUERIES), figsize=(12, 9), squeeze=False)
    if made is None:
        return
    fig, axes = made
    colors = {"ivm_eps0.5": "tab:green", "ivm_eps0": "tab:blue", "ivm_eps1": "tab:red",
              "scp": "tab:gray"}
    panels = (("mean_us", "p99_us", "us per update, FIFO tail: mean (solid), p99 (dotted)"),
              ("state_entries", None, "state entries at the end"))
    for row, (key, extra, what) in enumerate(panels):
        for ax, q in zip(axes[row], QUERIES):
            for s in SYSTEMS:
                pts = [r for r in rows if r["query"] == q and r["system"] == s
                       and not r["aborted"] and math.isfinite(r[key]) and r[key] > 0]
                if not pts:
                    continue
                xs = [r["size"] for r in pts]
                ax.plot(xs, [r[key] for r in pts], "o-", color=colors[s], label=s)
                if extra:
                    ax.plot(xs, [r[extra] for r in pts], ":", color=colors[s], alpha=0.6)
            loglog(ax, "|D| (live edges)", None, f"dumbbell {q}: {what}", 9)
    save(fig, path, textwrap.fill(title, 170))


@dataclass
class Config:
    sizes: list[int]
    queries: list[str]
    systems: list[str]
    seed: int = 1
    tail: float = 0.5
    hot: int = 20
    budget: float = 60.0
    spec: GraphSpec = field(default_factory=lambda: GraphSpec(hub_scale=0.05))
    out_dir: Path = RESULTS
    stem: str = "dumbbell"
    plot: bool = True


def run_all(cfg: Config, log: Callable[[str], None] = print) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    graphs: list[dict[str, Any]] = []
    aborted: set[tuple[str, str]] = set()
    started = time.perf_counter()
    for si, size in enumerate(cfg.sizes):
        stream = hub_stream(size, cfg.seed + si, cfg.tail, cfg.spec, cfg.hot)
        live = [e for _, e in stream.updates[: stream.n_live]]
        graphs.append({"size": size, "updates": len(stream.updates), "phases": stream.phases,
                       "hub_degree_live": stream.hub_degree, **degree_stats(live)})
        log(f"|D|={size}: {len(stream.updates)} updates, hub degree ~{stream.hub_degree}")
        for q in cfg.queries:
            runs: list[Run] = []
            for s in cfg.systems:
                if (q, s) in aborted:
                    continue
                run = (run_scp(q, stream, cfg.budget) if s == "scp"
                       else run_ivm(q, EPS_OF[s], stream, cfg.budget))
                if run.aborted:
                    aborted.add((q, s))
                runs.append(run)
                st = run.stats()
                rows.append(st)
                log(f"  {q:8} |D|={size:>6} {s:11} mean {st['mean_us']:10.1f} us  p99 "
                    f"{st['p99_us']:10.1f} us  state {st['state_entries']:>9}  "
                    f"({st['total_s']:.1f} s{', ABORTED' if run.aborted else ''})")
            check_agreement(runs)
            done = [r for r in runs if not r.aborted]
            if done:
                f = done[0].final
                log(f"  {q:8} |D|={size:>6} {len(done)} systems agree "
                    f"({'count ' + str(f) if q == 'count' else str(len(f)) + ' rows'})")
    add_ratios(rows)
    return {
        "what": "dumbbell: ivmflow GHD (IVM-eps bags + CROWN) vs standard change propagation",
        "graph": cfg.spec.describe(),
        "stream": (f"load |D| inserts; tail {cfg.tail:g}*|D| FIFO steps (mean/p99 over the "
                   f"tail); hot: {cfg.hot} hub->hub edge toggles"),
        "timing": "per update: apply + end_epoch (epoch size 1), time.thread_time, gc off",
        "sql": SQL,
        "scp_plan": "left-deep in atom order a, b, c, g, d, e, f (views hold all variables)",
        "budget_s": cfg.budget,
        "sizes": cfg.sizes,
        "graphs": graphs,
        "rows": rows,
        "agree": True,
        "wall_seconds": time.perf_counter() - started,
    }


def _ints(text: str) -> list[int]:
    return [int(float(p.strip().lower().rstrip("k")) * (1000 if p.strip().lower()
                                                         .endswith("k") else 1))
            for p in text.split(",") if p.strip()]


QUICK_SIZES = [200, 400, 800]
FULL_SIZES = [2000, 4000, 8000, 16000]


def main(argv: Sequence[str] | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, seconds")
    p.add_argument("--sizes", type=_ints, help="live edges per size, e.g. 500,1k,2k")
    p.add_argument("--queries", default=",".join(QUERIES))
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--hub-scale", type=float, default=0.05,
                   help="hub in/out-degree ~ hub_scale * |D| (0.05)")
    p.add_argument("--budget", type=float, default=60.0,
                   help="seconds per system and size before it is aborted (60)")
    p.add_argument("--hot", type=int, default=20, help="hub->hub edge toggles (20)")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--no-plot", action="store_true")
    a = p.parse_args(argv)
    queries = [q for q in a.queries.split(",") if q]
    systems = [s for s in a.systems.split(",") if s]
    for name, allowed, given in (("query", QUERIES, queries), ("system", SYSTEMS, systems)):
        bad = [x for x in given if x not in allowed]
        if bad:
            raise SystemExit(f"unknown {name} {bad[0]!r}; expected one of {allowed}")
    cfg = Config(sorted(a.sizes or (QUICK_SIZES if a.quick else FULL_SIZES)), queries,
                 systems, hot=a.hot, budget=a.budget, spec=GraphSpec(hub_scale=a.hub_scale),
                 out_dir=a.out_dir, stem="dumbbell_quick" if a.quick else "dumbbell",
                 plot=not a.no_plot)
    extra = run_all(cfg, log)
    rows = extra.pop("rows")
    log("")
    doc = result_record("dumbbell", rows, command=command_line("bench.dumbbell_bench", argv),
                        extra=extra, out=cfg.out_dir / f"{cfg.stem}.json",
                        table=format_table(rows))
    if cfg.plot:
        plot(rows, cfg.out_dir / f"{cfg.stem}.png",
             f"dumbbell: ivmflow GHD vs SCP; {doc['graph']}")
    log(f"{doc['wall_seconds']:.0f} s")
    # tests/test_ghd.py reads the rows as "results" (their name before the one schema)
    return {**doc, "results": rows}


if __name__ == "__main__":
    try:
        main()
    except Disagreement as err:
        print(f"FAIL: {err}", file=sys.stderr)
        sys.exit(1)
