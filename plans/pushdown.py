"""Constants pushed into the WITHs they select from: ``WHERE x.k = 2000`` over a WITH
``x`` read once, whose ``k`` is a grouping key (or a plain column of a SELECT without
aggregates), becomes a condition of ``x``'s own WHERE too, and so does every column
equated to ``x.k`` by an inner or LEFT JOIN's ``ON`` (the nullable side's rows that do
not match a kept row change nothing). The WITH is then maintained over the rows the
query can read, not over all of them: TPC-DS Q78's three channels' per-(year, item,
customer) sums over every year, where its WHERE keeps one year.

The outer condition stays where it was (it is now redundant, not wrong). Anything this
cannot read plainly (a RIGHT or FULL join, a WITH read twice or a set operation, a key
that is an aggregate or a window) is left as it is.

Example:
    >>> import sqlglot
    >>> q = sqlglot.parse_one(
    ...     "WITH s AS (SELECT d_year AS y, item, SUM(q) AS n FROM t GROUP BY d_year, item), "
    ...     "w AS (SELECT d_year AS wy, item AS wi, SUM(q) AS m FROM u GROUP BY d_year, item) "
    ...     "SELECT s.item, n, m FROM s LEFT JOIN w ON w.wy = s.y AND w.wi = s.item "
    ...     "WHERE s.y = 2000", read="duckdb")
    >>> print(push_constants_into_withs(q).sql())  # doctest: +NORMALIZE_WHITESPACE
    WITH s AS (SELECT d_year AS y, item, SUM(q) AS n FROM t WHERE d_year = 2000
    GROUP BY d_year, item), w AS (SELECT d_year AS wy, item AS wi, SUM(q) AS m FROM u
    WHERE d_year = 2000 GROUP BY d_year, item) SELECT s.item, n, m FROM s LEFT JOIN w
    ON w.wy = s.y AND w.wi = s.item WHERE s.y = 2000
"""

from __future__ import annotations

from collections import Counter

from sqlglot import exp

from plans.expr import conjuncts
from plans.sqlparse import ParsedQuery

__all__ = ["push_constants", "push_constants_into_withs"]


def push_constants(parsed: ParsedQuery) -> ParsedQuery:
    """``parsed`` with its SELECT rewritten by :func:`push_constants_into_withs`
    (itself when nothing is pushed)."""
    pushed = push_constants_into_withs(parsed.select)
    if pushed is parsed.select:
        return parsed
    assert isinstance(pushed, exp.Select)
    return ParsedQuery(parsed.text, parsed.source, parsed.schema, pushed)


def push_constants_into_withs(select: exp.Expr) -> exp.Expr:
    """``select`` (a copy, changed) with the constants of its WHERE pushed into the
    WITHs it reads (module docstring); ``select`` itself when nothing is pushed."""
    if not isinstance(select, exp.Select) or not select.args.get("with_"):
        return select
    ctes = {c.alias_or_name.lower(): c for c in select.args["with_"].expressions}
    reads = Counter(t.name.lower() for t in select.find_all(exp.Table)
                    if not t.args.get("db") and t.name.lower() in ctes)
    sources = _sources(select)
    if sources is None:
        return select
    known: dict[tuple[str, str], exp.Literal] = {}
    """(source alias, column) -> the constant the WHERE holds it to"""
    where = select.args.get("where")
    for cond in conjuncts(where.this) if where is not None else []:
        pair = _column_equals_constant(cond)
        if pair is not None:
            held = _resolve(pair[0], sources, ctes)
            if held is not None and not sources[held[0]][1]:
                known.setdefault(held, pair[1])
    for alias, (_name, _nullable, on) in sources.items():
        for cond in conjuncts(on) if on is not None else []:
            if not (isinstance(cond, exp.EQ) and isinstance(cond.this, exp.Column)
                    and isinstance(cond.expression, exp.Column)):
                continue
            a = _resolve(cond.this, sources, ctes)
            b = _resolve(cond.expression, sources, ctes)
            if a is None or b is None:
                continue
            # (the ON of the source joined here: its own columns get the constant)
            for mine, other in ((a, b), (b, a)):
                if mine[0] == alias and other in known:
                    known.setdefault(mine, known[other])
    pushed = select.copy()
    new_ctes = {c.alias_or_name.lower(): c for c in pushed.args["with_"].expressions}
    changed = False
    for (alias, column), value in known.items():
        name = sources[alias][0]
        if name is None or reads[name] != 1:
            continue
        body = new_ctes[name].this
        key = _key_expression(body, column)
        if key is not None:
            body.where(exp.EQ(this=key.copy(), expression=value.copy()), copy=False)
            changed = True
    return pushed if changed else select


Source = tuple[str | None, bool, exp.Expr | None]
"""Per FROM alias: the WITH it reads (None: a table or subquery), whether it is the
nullable side of a LEFT JOIN, and its join's ON."""


def _sources(select: exp.Select) -> dict[str, Source] | None:
    """The FROM and JOIN items by alias; None if a RIGHT or FULL join (or a join without
    ON, or an item without a name) makes the reading less plain than this rule needs."""
    items: list[tuple[exp.Expr, bool, exp.Expr | None]] = []
    from_ = select.args.get("from_")
    if from_ is None:
        return None
    items.append((from_.this, False, None))
    for join in select.args.get("joins") or []:
        side = (join.side or "").upper()
        if side in ("RIGHT", "FULL") or (join.kind or "").upper() in ("CROSS", "SEMI", "ANTI"):
            return None
        items.append((join.this, side == "LEFT", join.args.get("on")))
    out: dict[str, Source] = {}
    for item, nullable, on in items:
        alias = item.alias_or_name.lower()
        if not alias or alias in out:
            return None
        name = item.name.lower() if isinstance(item, exp.Table) and not item.args.get("db") \
            else None
        out[alias] = (name, nullable, on)
    return out


def _column_equals_constant(cond: exp.Expr) -> tuple[exp.Column, exp.Literal] | None:
    if not isinstance(cond, exp.EQ):
        return None
    for col, lit in ((cond.this, cond.expression), (cond.expression, cond.this)):
        if isinstance(col, exp.Column) and isinstance(lit, exp.Literal):
            return col, lit
    return None


def _resolve(col: exp.Column, sources: dict[str, Source],
             ctes: dict[str, exp.CTE]) -> tuple[str, str] | None:
    """(alias, column name) of a column of one of the WITHs read, else None (a table's
    column, an unknown or ambiguous name)."""
    name = col.name.lower()
    if col.table:
        alias = col.table.lower()
        return (alias, name) if alias in sources and sources[alias][0] in ctes else None
    owners = [a for a, (cte, _n, _on) in sources.items()
              if cte is not None and cte in ctes and name in _outputs(ctes[cte])]
    return (owners[0], name) if len(owners) == 1 and all(
        s[0] is not None and s[0] in ctes for s in sources.values()) else None


def _outputs(cte: exp.CTE) -> set[str]:
    body = cte.this
    if not isinstance(body, exp.Select):
        return set()
    return {e.alias_or_name.lower() for e in body.expressions}


def _key_expression(body: exp.Expr, column: str) -> exp.Expr | None:
    """The expression behind output ``column`` of a WITH's SELECT where a condition on
    it may move into that SELECT's WHERE: a grouping key of a grouped SELECT, any
    column of one without aggregates; never an aggregate, a window or a subquery, nor
    anything of a SELECT with a LIMIT, a DISTINCT ON, windows or grouping sets."""
    if not isinstance(body, exp.Select) or body.args.get("with_") or any(
            body.args.get(a) for a in ("limit", "offset", "qualify", "having")):
        return None
    if isinstance(body.args.get("distinct"), exp.Distinct) and body.args["distinct"].args.get("on"):
        return None
    if body.find(exp.Window) is not None:
        return None
    group = body.args.get("group")
    if group is not None and any(group.args.get(a) for a in ("rollup", "cube", "grouping_sets")):
        return None
    for item in body.expressions:
        if item.alias_or_name.lower() != column:
            continue
        expr = item.this if isinstance(item, exp.Alias) else item
        if isinstance(expr, exp.Star) or expr.find(exp.AggFunc, exp.Subquery, exp.Select):
            return None
        if group is not None:
            keys = {g.sql("duckdb").lower() for g in group.expressions}
            return expr if expr.sql("duckdb").lower() in keys else None
        if any(e.find(exp.AggFunc) for e in body.expressions):
            return None  # (an aggregate without GROUP BY: one row, its inputs unfiltered)
        return expr
    return None
