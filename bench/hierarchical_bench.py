"""The update/delay knob of hierarchical queries (issue 17): measured update time and
enumeration delay against N, as log-log slopes next to Theorem 3's exponents
(update ``delta eps``, delay ``1 - eps``), for several eps, side by side with CROWN
(the default engine for these queries) in the same run.

Queries (the paper's Examples 5 and 4):

- ``ex5``: ``Q(A) = R(A,B), S(B)``: ``SELECT R.a FROM R, S WHERE R.b = S.b``
  (w = 1, delta = 1);
- ``ex4``: ``Q(A,C) = R(A,B), S(B,C)``: ``SELECT R.a, S.c FROM R, S WHERE R.b = S.b``
  (w = 2, delta = 1; its light view holds N^(1+eps) rows, so fewer sizes and eps).

Data (generated, skewed to the threshold, which is where Theorem 3's bounds are tight):
every B value has the same degree D in R (and in S for ex4), every A (and C) value one
B. Two families per (N, eps):

- **light edge**, D = floor(0.9 N^eps): every key is light but as heavy as a light key
  gets, so an update of S(b) (ex5) or R(a,b) (ex4) changes D rows of the light view:
  the update time family (predicted N^(delta eps));
- **heavy edge**, D = 3/2 Theta^eps + 1 (Theta the threshold base after loading, the
  next power of two above N; at most N/4): every key is heavy, so the enumeration
  merges N/D ~ N^(1-eps) heavy buckets: the delay family (predicted N^(1-eps)). At
  eps = 1 no key can be heavy and the light view answers.

Measured: **update** = mean time of a maintenance-only update (``emit_deltas=False``:
the paper's update; the output delta is an enumeration of its own), over toggles
(delete, then re-insert) of random tuples of the costly side; **delay** = mean time per
row of ``enumerate()`` (distinct rows, multiplicities summed) over the first ``--rows``
rows, and the largest gap between two rows. CROWN: its update with the delta it must
emit, and its snapshot (``full()``) time per row, on the light-edge data. Times are
``time.perf_counter``, GC off while timing.

Run from the repository root::

    python -m bench.hierarchical_bench          # ~5 minutes
    python -m bench.hierarchical_bench --quick  # seconds (smoke test)

Prints a table and the slopes, writes ``bench/results/hierarchical.json`` and
``hierarchical.png`` (``hierarchical_quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import time
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, command_line, finite_or_none, loglog_slope, result_record
from bench.harness.plots import save, subplots
from dataflow.api import compile_query
from dataflow.engines.hierarchical import HierarchicalEngine
from plans.hierarchical import predicted_exponents

QUERIES = {
    "ex5": ("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT);"
            "SELECT R.a FROM R, S WHERE R.b = S.b"),
    "ex4": ("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT);"
            "SELECT R.a, S.c FROM R, S WHERE R.b = S.b"),
}


def database(name: str, n: int, degree: int) -> tuple[list[tuple[int, dict[str, int]]], list[int]]:
    """(atom, variable values) per tuple, and the B values. About ``n`` tuples."""
    tuples: list[tuple[int, dict[str, int]]] = []
    if name == "ex5":
        keys = max(1, n // (degree + 1))
        for b in range(keys):
            tuples.append((1, {"r.b": b}))
            tuples.extend((0, {"a": b * degree + j, "r.b": b}) for j in range(degree))
    else:
        keys = max(1, n // (2 * degree))
        for b in range(keys):
            tuples.extend((0, {"a": b * degree + j, "r.b": b}) for j in range(degree))
            tuples.extend((1, {"c": b * degree + j, "r.b": b}) for j in range(degree))
    return tuples, list(range(keys))


class Loaded:
    """A query's engine loaded with a database (tuples applied through the atom ports)."""

    def __init__(self, name: str, engine: Any, tuples: list[tuple[int, dict[str, int]]]
                 ) -> None:
        self.engine = engine
        q = compile_query(QUERIES[name])
        self.vars = [a.vars for a in q.cq.atoms]
        for atom, values in tuples:
            self.apply(atom, values, 1)
        engine.take_delta()

    def apply(self, atom: int, values: dict[str, int], dm: int) -> None:
        self.engine.apply_atom(atom, tuple(values[v] for v in self.vars[atom]), dm)


def time_updates(loaded: Loaded, toggles: list[tuple[int, dict[str, int]]]) -> float:
    """Mean seconds per update over delete + re-insert of each tuple, each its own epoch
    (the delta is taken after every update, so nothing cancels)."""
    gc.disable()
    engine = loaded.engine
    t = time.perf_counter()
    for atom, values in toggles:
        loaded.apply(atom, values, -1)
        engine.take_delta()
        loaded.apply(atom, values, 1)
        engine.take_delta()
    elapsed = time.perf_counter() - t
    gc.enable()
    return elapsed / (2 * len(toggles))


def time_enumeration(rows_iter: Any, limit: int, budget: float = 2.0
                     ) -> tuple[float, float, int]:
    """(mean seconds per row, largest gap, rows) over the first ``limit`` rows, or fewer
    (at least 20) when they take more than ``budget`` seconds."""
    gc.disable()
    count = 0
    worst = 0.0
    start = last = time.perf_counter()
    for _ in rows_iter:
        now = time.perf_counter()
        worst = max(worst, now - last)
        last = now
        count += 1
        if count >= limit or (count >= 20 and now - start > budget):
            break
    gc.enable()
    return (last - start) / max(1, count), worst, count


def toggles_for(name: str, tuples: list[tuple[int, dict[str, int]]], k: int,
                rng: random.Random) -> list[tuple[int, dict[str, int]]]:
    side = 1 if name == "ex5" else 0  # S(b) for ex5, R(a, b) for ex4
    pool = [t for t in tuples if t[0] == side]
    return [rng.choice(pool) for _ in range(k)]


def measure(name: str, n: int, eps: float, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(n)
    q = compile_query(QUERIES[name], eps=eps, view_trees=True)
    hp = q.kind.hp  # type: ignore[attr-defined]
    pred = predicted_exponents(hp, eps)
    light_degree = max(1, math.floor(0.9 * n ** eps))
    # Heavy whatever the load order: at least 3/2 theta for the final base Theta (the
    # next power of two above N), at most N/4 (at eps = 1 nothing is heavy anyway).
    final_base = 2 ** math.ceil(math.log2(n + 1))
    heavy_degree = max(2, min(math.ceil(1.5 * final_base ** eps) + 1, n // 4))
    # update time: light-edge data, maintenance only
    tuples, _ = database(name, n, light_degree)
    t = time.perf_counter()
    engine = HierarchicalEngine(hp, eps)
    engine.views.emit_deltas = False
    light = Loaded(name, engine, tuples)
    load_s = time.perf_counter() - t
    # Fewer toggles where one costs ~D rows (eps near 1), so a point stays seconds.
    count = max(20, min(args.updates, int(4e6 / light_degree)))
    toggles = toggles_for(name, tuples, count, rng)
    update = time_updates(light, toggles)
    engine.views.emit_deltas = True
    update_delta = time_updates(light, toggles)
    gc.disable()
    t = time.perf_counter()
    full_rows = len(engine.full())
    full_s = time.perf_counter() - t
    gc.enable()
    light_rows = engine.views.light_rows()
    n_db = engine.views.n
    # delay: heavy-edge data
    tuples_h, _ = database(name, n, heavy_degree)
    engine_h = HierarchicalEngine(hp, eps)
    engine_h.views.emit_deltas = False
    Loaded(name, engine_h, tuples_h)
    heavy_keys = sum(1 for h in engine_h.views.heavy.values() for _ in h.groups())
    delay, gap, rows = time_enumeration(engine_h.views.enumerate(), args.rows)
    return {
        "query": name, "n": n_db, "eps": eps, "w": hp.w, "delta": hp.delta,
        "light_degree": light_degree, "heavy_degree": heavy_degree,
        "update_us": update * 1e6, "update_with_delta_us": update_delta * 1e6,
        "full_us_per_row": full_s * 1e6 / max(1, full_rows), "delay_us": delay * 1e6,
        "max_gap_us": gap * 1e6,
        "rows_timed": rows, "heavy_keys": heavy_keys, "light_view_rows": light_rows,
        "load_s": load_s, "predicted": pred,
    }


def measure_crown(name: str, n: int, eps_list: list[float], args: argparse.Namespace
                  ) -> dict[str, Any]:
    """CROWN and the view trees at each eps on one dataset (the light-edge data of
    eps = 1/2): update with the delta each must emit, and snapshot (``full()``) per row."""
    degree = max(1, math.floor(0.9 * n ** 0.5))
    tuples, _ = database(name, n, degree)
    toggles = toggles_for(name, tuples, args.updates, random.Random(n))

    def run(engine: Any) -> tuple[float, float, int]:
        loaded = Loaded(name, engine, tuples)
        update = time_updates(loaded, toggles)
        gc.disable()
        t = time.perf_counter()
        full = engine.full()
        snap = time.perf_counter() - t
        gc.enable()
        return update * 1e6, snap * 1e6 / max(1, len(full)), len(full)

    crown = run(compile_query(QUERIES[name]).kind.make_engine())
    out: dict[str, Any] = {"query": name, "n": n, "degree": degree, "rows": crown[2],
                           "crown": {"update_with_delta_us": crown[0],
                                     "snapshot_us_per_row": crown[1]}}
    for eps in eps_list:
        q = compile_query(QUERIES[name], eps=eps, view_trees=True)
        u, snap, _ = run(q.kind.make_engine())
        out[f"views_eps{eps:g}"] = {"update_with_delta_us": u, "snapshot_us_per_row": snap}
    return out


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log y against log x (None where it is undefined)."""
    return finite_or_none(loglog_slope(points))


def plot(results: list[dict[str, Any]], out: Path) -> bool:
    queries = sorted({r["query"] for r in results})
    made = subplots(len(queries), 2, figsize=(11, 4 * len(queries)), squeeze=False)
    if made is None:
        return False
    fig, axes = made
    for row, name in enumerate(queries):
        for col, (key, title) in enumerate((("update_us", "update (us)"),
                                            ("delay_us", "delay per row (us)"))):
            ax = axes[row][col]
            for eps in sorted({r["eps"] for r in results if r["query"] == name}):
                pts = sorted((r["n"], r[key]) for r in results
                             if r["query"] == name and r["eps"] == eps)
                s = slope(pts)
                ax.loglog([p[0] for p in pts], [p[1] for p in pts], "o-",
                          label=f"eps={eps:g} (slope {s:.2f})" if s is not None else f"eps={eps:g}")
            ax.set_title(f"{name}: {title}")
            ax.set_xlabel("N (tuples)")
            ax.legend(fontsize=8)
    save(fig, out, dpi=90)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--updates", type=int, default=400, help="timed toggles per point")
    ap.add_argument("--rows", type=int, default=3000, help="rows timed per enumeration")
    ap.add_argument("--out", type=Path, default=None, help="JSON path")
    args = ap.parse_args(argv)
    if args.quick:
        plan = {"ex5": ([500, 2000], [0.0, 0.5, 1.0]), "ex4": ([500, 2000], [0.5])}
        args.updates = min(args.updates, 100)
        args.rows = min(args.rows, 500)
    else:
        plan = {"ex5": ([4000, 16000, 64000, 256000], [0.0, 0.25, 0.5, 0.75, 1.0]),
                "ex4": ([2000, 8000, 32000], [0.25, 0.5])}
    results: list[dict[str, Any]] = []
    crown: list[dict[str, Any]] = []
    for name, (sizes, eps_list) in plan.items():
        for eps in eps_list:
            for n in sizes:
                r = measure(name, n, eps, args)
                results.append(r)
                print(f"{name} eps={eps:<5g} N={r['n']:>7} update {r['update_us']:9.2f} us"
                      f" (+delta {r['update_with_delta_us']:9.2f})"
                      f"  delay {r['delay_us']:8.2f} us (max gap {r['max_gap_us']:9.1f})"
                      f"  heavy keys {r['heavy_keys']:>6}  light rows {r['light_view_rows']:>8}",
                      flush=True)
        c = measure_crown(name, max(sizes), eps_list, args)
        crown.append(c)
        print(f"{name} CROWN N={c['n']:>7} update+delta "
              f"{c['crown']['update_with_delta_us']:9.2f} us  snapshot "
              f"{c['crown']['snapshot_us_per_row']:.2f} us/row", flush=True)
    slopes = []
    print("\nlog-log slopes against N (measured vs Theorem 3's exponent)")
    print(f"{'query':<6}{'eps':>6}{'update':>9}{'pred':>7}{'delay':>9}{'pred':>7}")
    for name, (_, eps_list) in plan.items():
        for eps in eps_list:
            pts = [r for r in results if r["query"] == name and r["eps"] == eps]
            su = slope([(r["n"], r["update_us"]) for r in pts])
            sd = slope([(r["n"], r["delay_us"]) for r in pts])
            pred = pts[0]["predicted"]
            slopes.append({"query": name, "eps": eps, "update_slope": su,
                           "update_predicted": pred["update"], "delay_slope": sd,
                           "delay_predicted": pred["delay"]})
            print(f"{name:<6}{eps:>6g}{su if su is not None else float('nan'):>9.2f}"
                  f"{pred['update']:>7.2f}{sd if sd is not None else float('nan'):>9.2f}"
                  f"{pred['delay']:>7.2f}")
    ratios = []
    for c in crown:
        for key, v in c.items():
            if key.startswith("views_eps"):
                ratios.append({
                    "query": c["query"], "n": c["n"], "eps": float(key[len("views_eps"):]),
                    "crown_over_views_update_with_delta":
                        c["crown"]["update_with_delta_us"] / v["update_with_delta_us"],
                    "crown_over_views_snapshot_per_row":
                        c["crown"]["snapshot_us_per_row"] / v["snapshot_us_per_row"],
                })
    stem = "hierarchical_quick" if args.quick else "hierarchical"
    out = args.out or RESULTS / f"{stem}.json"
    result_record("hierarchical", results, command=command_line("bench.hierarchical_bench", argv),
                  extra={"crown": crown, "slopes": slopes, "ratios": ratios,
                         "args": {"updates": args.updates, "rows": args.rows}},
                  out=out, table=False)
    print("\nCROWN time / view-tree time on one dataset (largest N, the light-edge data of "
          "eps = 1/2): update with its delta, snapshot per row (> 1: view trees faster)")
    for x in ratios:
        print(f"{x['query']:<6} eps={x['eps']:<5g} update "
              f"{x['crown_over_views_update_with_delta']:6.2f}x  snapshot "
              f"{x['crown_over_views_snapshot_per_row']:6.2f}x")
    plot(results, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
