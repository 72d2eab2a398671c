"""SQL text -> :class:`plans.cq.ConjunctiveQuery` (docs/semantics.md, the SQL contract).

One file holds ``CREATE TABLE`` statements followed by exactly one
``SELECT [DISTINCT] ... FROM ... WHERE ... [GROUP BY ...]``. Joins are equalities between
columns (comma joins or ``JOIN ... ON``); filters compare one column with constants;
aggregates are ``COUNT(*)``, ``COUNT(col)``, ``SUM(col)``, ``AVG(col)``. Anything else is
rejected here, before any input is read, with the construct and its line/column.

Example:
    >>> cq = parse_query("CREATE TABLE R(a INT, b INT); SELECT a, COUNT(*) FROM R GROUP BY a")
    >>> cq.free_vars, [g.func for g in cq.aggregates]
    (('a',), ['count_star'])
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError, TokenError

from core.errors import QueryError
from core.schema import INT_BITS, INT_NAMES, SQL_TYPE_NAMES, Column, Relation, Schema, Value
from plans.cq import (
    Aggregate,
    Atom,
    CompareOp,
    ConjunctiveQuery,
    DerivedVar,
    Filter,
    FinalAggregate,
    OutputColumn,
    PostMap,
    Predicate,
    Reaggregate,
)
from plans.expr import Code, ExprCompiler, ExprError, SqlType, column_refs
from plans.sqlcheck import check_supported, describe
from plans.sqlerrors import (
    SET_OPERATIONS,
    at,
    node_offset,
    optimize_error,
    set_operation,
    statement_start,
    syntax_error,
    token_error,
)
from plans.subqueries import rewrite_subqueries

_COMPARISONS: dict[type[exp.Expr], CompareOp] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_FLIPPED: dict[CompareOp, CompareOp] = {
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


class _Reject:
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
class _UnionFind:
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
        return [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except TokenError as err:
        raise token_error(err, sql, source) from None
    except ParseError as err:
        raise syntax_error(err, sql, source) from None


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
    reject = _Reject(source, sql)
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
            name, offset = set_operation(stmt, sql)
            raise reject.say(stmt, name, SET_OPERATIONS, offset)
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


def view_relation(name: str, columns: list[tuple[str, str]]) -> Relation:
    """The relation of a view named ``name`` with ``columns`` (name, the SQL type
    :func:`_ddl_type` writes): what ``CREATE TABLE "name" ("c" TYPE, ...)`` declares."""
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


def _relation_of(stmt: exp.Create, reject: _Reject) -> Relation:
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


def parse_query(sql: str, source: str = "<query>") -> ConjunctiveQuery:
    """Parse and validate a query file; raise :class:`QueryError` on anything outside
    the supported language."""
    query = parse_file(sql, source)
    check_supported(query.select, sql, source)
    return build_query(query)


def build_query(query: ParsedQuery) -> ConjunctiveQuery:
    """The conjunctive query of a checked SELECT tree (normalized, then translated)."""
    sql, source = query.text, query.source
    select = _normalize(query.select, query.schema, sql, source)
    try:
        return _Builder(query.schema, select, sql, source).build()
    except ExprError as err:
        offset = _offset_of(err.node)
        raise QueryError(describe([(offset, "expression", str(err))], sql, source)) from None


def _offset_of(node: exp.Expr) -> int | None:
    starts = [n.meta["start"] for n in node.walk() if n.meta and "start" in n.meta]
    return min(starts) if starts else None


def _normalize(select: exp.Select, schema: Schema, sql: str, source: str,
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
        findings = [(_offset_of(n), "derived table or WITH with GROUP BY, DISTINCT or an "
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


def _join_cast(left: str, right: str) -> str | None:
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


_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)
_MULTISET_FUNCS = ("min", "max", "count_distinct", "sum_distinct", "avg_distinct")


def _aggregate_type(agg: Aggregate) -> SqlType:
    if agg.func in ("count", "count_star"):
        return SqlType("INT", 0, 64)  # (BIGINT)
    if agg.func == "avg":
        return SqlType("FLOAT")
    return _sum_type(SqlType(agg.result_type, agg.scale))


def _sum_type(t: SqlType) -> SqlType:
    """The type of SUM over values of ``t`` (DuckDB's: an integer SUM is a HUGEINT, a
    DECIMAL SUM a DECIMAL(38, s))."""
    if t.name == "INT":
        return SqlType("INT", 0, 128)
    if t.name == "DECIMAL":
        return SqlType("DECIMAL", t.scale, 38)
    return t


def _ddl_type(t: SqlType) -> str:
    """The SQL type a CREATE TABLE declares for values of ``t`` (its width kept: an
    INTEGER stays an INTEGER, a DECIMAL(15,2) a DECIMAL(15,2))."""
    if t.name == "DECIMAL":
        return f"DECIMAL({t.digits},{t.scale})"
    if t.name == "INT":
        return INT_NAMES[t.bits]
    return {"FLOAT": "DOUBLE", "TEXT": "VARCHAR", "BOOL": "BOOLEAN",
            "NULL": "BIGINT", "INTERVAL": "VARCHAR", "KEY": "IVMFLOW_KEY"}.get(t.name, t.name)


def _needs_values(node: exp.Expr) -> bool:
    """MIN, MAX and DISTINCT aggregates read their argument's values per group (the
    reaggregation stage's multisets), not a ring payload."""
    return isinstance(node, (exp.Min, exp.Max)) or isinstance(node.this, exp.Distinct)


class _Builder:
    def __init__(self, schema: Schema, select: exp.Select, sql: str, source: str) -> None:
        self.schema = schema
        self.select = select
        self.sql = sql
        self.reject = _Reject(source, sql)
        self.aliases: list[tuple[str, Relation]] = []
        self.uf = _UnionFind()
        self.filters: dict[str, list[Filter]] = {}
        self.predicates: dict[str, list[Predicate]] = {}
        self.derived: dict[str, list[DerivedVar]] = {}
        self.derived_by_sql: dict[tuple[str, str], tuple[str, SqlType]] = {}
        self.derived_nodes: dict[tuple[str, str], exp.Expr] = {}
        """(FROM item, variable) -> the expression of each derived variable"""
        self.env: dict[str, dict[str, Any]] = {}
        self.taken_names: set[str] = set()
        self.multi_conditions: list[exp.Expr] = []
        self.carried: list[tuple[str, SqlType, str]] = []
        self.join_casts: list[tuple[exp.Column, str, SqlType, tuple[str, int], exp.Expr]] = []
        self.join_derived: list[tuple[str, str]] = []
        """(FROM item, variable) of each derived variable that joins (a cast)."""
        self.final_keys: tuple[str, ...] = ()

    # -- FROM ----------------------------------------------------------------------
    def _add_table(self, table: exp.Expr) -> None:
        if not isinstance(table, exp.Table):
            raise self.reject(table, "FROM item", "FROM lists base tables (with aliases)")
        rel = self.schema.lookup(table.name)
        if rel is None:
            known = ", ".join(sorted(self.schema.relations))
            raise self.reject(table, f"table {table.name!r}", f"declared tables: {known}")
        alias = table.alias or table.name
        if alias.lower() in {a.lower() for a, _ in self.aliases}:
            raise self.reject(
                table, f"duplicate alias {alias!r}", "give each occurrence its own alias"
            )
        self.aliases.append((alias, rel))
        for col in rel.columns:
            self.uf.add(self._key(alias, col.name))

    @staticmethod
    def _key(alias: str, column: str) -> str:
        return f"{alias.lower()}.{column.lower()}"

    def _resolve(self, col: exp.Column) -> tuple[str, int]:
        """(alias, column index) of a column reference."""
        table = col.table
        name = col.name.lower()
        matches = []
        for alias, rel in self.aliases:
            if table and alias.lower() != table.lower():
                continue
            for i, c in enumerate(rel.columns):
                if c.name.lower() == name:
                    matches.append((alias, i))
        if not matches:
            if not table and name in {i.alias.lower() for i in self.select.expressions
                                      if isinstance(i, exp.Alias)}:
                raise self.reject.say(  # (DuckDB reads it; ivmflow not here, yet)
                    col, f"unsupported reference to the SELECT alias {col.name!r} here",
                    "write the expression it names")
            raise self.reject.say(
                col, f"unknown column {col.sql()!r}", "no FROM item has such a column"
            )
        if len(matches) > 1:
            raise self.reject.say(
                col, f"ambiguous column {col.sql()!r}", "qualify it with its table alias"
            )
        return matches[0]

    # -- WHERE ---------------------------------------------------------------------
    def _group_connectives(self, node: exp.Expr) -> exp.Expr:
        """AND/OR chains regrouped so that the operands over one FROM item sit
        together (one carried boolean per item, not one per operand), and common
        conjuncts of an OR's branches factored out (TPC-H Q19 repeats its join in each
        branch): ``(a AND x) OR (a AND y)`` is ``a AND (x OR y)``."""
        if isinstance(node, exp.Paren):
            return self._group_connectives(node.this)
        if not isinstance(node, (exp.And, exp.Or)):
            return node
        kind = type(node)
        flat: list[exp.Expr] = []

        def walk(n: exp.Expr) -> None:
            while isinstance(n, exp.Paren):
                n = n.this
            if isinstance(n, kind):
                walk(n.this)
                walk(n.expression)
            else:
                flat.append(n)

        walk(node)
        parts = [self._group_connectives(p) for p in flat]
        if kind is exp.Or:
            branches = [self._conjuncts(p) for p in parts]
            common = [c for c in branches[0]
                      if all(any(c == d for d in b) for b in branches[1:])]
            if common:
                rest = [[c for c in b if not any(c == d for d in common)] for b in branches]
                if all(rest):
                    ors = [exp.and_(*r) if len(r) > 1 else r[0] for r in rest]
                    return self._group_connectives(exp.and_(*common, exp.or_(*ors)))
                return exp.and_(*common) if len(common) > 1 else common[0]
        groups: dict[str, list[exp.Expr]] = {}
        order: list[str] = []
        for p in parts:
            aliases = self._aliases_in(p)
            key = next(iter(aliases)) if len(aliases) == 1 else f"\0{len(order)}"
            if key not in groups:
                groups[key] = []
                order.append(key)
            groups[key].append(p)
        joined = [g[0] if len(g) == 1 else
                  (exp.and_(*g) if kind is exp.And else exp.or_(*g))
                  for g in (groups[k] for k in order)]
        if len(joined) == 1:
            return joined[0]
        return exp.and_(*joined) if kind is exp.And else exp.or_(*joined)

    def _conjuncts(self, cond: exp.Expr) -> list[exp.Expr]:
        if isinstance(cond, exp.And):
            return self._conjuncts(cond.this) + self._conjuncts(cond.expression)
        if isinstance(cond, exp.Paren):
            return self._conjuncts(cond.this)
        return [cond]

    def _literal(self, node: exp.Expr) -> Value:
        if isinstance(node, exp.Paren):
            return self._literal(node.this)
        if isinstance(node, exp.Neg):
            inner = self._literal(node.this)
            if isinstance(inner, (int, float)) and not isinstance(inner, bool):
                return -inner
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return str(node.this)
            text = str(node.this)
            try:
                return int(text)
            except ValueError:
                return float(text)
        raise self.reject(node, "expression", "filters compare a column with a constant")

    def _add_filter(self, col: exp.Column, op: CompareOp, values: tuple[Value, ...]) -> None:
        alias, idx = self._resolve(col)
        rel = dict(self.aliases)[alias]
        self.filters.setdefault(alias, []).append(
            Filter(idx, rel.columns[idx].name, op, values)
        )

    def _try_filter(self, col: exp.Column, op: CompareOp, literals: list[exp.Expr]) -> bool:
        """``col op constant(s)`` as a plain filter, when Python's comparison of the
        column's values with the constants is DuckDB's: an integer constant with an
        integer column (whatever its width), a string with a string column, a boolean
        with a boolean one, a number with a DOUBLE column except by ``>``/``>=`` (a NaN
        is greater than everything to DuckDB, to Python nothing); a string constant
        with another type is read as that type (DuckDB casts it). False: the expression
        compiler takes it (DuckDB's casts across types; a string that does not convert
        is an error for each row compared)."""
        alias, idx = self._resolve(col)
        column = dict(self.aliases)[alias].columns[idx]
        typed: list[Value] = []
        for node in literals:
            value = self._literal(node)
            if isinstance(value, str) and column.type != "TEXT":
                try:
                    value = column.coerce(value)
                except ValueError:  # (DuckDB's error for each row: the compiler's cast)
                    return False
            if column.type == "INT":
                ok = isinstance(value, int) and not isinstance(value, bool)
            elif column.type == "FLOAT":
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
                    op not in (">", ">=")
                value = float(value) if ok else value  # type: ignore[arg-type]
            elif column.type == "TEXT":
                ok = isinstance(value, str)
            else:
                ok = column.type == "BOOL" and isinstance(value, bool)
            if not ok:
                return False
            typed.append(value)
        self._add_filter(col, op, tuple(typed))
        return True

    def _simple_condition(self, cond: exp.Expr) -> bool:  # noqa: C901
        """The plain forms (joins, column op constant): True when ``cond`` was one."""
        if isinstance(cond, exp.Not) and isinstance(cond.this, exp.Is):
            inner = cond.this
            if self._plain_column(inner.this) and isinstance(inner.expression, exp.Null):
                self._add_filter(inner.this, "is not null", ())
                return True
        if isinstance(cond, exp.Is):
            target = cond.expression
            negated = isinstance(target, exp.Not)
            if negated:
                target = target.this
            if self._plain_column(cond.this) and isinstance(target, exp.Null):
                self._add_filter(cond.this, "is not null" if negated else "is null", ())
                return True
        if isinstance(cond, exp.In) and self._plain_column(cond.this):
            if not cond.expressions or not all(self._plain_literal(v)
                                               for v in cond.expressions):
                return False
            return self._try_filter(cond.this, "in", cond.expressions)
        op = _COMPARISONS.get(type(cond))
        if op is not None:
            left, right = cond.this, cond.expression
            if isinstance(left, exp.Column) and isinstance(right, exp.Column):
                if op != "=":
                    return False
                return self._join_equality(cond, left, right)
            if self._plain_column(left) and self._plain_literal(right):
                return self._try_filter(left, op, [right])
            if self._plain_column(right) and self._plain_literal(left):
                return self._try_filter(right, _FLIPPED[op], [left])
        return False

    def _join_equality(self, cond: exp.Expr, left: exp.Column, right: exp.Column) -> bool:
        """``a.x = b.y``: one variable for both columns when Python's equality of their
        values is DuckDB's (same types, integers with DECIMALs or BOOLEANs). Across
        types DuckDB casts one side (a VARCHAR to the other's type, failing on a string
        that does not convert; a DATE to TIMESTAMP; an integer or DECIMAL to DOUBLE):
        that side's cast is a derived variable of its FROM item, joined with the other
        column (:meth:`_cast_joins`); within one FROM item, a predicate (False). Types
        DuckDB cannot cast into each other are refused."""
        la, li = self._resolve(left)
        ra, ri = self._resolve(right)
        rels = dict(self.aliases)
        lc, rc = rels[la].columns[li], rels[ra].columns[ri]
        if (la, li) == (ra, ri):  # (x = x: true where x is not NULL)
            self._add_filter(left, "is not null", ())
            return True
        cast = _join_cast(lc.type, rc.type)
        if cast is None:
            self.uf.union(self._key(la, lc.name), self._key(ra, rc.name))
            return True
        if cast == "refuse":
            lt, rt = SqlType.of_column(lc).sql_name, SqlType.of_column(rc).sql_name
            raise ExprError(cond, f"comparison of {lt} with {rt} in {cond.sql('duckdb')!r} "
                                  "(DuckDB cannot cast one to the other)")
        if la == ra:
            return False
        node, (alias, idx), other = (left, (la, li), (ra, ri)) if cast == "left" else \
            (right, (ra, ri), (la, li))
        target = SqlType.of_column(rels[other[0]].columns[other[1]])
        self.join_casts.append((node, alias, target, other, cond))
        # (a NULL joins nothing; its cast is NULL)
        self._add_filter(node, "is not null", ())
        return True

    def _cast_joins(self) -> None:
        """The derived variables of the cross-type join equalities
        (:meth:`_join_equality`), each named as the other column's variable; where the
        FROM item has that variable already, the equality is a predicate of it."""
        for node, alias, target, (oa, oi), cond in self.join_casts:
            var = self.var_of(oa, oi)
            cast = exp.Cast(this=node.copy(), to=exp.DataType.build(target.sql_name))
            cast.meta["ivmflow_text"] = cond.sql("duckdb")  # (what a failed cast names)
            rel = dict(self.aliases)[alias]
            has: list[exp.Expr] = [exp.column(c.name, table=alias)
                                   for i, c in enumerate(rel.columns)
                                   if self.var_of(alias, i) == var]
            has += [self.derived_nodes[(alias, d.var)].copy() for d in
                    self.derived.get(alias, []) if d.var == var]
            if has:
                self._condition(exp.EQ(this=cast, expression=has[0]))
                continue
            self._derive(cast, var, force=True)
            self.join_derived.append((alias, var))

    def _plain_column(self, node: exp.Expr) -> bool:
        """A column whose type the plain filters compare with constants as they are."""
        if not isinstance(node, exp.Column):
            return False
        alias, idx = self._resolve(node)
        return dict(self.aliases)[alias].columns[idx].type in ("INT", "FLOAT", "TEXT", "BOOL")

    @staticmethod
    def _plain_literal(node: exp.Expr) -> bool:
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Neg):
            node = node.this
            return isinstance(node, exp.Literal) and not node.is_string
        return isinstance(node, (exp.Literal, exp.Boolean))

    def _condition(self, cond: exp.Expr) -> None:
        if self._simple_condition(cond):
            return
        aliases = self._aliases_in(cond)
        if len(aliases) > 1:
            # (applied to the join block's groups: see _glue_compiler)
            self.multi_conditions.append(cond)
            return
        alias = next(iter(aliases)) if aliases else self.aliases[0][0]
        compiler = self._atom_compiler(alias)
        src = compiler.predicate(cond)
        self.predicates.setdefault(alias, []).append(Predicate(src, cond.sql("duckdb")))

    def _aliases_in(self, node: exp.Expr) -> set[str]:
        return {self._resolve(c)[0] for c in column_refs(node)}

    def _atom_compiler(self, alias: str) -> ExprCompiler:
        rel = dict(self.aliases)[alias]

        def resolve(node: exp.Expr) -> Code | None:
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                a, idx = self._resolve(node)
                if a != alias:
                    raise ExprError(node, f"column {node.sql()!r} is not of {alias}")
                return Code(f"row[{idx}]", SqlType.of_column(rel.columns[idx]), True,
                            simple=True)
            return None

        return ExprCompiler(self.env.setdefault(alias, {}), resolve)

    def _derive(self, node: exp.Expr, name: str | None = None,
                force: bool = False) -> tuple[str, SqlType]:
        """A variable computed per row of the one FROM item ``node`` reads (``force``:
        named ``name`` whatever else has the name: a join variable's cast)."""
        aliases = self._aliases_in(node)
        if len(aliases) != 1:
            what = "no table" if not aliases else f"several tables ({', '.join(sorted(aliases))})"
            raise ExprError(node, f"an expression over {what} here is not supported yet "
                                  "(only expressions over one FROM item)")
        alias = next(iter(aliases))
        key = (alias, node.sql("duckdb"))
        hit = self.derived_by_sql.get(key)
        if hit is not None and not force:
            return hit
        code = self._atom_compiler(alias).value(node)
        if force and name:
            var = name
        else:
            var = name if name and name not in self.taken_names else \
                f"_e{len(self.derived_by_sql)}"
        self.taken_names.add(var)
        column = code.type.column(var)
        self.derived.setdefault(alias, []).append(
            DerivedVar(var, code.src, column, node.sql("duckdb")))
        self.derived_nodes.setdefault((alias, var), node.copy())
        if hit is None:
            self.derived_by_sql[key] = (var, code.type)
        return var, code.type

    # -- SELECT --------------------------------------------------------------------
    def build(self) -> ConjunctiveQuery:  # noqa: C901
        sel = self.select
        from_ = sel.args.get("from_") or sel.args.get("from")
        if from_ is None:
            raise self.reject(sel, "SELECT without FROM", "name the tables in FROM")
        self._add_table(from_.this)
        for extra in from_.expressions if hasattr(from_, "expressions") else []:
            self._add_table(extra)
        conditions: list[exp.Expr] = []
        for join in sel.args.get("joins") or []:
            if join.args.get("using"):
                raise self.reject(join, "JOIN ... USING", "write JOIN ... ON a.x = b.x")
            side = (join.args.get("side") or "").upper()
            if side:
                # (an outer join the unnesting of NOT EXISTS / NOT IN, or the query
                # itself, left: anti-joins and outer joins are not maintained yet)
                raise ExprError(join.this, f"{side} OUTER JOIN (or NOT EXISTS / NOT IN, "
                                           "an anti-join) is not supported yet")
            self._add_table(join.this)
            if join.args.get("on") is not None:
                conditions.extend(self._conjuncts(join.args["on"]))
        where = sel.args.get("where")
        if where is not None:
            conditions.extend(self._conjuncts(where.this))
        conditions = [c for cond in conditions
                      for c in self._conjuncts(self._group_connectives(cond))]
        # Equalities first: they name the variables the other conditions read.
        rest = [c for c in conditions if not self._simple_condition(c)]

        rels = dict(self.aliases)
        # Output items (before naming variables, so SELECT aliases can name them).
        items: list[tuple[str, exp.Expr]] = []
        for item in sel.expressions:
            if isinstance(item, exp.Star):
                for alias, rel in self.aliases:
                    for col in rel.columns:
                        items.append((col.name, exp.column(col.name, table=alias)))
                continue
            if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                star_alias = next(
                    (a for a, _ in self.aliases if a.lower() == item.table.lower()), None
                )
                if star_alias is None:
                    raise self.reject(item, f"{item.table}.*", "no such alias in FROM")
                for col in rels[star_alias].columns:
                    items.append((col.name, exp.column(col.name, table=star_alias)))
                continue
            inner = self._join_column(item.this if isinstance(item, exp.Alias) else item)
            if isinstance(item, exp.Alias):
                name = item.alias
            elif isinstance(item, exp.Column):
                name = item.name
            else:
                name = item.sql()
            items.append((name, inner))
        self.taken_names.update(n for n, _ in items)

        # Variables: equality classes, named by the first SELECT alias naming them.
        names: dict[str, str] = {}
        for name, inner in items:
            if isinstance(inner, exp.Column) and isinstance(self._select_alias(inner), str):
                alias, idx = self._resolve(inner)
                root = self.uf.find(self._key(alias, rels[alias].columns[idx].name))
                if root not in names and name not in names.values():
                    names[root] = name
        used_names = set(names.values())

        def var_of(alias: str, idx: int) -> str:
            root = self.uf.find(self._key(alias, rels[alias].columns[idx].name))
            if root not in names:
                candidate = root
                n = 2
                while candidate in used_names:
                    candidate = f"{root}#{n}"
                    n += 1
                names[root] = candidate
                used_names.add(candidate)
            return names[root]

        self.var_of = var_of
        self._cast_joins()
        for cond in rest:
            self._condition(cond)

        columns: list[OutputColumn] = []
        aggregates: list[Aggregate] = []
        group_by: tuple[str, ...] | None = None
        group = sel.args.get("group")
        used: set[str] = set()
        # GROUP BY expressions by their SQL text -> variable
        group_exprs: dict[str, str] = {}
        group_types: dict[str, SqlType] = {}
        if group is not None:
            gvars: list[str] = []
            select_names = {inner.sql("duckdb"): name for name, inner in items}
            for g in group.expressions:
                if isinstance(g, exp.Column):
                    alias, idx = self._resolve(g)
                    v = var_of(alias, idx)
                    group_types[v] = SqlType.of_column(rels[alias].columns[idx])
                else:
                    v, t = self._derive(g, select_names.get(g.sql("duckdb")))
                    group_exprs[g.sql("duckdb")] = v
                    group_types[v] = t
                if v not in gvars:
                    gvars.append(v)
            group_by = tuple(gvars)

        def is_aggregate(node: exp.Expr) -> bool:
            return isinstance(node, _AGGREGATES)

        aggregate_query = group is not None or any(
            any(is_aggregate(n) for n in inner.walk()) for _, inner in items) or \
            sel.args.get("having") is not None
        post_needed = False
        post_items: list[exp.Expr | None] = []
        having_node = sel.args.get("having")
        multi_aggs = any(
            is_aggregate(n) and not isinstance(n.this, exp.Star)
            and (len(self._aliases_in(n.this)) > 1 or _needs_values(n))
            for node in [inner for _, inner in items] + ([having_node] if having_node else [])
            for n in node.walk())
        reagg_mode = aggregate_query and bool(self.multi_conditions or multi_aggs)
        bag_multi = not aggregate_query and (bool(self.multi_conditions) or any(
            not isinstance(inner, exp.Column) and len(self._aliases_in(inner)) > 1
            for _, inner in items))
        if bag_multi and sel.args.get("distinct") is not None:
            node = self.multi_conditions[0] if self.multi_conditions else sel
            raise ExprError(node, "SELECT DISTINCT with a condition or column over several "
                                  "tables (other than column equalities) is not supported yet")
        self.final_keys = group_by or ()
        final_aggs: list[FinalAggregate] = []
        for name, inner in items:
            if isinstance(inner, exp.Column):
                alias, idx = self._resolve(inner)
                v = var_of(alias, idx)
                columns.append(OutputColumn(name, var=v))
                used.add(v)
                post_items.append(None)
            elif aggregate_query and group_exprs.get(inner.sql("duckdb")) is not None:
                v = group_exprs[inner.sql("duckdb")]
                columns.append(OutputColumn(name, var=v))
                post_items.append(None)
            elif is_aggregate(inner) and not reagg_mode:
                agg = self._aggregate(inner, var_of, rels)
                if agg.var is not None:
                    used.add(agg.var)
                if agg not in aggregates:
                    aggregates.append(agg)
                columns.append(OutputColumn(name, aggregate=aggregates.index(agg)))
                post_items.append(None)
            elif aggregate_query:
                columns.append(OutputColumn(name, expr=inner.sql("duckdb")))
                post_items.append(inner)
                post_needed = True
            elif bag_multi and len(self._aliases_in(inner)) > 1:
                columns.append(OutputColumn(name, expr=inner.sql("duckdb")))
                post_items.append(inner)
            else:
                v, _t = self._derive(inner, name)
                columns.append(OutputColumn(name, var=v))
                used.add(v)
                post_items.append(None)
        having = sel.args.get("having")
        distinct = sel.args.get("distinct") is not None
        if aggregate_query and group_by is None and any(c.var is not None for c in columns):
            bad = next(c for c in columns if c.var is not None)
            msg = (
                f"{self.reject.source}: column {bad.name!r} is selected next to an aggregate "
                "without GROUP BY; add it to GROUP BY"
            )
            raise QueryError(msg)
        if group_by is not None:
            for oc in columns:
                if oc.var is not None and oc.var not in group_by:
                    msg = (
                        f"{self.reject.source}: column {oc.name!r} must appear in GROUP BY "
                        "or inside an aggregate"
                    )
                    raise QueryError(msg)
            used.update(group_by)
        if distinct and aggregate_query:
            raise self.reject(
                sel.args["distinct"], "DISTINCT with aggregates", "drop DISTINCT or the aggregate"
            )

        post: PostMap | None = None
        reagg: Reaggregate | None = None
        if reagg_mode:
            env: dict[str, Any] = {}
            glue = self._glue_compiler(env, group_types)

            def register(node: exp.Expr) -> Code:
                return self._final_aggregate(node, final_aggs, glue, used)

            post = self._post_map(columns, post_items, having, aggregates, group_by or (),
                                  group_exprs, group_types, var_of, rels, used,
                                  register=register, env=env)
            condition = " and ".join(glue.predicate(c) for c in self.multi_conditions) or None
            n_keys = len(self.final_keys)
            group_by = self.final_keys + tuple(v for v, _t, _s in self.carried)
            used.update(group_by)
            # The engine's aggregates: the derivation count, and per one-item variable
            # its count and sum (read back by the reaggregation).
            aggregates = [Aggregate("count_star", None, "INT")]
            for fa in final_aggs:
                if fa.var is not None:
                    agg = Aggregate("count" if fa.func == "count" else "sum", fa.var,
                                    fa.result_type, fa.scale)
                    if agg not in aggregates:
                        aggregates.append(agg)
            reagg = Reaggregate(n_keys, group is not None, condition, tuple(final_aggs),
                                tuple(s for _v, _t, s in self.carried), env)
        elif bag_multi:
            post, columns = self._bag_post(columns, post_items, used)
        elif aggregate_query and (post_needed or having is not None):
            post = self._post_map(columns, post_items, having, aggregates, group_by or (),
                                  group_exprs, group_types, var_of, rels, used)
        if post is not None and aggregate_query and not aggregates:
            # (only arithmetic on GROUP BY keys: the groups are an aggregate's, COUNT(*)
            # keeps them; its value is not output)
            aggregates.append(Aggregate("count_star", None, "INT"))

        if group_by is not None and not aggregates and post is None:
            # GROUP BY without an aggregate: one row per group, as SELECT DISTINCT
            distinct = True
        order_by = self._order_by(items, columns)

        # Join variables: classes with two or more column occurrences.
        occurrences: dict[str, int] = {}
        atom_cols: list[tuple[str, ...]] = []
        for alias, rel in self.aliases:
            cv = tuple(var_of(alias, i) for i in range(rel.arity))
            atom_cols.append(cv)
            for v in cv:
                occurrences[v] = occurrences.get(v, 0) + 1
        for _alias, v in self.join_derived:
            occurrences[v] = occurrences.get(v, 0) + 1
        join_vars = frozenset(v for v, n in occurrences.items() if n > 1)
        keep = used | join_vars
        order: list[str] = []
        for cv in atom_cols:
            for v in cv:
                if v in keep and v not in order:
                    order.append(v)
        for alias, _rel in self.aliases:
            for d in self.derived.get(alias, []):
                if d.var in keep and d.var not in order:
                    order.append(d.var)
        atoms = []
        for i, ((alias, rel), cv) in enumerate(zip(self.aliases, atom_cols)):
            derived = tuple(d for d in self.derived.get(alias, []) if d.var in keep)
            dvars = {d.var for d in derived}
            atom_vars = tuple(v for v in order if v in cv or v in dvars)
            atoms.append(
                Atom(i, alias, rel, cv, tuple(self.filters.get(alias, [])), atom_vars,
                     derived, tuple(self.predicates.get(alias, [])),
                     self.env.get(alias, {}))
            )
        if group_by is not None:
            free = group_by
        else:
            free = tuple(dict.fromkeys(c.var for c in columns if c.var is not None))
        return ConjunctiveQuery(
            schema=self.schema,
            atoms=tuple(atoms),
            var_order=tuple(order),
            join_vars=join_vars,
            columns=tuple(columns),
            free_vars=free,
            aggregates=tuple(aggregates),
            group_by=group_by,
            distinct=distinct,
            sql=self.sql,
            post=post,
            reagg=reagg,
            order_by=order_by,
            output_types=self._output_types(columns, aggregates, post),
            limit=self._count_of("limit"),
            offset=self._count_of("offset") or 0,
        )

    def _join_column(self, node: exp.Expr) -> exp.Expr:
        """``COALESCE(r.a, s.a)`` of columns an inner join equates (what qualify makes of
        NATURAL JOIN and USING columns) is that column."""
        if isinstance(node, exp.Coalesce):
            cols = [node.this, *node.expressions]
            if all(isinstance(c, exp.Column) for c in cols):
                rels = dict(self.aliases)
                roots = set()
                for c in cols:
                    alias, idx = self._resolve(c)
                    roots.add(self.uf.find(self._key(alias, rels[alias].columns[idx].name)))
                if len(roots) == 1:
                    return cols[0]
        return node

    def _post_map(self, columns: list[OutputColumn], post_items: list[exp.Expr | None],
                  having: exp.Expr | None, aggregates: list[Aggregate],
                  group_by: tuple[str, ...], group_exprs: dict[str, str],
                  group_types: dict[str, SqlType], var_of: Any,
                  rels: dict[str, Relation], used: set[str],
                  register: Any = None, env: dict[str, Any] | None = None) -> PostMap:
        """Output row and HAVING after the aggregate, over ``key[i]`` and ``v[j]``."""
        env = {} if env is None else env

        def resolve(node: exp.Expr) -> Code | None:
            if isinstance(node, _AGGREGATES) and register is not None:
                out: Code = register(node)
                return out
            if isinstance(node, (exp.Count, exp.Sum, exp.Avg)):
                agg = self._aggregate(node, var_of, rels)
                if agg.var is not None:
                    used.add(agg.var)
                if agg not in aggregates:
                    aggregates.append(agg)
                j = aggregates.index(agg)
                t = _aggregate_type(agg)
                if agg.func in ("count", "count_star"):
                    return Code(f"v[{j}]", SqlType("INT"), False, simple=True)
                if agg.func == "avg":
                    t = SqlType("FLOAT")
                return Code(f"v[{j}]", t, True, simple=True)
            v = group_exprs.get(node.sql("duckdb")) if not isinstance(node, exp.Column) \
                else None
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                alias, idx = self._resolve(node)
                v = var_of(alias, idx)
            if v is not None:
                if v not in group_by:
                    raise ExprError(node, f"{node.sql()!r} must appear in GROUP BY or inside "
                                          "an aggregate")
                return Code(f"key[{group_by.index(v)}]", group_types[v], True, simple=True)
            return None

        compiler = ExprCompiler(env, resolve)
        exprs: list[str] = []
        types: list[SqlType] = []
        for col, node in zip(columns, post_items):
            if col.var is not None:
                exprs.append(f"key[{group_by.index(col.var)}]" if group_by else "None")
                types.append(group_types.get(col.var, SqlType("NULL")))
            elif col.aggregate is not None and node is None:
                exprs.append(f"v[{col.aggregate}]")
                types.append(_aggregate_type(aggregates[col.aggregate]))
            else:
                assert node is not None
                exprs.append(compiler.output(node))
                types.append(compiler.last_type)
        having_src = compiler.predicate(having.this) if having is not None else None
        return PostMap(tuple(exprs), having_src, env, tuple(types))

    def _glue_compiler(self, env: dict[str, Any], group_types: dict[str, SqlType]
                       ) -> ExprCompiler:
        """Compiles an expression over several FROM items into Python source over the
        extended group key: each largest subexpression over one item becomes a carried
        variable (a GROUP BY key of the engine, read as ``key[i]``)."""

        def resolve(node: exp.Expr) -> Code | None:
            if isinstance(node, _AGGREGATES):
                raise ExprError(node, "an aggregate inside an aggregate or condition")
            if not column_refs(node):
                return None
            aliases = self._aliases_in(node)
            if len(aliases) != 1:
                return None
            if isinstance(node, exp.Column):
                alias, idx = self._resolve(node)
                var = self.var_of(alias, idx)
                t = SqlType.of_column(dict(self.aliases)[alias].columns[idx])
            else:
                var, t = self._derive(node)
            if var in self.final_keys:
                pos = self.final_keys.index(var)
            else:
                names = [v for v, _t, _s in self.carried]
                if var not in names:
                    self.carried.append((var, t, node.sql("duckdb")))
                    names.append(var)
                pos = len(self.final_keys) + names.index(var)
            return Code(f"key[{pos}]", t, True, simple=True)

        return ExprCompiler(env, resolve)

    def _bag_post(self, columns: list[OutputColumn], post_items: list[exp.Expr | None],
                  used: set[str]) -> tuple[PostMap, list[OutputColumn]]:
        """A SELECT without aggregates whose conditions or columns read several FROM
        items: the engine's rows are the SELECT list's variables plus the carried ones
        (hidden columns), filtered and mapped per row by the post stage."""
        env: dict[str, Any] = {}
        visible = [c for c in columns if c.var is not None]
        self.final_keys = tuple(c.var for c in visible if c.var is not None)
        glue = self._glue_compiler(env, {})
        exprs = []
        types: list[SqlType] = []
        for col, node in zip(columns, post_items):
            if col.var is not None:
                exprs.append(f"key[{self.final_keys.index(col.var)}]")
                types.append(self._var_type(col.var))
            else:
                assert node is not None
                exprs.append(glue.output(node))
                types.append(glue.last_type)
        condition = " and ".join(glue.predicate(c) for c in self.multi_conditions) or None
        hidden = [OutputColumn(f"\0{v}", var=v) for v, _t, _s in self.carried]
        used.update(v for v, _t, _s in self.carried)
        post = PostMap(tuple(exprs), condition, env, tuple(types),
                       tuple(c.name for c in columns))
        return post, visible + hidden

    def _final_aggregate(self, node: exp.Expr, final_aggs: list[FinalAggregate],
                         glue: ExprCompiler, used: set[str]) -> Code:
        """A final aggregate (reaggregation mode), as the post stage reads it: ``v[j]``."""
        arg = node.this
        func = ("count_star" if isinstance(node, exp.Count) and isinstance(arg, exp.Star)
                else "count" if isinstance(node, exp.Count)
                else "sum" if isinstance(node, exp.Sum)
                else "min" if isinstance(node, exp.Min)
                else "max" if isinstance(node, exp.Max) else "avg")
        if isinstance(arg, exp.Distinct):
            arg = arg.expressions[0]
            func += "_distinct"
        if func in _MULTISET_FUNCS:
            # (the value itself is carried: a key of the engine's groups)
            code = glue.compile(arg)
            t = code.type
            if func in ("sum_distinct", "avg_distinct") and not t.numeric:
                raise ExprError(node, f"{func.split('_')[0].upper()}(DISTINCT) over "
                                      f"{t.name}: it needs a number")
            fa = FinalAggregate(func, None, code.src,  # type: ignore[arg-type]
                                t.name if t.name != "NULL" else "INT", t.scale)
            if fa not in final_aggs:
                final_aggs.append(fa)
            j = final_aggs.index(fa)
            if func == "count_distinct":
                return Code(f"v[{j}]", SqlType("INT"), False, simple=True)
            if func == "avg_distinct":
                return Code(f"v[{j}]", SqlType("FLOAT"), True, simple=True)
            return Code(f"v[{j}]", _sum_type(t) if func == "sum_distinct" else t, True,
                        simple=True)
        if func == "count_star":
            fa = FinalAggregate("count_star", None, None, "INT")
            t = SqlType("INT")
        elif len(self._aliases_in(arg)) <= 1:
            if isinstance(arg, exp.Column):
                alias, idx = self._resolve(arg)
                var = self.var_of(alias, idx)
                t = SqlType.of_column(dict(self.aliases)[alias].columns[idx])
            else:
                var, t = self._derive(arg)
            used.add(var)
            fa = FinalAggregate(func, var, None,  # type: ignore[arg-type]
                                t.name if t.name != "NULL" else "INT", t.scale)
        else:
            code = glue.compile(arg)
            t = code.type
            fa = FinalAggregate(func, None, code.src,  # type: ignore[arg-type]
                                t.name if t.name != "NULL" else "INT", t.scale)
        if func in ("sum", "avg") and not t.numeric:
            raise ExprError(node, f"{func.upper()} over {t.name}: it needs a number")
        if fa not in final_aggs:
            final_aggs.append(fa)
        j = final_aggs.index(fa)
        if func in ("count", "count_star"):
            return Code(f"v[{j}]", SqlType("INT"), False, simple=True)
        if func == "avg":
            return Code(f"v[{j}]", SqlType("FLOAT"), True, simple=True)
        return Code(f"v[{j}]", _sum_type(t) if func == "sum" else t, True, simple=True)

    def _var_type(self, var: str) -> SqlType:
        for (alias, rel) in self.aliases:
            for i, col in enumerate(rel.columns):
                if self.var_of(alias, i) == var:
                    return SqlType.of_column(col)
            for d in self.derived.get(alias, []):
                if d.var == var:
                    return SqlType.of_column(d.column)
        return SqlType("NULL")

    def _output_types(self, columns: list[OutputColumn], aggregates: list[Aggregate],
                      post: PostMap | None) -> tuple[str, ...]:
        if post is not None and post.types:
            types = list(post.types)
        else:
            types = [self._var_type(c.var) if c.var is not None
                     else _aggregate_type(aggregates[c.aggregate])
                     if c.aggregate is not None else SqlType("NULL")
                     for c in columns if not c.name.startswith("\0")]
        return tuple(_ddl_type(t) for t in types)

    def _count_of(self, key: str) -> int | None:
        clause = self.select.args.get(key)
        return None if clause is None else int(clause.args["expression"].name)

    def _order_by(self, items: list[tuple[str, exp.Expr]], columns: list[OutputColumn]
                  ) -> tuple[tuple[int, bool, bool], ...]:
        order = self.select.args.get("order")
        if order is None:
            return ()
        names = [n.lower() for n, _ in items]
        texts = [inner.sql("duckdb") for _, inner in items]
        out: list[tuple[int, bool, bool]] = []
        for o in order.expressions:
            node = o.this if isinstance(o, exp.Ordered) else o
            idx: int | None = None
            if isinstance(node, exp.Column) and not node.table and node.name.lower() in names:
                idx = names.index(node.name.lower())
            elif node.sql("duckdb") in texts:
                idx = texts.index(node.sql("duckdb"))
            elif isinstance(node, exp.Literal) and not node.is_string:
                n = int(node.name)
                idx = n - 1 if 1 <= n <= len(items) else None
            elif isinstance(node, exp.Column):
                alias, i = self._resolve(node)
                var = self.var_of(alias, i)
                idx = next((k for k, c in enumerate(columns) if c.var == var), None)
            if idx is None:
                raise ExprError(node, f"ORDER BY {node.sql()!r}: order by a column of the "
                                      "output (its name, position or expression)")
            desc = bool(o.args.get("desc")) if isinstance(o, exp.Ordered) else False
            nulls_first = bool(o.args.get("nulls_first")) if isinstance(o, exp.Ordered) \
                else False
            out.append((idx, desc, nulls_first))
        return tuple(out)

    @staticmethod
    def _select_alias(col: exp.Column) -> str:
        parent = col.parent
        return parent.alias if isinstance(parent, exp.Alias) else col.name

    def _aggregate(self, node: exp.Expr, var_of: object, rels: dict[str, Relation]) -> Aggregate:
        assert callable(var_of)
        arg = node.this
        if isinstance(node, exp.Count) and isinstance(arg, exp.Star):
            return Aggregate("count_star", None, "INT")
        if isinstance(arg, exp.Column):
            alias, idx = self._resolve(arg)
            col = rels[alias].columns[idx]
            v = var_of(alias, idx)
            t = SqlType.of_column(col)
        else:
            v, t = self._derive(arg)
        if isinstance(node, exp.Count):
            return Aggregate("count", v, "INT")
        if not t.numeric:
            name = "SUM" if isinstance(node, exp.Sum) else "AVG"
            raise ExprError(node, f"{name} over {t.name}: {name} needs a number")
        if isinstance(node, exp.Sum):
            return Aggregate("sum", v, t.name if t.name != "NULL" else "INT", t.scale)
        return Aggregate("avg", v, "FLOAT")
