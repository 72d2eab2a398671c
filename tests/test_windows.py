"""Window functions (issue 42, item 1): ROW_NUMBER, RANK, DENSE_RANK, PERCENT_RANK,
CUME_DIST, NTILE, LAG, LEAD, FIRST_VALUE, LAST_VALUE and SUM/COUNT/AVG/MIN/MAX over the
whole partition and over cumulative ROWS and RANGE frames, equal to DuckDB after every
epoch of random streams with deletes (ties and NULLs in the partition and order keys);
over aggregates, in derived tables (top-N per group) and WITH; TPC-DS-shaped queries;
staged at P=3 equal to the local runner."""

from __future__ import annotations

import pickle
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import bag_stream, check_stream, local_deltas

from core.errors import QueryError
from core.records import EPOCH_END, Record, Update
from core.schema import Row
from dataflow.api import compile_query
from dataflow.circuit.graph import CustomNode
from dataflow.circuit.views import CompiledDag
from dataflow.circuit.windows import CompiledWindow
from dataflow.distributed.stages import StagePlan, run_stages

DDL = ("CREATE TABLE a(g INT, o INT, p DECIMAL(7,2), s VARCHAR); "
       "CREATE TABLE b(g INT, w INT); ")

ALL = "g, o, p, s"
"""Every column of a: ROW_NUMBER's ties broken by all of them give DuckDB's numbers."""

QUERIES = [
    # ranking, ties and NULLs in the partition and order keys
    f"SELECT {ALL}, ROW_NUMBER() OVER (PARTITION BY g ORDER BY o, p, s) AS rn FROM a",
    f"SELECT {ALL}, RANK() OVER (PARTITION BY g ORDER BY o) AS r FROM a",
    f"SELECT {ALL}, RANK() OVER (PARTITION BY g ORDER BY o DESC NULLS FIRST, s) AS r FROM a",
    f"SELECT {ALL}, DENSE_RANK() OVER (PARTITION BY g ORDER BY o) AS r FROM a",
    f"SELECT {ALL}, DENSE_RANK() OVER (ORDER BY s DESC) AS r FROM a",
    f"SELECT {ALL}, PERCENT_RANK() OVER (PARTITION BY g ORDER BY o) AS r, "
    "CUME_DIST() OVER (PARTITION BY g ORDER BY o) AS c FROM a",
    f"SELECT {ALL}, NTILE(3) OVER (PARTITION BY g ORDER BY o, p, s) AS t FROM a",
    # whole-partition aggregates (with and without PARTITION BY)
    f"SELECT {ALL}, SUM(p) OVER (PARTITION BY g) AS t, COUNT(p) OVER (PARTITION BY g) AS n, "
    "COUNT(*) OVER (PARTITION BY g) AS m FROM a",
    f"SELECT {ALL}, AVG(o) OVER (PARTITION BY g) AS v, MIN(s) OVER (PARTITION BY g) AS lo, "
    "MAX(p) OVER (PARTITION BY g) AS hi FROM a",
    f"SELECT {ALL}, SUM(o) OVER () AS t, MAX(o) OVER () AS hi FROM a",
    # cumulative frames: RANGE (the default with ORDER BY; peers share) and ROWS
    f"SELECT {ALL}, SUM(p) OVER (PARTITION BY g ORDER BY o) AS t, "
    "COUNT(*) OVER (PARTITION BY g ORDER BY o) AS n FROM a",
    f"SELECT {ALL}, SUM(p) OVER (PARTITION BY g ORDER BY o, p, s ROWS BETWEEN UNBOUNDED "
    "PRECEDING AND CURRENT ROW) AS t, MIN(o) OVER (PARTITION BY g ORDER BY o, p, s ROWS "
    "UNBOUNDED PRECEDING) AS lo FROM a",
    f"SELECT {ALL}, AVG(p) OVER (ORDER BY o RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT "
    "ROW) AS v, MAX(s) OVER (ORDER BY o) AS hi FROM a",
    f"SELECT {ALL}, SUM(o) OVER (PARTITION BY g ORDER BY o ROWS BETWEEN UNBOUNDED "
    "PRECEDING AND UNBOUNDED FOLLOWING) AS t FROM a",
    # navigation
    f"SELECT {ALL}, LAG(o) OVER (PARTITION BY g ORDER BY o, p, s) AS prev, "
    "LEAD(p, 2, 0) OVER (PARTITION BY g ORDER BY o, p, s) AS nxt FROM a",
    f"SELECT {ALL}, FIRST_VALUE(s) OVER (PARTITION BY g ORDER BY o, p, s) AS f, "
    "LAST_VALUE(o) OVER (PARTITION BY g ORDER BY o) AS l FROM a",
    # over aggregates and joins; expressions of window values and aggregates
    "SELECT g, SUM(p) AS t, RANK() OVER (ORDER BY SUM(p) DESC) AS r FROM a GROUP BY g",
    "SELECT a.g, o, SUM(p) * 100 / SUM(SUM(p)) OVER (PARTITION BY a.g) AS ratio "
    "FROM a, b WHERE a.g = b.g GROUP BY a.g, o",
    "SELECT g, o, SUM(p) AS t, AVG(SUM(p)) OVER (PARTITION BY g) AS v, "
    "RANK() OVER (PARTITION BY g ORDER BY o) AS r FROM a GROUP BY g, o",
    # top-N per group through a derived table and a WITH; windows after a join
    "SELECT g, o, s FROM (SELECT g, o, s, RANK() OVER (PARTITION BY g ORDER BY o DESC) "
    "AS r FROM a) t WHERE r <= 2",
    "WITH v AS (SELECT g, SUM(p) AS t FROM a GROUP BY g), "
    "w AS (SELECT g, t, DENSE_RANK() OVER (ORDER BY t) AS d FROM v) "
    "SELECT w.g, w.d, b.w FROM w, b WHERE w.g = b.g AND w.d < 3",
    "SELECT g, o, ROW_NUMBER() OVER (PARTITION BY g ORDER BY o, w) AS rn "
    "FROM (SELECT DISTINCT a.g, a.o, b.w FROM a, b WHERE a.g = b.g) t",
    # TPC-DS shapes: Q51's cumulative sums of aggregates and their running maximum,
    # Q47/Q57's average over the partition with the previous row joined by rank, Q49's
    # ranks in the branches of a UNION
    "WITH w AS (SELECT g, o, SUM(SUM(p)) OVER (PARTITION BY g ORDER BY o ROWS BETWEEN "
    "UNBOUNDED PRECEDING AND CURRENT ROW) AS cume FROM a GROUP BY g, o) "
    "SELECT g, o, cume, MAX(cume) OVER (PARTITION BY g ORDER BY o ROWS BETWEEN UNBOUNDED "
    "PRECEDING AND CURRENT ROW) AS m FROM w",
    "WITH v1 AS (SELECT g, o, SUM(p) AS t, AVG(SUM(p)) OVER (PARTITION BY g) AS av, "
    "RANK() OVER (PARTITION BY g ORDER BY o) AS rn FROM a GROUP BY g, o) "
    "SELECT v1.g, v1.o, v1.t, v1.av, v0.t AS prev FROM v1, v1 v0 "
    "WHERE v1.g = v0.g AND v1.rn = v0.rn + 1",
    "SELECT g, r FROM (SELECT g, RANK() OVER (ORDER BY SUM(p)) AS r FROM a GROUP BY g) x "
    "WHERE r <= 2 UNION SELECT g, r FROM (SELECT g, RANK() OVER (ORDER BY COUNT(*) DESC) "
    "AS r FROM b GROUP BY g) y WHERE r <= 2",
    # Q51 whole: two channels' cumulative sums, FULL JOINed ON (... AND ...), their
    # running maximum
    "WITH wv AS (SELECT g, o, SUM(SUM(p)) OVER (PARTITION BY g ORDER BY o ROWS BETWEEN "
    "UNBOUNDED PRECEDING AND CURRENT ROW) AS cume FROM a WHERE g IS NOT NULL AND o IS NOT "
    "NULL GROUP BY g, o), bv AS (SELECT g, w, SUM(COUNT(*)) OVER (PARTITION BY g ORDER BY "
    "w ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cume FROM b WHERE g IS NOT NULL "
    "GROUP BY g, w) "
    "SELECT k, d, wc, bc, MAX(wc) OVER (PARTITION BY k ORDER BY d ROWS BETWEEN UNBOUNDED "
    "PRECEDING AND CURRENT ROW) AS wm FROM (SELECT CASE WHEN wv.g IS NOT NULL THEN wv.g "
    "ELSE bv.g END AS k, CASE WHEN wv.o IS NOT NULL THEN wv.o ELSE bv.w END AS d, "
    "wv.cume AS wc, bv.cume AS bc FROM wv FULL OUTER JOIN bv ON (wv.g = bv.g AND "
    "wv.o = bv.w)) x",
    # top-N per group kept by the window view itself (a top-k per partition): with a
    # cumulative frame beside it, DENSE_RANK with a join, RANK = 1
    "SELECT g, o, s, rn, c FROM (SELECT g, o, s, ROW_NUMBER() OVER (PARTITION BY g ORDER "
    "BY o, p, s) AS rn, SUM(p) OVER (PARTITION BY g ORDER BY o, p, s ROWS UNBOUNDED "
    "PRECEDING) AS c FROM a) t WHERE rn < 3",
    "SELECT t.g, t.o, t.d, t.n, b.w FROM (SELECT g, o, DENSE_RANK() OVER (PARTITION BY g "
    "ORDER BY o DESC NULLS FIRST) AS d, COUNT(*) OVER (PARTITION BY g ORDER BY o DESC "
    "NULLS FIRST) AS n FROM a) t, b WHERE t.g = b.g AND t.d <= 2",
    "SELECT g, o FROM (SELECT g, o, RANK() OVER (PARTITION BY g ORDER BY p DESC) AS r "
    "FROM a) t WHERE r = 1",
    # ORDER BY ... LIMIT over a window's result
    f"SELECT {ALL}, RANK() OVER (ORDER BY o) AS r FROM a ORDER BY r, g, o, p, s LIMIT 4",
]

_P = [None, Decimal("1.50"), Decimal("2.00"), Decimal("0.25"), Decimal("-1.00")]


def _value(table: str, draw: st.DrawFn) -> Row:
    g = draw(st.one_of(st.none(), st.integers(0, 2)))
    if table == "b":
        return (g, draw(st.integers(0, 3)))
    return (g, draw(st.one_of(st.none(), st.integers(0, 4))), draw(st.sampled_from(_P)),
            draw(st.sampled_from([None, "x", "y", "z"])))


@st.composite
def streams(draw: st.DrawFn) -> list[Record]:
    """Inserts and deletes of rows present (with multiplicities), in epochs."""
    return bag_stream(draw, "aab", _value, per_epoch=14)


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=streams())
def test_window_functions_equal_duckdb_every_epoch(query: str, records: list[Record]) -> None:
    sql = DDL + query
    q = compile_query(sql)
    check_stream(q.maintain(), sql, records, label=query)  # type: ignore[arg-type]


@pytest.mark.parametrize("query", [
    "SELECT g, o, SUM(p) AS t, RANK() OVER (PARTITION BY g ORDER BY SUM(p) DESC) AS r, "
    "SUM(SUM(p)) OVER (PARTITION BY g ORDER BY o) AS c FROM a GROUP BY g, o",
    # no PARTITION BY: one stage partition
    "SELECT g, o, s FROM (SELECT g, o, s, ROW_NUMBER() OVER (ORDER BY o, g, s) AS rn "
    "FROM a) t WHERE rn <= 3",
])
def test_windows_as_stages_equal_the_local_runner(query: str) -> None:
    """On the distributed runners a window view is a stage of its own, partitioned by
    its PARTITION BY values (here 3 partitions, the runners' shuffles done by hand)."""
    from core.epochs import EpochCursor

    q = compile_query(DDL + query)
    rows = [(g, o, Decimal(p), s) for g, o, p, s in [
        (1, 1, "1.50", "x"), (1, 2, "2.00", "y"), (2, 1, "0.25", "x"), (None, 3, "1.00", None),
        (2, 4, "2.00", "z"), (1, None, "0.25", "x"), (0, 2, "1.50", "y")]]
    ups: list[Record] = [*(Update("+", "a", r) for r in rows), EPOCH_END,
                         Update("-", "a", rows[1]),
                         Update("+", "a", (2, 0, Decimal("5.00"), "y")),
                         Update("+", "a", rows[0], 2), EPOCH_END,
                         Update("-", "a", rows[4]), Update("-", "a", rows[0], 3), EPOCH_END]
    staged = run_stages(StagePlan.of(q, 3), list(EpochCursor().number(ups)))
    got = {k: sorted(v, key=repr) for k, v in staged.items() if k[0] == "delta"}
    assert got == local_deltas(q.maintain(), ups)


def test_a_window_is_a_circuit_node_and_its_plan_pickles() -> None:
    q = compile_query(DDL + "SELECT g, RANK() OVER (PARTITION BY g ORDER BY o) AS r FROM a")
    assert isinstance(q, CompiledDag)
    window = dict(q.inner)["_wn_0"]
    assert isinstance(window, CompiledWindow) and isinstance(window, CustomNode)
    assert pickle.loads(pickle.dumps(q.logical)).render() == q.logical.render()
    assert "window over _wi_0" in q.logical.render()


def test_two_window_specifications_are_two_window_views() -> None:
    q = compile_query(DDL + "SELECT g, SUM(p) OVER (PARTITION BY g) AS t, "
                            "RANK() OVER (ORDER BY o) AS r, COUNT(*) OVER (PARTITION BY g) AS n "
                            "FROM a")
    assert isinstance(q, CompiledDag)
    windows = [w for _, w in q.inner if isinstance(w, CompiledWindow)]
    assert [[f.func for f in w.spec.funcs] for w in windows] == [["sum", "count_star"],
                                                                  ["rank"]]


@pytest.mark.parametrize(("query", "says"), [
    ("SELECT SUM(o) OVER (ORDER BY o ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM a",
     "window frame"),
    ("SELECT NTILE(o) OVER (ORDER BY o) FROM a", "NTILE's bucket count"),
    ("SELECT STDDEV_SAMP(o) OVER (ORDER BY o) FROM a", "supported are ROW_NUMBER"),
    ("SELECT * , RANK() OVER (ORDER BY o) FROM a", "name the columns"),
    ("SELECT o FROM a QUALIFY RANK() OVER (ORDER BY o) = 1", "QUALIFY"),
    ("SELECT SUM(s) OVER (PARTITION BY g) FROM a", "SUM needs a number"),
])
def test_window_functions_refused_with_a_reason(query: str, says: str) -> None:
    with pytest.raises(QueryError, match=says):
        compile_query(DDL + query)


def test_top_n_per_group_is_kept_by_the_window_view() -> None:
    """``WHERE rn <= k`` over a windowed derived table: the window view keeps only the
    rows of rank at most k, so a row inserted first in a partition of 2,000 changes
    2k + 1 rows of its output, not 4,000."""
    from operators.window import WindowState

    q = compile_query(DDL + "SELECT g, o FROM (SELECT g, o, ROW_NUMBER() OVER (PARTITION BY "
                            "g ORDER BY o) AS rn FROM a) t WHERE rn <= 3")
    assert isinstance(q, CompiledDag)
    window = dict(q.inner)["_wn_0"]
    assert isinstance(window, CompiledWindow) and window.spec.limit == (0, 3)
    view = WindowState(window.spec)
    for o in range(2000):
        view.add((1, o + 1), 1)
    assert len(view.close_epoch()) == 3
    view.add((1, 0), 1)
    delta = view.close_epoch()
    assert sorted(delta) == [(-1, (1, 1, 1)), (-1, (1, 2, 2)), (-1, (1, 3, 3)),
                             (1, (1, 0, 1)), (1, (1, 1, 2)), (1, (1, 2, 3))]
    view.add((1, 0), -1)
    view.add((1, 2), -1)
    assert sorted(view.close_epoch()) == [(-1, (1, 0, 1)), (-1, (1, 1, 2)), (-1, (1, 2, 3)),
                                          (1, (1, 1, 1)), (1, (1, 3, 2)), (1, (1, 4, 3))]
    assert sorted(view.snapshot()) == [(1, (1, 1, 1)), (1, (1, 3, 2)), (1, (1, 4, 3))]
