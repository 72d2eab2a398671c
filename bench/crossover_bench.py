"""Crossover benchmark: where ivmflow beats recomputation, and by how much it beats plain
first-order IVM.

Systems (one process, same stream, same epochs):

* ``ivmflow``: the local engine through the public API (``View.apply`` per update,
  ``View.end_epoch`` per epoch).
* ``delta_ivm``: plain first-order IVM in Python (:mod:`bench.baseline_delta`: delta
  queries over hash indexes, no views).
* ``duckdb``: DuckDB recomputation per epoch (threads=1), result kept as a
  ``(row, count)`` table and the delta computed inside DuckDB (new - old); only the
  delta rows reach Python. At small epoch sizes DuckDB runs a measured prefix of the
  epochs and its time is extrapolated linearly to the whole stream (marked
  ``extrapolated`` in the JSON and the table).

Workload: a skewed directed graph (``nodes`` nodes, Zipf-like out- and in-degree weights,
shuffled ids) and a FIFO window of ``W`` live edges: the first ``W`` inserts are a warm-up
(untimed, identical for every system); then ``--updates`` timed updates alternate the
insert of the next edge and the delete of the edge inserted ``W`` inserts earlier, so the
live graph stays at ``W`` edges. Node count scales with the window (3000 nodes at 8k) so
that both windows have the same density: per-update work is alike, the state is 10x.

Queries: ``hop3_filter`` (3-hop path, ``G3.dst > T``, T = 90th percentile of ``dst``),
``hop4_bag`` (``SELECT G2.src, G3.src, G3.dst`` over the 4-hop path, bag semantics),
``star_count`` (3-star ``COUNT(*) GROUP BY G1.src``).

Every system's per-epoch delta is checked against ivmflow's (an order-independent
digest per epoch); any difference stops the run with a non-zero exit.

    python -m bench.crossover_bench                 # full grid -> results/crossover.*
    python -m bench.crossover_bench --quick         # seconds; results/crossover_quick.*
    python -m bench.crossover_bench --queries hop4_bag --windows 8000 --epochs 1000

Times are process CPU time (the machine may be shared); wall-clock time is kept next to
it. Also reports per-update latency at epoch size 1 on ``hop3_filter`` (each update timed
with its epoch close): p50 / p99 / max.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.baseline_delta import DeltaIVM
from bench.baseline_scp import CQ, Atom
from bench.harness import RESULTS, command_line, percentile, result_record
from bench.harness.plots import loglog, save, subplots
from bench.harness.streams import ZipfStream, zipf_stream
from bench.run_bench import delta_pairs, digest
from core.native import NativeBuildError
from core.records import Update

QUERIES: tuple[str, ...] = ("hop3_filter", "hop4_bag", "star_count")
SYSTEMS: tuple[str, ...] = ("ivmflow", "ivmflow_native", "delta_ivm", "duckdb")
"""``ivmflow_native`` is the same view with its hot path compiled (``native=True``:
Cython and a C compiler); the run is skipped with the reason where that cannot build."""
_DDL = "CREATE TABLE G(src INT, dst INT);\n"


def query_sql(name: str, threshold: int) -> str:
    """SQL text of a crossover query."""
    if name == "hop3_filter":
        return _DDL + ("SELECT G1.src AS A, G2.src AS B, G3.src AS C, G3.dst AS D\n"
                       "FROM G G1, G G2, G G3\n"
                       f"WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst > {threshold};\n")
    if name == "hop4_bag":
        return _DDL + ("SELECT G2.src AS B, G3.src AS C, G3.dst AS D\n"
                       "FROM G G1, G G2, G G3, G G4\n"
                       "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G4.src;\n")
    if name == "star_count":
        return _DDL + ("SELECT G1.src, COUNT(*)\nFROM G G1, G G2, G G3\n"
                       "WHERE G1.src = G2.src AND G1.src = G3.src\nGROUP BY G1.src;\n")
    raise ValueError(f"unknown query {name!r}; expected one of {QUERIES}")


def query_cq(name: str, threshold: int) -> CQ:
    """The same query for the delta-query baseline (hand-written)."""
    if name == "hop3_filter":
        t = threshold
        return CQ((Atom("G", ("A", "B")), Atom("G", ("B", "C")),
                   Atom("G", ("C", "D"), lambda r: r[1] > t, f"G3.dst > {t}")),
                  ("A", "B", "C", "D"))
    if name == "hop4_bag":
        return CQ((Atom("G", ("A", "B")), Atom("G", ("B", "C")), Atom("G", ("C", "D")),
                   Atom("G", ("D", "E"))), ("B", "C", "D"))
    if name == "star_count":
        return CQ((Atom("G", ("A", "B1")), Atom("G", ("A", "B2")), Atom("G", ("A", "B3"))),
                  ("A",), count=True)
    raise ValueError(f"unknown query {name!r}; expected one of {QUERIES}")


class DuckDBDiff:
    """Recompute per epoch on DuckDB; the delta is computed in DuckDB (new - old)."""

    def __init__(self, sql: str, n_cols: int, threads: int = 1) -> None:
        import duckdb

        stmts = [s.strip() for s in sql.split(";") if s.strip()]
        self.con = duckdb.connect(":memory:")
        self.con.execute(f"SET threads = {int(threads)}")
        for stmt in stmts[:-1]:
            self.con.execute(stmt)
        self.cols = [f"c{i}" for i in range(n_cols)]
        cl = ", ".join(self.cols)
        self._recompute = (f"CREATE OR REPLACE TABLE new_res AS SELECT {cl}, "
                           f"count(*)::BIGINT AS m FROM ({stmts[-1]}) AS q({cl}) GROUP BY ALL")
        self._diff = (f"SELECT {cl}, sum(m) AS d FROM (SELECT {cl}, m FROM new_res UNION ALL "
                      f"SELECT {cl}, -m FROM old_res) GROUP BY ALL HAVING sum(m) <> 0")
        self.con.execute(f"CREATE TABLE old_res AS SELECT {cl}, 0::BIGINT AS m "
                         f"FROM ({stmts[-1]}) AS q({cl}) LIMIT 0")
        self._pending: dict[tuple[Any, ...], int] = {}

    def apply(self, u: Update) -> None:
        """Buffer one update (sets of distinct edges: mult 1, inserts and deletes; an
        edge inserted and deleted in one epoch cancels)."""
        if u.mult != 1:
            raise ValueError("DuckDBDiff handles multiplicity-1 updates only")
        pending = self._pending
        pending[u.row] = pending.get(u.row, 0) + (1 if u.op == "+" else -1)

    def _flush(self) -> None:
        con = self.con
        ins = [r for r, c in self._pending.items() if c > 0]
        dels = [r for r, c in self._pending.items() if c < 0]
        self._pending = {}
        if dels:
            rows = dels
            con.execute("CREATE OR REPLACE TEMP TABLE _d AS SELECT unnest($1) AS src, "
                        "unnest($2) AS dst", [[r[0] for r in rows], [r[1] for r in rows]])
            con.execute("DELETE FROM G USING _d WHERE G.src = _d.src AND G.dst = _d.dst")
        if ins:
            rows = ins
            con.execute("INSERT INTO G SELECT unnest($1), unnest($2)",
                        [[r[0] for r in rows], [r[1] for r in rows]])

    def end_epoch(self) -> dict[tuple[Any, ...], int]:
        self._flush()
        con = self.con
        con.execute(self._recompute)
        rows = con.execute(self._diff).fetchall()
        con.execute("DROP TABLE old_res")
        con.execute("ALTER TABLE new_res RENAME TO old_res")
        return {tuple(r[:-1]): int(r[-1]) for r in rows}

    def close(self) -> None:
        self.con.close()


def make_system(system: str, query: str, stream: ZipfStream) -> Any:
    sql = query_sql(query, stream.threshold)
    if system in ("ivmflow", "ivmflow_native"):
        from dataflow.api import compile_query

        return compile_query(sql).maintain(native=system == "ivmflow_native")
    if system == "delta_ivm":
        return DeltaIVM(query_cq(query, stream.threshold))
    if system == "duckdb":
        from dataflow.api import compile_query

        return DuckDBDiff(sql, len(compile_query(sql).output_columns))
    raise ValueError(f"unknown system {system!r}")


@dataclass
class Result:
    query: str
    window: int
    epoch: int
    system: str
    updates: int
    epochs_total: int
    epochs_measured: int
    seconds: float
    measured_seconds: float
    extrapolated: bool
    delta_rows: int
    digests: list[tuple[int, int]]
    latencies_ns: list[int] | None = None
    wall_seconds: float = 0.0
    wall_latencies_ns: list[int] | None = None

    def record(self) -> dict[str, Any]:
        return {"query": self.query, "window": self.window, "epoch": self.epoch,
                "system": self.system, "updates": self.updates,
                "epochs_total": self.epochs_total, "epochs_measured": self.epochs_measured,
                "seconds": round(self.seconds, 4),
                "wall_seconds": round(self.wall_seconds, 4),
                "measured_seconds": round(self.measured_seconds, 4),
                "extrapolated": self.extrapolated, "delta_rows": self.delta_rows,
                "updates_per_s": float(f"{self.updates / self.seconds:.4g}")}


def hold_out_of_gc() -> None:
    """Move everything allocated so far (the preloaded stream above all) out of the
    cyclic collector's reach. A real stream passes through; this harness holds every
    update in memory, and full collections would scan them on behalf of whichever system
    runs. The systems' own state, built after this, is collected as usual."""
    gc.collect()
    gc.freeze()


class WarmUpTooSlow(Exception):
    """The untimed warm-up exceeded its limit: the point is skipped (reported)."""


def _warm(system: str, query: str, stream: ZipfStream, warm_limit_s: float | None) -> Any:
    inst = make_system(system, query, stream)
    t_warm = time.perf_counter()
    for i, u in enumerate(stream.warm):
        inst.apply(u)
        if warm_limit_s is not None and i % 256 == 0 \
                and time.perf_counter() - t_warm > warm_limit_s:
            raise WarmUpTooSlow(f"{system} needs over {warm_limit_s:.0f} s for the warm-up "
                                f"({i + 1} of {len(stream.warm)} inserts)")
    inst.end_epoch()
    gc.collect()
    return inst


CHUNK_UPDATES = 1000
"""Throughput runs read the clocks once per chunk of about this many updates (a CPU-time
read is a system call: per epoch of one update it would be part of what is measured)."""


def run_one(system: str, query: str, stream: ZipfStream, epoch: int, max_epochs: int | None,
            keep_latency: bool = False, budget_s: float | None = None,
            warm_limit_s: float | None = None) -> Result:
    """Warm up (untimed), then time apply + end_epoch over the timed stream's epochs
    (the first ``max_epochs`` of them, or those run within ``budget_s`` seconds,
    extrapolated to all, when given). The clocks are read per chunk of epochs; with
    ``keep_latency`` a second, separately warmed-up instance times each epoch."""
    inst = _warm(system, query, stream, warm_limit_s)
    timed = stream.timed
    epochs = [timed[i:i + epoch] for i in range(0, len(timed), epoch)]
    n_total = len(epochs)
    run = epochs if max_epochs is None or max_epochs >= n_total else epochs[:max_epochs]
    digests: list[tuple[int, int]] = []
    rows = 0
    clock = time.process_time_ns
    wall = time.perf_counter_ns
    total = 0
    total_wall = 0
    budget_ns = None if budget_s is None else int(budget_s * 1e9)
    per_chunk = max(1, CHUNK_UPDATES // epoch)
    done = 0
    while done < len(run):
        if budget_ns is not None and total > budget_ns:
            break
        chunk = run[done:done + per_chunk]
        deltas = []
        w0 = wall()
        t0 = clock()
        for ep in chunk:
            for u in ep:
                inst.apply(u)
            deltas.append(inst.end_epoch())
        t1 = clock()
        w1 = wall()
        total += t1 - t0
        total_wall += w1 - w0
        done += len(chunk)
        for d in deltas:
            pairs = delta_pairs(d)
            rows += len(pairs)
            digests.append(digest(pairs))
    if hasattr(inst, "close"):
        inst.close()
    lat: list[int] | None = None
    lat_wall: list[int] | None = None
    if keep_latency:
        lat, lat_wall = epoch_latencies(system, query, stream, run[:done], warm_limit_s)
    measured = total / 1e9
    run = run[:done]
    n_upd = sum(len(ep) for ep in run)
    extrap = len(run) < n_total
    seconds = measured * len(timed) / n_upd if extrap else measured
    scale = len(timed) / n_upd if extrap else 1.0
    return Result(query, stream.window, epoch, system, len(timed), n_total, len(run),
                  seconds, measured, extrap, rows, digests, lat,
                  total_wall / 1e9 * scale, lat_wall)


def epoch_latencies(system: str, query: str, stream: ZipfStream, run: list[list[Update]],
                    warm_limit_s: float | None) -> tuple[list[int], list[int]]:
    """CPU and wall time of each epoch of ``run`` (apply + end_epoch), on a fresh
    instance warmed up like the throughput run's."""
    inst = _warm(system, query, stream, warm_limit_s)
    clock = time.process_time_ns
    wall = time.perf_counter_ns
    lat: list[int] = []
    lat_wall: list[int] = []
    for ep in run:
        w0 = wall()
        t0 = clock()
        for u in ep:
            inst.apply(u)
        inst.end_epoch()
        t1 = clock()
        w1 = wall()
        lat.append(t1 - t0)
        lat_wall.append(w1 - w0)
    if hasattr(inst, "close"):
        inst.close()
    return lat, lat_wall


def check_agree(ref: Result, other: Result) -> None:
    """Fail loudly if ``other``'s per-epoch deltas differ from ``ref``'s."""
    n = min(len(ref.digests), len(other.digests))
    for i in range(n):
        if ref.digests[i] != other.digests[i]:
            raise SystemExit(
                f"MISMATCH {other.system} vs {ref.system}: {ref.query} window={ref.window} "
                f"epoch size {ref.epoch}, epoch {i + 1}: {other.digests[i][0]} vs "
                f"{ref.digests[i][0]} delta rows (digests differ)")
    if len(other.digests) == len(ref.digests) and other.delta_rows != ref.delta_rows:
        raise SystemExit(f"MISMATCH {other.system}: delta rows {other.delta_rows} vs "
                         f"{ref.delta_rows}")


def plot(records: list[dict[str, Any]], path: Path) -> None:
    queries = sorted({r["query"] for r in records}, key=QUERIES.index)
    windows = sorted({r["window"] for r in records})
    colors = {"ivmflow": "tab:blue", "ivmflow_native": "tab:purple", "delta_ivm": "tab:orange",
              "duckdb": "tab:green"}
    styles = ["-", "--", ":"]
    made = subplots(1, len(queries), figsize=(5.2 * len(queries), 4.6), squeeze=False)
    if made is None:
        return
    fig, axes = made
    for ax, q in zip(axes[0], queries):
        for wi, w in enumerate(windows):
            for s in SYSTEMS:
                pts = sorted((r["epoch"], r["updates_per_s"], r["extrapolated"])
                             for r in records
                             if r["query"] == q and r["window"] == w and r["system"] == s)
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[wi % 3],
                        color=colors[s], marker="o", label=f"{s} W={w // 1000}k")
                ex = [p for p in pts if p[2]]
                if ex:
                    ax.plot([p[0] for p in ex], [p[1] for p in ex], "x", color="black",
                            markersize=9)
            for e in sorted({r["epoch"] for r in records if r["query"] == q}):
                cand = [r for r in records
                        if r["query"] == q and r["window"] == w and r["epoch"] == e]
                if cand:
                    best = max(cand, key=lambda r: r["updates_per_s"])
                    ax.plot([e], [best["updates_per_s"]], "*", color=colors[best["system"]],
                            markersize=16, markeredgecolor="black")
        loglog(ax, "epoch size (updates)", "updates/s", f"{q}  (star = winner, x = extrapolated)")
    save(fig, path)


def winners(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = sorted({(r["query"], r["window"], r["epoch"]) for r in records},
                  key=lambda k: (QUERIES.index(k[0]), k[1], k[2]))
    for q, w, e in keys:
        cand = {r["system"]: r["seconds"] for r in records
                if (r["query"], r["window"], r["epoch"]) == (q, w, e)}
        best = min(cand, key=lambda s: cand[s])
        row: dict[str, Any] = {"query": q, "window": w, "epoch": e, "winner": best}
        for mine in ("ivmflow", "ivmflow_native"):
            if mine not in cand:
                continue
            for s in ("delta_ivm", "duckdb"):
                if s in cand:
                    row[f"{mine}_speedup_vs_{s}"] = round(cand[s] / cand[mine], 2)
        out.append(row)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queries", nargs="+", default=list(QUERIES), choices=QUERIES)
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    p.add_argument("--windows", nargs="+", type=int, default=[8000, 80000])
    p.add_argument("--epochs", nargs="+", type=int, default=[1, 10, 100, 1000])
    p.add_argument("--updates", type=int, default=80000, help="timed updates")
    p.add_argument("--duckdb-max-epochs", type=int, default=200,
                   help="DuckDB runs at most this many epochs, extrapolated to all")
    p.add_argument("--budget", type=float, default=60.0,
                   help="seconds per point; a system that needs more runs a measured "
                        "prefix of the epochs and is extrapolated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--out", default=None, help="JSON path (default results/crossover.json)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--exclude", nargs="+", default=[], metavar="QUERY:WINDOW:SYSTEM",
                   help="points not to run (reported as skipped), e.g. "
                        "star_count:80000:duckdb, whose recomputation takes minutes")
    args = p.parse_args(argv)
    excluded = set()
    for item in args.exclude:
        parts = item.split(":")
        if len(parts) != 3 or parts[0] not in QUERIES or parts[2] not in SYSTEMS \
                or not parts[1].isdigit():
            p.error(f"--exclude {item!r}: expected QUERY:WINDOW:SYSTEM, e.g. "
                    "star_count:80000:duckdb")
        excluded.add((parts[0], int(parts[1]), parts[2]))
    if args.quick:
        args.windows, args.updates, args.duckdb_max_epochs = [200, 1500], 600, 5
        args.budget = 0.2
    out = Path(args.out) if args.out else RESULTS / (
        "crossover_quick.json" if args.quick else "crossover.json")
    records: list[dict[str, Any]] = []
    latency: dict[str, Any] = {}
    t_start = time.perf_counter()
    skipped: list[dict[str, Any]] = []

    def write(final: bool) -> None:
        extra = {
            "what": "crossover: ivmflow vs plain first-order IVM (delta queries) vs DuckDB "
                    "recompute+diff; seconds = process CPU time of apply + end_epoch over "
                    "the timed updates (warm-up of W inserts untimed; the clocks read once "
                    "per ~1000 updates); wall_seconds the same in wall-clock time (the "
                    "machine is shared: CPU time is the steadier measure); latency = CPU "
                    "time per update incl. its epoch close, from a second run that reads "
                    "the clocks around every epoch (wall_* in wall-clock time)",
            "duckdb_note": f"DuckDB runs at most {args.duckdb_max_epochs} epochs per point, "
                           f"and the baselines stop after {args.budget} s; where the stream "
                           "has more epochs, the time is extrapolated linearly from the "
                           "measured prefix (extrapolated=true)",
            "agreement": "every system's per-epoch deltas equal ivmflow's (digest per epoch; "
                         "extrapolated runs on their measured prefix)",
            "complete": final,
            "updates": args.updates, "windows": args.windows, "epochs": args.epochs,
            "seed": args.seed, "wall_s": round(time.perf_counter() - t_start, 1),
            "skipped": skipped, "winners": winners(records),
            "latency_epoch1_hop3_filter": latency,
        }
        result_record("crossover", records, command=command_line("bench.crossover_bench", argv),
                      extra=extra, out=out, table=False, quiet=not final)

    for w in args.windows:
        gc.unfreeze()
        stream = zipf_stream(w, args.updates, args.seed)
        hold_out_of_gc()
        print(f"window {w}: {stream.nodes} nodes, {len(stream.timed)} timed updates, "
              f"T={stream.threshold}", flush=True)
        for q in args.queries:
            for e in args.epochs:
                ref: Result | None = None
                for s in args.systems:
                    if (q, w, s) in excluded:
                        skipped.append({"query": q, "window": w, "epoch": e, "system": s,
                                        "reason": "excluded on the command line"})
                        continue
                    cap = args.duckdb_max_epochs if s == "duckdb" else None
                    keep = e == 1 and q == "hop3_filter"
                    try:
                        r = run_one(s, q, stream, e, cap, keep_latency=keep,
                                    budget_s=None if s.startswith("ivmflow") else args.budget,
                                    warm_limit_s=None if s.startswith("ivmflow")
                                    else 4 * args.budget)
                    except (WarmUpTooSlow, NativeBuildError) as err:
                        skipped.append({"query": q, "window": w, "epoch": e, "system": s,
                                        "reason": str(err)})
                        print(f"  {q:11s} W={w:<6d} epoch={e:<5d} {s:9s} skipped: {err}",
                              flush=True)
                        continue
                    if ref is None:
                        ref = r
                    else:
                        check_agree(ref, r)
                    rec = r.record()
                    records.append(rec)
                    if r.latencies_ns:
                        lat = r.latencies_ns
                        lw = r.wall_latencies_ns or lat
                        latency[f"{s}/W{w}"] = {
                            "p50_us": round(percentile(lat, 0.50) / 1e3, 2),
                            "p99_us": round(percentile(lat, 0.99) / 1e3, 2),
                            "max_us": round(max(lat) / 1e3, 2), "updates": len(lat),
                            "wall_p50_us": round(percentile(lw, 0.50) / 1e3, 2),
                            "wall_p99_us": round(percentile(lw, 0.99) / 1e3, 2)}
                        rec["latency"] = latency[f"{s}/W{w}"]
                    ext = f" (extrapolated from {r.epochs_measured} epochs)" \
                        if r.extrapolated else ""
                    print(f"  {q:11s} W={w:<6d} epoch={e:<5d} {s:9s} {r.seconds:8.2f} s "
                          f"{rec['updates_per_s']:>10,.0f} upd/s  {r.delta_rows:>8d} rows"
                          f"{ext}", flush=True)
                    write(False)
    write(True)
    summary = winners(records)
    for row in summary:
        extra = "  ".join(f"{k.replace('_speedup_vs_', ' over ')} x{v}"
                          for k, v in row.items() if "_speedup_vs_" in k)
        print(f"  {row['query']:11s} W={row['window']:<6d} epoch={row['epoch']:<5d} "
              f"winner {row['winner']:14s} {extra}")
    for k, v in latency.items():
        print(f"  latency epoch 1 hop3_filter {k}: p50 {v['p50_us']} us, p99 {v['p99_us']} us,"
              f" max {v['max_us']} us")
    if not args.no_plot:
        plot(records, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
