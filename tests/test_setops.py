"""Set operations (issue 42, item 2): UNION [ALL], INTERSECT [ALL] and EXCEPT [ALL], at
the top level, in derived tables, WITH and subqueries, with SQL's bag and set
semantics, equal to DuckDB after every epoch of random streams with deletes."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import bag_stream, check_stream, local_deltas

from core.errors import QueryError
from core.records import EPOCH_END, Record, Update
from core.schema import Row
from dataflow.api import compile_query
from dataflow.circuit.graph import CustomNode
from dataflow.circuit.setops import CompiledSetOp
from dataflow.circuit.views import CompiledDag
from dataflow.distributed.stages import StagePlan, run_stages

DDL = ("CREATE TABLE a(x INT, y INT, p DECIMAL(7,2)); "
       "CREATE TABLE b(x INT, y INT, p DECIMAL(7,2)); "
       "CREATE TABLE c(x INT, s VARCHAR); ")

OPS = ["UNION ALL", "UNION", "INTERSECT", "INTERSECT ALL", "EXCEPT", "EXCEPT ALL"]

QUERIES = [
    *(f"SELECT x, y FROM a {op} SELECT x, y FROM b" for op in OPS),
    # a chain of one operation, and operations of two kinds nested
    "SELECT x FROM a UNION ALL SELECT y FROM b UNION ALL SELECT x FROM c",
    "SELECT x FROM a EXCEPT SELECT x FROM b EXCEPT SELECT x FROM c",
    "SELECT x FROM a EXCEPT ALL (SELECT x FROM b INTERSECT ALL SELECT x FROM c)",
    "(SELECT x FROM a UNION SELECT x FROM b) INTERSECT SELECT x FROM c",
    # the branches filter, join and aggregate; the result is aggregated and joined
    "SELECT x, COUNT(*) AS n FROM (SELECT x, y FROM a WHERE y > 1 EXCEPT ALL "
    "SELECT b.x, b.y FROM b, c WHERE b.x = c.x) t GROUP BY x",
    "SELECT t.x, c.s FROM (SELECT x FROM a INTERSECT SELECT x FROM b) t, c WHERE t.x = c.x",
    "SELECT x, SUM(p) AS total FROM (SELECT x, p FROM a UNION ALL SELECT x, p FROM b) u "
    "GROUP BY x",
    "SELECT x, COUNT(*) AS n FROM a GROUP BY x UNION SELECT x, COUNT(*) FROM b GROUP BY x",
    # a WITH whose body is a set operation, read twice; a set operation in an IN
    "WITH u AS (SELECT x, y FROM a UNION ALL SELECT x, y FROM b) "
    "SELECT u1.x, u2.y FROM u u1, u u2 WHERE u1.y = u2.x",
    "SELECT x, y FROM a WHERE x IN (SELECT x FROM b EXCEPT SELECT x FROM c)",
    # types unified: INT with DECIMAL, a NULL column, strings
    "SELECT x, p FROM a UNION ALL SELECT y, x FROM b",
    "SELECT x, NULL AS s FROM a UNION SELECT x, s FROM c",
    "SELECT s FROM c EXCEPT SELECT CAST(x AS VARCHAR) FROM a",
    "SELECT x, SUM(p) FROM a GROUP BY x UNION ALL SELECT NULL, 1.5 FROM b",
    # two inputs planned again with CASTs (their NULL columns typed by the first's)
    "SELECT x, COUNT(*) AS n FROM a GROUP BY x UNION ALL SELECT NULL AS x, COUNT(*) AS n "
    "FROM b UNION ALL SELECT NULL AS x, COUNT(*) AS n FROM c",
    # ORDER BY and LIMIT over the result
    "SELECT x, y FROM a UNION SELECT x, y FROM b ORDER BY y DESC, x LIMIT 3",
]


def _value(table: str, draw: st.DrawFn) -> Row:
    x = draw(st.one_of(st.none(), st.integers(0, 3)))
    if table == "c":
        return (x, draw(st.sampled_from([None, "0", "1", "2", "z"])))
    from decimal import Decimal
    return (x, draw(st.integers(0, 3)), draw(st.sampled_from(
        [None, Decimal("1.50"), Decimal("2.00"), Decimal("0.25")])))


@st.composite
def streams(draw: st.DrawFn) -> list[Record]:
    """Inserts and deletes of rows present (with multiplicities), in epochs."""
    return bag_stream(draw, "abc", _value)


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=streams())
def test_set_operations_equal_duckdb_every_epoch(query: str, records: list[Record]) -> None:
    sql = DDL + query
    q = compile_query(sql)
    check_stream(q.maintain(), sql, records, label=query)  # type: ignore[arg-type]


def test_set_operations_as_stages_equal_the_local_runner() -> None:
    """On the distributed runners a set operation is a stage of its own, partitioned by
    the rows' values (here 3 partitions, the runners' shuffles done by hand)."""
    from core.epochs import EpochCursor

    sql = DDL + ("SELECT x, COUNT(*) AS n FROM (SELECT x, y FROM a EXCEPT ALL "
                 "SELECT x, y FROM b) t GROUP BY x")
    q = compile_query(sql)
    ups: list[Record] = [Update("+", "a", (1, 1, None), 3), Update("+", "a", (2, 1, None)),
           Update("+", "b", (1, 1, None)), EPOCH_END, Update("-", "a", (2, 1, None)),
           Update("+", "b", (1, 1, None), 2), EPOCH_END]
    plan = StagePlan.of(q, 3)
    staged = run_stages(plan, list(EpochCursor().number(ups)))
    want = local_deltas(q.maintain(), ups)
    got = {k: sorted(v, key=repr) for k, v in staged.items() if k[0] == "delta"}
    assert got == want


def test_a_set_operation_is_a_circuit_node_and_its_plan_pickles() -> None:
    q = compile_query(DDL + "SELECT x FROM a UNION SELECT x FROM b")
    assert isinstance(q, CompiledDag)
    setop = dict(q.inner)["_so_0"]
    assert isinstance(setop, CompiledSetOp) and isinstance(setop, CustomNode)
    assert pickle.loads(pickle.dumps(q.logical)).render() == q.logical.render()


@pytest.mark.parametrize(("query", "says"), [
    ("SELECT x, y FROM a UNION SELECT x FROM b", "as many columns"),
    ("SELECT s FROM c UNION SELECT x FROM a", "CAST them to one type"),
    ("SELECT x FROM (SELECT x FROM a UNION SELECT x FROM b ORDER BY x LIMIT 1) t",
     "LIMIT or OFFSET on a set operation inside the query"),
])
def test_set_operations_refused_with_a_reason(query: str, says: str) -> None:
    with pytest.raises(QueryError, match=says):
        compile_query(DDL + query)
