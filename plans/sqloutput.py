"""The output side of a SELECT as the query builder (:class:`plans.sql.Builder`) makes
it: the aggregates of the select list (ring payload components), the expressions
computed over a group's aggregates or a row's values after the join (``PostMap``), a
final aggregate over an aggregate (a re-aggregation), the output types and the ORDER BY
keys. Functions of the builder, which keeps the FROM items, variables and conditions.

Example:
    >>> from plans.sql import parse_query
    >>> cq = parse_query("CREATE TABLE R(a INT, b DECIMAL(10,2)); "
    ...                  "SELECT a, SUM(b) * 2 AS s FROM R GROUP BY a ORDER BY s DESC")
    >>> cq.output_types, cq.order_by
    (('INTEGER', 'DECIMAL(38,2)'), ((1, True, False),))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlglot import exp

from core.consolidate import ComputedKey
from core.errors import QueryError
from core.schema import Relation
from plans.cq import (
    Aggregate,
    FinalAggregate,
    OutputColumn,
    PostMap,
)
from plans.expr import Code, ExprCompiler, ExprError, SqlType, column_refs
from plans.sqlparse import (
    AGGREGATES,
    MULTISET_FUNCS,
    aggregate_type,
    ddl_type,
    sum_type,
)

if TYPE_CHECKING:
    from plans.sql import Builder


def var_type(b: Builder, var: str) -> SqlType:
    for (alias, rel) in b.aliases:
        for i, col in enumerate(rel.columns):
            if b.var_of(alias, i) == var:
                return SqlType.of_column(col)
        for d in b.derived.get(alias, []):
            if d.var == var:
                return SqlType.of_column(d.column)
    return SqlType("NULL")


def var_of_one_item(b: Builder, node: exp.Expr) -> tuple[str, SqlType]:
    """The variable and type of an expression over one FROM item: a column's own, or a
    variable derived for the expression (:meth:`Builder._derive`)."""
    if isinstance(node, exp.Column):
        alias, idx = b._resolve(node)
        return b.var_of(alias, idx), SqlType.of_column(dict(b.aliases)[alias].columns[idx])
    return b._derive(node)


def post_map(b: Builder, columns: list[OutputColumn], post_items: list[exp.Expr | None],
              having: exp.Expr | None, aggregates: list[Aggregate],
              group_by: tuple[str, ...], group_exprs: dict[str, str],
              group_types: dict[str, SqlType], var_of: Any,
              rels: dict[str, Relation], used: set[str],
              register: Any = None, env: dict[str, Any] | None = None) -> PostMap:
    """Output row and HAVING after the aggregate, over ``key[i]`` and ``v[j]``."""
    env = {} if env is None else env

    def resolve(node: exp.Expr) -> Code | None:
        if isinstance(node, AGGREGATES) and register is not None:
            out: Code = register(node)
            return out
        if isinstance(node, (exp.Count, exp.Sum, exp.Avg)):
            agg = aggregate(b, node, var_of, rels)
            if agg.var is not None:
                used.add(agg.var)
            if agg not in aggregates:
                aggregates.append(agg)
            j = aggregates.index(agg)
            t = aggregate_type(agg)
            if agg.func in ("count", "count_star"):
                return Code(f"v[{j}]", SqlType("INT"), False, simple=True)
            if agg.func == "avg":
                t = SqlType("FLOAT")
            return Code(f"v[{j}]", t, True, simple=True)
        v = group_exprs.get(node.sql("duckdb")) if not isinstance(node, exp.Column) \
            else None
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            alias, idx = b._resolve(node)
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
            types.append(aggregate_type(aggregates[col.aggregate]))
        else:
            assert node is not None
            exprs.append(compiler.output(node))
            types.append(compiler.last_type)
    having_src = compiler.predicate(having.this) if having is not None else None
    return PostMap(tuple(exprs), having_src, env, tuple(types))


def glue_compiler(b: Builder, env: dict[str, Any], group_types: dict[str, SqlType]
                   ) -> ExprCompiler:
    """Compiles an expression over several FROM items into Python source over the
    extended group key: each largest subexpression over one item becomes a carried
    variable (a GROUP BY key of the engine, read as ``key[i]``)."""

    def resolve(node: exp.Expr) -> Code | None:
        if isinstance(node, AGGREGATES):
            raise ExprError(node, "an aggregate inside an aggregate or condition")
        if not column_refs(node):
            return None
        aliases = b._aliases_in(node)
        if len(aliases) != 1:
            return None
        var, t = var_of_one_item(b, node)
        if var in b.final_keys:
            pos = b.final_keys.index(var)
        else:
            names = [v for v, _t, _s in b.carried]
            if var not in names:
                b.carried.append((var, t, node.sql("duckdb")))
                names.append(var)
            pos = len(b.final_keys) + names.index(var)
        return Code(f"key[{pos}]", t, True, simple=True)

    return ExprCompiler(env, resolve)


def bag_post(b: Builder, columns: list[OutputColumn], post_items: list[exp.Expr | None],
              used: set[str]) -> tuple[PostMap, list[OutputColumn]]:
    """A SELECT without aggregates whose conditions or columns read several FROM
    items: the engine's rows are the SELECT list's variables plus the carried ones
    (hidden columns), filtered and mapped per row by the post stage."""
    env: dict[str, Any] = {}
    visible = [c for c in columns if c.var is not None]
    b.final_keys = tuple(c.var for c in visible if c.var is not None)
    glue = glue_compiler(b, env, {})
    exprs = []
    types: list[SqlType] = []
    for col, node in zip(columns, post_items):
        if col.var is not None:
            exprs.append(f"key[{b.final_keys.index(col.var)}]")
            types.append(var_type(b, col.var))
        else:
            assert node is not None
            exprs.append(glue.output(node))
            types.append(glue.last_type)
    condition = " and ".join(glue.predicate(c) for c in b.multi_conditions) or None
    hidden = [OutputColumn(f"\0{v}", var=v) for v, _t, _s in b.carried]
    used.update(v for v, _t, _s in b.carried)
    post = PostMap(tuple(exprs), condition, env, tuple(types),
                   tuple(c.name for c in columns))
    return post, visible + hidden


def final_aggregate(b: Builder, node: exp.Expr, final_aggs: list[FinalAggregate],
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
    if func in MULTISET_FUNCS:
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
        return Code(f"v[{j}]", sum_type(t) if func == "sum_distinct" else t, True,
                    simple=True)
    if func == "count_star":
        fa = FinalAggregate("count_star", None, None, "INT")
        t = SqlType("INT")
    elif len(b._aliases_in(arg)) <= 1:
        var, t = var_of_one_item(b, arg)
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
    return Code(f"v[{j}]", sum_type(t) if func == "sum" else t, True, simple=True)


def output_types(b: Builder, columns: list[OutputColumn], aggregates: list[Aggregate],
                  post: PostMap | None) -> tuple[str, ...]:
    return tuple(ddl_type(t) for t in output_sql_types(b, columns, aggregates, post))


def order_by(b: Builder, items: list[tuple[str, exp.Expr]], columns: list[OutputColumn],
             types: list[SqlType] | None = None
             ) -> tuple[tuple[int | ComputedKey, bool, bool], ...]:
    """ORDER BY as (output column, descending, nulls first). A key that is no output
    column but an expression over output columns (``ORDER BY sum_sales -
    avg_monthly_sales``, ``CASE WHEN lochierarchy = 0 THEN i_category END``) is a
    :class:`~core.consolidate.ComputedKey` over the output row: it orders the result
    (and picks a LIMIT's rows) as SQL does, the output unchanged. A name in it is the
    FROM's column first (where the output holds it), else the output's (a SELECT
    alias), as DuckDB reads them; what reads no output column is refused."""
    order = b.select.args.get("order")
    if order is None:
        return ()
    names = [n.lower() for n, _ in items]
    texts = [inner.sql("duckdb") for _, inner in items]
    var_pos: dict[str, int] = {}
    for i, (_n, inner) in enumerate(items):
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Column) and not isinstance(inner.this, exp.Star):
            alias, k = b._resolve(inner)
            var_pos.setdefault(b.var_of(alias, k), i)
    out: list[tuple[int | ComputedKey, bool, bool]] = []
    for o in order.expressions:
        node = o.this if isinstance(o, exp.Ordered) else o
        idx: int | ComputedKey | None = None
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in names:
            idx = names.index(node.name.lower())
        elif node.sql("duckdb") in texts:
            idx = texts.index(node.sql("duckdb"))
        elif isinstance(node, exp.Literal) and not node.is_string:
            n = int(node.name)
            idx = n - 1 if 1 <= n <= len(items) else None
        elif isinstance(node, exp.Column):
            alias, i = b._resolve(node)
            idx = var_pos.get(b.var_of(alias, i))
        else:
            idx = _computed_key(b, node, names, texts, var_pos, types)
        if idx is None:
            raise ExprError(node, f"ORDER BY {node.sql()!r}: order by a column of the "
                                  "output (its name, position or expression)")
        desc = bool(o.args.get("desc")) if isinstance(o, exp.Ordered) else False
        nulls_first = bool(o.args.get("nulls_first")) if isinstance(o, exp.Ordered) \
            else False
        out.append((idx, desc, nulls_first))
    return tuple(out)


def _computed_key(b: Builder, node: exp.Expr, names: list[str], texts: list[str],
                  var_pos: dict[str, int], types: list[SqlType] | None) -> ComputedKey:
    """ORDER BY expression ``node`` over the output row (``row[i]``), each of its
    subexpressions that is an output column read from it."""
    if types is None:
        raise ExprError(node, f"ORDER BY {node.sql()!r}: order by a column of the "
                              "output (its name, position or expression)")

    def column(i: int) -> Code:
        return Code(f"row[{i}]", types[i], True, simple=True)

    def resolve(sub: exp.Expr) -> Code | None:
        text = sub.sql("duckdb")
        if text in texts and (column_refs(sub) or sub.find(exp.AggFunc) is not None):
            return column(texts.index(text))
        if isinstance(sub, exp.Column) and not isinstance(sub.this, exp.Star):
            i: int | None = None
            try:
                alias, k = b._resolve(sub)
                i = var_pos.get(b.var_of(alias, k))
            except QueryError:
                pass
            if i is None and not sub.table and sub.name.lower() in names:
                i = names.index(sub.name.lower())
            if i is None:
                raise ExprError(sub, f"ORDER BY {node.sql()!r} reads {sub.sql()!r}, which "
                                     "is not an output column: order by a column of the "
                                     "output (its name, position or expression)")
            return column(i)
        if isinstance(sub, (*AGGREGATES, exp.Window)):
            raise ExprError(sub, f"ORDER BY {node.sql()!r}: {sub.sql()!r} is not an "
                                 "output column: order by a column of the output (its "
                                 "name, position or expression)")
        return None

    env: dict[str, Any] = {}
    code = ExprCompiler(env, resolve).value(node)
    return ComputedKey(code.src, node.sql("duckdb"), env)


def output_sql_types(b: Builder, columns: list[OutputColumn], aggregates: list[Aggregate],
                     post: PostMap | None) -> list[SqlType]:
    """The static type of each output column (:func:`output_types` before DDL)."""
    if post is not None and post.types:
        return list(post.types)
    return [var_type(b, c.var) if c.var is not None
            else aggregate_type(aggregates[c.aggregate])
            if c.aggregate is not None else SqlType("NULL")
            for c in columns if not c.name.startswith("\0")]


def aggregate(b: Builder, node: exp.Expr, var_of: object, rels: dict[str, Relation]) -> Aggregate:
    assert callable(var_of)
    arg = node.this
    if isinstance(node, exp.Count) and isinstance(arg, exp.Star):
        return Aggregate("count_star", None, "INT")
    if isinstance(arg, exp.Column):
        alias, idx = b._resolve(arg)
        col = rels[alias].columns[idx]
        v = var_of(alias, idx)
        t = SqlType.of_column(col)
    else:
        v, t = b._derive(arg)
    if isinstance(node, exp.Count):
        return Aggregate("count", v, "INT")
    if not t.numeric:
        name = "SUM" if isinstance(node, exp.Sum) else "AVG"
        raise ExprError(node, f"{name} over {t.name}: {name} needs a number")
    if isinstance(node, exp.Sum):
        return Aggregate("sum", v, t.name if t.name != "NULL" else "INT", t.scale)
    return Aggregate("avg", v, "FLOAT")
