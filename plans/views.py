"""A query as a DAG of maintained views: what :mod:`plans.sql` cannot flatten into one
join block (a derived table, WITH or ``CREATE VIEW`` that aggregates; an ``EXISTS``,
``IN`` or scalar subquery, which sqlglot's unnesting turns into a grouped derived table
joined to the query) becomes an inner view with its own SQL text; the query reads it as
a table. Each view is compiled on its own (any class, planned as usual); an epoch's
consolidated delta of a view is the update stream of the views that read it, in the
same epoch (:mod:`dataflow.views`).

Example:
    >>> split = split_views('''CREATE TABLE R(a INT, b INT);
    ...     SELECT a FROM R WHERE b > (SELECT AVG(b) FROM R)''', "q.sql")
    >>> [name for name, _ in split.views], split.query
    (['_u_0', '_tv_0', '_tf_0'], 'SELECT _tf_0._c0 AS a FROM _tf_0 AS _tf_0')
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sqlglot import exp

from core.errors import QueryError
from plans.expr import ExprError
from plans.outerjoin import KeyedView, rewrite_outer_joins
from plans.sql import _normalize, _offset_of, parse_schema_and_select, parse_statements
from plans.sqlcheck import check_supported, describe
from plans.threshold import ScalarShape, ThresholdFilter, rewrite_thresholds, scalar_view


@dataclass(frozen=True)
class ViewSplit:
    """The inner views (name, SELECT text or a :class:`~plans.outerjoin.KeyedView`, an
    outer join's side), in an order where a view only reads base tables and views
    before it, and the query's SELECT over them; ``tables`` is the
    file's CREATE TABLE text (each view file starts with it, then one CREATE TABLE per
    view it reads, typed by that view's output)."""

    tables: str
    views: tuple[tuple[str, str | KeyedView | ThresholdFilter], ...]
    query: str


def split_views(sql: str, source: str) -> ViewSplit | None:
    """The views of a query file, or None when it is one join block (no views)."""
    views: list[exp.Create] = []
    schema, select = parse_schema_and_select(sql, source, views)
    statements = parse_statements(sql, source)
    # CREATE VIEW v [(cols)] AS SELECT ...: as WITH v AS (...) on the query. (Every
    # node keeps its place in the file: errors point into the user's text.)
    for v in views:  # (in file order: a view may read the views before it)
        target = v.this
        name = target.this.name if isinstance(target, exp.Schema) else target.name
        columns = [c.name for c in target.expressions] if isinstance(
            target, exp.Schema) else []
        body = v.expression
        select = select.with_(name, as_=body, copy=False) if not columns else \
            select.with_(f"{name}({', '.join(columns)})", as_=body, copy=False)
    sql_for_positions = sql
    check_supported(select, sql_for_positions, source)
    nested = any(True for _ in select.find_all(exp.Subquery, exp.Exists, exp.With)) or any(
        (j.args.get("side") or "") for sel in select.find_all(exp.Select)
        for j in sel.args.get("joins") or [])
    if not nested:
        return None
    try:
        out = _normalize(select, schema, sql_for_positions, source, views=True)
        names = itertools.count()
        inner: list[tuple[str, str | KeyedView | ThresholdFilter]] = []
        scalars: dict[str, ScalarShape] = {}
        """the views so far with one value (per key): a comparison with one becomes a
        threshold view"""
        with_ = out.args.get("with_")
        for cte in with_.expressions if with_ is not None else []:
            body = cte.this
            inner += [(kv.name, kv) for kv in rewrite_outer_joins(body, names)]
            if isinstance(body, exp.Select):
                inner += rewrite_thresholds(body, scalars, names)
            shape = scalar_view(body)
            if shape is not None:
                scalars[cte.alias] = shape
            inner.append((cte.alias, body.sql("duckdb")))
        inner += [(kv.name, kv) for kv in rewrite_outer_joins(out, names)]
        inner += rewrite_thresholds(out, scalars, names)
    except ExprError as err:
        raise QueryError(describe([(_offset_of(err.node), "expression", str(err))],
                                  sql_for_positions, source)) from None
    if not inner:
        return None
    out = out.copy()
    out.set("with_", None)
    tables = ";\n".join(s.sql("duckdb") for s in statements
                        if isinstance(s, exp.Create) and
                        str(s.args.get("kind", "")).upper() == "TABLE")
    return ViewSplit(tables + ";\n", tuple(inner), out.sql("duckdb"))

