"""CROWN-style local benchmark: ivmflow's local engine vs standard change propagation
(SCP) vs DuckDB recomputation on FIFO sliding-window graph streams.

For each query and graph size, every system runs in this process on the same stream and
epochs. ivmflow and SCP process the whole stream; their per-epoch deltas must be equal
as multisets (compared through an order-independent digest per epoch; on a mismatch
the run is repeated in lockstep to show the differing rows, and the script fails).
DuckDB is capped: it is warm-started (untimed) with the state before the middle epoch
and timed on the next ``--duckdb-epochs`` epochs, whose deltas are checked against SCP's.

Reported per system: updates/s, delta rows/s (consolidated delta entries), processing
time (sum over epochs of apply + end_epoch; compile/setup excluded), peak memory
(``tracemalloc`` peak of a separate, untimed run, so tracing does not distort the
timings; for DuckDB its own ``duckdb_memory()`` total, not comparable), stored state
entries, and throughput ratios ivmflow/SCP and ivmflow/DuckDB (> 1: ivmflow faster).

Run from the repository root::

    python -m bench.run_bench                      # 5k,10k,20k,40k edges, all queries
    python -m bench.run_bench --quick              # < 1 min smoke run
    python -m bench.run_bench --queries hop4_project star_count --systems scp,duckdb

Writes ``bench/results/crown_local.json`` and ``.png`` (``crown_local_quick.*`` with
``--quick``).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.baseline_duckdb import DuckDBRecompute
from bench.baseline_scp import SCP, Bag, Row, bench_cq
from bench.harness import RESULTS, command_line, result_record
from bench.harness.plots import figure, save
from bench.workloads import QUERY_NAMES, Workload, make_workload
from core.records import Update

SYSTEMS: tuple[str, ...] = ("ivmflow", "scp", "scp_tuned", "duckdb")
_MASK = (1 << 64) - 1

Pairs = list[tuple[int, Row]]
"""A delta as ``(mult, row)`` pairs."""


class Maintained(Protocol):
    """What the runner drives: ivmflow's maintained view and both baselines."""

    def apply(self, update: Update) -> None: ...

    def end_epoch(self) -> Any: ...

    def state_entries(self) -> int: ...


# -- systems -------------------------------------------------------------------------


def delta_pairs(delta: Any) -> Pairs:
    """A delta of any system as ``(mult, row)`` pairs (not consolidated here)."""
    if isinstance(delta, dict):
        return [(m, tuple(r)) for r, m in delta.items()]
    return [(int(m), tuple(r)) for m, r in delta.rows]


def digest(pairs: Iterable[tuple[int, Row]]) -> tuple[int, int]:
    """Order-independent fingerprint of a delta: (entries, sum of entry hashes)."""
    n = 0
    h = 0
    for m, r in pairs:
        n += 1
        h = (h + hash((r, m))) & _MASK
    return n, h


def make_system(system: str, wl: Workload, early_projection: bool = False) -> Maintained:
    """A fresh maintained instance of ``system`` for the workload's query."""
    if system in ("scp", "scp_tuned"):
        cq = bench_cq(wl.query, wl.threshold, tuned=system == "scp_tuned")
        return SCP(cq, early_projection=early_projection)
    if system == "ivmflow":
        from dataflow.api import compile_query

        view: Maintained = compile_query(wl.sql).maintain(parallelism=1)
        return view
    if system == "duckdb":
        return DuckDBRecompute(wl.sql)
    raise ValueError(f"unknown system {system!r}; expected one of {SYSTEMS}")


@dataclass
class Run:
    """One system on one workload."""

    query: str
    n_edges: int
    system: str
    n_nodes: int = 0
    window: int = 0
    updates: int = 0
    epochs: int = 0
    seconds: float = 0.0
    setup_seconds: float = 0.0
    delta_rows: int = 0
    state_entries: int | None = None
    mem_peak_bytes: int | None = None
    mem_kind: str = ""
    capped: str = ""
    digests: list[tuple[int, int]] = field(default_factory=list, repr=False)
    first_epoch: int = 0

    @property
    def updates_per_s(self) -> float:
        return self.updates / self.seconds if self.seconds > 0 else float("nan")

    @property
    def delta_rows_per_s(self) -> float:
        return self.delta_rows / self.seconds if self.seconds > 0 else float("nan")

    @property
    def us_per_update(self) -> float:
        return 1e6 * self.seconds / self.updates if self.updates else float("nan")

    @property
    def us_per_work(self) -> float:
        """µs per (update + delta row): the unit of CROWN's O(1 + |Δ|) bound."""
        work = self.updates + self.delta_rows
        return 1e6 * self.seconds / work if work else float("nan")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("digests")
        d.update(updates_per_s=self.updates_per_s, delta_rows_per_s=self.delta_rows_per_s,
                 us_per_update=self.us_per_update, us_per_work=self.us_per_work)
        return d


def run_system(system: str, wl: Workload, epochs: Sequence[Sequence[Update]],
               first: int = 0, count: int | None = None,
               early_projection: bool = False) -> Run:
    """Time ``system`` on ``epochs[first:first+count]`` (warm-starting DuckDB with the
    epochs before ``first``); record a digest of every delta."""
    run = Run(wl.query, wl.n_edges, system, wl.n_nodes, wl.window, first_epoch=first)
    stop = len(epochs) if count is None else min(len(epochs), first + count)
    gc.collect()
    t0 = time.perf_counter()
    inst = make_system(system, wl, early_projection)
    if first:
        if not isinstance(inst, DuckDBRecompute):
            raise ValueError("only DuckDB can start in the middle of the stream")
        inst.load(u for ep in epochs[:first] for u in ep)
    run.setup_seconds = time.perf_counter() - t0
    clock = time.perf_counter
    total = 0.0
    for ep in epochs[first:stop]:
        t = clock()
        for u in ep:
            inst.apply(u)
        delta = inst.end_epoch()
        total += clock() - t
        pairs = delta_pairs(delta)
        run.digests.append(digest(pairs))
        run.delta_rows += len(pairs)
        run.updates += len(ep)
    run.epochs = stop - first
    run.seconds = total
    run.state_entries = inst.state_entries()
    if isinstance(inst, DuckDBRecompute):
        run.mem_peak_bytes = inst.memory_bytes()
        run.mem_kind = "duckdb_memory() total at end"
        inst.close()
    return run


def measure_memory(system: str, wl: Workload, epochs: Sequence[Sequence[Update]],
                   early_projection: bool = False) -> int:
    """``tracemalloc`` peak (bytes) of a whole untimed run of ``system``."""
    gc.collect()
    tracemalloc.start()
    try:
        inst = make_system(system, wl, early_projection)
        for ep in epochs:
            for u in ep:
                inst.apply(u)
            inst.end_epoch()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def first_mismatch(a: Run, b: Run) -> int | None:
    """Index (into ``b``'s epochs) of the first epoch whose digests differ."""
    off = b.first_epoch - a.first_epoch
    for i, dg in enumerate(b.digests):
        if a.digests[off + i] != dg:
            return i
    return None


def explain_mismatch(wl: Workload, epochs: Sequence[Sequence[Update]], sys_a: str,
                     sys_b: str, epoch_index: int, limit: int = 10) -> str:
    """Rerun both systems in lockstep to epoch ``epoch_index``; describe the difference."""
    a = make_system(sys_a, wl)
    b = make_system(sys_b, wl)
    da: Bag = {}
    db: Bag = {}
    for ep in epochs[:epoch_index + 1]:
        for u in ep:
            a.apply(u)
            b.apply(u)
        da = {r: m for m, r in delta_pairs(a.end_epoch())}
        db = {r: m for m, r in delta_pairs(b.end_epoch())}
    only_a = sorted(((r, m) for r, m in da.items() if db.get(r) != m), key=repr)
    only_b = sorted(((r, m) for r, m in db.items() if da.get(r) != m), key=repr)
    return (f"{wl.query} n_edges={wl.n_edges}: {sys_a} and {sys_b} disagree at epoch "
            f"{epoch_index + 1}: {len(da)} vs {len(db)} delta rows; "
            f"{sys_a} only {only_a[:limit]}; {sys_b} only {only_b[:limit]}")


class BenchMismatch(AssertionError):
    """Two systems produced different per-epoch deltas."""


# -- the benchmark -------------------------------------------------------------------


@dataclass
class Config:
    """What to run."""

    queries: list[str]
    sizes: list[int]
    main_size: int
    epoch: int = 1000
    systems: list[str] = field(default_factory=lambda: list(SYSTEMS))
    duckdb_epochs: int = 8
    duckdb_max_edges: int | None = None
    memory: bool = True
    model: str = "scale_free"
    attach: int = 8
    seed: int = 0
    early_projection: bool = False
    repeat: int = 1


def bench_one(cfg: Config, query: str, n_edges: int,
              log: Callable[[str], None] = print) -> list[Run]:
    """All systems on one (query, size); checks agreement; returns the runs."""
    wl = make_workload(query, n_edges, seed=cfg.seed, attach=cfg.attach, model=cfg.model)
    epochs = wl.epochs(cfg.epoch)
    runs: dict[str, Run] = {}
    for system in ("ivmflow", "scp", "scp_tuned"):
        if system not in cfg.systems:
            continue
        run = run_system(system, wl, epochs, early_projection=cfg.early_projection)
        for _ in range(cfg.repeat - 1):
            again = run_system(system, wl, epochs, early_projection=cfg.early_projection)
            if again.digests != run.digests:
                raise BenchMismatch(f"{system} is not deterministic on {query} {n_edges}")
            run.seconds = min(run.seconds, again.seconds)
        if cfg.memory:
            run.mem_peak_bytes = measure_memory(system, wl, epochs, cfg.early_projection)
            run.mem_kind = "tracemalloc peak (separate untimed run)"
        runs[system] = run
        log(f"  {query:13s} {n_edges:>7d} {system:9s} {run.updates_per_s:>12,.0f} upd/s"
            f"  {run.delta_rows:>9d} delta rows  {run.seconds:7.2f} s")
    for base in ("scp", "scp_tuned"):
        if "ivmflow" in runs and base in runs:
            bad = first_mismatch(runs[base], runs["ivmflow"])
            if bad is not None:
                raise BenchMismatch(explain_mismatch(wl, epochs, base, "ivmflow", bad))
    capped_out = cfg.duckdb_max_edges is not None and n_edges > cfg.duckdb_max_edges
    if "duckdb" in cfg.systems and not capped_out:
        first = len(epochs) // 2
        run = run_system("duckdb", wl, epochs, first=first, count=cfg.duckdb_epochs)
        run.capped = (f"epochs {first + 1}..{first + run.epochs} of {len(epochs)} only, "
                      "warm-started untimed")
        ref = runs.get("scp") or runs.get("ivmflow")
        if ref is not None:
            bad = first_mismatch(ref, run)
            if bad is not None:
                raise BenchMismatch(explain_mismatch(wl, epochs, ref.system, "duckdb",
                                                     first + bad))
        runs["duckdb"] = run
        log(f"  {query:13s} {n_edges:>7d} {'duckdb':8s} {run.updates_per_s:>12,.0f} upd/s"
            f"  {run.delta_rows:>9d} delta rows  {run.seconds:7.2f} s  ({run.capped})")
    return list(runs.values())


def ratios(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """ivmflow throughput over SCP's and DuckDB's, per (query, size)."""
    by: dict[tuple[str, int], dict[str, Run]] = {}
    for r in runs:
        by.setdefault((r.query, r.n_edges), {})[r.system] = r
    out = []
    for (q, n), d in by.items():
        iv = d.get("ivmflow")
        row: dict[str, Any] = {"query": q, "n_edges": n}
        for other in ("scp", "scp_tuned", "duckdb"):
            o = d.get(other)
            row[f"ivmflow_over_{other}"] = (iv.updates_per_s / o.updates_per_s
                                            if iv and o else None)
        out.append(row)
    return out


def format_table(runs: Sequence[Run]) -> str:
    """A plain-text table of all runs."""
    rat = {(r["query"], r["n_edges"]): r for r in ratios(runs)}
    head = (f"{'query':13s} {'edges':>7s} {'system':9s} {'upd/s':>11s} {'Δrows/s':>11s} "
            f"{'time s':>8s} {'µs/upd':>8s} {'peak MiB':>9s} {'state':>9s} "
            f"{'iv/scp':>7s} {'iv/tune':>7s} {'iv/duck':>7s}")
    lines = [head, "-" * len(head)]
    for r in runs:
        mem = f"{r.mem_peak_bytes / 2**20:9.1f}" if r.mem_peak_bytes is not None else " " * 9
        st = f"{r.state_entries:9d}" if r.state_entries is not None else f"{'-':>9s}"
        ra = rat[(r.query, r.n_edges)]
        cells = ["", "", ""]
        if r.system == "ivmflow":
            cells = [f"{ra[k]:7.2f}" if ra[k] is not None else f"{'-':>7s}"
                     for k in ("ivmflow_over_scp", "ivmflow_over_scp_tuned",
                               "ivmflow_over_duckdb")]
        flag = " *" if r.capped else ""
        lines.append(f"{r.query:13s} {r.n_edges:>7d} {r.system:9s} {r.updates_per_s:>11,.0f} "
                     f"{r.delta_rows_per_s:>11,.0f} {r.seconds:>8.2f} {r.us_per_update:>8.1f} "
                     f"{mem} {st} {cells[0]:>7s} {cells[1]:>7s} {cells[2]:>7s}{flag}")
    if any(r.capped for r in runs):
        lines.append("* DuckDB timed on a capped slice of epochs (see JSON 'capped'); "
                     "peak MiB for DuckDB is duckdb_memory(), not tracemalloc.")
    return "\n".join(lines)


def plot(runs: Sequence[Run], main_size: int, path: Path) -> None:
    """Throughput per query per system at ``main_size``, and µs/update vs graph size."""
    queries = list(dict.fromkeys(r.query for r in runs))
    systems = [s for s in SYSTEMS if any(r.system == s for r in runs)]
    colors = {"ivmflow": "tab:blue", "scp": "tab:orange", "scp_tuned": "tab:red",
              "duckdb": "tab:green"}
    fig = figure(figsize=(4 * max(2, len(queries)), 8))
    if fig is None:
        return
    grid = fig.add_gridspec(2, max(1, len(queries)))
    ax = fig.add_subplot(grid[0, :])
    width = 0.8 / max(1, len(systems))
    for k, s in enumerate(systems):
        xs, ys = [], []
        for i, q in enumerate(queries):
            hit = [r for r in runs if r.query == q and r.system == s and r.n_edges == main_size]
            if hit:
                xs.append(i + (k - (len(systems) - 1) / 2) * width)
                ys.append(hit[0].updates_per_s)
        ax.bar(xs, ys, width, label=s, color=colors.get(s))
    ax.set_xticks(range(len(queries)), queries)
    ax.set_yscale("log")
    ax.set_ylabel("updates / s (log)")
    ax.set_title(f"Throughput at {main_size:,} edges (FIFO window 20%; DuckDB on a capped "
                 "slice of epochs)")
    ax.legend()
    for i, q in enumerate(queries):
        axq = fig.add_subplot(grid[1, i])
        for s in systems:
            pts = sorted((r.n_edges, r.us_per_update) for r in runs
                         if r.query == q and r.system == s)
            if pts:
                axq.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=s,
                         color=colors.get(s))
        axq.set_xscale("log")
        axq.set_yscale("log")
        sizes = sorted({r.n_edges for r in runs if r.query == q})
        axq.set_xticks(sizes, [f"{n // 1000}k" if n >= 1000 else str(n) for n in sizes])
        axq.minorticks_off()
        axq.set_title(q)
        axq.set_xlabel("graph edges")
        if i == 0:
            axq.set_ylabel("µs per update (log)")
            axq.legend(fontsize="small")
    save(fig, path)


def run_all(cfg: Config, log: Callable[[str], None] = print) -> list[Run]:
    """Every (query, size) of the configuration."""
    runs: list[Run] = []
    for q in cfg.queries:
        for n in cfg.sizes:
            runs.extend(bench_one(cfg, q, n, log))
    return runs


def write_results(cfg: Config, runs: Sequence[Run], out_dir: Path, stem: str,
                  command: str | None = None) -> dict[str, Any]:
    """JSON + PNG into ``out_dir`` (the table printed); returns the JSON document."""
    extra: dict[str, Any] = {
        "config": asdict(cfg),
        "notes": [
            "Graph: networkx Barabasi-Albert (or --model scale_free), random orientation, "
            "node ids shuffled; stream: FIFO sliding window, w = 20% of the edges "
            "(insert in random order, delete each edge after w later insertions).",
            "hop3_full filter T = 90th percentile of the dst column; star_count is a "
            "3-star; comb2: 20% of the vertices in each of V1, V2, inserted first.",
            "ivmflow and SCP process the whole stream and must agree per epoch; "
            "seconds = sum over epochs of apply+end_epoch (setup excluded).",
            "DuckDB: recomputation per epoch (threads=1), timed only on a capped slice of "
            "epochs after an untimed warm start (see 'capped'); its deltas are checked "
            "too. Its cost is per epoch, so it is amortized over --epoch updates.",
            "us_per_work = seconds / (updates + delta rows): flat in the graph size for "
            "an O(1 + |delta|)-per-update algorithm.",
            "mem_peak_bytes: tracemalloc peak of a separate untimed run for ivmflow/SCP; "
            "DuckDB's duckdb_memory() total (native memory, not comparable).",
            "state_entries: SCP = index keys + rows of every view/atom index + result "
            "rows; ivmflow = its own state_entries(); DuckDB = base rows + kept result.",
        ],
        "ratios": ratios(runs),
    }
    doc = result_record("crown_local", [r.to_json() for r in runs], command=command,
                        extra=extra, out=out_dir / f"{stem}.json", table=format_table(runs))
    plot(runs, cfg.main_size, out_dir / f"{stem}.png")
    return doc


def _csv(values: Sequence[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x for x in v.split(",") if x)
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--edges", type=int, default=40000,
                   help="main graph size (throughput chart); default 40000")
    p.add_argument("--sizes", nargs="+", help="sizes for the scaling sweep "
                   "(default: edges/8, edges/4, edges/2, edges)")
    p.add_argument("--epoch", type=int, default=1000, help="updates per epoch")
    p.add_argument("--queries", nargs="+", help=f"subset of {','.join(QUERY_NAMES)}")
    p.add_argument("--systems", nargs="+", help="subset of ivmflow,scp,duckdb")
    p.add_argument("--duckdb-epochs", type=int, default=8,
                   help="DuckDB is timed on this many epochs from the middle (default 8)")
    p.add_argument("--duckdb-max-edges", type=int, default=None,
                   help="skip DuckDB above this graph size")
    p.add_argument("--no-memory", action="store_true",
                   help="skip the tracemalloc runs (halves the run time)")
    p.add_argument("--model", choices=("ba", "scale_free"), default="scale_free")
    p.add_argument("--attach", type=int, default=8, help="BA edges per new node")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1,
                   help="time ivmflow and SCP this many times, keep the fastest")
    p.add_argument("--scp-early-projection", action="store_true",
                   help="let SCP project away dead variables in its views")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2000 edges, epoch 200, 2 DuckDB epochs, no memory runs")
    p.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> Config:
    """The run configuration for parsed arguments (``--quick`` shrinks everything)."""
    queries = _csv(args.queries) or list(QUERY_NAMES)
    for q in queries:
        if q not in QUERY_NAMES:
            raise SystemExit(f"unknown query {q!r}; expected some of {','.join(QUERY_NAMES)}")
    systems = _csv(args.systems) or list(SYSTEMS)
    for s in systems:
        if s not in SYSTEMS:
            raise SystemExit(f"unknown system {s!r}; expected some of {','.join(SYSTEMS)}")
    edges = args.edges
    epoch = args.epoch
    duck = args.duckdb_epochs
    memory = not args.no_memory
    if args.quick:
        edges = min(edges, 2000)
        epoch = min(epoch, 200)
        duck = min(duck, 2)
        memory = False
    sizes = sorted({int(s) for s in _csv(args.sizes)} | {edges}) if args.sizes else \
        sorted({max(1, edges // 8), max(1, edges // 4), max(1, edges // 2), edges})
    if args.quick and not args.sizes:
        sizes = sorted({max(1, edges // 2), edges})
    return Config(queries, sizes, edges, epoch, systems, duck, args.duckdb_max_edges, memory,
                  args.model, args.attach, args.seed, args.scp_early_projection,
                  max(1, args.repeat))


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    args = parse_args(argv)
    cfg = config_from_args(args)
    print(f"crown_local: queries={cfg.queries} sizes={cfg.sizes} epoch={cfg.epoch} "
          f"systems={cfg.systems} model={cfg.model}", flush=True)
    runs = run_all(cfg, lambda s: print(s, flush=True))
    print()
    stem = "crown_local_quick" if args.quick else "crown_local"
    write_results(cfg, runs, args.out, stem, command_line("bench.run_bench", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
