"""Flink SQL on the TPC-H refresh stream (issue 33), side by side with ivmflow and DuckDB.

The stream is ``bench/tpch_bench.py``'s (``ivmflow generate tpch``: the load, then
refresh pairs RF1/RF2 and the UPD epochs), with more refresh pairs than its default
(``--refresh-pairs``, 1000 at SF 0.01: 164k refresh updates after a load of 87k rows)
so that the refresh phase outweighs the noise of the difference of two runs below.

**Flink SQL** (PyFlink 2.3 Table API, streaming mode, parallelism 1, RocksDB with
incremental checkpoints every second, as ``bench/flink_sql_peer.py``): every TPC-H table
a typed changelog source, a ``filesystem`` table in ``debezium-json`` format (a ``+``
line an insert ``"op": "c"``, a ``-`` line a delete ``"op": "d"`` of the same row), one
file per table in stream order, so each table's deletes follow the inserts they remove.
Types as the TPC-H schema (``schema.sql``): INTEGER -> INT, DECIMAL(15,2), DATE;
CHAR(n) and VARCHAR(n) -> STRING (Flink's CHAR(n) would compare padded values against
the unpadded literals of the queries; the data has no trailing blanks, so nothing
changes but that).

The query text is DuckDB's ``tpch_queries()`` text (the ``queries/qNN.sql`` of the
stream), changed only where Flink's dialect or types demand it:

=====================  ===========================================  ===============================
query                  change                                       why
=====================  ===========================================  ===============================
all without LIMIT      the final ``ORDER BY`` dropped               a streaming ``ORDER BY`` on
                                                                    non-time attributes without
                                                                    LIMIT is refused; the result
                                                                    is the same multiset
q02/03/10/18/21        ``ORDER BY .. LIMIT k`` kept                 streaming Top-N (a rank)
q01, q22, q17          ``avg(x)`` -> ``avg(CAST(x AS DOUBLE))``     DuckDB's avg of a DECIMAL is a
                                                                    DOUBLE; Flink's is a DECIMAL
                                                                    rounded to 6 places
q08, q14, q17          ``a / b`` -> ``CAST(a AS DOUBLE) /           DuckDB divides DECIMALs as
                       CAST(b AS DOUBLE)``                          DOUBLE; Flink rounds to scale 6
q11                    column alias ``value`` -> ```value```        a reserved word in Flink
q15                    ``GROUP BY supplier_no`` -> ``GROUP BY       Flink does not group by a
                       l_suppkey``                                  SELECT alias ("Column
                                                                    'supplier_no' not found")
=====================  ===========================================  ===============================

A query Flink's planner refuses is recorded as ``refused: <its error, one line>``.

**Check** (``check`` in the JSON): Flink SQL's collected changelog over the whole
stream, summed, must equal DuckDB's result after the last epoch (as bags, numbers to
1e-9 relative, ``tests/tpch_oracle.compare_answers``, as tpch_bench) before any number of
it is reported: ``"final equal"``. Per epoch is not checked: Flink SQL has no epochs (it
emits per record, and its two-input operators interleave the tables' changelogs in no
fixed order), so its intermediate results match no epoch boundary. The check is its own
run with mini-batches on (a collected row costs about a ms in PyFlink; mini-batches
shrink the changelog, not the result); the timed runs go row by row. ivmflow's deltas
are checked against DuckDB's as two epochs (the load, then the refresh epochs summed).

**Measures**: CPU per update on the refresh phase = (the JVM's CPU seconds, all its
threads, over load + refresh minus over the load alone) / refresh updates, each run a
fresh job to a blackhole sink, timed from submission to its end (planning and the load
cancel; the fastest of ``--repeat`` runs of each). CPU, not wall time: on 2 cores
shared with other jobs (load average 10-18 during these runs) a wall-clock difference of
two runs is noise; the wall-clock figures are kept as ``wall_us_per_update``. ivmflow's
number is the same, CPU seconds of its process over the refresh epochs (``refresh_cpu_s``
from ``tpch_bench.run_ivmflow``), wall time alongside. Flink's includes the JSON decoding
of the sources (a few us per row) and its checkpoints; ivmflow's parses before timing
and checkpoints nothing. Load updates/s from the load-only run's wall time (start-up
included). State = the largest checkpoint directory seen during the full run (sampled
every 0.25 s), with the number of checkpoints seen: a run that ends before its first
checkpoint reports no state size. Peak RSS = the JVM's VmHWM. ivmflow (and DuckDB, the
reference: the load, then the refresh as one epoch) run through ``tpch_bench.run_one``
on the same stream, ivmflow in epochs of ``E`` updates (1000 by default); its state:
entries and the RSS its load added (in-process Python objects, not a checkpoint: a
different measure than Flink's bytes on disk; see docs/benchmarks.md).

**Checkpoints against checkpoints** (system ``ivmflow-flink``, issue 40): ivmflow's own
Flink runner (``ivmflow run --runner flink --parallelism 1 --checkpoint DIR``: RocksDB,
incremental checkpoints every second, as Flink SQL's runs) over the same stream; its
deltas must equal the local runner's line for line (a multiset) before its size counts.
The size compared, on both sides, is the full state of the last checkpoint the job
completed (``state_size`` of Flink's REST ``/jobs/<id>/checkpoints``, polled every 0.25
s on a ``rest.port`` the bench gives each job): the state a restore at the end of the
stream reads. The largest the checkpoint directory got is kept beside it; it swings by
a third from run to run (compactions and the previous checkpoint's files overlap).
``--rocksdb-compression`` sets both jobs' RocksDB compression (Flink's default:
Snappy). With ``--state-only`` Flink SQL runs the check and one run over the whole
stream, untimed (no run over the load alone).

    python -m bench.tpch_flink_sql [--sf 0.01] [--refresh-pairs 1000] [--queries q01,q06]
        [--systems ivmflow,flink-sql] [--epoch 1000] [--repeat 1] [--out JSON]
    python -m bench.tpch_flink_sql --sf 0.1 --refresh-pairs 8 --state-only \
        --systems ivmflow,ivmflow-flink,flink-sql --out JSON   # checkpoints, both sides
    python -m bench.tpch_flink_sql --merge A.json B.json --out JSON   # runs made apart

Prints a table, writes the JSON (default ``bench/results/tpch_flink_sql.json``; rows
like tpch_bench's, system ``flink-sql`` among them); ``--markdown JSON`` prints a
results file's table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pickle
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, ROOT, command_line, dir_bytes, result_record
from bench.harness.timing import cpu_seconds, descendants
from bench.tpch_bench import (
    QUERIES,
    check_final,
    ensure_data,
    run_one,
    same_deltas,
    summarize,
)

WHOLE = 10**9  # an epoch size larger than any stream: the refresh as one epoch
DOUBLE = "CAST({} AS DOUBLE)"
# (old, new) text replacements per query; each must occur (see the module docstring).
TRANSLATIONS: dict[str, list[tuple[str, str]]] = {
    "q01": [(f"avg({c})", f"avg({DOUBLE.format(c)})")
            for c in ("l_quantity", "l_extendedprice", "l_discount")],
    "q08": [("sum(\n        CASE WHEN nation = 'BRAZIL' THEN\n            volume\n"
             "        ELSE\n            0\n        END) / sum(volume)",
             "CAST(sum(\n        CASE WHEN nation = 'BRAZIL' THEN\n            volume\n"
             "        ELSE\n            0\n        END) AS DOUBLE) / CAST(sum(volume) AS DOUBLE)")],
    "q11": [("AS value", "AS `value`")],
    "q14": [("100.00 * sum(", "CAST(100.00 * sum("),
            ("END) / sum(l_extendedprice * (1 - l_discount))",
             "END) AS DOUBLE) / CAST(sum(l_extendedprice * (1 - l_discount)) AS DOUBLE)")],
    "q15": [("GROUP BY\n        supplier_no", "GROUP BY\n        l_suppkey")],
    "q17": [("sum(l_extendedprice) / 7.0", "CAST(sum(l_extendedprice) AS DOUBLE) / 7.0"),
            ("avg(l_quantity)", f"avg({DOUBLE.format('l_quantity')})")],
    "q22": [("avg(c_acctbal)", f"avg({DOUBLE.format('c_acctbal')})")],
}


def flink_query(name: str, text: str) -> str:
    """The Flink SQL text of query ``name`` from its ivmflow query file's ``text``."""
    from tests import tpch_oracle as to

    sql = to.query_part(text).strip().rstrip(";")
    for old, new in TRANSLATIONS.get(name, []):
        if old not in sql:
            raise ValueError(f"{name}: {old!r} not in the query text")
        sql = sql.replace(old, new)
    if not re.search(r"\bLIMIT\s+\d+\s*$", sql, re.I):
        # The last ORDER BY of the outer query: nothing after it but its sort keys.
        sql = re.sub(r"\bORDER\s+BY\s+[^()]*$", "", sql, flags=re.I | re.S).rstrip()
    return sql


def flink_schema(schema_sql: str) -> dict[str, list[tuple[str, str]]]:
    """Table -> [(column, Flink type)] from ``schema.sql``'s CREATE TABLEs."""
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, body in re.findall(r"CREATE TABLE (\w+)\s*\((.*?)\);", schema_sql, re.S):
        cols = []
        for col in body.split(",\n"):
            cname, ctype = col.split(None, 1)
            ctype = ctype.strip().upper()
            ctype = ("INT" if ctype == "INTEGER" else
                     "STRING" if ctype.startswith(("CHAR", "VARCHAR")) else ctype)
            cols.append((cname, ctype))
        tables[table.lower()] = cols
    return tables


def write_changelogs(data: Path) -> Path:
    """``data/flink/{load,full}/<table>/data.json``: the stream as debezium-json, the
    load alone and the whole stream (cached)."""
    out = data / "flink"
    if (out / "done").exists():
        return out
    schema = flink_schema((data / "schema.sql").read_text())
    files = {(part, t): _open(out / part / t / "data.json")
             for part in ("load", "full") for t in schema}
    in_load = True
    with open(data / "updates.csv", encoding="utf-8", newline="") as f:
        for fields in csv.reader(f, strict=True):
            if not fields or fields[0].startswith("#"):
                continue
            if fields[0] == "*":
                in_load = False
                continue
            table = fields[1].lower()
            row = {c: _json_value(v, ty) for (c, ty), v in zip(schema[table], fields[2:])}
            op = fields[0]
            rec = json.dumps({"before": None, "after": row, "op": "c"} if op[0] == "+"
                             else {"before": row, "after": None, "op": "d"}) + "\n"
            for _ in range(int(op[1:] or 1)):
                files["full", table].write(rec)
                if in_load:
                    files["load", table].write(rec)
    for fh in files.values():
        fh.close()
    (out / "done").write_text("")
    return out


def _open(path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("w", encoding="utf-8")


def _json_value(text: str, ty: str) -> Any:
    if text == "":
        return None
    # DECIMALs as strings: Flink's JSON decoder reads their text exactly.
    return int(text) if ty == "INT" else text


# -- the Flink job (in its own process: one PyFlink job per process) -------------------

def flink_job(query: str, tables: Path, schema: dict[str, list[tuple[str, str]]],
              collect: bool, checkpoint: str, conf: dict[str, str] | None = None
              ) -> dict[str, Any]:
    """Run ``query`` over the changelog files under ``tables``: seconds from submission
    to the end of the job, and with ``collect`` the summed changelog as (mult, row)."""
    from pyflink.common import RowKind

    from bench.flink_sql_peer import table_env

    _env, t_env = table_env(checkpoint, conf)
    if collect:
        # Only the check collects: mini-batches make its changelog (into Python, about a
        # ms per row) small without changing the result; the timed runs go row by row.
        t_env.get_config().set("table.exec.mini-batch.enabled", "true")
        t_env.get_config().set("table.exec.mini-batch.allow-latency", "2 s")
        t_env.get_config().set("table.exec.mini-batch.size", "20000")
    for table, cols in schema.items():
        fields = ", ".join(f"`{c}` {ty}" for c, ty in cols)
        t_env.execute_sql(f"CREATE TEMPORARY TABLE {table} ({fields}) WITH ("
                          f"'connector' = 'filesystem', 'path' = '{tables / table}', "
                          "'format' = 'debezium-json')")
    result = t_env.sql_query(query)
    jvm = descendants(os.getpid())  # PyFlink's gateway JVM: the job runs in it
    cpu0, t = _jvm_cpu(jvm), time.perf_counter()
    if not collect:
        from bench.flink_sql_peer import to_blackhole

        to_blackhole(t_env, result)
        return {"seconds": time.perf_counter() - t, "cpu_s": _jvm_cpu(jvm) - cpu0}
    acc: Counter[tuple[Any, ...]] = Counter()
    with result.execute().collect() as it:
        for row in it:
            sign = 1 if row.get_row_kind() in (RowKind.INSERT, RowKind.UPDATE_AFTER) else -1
            acc[tuple(row)] += sign
    return {"seconds": time.perf_counter() - t,
            "final": [(m, r) for r, m in acc.items() if m]}


def _jvm_cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(pids).values())


def _hwm_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Sampled:
    """A subprocess run to its end (or ``timeout``) while a thread samples, every 0.25
    s, the size of its checkpoint directory (the largest seen), the checkpoints seen
    there (``chk-N`` folders: Flink removes a finished job's) and the peak RSS of its
    descendants (the JVM is PyFlink's child, gone when the job ends)."""

    def __init__(self, argv: list[str], ckpt: Path, timeout: float,
                 env: dict[str, str] | None = None, rest_port: int | None = None) -> None:
        self.ckpt_bytes, self.rss_mib = 0, 0.0
        self.seen: set[str] = set()
        self.timed_out = False
        self.latest: dict[str, Any] = {}
        """The latest completed checkpoint the job's REST endpoint (``rest_port``)
        reported: its ``id``, ``state_size`` (the whole state it restores: the measure
        compared) and ``checkpointed_size`` (what that checkpoint wrote)."""
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=env or {**os.environ, "PYTHONPATH": str(ROOT)})
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.25):
                if rest_port is not None:
                    self.latest = _latest_checkpoint(rest_port) or self.latest
                self.ckpt_bytes = max(self.ckpt_bytes, dir_bytes(ckpt))
                self.seen.update(p.parent.name + "/" + p.name for p in ckpt.glob("**/chk-*"))
                for pid in descendants(proc.pid):
                    self.rss_mib = max(self.rss_mib, _hwm_mib(pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            self.stdout, self.stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.stdout, self.stderr = proc.communicate()
            self.timed_out = True
        finally:
            stop.set()
            sampler.join()
        self.seconds = time.perf_counter() - t0
        self.returncode = proc.returncode


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _latest_checkpoint(port: int) -> dict[str, Any] | None:
    """The latest completed checkpoint of the job a Flink REST endpoint runs (None
    before the endpoint is up, or before a checkpoint completed)."""
    base = f"http://127.0.0.1:{port}"
    try:
        with urllib.request.urlopen(f"{base}/jobs", timeout=1) as resp:
            jobs = json.load(resp)["jobs"]
        for job in jobs:
            with urllib.request.urlopen(f"{base}/jobs/{job['id']}/checkpoints",
                                        timeout=1) as resp:
                done = (json.load(resp).get("latest") or {}).get("completed")
            if done:
                return {k: done.get(k) for k in ("id", "state_size", "checkpointed_size")}
    except (OSError, ValueError, KeyError):
        return None
    return None


def run_job(query: str, tables: Path, schema_sql: Path, collect: bool, work: Path,
            timeout: float, conf: dict[str, str] | None = None) -> dict[str, Any]:
    """``flink_job`` in a subprocess, sampling its checkpoint directory's size, its
    latest completed checkpoint (REST) and its JVM's peak RSS; a planner refusal comes
    back as ``{"refused": message}``. ``conf``: more Flink settings."""
    ckpt = Path(tempfile.mkdtemp(prefix="ckpt-", dir=work))
    out = ckpt.with_suffix(".pickle")
    port = _free_port()
    spec = {"query": query, "tables": str(tables), "schema": str(schema_sql),
            "collect": collect, "checkpoint": str(ckpt), "out": str(out),
            "conf": {**(conf or {}), "rest.port": str(port)}}
    run = Sampled([sys.executable, "-m", "bench.tpch_flink_sql", "--job", json.dumps(spec)],
                  ckpt, timeout, rest_port=port)
    if run.timed_out:
        return {"timeout": timeout}
    if run.returncode != 0:
        return {"refused": _flink_error(run.stderr)}
    with open(out, "rb") as f:
        rec: dict[str, Any] = pickle.load(f)
    rec["checkpoints"] = len(run.seen)
    rec["checkpoint_bytes"] = run.ckpt_bytes
    rec["state_bytes"] = run.latest.get("state_size")
    rec["last_checkpoint"] = run.latest
    rec["jvm_peak_mib"] = run.rss_mib
    return rec


def _flink_error(stderr: str) -> str:
    """The first line of the Java exception's root message (the planner's reason)."""
    lines = [ln.strip() for ln in stderr.splitlines()]
    for pattern in (r"org\.apache\.flink\.table\.api\.\w+Exception: (.+)",
                    r"org\.apache\.calcite\.\S+Exception: (.+)",
                    r"(\w+Exception: .+)"):
        hits = [m.group(1) for ln in lines if (m := re.search(pattern, ln))]
        if hits:
            return hits[-1][:300]
    return (lines or ["failed"])[-1][:300]


def run_flink_sql(data: Path, name: str, repeat: int = 1, timeout: float = 1800.0,
                  check_only: bool = False, state_only: bool = False,
                  conf: dict[str, str] | None = None) -> dict[str, Any]:
    """Flink SQL on query ``name`` over the stream in ``data``, in tpch_bench's result
    shape (``final`` instead of per-epoch ``deltas``; ``refused`` when refused).
    ``state_only``: after the check, one run over the whole stream for its checkpoints,
    none over the load alone (no time per update)."""
    from tests import tpch_oracle as to

    logs = write_changelogs(data)
    query = flink_query(name, (data / "queries" / f"{name}.sql").read_text())
    epochs = to.read_epochs(data / "updates.csv")
    load_n = sum(m for _op, m, _r, _f in epochs[0])
    refresh_n = sum(m for e in epochs[1:] for _op, m, _r, _f in e)
    with tempfile.TemporaryDirectory(prefix="tpch-flink-") as tmp:
        work = Path(tmp)
        checked = run_job(query, logs / "full", data / "schema.sql", True, work, timeout)
        if "final" not in checked:
            return {**checked, "query_text": query}
        res: dict[str, Any] = {"final": checked["final"], "query_text": query,
                               "load_updates": load_n, "updates": refresh_n,
                               "latencies": [], "state_entries": None, "state_mib": None}
        if check_only:
            return res
        parts = ("full",) if state_only else ("full", "load")
        runs = {part: [run_job(query, logs / part, data / "schema.sql", False, work,
                               timeout, conf) for _ in range(repeat)] for part in parts}
    if any("seconds" not in r for rs in runs.values() for r in rs):
        return {"refused": f"a timed run failed: {runs}", "query_text": query}
    full = min(runs["full"], key=lambda r: r["cpu_s"])
    if state_only:
        res.update({"full_s": full["seconds"], "full_cpu_s": full["cpu_s"],
                    "checkpoint_bytes": full["checkpoint_bytes"] or None,
                    "state_bytes": full["state_bytes"], "last_checkpoint": full["last_checkpoint"],
                    "checkpoints": full["checkpoints"], "peak_mib": full["jvm_peak_mib"]})
        return res
    load = min(runs["load"], key=lambda r: r["cpu_s"])
    steady_cpu = full["cpu_s"] - load["cpu_s"]
    steady = full["seconds"] - load["seconds"]
    res.update({
        "load_s": load["seconds"], "full_s": full["seconds"], "steady_s": steady,
        "load_cpu_s": load["cpu_s"], "full_cpu_s": full["cpu_s"], "steady_cpu_s": steady_cpu,
        "us_per_update": 1e6 * steady_cpu / refresh_n if refresh_n else None,
        "wall_us_per_update": 1e6 * steady / refresh_n if refresh_n else None,
        "runs_s": {p: [round(r["seconds"], 3) for r in rs] for p, rs in runs.items()},
        "runs_cpu_s": {p: [round(r["cpu_s"], 3) for r in rs] for p, rs in runs.items()},
        "checkpoint_bytes": full["checkpoint_bytes"] or None,
        "state_bytes": full["state_bytes"], "last_checkpoint": full["last_checkpoint"],
        "checkpoints": full["checkpoints"],
        "peak_mib": max(r["jvm_peak_mib"] for rs in runs.values() for r in rs),
    })
    return res


# ivmflow on a runner, as ``ivmflow run`` (the CLI) starts it: the same Flink settings as
# Flink SQL's runs (parallelism 1, RocksDB, incremental checkpoints every second).
RUNNER_SYSTEMS = {"ivmflow-flink": ["--runner", "flink", "--parallelism", "1"],
                  "ivmflow-flink-trust": ["--runner", "flink", "--parallelism", "1",
                                          "--trust-deletes"]}
"""``ivmflow-flink-trust``: with ``--trust-deletes`` (no delete check, as Flink SQL
keeps none): what a database's change stream needs; not issue 40's target measure."""


def run_ivmflow_runner(data: Path, name: str, system: str, timeout: float = 1800.0,
                       conf: dict[str, str] | None = None) -> dict[str, Any]:
    """``ivmflow run`` of query ``name`` on the runner of ``system`` (RUNNER_SYSTEMS) over
    the stream in ``data`` with a checkpoint directory, sampled as Flink SQL's; its
    deltas checked line for line (as a multiset) against the local runner's, which
    tpch_bench's ``ivmflow`` row checks against DuckDB. ``conf``: more Flink settings
    (``IVMFLOW_FLINK_CONF``), as Flink SQL's runs get them."""
    query, updates = data / "queries" / f"{name}.sql", data / "updates.csv"
    with tempfile.TemporaryDirectory(prefix="tpch-ivm-runner-") as tmp:
        work = Path(tmp)
        outs: dict[str, Sampled] = {}
        port = _free_port()  # (the runner's REST endpoint: its checkpoint statistics)
        flink = ";".join(f"{k}={v}" for k, v in {**(conf or {}), "rest.port": str(port)}.items())
        for tag, args, extra_env, rest in (
                ("local", [], {}, None),
                (system, [*RUNNER_SYSTEMS[system], "--checkpoint", str(work / f"ckpt-{system}")],
                 {"IVMFLOW_FLINK_CONF": flink}, port)):
            ckpt = work / f"ckpt-{tag}"
            ckpt.mkdir()
            outs[tag] = Sampled([sys.executable, "-m", "dataflow", "run", str(query),
                                 "--updates", str(updates), "--deltas",
                                 str(work / f"{tag}.csv"), "--quiet", *args],
                                ckpt, timeout, rest_port=rest,
                                env={**os.environ, "PYTHONPATH": str(ROOT), **extra_env})
            if outs[tag].timed_out:
                return {"timeout": timeout}
            if outs[tag].returncode != 0:
                return {"refused": f"{tag}: " + (outs[tag].stderr.strip().splitlines()
                                                 or ["failed"])[-1][:300]}
        local, mine = (Counter((work / f"{t}.csv").read_text().splitlines())
                       for t in ("local", system))
    run = outs[system]
    return {"check": "equal to local" if local == mine else
            f"differs from local: {sum((local - mine).values())} lines missing, "
            f"{sum((mine - local).values())} extra",
            "full_s": run.seconds, "checkpoint_bytes": run.ckpt_bytes or None,
            "state_bytes": run.latest.get("state_size"), "last_checkpoint": run.latest,
            "checkpoints": len(run.seen), "peak_mib": run.rss_mib,
            "delta_lines": sum(local.values())}


# -- the comparison --------------------------------------------------------------------

def compare(data: Path, names: list[str], systems: list[str], epoch: int, repeat: int,
            timeout: float, done: Any = None, state_only: bool = False,
            conf: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Per query: DuckDB (the reference: the load, then the whole refresh stream as one
    epoch), ivmflow and Flink SQL rows (tpch_bench's row fields; Flink SQL's ``check``
    is against DuckDB's final result, ivmflow's against DuckDB's two epochs summed);
    ``done(rows)`` after each query."""
    rows: list[dict[str, Any]] = []
    for name in names:
        duck = run_one("duckdb", name, WHOLE, data, 0)
        results: dict[str, Any] = {"duckdb": duck}
        for system in systems:
            if system == "flink-sql":
                results[system] = run_flink_sql(data, name, repeat, timeout,
                                                state_only=state_only, conf=conf)
            elif system in RUNNER_SYSTEMS:
                results[system] = run_ivmflow_runner(data, name, system, timeout, conf)
            elif system != "duckdb":
                results[system] = run_one(system, name, epoch, data, 0)
        for system, res in results.items():
            row: dict[str, Any] = {"query": name, "system": system,
                                   "epoch_size": "whole" if system == "duckdb" else epoch}
            rows.append(row)
            if isinstance(res, str) or "refused" in res or "timeout" in res:
                row["error"] = res if isinstance(res, str) else \
                    (f"refused: {res['refused']}" if "refused" in res
                     else f"timeout {res['timeout']:.0f} s")
                print(f"{name} {system:15} {row['error']}", flush=True)
                continue
            if system == "flink-sql":
                row["check"] = check_final(res["final"], duck["deltas"]) \
                    if isinstance(duck, dict) else "no DuckDB result"
                row.update({k: v for k, v in res.items() if k not in ("final",)})
                if "load_s" in res:
                    row["load_updates_per_s"] = res["load_updates"] / res["load_s"]
            elif system in RUNNER_SYSTEMS:
                row.update(res)
            else:
                row.update(summarize(res))
                row["wall_us_per_update"] = 1e6 / row["updates_per_s"] \
                    if row.get("updates_per_s") else None
                # CPU against CPU: on 2 shared cores, wall time is mostly other jobs'.
                row["us_per_update"] = 1e6 * res["refresh_cpu_s"] / row["updates"] \
                    if res.get("refresh_cpu_s") is not None and row.get("updates") \
                    else row["wall_us_per_update"]
                row["check"] = "" if system == "duckdb" else "no DuckDB result" \
                    if isinstance(duck, str) else \
                    same_deltas(_summed(res["deltas"]), duck["deltas"]) or "equal"
            ck, st = row.get("checkpoint_bytes"), row.get("state_bytes")
            print(f"{name} {system:15} {row.get('us_per_update') or 0:9.1f} us/update "
                  f"state {st / 2**20 if st else 0:8.2f} MiB (largest directory "
                  f"{ck / 2**20 if ck else 0:.2f}) check {row['check'] or '-'}", flush=True)
        add_ratios(rows)
        if done:
            done(rows)
    return rows


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """ivmflow's rows get ``vs_flink_sql_time`` (its CPU per update over Flink SQL's)
    and ``vs_flink_sql_wall``, where both results were checked equal to DuckDB's."""
    flink = {r["query"]: r for r in rows
             if r["system"] == "flink-sql" and r.get("check") == "final equal"}
    for row in rows:
        f = flink.get(row["query"])
        if f and row["system"] in RUNNER_SYSTEMS and row.get("check") == "equal to local":
            # (the same measure on both sides: the full state of the last checkpoint the
            # job completed, as Flink's REST reports it)
            row["vs_flink_sql_checkpoint"] = row["state_bytes"] / f["state_bytes"] \
                if f.get("state_bytes") and row.get("state_bytes") else None
        elif f and row["system"].startswith("ivmflow") and row.get("check") == "equal":
            row["vs_flink_sql_time"] = row["us_per_update"] / f["us_per_update"] \
                if f.get("us_per_update", 0) > 0 else None
            row["vs_flink_sql_wall"] = row["wall_us_per_update"] / f["wall_us_per_update"] \
                if f.get("wall_us_per_update", 0) > 0 else None
            # (not the same measure: RSS of Python objects against checkpoint files)
            row["vs_flink_sql_state"] = row["state_mib"] * 2**20 / f["checkpoint_bytes"] \
                if f.get("checkpoint_bytes") and row.get("state_mib") else None


def merge(paths: list[Path], out: Path) -> list[dict[str, Any]]:
    """Runs of several result files (of one SF: ivmflow's and Flink SQL's written apart)
    as one, later files' rows replacing earlier ones of the same query and system."""
    runs: dict[float, dict[str, Any]] = {}
    for path in paths:
        for run in _runs(json.loads(path.read_text())):
            have = runs.setdefault(run["sf"], {**run, "rows": []})
            new = {(r["query"], r["system"]) for r in run["rows"]}
            have["rows"] = [r for r in have["rows"] if (r["query"], r["system"]) not in new] \
                + run["rows"]
    for run in runs.values():
        run["rows"].sort(key=lambda r: (r["query"], r["system"]))
        add_ratios(run["rows"])
    result_record("tpch_flink_sql", [runs[sf] for sf in sorted(runs)],
                  command=command_line("bench.tpch_flink_sql"), out=out, table=False)
    return [r for run in runs.values() for r in run["rows"]]


def _runs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A results file's runs (one per SF, each with its rows): the record's rows, or
    ``runs`` in a file written before the one result schema."""
    runs: list[dict[str, Any]] = doc["rows"] if "rows" in doc else doc["runs"]
    return runs


def _summed(deltas: list[list[tuple[int, Any]]]) -> list[list[tuple[int, Any]]]:
    """Per-epoch deltas as two: the load's, then the refresh epochs' summed (DuckDB's
    reference runs the refresh as one epoch)."""
    acc: Counter[Any] = Counter()
    for epoch in deltas[1:]:
        for m, r in epoch:
            acc[r] += m
    return [deltas[0], [(m, r) for r, m in acc.items() if m]]


def checkpoint_markdown(rows: list[dict[str, Any]]) -> str:
    """Per query: the state of the last checkpoint Flink SQL's run and ivmflow's on its
    Flink runner completed over the same stream (REST ``state_size``; the largest the
    checkpoint directory got beside it), their ratio (below 1 ivmflow's is smaller), and
    each one's check."""
    by = {(r["query"], r["system"]): r for r in rows}
    lines = ["| query | Flink SQL state MiB (largest directory) | ivmflow on Flink state MiB "
             "(largest directory) | ivmflow / Flink SQL | Flink SQL | ivmflow on Flink |",
             "|---|---:|---:|---:|---|---|"]

    def mib(r: dict[str, Any]) -> str:
        st, ck = r.get("state_bytes"), r.get("checkpoint_bytes")
        return f"{st / 2**20:.2f} ({ck / 2**20 if ck else 0:.2f})" if st else \
            r.get("error", "no checkpoint completed")[:80]

    trusting = any(r["system"] == "ivmflow-flink-trust" for r in rows)
    if trusting:  # (a column pair for --trust-deletes where the record has its runs)
        lines[0] = lines[0].replace(" | Flink SQL |", " | ivmflow --trust-deletes state "
                                    "MiB (largest directory) | its ratio | Flink SQL |")
        lines[1] = "|---|---:|---:|---:|---:|---:|---|---|"
    for q in sorted({r["query"] for r in rows if r["system"] in RUNNER_SYSTEMS}):
        f, i = by.get((q, "flink-sql"), {}), by.get((q, "ivmflow-flink"), {})
        t = by.get((q, "ivmflow-flink-trust"), {})
        ratio, tratio = i.get("vs_flink_sql_checkpoint"), t.get("vs_flink_sql_checkpoint")
        trust = (f"{mib(t) if t else '-'} | {f'{tratio:.2f}x' if tratio else '-'} | "
                 if trusting else "")
        lines.append(f"| {q} | {mib(f)} | {mib(i) if i else '-'} | "
                     f"{f'{ratio:.2f}x' if ratio else '-'} | {trust}{f.get('check', '-')} | "
                     f"{i.get('check', '-')} |")
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]]) -> str:
    """Per query: Flink SQL's and ivmflow's CPU per update, the ratio (``vs flink-sql``:
    ivmflow's over Flink SQL's; below 1 ivmflow is ahead), the wall-clock ratio, and
    each one's state."""
    by = {(r["query"], r["system"]): r for r in rows}
    lines = ["| query | Flink SQL us/update (CPU) | ivmflow us/update (CPU) | "
             "vs flink-sql (CPU) | vs flink-sql (wall) | Flink SQL checkpoint MiB (seen) | "
             "ivmflow state MiB (entries) | vs flink-sql (state) | Flink SQL JVM peak MiB | "
             "check |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]

    def num(x: float | None, fmt: str = ".1f", unit: str = "") -> str:
        return f"{x:{fmt}}{unit}" if isinstance(x, (int, float)) else "-"

    for q in sorted({r["query"] for r in rows}):
        f, i = by.get((q, "flink-sql"), {}), by.get((q, "ivmflow"), {})
        ivm = f"{num(i.get('us_per_update'))} | " if "error" not in i else \
            f"{i['error'][:60]} | "
        if f and "error" not in f and f.get("check") != "final equal":
            # A result that differs from DuckDB's reports no number.
            f = {"error": f"result differs from DuckDB's: {f.get('check')}"}
        if "error" in f or not f:
            lines.append(f"| {q} | {f.get('error', 'not run')[:140]} | {ivm}- | - | - | "
                         f"{num(i.get('state_mib'))} ({i.get('state_entries') or '-'}) | "
                         f"- | - | ivmflow {i.get('check', '-')} |")
            continue
        ck = f.get("checkpoint_bytes")
        lines.append(
            f"| {q} | {num(f.get('us_per_update'))} | {ivm}"
            f"{num(i.get('vs_flink_sql_time'), '.2f', 'x')} | "
            f"{num(i.get('vs_flink_sql_wall'), '.2f', 'x')} | "
            f"{num(ck / 2**20 if ck else None, '.2f')} ({f.get('checkpoints', 0)}) | "
            f"{num(i.get('state_mib'))} ({i.get('state_entries') or '-'}) | "
            f"{num(i.get('vs_flink_sql_state'), '.0f', 'x')} | "
            f"{num(f.get('peak_mib'), '.0f')} | {f.get('check', '-')}; ivmflow "
            f"{i.get('check', '-')} |")
    return "\n".join(lines)


def main() -> None:
    """The command line (see the module docstring)."""
    if "--worker" in sys.argv:
        # tpch_bench.run_one's worker for system flink-sql (``--max-epochs N --worker
        # SYSTEM NAME SIZES DATA OUT``): the run pickled to OUT.
        _system, name, _sizes, data, out = sys.argv[sys.argv.index("--worker") + 1:][:5]
        res = run_flink_sql(Path(data), name)
        if "final" not in res:  # (run_one reports the last line of stderr)
            raise SystemExit(f"refused: {res.get('refused') or res}")
        with open(out, "wb") as f:
            pickle.dump(res, f)
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--job":
        spec = json.loads(sys.argv[2])
        schema = flink_schema(Path(spec["schema"]).read_text())
        rec = flink_job(spec["query"], Path(spec["tables"]), schema, spec["collect"],
                        spec["checkpoint"], spec.get("conf"))
        with open(spec["out"], "wb") as f:
            pickle.dump(rec, f)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--refresh-pairs", type=int, default=1000)
    ap.add_argument("--epoch", type=int, default=1000, help="ivmflow's epoch size")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--systems", default="ivmflow,flink-sql")
    ap.add_argument("--repeat", type=int, default=1, help="timed Flink runs (fastest)")
    ap.add_argument("--state-only", action="store_true",
                    help="Flink SQL: the check and one run for its checkpoints, untimed")
    ap.add_argument("--rocksdb-compression", metavar="TYPE",
                    help="RocksDB compression of both Flink jobs (Flink's default: "
                         "SNAPPY_COMPRESSION), e.g. ZSTD_COMPRESSION")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "tpch_flink_sql.json")
    ap.add_argument("--markdown", metavar="JSON", help="print a results file's table")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                    help="merge result files into --out")
    args = ap.parse_args()
    if args.merge:
        merge(args.merge, args.out)
        args.markdown = str(args.out)
    if args.markdown:
        for run in _runs(json.loads(Path(args.markdown).read_text())):
            print(f"\nSF {run['sf']:g}, {run['refresh_pairs']} refresh pairs, ivmflow "
                  f"epochs of {run['epoch']}\n")
            print(markdown(run["rows"]))
            if any(r["system"] in RUNNER_SYSTEMS for r in run["rows"]):
                print("\n" + checkpoint_markdown(run["rows"]))
        return
    data = ensure_data(args.sf, args.refresh_pairs)
    old = _runs(json.loads(args.out.read_text())) if args.out.exists() else []
    runs = [r for r in old if r["sf"] != args.sf]
    mine: dict[str, Any] = next((r for r in old if r["sf"] == args.sf), {"rows": []})
    # A run over some queries replaces those queries' rows of the same SF, keeps others.
    kept = [r for r in mine["rows"] if r["query"] not in set(args.queries.split(","))]

    def write(rows: list[dict[str, Any]]) -> None:  # after each query: partial runs count
        run = {"sf": args.sf, "refresh_pairs": args.refresh_pairs, "epoch": args.epoch,
               "rocksdb_compression": args.rocksdb_compression or "flink default (snappy)",
               "rows": kept + rows}
        result_record("tpch_flink_sql", sorted(runs + [run], key=lambda r: r["sf"]),
                      command=command_line("bench.tpch_flink_sql"), out=args.out,
                      table=False, quiet=True)

    rows = compare(data, args.queries.split(","), args.systems.split(","), args.epoch,
                   args.repeat, args.timeout, write, args.state_only,
                   {"state.backend.rocksdb.compression.per.level": args.rocksdb_compression}
                   if args.rocksdb_compression else None)
    print(f"wrote {args.out}")
    print(markdown(kept + rows))
    if any(r["system"] in RUNNER_SYSTEMS for r in kept + rows):
        print("\n" + checkpoint_markdown(kept + rows))


if __name__ == "__main__":
    main()
