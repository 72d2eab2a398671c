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

from typing import Any

from sqlglot import exp

from core.errors import QueryError
from core.schema import Relation, Schema
from plans import sqloutput, sqlwhere
from plans.cq import (
    Aggregate,
    Atom,
    ConjunctiveQuery,
    DerivedVar,
    Filter,
    FinalAggregate,
    OutputColumn,
    PostMap,
    Predicate,
    Reaggregate,
)
from plans.expr import Code, ExprCompiler, ExprError, SqlType, column_refs, conjuncts
from plans.sqlcheck import check_supported, describe
from plans.sqlparse import (
    AGGREGATES,
    ParsedQuery,
    Reject,
    UnionFind,
    needs_values,
    normalize,
    offset_of,
    parse_file,
)


def parse_query(sql: str, source: str = "<query>") -> ConjunctiveQuery:
    """Parse and validate a query file; raise :class:`QueryError` on anything outside
    the supported language."""
    query = parse_file(sql, source)
    check_supported(query.select, sql, source)
    return build_query(query)


def build_query(query: ParsedQuery) -> ConjunctiveQuery:
    """The conjunctive query of a checked SELECT tree (normalized, then translated)."""
    sql, source = query.text, query.source
    select = normalize(query.select, query.schema, sql, source)
    try:
        return Builder(query.schema, select, sql, source).build()
    except ExprError as err:
        offset = offset_of(err.node)
        raise QueryError(describe([(offset, "expression", str(err))], sql, source)) from None


class Builder:
    def __init__(self, schema: Schema, select: exp.Select, sql: str, source: str) -> None:
        self.schema = schema
        self.select = select
        self.sql = sql
        self.reject = Reject(source, sql)
        self.aliases: list[tuple[str, Relation]] = []
        self.uf = UnionFind()
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
        self.join_casts: list[tuple[exp.Expr, str, SqlType, tuple[str, int], exp.Expr]] = []
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
            branches = [conjuncts(p) for p in parts]
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
        if not aliases and self.aliases:
            # (a constant, e.g. a set operation's branch naming its channel: a value of
            # every row of the first FROM item)
            aliases = {self.aliases[0][0]}
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
                conditions.extend(conjuncts(join.args["on"]))
        where = sel.args.get("where")
        if where is not None:
            conditions.extend(conjuncts(where.this))
        conditions = [c for cond in conditions
                      for c in conjuncts(self._group_connectives(cond))]
        # Equalities first: they name the variables the other conditions read.
        rest = [c for c in conditions if not sqlwhere.simple_condition(self, c)]

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
        sqlwhere.cast_joins(self)
        for cond in rest:
            sqlwhere.condition(self, cond)

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
            return isinstance(node, AGGREGATES)

        aggregate_query = group is not None or any(
            any(is_aggregate(n) for n in inner.walk()) for _, inner in items) or \
            sel.args.get("having") is not None
        post_needed = False
        post_items: list[exp.Expr | None] = []
        having_node = sel.args.get("having")
        multi_aggs = any(
            is_aggregate(n) and not isinstance(n.this, exp.Star)
            and (len(self._aliases_in(n.this)) > 1 or needs_values(n))
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
                agg = sqloutput.aggregate(self, inner, var_of, rels)
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
            glue = sqloutput.glue_compiler(self, env, group_types)

            def register(node: exp.Expr) -> Code:
                return sqloutput.final_aggregate(self, node, final_aggs, glue, used)

            post = sqloutput.post_map(self, columns, post_items, having, aggregates, group_by or (),
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
            post, columns = sqloutput.bag_post(self, columns, post_items, used)
        elif aggregate_query and (post_needed or having is not None):
            post = sqloutput.post_map(self, columns, post_items, having, aggregates, group_by or (),
                                  group_exprs, group_types, var_of, rels, used)
        if post is not None and aggregate_query and not aggregates:
            # (only arithmetic on GROUP BY keys: the groups are an aggregate's, COUNT(*)
            # keeps them; its value is not output)
            aggregates.append(Aggregate("count_star", None, "INT"))

        if group_by is not None and not aggregates and post is None:
            # GROUP BY without an aggregate: one row per group, as SELECT DISTINCT
            distinct = True
        order_by = sqloutput.order_by(
            self, items, columns,
            sqloutput.output_sql_types(self, columns, aggregates, post))

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
            source=self.reject.source,
            post=post,
            reagg=reagg,
            order_by=order_by,
            output_types=sqloutput.output_types(self, columns, aggregates, post),
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

    def _count_of(self, key: str) -> int | None:
        clause = self.select.args.get(key)
        return None if clause is None else int(clause.args["expression"].name)

    @staticmethod
    def _select_alias(col: exp.Column) -> str:
        parent = col.parent
        return parent.alias if isinstance(parent, exp.Alias) else col.name
