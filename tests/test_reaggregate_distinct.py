"""DISTINCT aggregates and MIN/MAX are kept incrementally by the reaggregation stage
(operators/reaggregate.py): a DISTINCT sum changes only when a value's count leaves or
reaches 0. Here against an exact recomputation from the live rows after every epoch:
DECIMAL sums to the last digit, DOUBLE sums with cancellation (1e16 and 1.0 in one
group: a float accumulator would lose the 1.0), NULLs skipped, and against DuckDB."""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal
from fractions import Fraction
from typing import Any

from oracle import check_stream

from core.records import EpochEnd, Record, Update
from dataflow.api import compile_query

SQL = """CREATE TABLE T(g INT, d DECIMAL(12,2), f DOUBLE);
SELECT g, COUNT(DISTINCT d) AS nd, SUM(DISTINCT d) AS sd, AVG(DISTINCT d) AS ad,
       SUM(DISTINCT f) AS sf, AVG(DISTINCT f) AS af, MIN(d) AS lo, MAX(f) AS hi,
       COUNT(*) AS n
FROM T GROUP BY g"""

D_VALUES = [None, Decimal("0.01"), Decimal("-3.10"), Decimal("12345678.99"),
            Decimal("0.10"), Decimal("7.00")]
F_VALUES = [None, 1e16, 1.0, 0.1, -0.1, 3.5, 2.0 ** -30]


def _exact(rows: Counter[tuple[Any, ...]]) -> dict[int, tuple[Any, ...]]:
    """The query's rows recomputed from the live rows, per group."""
    out: dict[int, tuple[Any, ...]] = {}
    for g in sorted({r[0] for r, m in rows.items() if m}):
        live = [r for r, m in rows.items() if m and r[0] == g]
        ds = {r[1] for r in live if r[1] is not None}
        fs = {r[2] for r in live if r[2] is not None}
        sf = sum((Fraction(x) for x in fs), Fraction(0))
        out[g] = (g, len(ds), sum(ds) if ds else None,
                  float(Fraction(sum(ds)) / len(ds)) if ds else None,
                  float(sf) if fs else None, float(sf / len(fs)) if fs else None,
                  min(ds) if ds else None, max(fs) if fs else None,
                  sum(rows[r] for r in live))
    return out


def _stream(seed: int) -> list[Record]:
    rng = random.Random(seed)
    live: Counter[tuple[Any, ...]] = Counter()
    out: list[Record] = []
    for _ in range(12):
        for _ in range(rng.randrange(1, 15)):
            if live and rng.random() < 0.45:
                row = rng.choice(sorted(live, key=repr))
                live[row] -= 1
                if not live[row]:
                    del live[row]
                out.append(Update("-", "T", row))
            else:
                row = (rng.randrange(3), rng.choice(D_VALUES), rng.choice(F_VALUES))
                live[row] += 1
                out.append(Update("+", "T", row))
        out.append(EpochEnd())
    return out


def test_distinct_sums_are_exact_after_inserts_and_deletes() -> None:
    for seed in range(30):
        view = compile_query(SQL).maintain()
        live: Counter[tuple[Any, ...]] = Counter()
        for rec in _stream(seed):
            if isinstance(rec, Update):
                view.apply(rec)
                live[rec.row] += 1 if rec.op == "+" else -1
                continue
            view.end_epoch()
            got = {row[0]: row for mult, row in view.snapshot()}
            assert got == _exact(live), seed


def test_distinct_aggregates_agree_with_duckdb() -> None:
    for seed in range(30, 40):
        check_stream(compile_query(SQL).maintain(), SQL, _stream(seed), label=seed)
