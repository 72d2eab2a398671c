"""SQL errors in plain words, through the command line: one line naming the file, the
line and column and what is wrong in the user's terms, then the user's own line with a
caret under the place; exit code 2; no traceback, parser class name or token dump.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dataflow.cli import main

TABLES = "CREATE TABLE R(a INT, b INT);\nCREATE TABLE S(b INT, c INT);\n"


def _refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str], sql: str,
             command: str = "run") -> str:
    """The CLI's stderr for a query file holding ``sql``; asserts exit code 2 and that
    nothing of the parser's insides shows."""
    query = tmp_path / "q.sql"
    query.write_text(sql)
    updates = tmp_path / "u.csv"
    updates.write_text("+,R,1,2\n")
    if command == "run":
        argv = ["run", str(query), "--updates", str(updates), "--deltas",
                str(tmp_path / "out.csv"), "--quiet"]
    else:
        argv = ["explain", str(query)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    for inside in ("sqlglot", "<class", "Traceback", "<Token", "TokenType", "Required keyword"):
        assert inside not in err, err
    assert not (tmp_path / "out.csv").exists()  # (refused before any input is read)
    return err


def _expect(tmp_path: Path, first: str, line: str, column: int) -> str:
    """The whole message: ``ivmflow: error: FILE: line L, column C: ...``, the user's
    line, a caret under column C."""
    return (f"ivmflow: error: {tmp_path / 'q.sql'}: {first}\n"
            f"    {line}\n"
            f"    {' ' * (column - 1)}^\n")


@pytest.mark.parametrize(("select", "message", "column"), [
    # an unterminated string literal (sqlglot's tokenizer: a TokenError and a traceback)
    ("SELECT a FROM R WHERE b = 'x;", "SQL syntax error: unterminated string literal: "
     "the quote ' that starts here is never closed", 27),
    ('SELECT "a FROM R;', "SQL syntax error: unterminated quoted name: the quote \" that "
     "starts here is never closed", 8),
    ("SELECT a FROM R /* the end", "SQL syntax error: unterminated comment: the /* that "
     "starts here has no */", 17),
    # a missing operand (sqlglot: "Required keyword: 'expression' missing for <class EQ>")
    ("SELECT a FROM R WHERE b = ;", "SQL syntax error: expected an expression after '=', "
     "found the end of the statement", 27),
    ("SELECT a + FROM R;", "SQL syntax error: expected an expression after '+', "
     "found 'FROM'", 12),
    ("SELECT a FROM R WHERE b = 1 AND", "SQL syntax error: expected an expression after "
     "AND, found the end of the file", 32),
    ("SELECT a FROM R WHERE b BETWEEN 1;", "SQL syntax error: expected BETWEEN low AND "
     "high, found the end of the statement", 34),
    ("SELECT a FROM R WHERE (b = 1;", "SQL syntax error: expected ')', found the end of "
     "the statement", 29),
    ("SELECT a FROM R WHERE b = 1);", "SQL syntax error: unexpected ')'", 28),
    ("SELECT a FROM WHERE b = 1;", "SQL syntax error: expected a table name, "
     "found 'WHERE'", 15),
    ("SELECT CASE WHEN a = 1 THEN 2 FROM R;", "SQL syntax error: expected END after CASE, "
     "found 'FROM'", 31),
])
def test_syntax_error_is_one_place_in_the_users_text(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], select: str, message: str,
        column: int) -> None:
    err = _refusal(tmp_path, capsys, TABLES + select)
    assert err == _expect(tmp_path, f"line 3, column {column}: {message}", select, column)


@pytest.mark.parametrize(("select", "message", "column"), [
    ("SELECT a, x FROM R;", "unknown column 'x': no FROM item has such a column", 11),
    ("SELECT R.x FROM R;", "unknown column 'R.x': no FROM item has such a column", 8),
    ("SELECT a FROM R WHERE zz > 1;", "unknown column 'zz': no FROM item has such a "
     "column", 23),
    # (through sqlglot's optimizer: WITH, subqueries, JOIN ... USING)
    ("WITH t AS (SELECT a FROM R) SELECT t.q FROM t;", "unknown column 't.q': t has no "
     "column q", 36),
    ("SELECT a FROM R WHERE EXISTS (SELECT 1 FROM S WHERE S.q = R.a);",
     "unknown column 'S.q': S has no column q", 53),
    ("SELECT R.a FROM R JOIN S USING (b) WHERE nope = 1;", "unknown column 'nope': no FROM "
     "item has such a column", 42),
])
def test_unknown_column_has_a_caret(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    select: str, message: str, column: int) -> None:
    err = _refusal(tmp_path, capsys, TABLES + select)
    assert err == _expect(tmp_path, f"line 3, column {column}: {message}", select, column)


def test_unknown_column_in_a_view_points_into_the_view(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    view = "CREATE VIEW v AS SELECT a, zz FROM R;"
    err = _refusal(tmp_path, capsys, TABLES + view + "\nSELECT a FROM v;\n")
    assert err == _expect(tmp_path, "line 3, column 28: unknown column 'zz': no FROM item "
                          "has such a column", view, 28)


@pytest.mark.parametrize("select", [
    "SELECT a FROM R UNION SELECT b FROM S;",
    "SELECT a FROM R union all SELECT b FROM S;",
    "SELECT a FROM R INTERSECT SELECT b FROM S;",
    "SELECT a FROM R EXCEPT SELECT b FROM S;",
    "(SELECT a FROM R) UNION (SELECT b FROM S) ORDER BY 1;",
])
def test_top_level_set_operations_are_accepted(select: str) -> None:
    """(Refused with their keyword's place until issue 42: tests/test_setops.py checks
    what they compute.)"""
    from dataflow.api import compile_query

    q = compile_query(TABLES + select)
    assert "_so_0" in q.logical.render()


def test_nested_set_operation_is_named_with_its_keyword(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    select = "SELECT a FROM (SELECT a FROM R UNION SELECT b FROM S LIMIT 1) t;"
    err = _refusal(tmp_path, capsys, TABLES + select)
    assert err == (
        f"ivmflow: error: {tmp_path / 'q.sql'}: 1 unsupported construct (ivmflow refuses "
        "what it cannot maintain exactly):\n"
        "  line 3, column 32: UNION: ORDER BY, LIMIT or OFFSET on a set operation inside "
        "the query is not supported: apply them in a SELECT over it\n"
        f"    {select}\n"
        f"    {' ' * 31}^\n")


def test_other_statement_is_named(tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    err = _refusal(tmp_path, capsys, TABLES + "INSERT INTO R VALUES (1, 2);\n")
    assert err == _expect(tmp_path, "line 3, column 1: unsupported INSERT statement: a query "
                          "file holds CREATE TABLE statements, CREATE VIEWs and one SELECT",
                          "INSERT INTO R VALUES (1, 2);", 1)


def test_explain_says_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    select = "SELECT a FROM R WHERE b = 'x;"
    err = _refusal(tmp_path, capsys, TABLES + select, command="explain")
    assert err == _expect(tmp_path, "line 3, column 27: SQL syntax error: unterminated "
                          "string literal: the quote ' that starts here is never closed",
                          select, 27)


def test_caret_lines_up_under_tabs(tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    select = "SELECT\ta,\tx FROM R;"
    err = _refusal(tmp_path, capsys, TABLES + select)
    assert err == (f"ivmflow: error: {tmp_path / 'q.sql'}: line 3, column 11: unknown "
                   "column 'x': no FROM item has such a column\n"
                   f"    {select}\n"
                   "          \t  \t^\n")


def test_select_alias_where_it_is_not_read_is_named_as_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """DuckDB reads a SELECT alias in HAVING; ivmflow does not yet: the refusal says so
    (not "unknown column", which would call the query wrong)."""
    select = "SELECT a AS k, COUNT(*) FROM R GROUP BY a HAVING k > 1;"
    column = select.index(" k >") + 2
    err = _refusal(tmp_path, capsys, TABLES + select)
    assert err == _expect(tmp_path, f"line 3, column {column}: unsupported reference to the "
                          "SELECT alias 'k' here: write the expression it names", select,
                          column)
