"""Triangle benchmark (issue 6, part 5): IVM-epsilon (eps = 0, 1/2, 1) against a naive
first-order delta query, on hub-heavy directed graphs of growing size.

Queries (a self-join over one edge table ``G(src, dst)``; each directed 3-cycle is found
once per rotation, so the count is three times the number of directed 3-cycles):

- ``count``: ``SELECT COUNT(*) FROM G a, G b, G c WHERE a.dst = b.src AND b.dst = c.src
  AND c.dst = a.src``
- ``listing``: ``SELECT a.src, b.src, c.src FROM ...`` (same FROM/WHERE).

Graph (``hub_graph``, seeded; the output's ``graph`` field says which): ``hubs`` hub
vertices (default 2) whose out- and in-degree in the live graph is about
``hub_scale * |D|^hub_exp`` (default ``0.1 * |D|``), on a Barabasi-Albert background
(``networkx``, ``attach`` = 1 edge per new node, every edge oriented at random). The
background vertices are split at random into halves A and B; each hub points at
vertices of A and is pointed at from B (both chosen degree-biased), and every hub -> hub
edge is present. So the hubs close triangles h -> a -> b -> h (a in A, b in B), but a
hub -> hub edge lies on only the ``hubs - 2`` triangles through the other hubs: its delta
is tiny while ``out(dst)`` and ``in(src)`` are both ~ |D|. No self-loops, no duplicate
directed edges, node ids shuffled.

Costs per update of an edge ``(a, b)`` (each of the three copies R, S, T partitioned on
``src``): eps = 1 scans ``out(b)``; eps = 0 scans ``in(a)``; eps = 1/2 scans ``out(b)``
only if ``b`` is light (< 3/2 N^eps) and the heavy part of ``in(a)`` (<= 2 N^(1-eps)
values); the naive query scans ``min(|out(b)|, |in(a)|)``. With hubs of degree
~ |D|, eps in {0, 1} pay ~ |D| on the ~ 20% of updates next to a hub (mean ~ |D|); the
hubs are heavy at eps = 1/2. The naive query is cheap on average (over a stream that
touches every edge O(1) times its total is O(|D|^1.5), here far less) but pays ~ |D|
on a hub -> hub edge, which the ``hot`` phase toggles.

Stream: the edges in a random order; the first ``|D|`` are inserted (``load``), then the
FIFO ``tail``: insert the next edge, delete the oldest live one, ``tail * |D|`` times, so
the database holds ``|D|`` edges (+1); then ``hot``: ``--hot`` updates deleting and
re-inserting the hub -> hub edges. Every update is timed (``view.apply`` +
``view.end_epoch``, epoch size 1; the naive baseline's ``apply``, which also keeps its
result), by default with ``time.thread_time`` (CPU time of this thread: time the OS gives
other processes on a busy machine is not counted; ``--clock wall`` for
``perf_counter``), cyclic GC off during the timed loop. Mean / p50 / p99 / max are over
the tail; ``hot_mean_us`` over the hot phase; the load phase mean (which includes the
major rebalancing while |D| doubles) is reported separately.

Systems: ``ivm_eps0``, ``ivm_eps0.5``, ``ivm_eps1`` (``compile_query(sql).maintain(eps=)``)
and ``naive``: adjacency sets, and on an insert/delete of ``(a, b)`` the triangles
through that edge are the common vertices of ``out(b)`` and ``in(a)`` (loop over the
smaller set, membership test in the other; ``3 *`` that many for the count, the three
rotations for the listing) -- the classical delta query, no views. Every system's
per-update deltas (a digest per update: the count after it, or the listing delta) and
final count/listing must agree, or the script fails.

Reported: a table (|D|, system, mean / p99 / max us per update in the tail, hot-phase
mean, load-phase mean, state entries: ``View.state_entries()`` for ivmflow, adjacency
entries + result rows for the naive baseline) and the log-log slopes (least squares of
log time against log |D| over the sizes, for the tail mean, the tail p99 and the hot
mean; theory for the worst-case update: 0.5 at eps = 1/2, 1.0 for eps in {0, 1}).
Writes ``bench/results/triangle.json`` and ``triangle.png`` (``triangle_quick.*`` with
``--quick``).

Run from the repository root::

    python -m bench.triangle_bench            # |D| = 2k..32k edges, ~1-3 minutes
    python -m bench.triangle_bench --quick    # |D| = 500..4000, seconds
    python -m bench.triangle_bench --hub-exp 0.8 --hub-scale 0.6 --sizes 4k,8k,16k,32k
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, command_line, loglog_slope, percentile, result_record
from bench.harness import write_record as write_json
from bench.harness.plots import loglog, save, subplots
from bench.harness.streams import GraphSpec, HubStream, degree_stats, hub_stream
from core.records import Update
from dataflow.api import compile_query

QUERIES: tuple[str, ...] = ("count", "listing")
SYSTEMS: tuple[str, ...] = ("ivm_eps0", "ivm_eps0.5", "ivm_eps1", "naive")
EPS_OF: dict[str, float] = {"ivm_eps0": 0.0, "ivm_eps0.5": 0.5, "ivm_eps1": 1.0}
THEORY: dict[str, str] = {
    "ivm_eps0": "1.0 (worst case O(|D|))",
    "ivm_eps0.5": "0.5 (worst case O(|D|^1/2))",
    "ivm_eps1": "1.0 (worst case O(|D|))",
    "naive": "1.0 worst case; <= 0.5 amortized over a stream touching each edge O(1) times",
}
_DDL = "CREATE TABLE G(src INT, dst INT);\n"
_WHERE = "FROM G a, G b, G c WHERE a.dst = b.src AND b.dst = c.src AND c.dst = a.src"
SQL: dict[str, str] = {
    "count": f"{_DDL}SELECT COUNT(*) {_WHERE};",
    "listing": f"{_DDL}SELECT a.src, b.src, c.src {_WHERE};",
}
_MASK = (1 << 64) - 1

Edge = tuple[int, int]
Row = tuple[int, ...]


class NaiveDelta:
    """The classical first-order delta query over adjacency sets, without views."""

    def __init__(self, listing: bool) -> None:
        self.listing = listing
        self.out: dict[int, set[int]] = {}
        self.inn: dict[int, set[int]] = {}
        self.count = 0
        self.rows: Counter[Row] = Counter()

    def apply(self, op: str, a: int, b: int) -> Any:
        """Apply ``op`` on edge ``(a, b)``; the count change or the listing delta rows."""
        out, inn = self.out, self.inn
        empty: set[int] = set()
        ob = out.get(b, empty)
        ia = inn.get(a, empty)
        if len(ob) <= len(ia):
            common = [c for c in ob if c in ia]
        else:
            common = [c for c in ia if c in ob]
        sign = 1 if op == "+" else -1
        if op == "+":
            assert b not in out.get(a, empty), (a, b)
            out.setdefault(a, set()).add(b)
            inn.setdefault(b, set()).add(a)
        else:
            out[a].remove(b)
            if not out[a]:
                del out[a]
            inn[b].remove(a)
            if not inn[b]:
                del inn[b]
        if not self.listing:
            d = 3 * sign * len(common)
            self.count += d
            return d
        delta = []
        rows = self.rows
        for c in common:  # a -> b -> c -> a in its three rotations
            for r in ((a, b, c), (b, c, a), (c, a, b)):
                delta.append((sign, r))
                n = rows[r] + sign
                if n:
                    rows[r] = n
                else:
                    del rows[r]
        return delta

    def result(self) -> Any:
        return self.count if not self.listing else dict(self.rows)

    def state_entries(self) -> int:
        adj = sum(len(s) for s in self.out.values()) + sum(len(s) for s in self.inn.values())
        return adj + len(self.out) + len(self.inn) + (len(self.rows) if self.listing else 1)


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
    router: dict[str, Any] = field(default_factory=dict)
    delta_rows: int = 0

    def phase(self, name: str) -> list[float]:
        a, b = self.phases[name]
        return sorted(self.us[a:b])

    def stats(self) -> dict[str, Any]:
        t = self.phase("tail")
        hot = self.phase("hot") or [float("nan")]
        load = self.phase("load")
        return {
            "query": self.query,
            "size": self.size,
            "system": self.system,
            "tail_updates": len(t),
            "mean_us": sum(t) / len(t),
            "p50_us": percentile(t, 0.50, "nearest"),
            "p99_us": percentile(t, 0.99, "nearest"),
            "max_us": t[-1],
            "hot_updates": len(self.phase("hot")),
            "hot_mean_us": sum(hot) / len(hot),
            "load_updates": len(load),
            "load_mean_us": sum(load) / max(1, len(load)),
            "total_s": sum(self.us) / 1e6,
            "state_entries": self.state_entries,
            "delta_rows": self.delta_rows,
            "router": self.router,
        }


def _count_of(rows: Sequence[tuple[int, Row]], current: int) -> int:
    for m, r in rows:
        if m > 0:
            return int(r[0])
    return current if not rows else 0


CLOCKS: dict[str, Callable[[], float]] = {
    "thread": time.thread_time,
    "wall": time.perf_counter,
}
CLOCK_NAMES = {"thread": "time.thread_time", "wall": "time.perf_counter"}
"""``thread``: CPU time of this thread (time other processes get on a busy machine is
not counted); ``wall``: ``perf_counter``."""


def run_ivm(query: str, eps: float, stream: HubStream, clock: Callable[[], float]) -> Run:
    view = compile_query(SQL[query], eps=eps).maintain(eps=eps)
    ups = [Update(op, "G", e) for op, e in stream.updates]
    times: list[float] = []
    digests: list[int] = []
    listing = query == "listing"
    count = 0
    rows_total = 0
    apply, end = view.apply, view.end_epoch
    gc.collect()
    gc.disable()
    try:
        for i, u in enumerate(ups):
            t0 = clock()
            apply(u)
            d = end()
            t1 = clock()
            times.append(t1 - t0)
            rows = d.rows
            rows_total += len(rows)
            if listing:
                h = 0
                for m, r in rows:
                    h = (h + hash((i, r, m))) & _MASK
                digests.append(h)
            else:
                count = _count_of(rows, count)
                digests.append(count)
    finally:
        gc.enable()
    run = _run(query, stream, f"ivm_eps{eps:g}", times, digests)
    snap = view.snapshot()
    run.final = {r: m for m, r in snap} if listing else (int(snap[0][1][0]) if snap else 0)
    run.state_entries = view.state_entries()
    engine = view.engines[0]
    router = engine.router  # type: ignore[union-attr]
    run.router = {**router.stats, "base_N": router.base, "theta": router.theta,
                  "heavy_values": sum(len(c) for h in router.heavy.values() for c in h)}
    run.delta_rows = rows_total
    return run


def run_naive(query: str, stream: HubStream, clock: Callable[[], float]) -> Run:
    listing = query == "listing"
    sys_ = NaiveDelta(listing)
    times: list[float] = []
    digests: list[int] = []
    apply = sys_.apply
    rows_total = 0
    gc.collect()
    gc.disable()
    try:
        for i, (op, (a, b)) in enumerate(stream.updates):
            t0 = clock()
            d = apply(op, a, b)
            t1 = clock()
            times.append(t1 - t0)
            if listing:
                h = 0
                for m, r in d:
                    h = (h + hash((i, r, m))) & _MASK
                digests.append(h)
                rows_total += len(d)
            else:
                digests.append(sys_.count)
                rows_total += 1 if d else 0
    finally:
        gc.enable()
    run = _run(query, stream, "naive", times, digests)
    run.final = sys_.result()
    run.state_entries = sys_.state_entries()
    run.delta_rows = rows_total
    return run


def _run(query: str, stream: HubStream, system: str, times: list[float],
         digests: list[int]) -> Run:
    us = [1e6 * t for t in times]
    return Run(query, stream.n_live, system, us, stream.phases, digests)


def run_system(system: str, query: str, stream: HubStream, clock: str = "thread") -> Run:
    if system == "naive":
        return run_naive(query, stream, CLOCKS[clock])
    return run_ivm(query, EPS_OF[system], stream, CLOCKS[clock])


class Disagreement(AssertionError):
    """Two systems' deltas or final results differ."""


def check_agreement(runs: Sequence[Run]) -> None:
    ref = runs[0]
    for r in runs[1:]:
        if r.digests != ref.digests:
            i = next(j for j, (x, y) in enumerate(zip(r.digests, ref.digests)) if x != y)
            msg = (f"{r.query} |D|={r.size}: {r.system} and {ref.system} disagree at "
                   f"update {i}")
            raise Disagreement(msg)
        if r.final != ref.final:
            msg = f"{r.query} |D|={r.size}: final results of {r.system} and {ref.system} differ"
            raise Disagreement(msg)


# -- reporting -----------------------------------------------------------------------


def _series(rows: Sequence[dict[str, Any]], q: str, s: str, key: str) -> tuple[list[int],
                                                                             list[float]]:
    pts = sorted((r["size"], r[key]) for r in rows if r["query"] == q and r["system"] == s)
    return [p[0] for p in pts], [p[1] for p in pts]


def slopes(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for q in QUERIES:
        for s in SYSTEMS:
            xs, _ = _series(rows, q, s, "mean_us")
            if len(xs) < 2:
                continue
            out.append({
                "query": q, "system": s,
                "slope_mean": loglog_slope(zip(xs, _series(rows, q, s, "mean_us")[1])),
                "slope_p99": loglog_slope(zip(xs, _series(rows, q, s, "p99_us")[1])),
                "slope_hot": loglog_slope(zip(xs, _series(rows, q, s, "hot_mean_us")[1])),
                "theory": THEORY[s],
            })
    return out


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    head = (f"{'query':8} {'#':>2} {'|D|':>7} {'system':11} {'mean us':>9} {'p99 us':>9} "
            f"{'max us':>8} {'hot us':>9} {'load us':>8} {'state':>9}")
    lines = [head, "-" * len(head)]
    for i, r in enumerate(rows):
        lines.append(
            f"{r['query']:8} {r['size_index']:>2} {r['size']:>7} {r['system']:11} "
            f"{r['mean_us']:>9.1f} {r['p99_us']:>9.1f} {r['max_us']:>8.0f} "
            f"{r['hot_mean_us']:>9.1f} {r['load_mean_us']:>8.1f} {r['state_entries']:>9}"
        )
        if i + 1 < len(rows) and rows[i + 1]["query"] != r["query"]:
            lines.append("")
    return "\n".join(lines)


def format_slopes(sl: Sequence[dict[str, Any]]) -> str:
    head = (f"{'query':8} {'system':11} {'mean':>6} {'p99':>6} {'hot':>6}  "
            "theory (worst-case update time)")
    lines = [head, "-" * len(head)]
    for s in sl:
        lines.append(f"{s['query']:8} {s['system']:11} {s['slope_mean']:>6.2f} "
                     f"{s['slope_p99']:>6.2f} {s['slope_hot']:>6.2f}  {s['theory']}")
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    queries = [q for q in QUERIES if any(r["query"] == q for r in rows)]
    made = subplots(2, len(queries), figsize=(6 * len(queries), 9.5), squeeze=False)
    if made is None:
        return
    fig, axes = made
    colors = {"ivm_eps0": "tab:blue", "ivm_eps0.5": "tab:green", "ivm_eps1": "tab:red",
              "naive": "tab:gray"}
    panels = (("mean_us", "p99_us", "FIFO tail: mean (solid), p99 (dotted)"),
              ("hot_mean_us", None, "hub->hub edge toggles: mean"))
    for row, (key, extra, what) in enumerate(panels):
        for ax, q in zip(axes[row], queries):
            ymin = math.inf
            xs: list[int] = []
            for s in SYSTEMS:
                xs_s, ys = _series(rows, q, s, key)
                if not xs_s or not all(math.isfinite(y) and y > 0 for y in ys):
                    continue
                xs = xs_s
                ymin = min(ymin, *ys)
                sl = loglog_slope(zip(xs, ys))
                ax.plot(xs, ys, "o-", color=colors[s], label=f"{s} (slope {sl:.2f})")
                if extra:
                    ax.plot(xs, _series(rows, q, s, extra)[1], ":", color=colors[s],
                            alpha=0.6)
            if len(xs) > 1 and math.isfinite(ymin):
                for k, style in ((0.5, "--"), (1.0, "-.")):
                    ref = [ymin * (x / xs[0]) ** k for x in xs]
                    ax.plot(xs, ref, style, color="black", alpha=0.35, lw=1,
                            label=f"slope {k:g}")
            loglog(ax, "|D| (live edges)", "us per update", f"triangle {q} - {what}", 9)
    save(fig, path, title)


# -- driver --------------------------------------------------------------------------


@dataclass
class Config:
    sizes: list[int]
    queries: list[str]
    systems: list[str]
    seed: int = 1
    tail: float = 0.5
    hot: int = 200
    clock: str = "thread"
    spec: GraphSpec = field(default_factory=GraphSpec)
    out_dir: Path = RESULTS
    stem: str = "triangle"
    plot: bool = True
    command: str | None = None


def run_all(cfg: Config, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every size x query x system, check agreement, return the JSON document."""
    rows: list[dict[str, Any]] = []
    graphs: list[dict[str, Any]] = []
    started = time.perf_counter()
    for si, size in enumerate(cfg.sizes):
        stream = hub_stream(size, cfg.seed + si, cfg.tail, cfg.spec, cfg.hot)
        live = [e for _, e in stream.updates[: stream.n_live]]
        graphs.append({"size": size, "updates": len(stream.updates),
                       "phases": stream.phases, "hub_degree_live": stream.hub_degree,
                       **degree_stats(live)})
        log(f"|D|={size}: {len(stream.updates)} updates, hub degree ~{stream.hub_degree}, "
            f"{graphs[-1]['vertices']} vertices")
        for q in cfg.queries:
            runs = []
            for s in cfg.systems:
                run = run_system(s, q, stream, cfg.clock)
                runs.append(run)
                st = run.stats()
                st["size_index"] = si
                rows.append(st)
                log(f"  {q:8} |D|={size:>6} {s:11} mean {st['mean_us']:9.1f} us  "
                    f"p99 {st['p99_us']:9.1f} us  ({st['total_s']:.1f} s)")
            check_agreement(runs)
            final = runs[0].final
            result = final if q == "count" else len(final)
            log(f"  {q:8} |D|={size:>6} all {len(runs)} systems agree "
                f"({'count' if q == 'count' else 'rows'} {result})")
    extra: dict[str, Any] = {
        "what": "triangle IVM-epsilon vs naive delta query",
        "graph": cfg.spec.describe(),
        "graph_params": asdict(cfg.spec),
        "stream": (f"load: |D| inserts in random order; tail: {cfg.tail:g}*|D| FIFO steps "
                   "(insert newest, delete oldest), mean/p50/p99/max over the tail; hot: "
                   f"{cfg.hot} updates toggling hub->hub edges (hot_mean_us)"),
        "timing": ("per update: view.apply + view.end_epoch (epoch size 1); clock "
                   f"{cfg.clock!r} ({CLOCK_NAMES[cfg.clock]}); "
                   "cyclic gc disabled during the timed loop"),
        "sql": SQL,
        "sizes": cfg.sizes,
        "seed": cfg.seed,
        "graphs": graphs,
        "slopes": slopes(rows),
        "agree": True,
        "wall_seconds": time.perf_counter() - started,
    }
    return result_record("triangle", rows, command=cfg.command, extra=extra, table=False)


def write(doc: dict[str, Any], cfg: Config) -> tuple[Path, Path | None]:
    jpath = write_json(doc, cfg.out_dir / f"{cfg.stem}.json", quiet=True)
    ppath = None
    if cfg.plot:
        ppath = cfg.out_dir / f"{cfg.stem}.png"
        g = doc["graph_params"]
        plot(doc["rows"], ppath,
             f"IVM-eps vs naive delta query; {g['hubs']} hubs of degree ~{g['hub_scale']:g}"
             f"*|D|^{g['hub_exp']:g} on a BA(m={g['attach']}) background (see JSON 'graph')")
    return jpath, ppath


def _ints(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        mult = 1000 if part.endswith("k") else 1
        out.append(int(float(part.rstrip("k")) * mult))
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run in seconds")
    p.add_argument("--sizes", type=_ints, help="live edges |D| per size, e.g. 2k,4k,8k")
    p.add_argument("--queries", default=",".join(QUERIES), help="count,listing")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=",".join(SYSTEMS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tail", type=float, default=0.5,
                   help="FIFO steps after the load, as a fraction of |D| (default 0.5)")
    p.add_argument("--hot", type=int, default=200,
                   help="updates toggling hub->hub edges after the tail (default 200)")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="thread",
                   help="per-update clock: thread CPU time (default) or wall (perf_counter)")
    p.add_argument("--hubs", type=int, default=GraphSpec.hubs, help="number of hubs (2)")
    p.add_argument("--hub-exp", type=float, default=GraphSpec.hub_exp,
                   help="hub degree ~ hub_scale * |D|^hub_exp (1.0)")
    p.add_argument("--hub-scale", type=float, default=GraphSpec.hub_scale,
                   help="see --hub-exp (0.1)")
    p.add_argument("--attach", type=int, default=GraphSpec.attach,
                   help="Barabasi-Albert edges per new background vertex (1)")
    p.add_argument("--out-dir", type=Path, default=RESULTS,
                   help="where triangle[_quick].json/.png go (bench/results)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    args = p.parse_args(argv)
    args.argv = argv
    return args


QUICK_SIZES = [500, 1000, 2000, 4000]
FULL_SIZES = [2000, 4000, 8000, 16000, 32000]


def config_from_args(args: argparse.Namespace) -> Config:
    sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    queries = [q for q in args.queries.split(",") if q]
    systems = [s for s in args.systems.split(",") if s]
    for q in queries:
        if q not in QUERIES:
            raise SystemExit(f"unknown query {q!r}; expected one of {QUERIES}")
    for s in systems:
        if s not in SYSTEMS:
            raise SystemExit(f"unknown system {s!r}; expected one of {SYSTEMS}")
    spec = GraphSpec(args.hubs, args.hub_exp, args.hub_scale, args.attach)
    return Config(sorted(sizes), queries, systems, args.seed, args.tail, args.hot, args.clock,
                  spec,
                  args.out_dir,
                  "triangle_quick" if args.quick else "triangle", not args.no_plot,
                  command_line("bench.triangle_bench", args.argv))


def main(argv: Sequence[str] | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    cfg = config_from_args(parse_args(argv))
    log(f"graph: {cfg.spec.describe()}")
    log(f"sizes |D| = {cfg.sizes}; queries {cfg.queries}; systems {cfg.systems}")
    doc = run_all(cfg, log)
    jpath, ppath = write(doc, cfg)
    log("")
    log(format_table(doc["rows"]))
    log("")
    log("log-log slope of update time vs |D| (least squares over the sizes):")
    log(format_slopes(doc["slopes"]))
    log("")
    log(f"wrote {jpath}" + (f" and {ppath}" if ppath else "")
        + f" ({doc['wall_seconds']:.0f} s)")
    return doc


if __name__ == "__main__":
    try:
        main()
    except Disagreement as err:
        print(f"FAIL: {err}", file=sys.stderr)
        sys.exit(1)
