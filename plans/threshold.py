"""A comparison with an uncorrelated scalar subquery as a *threshold view*, so that a
moving scalar costs the rows it flips, not all rows.

sqlglot's unnesting turns ``WHERE e > (SELECT AVG(b) FROM R)`` into a cross join with a
one-row view ``_u_0`` and the conjunct ``e > _u_0._col_0`` (in HAVING:
``agg > MAX(_u_0._col_0)``). Joined like that, every change of the scalar re-tests
every row: an epoch costs O(|rows|) (TPC-H Q11, Q15 and Q22 pay it whenever a customer,
supplier or partsupp row changes). Rewritten here, the query becomes

- a view ``_tv_n``: the query's rows without the scalar (for a WHERE comparison: the
  columns the rest of the query reads; for HAVING: its groups), with the compared value
  ``e`` as the last column ``_thr``;
- a :class:`ThresholdFilter` ``_tf_n``: the rows of ``_tv_n`` whose ``_thr`` compares
  true with the scalar, kept ordered by ``_thr`` (:mod:`operators.threshold`): when the
  scalar moves from s to s', only the rows with ``_thr`` between s and s' change;
- the query over ``_tf_n`` (the rest of it: SELECT, GROUP BY, ORDER BY, LIMIT).

A correlated scalar (unnested into a view grouped by its correlation keys, joined on
them: ``JOIN _u_0 ON _u_0._u_1 = part.p_partkey``) is a threshold per key: the rows view
carries the expressions its keys are joined with as its first columns ``_k0``, ...
(TPC-H Q2, Q17, Q20).

Anything else (the scalar read elsewhere, more than one comparison with it, a FROM
shape it cannot take apart) is left as it was: correct, only slower.

Example:
    >>> import itertools, sqlglot
    >>> q = sqlglot.parse_one("SELECT r.a AS a FROM r AS r CROSS JOIN _u_0 AS _u_0 "
    ...                       "WHERE r.b > _u_0._col_0 AND r.a > 0")
    >>> views = rewrite_thresholds(q, {"_u_0": ScalarShape("_col_0")}, itertools.count())
    >>> print(views[0][1])
    SELECT r.a AS _c0, r.b AS _thr FROM r AS r WHERE r.a > 0
    >>> views[1][1].op, q.sql()
    ('>', 'SELECT _tf_0._c0 AS a FROM _tf_0 AS _tf_0')
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlglot import exp

VALUE = "_thr"
"""The compared value's column: the last one of the rows view."""

_OPS: dict[type[exp.Expr], str] = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<",
                                   exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class ThresholdFilter:
    """The rows of view ``source`` (its last column the compared value) for which
    ``value op scalar`` is TRUE, ``scalar`` being the one column of the one-row view
    ``scalar`` (no row, or NULL: no row passes)."""

    name: str
    source: str
    scalar: str
    op: str
    keys: tuple[str, ...] = ()
    """A correlated scalar's key columns (in ``scalar``, matched in order with the rows
    view's first columns ``_k0``, ...): one scalar per key, a row compared with its
    key's (no row for its key, or a NULL in it: it passes nothing)."""
    value: str = "_col_0"
    """The scalar's column in ``scalar``."""


@dataclass(frozen=True)
class ScalarShape:
    """A view with at most one row per key: its value column and key columns (none:
    exactly one row)."""

    value: str
    keys: tuple[str, ...] = ()


def scalar_view(body: exp.Expr) -> ScalarShape | None:
    """A view body's shape when it has one value per key: an aggregate without GROUP BY
    (one row; what uncorrelated scalar subqueries become), or one aggregate grouped by
    the other output columns (a correlated scalar, decorrelated); else None."""
    if not isinstance(body, exp.Select) or body.find(exp.Window) is not None or any(
            body.args.get(k) for k in ("having", "limit", "offset", "distinct", "with_",
                                       "with")):
        return None
    aggs = [e for e in body.expressions if e.find(exp.AggFunc) is not None]
    if len(aggs) != 1 or not all(isinstance(e, exp.Alias) for e in body.expressions):
        return None
    group = body.args.get("group")
    keys = [e for e in body.expressions if e is not aggs[0]]
    if group is None:
        return ScalarShape(aggs[0].alias) if not keys else None
    grouped = list(group.expressions)
    if len(grouped) != len(keys) or any(k.this not in grouped for k in keys):
        return None
    return ScalarShape(aggs[0].alias, tuple(k.alias for k in keys))


def rewrite_thresholds(select: exp.Select, scalars: dict[str, ScalarShape],
                       names: Iterator[int]) -> list[tuple[str, exp.Select | ThresholdFilter]]:
    """Rewrite ``select`` (qualified, in place) over a threshold view when it compares
    with one of the views ``scalars`` (name -> shape) as the module says; return the new
    views (the rows view's SELECT, then the filter), or [] and leave it unchanged."""
    found = _find(select, {s.lower(): shape for s, shape in scalars.items()})
    if found is None:
        return []
    join, conjunct, where, value, op, scalar_side, key_exprs, shape = found
    aliases = [e.alias_or_name for e in select.expressions]
    order = select.args.get("order")
    ordered: list[tuple[exp.Expr, str | None]] = []
    if not where and order is not None:
        # (the query over the filter orders by its columns: an ORDER BY key must be an
        # output column or the expression of one)
        for o in order.expressions:
            key = o.this
            if isinstance(key, exp.Column) and not key.table and \
                    key.name.lower() in {a.lower() for a in aliases}:
                ordered.append((key, None))
                continue
            hit = next((a for a, e in zip(aliases, select.expressions)
                        if (e.this if isinstance(e, exp.Alias) else e) == key), None)
            if hit is None:
                return []
            ordered.append((key, hit))
    n = next(names)
    rows_name, filter_name = f"_tv_{n}", f"_tf_{n}"
    body = select.copy()
    body.set("with_", None)
    body.set("joins", [j.copy() for j in select.args["joins"] if j is not join] or None)
    body.set("order", None)
    body.set("limit", None)
    body.set("offset", None)
    rest = [c.copy() for c in _conjuncts(select.args.get("where" if where else "having"))
            if c is not conjunct]
    clause = exp.Where if where else exp.Having
    body.set("where" if where else "having", clause(this=exp.and_(*rest)) if rest else None)
    if where:
        # The rows view carries the columns the rest of the query reads; the query
        # reads them from the filter, under its name.
        outside = [c for part in ("expressions", "group", "having", "order")
                   for c in _columns(select.args.get(part)) if c.table]  # (bare: an alias)
        mapping: dict[tuple[str, str], str] = {}
        for c in outside:
            mapping.setdefault((c.table.lower(), c.name.lower()), f"_c{len(mapping)}")
        cols = {(c.table.lower(), c.name.lower()): c for c in outside}
        body.set("expressions", [exp.alias_(e.copy(), f"_k{i}", quoted=False)
                                 for i, e in enumerate(key_exprs)]
                 + [exp.alias_(cols[k].copy(), a, quoted=False) for k, a in mapping.items()]
                 + [exp.alias_(value.copy(), VALUE, quoted=False)])
        for part in ("group", "having"):
            body.set(part, None)
        body.set("distinct", None)
        for e in select.expressions:  # (the query's column names stay as they were)
            if not isinstance(e, exp.Alias):
                e.replace(exp.alias_(e.copy(), e.alias_or_name, quoted=False))
        for c in list(_columns(select)):
            key = (c.table.lower(), c.name.lower())
            if key in mapping and c.table:
                c.replace(exp.column(mapping[key], filter_name))
        select.set("where", None)
    else:
        body.set("expressions", [e.copy() for e in select.expressions]
                 + [exp.alias_(value.copy(), VALUE, quoted=False)])
        for key, hit in ordered:
            if hit is not None:
                key.replace(exp.column(hit))
        select.set("expressions", [exp.alias_(exp.column(a, filter_name), a, quoted=False)
                                   for a in aliases])
        for part in ("where", "group", "having"):
            select.set(part, None)
    select.set("from_", exp.From(this=exp.to_table(filter_name).as_(filter_name)))
    select.set("joins", None)
    scalar = join.this.name
    views: list[tuple[str, exp.Select | ThresholdFilter]] = [(rows_name, body)]
    if not isinstance(scalar_side, exp.Column):
        # (``e > (SELECT ...) * 2``: the scalar's expression is a one-row view itself)
        views.append((f"_ts_{n}", exp.select(exp.alias_(scalar_side, "_col_0", quoted=False))
                      .from_(join.this.copy())))
        scalar = f"_ts_{n}"
    return [*views, (filter_name, ThresholdFilter(filter_name, rows_name, scalar, op,
                                                  shape.keys, shape.value))]


def _find(select: exp.Select, scalars: dict[str, ScalarShape]) -> tuple[
        exp.Join, exp.Expr, bool, exp.Expr, str, exp.Expr, list[exp.Expr], ScalarShape] | None:
    """(the scalar's join, the comparison, whether in WHERE, the compared value, op
    (value op scalar), the scalar side: an expression of the scalar's column, the
    expressions its keys are joined with, its shape)."""
    if not isinstance(select, exp.Select) or select.args.get("distinct") or \
            select.find(exp.Window) is not None or any(
                isinstance(e, exp.Star) or isinstance(e.this, exp.Star)
                for e in select.expressions):
        return None
    for join in select.args.get("joins") or []:
        t = join.this
        shape = scalars.get(t.name.lower()) if isinstance(t, exp.Table) else None
        if shape is None or join.args.get("using") or join.args.get("side"):
            continue
        alias = t.alias_or_name.lower()
        kind = (join.args.get("kind") or "").upper()
        on = join.args.get("on")
        key_exprs: list[exp.Expr] = []
        if not shape.keys:
            if on is not None or kind not in ("", "CROSS"):
                continue
        else:
            # (a correlated scalar is joined on its keys, each equated with an
            # expression of the other FROM items, and on nothing else)
            if on is None or kind not in ("", "INNER"):
                continue
            by_key: dict[str, exp.Expr] = {}
            for c in _conjuncts(exp.Where(this=on)):
                pair = _key_equality(c, alias)
                if pair is None or pair[0] in by_key:
                    break
                by_key[pair[0]] = pair[1]
            else:
                if set(by_key) == {k.lower() for k in shape.keys}:
                    key_exprs = [by_key[k.lower()] for k in shape.keys]
            if not key_exprs:
                continue
        refs = [c for c in _columns(select) if c.table.lower() == alias
                and (on is None or c not in set(on.find_all(exp.Column)))]
        if len(refs) != 1 or refs[0].name.lower() != shape.value.lower():
            continue
        for where in (True, False) if not shape.keys else (True,):
            for conj in _conjuncts(select.args.get("where" if where else "having")):
                op = _OPS.get(type(conj))
                if op is None or refs[0] not in set(conj.find_all(exp.Column)):
                    continue
                sides = [conj.this, conj.expression]
                i = 0 if refs[0] in set(conj.this.find_all(exp.Column)) else 1
                side, value = sides[i].copy(), sides[1 - i]
                if not where:
                    # (HAVING reads the scalar through an aggregate of its one row)
                    for agg in list(side.find_all(exp.Max, exp.Min, exp.AnyValue)):
                        if isinstance(agg.this, exp.Column) and agg.this.table.lower() == alias:
                            if agg is side:
                                side = agg.this
                            else:
                                agg.replace(agg.this)
                if side.find(exp.AggFunc) is not None or any(
                        c.table.lower() != alias for c in _columns(side)):
                    return None
                if shape.keys and not isinstance(side, exp.Column):
                    return None
                if any(c.table.lower() == alias for c in _columns(value)):
                    return None
                if where and value.find(exp.AggFunc) is not None:
                    return None
                if not where and not (select.args.get("group") or
                                      value.find(exp.AggFunc) is not None):
                    return None
                return (join, conj, where, value, op if i == 1 else _FLIP[op], side,
                        key_exprs, shape)
    return None


def _key_equality(c: exp.Expr, alias: str) -> tuple[str, exp.Expr] | None:
    """``alias.k = e`` (either way round, e not reading alias) as (k, e)."""
    if not isinstance(c, exp.EQ):
        return None
    for mine, other in ((c.this, c.expression), (c.expression, c.this)):
        if isinstance(mine, exp.Column) and mine.table.lower() == alias and not any(
                x.table.lower() == alias for x in _columns(other)):
            return mine.name.lower(), other
    return None


def _conjuncts(clause: exp.Expr | None) -> list[exp.Expr]:
    if clause is None:
        return []
    cond = clause.this
    while isinstance(cond, exp.Paren):
        cond = cond.this
    return list(cond.flatten()) if isinstance(cond, exp.And) else [cond]


def _columns(node: exp.Expr | list[exp.Expr] | None) -> list[exp.Column]:
    if node is None:
        return []
    nodes = node if isinstance(node, list) else [node]
    return [c for n in nodes for c in n.find_all(exp.Column)
            if not isinstance(c.this, exp.Star)]
