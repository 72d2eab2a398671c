"""TPC-H as the benchmark (issue 33): the 22 queries as the spec writes them, maintained
over the spec's refresh stream, side by side with DuckDB recomputing each epoch.

The stream (``ivmflow generate tpch``, DuckDB's dbgen): the initial load, then refresh
pairs (RF1 inserts SF x 1500 orders with their lineitems, RF2 deletes as many existing
ones with theirs, UPD changes a few customer, supplier and partsupp rows). After one
load, the refresh stream is cut in sequence into epochs of each size of ``--epochs``
(default 1,100,1000): every size but the largest gets ``min(--max-epochs, 2000 / E)``
epochs (200 epochs of 1 update, 20 of 100), the largest the rest; every system gets
the same epochs.

Systems, each query and system in its own subprocess (so peak RSS is its own), but
DuckDB's, one subprocess for all the queries of a run:

* **ivmflow** (interpreted) and **ivmflow-native** (the compiled build): the load
  applied and closed as one epoch (load throughput), then per epoch ``apply`` x E and
  ``end_epoch`` timed; state entries and the RSS the load added (state bytes).
* **duckdb**: DuckDB (full optimizer, 2 threads) from the database after the load
  (dbgen's tables, made once per data directory: ``duckdb_load.db``), fed the same
  refresh epochs; per epoch the updates applied (not timed in its latency: this
  harness stages them through CSV, ``apply_p50_ms`` in the JSON), then the query
  recomputed and diffed against the previous result, timed: what a user without IVM
  pays at least for the same delta. The load and each epoch's updates are the same for
  every query, so one DuckDB takes them once and recomputes every query of the run
  after each epoch, each timed alone (its peak RSS is that process's, in every row).

Every system's per-epoch deltas are checked equal to DuckDB's before any number is
reported (floats to 1e-9 relative). Per query and epoch size: load updates/s, per-epoch
latency p50/p99, updates/s, state entries, state MiB (RSS added by the load) and bytes
per base tuple, peak RSS, the speedup over recompute, and the *crossover*: the epoch
size at which recomputation would catch up (DuckDB's latency over ivmflow's cost per
update at the largest E, assuming ivmflow's epoch cost grows linearly with E).

**flink-sql** (``--systems ...,flink-sql``): ``bench/tpch_flink_sql.py``'s run, its
final result checked against DuckDB's (Flink SQL has no epochs). Its time per update is a
difference of two runs, noise on this stream's few refresh updates: that module's own
command runs it on a longer refresh stream, side by side with ivmflow.

    python -m bench.tpch_bench [--sf 0.1] [--epochs 100,1000] [--queries q01,q06]
        [--systems ivmflow,ivmflow-native,duckdb] [--refresh-pairs 2] [--quick]

Prints a table, writes ``bench/results/tpch_bench.json`` and ``tpch_bench.png``
(``tpch_bench_quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, ROOT, command_line, result_record
from bench.harness.files import cached_data
from bench.harness.plots import save, subplots
from bench.harness.timing import apply_load

SYSTEMS = ("ivmflow", "ivmflow-native", "duckdb")
QUERIES = tuple(f"q{n:02d}" for n in range(1, 23))


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mib() -> float:
    """This process's peak RSS: its memory's high-water mark (``VmHWM``), which starts
    anew at ``exec``; ``ru_maxrss`` carries a larger parent's peak over fork and exec
    (a worker started by a parent that held a DuckDB load reported the parent's)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _schedule(items: list[Any], sizes: list[int], most: int) -> list[tuple[int, list[Any]]]:
    """The refresh stream cut into epochs, in sequence after one load: every epoch size
    but the largest takes ``min(most, 2000 // size)`` epochs (200 of 1 update, 20 of
    100), the largest the rest; (size, updates) per epoch."""
    out: list[tuple[int, list[Any]]] = []
    i = 0
    ordered = sorted(sizes)
    for size in ordered:
        n = None if size == ordered[-1] else max(1, min(most, 2000 // size))
        while i < len(items) and (n is None or n > 0):
            out.append((size, items[i:i + size]))
            i += size
            n = None if n is None else n - 1
    return out


# -- one (system, query, epoch size) in this process ------------------------------------

MAX_STATE_ENV = "IVMFLOW_BENCH_MAX_STATE"

def run_ivmflow(data: Path, name: str, sizes: list[int], most: int, native: bool
                ) -> dict[str, Any]:
    from connectors.files import read_updates
    from core.memory import StateLimit, parse_size
    from core.records import Update
    from dataflow.api import compile_query

    q = compile_query((data / "queries" / f"{name}.sql").read_text(),
                      source_name=f"{name}.sql")
    records = iter(read_updates(str(data / "updates.csv"), q.schema))
    view = q.maintain(native=native)
    apply = view.apply
    rss0 = _rss_mib()
    # The load streams through in batches, parsing untimed (at SF 1, holding its 8.6M
    # parsed rows would add ~8 GB to the peak that a deployment never holds).
    # IVMFLOW_BENCH_MAX_STATE (the parent's --max-state): a query that outgrows it is
    # a row's error naming the size, not a worker the kernel's OOM killer ends.
    cap = os.environ.get(MAX_STATE_ENV)
    limit = StateLimit(parse_size(cap), view.state_entries) if cap else None
    load_s, loaded = apply_load(records, apply, after_batch=(
        None if limit is None else lambda n: limit.check_open(1, n)))
    t0 = time.perf_counter()
    first = view.end_epoch()
    load_s += time.perf_counter() - t0
    state_mib = _rss_mib() - rss0
    refresh = [r for r in records if isinstance(r, Update)]
    # The loaded state out of CPython's cyclic collector (as crossover_bench and
    # operator_cost_bench do, and a user can): else the full collection the load left
    # due runs inside a refresh epoch, walking every object (~1.5 s at SF 1, 14M).
    gc.collect()
    gc.freeze()
    deltas: list[list[tuple[int, Any]]] = [list(first.rows)]
    latencies = []
    cpu0 = time.process_time()  # (CPU seconds: what tpch_flink_sql compares with a JVM's)
    for size, chunk in _schedule(refresh, sizes, most):
        t = time.perf_counter()
        for u in chunk:
            apply(u)
        d = view.end_epoch()
        latencies.append((size, len(chunk), time.perf_counter() - t))
        deltas.append(list(d.rows))
    refresh_cpu_s = time.process_time() - cpu0
    entries = view.state_entries()
    return {"load_s": load_s, "load_updates": loaded, "latencies": latencies,
            "refresh_cpu_s": refresh_cpu_s,
            "state_entries": entries, "state_mib": state_mib, "peak_mib": _peak_mib(),
            "native": view.native_note, "deltas": deltas}


def run_duckdb(data: Path, names: list[str], sizes: list[int], most: int
               ) -> dict[str, dict[str, Any] | str]:
    """DuckDB's run of each query of ``names``, by name, in this one process: the load
    once, each epoch's updates applied once, then every query recomputed and diffed
    against its previous result, each timed alone (what a user without IVM pays at
    least for that query's delta). At SF 10 the load and the epochs' deletes (a scan of
    lineitem each) took some 8 minutes a query when every query had its own process.
    A query DuckDB fails on is its error (a string), the others go on."""
    from tests import tpch_oracle as to

    selects = {name: to.query_part((data / "queries" / f"{name}.sql").read_text())
               for name in names}
    cache = data / "duckdb_load.db"
    if not cache.exists():
        # (the load is the same for every query: made once, each run of DuckDB
        # starts from a copy; its time is the first's)
        _duckdb_load_cache(data, cache)
    with to.DuckReplay(data / "schema.sql", threads=2) as db:
        db.con.execute("SET disabled_optimizers = ''")
        refresh = [u for e in to.read_epochs(_after_load(data / "updates.csv")) for u in e]
        db.con.execute(f"ATTACH '{cache}' AS cache (READ_ONLY)")
        for table in db.tables.values():
            db.con.execute(f'INSERT INTO main."{table}" SELECT * FROM cache."{table}"')
        db.con.execute("DETACH cache")
        loaded = json.loads((data / "duckdb_load.json").read_text())
        load_s, load_updates = loaded["load_s"], loaded["load_updates"]
        # DuckDB's own size of the loaded database (its buffer manager's bytes), the
        # yardstick of the state's bytes per base tuple
        held = db.con.execute("SELECT SUM(memory_usage_bytes) FROM duckdb_memory()")
        duckdb_mib = (held.fetchone() or (0,))[0] / 2**20
        # (a query DuckDB fails on is that query's error row, not every query's)
        failed: dict[str, str] = {}
        prev: dict[str, Counter[Any]] = {}
        for name, select in selects.items():
            try:
                prev[name] = Counter(db.query(select))
            except Exception as exc:  # noqa: BLE001 - reported as the query's row
                failed[name] = f"duckdb: {type(exc).__name__}: {exc}"[:200]
        deltas: dict[str, list[list[tuple[int, Any]]]] = {
            name: [[(m, r) for r, m in p.items()]] for name, p in prev.items()}
        latencies: dict[str, list[tuple[int, int, float]]] = {name: [] for name in names}
        applies = []
        for size, chunk in _schedule(refresh, sizes, most):
            t = time.perf_counter()
            db.apply_epoch(chunk)
            applies.append(time.perf_counter() - t)
            for name, select in selects.items():
                if name in failed:
                    continue
                t = time.perf_counter()
                try:
                    now = Counter(db.query(select))
                except Exception as exc:  # noqa: BLE001 - reported as the query's row
                    failed[name] = f"duckdb: {type(exc).__name__}: {exc}"[:200]
                    continue
                delta = [(m, r) for r, m in (now - prev[name]).items()] + \
                    [(-m, r) for r, m in (prev[name] - now).items()]
                prev[name] = now
                latencies[name].append((size, len(chunk), time.perf_counter() - t))
                deltas[name].append(delta)
    apply_p50 = 1000 * statistics.median(applies) if applies else None
    return {name: failed[name] if name in failed else
            {"load_s": load_s, "load_updates": load_updates,
             "latencies": latencies[name], "apply_p50_ms": apply_p50,
             "state_entries": None, "state_mib": duckdb_mib, "peak_mib": _peak_mib(),
             "deltas": deltas[name], "queries_in_process": len(names)}
            for name in names}


def _duckdb_load_cache(data: Path, cache: Path) -> tuple[float, int]:
    """DuckDB's database after the load epoch, written once to ``cache`` (every query's
    DuckDB starts from a copy): dbgen's tables at the stream's scale factor in the
    spec's types, which are the load ``updates.csv`` holds row for row
    (:func:`connectors.tpch.loaded_tables`; staging 8.7M rows through Python took
    minutes at SF 1, and at SF 10 would not fit). Checked against the manifest's count
    of the load's rows per table before it is kept; returns (seconds, rows)."""
    from connectors.tpch import TABLES, loaded_tables

    manifest = json.loads((data / "manifest.json").read_text())
    t0 = time.perf_counter()
    con = loaded_tables(manifest["spec"]["sf"])
    load_s = time.perf_counter() - t0
    want = manifest["epochs"][0]["inserts"]
    for table in TABLES:
        got = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if got != want.get(table, 0):
            msg = (f"{data}: dbgen at SF {manifest['spec']['sf']} made {got} {table} rows, "
                   f"the load of updates.csv has {want.get(table, 0)}: the data was made by "
                   f"another generator; delete {cache.name} and its directory, regenerate")
            raise RuntimeError(msg)
    con.execute(f"ATTACH '{cache}.tmp' AS cache")
    con.execute("COPY FROM DATABASE memory TO cache")
    con.execute("DETACH cache")
    con.close()
    os.replace(f"{cache}.tmp", cache)
    loaded = sum(want.values())
    (data / "duckdb_load.json").write_text(json.dumps(
        {"load_s": load_s, "load_updates": loaded, "how": "dbgen and casts, not staged"}))
    return load_s, loaded


def _after_load(path: Path) -> Path:
    """A file of the stream after its first epoch (the load): the refresh epochs."""
    out = path.with_name("refresh_only.csv")
    if not out.exists():
        with path.open(encoding="utf-8", newline="") as f, \
                open(f"{out}.tmp", "w", encoding="utf-8", newline="") as g:
            for line in f:  # (TPC-H fields hold no line breaks)
                if line.rstrip("\r\n") == "*":
                    break
            g.writelines(f)
        os.replace(f"{out}.tmp", out)
    return out


def worker(args: argparse.Namespace) -> None:
    system, name, size_list, data, out = args.worker
    sizes = [int(x) for x in size_list.split(",")]
    if system == "duckdb":
        # (a list of queries: one DuckDB for all, its results by name)
        by_name = run_duckdb(Path(data), name.split(","), sizes, args.max_epochs)
        res = by_name if "," in name else by_name[name]
    else:
        res = run_ivmflow(Path(data), name, sizes, args.max_epochs,
                          system == "ivmflow-native")
    with open(out, "wb") as f:
        pickle.dump(res, f)


# -- the parent: data, subprocesses, checks, table -------------------------------------

def ensure_data(sf: float, pairs: int) -> Path:
    from connectors.tpch import TpchSpec, write_tpch

    return cached_data(ROOT / "bench" / ".cache" / f"tpch_sf{sf:g}_rf{pairs}",
                       f"TPC-H SF {sf:g} ({pairs} refresh pairs)",
                       lambda data: write_tpch(TpchSpec(sf=sf, refresh_pairs=pairs), data))


def run_one(system: str, name: str, sizes: str | int, data: Path, most: int,
            timeout: float = 3600) -> dict[str, Any] | str:
    """One worker subprocess; ``sizes``: the epoch sizes, comma-separated (system
    ``flink-sql``: :mod:`bench.tpch_flink_sql`'s worker, the same protocol); the last
    line of its error, or ``timed out after N s``, when it fails."""
    with tempfile.NamedTemporaryFile(suffix=".pickle") as out:
        env = {**os.environ, "PYTHONHASHSEED": "0",
               "IVMFLOW_NATIVE": "1" if system == "ivmflow-native" else "0"}
        module = "bench.tpch_flink_sql" if system == "flink-sql" else "bench.tpch_bench"
        try:
            p = subprocess.run([sys.executable, "-m", module, "--max-epochs", str(most),
                                "--worker", system, name, str(sizes), str(data), out.name],
                               capture_output=True, text=True, env=env, cwd=ROOT,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"timed out after {timeout:.0f} s"
        if p.returncode != 0:
            return (p.stderr.strip().splitlines() or ["failed"])[-1][:200]
        with open(out.name, "rb") as f:
            res: dict[str, Any] = pickle.load(f)
            return res


def same_deltas(a: list[list[tuple[int, Any]]], b: list[list[tuple[int, Any]]]) -> str:
    from tests import tpch_oracle as to

    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} epochs"
    for i, (x, y) in enumerate(zip(a, b)):
        for sign in (1, -1):
            got = [r for m, r in x if m * sign > 0 for _ in range(abs(m))]
            want = [r for m, r in y if m * sign > 0 for _ in range(abs(m))]
            if to.compare_answers([got], [want]):
                return f"epoch {i} differs"
    return ""


def final_of(deltas: list[list[tuple[int, Any]]]) -> list[Any]:
    """The result after the last epoch from per-epoch deltas (mult, row)."""
    acc: Counter[Any] = Counter()
    for epoch in deltas:
        for m, r in epoch:
            acc[r] += m
    return [r for r, m in acc.items() if m > 0 for _ in range(m)]


def check_final(final: list[tuple[int, Any]], duck_deltas: list[list[tuple[int, Any]]]
                ) -> str:
    """"final equal" or the difference between a run's final result (a system without
    epochs, Flink SQL: its summed changelog) and DuckDB's."""
    from tests import tpch_oracle as to

    if any(m < 0 for m, _r in final):
        return "final has negative multiplicities"
    got = [r for m, r in final for _ in range(m)]
    problems = to.compare_answers([got], [final_of(duck_deltas)])
    return "; ".join(problems)[:300] if problems else "final equal"


def summarize(res: dict[str, Any], size: int | None = None) -> dict[str, Any]:
    """A run's numbers at one epoch size: its epochs of that size (``latencies`` of
    (size, updates, seconds); plain seconds: all epochs, ``updates`` in all); every
    epoch with ``size`` None."""
    raw = res["latencies"]
    mine = [(n, t) for s, n, t in raw if size in (None, s)] \
        if raw and isinstance(raw[0], tuple) else None
    lat = sorted(t for _n, t in mine) if mine is not None else sorted(raw)
    out = {k: v for k, v in res.items() if k not in ("deltas", "latencies")}
    if mine is not None:
        out["updates"] = sum(n for n, _t in mine)
    if lat:
        out["p50_ms"] = 1000 * statistics.median(lat)
        out["p99_ms"] = 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        out["updates_per_s"] = out["updates"] / sum(lat) if sum(lat) else None
        out["epochs"] = len(lat)
    out["load_updates_per_s"] = res["load_updates"] / res["load_s"] if res["load_s"] else None
    if res.get("state_mib") is not None and res["load_updates"]:
        # (DuckDB's row: its own bytes of the database, per base tuple)
        out["bytes_per_tuple"] = res["state_mib"] * 2**20 / res["load_updates"]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--refresh-pairs", type=int, default=2)
    ap.add_argument("--epochs", default="1,100,1000",
                    help="epoch sizes (updates per epoch), run in sequence after one load")
    ap.add_argument("--max-epochs", type=int, default=200,
                    help="epochs run at epoch size 1")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--quick", action="store_true", help="SF 0.01, for a smoke run")
    ap.add_argument("--timeout", type=float, default=3600,
                    help="seconds a query's run of one system may take (SF 10: more)")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--markdown", metavar="JSON", help="print a results file's table")
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())["rows"]))
        return
    sf = 0.01 if args.quick else args.sf
    data = ensure_data(sf, args.refresh_pairs)
    sizes = [int(s) for s in args.epochs.split(",")]
    systems = args.systems.split(",")
    rows: list[dict[str, Any]] = []
    header = (f"{'query':5} {'E':>5} {'system':15} {'load u/s':>9} {'p50 ms':>8} "
              f"{'p99 ms':>8} {'upd/s':>9} {'entries':>9} {'MiB':>7} {'peak':>6} "
              f"{'x duckdb':>8} {'crossover E':>11}  check")
    stem = "tpch_bench_quick" if args.quick else \
        "tpch_bench" if sf == 0.1 else f"tpch_bench_sf{sf:g}"
    out = RESULTS / f"{stem}.json"
    command = command_line("bench.tpch_bench", argv)
    print(f"TPC-H SF {sf:g}, {args.refresh_pairs} refresh pairs; 2 shared cores")
    names = args.queries.split(",")
    shared: dict[str, Any] | str | None = None
    if "duckdb" in systems and len(names) > 1:
        # DuckDB once for all the queries (each recomputed and timed alone per epoch):
        # its load and its epochs' updates are the same for every query.
        print(f"DuckDB: one process for the {len(names)} queries ...", flush=True)
        shared = run_one("duckdb", ",".join(names), args.epochs, data, args.max_epochs,
                         args.timeout * len(names))
    print(header)
    for name in names:
        # (one run per system and query: the epoch sizes in sequence after one load)
        results: dict[str, Any] = {
            system: (shared if isinstance(shared, str) else shared[name])
            if system == "duckdb" and shared is not None else
            run_one(system, name, args.epochs, data, args.max_epochs, args.timeout)
            for system in systems}
        duck = results.get("duckdb")
        checks: dict[str, str] = {}
        for size in sizes:
            for system in systems:
                res = results[system]
                row: dict[str, Any] = {"query": name, "epoch_size": size, "system": system}
                if isinstance(res, str):
                    row["error"] = res
                    print(f"{name:5} {size:>5} {system:15} ERROR {res}")
                    rows.append(row)
                    continue
                if system not in checks:
                    checks[system] = "" if system == "duckdb" or not isinstance(duck, dict) \
                        else same_deltas(res["deltas"], duck["deltas"]) \
                        if system != "flink-sql" else check_final(res["final"], duck["deltas"])
                check = checks[system]
                row.update(summarize(res, size))
                row.pop("final", None)
                row["check"] = "equal" if not check and isinstance(duck, dict) else check
                if system != "duckdb" and isinstance(duck, dict) and row.get("p50_ms"):
                    d = summarize(duck, size)
                    row["speedup_p50"] = d["p50_ms"] / row["p50_ms"] if row["p50_ms"] else None
                    per_update = 1 / row["updates_per_s"] if row.get("updates_per_s") else 0
                    row["crossover_epoch_size"] = (d["p50_ms"] / 1000) / per_update \
                        if per_update else None
                rows.append(row)
                mib = row.get("state_mib")
                print(f"{name:5} {size:>5} {system:15} {row['load_updates_per_s'] or 0:>9.0f} "
                      f"{row.get('p50_ms', 0):>8.2f} {row.get('p99_ms', 0):>8.2f} "
                      f"{row.get('updates_per_s') or 0:>9.0f} "
                      f"{row['state_entries'] if row.get('state_entries') else '-':>9} "
                      f"{f'{mib:.0f}' if mib is not None else '-':>7} "
                      f"{row['peak_mib']:>6.0f} "
                      f"{row.get('speedup_p50', 0) or 0:>8.1f} "
                      f"{row.get('crossover_epoch_size', 0) or 0:>11.0f}  {row['check']}",
                      flush=True)
            # (per query: a long run keeps what it did)
            result_record("tpch_bench", rows, command=command, out=out, table=False,
                          quiet=True, extra={"sf": sf, "refresh_pairs": args.refresh_pairs})
    print(f"wrote {out.relative_to(ROOT)}")
    _plot(rows, RESULTS / f"{stem}.png", max(sizes))
    print(markdown(rows))


def markdown(rows: list[dict[str, Any]]) -> str:
    """The README's table: per query and epoch size, p50 per epoch of each system,
    the best ivmflow's speedup over recompute, its crossover, its state."""
    by = {(r["query"], r["epoch_size"], r["system"]): r for r in rows}
    lines = ["| query | E | ivmflow p50 ms | native p50 ms | DuckDB recompute p50 ms | "
             "speedup | crossover E | state entries | state MiB | B/tuple | "
             "DuckDB B/tuple | deltas |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for q, e in sorted({(r["query"], r["epoch_size"]) for r in rows}):
        ivm, nat, duck = (by.get((q, e, s), {}) for s in SYSTEMS)
        best = max((x for x in (ivm, nat) if x.get("speedup_p50")),
                   key=lambda x: x["speedup_p50"], default={})

        def ms(x: dict[str, Any]) -> str:
            return f"{x['p50_ms']:.1f}" if x.get("p50_ms") else x.get("error", "-")[:30]

        check = "equal" if all(x.get("check") == "equal" for x in (ivm, nat) if x) else \
            "; ".join(str(x.get("check") or x.get("error")) for x in (ivm, nat) if x)
        # (the state of the default build where it ran: native, else interpreted)
        st = nat if nat.get("state_mib") is not None else ivm
        duck_b = f"{duck['bytes_per_tuple']:.0f}" if duck.get("bytes_per_tuple") else "-"
        lines.append(
            f"| {q} | {e} | {ms(ivm)} | {ms(nat)} | {ms(duck)} | "
            f"{best.get('speedup_p50', 0):.1f}x | {best.get('crossover_epoch_size', 0):.0f} | "
            f"{st.get('state_entries') or '-'} | "
            f"{st['state_mib']:.0f} | {st.get('bytes_per_tuple', 0):.0f} | {duck_b} | "
            f"{check} |" if st.get("state_mib") is not None else
            f"| {q} | {e} | {ms(ivm)} | {ms(nat)} | {ms(duck)} | - | - | - | - | - | {duck_b} "
            f"| {check} |")
    return "\n".join(lines)


def _plot(rows: list[dict[str, Any]], path: Path, size: int) -> None:
    names = sorted({r["query"] for r in rows})
    made = subplots(figsize=(12, 4))
    if made is None:
        return
    fig, ax = made
    width = 0.27
    for i, system in enumerate(SYSTEMS):
        ys = [next((r.get("p50_ms") or 0 for r in rows if r["query"] == n and
                    r["system"] == system and r["epoch_size"] == size), 0) for n in names]
        ax.bar([j + i * width for j in range(len(names))], ys, width, label=system)
    ax.set_xticks([j + width for j in range(len(names))], names)
    ax.set_yscale("log")
    ax.set_ylabel(f"p50 latency per epoch of {size} updates (ms)")
    ax.legend()
    save(fig, path, dpi=100)


if __name__ == "__main__":
    main()
