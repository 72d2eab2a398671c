"""What the expression layer costs: TPC-H Q1 and Q9 as written, against the same queries
over precomputed columns, on the same TPC-H stream in the same process.

The precomputed variant adds to every row the values of the query's one-table
expressions (Q1: ``l_extendedprice * (1 - l_discount)`` and the charge; Q9: the
lineitem amount, ``EXTRACT(YEAR FROM o_orderdate)``, ``p_name LIKE '%green%'`` as a
boolean), so its input code only reads columns; the several-table part of Q9
(``amount - ps_supplycost * l_quantity``) is inherent in the query and stays. Both
variants maintain the same results (checked per epoch). The stream is the initial
load of ``ivmflow generate tpch`` then its refresh epochs; the cost per update is
the whole stream's time over its updates (the load dominates).

    python -m bench.sql_expr_bench [--sf 0.1] [--repeat 3] [--native]

Prints a table and writes bench/results/sql_expr.json.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, command_line, result_record
from connectors.files import read_updates
from connectors.tpch import TpchSpec, write_tpch
from core.records import EpochEnd, Record, Update
from dataflow.api import compile_query

EXTRA = {
    # table -> (extra column DDL, function of the row giving the extra values)
    "lineitem": (", l_disc_price DECIMAL(30,4), l_charge DECIMAL(38,6)",
                 lambda r: (r[5] * (1 - r[6]), r[5] * (1 - r[6]) * (1 + r[7]))),
    "orders": (", o_year INTEGER", lambda r: (r[4].year,)),
    "part": (", p_green BOOLEAN", lambda r: ("green" in r[1],)),
}

Q1_PRE = """SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty,
    sum(l_extendedprice) AS sum_base_price, sum(l_disc_price) AS sum_disc_price,
    sum(l_charge) AS sum_charge, avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price,
    avg(l_discount) AS avg_disc, count(*) AS count_order
FROM lineitem WHERE l_shipdate <= CAST('1998-09-02' AS date)
GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus"""

Q9_PRE = """SELECT nation, o_year, sum(amount) AS sum_profit FROM (
    SELECT n_name AS nation, o_year, l_disc_price - ps_supplycost * l_quantity AS amount
    FROM part, supplier, lineitem, partsupp, orders, nation
    WHERE s_suppkey = l_suppkey AND ps_suppkey = l_suppkey AND ps_partkey = l_partkey
      AND p_partkey = l_partkey AND o_orderkey = l_orderkey AND s_nationkey = n_nationkey
      AND p_green) AS profit
GROUP BY nation, o_year ORDER BY nation, o_year DESC"""


def precomputed_schema(schema: str) -> str:
    out = schema
    for table, (cols, _fn) in EXTRA.items():
        head = f"CREATE TABLE {table}"
        start = out.index(head)
        end = out.index(");", start)
        out = out[:end] + cols + out[end:]
    return out


def widen(records: list[Record]) -> list[Record]:
    out: list[Record] = []
    for r in records:
        if isinstance(r, Update) and r.relation in EXTRA:
            r = Update(r.op, r.relation, r.row + EXTRA[r.relation][1](r.row), r.mult, r.source)
        out.append(r)
    return out


def timed_run(sql: str, records: list[Record], native: bool) -> tuple[float, list[Any]]:
    q = compile_query(sql)
    view = q.maintain(native=native)
    apply, end = view.apply, view.end_epoch
    deltas = []
    gc.collect()
    t0 = time.perf_counter()
    for r in records:
        if isinstance(r, EpochEnd):
            deltas.append(end().rows)
        else:
            apply(r)
    t1 = time.perf_counter()
    return t1 - t0, deltas


def canonical(deltas: list[Any]) -> list[Any]:
    return [sorted((m, tuple(round(v, 6) if isinstance(v, float) else v for v in row))
                   for m, row in d) for d in deltas]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=3, help="runs per variant (min taken)")
    ap.add_argument("--native", action="store_true", help="compiled hot path")
    ap.add_argument("--out", default=str(RESULTS / "sql_expr"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        write_tpch(TpchSpec(sf=args.sf, refresh_pairs=2), tmp)
        schema = (Path(tmp) / "schema.sql").read_text()
        queries = {"q01": (Path(tmp) / "queries/q01.sql").read_text(),
                   "q09": (Path(tmp) / "queries/q09.sql").read_text()}
        q = compile_query(queries["q01"])
        records = list(read_updates(Path(tmp) / "updates.csv", q.schema))
    wide = widen(records)
    pre_schema = precomputed_schema(schema)
    n_updates = sum(1 for r in records if isinstance(r, Update))
    rows = []
    for name, pre in (("q01", Q1_PRE), ("q09", Q9_PRE)):
        expr_s = pre_s = float("inf")
        for _ in range(args.repeat):
            t, d_expr = timed_run(queries[name], records, args.native)
            expr_s = min(expr_s, t)
            t, d_pre = timed_run(pre_schema + "\n" + pre + ";", wide, args.native)
            pre_s = min(pre_s, t)
        assert canonical(d_expr) == canonical(d_pre), f"{name}: the variants disagree"
        rows.append({"query": name, "updates": n_updates,
                     "expressions_us_per_update": 1e6 * expr_s / n_updates,
                     "precomputed_us_per_update": 1e6 * pre_s / n_updates,
                     "overhead": expr_s / pre_s - 1})
    print(f"SF {args.sf}, {n_updates} updates, {'native' if args.native else 'interpreted'}, "
          f"min of {args.repeat}")
    print(f"{'query':6} {'expressions us/upd':>19} {'precomputed us/upd':>19} {'overhead':>9}")
    for r in rows:
        print(f"{r['query']:6} {r['expressions_us_per_update']:19.2f} "
              f"{r['precomputed_us_per_update']:19.2f} {100 * r['overhead']:8.1f}%")
    out = Path(args.out + ("_native" if args.native else "") + ".json")
    result_record("sql_expr", rows, command=command_line("bench.sql_expr_bench", argv),
                  extra={"sf": args.sf, "native": args.native, "repeat": args.repeat},
                  out=out, table=False)


if __name__ == "__main__":
    main()
    del Decimal  # (imported for readers of EXTRA's arithmetic)
