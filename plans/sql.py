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

from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from core.errors import QueryError
from core.schema import SQL_TYPE_NAMES, Column, Relation, Schema, Value
from plans.cq import (
    AggFunc,
    Aggregate,
    Atom,
    CompareOp,
    ConjunctiveQuery,
    Filter,
    OutputColumn,
)

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
    """Builds the compile-time errors: what construct, where, what is supported."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __call__(self, node: exp.Expr | None, what: str, supported: str) -> QueryError:
        where = _position(node) if node is not None else "position unknown"
        text = node.sql() if node is not None else ""
        shown = f" `{text}`" if text else ""
        msg = f"{self.source}: {where}: unsupported {what}{shown}; {supported}"
        return QueryError(msg)


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


def parse_schema_and_select(sql: str, source: str) -> tuple[Schema, exp.Select]:
    """Split the file into its CREATE TABLEs (-> Schema) and its one SELECT."""
    reject = _Reject(source)
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except ParseError as err:
        first = err.errors[0] if err.errors else {}
        where = f"line {first.get('line', '?')}, column {first.get('col', '?')}"
        desc = first.get("description", str(err))
        msg = f"{source}: {where}: SQL syntax error: {desc}"
        raise QueryError(msg) from None
    relations: dict[str, Relation] = {}
    selects: list[exp.Select] = []
    for stmt in statements:
        if isinstance(stmt, exp.Create) and str(stmt.args.get("kind", "")).upper() == "TABLE":
            rel = _relation_of(stmt, reject)
            if rel.name.lower() in {r.lower() for r in relations}:
                raise reject(
                    stmt.this, "second CREATE TABLE", f"table {rel.name} is declared twice"
                )
            relations[rel.name] = rel
        elif isinstance(stmt, exp.Select):
            selects.append(stmt)
        else:
            raise reject(
                stmt, "statement", "a query file holds CREATE TABLE statements and one SELECT"
            )
    if len(selects) != 1:
        msg = (
            f"{source}: expected exactly one SELECT statement after the CREATE TABLEs, "
            f"found {len(selects)}"
        )
        raise QueryError(msg)
    if not relations:
        msg = f"{source}: no CREATE TABLE statement; declare every relation the SELECT reads"
        raise QueryError(msg)
    return Schema(relations), selects[0]


def _relation_of(stmt: exp.Create, reject: _Reject) -> Relation:
    schema_node = stmt.this
    if not isinstance(schema_node, exp.Schema):
        raise reject(stmt, "CREATE TABLE form", "write CREATE TABLE name(col TYPE, ...)")
    name = schema_node.this.name
    cols: list[Column] = []
    for coldef in schema_node.expressions:
        if not isinstance(coldef, exp.ColumnDef):
            raise reject(coldef, "table element", "only column definitions are allowed")
        kind = coldef.args.get("kind")
        type_name = kind.this.name if kind is not None else "TEXT"
        mapped = SQL_TYPE_NAMES.get(type_name.upper())
        if mapped is None:
            known = "INT, BIGINT, FLOAT, DOUBLE, DECIMAL, TEXT, VARCHAR, BOOLEAN"
            raise reject(coldef, f"column type {type_name}", f"supported types: {known}")
        cols.append(Column(coldef.name, mapped))
    return Relation(name, tuple(cols))


def parse_query(sql: str, source: str = "<query>") -> ConjunctiveQuery:
    """Parse and validate a query file; raise :class:`QueryError` on anything outside
    the supported language."""
    schema, select = parse_schema_and_select(sql, source)
    return _Builder(schema, select, sql, source).build()


class _Builder:
    def __init__(self, schema: Schema, select: exp.Select, sql: str, source: str) -> None:
        self.schema = schema
        self.select = select
        self.sql = sql
        self.reject = _Reject(source)
        self.aliases: list[tuple[str, Relation]] = []
        self.uf = _UnionFind()
        self.filters: dict[str, list[Filter]] = {}

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
            raise self.reject(
                col, f"column reference {col.sql()!r}", "no FROM item has such a column"
            )
        if len(matches) > 1:
            raise self.reject(
                col, f"ambiguous column {col.sql()!r}", "qualify it with its table alias"
            )
        return matches[0]

    # -- WHERE ---------------------------------------------------------------------
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
        typed: list[Value] = []
        for v in values:
            try:
                typed.append(rel.columns[idx].coerce(v))
            except ValueError as err:
                raise self.reject(col, "comparison", str(err)) from None
        self.filters.setdefault(alias, []).append(
            Filter(idx, rel.columns[idx].name, op, tuple(typed))
        )

    def _condition(self, cond: exp.Expr) -> None:
        supported = (
            "conditions are column = column (joins) or column op constant with "
            "= <> < <= > >=, IN (...), IS [NOT] NULL, combined with AND"
        )
        if isinstance(cond, exp.Not) and isinstance(cond.this, exp.Is):
            inner = cond.this
            if isinstance(inner.this, exp.Column) and isinstance(inner.expression, exp.Null):
                self._add_filter(inner.this, "is not null", ())
                return
        if isinstance(cond, exp.Is):
            target = cond.expression
            negated = isinstance(target, exp.Not)
            if negated:
                target = target.this
            if isinstance(cond.this, exp.Column) and isinstance(target, exp.Null):
                self._add_filter(cond.this, "is not null" if negated else "is null", ())
                return
        if isinstance(cond, exp.In) and isinstance(cond.this, exp.Column):
            if cond.args.get("query") is not None or not cond.expressions:
                raise self.reject(cond, "IN form", "use IN with a list of constants")
            values = tuple(self._literal(v) for v in cond.expressions)
            self._add_filter(cond.this, "in", values)
            return
        op = _COMPARISONS.get(type(cond))
        if op is not None:
            left, right = cond.this, cond.expression
            if isinstance(left, exp.Column) and isinstance(right, exp.Column):
                if op != "=":
                    raise self.reject(
                        cond, "join condition", "joins are equalities between columns"
                    )
                la, li = self._resolve(left)
                ra, ri = self._resolve(right)
                rels = dict(self.aliases)
                self.uf.union(
                    self._key(la, rels[la].columns[li].name),
                    self._key(ra, rels[ra].columns[ri].name),
                )
                return
            if isinstance(left, exp.Column):
                self._add_filter(left, op, (self._literal(right),))
                return
            if isinstance(right, exp.Column):
                self._add_filter(right, _FLIPPED[op], (self._literal(left),))
                return
        raise self.reject(cond, "condition", supported)

    # -- SELECT --------------------------------------------------------------------
    def build(self) -> ConjunctiveQuery:
        sel = self.select
        for key in ("with", "having", "order", "limit", "offset", "qualify", "windows"):
            node = sel.args.get(key)
            if node:
                raise self.reject(node, key.upper(), "not in the supported SQL subset")
        from_ = sel.args.get("from_") or sel.args.get("from")
        if from_ is None:
            raise self.reject(sel, "SELECT without FROM", "name the tables in FROM")
        self._add_table(from_.this)
        for extra in from_.expressions if hasattr(from_, "expressions") else []:
            self._add_table(extra)
        conditions: list[exp.Expr] = []
        for join in sel.args.get("joins") or []:
            kind = (join.args.get("side") or "") + (join.args.get("kind") or "")
            if kind and kind.upper() not in ("INNER", "CROSS"):
                raise self.reject(join, f"{kind} JOIN", "only inner joins are supported")
            if join.args.get("using"):
                raise self.reject(join, "JOIN ... USING", "write JOIN ... ON a.x = b.x")
            self._add_table(join.this)
            if join.args.get("on") is not None:
                conditions.extend(self._conjuncts(join.args["on"]))
        where = sel.args.get("where")
        if where is not None:
            conditions.extend(self._conjuncts(where.this))
        for cond in conditions:
            self._condition(cond)

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
            inner = item.this if isinstance(item, exp.Alias) else item
            if isinstance(item, exp.Alias):
                name = item.alias
            elif isinstance(item, exp.Column):
                name = item.name
            else:
                name = item.sql()
            items.append((name, inner))

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

        columns: list[OutputColumn] = []
        aggregates: list[Aggregate] = []
        group_by: tuple[str, ...] | None = None
        group = sel.args.get("group")
        used: set[str] = set()
        if group is not None:
            gvars: list[str] = []
            for g in group.expressions:
                if not isinstance(g, exp.Column):
                    raise self.reject(g, "GROUP BY item", "group by plain columns")
                alias, idx = self._resolve(g)
                v = var_of(alias, idx)
                if v not in gvars:
                    gvars.append(v)
            group_by = tuple(gvars)
        for name, inner in items:
            if isinstance(inner, exp.Column):
                alias, idx = self._resolve(inner)
                v = var_of(alias, idx)
                columns.append(OutputColumn(name, var=v))
                used.add(v)
            elif isinstance(inner, (exp.Count, exp.Sum, exp.Avg)):
                agg = self._aggregate(inner, var_of, rels)
                if agg.var is not None:
                    used.add(agg.var)
                if agg not in aggregates:
                    aggregates.append(agg)
                columns.append(OutputColumn(name, aggregate=aggregates.index(agg)))
            else:
                raise self.reject(
                    inner,
                    "SELECT item",
                    "select columns, *, alias.*, COUNT(*), COUNT(col), SUM(col), AVG(col)",
                )
        distinct = sel.args.get("distinct") is not None
        if distinct and sel.args["distinct"].args.get("on") is not None:
            raise self.reject(sel.args["distinct"], "DISTINCT ON", "use plain DISTINCT")
        if aggregates and group_by is None and any(c.var is not None for c in columns):
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
        if distinct and aggregates:
            raise self.reject(
                sel.args["distinct"], "DISTINCT with aggregates", "drop DISTINCT or the aggregate"
            )

        # Join variables: classes with two or more column occurrences.
        occurrences: dict[str, int] = {}
        atom_cols: list[tuple[str, ...]] = []
        for alias, rel in self.aliases:
            cv = tuple(var_of(alias, i) for i in range(rel.arity))
            atom_cols.append(cv)
            for v in cv:
                occurrences[v] = occurrences.get(v, 0) + 1
        join_vars = frozenset(v for v, n in occurrences.items() if n > 1)
        keep = used | join_vars
        order: list[str] = []
        for cv in atom_cols:
            for v in cv:
                if v in keep and v not in order:
                    order.append(v)
        atoms = []
        for i, ((alias, rel), cv) in enumerate(zip(self.aliases, atom_cols)):
            atom_vars = tuple(v for v in order if v in cv)
            atoms.append(
                Atom(i, alias, rel, cv, tuple(self.filters.get(alias, [])), atom_vars)
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
        )

    @staticmethod
    def _select_alias(col: exp.Column) -> str:
        parent = col.parent
        return parent.alias if isinstance(parent, exp.Alias) else col.name

    def _aggregate(self, node: exp.Expr, var_of: object, rels: dict[str, Relation]) -> Aggregate:
        assert callable(var_of)
        arg = node.this
        func: AggFunc
        if isinstance(arg, exp.Distinct):
            raise self.reject(
                node, "aggregate over DISTINCT", "COUNT(DISTINCT ...) is not supported"
            )
        if isinstance(node, exp.Count) and isinstance(arg, exp.Star):
            return Aggregate("count_star", None, "INT")
        if not isinstance(arg, exp.Column):
            raise self.reject(node, "aggregate argument", "aggregate a single column")
        alias, idx = self._resolve(arg)
        col = rels[alias].columns[idx]
        v = var_of(alias, idx)
        if isinstance(node, exp.Count):
            func, rtype = "count", "INT"
        elif isinstance(node, exp.Sum):
            if col.type not in ("INT", "FLOAT"):
                raise self.reject(node, f"SUM over {col.type}", "SUM needs a numeric column")
            func, rtype = "sum", col.type
        else:
            if col.type not in ("INT", "FLOAT"):
                raise self.reject(node, f"AVG over {col.type}", "AVG needs a numeric column")
            func, rtype = "avg", "FLOAT"
        return Aggregate(func, v, rtype)
