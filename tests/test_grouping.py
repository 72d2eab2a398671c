"""Grouping sets (issue 42, item 3): ROLLUP, CUBE, GROUPING SETS and GROUPING(), as a
UNION ALL of one GROUP BY per set (plans/grouping.py), window functions beside them over
that union, equal to DuckDB after every epoch of random streams with deletes; bad input
refused with its position."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import bag_stream, check_stream

from core.errors import QueryError
from core.records import Record
from core.schema import Row
from dataflow.api import compile_query

DDL = ("CREATE TABLE t(a INT, b INT, c INT, p DECIMAL(7,2), s VARCHAR); "
       "CREATE TABLE u(a INT, d INT); ")

QUERIES = [
    # ROLLUP of one, two and three columns; GROUPING() in the select list
    "SELECT a, SUM(c) AS total, COUNT(*) AS n FROM t GROUP BY ROLLUP(a)",
    "SELECT a, b, GROUPING(a, b) AS g, AVG(p) AS avg_p, COUNT(c) AS n FROM t "
    "GROUP BY ROLLUP(a, b)",
    "SELECT s, a, b, MIN(p) AS lo, MAX(c) AS hi, SUM(p) FROM t GROUP BY ROLLUP(s, a, b)",
    # CUBE, GROUPING SETS with the empty set, elements combined as a cross product
    "SELECT a, b, GROUPING(a), GROUPING(b) AS gb, COUNT(*) FROM t GROUP BY CUBE(a, b)",
    "SELECT a, b, s, SUM(c) AS total FROM t GROUP BY GROUPING SETS ((a, b), (s), ())",
    "SELECT a, b, s, COUNT(*) AS n FROM t GROUP BY a, ROLLUP(b, s)",
    "SELECT a, b, COUNT(*) AS n FROM t GROUP BY GROUPING SETS ((a, b), a, ()), ROLLUP(b)",
    # GROUPING() in a CASE, in arithmetic; an expression over a grouping column
    "SELECT CASE WHEN GROUPING(s) = 1 THEN 'all' ELSE s END AS label, SUM(c) AS total "
    "FROM t GROUP BY ROLLUP(s)",
    "SELECT GROUPING(a) + GROUPING(b) AS level, a + 1 AS a1, COUNT(*) AS n FROM t "
    "GROUP BY ROLLUP(a, b)",
    "SELECT a % 2 AS parity, COUNT(*) AS n FROM t GROUP BY ROLLUP(a % 2)",
    # HAVING per set (over an aggregate, a grouping column and GROUPING())
    "SELECT a, b, COUNT(*) AS n FROM t GROUP BY ROLLUP(a, b) "
    "HAVING COUNT(*) > 1 OR (a IS NULL AND GROUPING(b) = 1)",
    # ORDER BY ... LIMIT over the union (every column ordered: no ties left open)
    "SELECT a, b, SUM(c) AS total, COUNT(*) AS n FROM t GROUP BY ROLLUP(a, b) "
    "ORDER BY n DESC, total NULLS FIRST, a NULLS FIRST, b NULLS FIRST LIMIT 3",
    # inside a derived table with an outer aggregate; in a WITH joined to a table
    "SELECT COUNT(*) AS sets, SUM(n) AS rows_ FROM (SELECT a, b, COUNT(*) AS n FROM t "
    "GROUP BY ROLLUP(a, b)) r",
    "WITH r AS (SELECT a, SUM(c) AS total FROM t GROUP BY ROLLUP(a)) "
    "SELECT r.a, r.total, u.d FROM r, u WHERE r.a = u.a",
    # each read from its base in the file's WITH (TPC-DS Q67: a rollup under a rank,
    # top-k per partition); two bases; an IN subquery's sets read their FROM each
    "SELECT * FROM (SELECT a, b, total, RANK() OVER (PARTITION BY a ORDER BY total DESC) "
    "AS rk FROM (SELECT t.a AS a, b, SUM(COALESCE(p * c, 0)) AS total FROM t, u "
    "WHERE t.a = u.a GROUP BY ROLLUP(t.a, b)) dw1) dw2 WHERE rk <= 2",
    "SELECT x.a, x.n, y.m FROM (SELECT a, COUNT(*) AS n FROM t GROUP BY ROLLUP(a)) x, "
    "(SELECT a, AVG(d) AS m FROM u GROUP BY CUBE(a)) y WHERE x.a = y.a",
    "SELECT a, c FROM t WHERE c IN (SELECT SUM(d) AS s FROM u GROUP BY ROLLUP(a))",
    # over a join; DISTINCT; no aggregate at all; GROUPING() of a plain GROUP BY
    "SELECT t.a, u.d, COUNT(*) AS n FROM t, u WHERE t.a = u.a GROUP BY ROLLUP(t.a, u.d)",
    "SELECT DISTINCT a, GROUPING(b) AS gb FROM t GROUP BY ROLLUP(a, b)",
    "SELECT a, b FROM t GROUP BY ROLLUP(a, b)",
    "SELECT a, GROUPING(a) AS g, COUNT(*) AS n FROM t GROUP BY a",
    # window functions over the union of the sets (TPC-DS Q70, Q86): GROUPING() in the
    # PARTITION BY, an aggregate in the ORDER BY, ORDER BY ... LIMIT over the windows
    "SELECT a, b, SUM(c) AS total, GROUPING(a) + GROUPING(b) AS lvl, "
    "RANK() OVER (PARTITION BY GROUPING(a) + GROUPING(b), CASE WHEN GROUPING(b) = 0 "
    "THEN a END ORDER BY SUM(c) DESC) AS r FROM t GROUP BY ROLLUP(a, b) "
    "ORDER BY lvl DESC, CASE WHEN GROUPING(a) + GROUPING(b) = 0 THEN a END NULLS FIRST, "
    "r, a NULLS FIRST, b NULLS FIRST LIMIT 5",
    "SELECT b AS x, SUM(c) AS total, COUNT(*) AS n FROM t GROUP BY ROLLUP(a, b) "
    "ORDER BY -x NULLS FIRST, total NULLS FIRST, n, x NULLS FIRST LIMIT 3",
    "SELECT a AS k, SUM(c) AS total, RANK() OVER (ORDER BY SUM(c) DESC) AS r FROM t "
    "GROUP BY ROLLUP(a) ORDER BY total - r NULLS FIRST, k NULLS FIRST LIMIT 2",
    "SELECT s, COUNT(*) AS n, SUM(COUNT(*)) OVER (PARTITION BY GROUPING(s)) AS all_n, "
    "ROW_NUMBER() OVER (ORDER BY COUNT(*), s NULLS FIRST, GROUPING(s)) AS rn "
    "FROM t GROUP BY CUBE(s)",
]


def _row(table: str, draw: st.DrawFn) -> Row:
    a = draw(st.one_of(st.none(), st.integers(0, 3)))
    if table == "u":
        return (a, draw(st.one_of(st.none(), st.integers(0, 2))))
    return (a, draw(st.one_of(st.none(), st.integers(0, 2))), draw(st.integers(-2, 5)),
            draw(st.sampled_from([None, Decimal("1.50"), Decimal("2.00"), Decimal("0.25")])),
            draw(st.sampled_from([None, "x", "y"])))


@st.composite
def streams(draw: st.DrawFn) -> list[Record]:
    """Inserts and deletes of rows present (with multiplicities), in epochs; t drawn
    twice as often as u."""
    return bag_stream(draw, "ttu", _row, per_epoch=10)


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=streams())
def test_grouping_sets_equal_duckdb_every_epoch(query: str, records: list[Record]) -> None:
    sql = DDL + query
    q = compile_query(sql)
    check_stream(q.maintain(), sql, records, label=query)  # type: ignore[arg-type]


def test_a_rollup_is_one_aggregate_per_set_under_a_union_all() -> None:
    plan = compile_query(DDL + "SELECT a, b, COUNT(*) FROM t GROUP BY ROLLUP(a, b)").logical
    unions = [line for line in plan.render().splitlines() if "UNION ALL of" in line]
    assert len(unions) == 1 and unions[0].count("_sb_") == 3, unions


@pytest.mark.parametrize(("query", "says"), [
    ("SELECT a, GROUPING(b) FROM t GROUP BY ROLLUP(a)",
     r"column 105: GROUPING\(\): GROUPING\(b\): b is not an expression of the GROUP BY"),
    ("SELECT a, COUNT(*) FROM t WHERE GROUPING(a) = 0 GROUP BY ROLLUP(a)",
     r"GROUPING\(\): GROUPING\(\) is allowed in the select list, HAVING and ORDER BY"),
    ("SELECT a, COUNT(*) FROM t GROUP BY CUBE(a, b, c, p, s, a + 1, b + 1)",
     r"grouping sets: 128 grouping sets: at most 64"),
    ("SELECT a, RANK() OVER (ORDER BY COUNT(*)) AS r FROM t GROUP BY ROLLUP(a) "
     "QUALIFY r < 2", r"grouping sets: QUALIFY beside grouping sets is not supported"),
    ("WITH v AS (SELECT a, c FROM t) SELECT a, SUM(c) AS total, RANK() OVER (ORDER BY "
     "SUM(c)) AS r FROM v GROUP BY ROLLUP(a) ORDER BY total + r",
     r"column 223: grouping sets: ORDER BY: 'total' inside an expression names a SELECT "
     r"item beside grouping sets \(and may name a column of the FROM"),
    # inside an ORDER BY expression a name is the FROM's column first (DuckDB's
    # reading): here t.a, not the output column a (t.b)
    ("SELECT b AS a, COUNT(*) AS n FROM t GROUP BY ROLLUP(a, b) ORDER BY a + 0 LIMIT 1",
     r"column 162: grouping sets: ORDER BY: 'a' inside an expression is the FROM's "
     r"column, which is not an output column"),
    ("SELECT a, (SELECT COUNT(*) FROM u WHERE u.d = t.a) AS k FROM t GROUP BY ROLLUP(a)",
     r"column 113: grouping sets: a subquery reading a grouping expression"),
])
def test_grouping_refused_with_position(query: str, says: str) -> None:
    with pytest.raises(QueryError, match=says) as err:
        compile_query(DDL + query)
    assert "line 1, column" in str(err.value)
