"""Rewrites of the parsed query file (:func:`plans.sqlparse.parse_statements`, before
any check) that turn SQL ivmflow would refuse into equivalent SQL it maintains:

- ``STDDEV_SAMP``/``VAR_SAMP`` over the ring payloads SUM and COUNT keep
  (:func:`sample_variance`);
- ``LIMIT k`` (k >= 1, no ORDER BY, no OFFSET) on a SELECT that gives at most one row
  whatever the data, dropped: every order takes that row (:func:`one_row_limit`).

Each is exact: the result is the original query's, on every database.

Example:
    >>> import sqlglot
    >>> rewrite(sqlglot.parse_one("SELECT stddev_samp(a) FROM t LIMIT 10")).sql()[:40]
    'SELECT SQRT(CASE WHEN COUNT(a) > 1 THEN '
    >>> rewrite(sqlglot.parse_one("SELECT a FROM t LIMIT 10")).sql()
    'SELECT a FROM t LIMIT 10'
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["at_most_one_row", "one_row_limit", "rewrite", "sample_variance"]


def rewrite(tree: exp.Expr) -> exp.Expr:
    """Every rewrite of this module, in place."""
    return one_row_limit(sample_variance(tree))


def sample_variance(tree: exp.Expr) -> exp.Expr:
    """``tree`` with every ``VAR_SAMP(x)`` (``VARIANCE``) and ``STDDEV_SAMP(x)``
    (``STDDEV``) written over the ring payloads that SUM and COUNT already maintain
    under inserts and deletes, ``n = COUNT(x)``, ``s = SUM(x)``, ``q = SUM(x * x)``:

        VAR_SAMP(x) = CASE WHEN n > 1 THEN CAST(n * q - s * s AS DOUBLE)
                                          / (CAST(n AS DOUBLE) * (n - 1)) END

    and ``STDDEV_SAMP(x)`` its ``sqrt``. ``n * q - s * s`` is exact for integers and
    decimals (never negative, 0 for equal values, as DuckDB's Welford sums give); fewer
    than two values give NULL, as in SQL. ``DISTINCT`` inside is left to be refused.

    >>> import sqlglot
    >>> print(sample_variance(sqlglot.parse_one("SELECT var_samp(a) FROM t")).sql(
    ...     pretty=True))
    SELECT
      CASE
        WHEN COUNT(a) > 1
        THEN CAST(COUNT(a) * SUM(a * a) - SUM(a) * SUM(a) AS DOUBLE) / (
          CAST(COUNT(a) AS DOUBLE) * (
            COUNT(a) - 1
          )
        )
      END
    FROM t
    """
    def rewrite(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, (exp.Variance, exp.Stddev, exp.StddevSamp)) or \
                isinstance(node.this, exp.Distinct):
            return node
        x = node.this

        def agg(kind: type[exp.Func], arg: exp.Expr) -> exp.Expr:
            return kind(this=arg.copy())

        n = agg(exp.Count, x)
        q = agg(exp.Sum, exp.Mul(this=x.copy(), expression=x.copy()))
        s2 = exp.Mul(this=agg(exp.Sum, x), expression=agg(exp.Sum, x))
        top = exp.cast(exp.Sub(this=exp.Mul(this=n, expression=q), expression=s2), "DOUBLE")
        bottom = exp.Paren(this=exp.Mul(
            this=exp.cast(agg(exp.Count, x), "DOUBLE"),
            expression=exp.Paren(this=exp.Sub(this=agg(exp.Count, x),
                                              expression=exp.Literal.number(1)))))
        var: exp.Expr = exp.Case(ifs=[exp.If(
            this=exp.GT(this=agg(exp.Count, x), expression=exp.Literal.number(1)),
            true=exp.Div(this=top, expression=bottom))])
        return var if isinstance(node, exp.Variance) else exp.Sqrt(this=var)

    return tree.transform(rewrite, copy=False)


def one_row_limit(tree: exp.Expr) -> exp.Expr:
    """Drop ``LIMIT k`` (a whole number k >= 1) without ORDER BY and OFFSET from every
    SELECT of ``tree`` that gives one row at most (:func:`at_most_one_row`)."""
    for select in list(tree.find_all(exp.Select)):
        clause = select.args.get("limit")
        if clause is None or select.args.get("order") is not None or \
                select.args.get("offset") is not None:
            continue
        k = clause.args.get("expression")
        if isinstance(k, exp.Literal) and not k.is_string and k.name.isdigit() and \
                int(k.name) >= 1 and at_most_one_row(select):
            select.set("limit", None)
    return tree


def at_most_one_row(select: exp.Select) -> bool:
    """The SELECT gives one row at most, whatever the data: an aggregate without GROUP
    BY, or a join (or filter) of such derived tables only (TPC-DS's Q28, Q32, Q97).

    >>> import sqlglot
    >>> one = sqlglot.parse_one("SELECT * FROM (SELECT avg(a) x FROM t) p, "
    ...                         "(SELECT count(*) y FROM t WHERE b > 1) q")
    >>> at_most_one_row(one)
    True
    >>> at_most_one_row(sqlglot.parse_one("SELECT a, sum(b) FROM t GROUP BY a"))
    False
    """
    if not isinstance(select, exp.Select) or select.args.get("group") is not None or \
            any(e.find(exp.Window) for e in select.expressions):
        return False  # (with a window function: left as it is, refused with it)
    if any(n.find_ancestor(exp.Select) is select
           for e in select.expressions for n in e.find_all(exp.AggFunc)):
        return True
    source = select.args.get("from_")
    items = [source.this] if source is not None else []
    for join in select.args.get("joins") or []:
        kind = (join.args.get("kind") or "").upper()
        if join.args.get("side") or kind not in ("", "CROSS", "INNER"):
            return False
        items.append(join.this)
    return bool(items) and all(isinstance(i, exp.Subquery) and at_most_one_row(i.this)
                               for i in items)
