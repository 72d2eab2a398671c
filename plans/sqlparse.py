"""Parsing a query file (docs/semantics.md, the SQL contract): the one sqlglot parse of
its text into a :class:`ParsedQuery` (the user's text, the tables, the SELECT tree with
each ``CREATE VIEW`` as a ``WITH``), the tables' relations, the normalization of a
SELECT before it is built (:func:`normalize`), and the type rules the builder shares.
Errors name the construct and its line/column in the user's text.

Example:
    >>> q = parse_file("CREATE TABLE R(a INT, b INT); SELECT a FROM R WHERE b > 1", "q.sql")
    >>> sorted(q.schema.relations), q.select.sql()
    (['R'], 'SELECT a FROM R WHERE b > 1')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, TokenError

from core.errors import QueryError
from core.schema import INT_BITS, INT_NAMES, SQL_TYPE_NAMES, Column, Relation, Schema
from plans import sqlrewrite
from plans.cq import (
    Aggregate,
    CompareOp,
)
from plans.expr import SqlType
from plans.sqlcheck import describe
from plans.sqlerrors import (
    at,
    node_offset,
    optimize_error,
    statement_start,
    syntax_error,
    token_error,
)
from plans.subqueries import rewrite_subqueries

COMPARISONS: dict[type[exp.Expr], CompareOp] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
FLIPPED: dict[CompareOp, CompareOp] = {
    "=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<=",
}


def _position(node: exp.Expr) -> str:
    """'line L, column C' of the first identifier inside ``node`` (sqlglot keeps
    token positions on identifiers only)."""
    for ident in [node, *node.find_all(exp.Identifier, exp.Literal)]:
        meta = getattr(ident, "meta", None) or {}
        if "line" in meta:
            return f"line {meta['line']}, column {meta['col']}"
    return "position unknown"


class Reject:
    """Builds the compile-time errors: what construct, where (line, column and the
    user's line with a caret), what is supported."""

    def __init__(self, source: str, sql: str = "") -> None:
        self.source = source
        self.sql = sql

    def __call__(self, node: exp.Expr | None, what: str, supported: str,
                 offset: int | None = None) -> QueryError:
        return self.say(node, f"unsupported {what}", supported, offset)

    def say(self, node: exp.Expr | None, what: str, why: str,
            offset: int | None = None) -> QueryError:
        """``what: why`` at ``offset`` (default: where ``node`` starts)."""
        if offset is None and self.sql:
            offset = node_offset(node)
        if offset is not None:
            return QueryError(at(self.sql, self.source, offset, f"{what}: {why}"))
        where = _position(node) if node is not None else "position unknown"
        text = node.sql() if node is not None else ""
        shown = f" `{text}`" if text else ""
        return QueryError(f"{self.source}: {where}: {what}{shown}; {why}")


@dataclass
class UnionFind:
    parent: dict[str, str] = field(default_factory=dict)

    def add(self, x: str) -> None:
        self.parent.setdefault(x, x)

    def find(self, x: str) -> str:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def parse_statements(sql: str, source: str) -> list[exp.Expr]:
    """The file's statements; a syntax error is one place in the user's text."""
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except TokenError as err:
        raise token_error(err, sql, source) from None
    except ParseError as err:
        raise syntax_error(err, sql, source) from None
    # (STDDEV_SAMP over SUM and COUNT, a LIMIT on one row dropped: plans/sqlrewrite.py)
    return [sqlrewrite.rewrite(s) for s in statements]


@dataclass(frozen=True)
class ParsedQuery:
    """One SELECT tree to compile, with the tables it may read. A query file is parsed
    once (:func:`parse_file`); the views it is split into
    (:mod:`plans.views`) are trees of that parse, each with the tables before it
    (``schema``). ``text`` is the user's file: the nodes' positions point into it, and
    errors quote it; ``source`` names it (a view's: ``q.sql (view _u_0)``)."""

    text: str
    source: str
    schema: Schema
    select: exp.Select


def parse_file(sql: str, source: str) -> ParsedQuery:
    """Parse a query file, once: its CREATE TABLEs (-> Schema) and its one SELECT, each
    CREATE VIEW (in file order) a WITH of that SELECT (every node keeps its place in
    the file: errors point into the user's text)."""
    reject = Reject(source, sql)
    statements = parse_statements(sql, source)
    relations: dict[str, Relation] = {}
    selects: list[exp.Select] = []
    views: list[exp.Create] = []
    for stmt in statements:
        if isinstance(stmt, exp.Create) and str(stmt.args.get("kind", "")).upper() == "TABLE":
            rel = _relation_of(stmt, reject)
            if rel.name.lower() in {r.lower() for r in relations}:
                raise reject(
                    stmt.this, "second CREATE TABLE", f"table {rel.name} is declared twice"
                )
            relations[rel.name] = rel
        elif isinstance(stmt, exp.Select):
            if selects:
                raise reject.say(stmt, "a second SELECT", "a query file holds one query "
                                 "(name the others with CREATE VIEW)",
                                 statement_start(sql, stmt))
            selects.append(stmt)
        elif isinstance(stmt, exp.Create) and \
                str(stmt.args.get("kind", "")).upper() == "VIEW":
            views.append(stmt)
        elif isinstance(stmt, exp.SetOperation):
            if selects:
                raise reject.say(stmt, "a second SELECT", "a query file holds one query "
                                 "(name the others with CREATE VIEW)",
                                 statement_start(sql, stmt))
            selects.append(_select_over(stmt))
        else:
            start = statement_start(sql, stmt)
            word = re.match(r"\w+", sql[start:]) if start is not None else None
            what = f"{word.group(0).upper()} statement" if word else "statement"
            raise reject(stmt, what, "a query file holds CREATE TABLE statements, "
                         "CREATE VIEWs and one SELECT", start)
    if len(selects) != 1:
        msg = (
            f"{source}: expected exactly one SELECT statement after the CREATE TABLEs, "
            f"found {len(selects)}"
        )
        raise QueryError(msg)
    if not relations:
        msg = f"{source}: no CREATE TABLE statement; declare every relation the SELECT reads"
        raise QueryError(msg)
    select = selects[0]
    # CREATE VIEW v [(cols)] AS SELECT ...: as WITH v AS (...) on the query.
    for v in views:  # (in file order: a view may read the views before it)
        target = v.this
        name = target.this if isinstance(target, exp.Schema) else target
        alias = exp.TableAlias(this=exp.to_identifier(name.name), columns=[
            exp.to_identifier(c.name) for c in target.expressions]
            if isinstance(target, exp.Schema) else None)
        select = select.with_(alias, as_=v.expression, copy=False)
    return ParsedQuery(sql, source, Schema(relations), select)


def _select_over(setop: exp.SetOperation) -> exp.Select:
    """A query file's top-level set operation as the one SELECT of a file: ``SELECT *
    FROM (<it>) AS _set`` with its WITH, ORDER BY, LIMIT and OFFSET (what SQL applies
    to the set operation's result) on that SELECT (:mod:`plans.setops` lifts it)."""
    outer = exp.select("*").from_(exp.Subquery(this=setop, alias=exp.TableAlias(
        this=exp.to_identifier("_set"))))
    for arg in ("with_", "order", "limit", "offset"):
        value = setop.args.get(arg)
        if value is not None:
            setop.set(arg, None)
            outer.set(arg, value)
    return outer


def view_relation(name: str, columns: list[tuple[str, str]]) -> Relation:
    """The relation of a view named ``name`` with ``columns`` (name, the SQL type
    :func:`ddl_type` writes): what ``CREATE TABLE "name" ("c" TYPE, ...)`` declares."""
    cols = []
    for col, ddl in columns:
        m = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", ddl)
        if m is not None:
            cols.append(Column(col, "DECIMAL", int(m.group(2)), int(m.group(1))))
            continue
        mapped = SQL_TYPE_NAMES[ddl]
        width = INT_BITS[ddl] if mapped == "INT" else 0
        cols.append(Column(col, mapped, 0, width))
    return Relation(name, tuple(cols), ())


def _relation_of(stmt: exp.Create, reject: Reject) -> Relation:
    schema_node = stmt.this
    if not isinstance(schema_node, exp.Schema):
        raise reject(stmt, "CREATE TABLE form", "write CREATE TABLE name(col TYPE, ...)")
    name = schema_node.this.name
    cols: list[Column] = []
    key: list[exp.Expr] = []  # PRIMARY KEY columns (identifiers or column definitions)
    for coldef in schema_node.expressions:
        pk = coldef if isinstance(coldef, exp.PrimaryKey) else coldef.find(exp.PrimaryKey) \
            if isinstance(coldef, exp.Constraint) else None
        if pk is not None and not key:
            key.extend(pk.expressions)
            continue
        if not isinstance(coldef, exp.ColumnDef):
            raise reject(coldef, "table element", "only column definitions and one "
                         "PRIMARY KEY (col, ...) are allowed")
        if coldef.find(exp.PrimaryKeyColumnConstraint) is not None and not key:
            key.append(coldef)
        kind = coldef.args.get("kind")
        type_name = kind.this.name if kind is not None else "TEXT"
        if kind is not None and kind.this == exp.DataType.Type.USERDEFINED:
            type_name = str(kind.args.get("kind") or type_name)
        mapped = SQL_TYPE_NAMES.get(type_name.upper())
        if mapped is None:
            known = ("INT, BIGINT, DOUBLE, REAL, DECIMAL(p,s), NUMERIC, VARCHAR, CHAR, TEXT, "
                     "DATE, TIMESTAMP, BOOLEAN")
            raise reject(coldef, f"column type {type_name}", f"supported types: {known}")
        scale = width = 0
        if mapped == "DECIMAL":
            assert kind is not None
            params = [p.this.name for p in kind.expressions
                      if isinstance(p, exp.DataTypeParam) and isinstance(p.this, exp.Literal)]
            # (DuckDB's DECIMAL without parameters is DECIMAL(18, 3))
            width = int(params[0]) if params else 18
            scale = int(params[1]) if len(params) > 1 else (0 if params else 3)
            if not 1 <= width <= 38 or scale > width:
                raise reject(coldef, f"DECIMAL({width},{scale})", "DECIMAL(p,s) needs "
                             "1 <= p <= 38 and s <= p (DuckDB's DECIMAL)")
        elif mapped == "INT":
            width = INT_BITS.get(type_name.upper(), 64)
        cols.append(Column(coldef.name, mapped, scale, width))
    names = [c.name.lower() for c in cols]
    for k in key:
        if k.name.lower() not in names:
            raise reject(k, f"PRIMARY KEY column {k.name}", f"table {name} has no such column")
    return Relation(name, tuple(cols), tuple(names.index(k.name.lower()) for k in key))




def offset_of(node: exp.Expr) -> int | None:
    starts = [n.meta["start"] for n in node.walk() if n.meta and "start" in n.meta]
    return min(starts) if starts else None


def normalize(select: exp.Select, schema: Schema, sql: str, source: str,
               views: bool = False) -> exp.Select:
    """WITH, derived tables, NATURAL JOIN and JOIN ... USING through sqlglot's optimizer
    (qualify: USING/NATURAL become ON equalities; merge_subqueries: mergeable derived
    tables and CTEs inlined). What stays nested (a derived table that aggregates) is
    refused: views over views are the next step."""
    needs = select.args.get("with_") is not None or any(
        True for _ in select.find_all(exp.Subquery, exp.Exists)) or any(
        j.args.get("using") or (j.args.get("method") or "").upper() == "NATURAL"
        or (views and j.args.get("side"))
        for j in select.args.get("joins") or [])
    if not needs:
        return select
    from sqlglot.optimizer.eliminate_ctes import eliminate_ctes
    from sqlglot.optimizer.eliminate_subqueries import eliminate_subqueries
    from sqlglot.optimizer.merge_subqueries import merge_subqueries
    from sqlglot.optimizer.qualify import qualify
    from sqlglot.optimizer.unnest_subqueries import unnest_subqueries

    # Unnamed SELECT items keep the names ivmflow gives them (qualify would say _col_0).
    select = select.copy()
    for i, item in enumerate(select.expressions):
        if not isinstance(item, (exp.Alias, exp.Column, exp.Star)):
            select.expressions[i] = exp.alias_(item, item.sql(), quoted=True)
    mapping: dict[str, object] = {rel.name: {c.name: "DOUBLE" if c.type == "FLOAT" else c.type
                          if c.type != "BOOL" else "BOOLEAN" for c in rel.columns}
               for rel in schema.relations.values()}
    try:
        out = qualify(select, schema=mapping, dialect="duckdb", quote_identifiers=False,
                      identify=False, validate_qualify_columns=True)
        out = rewrite_subqueries(out)
        out = _inner_joins(unnest_subqueries(out))  # type: ignore[assignment]
        out = merge_subqueries(eliminate_subqueries(out))
        out = eliminate_ctes(out)
    except (OptimizeError, ValueError) as err:
        raise optimize_error(err, select, sql, source) from None
    assert isinstance(out, exp.Select)
    nested = (exp.Subquery, exp.Exists) if views else (exp.Subquery, exp.With, exp.CTE,
                                                        exp.Exists)
    left = [n for n in out.walk() if isinstance(n, nested)]
    if views and out.args.get("with_") is not None:
        left += [n for cte in out.args["with_"].expressions for n in cte.this.walk()
                 if isinstance(n, (exp.Subquery, exp.Exists))]
    if left:
        findings = [(offset_of(n), "derived table or WITH with GROUP BY, DISTINCT or an "
                     "aggregate", "views over views are not supported yet") for n in left[:1]]
        raise QueryError(describe(findings, sql, source))
    return out


def _inner_joins(select: exp.Expr) -> exp.Expr:
    """``LEFT JOIN x`` where a WHERE conjunct rejects x's NULLs is an inner join (what
    sqlglot's unnesting makes of EXISTS, IN and correlated scalar subqueries: a grouped
    derived table LEFT JOINed, then ``NOT x.k IS NULL`` or a comparison with x's
    column). A LEFT JOIN that stays is an outer join, refused by the builder."""
    for sel in select.find_all(exp.Select):
        where = sel.args.get("where")
        conjuncts = list(where.this.flatten()) if where is not None and isinstance(
            where.this, exp.And) else ([where.this] if where is not None else [])
        for join in sel.args.get("joins") or []:
            if (join.args.get("side") or "").upper() != "LEFT":
                continue
            alias = join.alias_or_name
            if any(_rejects_nulls(c, alias) for c in conjuncts):
                join.set("side", None)
    return select


def _rejects_nulls(cond: exp.Expr, alias: str) -> bool:
    """Whether ``cond`` is never TRUE when ``alias``'s columns are NULL (a strict
    predicate over one of them, or IS NOT NULL of one)."""
    if isinstance(cond, exp.Not) and isinstance(cond.this, exp.Is) and \
            isinstance(cond.this.expression, exp.Null):
        col = cond.this.this
        return isinstance(col, exp.Column) and col.table == alias
    strict = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.Between, exp.Like,
              exp.ILike, exp.In)
    if not isinstance(cond, strict):
        return False
    if any(isinstance(n, (exp.Coalesce, exp.Case, exp.If, exp.Is, exp.Nullif, exp.Or,
                          exp.Not)) for n in cond.walk()):
        return False
    return any(c.table == alias for c in cond.find_all(exp.Column))


def join_cast(left: str, right: str) -> str | None:
    """Which side of ``left = right`` (column types) DuckDB casts to the other's type:
    None (Python's equality and hash of the values agree with DuckDB's comparison),
    "left", "right", or "refuse" (no cast between them)."""
    if left == right:
        return None
    pair = {left, right}
    if pair <= {"INT", "DECIMAL", "BOOL"}:
        return None
    if "TEXT" in pair:
        return "left" if left == "TEXT" else "right"
    if pair == {"DATE", "TIMESTAMP"}:
        return "left" if left == "DATE" else "right"
    if "FLOAT" in pair and pair <= {"INT", "DECIMAL", "FLOAT"}:
        return "left" if right == "FLOAT" else "right"
    if pair == {"FLOAT", "BOOL"}:
        return None
    return "refuse"


AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)
MULTISET_FUNCS = ("min", "max", "count_distinct", "sum_distinct", "avg_distinct")


def aggregate_type(agg: Aggregate) -> SqlType:
    if agg.func in ("count", "count_star"):
        return SqlType("INT", 0, 64)  # (BIGINT)
    if agg.func == "avg":
        return SqlType("FLOAT")
    return sum_type(SqlType(agg.result_type, agg.scale))


def sum_type(t: SqlType) -> SqlType:
    """The type of SUM over values of ``t`` (DuckDB's: an integer SUM is a HUGEINT, a
    DECIMAL SUM a DECIMAL(38, s))."""
    if t.name == "INT":
        return SqlType("INT", 0, 128)
    if t.name == "DECIMAL":
        return SqlType("DECIMAL", t.scale, 38)
    return t


def ddl_type(t: SqlType) -> str:
    """The SQL type a CREATE TABLE declares for values of ``t`` (its width kept: an
    INTEGER stays an INTEGER, a DECIMAL(15,2) a DECIMAL(15,2))."""
    if t.name == "DECIMAL":
        return f"DECIMAL({t.digits},{t.scale})"
    if t.name == "INT":
        return INT_NAMES[t.bits]
    return {"FLOAT": "DOUBLE", "TEXT": "VARCHAR", "BOOL": "BOOLEAN",
            "NULL": "BIGINT", "INTERVAL": "VARCHAR", "KEY": "IVMFLOW_KEY"}.get(t.name, t.name)


def needs_values(node: exp.Expr) -> bool:
    """MIN, MAX and DISTINCT aggregates read their argument's values per group (the
    reaggregation stage's multisets), not a ring payload."""
    return isinstance(node, (exp.Min, exp.Max)) or isinstance(node.this, exp.Distinct)
