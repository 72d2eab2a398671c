"""What a window function costs per update against its partition's size (issue 42,
item 7): ROW_NUMBER, RANK, SUM over a cumulative ROWS frame, SUM over the default RANGE
frame, and the top-N-per-group pattern, over one partition of N rows of
``R(id, g, k, v)`` ordered by ``k``.

The window operator (:mod:`operators.window`) keeps each partition in an ordered index;
a change costs O(log N) there plus the rows whose window value changes, which SQL
decides, not the engine: a row inserted at place p renumbers the N - p rows after it.
So two streams, each of mixed inserts and deletes that keep the partition at N rows:

- ``tail``: inserts after the last row in ``k`` order, deletes of one of the last rows
  (a time series): one or two rows change per update, so the cost should be flat or
  grow like log N (ROW_NUMBER, RANK, the ROWS and RANGE sums);
- ``random``: inserts and deletes anywhere, for the top-N per group (``WHERE rn <=
  10`` over the windowed derived table: the window view keeps the first 10 rows of the
  partition), whose output change is at most a row or two whatever N.

For each size the base rows are loaded and one warm-up epoch applied (untimed), then
the stream is timed through the Python API (``view.apply``, ``view.end_epoch``), as
bench/operator_cost_bench.py does (its :func:`run_ivmflow`, state frozen out of the
cyclic collector); DuckDB (one thread) applying each epoch and recomputing the query is
the baseline. At the end the maintained snapshot is compared with DuckDB's answer on
the same state; a difference fails the run.

    python -m bench.window_cost_bench [--sizes 1000 10000 100000] [--updates 1000]
        [--epoch 100] [--functions row_number rank ...] [--out bench/results/window_cost]

Times are process CPU seconds (a shared machine). Prints a table and writes
``OUT.json`` and ``OUT.png`` (us/update against N, log-log). Runs interpreted unless
IVMFLOW_NATIVE is set.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("IVMFLOW_NATIVE", "0")

from sortedcontainers import SortedList  # noqa: E402

from bench.harness import (  # noqa: E402
    RESULTS,
    command_line,
    commit_label,
    loglog_slope,
    result_record,
)
from bench.harness.plots import loglog, save, subplots  # noqa: E402
from bench.operator_cost_bench import DuckDBRecompute, run_ivmflow  # noqa: E402
from core.records import Update  # noqa: E402
from tests.oracle import diff_counters  # noqa: E402

ORDER = "PARTITION BY g ORDER BY k, id"
TOP_N = 10


@dataclass(frozen=True)
class Function:
    """One benchmarked window function: its query, its stream, what the design says."""

    name: str
    sql: str
    stream: str
    """'tail' or 'random' (see the module)."""
    design: str


FUNCTIONS = [
    Function("row_number", f"SELECT id, k, ROW_NUMBER() OVER ({ORDER}) AS rn FROM R",
             "tail", "O(log N) + rows renumbered (1 at the tail)"),
    Function("rank", "SELECT id, k, RANK() OVER (PARTITION BY g ORDER BY k) AS r FROM R",
             "tail", "O(log N) + rows re-ranked (1 at the tail)"),
    Function("sum_rows", f"SELECT id, k, SUM(v) OVER ({ORDER} ROWS BETWEEN UNBOUNDED "
             "PRECEDING AND CURRENT ROW) AS s FROM R", "tail",
             "O(log N) + rows whose sum changes (1 at the tail)"),
    Function("sum_range", "SELECT id, k, SUM(v) OVER (PARTITION BY g ORDER BY k) AS s "
             "FROM R", "tail", "O(log N) + peers of the rows whose sum changes"),
    Function("top_n_per_group", f"SELECT id, k FROM (SELECT id, k, ROW_NUMBER() OVER "
             f"({ORDER}) AS rn FROM R) t WHERE rn <= {TOP_N}", "random",
             f"O(log N) + the first {TOP_N} rows' change"),
]
BY_NAME = {f.name: f for f in FUNCTIONS}


class Stream:
    """N base rows of one partition (``g = 0``) and the timed epochs of one stream,
    from one seed; duck-typed as operator_cost_bench's Workload (``base``, ``warmup``,
    ``epochs``)."""

    def __init__(self, kind: str, n: int, updates: int, epoch: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.kind = kind
        self.live: SortedList = SortedList()  # (k, id, v)
        self.next_id = 0
        self.top = 0
        self.base = [self._insert(self.rng.randrange(4 * n) if kind == "random"
                                  else self._tail()) for _ in range(n)]
        self.warmup = [self._epoch(n, epoch)]
        self.epochs = [self._epoch(n, epoch) for _ in range(0, updates, epoch)]

    def _tail(self) -> int:
        self.top += 1 + self.rng.randrange(2)
        return self.top

    def _insert(self, k: int) -> Update:
        self.next_id += 1
        row = (self.next_id, 0, k, self.rng.randrange(1000))
        self.live.add((k, self.next_id, row))
        return Update("+", "R", row)

    def _epoch(self, n: int, size: int) -> list[Update]:
        """One epoch: inserts and deletes, half each. A tail epoch deletes the last
        rows that were there before it (not its own inserts, which would cancel them
        within the epoch)."""
        rng, out = self.rng, []
        old = len(self.live)
        for _ in range(size):
            if rng.random() < 0.5 or not old:
                out.append(self._insert(rng.randrange(4 * n) if self.kind == "random"
                                        else self._tail()))
                continue
            at = rng.randrange(len(self.live)) if self.kind == "random" else old - 1
            _k, _id, row = self.live.pop(at)
            old -= 1
            out.append(Update("-", "R", row))
        return out


def measure(f: Function, n: int, updates: int, epoch: int, seed: int) -> dict[str, Any]:
    """One function at one partition size: ivmflow and DuckDB on one stream, the
    snapshot checked against DuckDB at the end."""
    work = Stream(f.stream, n, updates, epoch, seed)
    out: dict[str, Any] = {"function": f.name, "n": n, "stream": f.stream,
                           "commit": commit_label()}
    out["ivmflow"], snapshot = run_ivmflow(f.sql, work)  # type: ignore[arg-type]
    gc.collect()
    duck = DuckDBRecompute()
    out["duckdb"] = duck.run(f.sql, work)  # type: ignore[arg-type]
    diff = diff_counters(snapshot, duck.result(f.sql))
    duck.con.close()
    if diff:
        raise AssertionError(f"{f.name} N={n} differs from DuckDB:\n{diff}")
    out["checked_equal_duckdb"] = len(snapshot)
    return out


def table(rows: list[dict[str, Any]], sizes: list[int]) -> str:
    """The markdown table docs/benchmarks.md holds."""
    def k(n: int) -> str:
        return f"{n / 1000:g}k"
    big = k(sizes[-1])
    lines = [f"| function | stream | design | us/update, N = {' / '.join(map(k, sizes))} | "
             f"largest / smallest N | slope | delta rows/update ({big}) | DuckDB recompute "
             f"/ ivmflow ({big}) |", "|---" * 8 + "|"]
    for f in FUNCTIONS:
        pts = [r for r in rows if r["function"] == f.name]
        if not pts:
            continue
        us = [p["ivmflow"]["us_per_update"] for p in pts]
        slope = loglog_slope([(p["n"], u) for p, u in zip(pts, us)]) if len(pts) > 1 else 0
        last = pts[-1]
        lines.append(
            f"| {f.name} | {f.stream} | {f.design} | {' / '.join(f'{u:.1f}' for u in us)} "
            f"| {us[-1] / us[0]:.2f} | {slope:.2f} | "
            f"{last['ivmflow']['delta_rows_per_update']:.2f} | "
            f"{last['duckdb']['us_per_update'] / us[-1]:.0f} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """us/update against N per function, log-log; DuckDB's recompute dashed."""
    made = subplots(figsize=(7, 4.5))
    if made is None:
        return False
    fig, ax = made
    for name in dict.fromkeys(r["function"] for r in rows):
        pts = [r for r in rows if r["function"] == name]
        ns = [p["n"] for p in pts]
        line, = ax.plot(ns, [p["ivmflow"]["us_per_update"] for p in pts], "o-", label=name)
        ax.plot(ns, [p["duckdb"]["us_per_update"] for p in pts], "--", alpha=0.4,
                color=line.get_color())
    loglog(ax, "rows in the partition N", "us per update (dashed: DuckDB recomputing)",
           "Window operator: cost per update against partition size")
    save(fig, path)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--updates", type=int, default=1000, help="timed updates per run")
    ap.add_argument("--epoch", type=int, default=100, help="updates per epoch")
    ap.add_argument("--functions", nargs="+", choices=list(BY_NAME), default=list(BY_NAME))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS / "window_cost")
    args = ap.parse_args(argv)
    sizes = sorted(args.sizes)
    rows: list[dict[str, Any]] = []
    for name in args.functions:
        for n in sizes:
            p = measure(BY_NAME[name], n, args.updates, args.epoch, args.seed)
            print(f"{name:16s} N={n:7d}  ivmflow {p['ivmflow']['us_per_update']:8.1f} us  "
                  f"duckdb {p['duckdb']['us_per_update']:9.1f} us  delta rows/update "
                  f"{p['ivmflow']['delta_rows_per_update']:.2f}  (load "
                  f"{p['ivmflow']['load_s']:.1f} s, checked = DuckDB)", flush=True)
            rows.append(p)
    text = table(rows, sizes)
    extra = {"note": "2 cores shared with other work; single runs vary by 10-30%",
             "native": os.environ.get("IVMFLOW_NATIVE"), "sizes": sizes,
             "updates": args.updates, "epoch": args.epoch, "seed": args.seed,
             "functions": {f.name: {"sql": f.sql, "stream": f.stream, "design": f.design}
                           for f in FUNCTIONS if f.name in args.functions},
             "table": text}
    out_json = args.out.with_suffix(".json")
    result_record("window_cost", rows, command=command_line("bench.window_cost_bench", argv),
                  extra=extra, out=out_json, table=text)
    plot(rows, args.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
