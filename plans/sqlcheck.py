"""The whole query checked against what the compiler translates, before anything else
reads it: every other construct is refused, all of them at once, each with its
position and the user's own line (not sqlglot's re-rendering). A clause is never
accepted and ignored.

Example:
    >>> import sqlglot
    >>> sql = "SELECT a FROM R USING SAMPLE 50%\\nLIMIT 3"
    >>> try:
    ...     check_supported(sqlglot.parse_one(sql, read="duckdb"), sql, "q.sql")
    ... except QueryError as err:
    ...     print(err)
    q.sql: 2 unsupported constructs (ivmflow refuses what it cannot maintain exactly):
      line 1, column 17: USING SAMPLE: a sample is not a maintained result; drop it
        SELECT a FROM R USING SAMPLE 50%
                        ^
      line 2, column 1: LIMIT: top-k needs an ORDER BY (else which rows come first is undefined)
        LIMIT 3
        ^
"""

from __future__ import annotations

import re

from sqlglot import exp

from core.errors import QueryError
from plans.sqlerrors import SET_OPERATIONS, caret_lines, set_operation

_EXPRESSIONS: tuple[type[exp.Expr], ...] = (
    exp.Column, exp.Identifier, exp.Star, exp.Literal, exp.Boolean, exp.Null, exp.Paren,
    exp.Alias, exp.Neg, exp.Not, exp.And, exp.Or, exp.EQ, exp.NEQ, exp.LT, exp.LTE,
    exp.GT, exp.GTE, exp.Is, exp.In, exp.Between, exp.Like, exp.ILike, exp.Add, exp.Sub,
    exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.DPipe, exp.Case, exp.If, exp.Coalesce,
    exp.Nullif, exp.Cast, exp.DataType, exp.DataTypeParam, exp.Extract, exp.Interval,
    exp.Substring, exp.Upper, exp.Lower, exp.Length, exp.Trim, exp.Abs, exp.Round,
    exp.Concat, exp.Sqrt, exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Var,
)
_CLAUSES: tuple[type[exp.Expr], ...] = (
    exp.Select, exp.From, exp.Join, exp.Table, exp.TableAlias, exp.Where, exp.Group,
    exp.Having, exp.Order, exp.Ordered, exp.Distinct, exp.With, exp.CTE, exp.Subquery,
)
_SELECT_ARGS = {"expressions", "from_", "joins", "where", "group", "having", "order",
                "distinct", "with_", "kind", "limit", "offset"}

_WHY: dict[str, str] = {
    "limit": "top-k (ORDER BY ... LIMIT) is not supported yet; drop LIMIT",
    "offset": "OFFSET (top-k) is not supported yet; drop it",
    "sample": "a sample is not a maintained result; drop it",
    "qualify": "QUALIFY (window functions) is not supported",
    "windows": "window functions are not supported",
    "laterals": "LATERAL is not supported",
    "into": "SELECT INTO is not supported",
}
_NAMES: dict[str, str] = {"sample": "USING SAMPLE", "offset": "OFFSET", "limit": "LIMIT"}



def _span(node: exp.Expr) -> tuple[int, int] | None:
    """(start offset, line) of the leftmost token under ``node`` that sqlglot placed."""
    best: tuple[int, int] | None = None
    for n in node.walk():
        meta = getattr(n, "_meta", None) or {}
        if "start" in meta and (best is None or meta["start"] < best[0]):
            best = (meta["start"], meta["line"])
    return best


class _Finding:
    def __init__(self, node: exp.Expr, what: str, why: str, offset: int | None = None):
        self.node, self.what, self.why, self.offset = node, what, why, offset


def describe(findings: list[tuple[int | None, str, str]], sql: str, source: str) -> str:
    """The error text: one entry per construct, with line, column and the source line."""
    n = len(findings)
    out = [f"{source}: {n} unsupported construct{'s' if n != 1 else ''} "
           "(ivmflow refuses what it cannot maintain exactly):"]
    for offset, what, why in sorted(findings, key=lambda f: (f[0] is None, f[0] or 0)):
        if offset is None:
            out.append(f"  {what}: {why}")
            continue
        line_no, col, shown = caret_lines(sql, offset)
        out.append(f"  line {line_no}, column {col}: {what}: {why}")
        out.append(shown)
    return "\n".join(out)


def _keyword_offset(sql: str, node: exp.Expr, keyword: str) -> int | None:
    """Where ``keyword`` (as the user wrote it, any case) starts before ``node``."""
    span = _span(node)
    upper = sql.upper()
    if span is None:
        pos = upper.find(keyword)
        return pos if pos >= 0 else None
    pos = upper.rfind(keyword.split()[0], 0, span[0] + 1)
    return pos if pos >= 0 else span[0]


class _Checker:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.found: list[tuple[int | None, str, str]] = []
        self.skip: set[int] = set()

    def refuse(self, node: exp.Expr, what: str, why: str, keyword: str | None = None) -> None:
        offset = _keyword_offset(self.sql, node, keyword) if keyword else None
        if offset is None:
            span = _span(node)
            offset = span[0] if span else None
            if offset is None:
                offset = _keyword_offset(self.sql, node, what.split()[0].upper())
        self.found.append((offset, what, why))

    def visit(self, node: exp.Expr, parent: exp.Expr | None = None) -> None:
        if not self.allowed(node, parent):
            return
        for child in node.iter_expressions():
            if id(child) not in self.skip:
                self.visit(child, node)

    def allowed(self, node: exp.Expr, parent: exp.Expr | None) -> bool:  # noqa: C901
        if isinstance(node, exp.SetOperation):
            name, offset = set_operation(node, self.sql)
            self.found.append((offset, name, SET_OPERATIONS))
            return False
        if isinstance(node, exp.Select):
            if not node.expressions:
                self.refuse(node, "SELECT without a select list", "name what to select",
                            "SELECT")
            for key, value in node.args.items():
                if key in _SELECT_ARGS or not value:
                    continue
                name = _NAMES.get(key, key.upper())
                why = _WHY.get(key, "not supported")
                if isinstance(value, exp.Expr):
                    self.skip.add(id(value))
                self.refuse(value if isinstance(value, exp.Expr) else node, name, why,
                            name if key in _NAMES else None)
            for key in ("limit", "offset"):
                clause = node.args.get(key)
                if clause is None:
                    continue
                self.skip.add(id(clause))
                value = clause.args.get("expression")
                if not (isinstance(value, exp.Literal) and not value.is_string
                        and value.name.isdigit()):
                    self.refuse(clause, key.upper(), "write a whole number of rows",
                                key.upper())
                elif node.args.get("order") is None:
                    self.refuse(clause, key.upper(), "top-k needs an ORDER BY (else which "
                                "rows come first is undefined)", key.upper())
            distinct = node.args.get("distinct")
            if distinct is not None and distinct.args.get("on") is not None:
                self.refuse(distinct, "DISTINCT ON", "use plain DISTINCT", "DISTINCT")
            return True
        if isinstance(node, exp.Join):
            side = (node.args.get("side") or "").upper()
            kind = (node.args.get("kind") or "").upper()
            if side and kind not in ("", "OUTER"):
                self.refuse(node, f"{side} {kind} JOIN", "only inner and outer joins are "
                            "supported", kind)
                return False
            if kind not in ("", "INNER", "CROSS", "OUTER"):
                self.refuse(node, f"{kind} JOIN", "only inner and outer joins are supported "
                            "(write NOT EXISTS / EXISTS for anti- and semi-joins)", kind)
                return False
            method = (node.args.get("method") or "").upper()
            if method not in ("", "NATURAL"):
                self.refuse(node, f"{method} JOIN", "only inner and outer joins are supported",
                            method)
                return False
            if isinstance(node.this, exp.Subquery) and node.args.get("using"):
                self.refuse(node, "JOIN ... USING", "write JOIN ... ON", "USING")
            return True
        if isinstance(node, exp.Table):
            for key, value in node.args.items():
                if key in ("this", "alias") or not value:
                    continue
                if key in ("db", "catalog"):
                    self.refuse(node, "qualified table name",
                                "name the table as its CREATE TABLE does")
                elif key == "sample":
                    self.refuse(value, "TABLESAMPLE", _WHY["sample"], "TABLESAMPLE")
                else:
                    self.refuse(node, f"table {key.upper()}", "not supported")
            alias = node.args.get("alias")
            if alias is not None and alias.args.get("columns"):
                self.refuse(alias, "column aliases of a table", "alias the table only")
            return True
        if isinstance(node, exp.With):
            if node.args.get("recursive"):
                self.refuse(node, "WITH RECURSIVE", "recursive queries are not supported",
                            "RECURSIVE")
                return False
            return True
        if isinstance(node, exp.Subquery):
            # (EXISTS, IN and scalar subqueries are unnested into views over views;
            # what cannot be is refused there, with its position)
            return True
        if isinstance(node, exp.Exists):
            return True
        if isinstance(node, exp.In) and node.args.get("unnest") is not None:
            self.refuse(node, "IN UNNEST", "not supported")
            return False
        if isinstance(node, (exp.Min, exp.Max)):
            return True
        if isinstance(node, (exp.Count, exp.Sum, exp.Avg)):
            inner = node.this
            if isinstance(inner, exp.Distinct):
                if len(inner.expressions) != 1:
                    name = type(node).__name__.upper()
                    self.refuse(node, f"{name}(DISTINCT a, b)", "DISTINCT over one "
                                "expression only", name)
                    return False
                self.skip.add(id(inner))
                self.visit(inner.expressions[0], inner)
            return True
        if isinstance(node, exp.Window):
            self.refuse(node, "window function", "window functions are not supported")
            return False
        if isinstance(node, exp.Distinct):
            if not isinstance(parent, exp.Select):
                self.refuse(node, "DISTINCT", "DISTINCT is supported on SELECT only")
                return False
            return True
        if isinstance(node, (exp.Like, exp.ILike)) and node.args.get("escape") is not None:
            self.refuse(node, "LIKE ... ESCAPE", "write the pattern without ESCAPE")
            return False
        if isinstance(node, exp.Var) and not isinstance(parent, (exp.Extract, exp.Interval)):
            self.refuse(node, f"name {node.name}", "not a column, function or keyword known here")
            return False
        if isinstance(node, _EXPRESSIONS + _CLAUSES):
            return True
        if isinstance(node, exp.Func):
            what = f"function {self.function_name(node)}"
        else:
            what = type(node).__name__.upper()
        self.refuse(node, what, "not supported (see docs/semantics.md for the SQL ivmflow "
                                "maintains)")
        return False


    def function_name(self, node: exp.Func) -> str:
        """The function's name as the user wrote it (sqlglot renames some: GROUP_CONCAT
        for STRING_AGG), found before its opening parenthesis."""
        span = _span(node)
        if isinstance(node, exp.Anonymous) or span is None:
            return f"{node.name or type(node).__name__.upper()}()"
        here = re.match(r"(\w+)\s*\(", self.sql[span[0]:])
        if here:
            return f"{here.group(1)}()"
        paren = self.sql.rfind("(", 0, span[0])
        match = re.search(r"(\w+)\s*$", self.sql[:paren]) if paren >= 0 else None
        return f"{match.group(1)}()" if match else f"{type(node).__name__.upper()}()"


def check_supported(select: exp.Expr, sql: str, source: str) -> None:
    """Raise one :class:`QueryError` listing every construct of ``select`` the compiler
    does not translate (none: return)."""
    checker = _Checker(sql)
    checker.visit(select)
    if checker.found:
        raise QueryError(describe(checker.found, sql, source))
