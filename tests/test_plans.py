"""Plan compiler: classification, tree choice by height and update rates, rejections."""

from __future__ import annotations

import pytest

from core.errors import QueryError, UnsupportedQueryError
from core.records import Update
from dataflow.api import compile_query
from plans.plan import build_plan
from plans.sql import parse_query

PATH3 = """
CREATE TABLE R1(a INT, b INT); CREATE TABLE R2(b INT, c INT); CREATE TABLE R3(c INT, d INT);
SELECT R1.a, R1.b, R2.c, R3.d FROM R1, R2, R3 WHERE R1.b = R2.b AND R2.c = R3.c;
"""


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("SELECT G1.src, G1.dst FROM G G1", "q-hierarchical"),
        ("SELECT G1.src, G2.dst FROM G G1, G G2 WHERE G1.dst = G2.src", "hierarchical"),
        (
            "SELECT G1.src, G3.dst FROM G G1, G G2, G G3 "
            "WHERE G1.dst = G2.src AND G2.dst = G3.src",
            "acyclic",
        ),
        ("SELECT G1.dst FROM G G1, G G2 WHERE G1.dst = G2.src", "q-hierarchical"),
        ("SELECT G1.src FROM G G1, G G2 WHERE G1.dst = G2.src", "hierarchical"),
        (
            "SELECT G1.src, G2.src, G3.src FROM G G1, G G2, G G3 "
            "WHERE G1.dst = G2.src AND G2.dst = G3.src",
            "free-connex",
        ),
        (
            "SELECT G1.src, COUNT(*) FROM G G1, G G2, G G3, G G4 "
            "WHERE G1.src = G2.src AND G1.src = G3.src AND G1.src = G4.src GROUP BY G1.src",
            "q-hierarchical",
        ),
    ],
)
def test_classification(select: str, expected: str) -> None:
    q = compile_query("CREATE TABLE G(src INT, dst INT);" + select)
    assert q.plan.query_class == expected


def test_rates_put_busy_relations_high() -> None:
    busy_r1 = compile_query(PATH3, rates=[100, 1, 1]).plan.tree_text
    busy_r3 = compile_query(PATH3, rates=[1, 1, 100]).plan.tree_text
    assert busy_r1 == "[b](R1, R2(R3))"
    assert busy_r3 == "[c](R2(R1), R3)"


def test_rates_from_stream_prefix() -> None:
    prefix = [Update("+", "R3", (i, i)) for i in range(50)] + [Update("+", "R1", (0, 0))]
    assert compile_query(PATH3, prefix=prefix).plan.tree_text == "[c](R2(R1), R3)"


def test_height_first() -> None:
    """The 4-hop query gets CROWN's height-2 generalized tree, not a height-3 path."""
    q = compile_query(
        "CREATE TABLE G(src INT, dst INT); SELECT G1.src, G2.src, G3.src, G3.dst, G4.dst "
        "FROM G G1, G G2, G G3, G G4 WHERE G1.dst = G2.src AND G2.dst = G3.src "
        "AND G3.dst = G4.src"
    )
    assert q.plan.height == 2
    assert q.plan.tree_text.startswith("[")


def test_cyclic_rejected_with_pointer_to_heavy_light() -> None:
    # build_plan plans acyclic queries only; compile_query sends triangles to IVM-epsilon
    # (tests/test_triangles.py) and other cyclic queries to a GHD (tests/test_ghd.py).
    with pytest.raises(UnsupportedQueryError, match="heavy/light"):
        build_plan(parse_query(
            "CREATE TABLE G(src INT, dst INT); SELECT COUNT(*) FROM G a, G b, G c, G d "
            "WHERE a.dst = b.src AND b.dst = c.src AND c.dst = d.src AND d.dst = a.src"
        ))


@pytest.mark.parametrize(
    ("select", "fragment"),
    [
        ("SELECT G1.src FROM G G1 WHERE G1.src + 'a' = 2", "line 2"),
        ("SELECT G1.src FROM G G1 ANTI JOIN G G2 ON G1.dst = G2.src", "ANTI JOIN"),
        ("SELECT DISTINCT G1.src FROM G G1, G G2 WHERE G1.dst < G2.src", "several tables"),
        ("SELECT STRING_AGG(G1.src, ',') FROM G G1", "STRING_AGG"),
        ("SELECT G1.src FROM G G1 LIMIT 2", "LIMIT"),
        ("SELECT G1.src FROM G G1 ORDER BY G1.dst", "ORDER BY"),
        ("SELECT G1.src FROM G G1 USING SAMPLE 50%", "USING SAMPLE"),
        ("SELECT G1.src FROM G G1 LEFT JOIN G G2 ON G1.dst < G2.src",
         "LEFT OUTER JOIN needs an equality"),
        ("SELECT nope FROM G G1", "no FROM item has such a column"),
        ("SELECT G1.src FROM H G1", "table 'H'"),
        ("SELECT G1.src, COUNT(*) FROM G G1", "GROUP BY"),
        ("SELECT COUNT(DISTINCT G1.src, G1.dst) FROM G G1", "DISTINCT"),
        ("SELECT G1.src FROM G G1, G G1", "duplicate alias"),
        ("SELECT FROM WHERE", "syntax"),
    ],
)
def test_unsupported_sql_names_construct(select: str, fragment: str) -> None:
    with pytest.raises(QueryError) as info:
        compile_query("CREATE TABLE G(src INT, dst INT);\n" + select, source_name="q.sql")
    text = str(info.value)
    assert text.startswith("q.sql")
    assert fragment in text


def test_filters_and_self_join_copies() -> None:
    q = compile_query(
        "CREATE TABLE G(src INT, dst INT);"
        "SELECT G1.src, G2.dst FROM G G1 JOIN G G2 ON G1.dst = G2.src "
        "WHERE G2.dst IN (3, 4) AND G1.src IS NOT NULL AND 0 < G1.src"
    )
    view = q.maintain()
    for row in [(1, 2), (2, 3), (2, 5), (0, 2), (2, 4)]:
        view.apply(Update("+", "G", row))
    assert view.snapshot() == [(1, (1, 3)), (1, (1, 4))]
