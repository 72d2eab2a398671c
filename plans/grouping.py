"""Grouping sets (``GROUP BY ROLLUP(...)``, ``CUBE(...)``, ``GROUPING SETS (...)`` and
``GROUPING()``) as a UNION ALL of one plain ``GROUP BY`` per grouping set, which
:mod:`plans.setops` lifts into views and :mod:`operators.setop` maintains: k grouping
sets are k aggregates maintained side by side, their deltas summed.

:func:`expand_grouping_sets` is one rewrite, a sqlglot expression to an expression.
Each SELECT whose ``GROUP BY`` holds grouping sets becomes, per set (in the order SQL
lists them: ``ROLLUP(a, b)`` is ``(a, b), (a), ()``; several elements of a ``GROUP BY``
combine as their cross product, duplicate sets kept, as DuckDB does), a branch:

* ``GROUP BY`` that set's expressions (none: an aggregate over all rows, one row even
  over no rows, as DuckDB gives the empty set);
* outside aggregates, a grouping expression not in the set is ``NULL`` (a select item
  that becomes NULL keeps its name and takes the other branches' type where the set
  operation unifies them), ``GROUPING(x, ...)`` the constant bit mask of the set (bit
  1 where ``x`` is not grouped, the first argument the most significant: DuckDB's
  definition; BIGINT), in the select list and ``HAVING`` (applied per branch);
* ``SELECT DISTINCT`` is a ``UNION`` of the branches instead.

``ORDER BY``, ``LIMIT``, ``OFFSET`` and ``WITH`` go on ``SELECT * FROM (<the union>)
AS _gs`` (so does the file's top-level SELECT), each ``ORDER BY`` term that is a select
item (its expression or name) ordering by that output column. A ``GROUPING()`` alone
(a plain ``GROUP BY``: 0) is a constant the same way. Window functions beside grouping
sets apply over the union (SQL computes them after the grouping): the grouped SELECT
becomes a derived table holding the window functions' inputs, the windows a SELECT over
it (:func:`_windowed`; TPC-DS Q70, Q86). Refused with the node: a ``GROUPING()``
argument that is not a grouping expression, ``GROUPING()`` outside the select list,
``HAVING`` and ``ORDER BY``, ``QUALIFY`` in the same SELECT, more than
:data:`MAX_SETS` sets.

A grouped SELECT that reads no outer column (the file's own, one in a derived table
or in the file's WITH: :func:`_liftable`) reads its grouping sets from one base where
its aggregates roll up (:func:`_rollup_base`): a WITH of the file's, ``_gs_base``
(``_gs_base1``, ... for the next ones), aggregates the FROM once by every grouping
expression, and each branch aggregates that base, so the FROM's joins and subqueries
are maintained once, not once per set.

Example:
    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT a, b, GROUPING(a, b) AS g, SUM(c) AS s FROM t "
    ...                       "GROUP BY ROLLUP(a, b)", read="duckdb")
    >>> print(expand_grouping_sets(q).sql())  # doctest: +NORMALIZE_WHITESPACE
    WITH _gs_base AS (SELECT a AS _gk0, b AS _gk1, SUM(c) AS _ga0 FROM t GROUP BY a, b)
    SELECT * FROM (SELECT _gk0 AS a, _gk1 AS b, CAST(0 AS BIGINT) AS g, SUM(_ga0) AS s
    FROM _gs_base GROUP BY _gk0, _gk1 UNION ALL SELECT _gk0 AS a, NULL AS b,
    CAST(1 AS BIGINT) AS g, SUM(_ga0) AS s FROM _gs_base GROUP BY _gk0 UNION ALL
    SELECT NULL AS a, NULL AS b, CAST(3 AS BIGINT) AS g, SUM(_ga0) AS s FROM _gs_base)
    AS _gs

    In a derived table, the base goes to the file's WITH (TPC-DS Q67's rollup under
    a rank); in a subquery that may read outer columns, a branch per set:

    >>> q = sqlglot.parse_one("SELECT * FROM (SELECT a, SUM(c) AS s FROM t "
    ...                       "GROUP BY ROLLUP(a)) x", read="duckdb")
    >>> print(expand_grouping_sets(q).sql())  # doctest: +NORMALIZE_WHITESPACE
    WITH _gs_base AS (SELECT a AS _gk0, SUM(c) AS _ga0 FROM t GROUP BY a) SELECT * FROM
    (SELECT _gk0 AS a, SUM(_ga0) AS s FROM _gs_base GROUP BY _gk0 UNION ALL
    SELECT NULL AS a, SUM(_ga0) AS s FROM _gs_base) AS x
    >>> q = sqlglot.parse_one("SELECT * FROM u WHERE u.v IN (SELECT SUM(c) AS s FROM t "
    ...                       "GROUP BY ROLLUP(a))", read="duckdb")
    >>> print(expand_grouping_sets(q).sql())  # doctest: +NORMALIZE_WHITESPACE
    SELECT * FROM u WHERE u.v IN (SELECT SUM(c) AS s FROM t GROUP BY a UNION ALL
    SELECT SUM(c) AS s FROM t)
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.optimizer.simplify import simplify

from core.errors import QueryError
from core.schema import Schema
from plans.exprtypes import ExprError, map_args
from plans.sqlcheck import describe
from plans.sqlparse import ParsedQuery, offset_of

__all__ = ["MAX_SETS", "expand_grouping", "expand_grouping_sets"]

MAX_SETS = 64
"""The most grouping sets one SELECT may expand to (``CUBE`` of six expressions): each
is an aggregate maintained beside the others."""

_SETS = (exp.Rollup, exp.Cube, exp.GroupingSets)
_OUTER = ("with_", "order", "limit", "offset")


def expand_grouping(parsed: ParsedQuery) -> ParsedQuery:
    """``parsed`` with its SELECT rewritten by :func:`expand_grouping_sets` (itself when
    it has no grouping sets nor ``GROUPING()``); a refusal names the construct and its
    place in the file."""
    if not any(True for _ in parsed.select.find_all(exp.Grouping, *_SETS)):
        return parsed
    try:
        select = expand_grouping_sets(parsed.select, parsed.schema)
    except ExprError as err:
        what = "GROUPING()" if isinstance(err.node, exp.Grouping) else "grouping sets"
        raise QueryError(describe([(offset_of(err.node), what, str(err))], parsed.text,
                                  parsed.source)) from None
    assert isinstance(select, exp.Select)
    return ParsedQuery(parsed.text, parsed.source, parsed.schema, select)


def expand_grouping_sets(expression: exp.Expr, schema: Schema | None = None) -> exp.Expr:
    """``expression`` (not changed) with every SELECT that has grouping sets or
    ``GROUPING()`` rewritten as a UNION ALL of plain ``GROUP BY``s (see the module);
    a SELECT stays a SELECT (wrapped), a nested one's place takes the union.
    ``schema`` holds the base tables (what a name in an ORDER BY may be a column of)."""
    root = expression.copy()
    ctes = {c.alias_or_name.lower() for c in root.find_all(exp.CTE)}
    tables = {} if schema is None else {
        name.lower(): frozenset(c.name.lower() for c in rel.columns)
        for name, rel in schema.relations.items() if name.lower() not in ctes}
    hoisted: list[tuple[exp.CTE | None, exp.CTE]] = []
    """Bases of grouped SELECTs below the file's, each with the file's WITH it stands
    in (None: the file's SELECT): the base goes just before it, after the WITHs that
    one may read."""
    for select in reversed(list(root.find_all(exp.Select, bfs=False))):
        group = select.args.get("group")
        sets = _sets(group) if group is not None else None
        if sets is None and select.find(exp.Grouping) is None:
            continue
        plain = list(group.expressions) if group is not None else []
        # The base is a WITH of the file's (lifted once, read by all): for the file's
        # SELECT, and for one only derived tables and the file's WITHs hold, which
        # read no outer column, so lifting them changes nothing they see.
        base_name = BASE + (str(len(hoisted)) if hoisted else "")
        host: list[exp.CTE] | None = (
            [] if base_name not in ctes and (select is root or _liftable(select, root))
            else None)
        new = _expand(select, sets if sets is not None else [plain], tables, host,
                      base_name)
        if select is root:
            if host:  # (after the file's own WITHs: the base may read them)
                _attach(new, host)
            root = new
        else:
            within = _top_cte(select, root)
            hoisted.extend((within, base) for base in host or ())
            select.replace(new)
    if hoisted:
        _attach(root, [base for within, base in hoisted if within is None])
        with_ = root.args["with_"]
        for within, base in hoisted:
            if within is not None:
                items = list(with_.expressions)
                at = next(i for i, c in enumerate(items) if c is within)
                with_.set("expressions", [*items[:at], base, *items[at:]])
    return root


def _attach(root: exp.Expr, ctes: list[exp.CTE]) -> None:
    """Append ``ctes`` to the WITH of ``root`` (the file's query), after its own."""
    with_ = root.args.get("with_") or exp.With(expressions=[])
    with_.set("expressions", [*with_.expressions, *ctes])
    root.set("with_", with_)


def _top_cte(node: exp.Expr, root: exp.Expr) -> exp.CTE | None:
    """The WITH of the file's (``root``'s) that ``node`` stands in, if any."""
    while node is not root and node.parent is not None:
        if isinstance(node, exp.CTE) and node.parent.parent is root:
            return node
        node = node.parent
    return None


def _liftable(select: exp.Select, root: exp.Expr) -> bool:
    """Whether ``select`` stands in ``root`` (a SELECT or set operation) only inside
    derived tables (a FROM's or JOIN's subquery), set-operation branches and the
    root's own WITHs: it reads no outer column (no LATERAL), and no WITH but the
    root's is in scope, so the file's WITH may hold what it reads from.

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT * FROM (SELECT a FROM t) d WHERE d.a IN "
    ...                       "(SELECT b FROM u)")
    >>> inner, where = [s for s in q.find_all(exp.Select) if s is not q]
    >>> _liftable(inner, q), _liftable(where, q)
    (True, False)
    """
    if not isinstance(root, (exp.Select, exp.SetOperation)):
        return False
    node: exp.Expr = select
    while node is not root:
        parent = node.parent
        if parent is None:
            return False
        if node is not select and isinstance(node, exp.Select) and node.args.get("with_"):
            return False  # (a WITH of its own: its names are not in the file's scope)
        if isinstance(node, exp.Subquery):
            if isinstance(parent, exp.Lateral) or not isinstance(parent, (exp.From, exp.Join)):
                return False
        elif (isinstance(node, exp.Select)
              and not isinstance(parent, (exp.Subquery, exp.SetOperation, exp.CTE))) or (
                isinstance(node, exp.CTE) and parent.parent is not root):
            return False  # (a scalar, IN or EXISTS subquery; a nested query's WITH)
        node = parent
    return True


def _sets(group: exp.Group) -> list[list[exp.Expr]] | None:
    """The grouping sets of a ``GROUP BY`` (each its expressions in order, no duplicate
    in a set), or None when it is a plain one."""
    if not any(isinstance(e, _SETS) for e in group.expressions):
        return None
    per_element = [_element_sets(e) for e in group.expressions]
    n = functools.reduce(lambda k, s: k * len(s), per_element, 1)
    if n > MAX_SETS:
        raise ExprError(group, f"{n} grouping sets: at most {MAX_SETS} per SELECT (each "
                               "is an aggregate maintained beside the others)")
    return [_distinct(list(itertools.chain.from_iterable(combo)))
            for combo in itertools.product(*per_element)]


def _element_sets(e: exp.Expr) -> list[list[exp.Expr]]:
    if isinstance(e, exp.Rollup):
        parts = [_columns(x) for x in e.expressions]
        return [list(itertools.chain.from_iterable(parts[:i]))
                for i in range(len(parts), -1, -1)]
    if isinstance(e, exp.Cube):
        parts = [_columns(x) for x in e.expressions]
        return [list(itertools.chain.from_iterable(parts[j] for j in chosen))
                for size in range(len(parts), -1, -1)
                for chosen in itertools.combinations(range(len(parts)), size)]
    if isinstance(e, exp.GroupingSets):
        return [s for x in e.expressions for s in (
            _element_sets(x) if isinstance(x, (exp.Rollup, exp.Cube)) else [_columns(x)])]
    return [_columns(e)]


def _columns(e: exp.Expr) -> list[exp.Expr]:
    """The expressions of one element of a set: ``(a, b)``, ``(a)``, ``()`` or ``a``."""
    if isinstance(e, exp.Tuple):
        return list(e.expressions)
    if isinstance(e, exp.Paren):
        return [e.this]
    if isinstance(e, _SETS):
        raise ExprError(e, f"{e.key.upper()} nested in a grouping set is not supported: "
                           "write its sets out")
    return [e]


def _distinct(exprs: list[exp.Expr]) -> list[exp.Expr]:
    out: list[exp.Expr] = []
    for e in exprs:
        if not any(_same(e, o) for o in out):
            out.append(e)
    return out


def _same(a: exp.Expr, b: exp.Expr) -> bool:
    """Whether two expressions name the same grouping expression (a column with or
    without its table)."""
    if isinstance(a, exp.Column) and isinstance(b, exp.Column):
        return a.name.lower() == b.name.lower() and (
            not a.table or not b.table or a.table.lower() == b.table.lower())
    return a == b


def _expand(select: exp.Select, sets: list[list[exp.Expr]],
            tables: dict[str, frozenset[str]] | None = None,
            host: list[exp.CTE] | None = None, base_name: str = "_gs_base"
            ) -> exp.Select | exp.Union:
    """The union of ``select``'s grouping-set branches; with ``host`` (a list the
    file's WITH takes) read from the base of :func:`_rollup_base`, whose WITH (named
    ``base_name``) is appended to ``host``."""
    for arg in ("qualify", "windows"):
        if select.args.get(arg):
            raise ExprError(select.args[arg] if arg == "qualify" else select,
                            f"{arg.upper()} beside grouping sets is not supported")
    if any(w.find_ancestor(exp.Select) is select for w in select.find_all(exp.Window)):
        return _windowed(select, sets, tables or {}, host, base_name)
    grouped = _distinct([e for s in sets for e in s])
    _check_groupings(select, grouped)
    distinct = bool(select.args.get("distinct")) and len(sets) > 1
    base = _rollup_base(select, sets, grouped, base_name) if host is not None else None
    if base is not None and host is not None:
        host.append(base.cte)
        branches = [_branch(base.select, s, base.grouped, distinct) for s in base.sets]
    else:
        branches = [_branch(select, s, grouped, distinct) for s in sets]
    body: exp.Select | exp.Union = branches[0]
    for right in branches[1:]:
        body = exp.Union(this=body, expression=right, distinct=distinct)
    outer: dict[str, exp.Expr] = {arg: select.args[arg] for arg in _OUTER
                                  if select.args.get(arg) is not None}
    if not outer and select.parent is not None:
        return body
    if len(sets) == 1:
        assert isinstance(body, exp.Select)
        for arg, value in outer.items():
            body.set(arg, _outside_aggregates(value.copy(), lambda n: _replaced(
                n, sets[0], [])) if arg == "order" else value.copy())
        return body
    wrapper = exp.select("*").from_(exp.Subquery(
        this=body, alias=exp.TableAlias(this=exp.to_identifier("_gs"))))
    for arg, value in outer.items():
        wrapper.set(arg, _ordered_by_output(value.copy(), select, tables) if arg == "order"
                    else value.copy())
    return wrapper


BASE = "_gs_base"
"""The WITH of the finest grouping's partial aggregates (:func:`_rollup_base`)."""


class _NotRollable(Exception):
    """An aggregate or expression the grouping sets cannot be rolled up from."""


@dataclass(frozen=True)
class _RollupBase:
    """A grouped SELECT read from its finest grouping: ``cte`` aggregates the FROM once
    by every grouping expression (``_gk0, _gk1, ...``) into partial aggregates
    (``_ga0, ...``); ``select`` is the original over it, each grouping expression its
    ``_gk`` column and each aggregate its roll-up of the partials; ``sets`` and
    ``grouped`` the grouping sets in those columns."""

    cte: exp.CTE
    select: exp.Select
    sets: list[list[exp.Expr]]
    grouped: list[exp.Expr]


def _rollup_base(select: exp.Select, sets: list[list[exp.Expr]], grouped: list[exp.Expr],
                 base_name: str = "_gs_base") -> _RollupBase | None:
    """The file's grouped SELECT with ``sets`` read from one aggregate by all of its
    grouping expressions, where its aggregates roll up (SUM, COUNT, AVG, MIN, MAX,
    without DISTINCT or FILTER), else None (a branch per set over the FROM).

    Why: each branch over the FROM maintains the FROM again, its joins, subqueries and
    their state, k times for k sets (TPC-DS Q14's five rollup levels over a union of
    three channels' joins). Over the base, the FROM is maintained once and each set is
    an aggregate of the base's changed groups, which are few. A SUM rolls up as the SUM
    of partial sums, a COUNT as their SUM (0 over none: the empty set's row over no
    rows), an AVG as its partial sums' SUM over its partial counts' SUM, MIN and MAX as
    themselves.

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT a, SUM(c) AS s, COUNT(*) AS n FROM t, u WHERE "
    ...                       "t.k = u.k GROUP BY ROLLUP(a)", read="duckdb")
    >>> print(expand_grouping_sets(q).sql())  # doctest: +NORMALIZE_WHITESPACE
    WITH _gs_base AS (SELECT a AS _gk0, SUM(c) AS _ga0, COUNT(*) AS _ga1 FROM t, u
    WHERE t.k = u.k GROUP BY a) SELECT * FROM (SELECT _gk0 AS a, SUM(_ga0) AS s,
    CAST(COALESCE(SUM(_ga1), 0) AS BIGINT) AS n FROM _gs_base GROUP BY _gk0 UNION ALL
    SELECT NULL AS a, SUM(_ga0) AS s, CAST(COALESCE(SUM(_ga1), 0) AS BIGINT) AS n
    FROM _gs_base) AS _gs
    """
    if len(sets) < 2 or select.args.get("group") is None:
        return None
    keys = [exp.column(f"_gk{i}") for i in range(len(grouped))]
    partials: list[exp.Expr] = []
    rolled: dict[str, exp.Expr] = {}
    """an aggregate's SQL -> its roll-up (one partial for equal aggregates)"""

    def partial(agg: exp.Expr) -> exp.Column:
        partials.append(exp.alias_(agg, f"_ga{len(partials)}"))
        return exp.column(f"_ga{len(partials) - 1}")

    def roll(agg: exp.AggFunc) -> exp.Expr:
        if {k for k, v in agg.args.items() if v} - {"big_int"} != {"this"} or isinstance(
                agg.this, exp.Distinct) or isinstance(agg.parent, exp.Filter):
            raise _NotRollable
        if isinstance(agg, exp.Count):
            total: exp.Expr = exp.Coalesce(this=exp.Sum(this=partial(agg.copy())),
                                           expressions=[exp.Literal.number(0)])
            return exp.cast(total, exp.DataType.build("BIGINT"))
        if isinstance(agg, (exp.Sum, exp.Min, exp.Max)):
            return type(agg)(this=partial(agg.copy()))
        if isinstance(agg, exp.Avg):
            sums = exp.Sum(this=partial(exp.Sum(this=agg.this.copy())))
            counts = exp.Sum(this=partial(exp.Count(this=agg.this.copy())))
            return exp.Div(this=exp.cast(sums, exp.DataType.build("DOUBLE")),
                           expression=counts)
        raise _NotRollable

    def rewrite(node: exp.Expr) -> exp.Expr:
        for g, key in zip(grouped, keys):
            if _same(node, g):
                return key.copy()
        if isinstance(node, exp.Grouping):
            return map_args(node, rewrite)
        if isinstance(node, exp.AggFunc):
            text = node.sql("duckdb")
            if text not in rolled:
                rolled[text] = roll(node)
            return rolled[text].copy()
        if isinstance(node, (exp.Column, exp.Subquery, exp.Select, exp.Window, exp.Star)):
            raise _NotRollable  # (read from the FROM beside the grouping: not kept)
        return map_args(node, rewrite)

    over = exp.select().from_(exp.Table(this=exp.to_identifier(base_name)))
    items: list[exp.Expr] = []
    try:
        for item in select.expressions:
            body = item.this if isinstance(item, exp.Alias) else item
            name = item.alias if isinstance(item, exp.Alias) else (
                body.name if isinstance(body, exp.Column) else body.sql())
            items.append(exp.alias_(rewrite(body.copy()), name,
                                    quoted=not exp.SAFE_IDENTIFIER_RE.match(name)))
        having = select.args.get("having")
        if having is not None:
            over.set("having", exp.Having(this=rewrite(having.this.copy())))
    except _NotRollable:
        return None
    over.set("expressions", items)
    if select.args.get("distinct"):
        over.set("distinct", select.args["distinct"].copy())
    cte_body = select.copy()
    for arg in (*_OUTER, "having", "distinct"):
        cte_body.set(arg, None)
    cte_body.set("expressions", [*(exp.alias_(g.copy(), k.name) for g, k in
                                   zip(grouped, keys)), *partials])
    cte_body.set("group", exp.Group(expressions=[g.copy() for g in grouped]))
    cte = exp.CTE(this=cte_body, alias=exp.TableAlias(this=exp.to_identifier(base_name)))
    index = [[next(k for g, k in zip(grouped, keys) if _same(e, g)) for e in s]
             for s in sets]
    return _RollupBase(cte, over, [[k.copy() for k in s] for s in index],
                       [k.copy() for k in keys])


def _windowed(select: exp.Select, sets: list[list[exp.Expr]],
              tables: dict[str, frozenset[str]], host: list[exp.CTE] | None = None,
              base_name: str = "_gs_base") -> exp.Select:
    """A SELECT with grouping sets and window functions: the windows over the union of
    the grouping sets' branches, as SQL applies them after the grouping. The grouped
    SELECT keeps the window-free select items (by their names) and each window-free
    part of a window function (its argument, PARTITION BY, ORDER BY: ``_g0, _g1, ...``;
    an equal select item's column where there is one), GROUPING() constants per
    branch; ``SELECT <the items, windows over those columns> FROM (<the grouped>) AS
    _gw`` holds the window functions, DISTINCT, ORDER BY, LIMIT, OFFSET and WITH. In
    its ORDER BY a name alone is the output column of that name; inside an expression
    it is the FROM's column first (DuckDB's reading), the SELECT alias where the FROM's
    items are base tables (``tables``: their columns) without such a column, else
    refused."""
    names: list[str] = []
    bodies: list[exp.Expr] = []
    for item in select.expressions:
        body = item.this if isinstance(item, exp.Alias) else item
        names.append(item.alias if isinstance(item, exp.Alias) else (
            body.name if isinstance(body, exp.Column) else body.sql()))
        bodies.append(body)
    inner_items: dict[str, tuple[str, exp.Expr]] = {}
    """SQL text -> (the grouped SELECT's column, its expression)"""
    for name, body in zip(names, bodies):
        if body.find(exp.Window) is None:
            inner_items.setdefault(body.sql("duckdb"), (name, body))

    def column(name: str) -> exp.Column:
        return exp.column(name, quoted=not exp.SAFE_IDENTIFIER_RE.match(name))

    def lift(node: exp.Expr) -> exp.Expr:
        """``node`` with its largest window-free subexpressions that read a column, an
        aggregate or GROUPING() replaced by a column of the grouped SELECT."""
        if node.find(exp.Window) is None:
            if not any(True for _ in node.find_all(exp.Column, exp.AggFunc, exp.Grouping)):
                return node
            text = node.sql("duckdb")
            if text not in inner_items:
                inner_items[text] = (f"_g{len(inner_items)}", node.copy())
            return column(inner_items[text][0])
        if isinstance(node, exp.Window):
            func = node.this
            for key, value in list(func.args.items()):
                if isinstance(value, exp.Expr):
                    func.set(key, lift(value))
            node.set("partition_by", [lift(e) for e in node.args.get("partition_by") or []])
            if node.args.get("order") is not None:
                for ordered in node.args["order"].expressions:
                    ordered.set("this", lift(ordered.this))
            return node
        return map_args(node, lift)

    outer_items: list[exp.Expr] = []
    for name, body in zip(names, bodies):
        if body.find(exp.Window) is None:
            outer_items.append(column(name) if inner_items[body.sql("duckdb")][0] == name
                               else exp.alias_(column(inner_items[body.sql("duckdb")][0]),
                                               name))
        else:
            outer_items.append(exp.alias_(lift(body.copy()), name, quoted=not
                                          exp.SAFE_IDENTIFIER_RE.match(name)))
    order = select.args.get("order")
    if order is not None:
        order = order.copy()
        texts = {b.sql("duckdb"): n for n, b in zip(names, bodies)}

        aliases = {n.lower() for n in names}
        read, from_columns = _read_columns(select), _from_columns(select, tables)

        def by_output(node: exp.Expr, alone: bool = False) -> exp.Expr:
            text = node.sql("duckdb")
            if text in texts and not isinstance(node, exp.Literal) and any(
                    True for _ in node.find_all(exp.Column, exp.AggFunc, exp.Grouping,
                                                exp.Window)):
                return column(texts[text])
            name = node.name.lower() if isinstance(node, exp.Column) and \
                not node.table else ""
            if name in aliases and alone:
                return node
            if name in aliases and name not in read and from_columns is not None \
                    and name not in from_columns:
                # (the item itself: a window function's alias is not known to the
                # windows' rewrite of the SELECT over the grouped one)
                item = outer_items[[n.lower() for n in names].index(name)]
                return (item.this if isinstance(item, exp.Alias) else item).copy()
            if name in aliases and name not in read and from_columns is None:
                raise _ambiguous(node)
            if node.find(exp.Window) is None and isinstance(
                    node, (exp.Column, exp.AggFunc, exp.Grouping)):
                return lift(node)
            return map_args(node, by_output)

        for ordered in order.expressions:
            if not (isinstance(ordered.this, exp.Literal) and ordered.this.is_int):
                ordered.set("this", by_output(ordered.this, alone=True))
    grouped = select.copy()
    for arg in (*_OUTER, "distinct"):
        grouped.set(arg, None)
    grouped.set("expressions", [exp.alias_(e.copy(), n, quoted=not
                                           exp.SAFE_IDENTIFIER_RE.match(n))
                                for n, e in inner_items.values()])
    outer = exp.select(*outer_items).from_(exp.Subquery(
        this=_expand(grouped, sets, host=host, base_name=base_name),
        alias=exp.TableAlias(this=exp.to_identifier("_gw"))))
    for arg in (*_OUTER, "distinct"):
        value = order if arg == "order" else select.args.get(arg)
        if value is not None:
            outer.set(arg, value if arg == "order" else value.copy())
    return outer


def _check_groupings(select: exp.Select, grouped: list[exp.Expr]) -> None:
    allowed = [*select.expressions, select.args.get("having"), select.args.get("order")]
    for g in select.find_all(exp.Grouping):
        if g.find_ancestor(exp.Select) is not select:
            continue  # (a subquery's own)
        if not any(a is not None and _within(g, a) for a in allowed):
            raise ExprError(g, "GROUPING() is allowed in the select list, HAVING and "
                               "ORDER BY only")
        if not g.expressions:
            raise ExprError(g, "GROUPING() takes one or more grouping expressions")
        for arg in g.expressions:
            if not any(_same(arg, e) for e in grouped):
                raise ExprError(g, f"GROUPING({arg.sql()}): {arg.sql()} is not an "
                                   "expression of the GROUP BY")


def _within(node: exp.Expr, ancestor: exp.Expr) -> bool:
    parent: exp.Expr | None = node
    while parent is not None:
        if parent is ancestor:
            return True
        parent = parent.parent
    return False


def _branch(select: exp.Select, chosen: list[exp.Expr], grouped: list[exp.Expr],
            union_distinct: bool) -> exp.Select:
    """The SELECT of one grouping set ``chosen``: its own GROUP BY, the grouping
    expressions not chosen NULL outside aggregates, GROUPING() constants."""
    missing = [e for e in grouped if not any(_same(e, c) for c in chosen)]
    for sub in (q for i in [*select.expressions, select.args.get("having")] if i is not None
                for q in i.find_all(exp.Subquery)):
        if any(_same(col, m) for col in sub.find_all(exp.Column) for m in missing):
            raise ExprError(sub, "a subquery reading a grouping expression beside grouping "
                                 "sets is not supported")

    def rewrite(node: exp.Expr) -> exp.Expr:
        return _outside_aggregates(node, lambda n: _replaced(n, chosen, missing))

    branch = select.copy()
    for arg in _OUTER:
        branch.set(arg, None)
    if union_distinct:
        branch.set("distinct", None)
    items: list[exp.Expr] = []
    for item in branch.expressions:
        inner = item.this if isinstance(item, exp.Alias) else item
        new = rewrite(inner.copy())
        if isinstance(inner, exp.Grouping):
            new = exp.cast(new, exp.DataType.build("BIGINT"))
        elif new != inner:
            new = simplify(new)
        if new == inner and isinstance(item, (exp.Alias, exp.Column)):
            items.append(item)  # (an expression is named: a set operation's CAST reads it)
            continue
        name = item.alias if isinstance(item, exp.Alias) else (
            item.name if isinstance(item, exp.Column) else item.sql())
        items.append(exp.alias_(new, name, quoted=not exp.SAFE_IDENTIFIER_RE.match(name)))
    branch.set("expressions", items)
    having = branch.args.get("having")
    if having is not None:
        having.set("this", rewrite(having.this))
    if chosen:
        branch.set("group", exp.Group(expressions=[c.copy() for c in chosen]))
        return branch
    branch.set("group", None)
    if any(True for _ in itertools.chain.from_iterable(
            i.find_all(exp.AggFunc) for i in [*branch.expressions, having] if i)):
        return branch
    return _one_row(branch)


def _replaced(node: exp.Expr, chosen: list[exp.Expr], missing: list[exp.Expr]
              ) -> exp.Expr | None:
    if isinstance(node, exp.Grouping):
        mask = 0
        for arg in node.expressions:
            mask = mask * 2 + (0 if any(_same(arg, c) for c in chosen) else 1)
        return exp.Literal.number(mask)
    if any(_same(node, m) for m in missing):
        return exp.Null()
    return None


def _outside_aggregates(node: exp.Expr, replace: Callable[[exp.Expr], exp.Expr | None]
                        ) -> exp.Expr:
    """``node`` with ``replace`` applied top-down outside aggregates and subqueries
    (where it returns an expression, that one stands; GROUPING() is asked first)."""
    new = replace(node)
    if new is not None:
        return new
    if isinstance(node, (exp.AggFunc, exp.Subquery, exp.Select)):
        return node
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expr):
            node.set(key, _outside_aggregates(value, replace))
        elif isinstance(value, list):
            node.set(key, [_outside_aggregates(v, replace) if isinstance(v, exp.Expr)
                           else v for v in value])
    return node


def _one_row(branch: exp.Select) -> exp.Select:
    """The empty grouping set of a SELECT without aggregates: one row over all rows
    (also none), as DuckDB gives it: its items over ``SELECT COUNT(*)`` of its FROM."""
    inner = branch.copy()
    inner.set("expressions", [exp.alias_(exp.Count(this=exp.Star()), "_n")])
    inner.set("having", None)
    inner.set("distinct", None)
    outer = exp.select(*branch.expressions).from_(exp.Subquery(
        this=inner, alias=exp.TableAlias(this=exp.to_identifier("_g"))))
    having = branch.args.get("having")
    if having is not None:
        outer = outer.where(having.this)
    return outer


def _ordered_by_output(order: exp.Expr, select: exp.Select,
                       tables: dict[str, frozenset[str]] | None = None) -> exp.Expr:
    """``ORDER BY`` of the grouped SELECT as the wrapper's: a term that is a select
    item (its expression or its name) orders by that output column. Inside an
    expression a name is the FROM's column first (DuckDB's reading): the output column
    of that name where the FROM's base tables (``tables``) have no such column, refused
    where the FROM's column is not an output column or the FROM's columns are not
    known."""
    names = []
    for item in select.expressions:
        names.append(item.alias if isinstance(item, exp.Alias) else (
            item.name if isinstance(item, exp.Column) else item.sql()))
    lowered = [n.lower() for n in names]
    read, from_columns = _read_columns(select), _from_columns(select, tables or {})

    def column(name: str) -> exp.Expr:
        return exp.column(name, quoted=not exp.SAFE_IDENTIFIER_RE.match(name))

    def output(node: exp.Expr, top: exp.Expr) -> exp.Expr | None:
        for item, name in zip(select.expressions, names):
            if _same(node, item.this if isinstance(item, exp.Alias) else item):
                return column(name)
        name = node.name.lower() if isinstance(node, exp.Column) and not node.table \
            else ""
        if name not in lowered:
            return None
        if node is top or (name not in read and from_columns is not None
                           and name not in from_columns):
            return column(names[lowered.index(name)])
        if name in read or from_columns is not None:
            raise ExprError(node, f"ORDER BY: {node.name!r} inside an expression is the "
                                  "FROM's column, which is not an output column beside "
                                  "grouping sets: order by output columns")
        raise _ambiguous(node)

    for ordered in order.expressions:
        if not (isinstance(ordered.this, exp.Literal) and ordered.this.is_int):
            ordered.set("this", _outside_aggregates(
                ordered.this, functools.partial(output, top=ordered.this)))
    return order


def _read_columns(select: exp.Select) -> set[str]:
    """The names of the columns ``select`` reads outside its ORDER BY (its FROM has
    them)."""
    bare = select.copy()
    bare.set("order", None)
    return {c.name.lower() for c in bare.find_all(exp.Column)
            if c.find_ancestor(exp.Select) is bare}


def _from_columns(select: exp.Select, tables: dict[str, frozenset[str]]
                  ) -> frozenset[str] | None:
    """The names of the columns of ``select``'s FROM items where all are base tables
    (``tables``: their columns), else None."""
    sources = [f.this for f in [select.args.get("from_")] if f is not None] + [
        j.this for j in select.args.get("joins") or []]
    if not sources or not all(isinstance(t, exp.Table) and t.name.lower() in tables
                              for t in sources):
        return None
    return frozenset().union(*(tables[t.name.lower()] for t in sources))


def _ambiguous(node: exp.Expr) -> ExprError:
    return ExprError(node, f"ORDER BY: {node.name!r} inside an expression names a "
                           "SELECT item beside grouping sets (and may name a column of "
                           "the FROM, which DuckDB reads first): write the item's "
                           "expression")
