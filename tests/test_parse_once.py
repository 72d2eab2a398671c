"""A query file is parsed once per compile (issue 44, item 1): sqlglot parses the text
(the tables and the query) one time, and every later stage (checking, normalization,
the split into views, decorrelation, each view's compile, the query's over them) works
on that parse's trees, never on SQL text it writes and reads back.

The counter wraps ``sqlglot.parser.Parser.parse``, which ``sqlglot.parse``,
``parse_one`` and every builder that takes a string go through. The only other parses
allowed are sqlglot's own ``Select.join(join_type=...)`` reading its join kind from the
fixed text ``FROM _ LEFT JOIN _`` (its subquery unnesting calls it): text that is not
the query's. The compiled results are the ones compiled from text round trips before
(tests/fixtures/parse_once/*.txt: explain at P = 4, the output columns and the delete
check, written by the compiler before this one, which parsed text derived from the file
23 times for TPC-H Q21, 16 for Q15, 17 for the EXISTS / NOT EXISTS / IN query, 12 for
the WITH and CREATE VIEW one, 3 for a plain join or aggregate).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlglot
from golden import assert_matches_golden
from sqlglot import exp
from sqlglot.parser import Parser

from connectors import tpch
from core.errors import QueryError
from dataflow.api import compile_query
from plans.expr import SqlType
from plans.outerjoin import KeyedView
from plans.sqlcheck import check_supported
from plans.sqlparse import ddl_type, parse_file, view_relation
from plans.threshold import ThresholdFilter
from plans.views import split_views

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CASES = sorted((FIXTURES / "parse_once").glob("*.sql"))
EXPLAIN = sorted((FIXTURES / "explain").glob("*.sql"))
STILL_PARSED: dict[str, list[str]] = {}
"""Text parsed after the file, per case, still: none (an outer join's ON condition
over one side was, until the plan compiled it: ``JoinSide.condition``)"""
JOIN_KIND = re.compile(r"FROM _ (\w+ )*JOIN _")
"""sqlglot's Select.join(join_type=...): the join kind read from a fixed text"""


def _count_parses(mp: pytest.MonkeyPatch, keep: Callable[[str], bool] = bool
                  ) -> list[str]:
    """The text of every parse from here on that ``keep`` keeps."""
    seen: list[str] = []
    parse = Parser.parse

    def counted(self: Parser, raw_tokens: list, sql: str = "") -> list:
        if keep(sql):
            seen.append(sql)
        return parse(self, raw_tokens, sql)

    mp.setattr(Parser, "parse", counted)
    return seen


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every parse from here on (sqlglot's own join-kind text left out)."""
    # (sqlglot's dialect parses its own templates once, on first use)
    compile_query("CREATE TABLE R(a INT); SELECT a FROM R").explain()
    return _count_parses(monkeypatch, lambda sql: not JOIN_KIND.fullmatch(sql))


def _text(sql_file: Path) -> str:
    """The query file (``tpch_qNN.sql`` holds the query only: the TPC-H tables go
    first)."""
    tpch_nr = re.fullmatch(r"tpch_q(\d+)", sql_file.stem)
    text = sql_file.read_text()
    return tpch.query_file_text(int(tpch_nr.group(1)), text) if tpch_nr else text


def _compiled(sql_file: Path) -> str:
    q = compile_query(_text(sql_file), source_name=sql_file.name)
    return (q.explain(parallelism=4) + "\n--\n" + str(q.output_columns) + "\n"
            + q.delete_check(2))


@pytest.mark.parametrize("sql_file", CASES, ids=[c.stem for c in CASES])
def test_a_compile_parses_the_file_once(sql_file: Path, parses: list[str]) -> None:
    text = _compiled(sql_file)
    assert parses == [_text(sql_file), *STILL_PARSED.get(sql_file.stem, [])]
    assert_matches_golden(text, sql_file.with_suffix(".txt"))


@pytest.mark.parametrize("sql_file", EXPLAIN, ids=[c.stem for c in EXPLAIN])
def test_the_golden_explain_queries_are_parsed_once(sql_file: Path,
                                                    parses: list[str]) -> None:
    compile_query(sql_file.read_text(), source_name=sql_file.name).explain(parallelism=4)
    assert parses == [sql_file.read_text()]


def test_the_views_of_a_split_are_trees_of_the_one_parse(parses: list[str]) -> None:
    text = _text(FIXTURES / "parse_once" / "tpch_q21.sql")
    parsed = parse_file(text, "q21.sql")
    check_supported(parsed.select, parsed.text, parsed.source)
    before = parsed.select.sql("duckdb")
    split = split_views(parsed)
    assert split is not None and split.file is parsed
    assert all(isinstance(v, (exp.Select, KeyedView, ThresholdFilter))
               for _, v in split.views)
    assert isinstance(split.query, exp.Select)
    assert parsed.select.sql("duckdb") == before  # (the split works on a copy)
    assert parses == [text]


def test_a_view_s_error_quotes_the_user_s_text() -> None:
    """An error found compiling a view points into the file, not into SQL text the
    split wrote (which is none)."""
    sql = ("CREATE TABLE R(a INT, b INT);\nCREATE TABLE S(c VARCHAR, d INT);\n"
           "SELECT a FROM R\nWHERE b > (SELECT SUM(c) FROM S)\n")
    with pytest.raises(QueryError) as err:
        compile_query(sql, source_name="q.sql")
    assert str(err.value).splitlines()[1:] == [
        "  line 4, column 19: expression: SUM over TEXT: SUM needs a number",
        "    WHERE b > (SELECT SUM(c) FROM S)",
        "                      ^",
    ]


def test_a_view_named_as_a_table_is_refused() -> None:
    with pytest.raises(QueryError, match="q.sql: the view w has the name of a table"):
        compile_query("CREATE TABLE R(a INT); CREATE TABLE w(a INT);\nWITH w AS (SELECT a, "
                      "COUNT(*) AS n FROM R GROUP BY a) SELECT w.a, w.n FROM w",
                      source_name="q.sql")


def test_a_create_view_that_merges_into_the_query() -> None:
    """A CREATE VIEW without aggregates is inlined like the WITH it is (the file was
    parsed again without its views, and the CREATE VIEW refused)."""
    tables = "CREATE TABLE R(a INT, b INT);\n"
    view = compile_query(tables + "CREATE VIEW v AS SELECT a FROM R WHERE b > 1;\n"
                         "SELECT a FROM v")
    with_ = compile_query(tables + "WITH v AS (SELECT a FROM R WHERE b > 1) SELECT a FROM v")
    assert view.explain() == with_.explain()


def test_the_counter_sees_a_parse() -> None:
    """(The wrapped method is the one sqlglot's entry points reach.)"""
    with pytest.MonkeyPatch.context() as mp:
        seen = _count_parses(mp)
        sqlglot.parse_one("SELECT 1", read="duckdb")
        sqlglot.parse("SELECT 2", read="duckdb")
    assert seen[-2:] == ["SELECT 1", "SELECT 2"]  # (after sqlglot's own templates, on
    # its first use of the dialect)


@pytest.mark.parametrize("t", [
    SqlType("INT", 0, w) for w in (0, 8, 16, 32, 64, 128, -64)] + [
    SqlType("DECIMAL", 2, 15), SqlType("DECIMAL", 4, 38), SqlType("DECIMAL", 0, 0),
    *(SqlType(n) for n in ("FLOAT", "TEXT", "BOOL", "DATE", "TIMESTAMP", "NULL",
                           "INTERVAL", "KEY"))], ids=repr)
def test_a_view_s_table_is_the_one_its_create_table_declared(t: SqlType) -> None:
    """A view's output types make its table as the CREATE TABLE the split wrote for
    it did (``CREATE TABLE "v" ("c" <type>)``), without writing or parsing it."""
    ddl = ddl_type(t)
    declared = parse_file(f'CREATE TABLE "v" ("c" {ddl}); SELECT c FROM v', "t").schema
    assert view_relation("v", [("c", ddl)]) == declared.relations["v"]
