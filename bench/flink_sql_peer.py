"""Flink SQL peer: the bench workloads through Flink SQL's regular streaming joins
(PyFlink Table API over a changelog stream with inserts and retractions - the same
updates), next to ivmflow's local and Flink runners, in one process run.

    python bench/flink_sql_peer.py [--edges 10000] [--queries hop3_full ...] [--quick]

Prints wall time and updates/s per system and the ratios; writes
bench/results/flink_sql_peer.json. Flink SQL's output goes to a blackhole sink (its
result is checked against ivmflow's on a small prefix with a collecting run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.workloads import make_workload  # noqa: E402
from dataflow.api import compile_query  # noqa: E402


def _select_only(sql: str) -> str:
    return re.sub(r"CREATE TABLE[^;]*;", "", sql, flags=re.I).strip().rstrip(";")


def flink_sql(wl: Any, collect: bool) -> tuple[float, Counter[tuple[Any, ...]] | None]:
    from pyflink.common import Configuration, Row, RowKind, Types
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    conf = Configuration()
    conf.set_string("python.execution-mode", "thread")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    t_env = StreamTableEnvironment.create(env)
    tables: dict[str, list[Any]] = {}
    for u in wl.updates:
        row = Row(*u.row)
        row.set_row_kind(RowKind.INSERT if u.op == "+" else RowKind.DELETE)
        for _ in range(u.mult):
            tables.setdefault(u.relation, []).append(row)
    for name, rows in tables.items():
        arity = len(rows[0])
        cols = ["src", "dst"] if arity == 2 else ["v"]
        ds = env.from_collection(rows, type_info=Types.ROW_NAMED(cols, [Types.LONG()] * arity))
        t_env.create_temporary_view(name, t_env.from_changelog_stream(ds))
    result = t_env.sql_query(_select_only(wl.sql))
    t = time.perf_counter()
    if not collect:
        schema = result.get_schema()
        fields = ", ".join(f"`{n}` {t}" for n, t in zip(schema.get_field_names(),
                                                         schema.get_field_data_types()))
        t_env.execute_sql(f"CREATE TEMPORARY TABLE sink_out ({fields}) "
                          "WITH ('connector' = 'blackhole')")
        result.execute_insert("sink_out").wait()
        return time.perf_counter() - t, None
    acc: Counter[tuple[Any, ...]] = Counter()
    with result.execute().collect() as it:
        for row in it:
            kind = row.get_row_kind()
            sign = 1 if kind in (RowKind.INSERT, RowKind.UPDATE_AFTER) else -1
            acc[tuple(row)] += sign
    return time.perf_counter() - t, +acc


def ivmflow_local(wl: Any, epoch: int) -> tuple[float, Counter[tuple[Any, ...]]]:
    q = compile_query(wl.sql)
    t = time.perf_counter()
    acc: Counter[tuple[Any, ...]] = Counter()
    for d in q.run(wl.updates, epoch_size=epoch):
        for m, row in d.rows:
            acc[row] += m
    return time.perf_counter() - t, +acc


def ivmflow_flink(wl: Any, epoch: int) -> float:
    from dataflow.runners.flink.job import FlinkJob

    q = compile_query(wl.sql)
    tmp = Path(tempfile.mkdtemp(prefix="ivmflow-peer-"))
    t = time.perf_counter()
    FlinkJob(q, epoch_size=epoch, parallelism=2, checkpoint=str(tmp / "ck")).run(
        wl.updates, str(tmp / "d.csv")
    )
    return time.perf_counter() - t


class PeakRss:
    """Peak resident memory of this process and its children (the Flink JVM), sampled
    every 50 ms while the block runs."""

    def __enter__(self) -> PeakRss:
        import threading

        import psutil

        self.peak = 0
        self._stop = threading.Event()
        me = psutil.Process()

        def sample() -> None:
            while not self._stop.is_set():
                total = 0
                for proc in [me, *me.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):  # a child may just have exited
                        total += proc.memory_info().rss
                self.peak = max(self.peak, total)
                self._stop.wait(0.05)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mib(self) -> float:
        return self.peak / 2**20


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--edges", type=int, default=10000)
    p.add_argument("--epoch", type=int, default=1000)
    p.add_argument("--queries", nargs="+", default=["hop3_full", "hop4_project", "star_count"])
    p.add_argument("--check-edges", type=int, default=600)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = p.parse_args(argv)
    if args.quick:
        args.edges, args.check_edges = 1500, 300
    results = []
    for name in args.queries:
        small = make_workload(name, args.check_edges, seed=2)
        _, want = ivmflow_local(small, args.epoch)
        _, got = flink_sql(small, collect=True)
        agree = got == want
        wl = make_workload(name, args.edges, seed=1)
        n = len(wl.updates)
        with PeakRss() as m_local:
            local_s, _ = ivmflow_local(wl, args.epoch)
        with PeakRss() as m_flink:
            flink_s = ivmflow_flink(wl, args.epoch)
        with PeakRss() as m_sql:
            sql_s, _ = flink_sql(wl, collect=False)
        rec = {"query": name, "edges": args.edges, "updates": n, "agree_on_check": agree,
               "ivmflow_local_s": local_s, "ivmflow_flink_s": flink_s, "flink_sql_s": sql_s,
               "peak_rss_mib": {"ivmflow_local": m_local.mib, "ivmflow_flink": m_flink.mib,
                                "flink_sql": m_sql.mib},
               "memory_note": "RSS of this process and its children (the JVM), sampled; "
                              "the JVM stays up between runs, so Flink columns include it"}
        results.append(rec)
        print(f"{name:13s} {n:>7d} upd  ivmflow local {n / local_s:>9,.0f}/s "
              f"({m_local.mib:5.0f} MiB)  ivmflow flink {n / flink_s:>7,.0f}/s "
              f"({m_flink.mib:5.0f} MiB)  Flink SQL {n / sql_s:>8,.0f}/s ({m_sql.mib:5.0f} MiB)  "
              f"SQL/local {sql_s / local_s:6.1f}x  agree: {agree}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "flink_sql_peer_quick.json" if args.quick else "flink_sql_peer.json"
    (out / name).write_text(json.dumps(results, indent=2))
    print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

