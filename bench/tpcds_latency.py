"""TPC-DS latency (issue 42, item 7): per query, ivmflow's native build maintaining the
query against DuckDB recomputing it, epoch by epoch, over ``ivmflow generate tpcds``'s
stream; the TPC-H bench's workers (:mod:`bench.tpch_bench`) on TPC-DS data.

Per query, each system in its own subprocess (``tpch_bench.run_one``; peak RSS its own):

* **ivmflow-native** (``IVMFLOW_NATIVE=1``, the default build): the load of the tables
  the query names applied and closed as one epoch (load updates/s, the RSS it added per
  base tuple), then per epoch ``apply`` x E and ``end_epoch`` timed;
* **duckdb** (full optimizer, 2 threads): the whole load (copied from a database built
  once per stream by DuckDB's CSV reader), then per epoch the updates applied (untimed)
  and the query recomputed and diffed against the previous result (timed).

The refresh stream (every table's INS/DEL/UPD updates, in order) is cut into epochs of
``--epoch`` updates after the load, at most ``--max-epochs`` of them (an epoch may touch
none of a query's tables: both systems then pay for nothing but their fixed costs).
Every epoch's delta of ivmflow is checked equal to DuckDB's (the first: the whole result
after the load) before its numbers are reported; a difference is printed loudly and
recorded (``check``), never dropped.

Only the tables a query names are fed to ivmflow's load (read from per-table files split
once per stream): the other 20-odd tables' rows would cost parsing only, and would count
as base tuples of a view that never sees them.

    python -m bench.tpcds_latency [--sf 1] [--queries q12,q20] [--timeout 1200]
        [--epoch 1000] [--max-epochs 20] [--data DIR] [--quick]

Writes ``bench/results/tpcds_sf<SF>_latency.json`` after every query (a run stopped
early keeps what finished; ``--merge`` adds to an existing record) and prints the
markdown table (``--markdown JSON`` prints a record's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

from bench import tpch_bench as tb
from bench.harness import RESULTS, ROOT, command_line, result_record
from bench.harness.files import cached_data
from bench.tpcds_accept import QUERIES

SYSTEMS = ("ivmflow-native", "duckdb")
LOAD_DIR = "load_by_table"


def ensure_data(args: argparse.Namespace) -> Path:
    """``--data`` or the stream of the options, generated once into bench/.cache."""
    if args.data:
        return Path(args.data).resolve()  # (the by_query links point here: absolute)
    if args.quick:  # (the acceptance bench's stream, cached for it)
        from bench.tpcds_accept import ensure_data as accept_data

        return accept_data(0.01, 2)
    from connectors.tpcds import TpcdsSpec, write_tpcds

    spec = TpcdsSpec(sf=args.sf, refresh_rounds=args.refresh_rounds,
                     sales_per_refresh=args.sales_per_refresh, delete_days=args.delete_days,
                     dimension_updates=args.dimension_updates)
    tag = (f"tpcds_sf{spec.sf:g}_r{spec.refresh_rounds}_t{spec.tickets}"
           f"_d{spec.delete_days}_u{spec.updates_per_epoch}")
    return cached_data(ROOT / "bench" / ".cache" / tag, f"TPC-DS SF {spec.sf:g}",
                       lambda d: write_tpcds(spec, d))


def split_stream(data: Path, refresh_updates: int) -> tuple[Path, int]:
    """The stream's load as one file per table (``LOAD_DIR/NN_table.csv``, in load
    order), and its first ``refresh_updates`` refresh updates (epoch marks dropped: the
    bench cuts its own epochs) as ``refresh_N.csv``; written once per stream, in one
    pass. Returns the refresh file and its updates."""
    from connectors.tpcds import TABLES

    refresh = data / f"refresh_{refresh_updates}.csv"
    load = data / LOAD_DIR
    if refresh.exists() and (load / "done").exists():
        with refresh.open(encoding="utf-8") as f:
            return refresh, sum(1 for _ in f)
    load.mkdir(exist_ok=True)
    files = {t: (load / f"{i:02d}_{t}.csv").open("w", encoding="utf-8", newline="")
             for i, t in enumerate(TABLES)}
    n = 0
    t0 = time.perf_counter()
    with (data / "updates.csv").open(encoding="utf-8", newline="") as f, \
            open(f"{refresh}.tmp", "w", encoding="utf-8", newline="") as g:
        for line in f:  # (the load: "+,table,..." lines, no field holds a line break)
            if line.rstrip("\r\n") == "*":
                break
            op, table, _rest = line.split(",", 2)
            if op != "+":
                raise ValueError(f"the load has a line other than '+,table,...': {line!r}")
            files[table].write(line)
        for line in f:
            if n >= refresh_updates:
                break
            if line.rstrip("\r\n") not in ("*", ""):
                g.write(line)
                n += 1
    for h in files.values():
        h.close()
    os.replace(f"{refresh}.tmp", refresh)
    (load / "done").write_text("")
    print(f"split the load into {load.relative_to(data)}, {n} refresh updates into "
          f"{refresh.name} in {time.perf_counter() - t0:.0f} s", flush=True)
    return refresh, n


def duckdb_load(data: Path) -> None:
    """DuckDB's database of the load (``duckdb_load.db``, with ``duckdb_load.json``: the
    seconds and rows), as :func:`bench.tpch_bench.run_duckdb` reads it: each table's
    load file through DuckDB's CSV reader (its op and relation columns skipped; an empty
    field NULL, ``""`` the empty string, as ivmflow reads them)."""
    import duckdb

    from tests import tpch_oracle as to

    cache = data / "duckdb_load.db"
    if cache.exists():
        return
    tmp = Path(f"{cache}.tmp")
    tmp.unlink(missing_ok=True)
    schema = [s for s in to.split_statements((data / "schema.sql").read_text())
              if s.lstrip().upper().startswith("CREATE")]
    con = duckdb.connect(str(tmp), config={"threads": 2})
    rows = 0
    t0 = time.perf_counter()
    for stmt in schema:
        con.execute(stmt)
    for path in sorted((data / LOAD_DIR).glob("*.csv")):
        table = path.stem.split("_", 1)[1]
        cols = con.execute("SELECT column_name, data_type FROM information_schema.columns "
                           "WHERE table_name = ? ORDER BY ordinal_position",
                           [table]).fetchall()
        spec = ", ".join(f"'{c}': '{t}'" for c, t in
                         [("__op", "VARCHAR"), ("__rel", "VARCHAR"), *cols])
        names = ", ".join(f'"{c}"' for c, _t in cols)
        con.execute(
            f'INSERT INTO "{table}" SELECT {names} FROM read_csv(\'{path}\', '
            f"columns = {{{spec}}}, header = false, delim = ',', quote = '\"', "
            "escape = '\"', nullstr = '', allow_quoted_nulls = false, auto_detect = false)")
        rows += int((con.execute(f'SELECT count(*) FROM "{table}"').fetchone() or (0,))[0])
    load_s = time.perf_counter() - t0
    con.close()
    os.replace(tmp, cache)
    (data / "duckdb_load.json").write_text(json.dumps({"load_s": load_s, "load_updates": rows,
                                                       "how": "DuckDB read_csv per table"}))
    print(f"DuckDB's load: {rows} rows in {load_s:.0f} s", flush=True)


def tables_read(sql: str) -> list[str]:
    """The tables a query names (in load order)."""
    from connectors.tpcds import TABLES

    words = set(re.findall(r"[a-z_]+", sql.lower()))
    return [t for t in TABLES if t in words]


def query_dir(data: Path, name: str, refresh: Path) -> tuple[Path, list[str]]:
    """A folder the TPC-H workers read as their data (``data/by_query/NAME``): the
    queries and schema, DuckDB's load, and ``updates.csv`` a folder of links (read in
    name order): the load files of the tables the query names, an epoch mark, the
    refresh; ``refresh_only.csv`` (what DuckDB replays after its load) the same
    refresh."""
    from tests import tpch_oracle as to

    tables = tables_read(to.query_part((data / "queries" / f"{name}.sql").read_text()))
    out = data / "by_query" / name
    stream = out / "updates.csv"
    stream.mkdir(parents=True, exist_ok=True)
    for old in stream.iterdir():
        old.unlink()
    for path in sorted((data / LOAD_DIR).glob("*.csv")):
        if path.stem.split("_", 1)[1] in tables:
            (stream / path.name).symlink_to(path)
    (stream / "50_end_of_load.csv").write_text("*\n")
    (stream / "60_refresh.csv").symlink_to(refresh)
    for link, target in (("queries", data / "queries"), ("schema.sql", data / "schema.sql"),
                         ("duckdb_load.db", data / "duckdb_load.db"),
                         ("duckdb_load.json", data / "duckdb_load.json"),
                         ("refresh_only.csv", refresh)):
        (out / link).unlink(missing_ok=True)
        (out / link).symlink_to(target)
    return out, tables


def measure(data: Path, name: str, refresh: Path, epoch: int, timeout: float
            ) -> dict[str, Any]:
    """One query's row: both systems run, their deltas compared, the numbers."""
    folder, tables = query_dir(data, name, refresh)
    row: dict[str, Any] = {"query": name, "tables": tables,
                           "load_average_before": os.getloadavg()[0]}
    t0 = time.perf_counter()
    res: dict[str, dict[str, Any] | str] = {}
    for system in SYSTEMS:  # (DuckDB not run for a query ivmflow did not finish)
        if system == "duckdb" and isinstance(res.get("ivmflow-native"), str):
            res[system] = "not run (ivmflow did not finish)"
            continue
        res[system] = tb.run_one(system, name, epoch, folder, 0, timeout=timeout)
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    row["load_average_after"] = os.getloadavg()[0]
    ivm, duck = res["ivmflow-native"], res["duckdb"]
    for system, r in res.items():
        if isinstance(r, str):
            row[f"{system}_error"] = r
    if isinstance(ivm, str) or isinstance(duck, str):
        row["check"] = "not run: " + "; ".join(
            f"{s}: {r}" for s, r in res.items() if isinstance(r, str))
        return row
    row["check"] = tb.same_deltas(ivm["deltas"], duck["deltas"]) or "equal"
    row["result_rows"] = len(tb.final_of(duck["deltas"]))
    row["changed_epochs"] = sum(1 for d in duck["deltas"][1:] if d)
    for prefix, r in (("ivm", ivm), ("duck", duck)):
        s = tb.summarize(r)
        for k in ("p50_ms", "p99_ms", "epochs", "updates", "load_updates", "load_s",
                  "load_updates_per_s", "peak_mib", "state_mib", "bytes_per_tuple"):
            row[f"{prefix}_{k}"] = s.get(k)
    row["ivm_state_entries"] = ivm["state_entries"]
    row["ivm_native"] = ivm["native"]
    row["duck_apply_p50_ms"] = duck["apply_p50_ms"]
    row["ratio_p50"] = row["duck_p50_ms"] / row["ivm_p50_ms"] if row["ivm_p50_ms"] else None
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    """The docs' table and its summary line."""
    lines = ["| query | ivmflow p50 ms | p99 ms | DuckDB p50 ms | p99 ms | DuckDB / ivmflow "
             "| load upd/s | base tuples | B/tuple | peak MiB | result changed | deltas |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: r["query"]):
        if "ratio_p50" not in r:
            lines.append(f"| {r['query']} | - | - | - | - | - | - | - | - | - | - | "
                         f"{r['check']} |")
            continue
        ratio = r["ratio_p50"]
        lines.append(
            f"| {r['query']} | {r['ivm_p50_ms']:.2f} | {r['ivm_p99_ms']:.2f} | "
            f"{r['duck_p50_ms']:.1f} | {r['duck_p99_ms']:.1f} | "
            f"{f'{ratio:.0f}' if ratio >= 10 else f'{ratio:.1f}'}x | "
            f"{r['ivm_load_updates_per_s']:,.0f} | {r['ivm_load_updates']:,} | "
            f"{r['ivm_bytes_per_tuple']:.0f} | {r['ivm_peak_mib']:.0f} | "
            f"{r['changed_epochs']}/{r['duck_epochs']} | {r['check']} |")
    ran = [r for r in rows if r.get("ratio_p50")]
    if ran:
        ratios = [r["ratio_p50"] for r in ran]
        lines.append("")
        lines.append(
            f"{len(ran)} queries measured: median DuckDB / ivmflow p50 "
            f"{statistics.median(ratios):.0f}x (min {min(ratios):.1f}x, max "
            f"{max(ratios):.0f}x); ivmflow at least 10x faster on {sum(x >= 10 for x in ratios)}"
            f"; deltas equal on {sum(r['check'] == 'equal' for r in ran)} of {len(ran)}; not "
            f"finished: {', '.join(r['query'] for r in rows if r not in ran) or 'none'}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--refresh-rounds", type=int, default=2)
    ap.add_argument("--sales-per-refresh", type=int, default=200,
                    help="new tickets per channel per INS epoch (default 200: a round "
                         "of INS, DEL and UPD is some 10 epochs of 1000 at SF 1)")
    ap.add_argument("--delete-days", type=int, default=1)
    ap.add_argument("--dimension-updates", type=int, default=100)
    ap.add_argument("--data", help="a generate tpcds folder (default: generated from "
                    "the options above into bench/.cache)")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--epoch", type=int, default=1000, help="updates per refresh epoch")
    ap.add_argument("--max-epochs", type=int, default=20, help="refresh epochs per query")
    ap.add_argument("--timeout", type=float, default=1200.0,
                    help="seconds per query and system")
    ap.add_argument("--max-state", default="16G", metavar="SIZE",
                    help="ivmflow's worker stops its load past SIZE resident, a row's "
                         "error (default 16G: the kernel's OOM killer says nothing)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--merge", action="store_true",
                    help="keep the other queries' rows of an existing OUT")
    ap.add_argument("--source", help="the commit an exported (not git) checkout is of")
    ap.add_argument("--quick", action="store_true",
                    help="the SF 0.01 stream of bench.tpcds_accept, 5 epochs of 100: a "
                         "smoke run")
    ap.add_argument("--markdown", metavar="JSON", help="print a record's table")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())["rows"]))
        return
    if args.quick:
        args.sf, args.epoch, args.max_epochs = 0.01, 100, 5
    os.environ[tb.MAX_STATE_ENV] = args.max_state  # (the workers inherit it)
    out = args.out or RESULTS / ("tpcds_latency_quick.json" if args.quick
                                 else f"tpcds_sf{args.sf:g}_latency.json")
    data = ensure_data(args)
    refresh, n = split_stream(data, args.epoch * args.max_epochs)
    duckdb_load(data)
    manifest = json.loads((data / "manifest.json").read_text())
    extra: dict[str, Any] = {"stream": manifest["spec"], "data": str(data),
                             "epoch_size": args.epoch, "refresh_updates": n,
                             "max_epochs": args.max_epochs, "timeout_s": args.timeout,
                             "max_state": args.max_state,
                             "source_commit": args.source, "complete": False}
    names = args.queries.split(",")
    rows: list[dict[str, Any]] = []
    if args.merge and out.exists():
        rows = [r for r in json.loads(out.read_text())["rows"] if r["query"] not in names]
    command = command_line("bench.tpcds_latency", argv)
    print(f"TPC-DS SF {args.sf:g}: {n} refresh updates in epochs of {args.epoch}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    for i, name in enumerate(names):
        row = measure(data, name, refresh, args.epoch, args.timeout)
        rows.append(row)
        if row["check"] != "equal":
            print(f"!!! {name}: DELTAS NOT CHECKED EQUAL: {row['check']}", flush=True)
        print(f"{name}: ivmflow p50 {row.get('ivm_p50_ms') or 0:.2f} ms, DuckDB p50 "
              f"{row.get('duck_p50_ms') or 0:.1f} ms, x{row.get('ratio_p50') or 0:.0f}, "
              f"load {row.get('ivm_load_updates_per_s') or 0:,.0f} upd/s, "
              f"{row.get('ivm_bytes_per_tuple') or 0:.0f} B/tuple, "
              f"{row['wall_s']} s, {row['check']}", flush=True)
        extra["complete"] = i == len(names) - 1
        result_record("tpcds_latency", rows, command=command, out=out, table=False,
                      quiet=True, extra=extra)
    print(f"wrote {out}")
    print(markdown(rows))


if __name__ == "__main__":
    main()
