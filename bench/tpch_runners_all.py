"""Every TPC-H query on every runner: q01..q22 as ``ivmflow generate tpch`` writes them,
over its refresh stream, on the local runner and on Spark and Flink at parallelism 1
and 2, each run's deltas and snapshots compared with the local runner's.

Each run is the CLI (``ivmflow run QUERY --updates ... --deltas ... --snapshots ...``)
in its own process, timed end to end (JVM start included). A cell is ``equal`` (the
deltas as a multiset of lines and the snapshot file byte for byte), ``differs``, or
``refused`` / ``failed`` with the first line of the error (a query the local runner
refuses is refused everywhere).

    python -m bench.tpch_runners_all [--sf 0.01] [--data DIR] [--queries q03,q18]
                                     [--runners local,spark1,spark2,flink1,flink2]
                                     [--batch-lines N]

``--batch-lines N`` is the runners' input lines per micro-batch / tick (their default
10,000); a larger one makes fewer Spark micro-batches, for a quicker pass on a busy
machine (epochs, and so the deltas compared, do not depend on it). Prints a table and
writes bench/results/tpch_runners_all.json (``--out``), rewritten after every query.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, ROOT, command_line, result_record

RUNNERS = {
    "local": [],
    "spark1": ["--runner", "spark", "--parallelism", "1"],
    "spark2": ["--runner", "spark", "--parallelism", "2"],
    "flink1": ["--runner", "flink", "--parallelism", "1"],
    "flink2": ["--runner", "flink", "--parallelism", "2"],
}


def generate(sf: float, out: Path) -> Path:
    """``ivmflow generate tpch`` into ``out`` (the tests' stream: 2 refresh pairs)."""
    subprocess.run([sys.executable, "-m", "dataflow", "generate", "tpch", "--sf", str(sf),
                    "--out", str(out), "--refresh-pairs", "2", "--seed", "0"],
                   cwd=ROOT, check=True, env=_env(), capture_output=True)
    return out


def _env() -> dict[str, str]:
    # Interpreted unless asked (IVMFLOW_NATIVE=1): a compiled build's first use of each
    # query shape would add its compile time to the local column (same results).
    return {"IVMFLOW_NATIVE": "0", **os.environ, "PYTHONPATH": str(ROOT)}


def _reason(stderr: str) -> str:
    """The error's message: the last line that says something (not a traceback frame)."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    for line in reversed(lines):
        if not line.startswith(("at ", "File ", "^", "~")):
            return line.removeprefix("ivmflow: ")[:160]
    return "(no message)"


def run_one(query: Path, updates: Path, work: Path, args: list[str], timeout: float
            ) -> dict[str, Any]:
    """One CLI run: its status, seconds, deltas (line multiset) and snapshot text."""
    work.mkdir(parents=True, exist_ok=True)
    deltas, snaps = work / "deltas.csv", work / "snapshots.csv"
    extra = ["--checkpoint", str(work / "ckpt")] if args else []
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dataflow", "run", str(query), "--updates", str(updates),
             "--deltas", str(deltas), "--snapshots", str(snaps), "--quiet", *args, *extra],
            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"timed out after {timeout:.0f} s",
                "seconds": time.perf_counter() - t0}
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        reason = _reason(done.stderr)
        refused = "runs on the local runner" in reason or "not supported" in reason \
            or "UnsupportedQuery" in reason or "unsupported" in reason.lower()
        return {"status": "refused" if refused else "failed", "reason": reason,
                "seconds": seconds}
    return {"status": "ok", "seconds": seconds,
            "deltas": Counter(deltas.read_text().splitlines()),
            "snapshots": snaps.read_text() if snaps.exists() else ""}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--data", type=Path, help="an `ivmflow generate tpch` directory")
    ap.add_argument("--queries", default="", help="comma-separated (default: q01..q22)")
    ap.add_argument("--runners", default=",".join(RUNNERS))
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--batch-lines", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=RESULTS / "tpch_runners_all")
    opts = ap.parse_args(argv)
    opts.command = command_line("bench.tpch_runners_all", argv)
    runners = [r for r in opts.runners.split(",") if r]
    unknown = set(runners) - set(RUNNERS)
    if unknown or "local" not in runners:
        ap.error(f"--runners: from {', '.join(RUNNERS)}, local included (the reference)")
    tmp = Path(tempfile.mkdtemp(prefix="ivmflow-tpch-runners-"))
    data = opts.data or generate(opts.sf, tmp / "tpch")
    names = [q for q in opts.queries.split(",") if q] or sorted(
        p.stem for p in (data / "queries").glob("q*.sql"))
    rows: list[dict[str, Any]] = []
    path = _write(opts, data, runners, rows, done=not names)
    print(f"TPC-H runs over {data / 'updates.csv'}; each cell: vs the local runner, "
          "seconds end to end", flush=True)
    for name in names:
        query = data / "queries" / f"{name}.sql"
        row: dict[str, Any] = {"query": name}
        local = run_one(query, data / "updates.csv", tmp / name / "local", [], opts.timeout)
        row["local"] = {k: v for k, v in local.items() if k not in ("deltas", "snapshots")}
        if local["status"] == "ok":
            row["local"]["delta_lines"] = sum(local["deltas"].values()) - 1
        for runner in runners:
            if runner == "local":
                continue
            if local["status"] != "ok":
                row[runner] = {"status": "skipped", "reason": "refused by the local runner",
                               "seconds": 0.0}
                continue
            got = run_one(query, data / "updates.csv", tmp / name / runner,
                          [*RUNNERS[runner], "--batch-lines", str(opts.batch_lines)],
                          opts.timeout)
            if got["status"] == "ok":
                same = got["deltas"] == local["deltas"] and \
                    got["snapshots"] == local["snapshots"]
                got = {"status": "equal" if same else "differs", "seconds": got["seconds"]}
            row[runner] = got
        rows.append(row)
        print(_line(row, runners), flush=True)
        # (after every query: a long run stopped midway keeps what it measured)
        path = _write(opts, data, runners, rows, done=len(rows) == len(names))
    print()
    print(_table(rows, runners))
    print(f"\nwrote {path}")
    bad = [r["query"] for r in rows for k in runners if r[k]["status"] in ("differs", "failed")]
    return 1 if bad else 0


def _write(opts: argparse.Namespace, data: Path, runners: list[str],
           rows: list[dict[str, Any]], done: bool) -> Path:
    path: Path = opts.out.with_suffix(".json")
    result_record("tpch_runners_all", rows, command=opts.command, out=path, table=False,
                  quiet=True, extra={"sf": opts.sf if opts.data is None else None,
                                     "data": str(data), "batch_lines": opts.batch_lines,
                                     "runners": runners, "complete": done})
    return path


def _cell(entry: dict[str, Any]) -> str:
    status = entry["status"]
    if status in ("equal", "differs", "ok"):
        return f"{'equal' if status == 'ok' else status} {entry['seconds']:.0f}s"
    return status


def _line(row: dict[str, Any], runners: list[str]) -> str:
    cells = [f"{k}={_cell(row[k])}" for k in runners]
    reasons = {row[k].get("reason") for k in runners if row[k].get("reason")}
    return f"{row['query']}: " + " ".join(cells) + (
        f"  ({'; '.join(sorted(r for r in reasons if r))})" if reasons else "")


def _table(rows: list[dict[str, Any]], runners: list[str]) -> str:
    head = ["query", *runners]
    body = [[r["query"], *(_cell(r[k]) for k in runners)] for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(x, widths)) for x in [head, *body]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    reasons = sorted({f"{r['query']} {k}: {r[k]['reason']}" for r in rows for k in runners
                      if r[k].get("reason") and r[k]["status"] != "skipped"})
    return "\n".join(lines + ([""] + reasons if reasons else []))


if __name__ == "__main__":
    sys.exit(main())
