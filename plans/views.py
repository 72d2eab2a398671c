"""A query as a DAG of maintained views: what :mod:`plans.sql` cannot flatten into one
join block (a derived table, WITH or ``CREATE VIEW`` that aggregates; an ``EXISTS``,
``IN`` or scalar subquery, which sqlglot's unnesting turns into a grouped derived table
joined to the query) becomes an inner view, a SELECT tree of the file's one parse; the
query reads it as a table. Each view is compiled on its own (any class, planned as
usual); an epoch's consolidated delta of a view is the update stream of the views that
read it, in the same epoch (:mod:`dataflow.circuit.views`).

Example:
    >>> from plans.sqlparse import parse_file
    >>> split = split_views(parse_file('''CREATE TABLE R(a INT, b INT);
    ...     SELECT a FROM R WHERE b > (SELECT AVG(b) FROM R)''', "q.sql"))
    >>> [name for name, _ in split.views], split.query.sql("duckdb")
    (['_u_0', '_tv_0', '_tf_0'], 'SELECT _tf_0._c0 AS a FROM _tf_0 AS _tf_0')
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from sqlglot import exp

from core.errors import QueryError
from plans.expr import ExprError
from plans.outerjoin import KeyedView, rewrite_outer_joins
from plans.sqlcheck import describe
from plans.sqlparse import ParsedQuery, normalize, offset_of
from plans.threshold import ScalarShape, ThresholdFilter, rewrite_thresholds, scalar_view

View = exp.Select | KeyedView | ThresholdFilter
"""An inner view: a SELECT tree, or a node over the views before it."""


@dataclass(frozen=True)
class ViewSplit:
    """The inner views (name, :data:`View`), in an order where a view only reads base
    tables and views before it, and the query's SELECT over them; ``file`` is the
    parsed query file (its text, source and base tables)."""

    file: ParsedQuery
    views: tuple[tuple[str, View], ...]
    query: exp.Select


def split_views(parsed: ParsedQuery, names: Iterator[int] | None = None, tag: str = "",
                scalars: dict[str, ScalarShape] | None = None) -> ViewSplit | None:
    """The views of a checked query, or None when it is one join block (no views).
    ``parsed.select`` is left as it was (the split works on a copy). Where several
    queries' views share one plan (the items of :mod:`plans.setops`), ``names`` numbers
    the views made here and ``tag`` is appended to the names of the views the
    optimizer made (derived tables, subqueries), so that no two share a name;
    ``scalars``, the shapes of such queries' views before this one that have one value
    (per key): a comparison with one becomes a threshold view here too."""
    select, sql, source = parsed.select, parsed.text, parsed.source
    nested = any(True for _ in select.find_all(exp.Subquery, exp.Exists, exp.With)) or any(
        (j.args.get("side") or "") for sel in select.find_all(exp.Select)
        for j in sel.args.get("joins") or [])
    if not nested:
        return None
    try:
        out = normalize(select, parsed.schema, sql, source, views=True)
        if tag:
            _tag_views(out, tag)
        names = names if names is not None else itertools.count()
        inner: list[tuple[str, View]] = []
        scalars = dict(scalars or {})
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
            if not isinstance(body, exp.Select):
                raise ExprError(body, "a view must be one SELECT")
            inner.append((cte.alias, body.copy()))
        inner += [(kv.name, kv) for kv in rewrite_outer_joins(out, names)]
        inner += rewrite_thresholds(out, scalars, names)
    except ExprError as err:
        raise QueryError(describe([(offset_of(err.node), "expression", str(err))],
                                  sql, source)) from None
    if not inner:
        return None
    out = out.copy()
    out.set("with_", None)
    return ViewSplit(parsed, tuple(inner), out)


def _tag_views(select: exp.Select, tag: str) -> None:
    """Rename the WITH views of a normalized SELECT (in place): ``v`` -> ``v<tag>``, in
    their definitions and in every table that reads them (a WITH shadows a table of
    its name, so every such table reads it); aliases stay, so columns still resolve."""
    with_ = select.args.get("with_")
    if with_ is None:
        return
    renamed = {cte.alias.lower(): f"{cte.alias}{tag}" for cte in with_.expressions}
    for cte in with_.expressions:
        cte.args["alias"].set("this", exp.to_identifier(renamed[cte.alias.lower()]))
    for table in select.find_all(exp.Table):
        new = renamed.get(table.name.lower())
        if new is not None and not table.args.get("db"):
            if not table.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", exp.to_identifier(new))
