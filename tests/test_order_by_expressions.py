"""ORDER BY an expression over output columns that is no output column itself (TPC-DS
Q36, Q47, Q57, Q89: ``ORDER BY sum_sales - avg_monthly_sales``, ``CASE WHEN
lochierarchy = 0 THEN i_category END``, a SELECT alias inside an expression): a
computed sort key (core.consolidate.ComputedKey) orders the snapshot and picks the
rows of a LIMIT, the output unchanged; equal to DuckDB after every epoch of random
streams with deletes, the snapshot in DuckDB's order; a key reading a column not in
the output refused."""

from __future__ import annotations

import pickle
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from oracle import DuckDBOracle, check_stream, local_deltas, normalise_row
from test_windows import ALL, DDL, streams

from core.consolidate import ComputedKey
from core.epochs import EpochCursor
from core.errors import QueryError
from core.records import EPOCH_END, Record, Update
from dataflow.api import compile_query
from dataflow.distributed.stages import StagePlan, run_stages

QUERIES = [
    # Q47/Q57/Q89: the difference of two output columns, then every column (no ties)
    "SELECT g, o, SUM(p) AS t, AVG(SUM(p)) OVER (PARTITION BY g) AS av FROM a "
    "GROUP BY g, o ORDER BY t - av NULLS FIRST, g NULLS FIRST, o NULLS FIRST LIMIT 3",
    "SELECT * FROM (SELECT g, o, SUM(p) AS t, AVG(SUM(p)) OVER (PARTITION BY g) AS av "
    "FROM a GROUP BY g, o) x WHERE t IS NOT NULL "
    "ORDER BY t - av DESC, 1 NULLS FIRST, 2 NULLS FIRST LIMIT 2",
    # over a join of views (Q47's v2), the key an expression of qualified columns
    "WITH v AS (SELECT g, SUM(p) AS t, COUNT(*) AS n FROM a GROUP BY g) "
    "SELECT v.g, v.t, v.n, b.w FROM v, b WHERE v.g = b.g "
    "ORDER BY v.t * 2 - v.n NULLS FIRST, v.g, b.w LIMIT 3",
    # Q36: a CASE over SELECT aliases (alias and FROM column), a rank beside it
    "SELECT g, o, SUM(p) AS t, RANK() OVER (PARTITION BY g ORDER BY SUM(p) DESC) AS r "
    "FROM a GROUP BY g, o ORDER BY CASE WHEN g = 0 THEN o END NULLS FIRST, r, "
    "g NULLS FIRST, o NULLS FIRST LIMIT 4",
    f"SELECT {ALL}, RANK() OVER (PARTITION BY g ORDER BY o) AS r FROM a ORDER BY -r, "
    "g NULLS FIRST, o NULLS FIRST, p NULLS FIRST, s NULLS FIRST LIMIT 4",
    "SELECT g AS k, COUNT(*) AS n FROM a GROUP BY g "
    "ORDER BY -n, CASE WHEN k IS NULL THEN 1 ELSE 0 END, k LIMIT 2",
    # no aggregate: a bag of rows, the key over two columns
    "SELECT g, o, s FROM a ORDER BY COALESCE(o, 0) + COALESCE(g, 0) DESC, "
    "g NULLS FIRST, o NULLS FIRST, s NULLS FIRST LIMIT 5",
]

@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=streams())
def test_order_by_expressions_equal_duckdb_every_epoch(query: str,
                                                       records: list[Record]) -> None:
    sql = DDL + query
    q = compile_query(sql)
    view = check_stream(q.maintain(), sql, records, label=query)  # type: ignore[arg-type]
    # the snapshot in DuckDB's order (the ORDER BY is total: no ties left open)
    oracle = DuckDBOracle(sql)
    oracle.apply_all(r for r in records if isinstance(r, Update))
    want = [normalise_row(r) for r in oracle.raw_result()]
    oracle.close()
    got = [normalise_row(r) for m, r in view.snapshot() for _ in range(m)]
    assert got == want, query


def test_a_computed_key_is_in_the_plan_and_pickles() -> None:
    plan = compile_query(DDL + QUERIES[0]).logical
    keys = [c for c, _d, _n in plan.query.cq.order_by if isinstance(c, ComputedKey)]
    assert [k.sql for k in keys] == ["_wn_0._c2 - _wn_0._w0"]
    assert keys[0]((0, 1, Decimal("2.50"), 2.0)) == 0.5
    assert "top-k window: order ((" in plan.render()
    copy = pickle.loads(pickle.dumps(plan))
    assert copy.render() == plan.render()


@pytest.mark.parametrize(("query", "says"), [
    ("SELECT g, SUM(p) AS t FROM a GROUP BY g ORDER BY t - COUNT(*)",
     r"ORDER BY 't - COUNT\(\*\)': 'COUNT\(\*\)' is not an output column"),
    ("SELECT g FROM a ORDER BY o + 1",
     r"ORDER BY 'o \+ 1' reads 'o', which is not an output column"),
    # a name in an expression is the FROM's column first (DuckDB's reading), here not
    # an output column: a.g, not the alias g
    ("SELECT o AS g, RANK() OVER (ORDER BY o) AS r FROM a ORDER BY g + 0, r LIMIT 2",
     r"ORDER BY '_wn_0._c\d+ \+ 0' reads '_wn_0._c\d+', which is not an output column"),
    # beside window functions over a view, whose columns the windows' rewrite does not
    # know: a SELECT alias in an expression is refused, not guessed
    ("WITH v AS (SELECT g, SUM(p) AS t FROM a GROUP BY g) SELECT g, t AS u, RANK() OVER "
     "(ORDER BY t) AS r FROM v ORDER BY u - r LIMIT 1",
     r"'u' names a SELECT item beside window functions"),
])
def test_an_order_key_over_a_column_not_in_the_output_is_refused(query: str,
                                                                 says: str) -> None:
    with pytest.raises(QueryError, match=says):
        compile_query(DDL + query)


def test_a_computed_key_picks_the_same_rows_staged() -> None:
    """On the distributed runners the top-k is one stage after the query's partitions:
    its computed key travels with the plan (3 partitions, shuffles done by hand)."""
    q = compile_query(DDL + QUERIES[0])
    rows = [(g, o, Decimal(p), s) for g, o, p, s in [
        (1, 1, "1.50", "x"), (1, 2, "2.00", "y"), (2, 1, "0.25", "x"), (None, 3, "1.00", None),
        (2, 4, "2.00", "z"), (1, None, "0.25", "x"), (0, 2, "1.50", "y")]]
    ups: list[Record] = [*(Update("+", "a", r) for r in rows), EPOCH_END,
                         Update("-", "a", rows[1]),
                         Update("+", "a", (2, 0, Decimal("5.00"), "y")), EPOCH_END,
                         Update("-", "a", rows[4]), Update("-", "a", rows[0]), EPOCH_END]
    staged = run_stages(StagePlan.of(q, 3), list(EpochCursor().number(ups)))
    got = {k: sorted(v, key=repr) for k, v in staged.items() if k[0] == "delta"}
    assert got == local_deltas(q.maintain(), ups)
