"""TPC-DS acceptance (issue 42): the 99 queries as DuckDB's ``tpcds_queries()`` writes
them, over the stream of ``ivmflow generate tpcds`` (the load, then rounds of INS, DEL
and UPD epochs), one by one:

* **compile time**: ``compile_query`` on the query file, in a subprocess of its own
  (``--compile-timeout``, default 60 s: the issue's bound is 10 s);
* **accepted or refused**: a refusal's first line (the first construct it names, with
  its position), grouped by construct (``UNION ALL``, ``ROLLUP``, a window function,
  ...) in the summary;
* **equal to DuckDB after every epoch** for the accepted ones: the stream run through
  the local view in the same subprocess (``--run-timeout``), the result after every
  epoch compared as a bag with DuckDB's answer to the same query on the database
  replayed epoch by epoch (``tests/tpch_oracle.py``, as the TPC-H tests and bench do:
  exact for integers and decimals, floats to 1e-9 relative).

The record is rewritten after every query (``"complete": false`` until the last).
``--merge`` keeps an existing record's other queries (a query whose run failed for a
cause outside it, run again alone; the record lists every command merged).

    python -m bench.tpcds_accept [--sf 0.01] [--queries q01,q03] [--compile-only]

Prints the table by construct and per query, writes
``bench/results/tpcds_acceptance.json`` (the harness's schema: commit, machine,
command, rows; the summary beside them). The stream is generated once into
``bench/.cache/tpcds_sf<SF>_r<ROUNDS>``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, ROOT, command_line, format_rows, git_state, result_record
from bench.harness.files import cached_data

QUERIES = [f"q{i:02d}" for i in range(1, 100)]
_CONSTRUCT = re.compile(r"line \d+, column \d+: (?P<what>.*?): (?P<why>.*)$")


def ensure_data(sf: float, rounds: int) -> Path:
    from connectors.tpcds import TpcdsSpec, write_tpcds

    return cached_data(ROOT / "bench" / ".cache" / f"tpcds_sf{sf:g}_r{rounds}",
                       f"TPC-DS SF {sf:g} ({rounds} refresh rounds)",
                       lambda data: write_tpcds(TpcdsSpec(sf=sf, refresh_rounds=rounds),
                                                data))


def refusal(message: str) -> tuple[str, str]:
    """A refusal's first line (past the ``N unsupported constructs`` header) and the
    construct it is grouped by: the construct's reason, or the construct itself where
    the reason is the generic ``not supported``; a message of another form by its first
    line less the file name."""
    lines = [s.strip() for s in message.strip().splitlines() if s.strip()]
    head = lines[0] if lines else "refused"
    first = lines[1] if len(lines) > 1 and "unsupported construct" in head else head
    m = _CONSTRUCT.match(first)
    if m is None:
        return first, re.sub(r"^\S+\.sql(?: \(view [^)]*\))?: ", "", first)[:120]
    why = m["why"]
    generic = why.startswith("not supported")
    return first, (m["what"] if generic else why.split(" (")[0])[:120]


# -- the worker: one query, in its own process ------------------------------------------


def worker(name: str, data: Path, out: Path, run: bool) -> None:
    """Compile ``name``; write ``out.compile.json`` at once; then, when accepted and
    ``run``, run the stream and compare the result after every epoch with DuckDB's;
    the time and the differences to ``out`` (a pickle)."""
    from core.errors import QueryError
    from dataflow.api import compile_query
    from tests import tpch_oracle as to

    path = data / "queries" / f"{name}.sql"
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    try:
        compile_query(path.read_text(), source_name=str(path))
        info["status"] = "accepted"
    except QueryError as err:
        info["status"] = "refused"
        info["refusal"], info["construct"] = refusal(str(err))
    except Exception as err:  # noqa: BLE001 - a crash is a result here, recorded
        info["status"] = "error"
        info["refusal"] = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        info["construct"] = f"compiler error ({type(err).__name__})"
    info["compile_s"] = round(time.perf_counter() - t0, 3)
    Path(f"{out}.compile.json").write_text(json.dumps(info))
    if not run or info["status"] != "accepted":
        return
    t0 = time.perf_counter()
    got = to.ivmflow_answers_per_epoch(path, data / "updates.csv")
    run_s = time.perf_counter() - t0
    want = to.duckdb_answers_per_epoch(data / "schema.sql", data / "updates.csv", path)
    problems = to.compare_answers(got, want)
    with open(out, "wb") as f:
        pickle.dump({"run_s": run_s, "epochs": len(want), "problems": problems}, f)


def run_one(name: str, data: Path, run: bool, compile_timeout: float,
            run_timeout: float) -> dict[str, Any]:
    """One query in a worker subprocess; its row (without the DuckDB comparison)."""
    row: dict[str, Any] = {"query": name}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.pickle"
        cmd = [sys.executable, "-m", "bench.tpcds_accept", "--worker", name, str(data),
               str(out), "run" if run else "compile"]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        timeout = compile_timeout + (run_timeout if run else 0)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                               timeout=timeout)
            failed = p.returncode != 0
            tail = (p.stderr.strip().splitlines() or ["failed"])[-1][:200]
        except subprocess.TimeoutExpired:
            failed, tail = True, f"timed out after {timeout:.0f} s"
        compiled = Path(f"{out}.compile.json")
        if not compiled.exists():
            row.update(status="timeout" if "timed out" in tail else "error",
                       compile_s=compile_timeout if "timed out" in tail else None,
                       construct="compile time over the bound" if "timed out" in tail
                       else "compiler crash", refusal=tail)
            return row
        row.update(json.loads(compiled.read_text()))
        if row["status"] == "accepted" and run:
            if failed or not out.exists():
                row.update(equal=False, note=f"run failed: {tail}")
            else:
                with open(out, "rb") as f:
                    res = pickle.load(f)
                row["run_s"] = round(res["run_s"], 2)
                row["epochs"] = res["epochs"]
                row["equal"] = not res["problems"]
                if res["problems"]:
                    row["note"] = "; ".join(res["problems"])[:300]
    return row


# -- the parent -------------------------------------------------------------------------


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        if r["status"] != "accepted":
            by[r["construct"]].append(r["query"])
    compile_s = [r["compile_s"] for r in rows if r.get("compile_s") is not None]
    return {
        "queries": len(rows),
        "accepted": sum(r["status"] == "accepted" for r in rows),
        "equal_to_duckdb": sum(r.get("equal") is True for r in rows),
        "not_equal": [r["query"] for r in rows if r.get("equal") is False],
        "max_compile_s": max(compile_s, default=None),
        "over_10_s": [r["query"] for r in rows if (r.get("compile_s") or 0) >= 10],
        "refused_by_construct": {k: {"queries": len(v), "which": v} for k, v in
                                 sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))},
    }


def construct_table(summary: dict[str, Any]) -> str:
    groups = [{"refused by": k, "queries": g["queries"], "which": " ".join(g["which"])}
              for k, g in summary["refused_by_construct"].items()]
    return format_rows(groups, ["refused by", "queries", "which"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--refresh-rounds", type=int, default=2)
    ap.add_argument("--data", type=Path, help="a generate tpcds directory (default: "
                    "generated into bench/.cache)")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--compile-only", action="store_true",
                    help="compile time and acceptance only, no runs")
    ap.add_argument("--compile-timeout", type=float, default=60.0)
    ap.add_argument("--run-timeout", type=float, default=1800.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "tpcds_acceptance.json")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other queries' rows of an existing OUT (same stream), "
                         "replacing those run now (a query whose run failed for a cause "
                         "outside it, run again); the record lists every command merged")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        name, data, out, mode = args.worker
        worker(name, Path(data), Path(out), mode == "run")
        return
    data = args.data or ensure_data(args.sf, args.refresh_rounds)
    manifest = json.loads((data / "manifest.json").read_text())
    command = command_line("bench.tpcds_accept", argv)
    extra: dict[str, Any] = {"stream": manifest["spec"],
                             "epochs": [e["name"] for e in manifest["epochs"]]}
    names = args.queries.split(",")
    kept: list[dict[str, Any]] = []
    if args.merge and args.out.exists():
        old = json.loads(args.out.read_text())
        if old.get("stream") != extra["stream"]:
            raise SystemExit(f"{args.out}: another stream, cannot merge")
        kept = [r for r in old["rows"] if r["query"] not in names]
        extra["merged"] = [*old.get("merged", [{"command": old["command"],
                                                  "commit": old["commit"]}]),
                           {"command": command, "commit": git_state(ROOT)[0]}]
    rows: list[dict[str, Any]] = list(kept)
    for name in names:
        row = run_one(name, data, not args.compile_only, args.compile_timeout,
                      args.run_timeout)
        rows.append(row)
        print(f"{name}: {row['status']} in {row.get('compile_s')} s"
              + (f", ran in {row['run_s']} s" if "run_s" in row else "")
              + (f" ({row.get('refusal')})" if row["status"] != "accepted" else ""),
              flush=True)
        # (the record so far, rewritten after every query: a long run stopped early
        # keeps what it measured)
        result_record("tpcds_acceptance", rows, out=args.out, command=command, quiet=True,
                      extra={**extra, "summary": summarize(rows), "complete": False})
    rows.sort(key=lambda r: QUERIES.index(r["query"]) if r["query"] in QUERIES else 99)
    summary = summarize(rows)
    columns = ["query", "status", "compile_s", "run_s", "equal", "construct"]
    table = (f"{construct_table(summary)}\n\n{format_rows(rows, columns)}\n\n"
             f"accepted {summary['accepted']}/{summary['queries']}, equal to DuckDB after "
             f"every epoch {summary['equal_to_duckdb']}, slowest compile "
             f"{summary['max_compile_s']} s")
    result_record("tpcds_acceptance", rows, out=args.out, table=table, command=command,
                  extra={**extra, "summary": summary, "complete": True})


if __name__ == "__main__":
    main()
