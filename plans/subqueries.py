"""Subquery forms sqlglot's unnesting does not turn into joins, rewritten (before it
runs) into forms it does: counting scalar subqueries correlated on equalities, which it
decorrelates into grouped views LEFT JOINed on the correlation columns (the outer joins
of :mod:`plans.outerjoin`).

- ``x NOT IN (SELECT y FROM S WHERE p)``, with SQL's NULL rule (TRUE when S is empty,
  NULL when x is NULL or S holds a NULL and no match, FALSE on a match)::

      CASE WHEN (SELECT COUNT(*) = 0 FROM S WHERE p) THEN TRUE
           WHEN x IS NULL THEN NULL
           WHEN (SELECT COUNT(*) FROM S WHERE p AND y = x) > 0 THEN FALSE
           WHEN (SELECT COUNT(*) - COUNT(y) > 0 FROM S WHERE p) THEN NULL
           ELSE TRUE END

- ``EXISTS (SELECT .. FROM S WHERE p AND s.k = o.k AND s.c <> o.d)`` (TPC-H Q21: same
  order, another supplier): a row of S with ``s.c <> o.d`` exists exactly when the rows
  with a non-NULL ``s.c`` outnumber those with ``s.c = o.d``::

      (o.d IS NOT NULL AND (SELECT COUNT(s.c) FROM S WHERE p AND s.k = o.k)
                         > (SELECT COUNT(*) FROM S WHERE p AND s.k = o.k AND s.c = o.d))

  Those two counts are grouped views LEFT JOINed to ``o``, and an outer join keeps
  counts per key on both sides. When ``o`` is a row of ``S`` itself (``o`` reads S's
  table, each ``s.k = o.k`` and ``s.c <> o.d`` pairs a column with itself, and ``o``'s
  own WHERE conjuncts include every one of ``p``), both groups exist for every row of
  ``o`` whose keys are not NULL, so the views are inner-joined instead, FROM items
  beside ``o`` (:func:`_contained_neq_exists`): as an EXISTS a conjunct of the WHERE
  (a NULL key drops the row either way); as a NOT EXISTS only when other conjuncts
  reject NULL in ``o.k`` and ``o.d`` (Q21's joins with orders and supplier do)::

      FROM .., o, (SELECT s.k, COUNT(*) AS _n FROM S WHERE p AND s.c IS NOT NULL
                   GROUP BY s.k) AS some_,
                  (SELECT s.k, s.c, COUNT(*) AS _n FROM S WHERE p AND s.c IS NOT NULL
                   GROUP BY s.k, s.c) AS same_
      WHERE .. AND some_.k = o.k AND same_.k = o.k AND same_.c = o.d
               AND some_._n > same_._n           -- NOT EXISTS: <=

Example:
    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT r.a FROM r AS r WHERE NOT r.a IN (SELECT s.b FROM s AS s)")
    >>> rewrite_subqueries(q).sql().startswith("SELECT r.a FROM r AS r WHERE (CASE WHEN")
    True
"""

from __future__ import annotations

from sqlglot import exp

from plans.expr import ExprError


def rewrite_subqueries(select: exp.Select) -> exp.Select:
    """``select`` with its NOT IN subqueries and its EXISTS correlated by ``<>`` in the
    forms above (in place; returned for chaining). ``select`` is qualified."""
    for cmp in list(select.find_all(exp.GT, exp.LT)):
        _count_positive(cmp)
    for sub in list(select.find_all(exp.Select)):
        if sub is not select and sub.args.get("where") is not None:
            sub.args["where"].set("this", _factored(sub.args["where"].this))
            _inner_disjunctions(sub)
    for exists in list(select.find_all(exp.Exists)):
        if not _contained_neq_exists(exists):
            _neq_exists(exists)
    for node in list(select.find_all(exp.Not)):
        inner = node.this
        while isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.In) and inner.args.get("query") is not None:
            node.replace(_not_in(inner))
    return select


def _count_positive(node: exp.Expr) -> None:
    """``(SELECT COUNT(*) FROM S WHERE p) > 0`` (or ``0 < (...)``) is ``EXISTS (SELECT
    1 FROM S WHERE p)``: sqlglot decorrelates an EXISTS into a semi-join on its
    correlation columns (TPC-DS Q41)."""
    sub, zero = (node.this, node.expression) if isinstance(node, exp.GT) else (
        node.expression, node.this)
    if not (isinstance(sub, exp.Subquery) and isinstance(zero, exp.Literal)
            and not zero.is_string and zero.name == "0"):
        return
    query = sub.this
    if not isinstance(query, exp.Select) or len(query.expressions) != 1 or any(
            query.args.get(a) for a in ("group", "having", "limit", "offset", "distinct",
                                        "qualify", "with_")):
        return
    count = query.expressions[0]
    count = count.this if isinstance(count, exp.Alias) else count
    if not (isinstance(count, exp.Count) and isinstance(count.this, exp.Star)):
        return
    q = query.copy()
    q.set("expressions", [exp.Literal.number(1)])
    node.replace(exp.Exists(this=q))


def _inner_disjunctions(sub: exp.Select) -> None:
    """A correlated subquery over one table whose WHERE holds an OR (over that table
    only: sqlglot does not decorrelate a WHERE with an OR) reads a derived table of
    that table filtered by its conjuncts over that table alone; the correlation stays
    in its WHERE (TPC-DS Q41)."""
    where = sub.args["where"].this
    from_ = sub.args.get("from_")
    if where.find(exp.Or) is None or from_ is None or sub.args.get("joins") or \
            not isinstance(from_.this, exp.Table):
        return
    table = from_.this
    alias = table.alias_or_name
    conjuncts = list(where.flatten()) if isinstance(where, exp.And) else [where]
    own = [c for c in conjuncts if all(col.table == alias for col in c.find_all(exp.Column))
           and c.find(exp.Select) is None]
    rest = [c for c in conjuncts if not any(c is o for o in own)]
    if not rest or any(c.find(exp.Or) is not None for c in rest):
        return
    names = sorted({col.name for col in sub.find_all(exp.Column) if col.table == alias})
    inner = exp.select(*[exp.alias_(exp.column(n, table=alias), n) for n in names]).from_(
        table.copy()).where(exp.and_(*[c.copy() for c in own]))
    table.replace(exp.Subquery(this=inner, alias=exp.TableAlias(
        this=exp.to_identifier(alias))))
    sub.args["where"].set("this", exp.and_(*[c.copy() for c in rest]))


def _factored(cond: exp.Expr) -> exp.Expr:
    """A subquery's WHERE with the conjuncts common to all branches of an OR factored
    out: ``(a AND x) OR (a AND y)`` is ``a AND (x OR y)`` (and ``a OR (a AND y)`` is
    ``a``: both laws hold in SQL's three-valued logic), so that a correlation written
    in every branch (TPC-DS Q41) is a conjunct sqlglot's unnesting decorrelates."""
    node = _strip(cond)
    if not isinstance(node, exp.Or):
        return cond
    branches = [[_strip(c) for c in _strip(b).flatten()] if isinstance(_strip(b), exp.And)
                else [_strip(b)] for b in node.flatten()]
    common = [c for c in branches[0] if all(any(c == d for d in b) for b in branches[1:])]
    if not common:
        return cond
    rest = [[c for c in b if not any(c == d for d in common)] for b in branches]
    parts = [c.copy() for c in common]
    if all(rest):
        parts.append(exp.Paren(this=exp.or_(*[exp.and_(*[c.copy() for c in r])
                                              for r in rest])))
    return exp.and_(*parts)


def _subquery_select(node: exp.Expr) -> exp.Select:
    query = node.args.get("query") if isinstance(node, exp.In) else node.this
    if isinstance(query, exp.Subquery):
        query = query.this
    if not isinstance(query, exp.Select):
        raise ExprError(node, "a subquery here must be one SELECT")
    for arg in ("group", "having", "limit", "offset", "order", "with_"):
        if query.args.get(arg) is not None:
            raise ExprError(node, f"NOT IN / EXISTS over a subquery with {arg.upper()} is "
                                  "not supported (write it as a WITH view and read that)")
    return query


def _count(query: exp.Select, what: exp.Expr, extra: list[exp.Expr]) -> exp.Subquery:
    """``(SELECT <what> FROM <query's FROM> WHERE <query's WHERE> AND extra)``."""
    q = query.copy()
    q.set("distinct", None)
    q.set("expressions", [exp.alias_(what, "_n")])
    where = q.args.get("where")
    conds = ([where.this] if where is not None else []) + extra
    q.set("where", exp.Where(this=exp.and_(*conds)) if conds else None)
    return exp.Subquery(this=q)


def _not_in(node: exp.In) -> exp.Expr:
    query = _subquery_select(node)
    if len(query.expressions) != 1:
        raise ExprError(node, "NOT IN (subquery) must select one column")
    y = query.expressions[0]
    y = y.this if isinstance(y, exp.Alias) else y
    x = node.this
    if not isinstance(x, exp.Column) or not isinstance(y, exp.Column):
        raise ExprError(node, "NOT IN (subquery) is supported between columns "
                              "(x NOT IN (SELECT y ...))")
    star = exp.Count(this=exp.Star())
    zero = exp.Literal.number(0)
    # (the uncorrelated scalars are booleans, not counts: their one-row view changes
    # only when a count crosses zero, so the outer rows are not re-tested per S update)
    empty = _count(query, exp.EQ(this=star, expression=zero), [])
    match = _count(query, star.copy(), [exp.EQ(this=y.copy(), expression=x.copy())])
    nulls = _count(query, exp.GT(this=exp.Sub(this=star.copy(), expression=exp.Count(
        this=y.copy())), expression=zero.copy()), [])
    case = exp.Case(ifs=[
        exp.If(this=empty, true=exp.true()),
        exp.If(this=exp.Is(this=x.copy(), expression=exp.Null()), true=exp.Null()),
        exp.If(this=exp.GT(this=match, expression=zero.copy()), true=exp.false()),
        exp.If(this=nulls, true=exp.Null()),
    ], default=exp.true())
    return exp.Paren(this=case)


def _neq_exists(node: exp.Exists) -> None:
    query = node.this
    if isinstance(query, exp.Subquery):
        query = query.this
    if not isinstance(query, exp.Select) or query.args.get("where") is None:
        return
    inner = {t.alias_or_name for t in query.find_all(exp.Table)
             if t.find_ancestor(exp.Select) is query}
    where = query.args["where"].this
    conjuncts = list(where.flatten()) if isinstance(where, exp.And) else [where]
    neq: list[tuple[exp.Column, exp.Column, exp.Expr]] = []
    for c in conjuncts:
        if isinstance(c, exp.NEQ) and isinstance(c.this, exp.Column) and isinstance(
                c.expression, exp.Column):
            a, b = c.this, c.expression
            if b.table in inner and a.table not in inner:
                a, b = b, a
            if a.table in inner and b.table not in inner:
                neq.append((a, b, c))
    if not neq:
        return
    if len(neq) > 1:
        raise ExprError(node, "EXISTS correlated by more than one <> is not supported")
    s_col, o_col, cond = neq[0]
    rest = [c for c in conjuncts if c is not cond]
    _subquery_select(node)  # (refuses GROUP BY, LIMIT, ... inside)
    bare = query.copy()
    bare.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
    some = _count(bare, exp.Count(this=s_col.copy()), [])
    same = _count(bare, exp.Count(this=exp.Star()),
                  [exp.EQ(this=s_col.copy(), expression=o_col.copy())])
    node.replace(exp.Paren(this=exp.and_(
        exp.Not(this=exp.Is(this=o_col.copy(), expression=exp.Null())),
        exp.GT(this=exp.Coalesce(this=some, expressions=[exp.Literal.number(0)]),
               expression=exp.Coalesce(this=same, expressions=[exp.Literal.number(0)])))))


def _strip(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _conjuncts(where: exp.Where | None) -> list[exp.Expr]:
    if where is None:
        return []
    node = _strip(where.this)
    return [_strip(c) for c in node.flatten()] if isinstance(node, exp.And) else [node]


def _rejects_null(conjunct: exp.Expr, column: exp.Column) -> bool:
    """``conjunct`` is not TRUE when ``column`` is NULL: an equality or order
    comparison with the column as one side, or ``column IS NOT NULL``."""
    if isinstance(conjunct, (exp.EQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
        return any(isinstance(side, exp.Column) and side == column
                   for side in (conjunct.this, conjunct.expression))
    if isinstance(conjunct, exp.Not):
        inner = _strip(conjunct.this)
        return (isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null)
                and inner.this == column)
    return False


def _contained_neq_exists(node: exp.Exists) -> bool:
    """The ``<>``-correlated EXISTS over the outer row's own table as inner joins with
    the two count views (the module's docstring); ``False``, nothing changed, where the
    conditions for it do not all hold."""
    parent, negated = node.parent, False
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    owner: exp.Expr = node
    if isinstance(parent, exp.Not):
        negated, owner = True, parent
    outer = node.find_ancestor(exp.Select)
    if outer is None or not any(c is owner for c in _conjuncts(outer.args.get("where"))):
        return False
    query = node.this.this if isinstance(node.this, exp.Subquery) else node.this
    if not isinstance(query, exp.Select) or query.args.get("joins") or any(
            query.args.get(a) is not None for a in ("group", "having", "limit", "offset",
                                                      "order", "with_", "qualify")):
        return False
    from_ = query.args.get("from_")
    if from_ is None or not isinstance(from_.this, exp.Table):
        return False
    table = from_.this
    inner = table.alias_or_name
    eqs: list[tuple[exp.Column, exp.Column]] = []
    neqs: list[tuple[exp.Column, exp.Column]] = []
    own: list[exp.Expr] = []
    for c in _conjuncts(query.args.get("where")):
        if c.find(exp.Select, exp.Exists) is not None:
            return False
        tables = {col.table for col in c.find_all(exp.Column)}
        if tables <= {inner}:
            own.append(c)
            continue
        if not (isinstance(c, (exp.EQ, exp.NEQ)) and isinstance(c.this, exp.Column)
                and isinstance(c.expression, exp.Column)):
            return False
        a, b = c.this, c.expression
        if b.table == inner:
            a, b = b, a
        if a.table != inner or b.table == inner or a.name != b.name:
            return False  # (a column paired with another: o is not the row of S here)
        (eqs if isinstance(c, exp.EQ) else neqs).append((a, b))
    if len(neqs) != 1 or not eqs or len({b.table for _, b in eqs + neqs}) != 1:
        return False
    o_alias = neqs[0][1].table
    o_table = next((t for t in outer.find_all(exp.Table) if t.alias_or_name == o_alias
                    and t.find_ancestor(exp.Select) is outer), None)
    if o_table is None or o_table.name != table.name or o_table.args.get("db") != \
            table.args.get("db") or isinstance(o_table.parent, exp.Join) and (
                o_table.parent.args.get("side") or o_table.parent.args.get("kind")):
        return False
    outer_where = [c for c in _conjuncts(outer.args.get("where")) if c is not owner]

    def renamed(c: exp.Expr) -> exp.Expr:
        c = c.copy()
        for col in c.find_all(exp.Column):
            col.set("table", exp.to_identifier(o_alias))
        return c

    if not all(any(renamed(c) == o for o in outer_where) for c in own):
        return False  # (a row of o need not be a row of S)
    d_col = neqs[0][1]
    if negated and not all(any(_rejects_null(c, col) for c in outer_where)
                           for col in [b for _, b in eqs] + [d_col]):
        return False
    taken = {t.alias_or_name for t in outer.find_all(exp.Table)} | {
        s.alias_or_name for s in outer.find_all(exp.Subquery)}
    names = []
    for stem in ("some", "same"):
        i = 0
        while f"_{stem}{i}" in taken:
            i += 1
        names.append(f"_{stem}{i}")
        taken.add(names[-1])
    some, same = names
    s_col = neqs[0][0]
    keys = [a for a, _ in eqs]

    def counted(alias: str, by: list[exp.Column]) -> exp.Join:
        conds = [c.copy() for c in own] + [exp.Not(this=exp.Is(
            this=s_col.copy(), expression=exp.Null()))]
        q = exp.select(*[exp.alias_(k.copy(), k.name) for k in by],
                       exp.alias_(exp.Count(this=exp.Star()), "_n")).from_(
            table.copy()).where(exp.and_(*conds)).group_by(*[k.copy() for k in by])
        return exp.Join(this=exp.Subquery(this=q, alias=exp.TableAlias(
            this=exp.to_identifier(alias))))

    outer.append("joins", counted(some, keys))
    outer.append("joins", counted(same, keys + [s_col]))
    links: list[exp.Expr] = [
        exp.EQ(this=exp.column(a.name, table=alias), expression=b.copy())
        for alias in (some, same) for a, b in eqs]
    links.append(exp.EQ(this=exp.column(s_col.name, table=same), expression=d_col.copy()))
    cmp = exp.LTE if negated else exp.GT
    links.append(cmp(this=exp.column("_n", table=some), expression=exp.column("_n", table=same)))
    owner.replace(exp.Paren(this=exp.and_(*links)))
    return True
