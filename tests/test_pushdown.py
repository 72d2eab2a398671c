"""Constants of the WHERE pushed into the WITHs it reads (plans/pushdown.py): equal to
DuckDB after every epoch of random streams with deletes, pushed where a condition on a
grouping key (or through a join's ON equality) cannot change the result, and left
alone where it could (a WITH read twice, an aggregate's column, a RIGHT join)."""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import bag_stream, check_stream

from core.records import Record
from core.schema import Row
from dataflow.api import compile_query
from plans.pushdown import push_constants_into_withs

DDL = ("CREATE TABLE t(y INT, k INT, v INT); CREATE TABLE u(y INT, k INT, w INT); ")

S = "s AS (SELECT y AS sy, k AS sk, SUM(v) AS sv FROM t GROUP BY y, k)"
W = "w AS (SELECT y AS wy, k AS wk, SUM(w) AS ww FROM u GROUP BY y, k)"

QUERIES = [
    # TPC-DS Q78's shape: the kept side's year, and through the LEFT JOIN the other's
    f"WITH {S}, {W} SELECT sy, sk, sv, COALESCE(ww, 0) AS other FROM s LEFT JOIN w "
    "ON w.wy = s.sy AND w.wk = s.sk WHERE COALESCE(ww, 0) >= 0 AND s.sy = 1",
    # an inner join; the constant on the left of the equality; a grouping key that is
    # an expression
    f"WITH {S}, {W} SELECT sk, sv, ww FROM s JOIN w ON s.sy = w.wy AND s.sk = w.wk "
    "WHERE 2 = sy",
    "WITH s AS (SELECT y + 1 AS sy, SUM(v) AS sv FROM t GROUP BY y + 1) "
    "SELECT sy, sv FROM s WHERE sy = 2",
    # a WITH without aggregates
    "WITH s AS (SELECT y AS sy, v FROM t WHERE v > 0) SELECT sy, v FROM s WHERE sy = 1",
    # not pushed: read twice; an aggregate's column; an aggregate without GROUP BY;
    # a RIGHT join; HAVING
    f"WITH {S} SELECT a.sk, b.sv FROM s a, s b WHERE a.sk = b.sk AND a.sy = 1",
    f"WITH {S} SELECT sy, sk FROM s WHERE sv = 2",
    "WITH s AS (SELECT SUM(v) AS sv, COUNT(*) AS n FROM t) SELECT sv FROM s WHERE n = 2",
    f"WITH {S}, {W} SELECT sk, ww FROM s RIGHT JOIN w ON w.wy = s.sy WHERE s.sy = 1",
    "WITH s AS (SELECT y AS sy, SUM(v) AS sv FROM t GROUP BY y HAVING SUM(v) > 1) "
    "SELECT sy, sv FROM s WHERE sy = 1",
]


def _row(table: str, draw: st.DrawFn) -> Row:
    # (few keys, and years the queries name: rows of one key in and out of the year)
    return (draw(st.sampled_from([1, 2, None])), draw(st.sampled_from([1, 2, None])),
            draw(st.integers(-2, 3)))


@st.composite
def streams(draw: st.DrawFn) -> list[Record]:
    return bag_stream(draw, "tu", _row, per_epoch=8)


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=streams())
def test_pushed_constants_equal_duckdb_every_epoch(query: str, records: list[Record]) -> None:
    sql = DDL + query
    check_stream(compile_query(sql).maintain(), sql, records, label=query)  # type: ignore[arg-type]


def _pushed(query: str) -> list[str]:
    """The WHERE of each WITH whose WHERE changed."""
    def wheres(select: sqlglot.exp.Expr) -> dict[str, str]:
        return {c.alias: (c.this.args["where"].sql() if c.this.args.get("where") else "")
                for c in select.args["with_"].expressions}

    before = sqlglot.parse_one(query, read="duckdb")
    old, new = wheres(before), wheres(push_constants_into_withs(before))
    return [new[a] for a in new if new[a] != old[a]]


def test_what_is_pushed_and_what_is_not() -> None:
    assert _pushed(QUERIES[0]) == ["WHERE y = 1", "WHERE y = 1"]
    assert _pushed(QUERIES[1]) == ["WHERE y = 2", "WHERE y = 2"]
    assert _pushed(QUERIES[2]) == ["WHERE y + 1 = 2"]
    assert _pushed(QUERIES[3]) == ["WHERE v > 0 AND y = 1"]
    for query in QUERIES[4:]:
        assert _pushed(query) == [], query
