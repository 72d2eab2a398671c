"""Window functions as views of the plan: a SELECT with window functions becomes three
views, so that each part is one the compiler already maintains and the window node
(:class:`WindowOp`, maintained by :mod:`operators.window`) only numbers, ranks and
accumulates:

1. the **inner** view: the SELECT's FROM, WHERE, GROUP BY and HAVING, its select list
   the window-free parts of the SELECT's items and every window function's arguments,
   PARTITION BY and ORDER BY expressions, as columns ``_c0, _c1, ...`` (so a window
   over an aggregate, ``RANK() OVER (ORDER BY SUM(x))``, reads a column of a join
   block's result);
2. one **window** view per distinct ``(PARTITION BY, ORDER BY)``: the rows of the view
   before it plus its window functions' columns ``_w0, _w1, ...``;
3. the **outer** SELECT over the last window view: the SELECT's items with each window
   function replaced by its column (``SUM(x) * 100 / SUM(SUM(x)) OVER (...)`` is
   ``_c0 * 100 / _w0``), its DISTINCT, ORDER BY and LIMIT. Where the SELECT stood
   inside another (a derived table, a WITH, a branch), it is replaced by ``SELECT *
   FROM`` the outer view, so ``WHERE rn <= 3`` over a windowed derived table is a
   filter of the outer query.

:func:`lift_windows` rewrites the items of a lifted file (:mod:`plans.setops`); a file
without window functions is not touched.

Example:
    >>> from plans.setops import lift_items
    >>> from plans.sqlparse import parse_file
    >>> parsed = parse_file('''CREATE TABLE t(a INT, b INT);
    ...     SELECT a, RANK() OVER (PARTITION BY a ORDER BY SUM(b) DESC) AS r
    ...     FROM t GROUP BY a''', "q.sql")
    >>> for item in lift_windows(lift_items(parsed.select)):
    ...     w = item.window
    ...     print(item.name or "(query)", item.select.sql() if w is None else
    ...           (w.source, w.partition_by, w.order_by, [f.func for f in w.funcs], w.names))
    _wi_0 SELECT a AS _c0, SUM(b) AS _c1 FROM t GROUP BY a
    _wn_0 ('_wi_0', (0,), ((1, True, False),), ['rank'], ('_w0',))
    (query) SELECT _wn_0._c0 AS a, _wn_0._w0 AS r FROM _wn_0 AS _wn_0
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from sqlglot import exp

from plans.expr import ExprError
from plans.exprtypes import map_args

__all__ = ["RANKING", "WindowFunc", "WindowOp", "lift_windows", "window_type"]

RANKING = ("row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile")
"""The functions of a row's place in its partition (no argument column)."""
AGGREGATES = ("sum", "count", "count_star", "avg", "min", "max")
NAVIGATION = ("lag", "lead", "first_value", "last_value")

_FUNCS: dict[type[exp.Expr], str] = {
    exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank",
    exp.PercentRank: "percent_rank", exp.CumeDist: "cume_dist", exp.Ntile: "ntile",
    exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
    exp.Lag: "lag", exp.Lead: "lead", exp.FirstValue: "first_value",
    exp.LastValue: "last_value"}


@dataclass(frozen=True)
class WindowFunc:
    """One window function: ``func`` (a name of :data:`RANKING`, ``sum``, ``count``,
    ``count_star``, ``avg``, ``min``, ``max``, ``lag``, ``lead``, ``first_value``,
    ``last_value``) over the input's column ``arg``, its frame: ``partition`` (the
    whole partition), ``range`` (from its start to the row's last peer in ORDER BY,
    SQL's default with ORDER BY) or ``rows`` (to the row itself); ``offset`` is LAG's
    and LEAD's offset or NTILE's bucket count; ``default`` the input column holding
    LAG's and LEAD's default (None: NULL)."""

    func: str
    arg: int | None
    frame: str
    offset: int = 1
    default: int | None = None


@dataclass(frozen=True)
class WindowOp:
    """The view ``name``: the rows of view ``source`` (their multiplicities kept, each
    copy a row of its own) plus one column per function of ``funcs``, computed over
    the rows of the row's partition (equal ``partition_by`` columns; NULLs one
    partition) in the order of ``order_by`` (column, descending, nulls first); rows of
    equal ORDER BY values (peers) are ordered by their columns, in order, ascending,
    NULLs last (what ROW_NUMBER numbers them by)."""

    name: str
    source: str
    partition_by: tuple[int, ...]
    order_by: tuple[tuple[int, bool, bool], ...]
    funcs: tuple[WindowFunc, ...]
    names: tuple[str, ...] = ()
    """The functions' column names, in order."""
    limit: tuple[int, int] | None = None
    """A top-k per partition ``(function, k)``: only the rows whose value of that
    ranking function (ROW_NUMBER, RANK, DENSE_RANK) is at most k (its reader keeps
    no other: ``WHERE rn <= k`` over a windowed derived table)."""


def window_type(f: WindowFunc, arg_type: str | None) -> str:
    """The SQL type of ``f``'s column, DuckDB's, given its argument's (``arg_type``).

    >>> window_type(WindowFunc("sum", 0, "partition"), "DECIMAL(7,2)")
    'DECIMAL(38,2)'
    >>> window_type(WindowFunc("rank", None, "range"), None)
    'BIGINT'
    """
    if f.func in ("row_number", "rank", "dense_rank", "ntile", "count", "count_star"):
        return "BIGINT"
    if f.func in ("percent_rank", "cume_dist", "avg"):
        return "DOUBLE"
    assert arg_type is not None
    if f.func == "sum":
        if arg_type.startswith(("DECIMAL", "NUMERIC")):
            return f"DECIMAL(38,{arg_type[arg_type.find(',') + 1:-1].strip()})"
        if arg_type in ("TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT"):
            return "HUGEINT"
        if arg_type in ("DOUBLE", "FLOAT", "REAL"):
            return "DOUBLE"
        msg = f"SUM over {arg_type}: SUM needs a number"
        raise ValueError(msg)
    return arg_type


@dataclass
class _Lifted:
    """A windowed SELECT's parts while it is lifted: the inner view's expressions and
    the window functions by (PARTITION BY, ORDER BY), each with its marker's number."""

    inner: list[exp.Expr]
    windows: dict[tuple[str, str], list[tuple[exp.Window, WindowFunc, int]]]
    count: int = 0
    from_columns: frozenset[str] | None = None
    """The names of the columns of the SELECT's FROM items, where all are base tables
    (None: not known here)."""


def lift_windows(items: list[Item], schema: Schema | None = None) -> list[Item]:
    """``items`` with every SELECT holding window functions lifted into an inner view,
    its window views and the outer SELECT (unchanged when none has any); ``schema``
    holds the base tables (what an ORDER BY name may be a column of)."""
    views = {it.name.lower() for it in items if it.name}
    tables = {} if schema is None else {
        name.lower(): frozenset(c.name.lower() for c in rel.columns)
        for name, rel in schema.relations.items() if name.lower() not in views}
    if not any(it.select is not None and it.select.find(exp.Window) is not None
               for it in items):
        return items
    out: list[Item] = []
    counter = itertools.count()
    for item in items:
        if item.select is None or item.select.find(exp.Window) is None:
            out.append(item)
            continue
        select = item.select.copy()
        # deepest first: a windowed derived table inside a windowed SELECT is replaced
        # before its reader is lifted
        for node in reversed(list(select.find_all(exp.Select))):
            if not _own_windows(node):
                continue
            n = next(counter)
            lifted, outer = _lift(node, n, tables)
            if node is not select:
                limit = _top_k(node, outer, lifted[-1].window)
                if limit is not None:
                    lifted[-1] = Item(lifted[-1].name, window=replace(
                        lifted[-1].window, limit=limit))  # type: ignore[type-var]
            out += lifted
            if node is select:
                select = outer
                continue
            view = f"_wo_{n}"
            out.append(Item(view, select=outer))
            table = exp.Table(this=exp.to_identifier(view),
                              alias=exp.TableAlias(this=exp.to_identifier(view)))
            node.replace(exp.select("*").from_(table))
        out.append(Item(item.name, select=select))
    return out


def _top_k(node: exp.Select, outer: exp.Select, op: WindowOp | None
           ) -> tuple[int, int] | None:
    """``(function, k)`` when windowed derived table ``node`` is read by a SELECT whose
    WHERE keeps only its rows with ``rn <= k`` (``< k + 1``, ``= k`` keep no more),
    ``rn`` a ROW_NUMBER, RANK or DENSE_RANK of its last window view: that view need
    keep no other row (a top-k per partition)."""
    sub, reader = node.parent, node.find_ancestor(exp.Select)
    if op is None or not isinstance(sub, exp.Subquery) or reader is None or any(
            node.args.get(a) is not None for a in ("limit", "offset")):
        return None
    where = reader.args.get("where")
    conds = list(where.this.flatten()) if where is not None and isinstance(
        where.this, exp.And) else [where.this] if where is not None else []
    columns = {e.alias.lower(): e.this.name for e in outer.expressions
               if isinstance(e, exp.Alias) and isinstance(e.this, exp.Column)}
    for c in conds:
        if not isinstance(c, (exp.LTE, exp.LT, exp.EQ)) or not isinstance(
                c.this, exp.Column) or not isinstance(c.expression, exp.Literal):
            continue
        col, bound = c.this, c.expression
        if (col.table and col.table != sub.alias) or not bound.name.isdigit() or \
                bound.is_string or columns.get(col.name.lower()) not in op.names:
            continue
        index = op.names.index(columns[col.name.lower()])
        k = int(bound.name) - (1 if isinstance(c, exp.LT) else 0)
        if op.funcs[index].func in ("row_number", "rank", "dense_rank") and k >= 1:
            return index, k
    return None


def _own_windows(select: exp.Select) -> list[exp.Window]:
    """The window functions of ``select`` itself (not of a SELECT inside it)."""
    return [w for w in select.find_all(exp.Window) if w.find_ancestor(exp.Select) is select]


def _lift(select: exp.Select, n: int, tables: dict[str, frozenset[str]]
          ) -> tuple[list[Item], exp.Select]:
    """The inner view and the window views of windowed ``select`` (as items), and the
    outer SELECT over the last window view (``tables``: the base tables' columns)."""
    for arg in ("qualify", "windows"):
        if select.args.get(arg):
            raise ExprError(select, "QUALIFY and named windows (WINDOW w AS ...) are not "
                                    "supported: filter in a SELECT over the window")
    if select.args.get("with_") is not None:
        raise ExprError(select, "a WITH inside a windowed derived table is not "
                                "supported: move it to the query's WITH")
    sources = [s.this for s in [select.args.get("from_")] if s is not None] + [
        j.this for j in select.args.get("joins") or []]
    lifted = _Lifted([], {}, from_columns=frozenset().union(
        *(tables[t.name.lower()] for t in sources)) if sources and all(
        isinstance(t, exp.Table) and t.name.lower() in tables for t in sources) else None)
    outer_items: list[exp.Expr] = []
    for item in select.expressions:
        body = item.this if isinstance(item, exp.Alias) else item
        if isinstance(body, exp.Star) or (isinstance(body, exp.Column)
                                          and isinstance(body.this, exp.Star)):
            raise ExprError(body, "SELECT * beside window functions: name the columns")
        alias = item.alias if isinstance(item, exp.Alias) else (
            body.name if isinstance(body, exp.Column) else None)
        new = _outer_expr(body.copy(), lifted)
        outer_items.append(exp.alias_(new, alias) if alias else new)
    order = _order_over(select, outer_items, lifted) if select.args.get("order") else None
    # the window views, one per (PARTITION BY, ORDER BY), their columns numbered in order
    names: dict[str, str] = {}
    items: list[Item] = []
    last = f"_wi_{n}"
    ops: list[WindowOp] = []
    for group in lifted.windows.values():
        w0 = group[0][0]
        part = tuple(_inner_column(e, lifted) for e in w0.args.get("partition_by") or [])
        ordered = w0.args["order"].expressions if w0.args.get("order") else []
        by = tuple((_inner_column(o.this, lifted), bool(o.args.get("desc")),
                    bool(o.args.get("nulls_first"))) for o in ordered)
        cols = []
        for _, _, marker in group:
            cols.append(names.setdefault(f"_w_pending_{marker}", f"_w{len(names)}"))
        name = f"_wn_{n}" if not ops else f"_wn_{n}_{len(ops)}"
        ops.append(WindowOp(name, "", part, by, tuple(f for _, f, _ in group), tuple(cols)))
    inner = select.copy()
    inner.set("expressions", [exp.alias_(e, f"_c{i}") for i, e in enumerate(lifted.inner)])
    for arg in ("order", "limit", "offset", "distinct"):
        inner.set(arg, None)
    items.append(Item(last, select=inner))
    for op in ops:
        op = replace(op, source=last)
        items.append(Item(op.name, window=op))
        last = op.name
    table = exp.Table(this=exp.to_identifier(last), alias=exp.TableAlias(
        this=exp.to_identifier(last)))
    outer = exp.select(*[_qualified(e, last, names) for e in outer_items]).from_(table)
    if order is not None:
        outer.set("order", _qualified(order, last, names))
    for arg in ("limit", "offset", "distinct"):
        if select.args.get(arg) is not None:
            outer.set(arg, select.args[arg].copy())
    return items, outer


def _outer_expr(node: exp.Expr, lifted: _Lifted) -> exp.Expr:
    """``node`` with its window functions replaced by window markers and each of its
    largest window-free subexpressions that reads a column by an inner column."""
    if isinstance(node, exp.Window):
        return _window(node, lifted)
    if node.find(exp.Window) is None:
        if node.find(exp.Column) is None and node.find(exp.AggFunc) is None:
            return node  # (a constant stays in the outer SELECT)
        return exp.column(f"_c{_inner_index(node, lifted)}")
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expr):
            node.set(key, _outer_expr(value, lifted))
        elif isinstance(value, list):
            node.set(key, [_outer_expr(v, lifted) if isinstance(v, exp.Expr) else v
                           for v in value])
    return node


def _inner_index(node: exp.Expr, lifted: _Lifted) -> int:
    text = node.sql("duckdb")
    for i, e in enumerate(lifted.inner):
        if e.sql("duckdb") == text:
            return i
    lifted.inner.append(node.copy())
    return len(lifted.inner) - 1


def _inner_column(node: exp.Expr, lifted: _Lifted) -> int:
    if node.find(exp.Window) is not None:
        raise ExprError(node, "a window function inside a window's PARTITION BY, ORDER "
                              "BY or argument is not supported")
    return _inner_index(node, lifted)


def _window(w: exp.Window, lifted: _Lifted) -> exp.Expr:
    """The marker column of window function ``w`` (registered in ``lifted``)."""
    call = w.this
    if isinstance(call, (exp.IgnoreNulls, exp.RespectNulls)) or w.args.get("alias"):
        raise ExprError(w, "IGNORE NULLS and named windows are not supported")
    name = _FUNCS.get(type(call))
    if name is None:
        raise ExprError(w, f"window function {call.sql('duckdb')}: supported are "
                           "ROW_NUMBER, RANK, DENSE_RANK, PERCENT_RANK, CUME_DIST, NTILE, "
                           "SUM, COUNT, AVG, MIN, MAX, LAG, LEAD, FIRST_VALUE, LAST_VALUE")
    if isinstance(call.this, exp.Distinct):
        raise ExprError(w, f"{name.upper()}(DISTINCT ...) OVER is not supported")
    ordered = w.args.get("order") is not None
    frame = _frame(w, ordered)
    arg: int | None = None
    offset, default = 1, None
    if name == "count" and isinstance(call.this, exp.Star):
        name = "count_star"
    elif name == "ntile":
        offset = _positive(call.this, "NTILE's bucket count")
    elif name not in RANKING:
        arg = _inner_column(call.this, lifted)
    if name in ("lag", "lead"):
        if call.args.get("offset") is not None:
            offset = _positive(call.args["offset"], f"{name.upper()}'s offset", zero=True)
        if call.args.get("default") is not None:
            default = _inner_column(call.args["default"], lifted)
    if name in RANKING + ("lag", "lead"):
        frame = "rows" if name in ("row_number", "ntile", "lag", "lead") else "range"
    keys = (repr([e.sql("duckdb") for e in w.args.get("partition_by") or []]),
            w.args["order"].sql("duckdb") if ordered else "")
    f = WindowFunc(name, arg, frame, offset, default)
    lifted.windows.setdefault(keys, []).append((w, f, lifted.count))
    lifted.count += 1
    return exp.column(f"_w_pending_{lifted.count - 1}")


def _frame(w: exp.Window, ordered: bool) -> str:
    spec = w.args.get("spec")
    if spec is None:
        return "range" if ordered else "partition"
    start, end = spec.args.get("start"), spec.args.get("end")
    start_side, end_side = spec.args.get("start_side"), spec.args.get("end_side")
    if str(start).upper() == "UNBOUNDED" and str(start_side).lower() == "preceding":
        if str(end).upper() == "UNBOUNDED" and str(end_side).lower() == "following":
            return "partition"
        if end is None or str(end).upper() == "CURRENT ROW":
            kind = str(spec.args.get("kind")).lower()
            return ("rows" if kind == "rows" else "range") if ordered else "partition"
    raise ExprError(w, f"the window frame {spec.sql('duckdb')}: supported are UNBOUNDED "
                       "PRECEDING to CURRENT ROW or to UNBOUNDED FOLLOWING")


def _positive(node: exp.Expr, what: str, zero: bool = False) -> int:
    if isinstance(node, exp.Literal) and not node.is_string and node.name.isdigit():
        value = int(node.name)
        if value > 0 or (zero and value == 0):
            return value
    raise ExprError(node, f"{what} must be a positive integer constant")


def _qualified(node: exp.Expr, view: str, names: dict[str, str]) -> exp.Expr:
    """An outer expression with its columns (the inner ``_cK``, the window markers
    renamed to their ``_wK``) read from ``view``."""
    node = node.copy()
    for col in list(node.find_all(exp.Column)):
        if not col.table:
            col.set("this", exp.to_identifier(names.get(col.name, col.name)))
            col.set("table", exp.to_identifier(view))
    return node


def _order_over(select: exp.Select, outer_items: list[exp.Expr], lifted: _Lifted
                ) -> exp.Expr:
    """The SELECT's ORDER BY over the outer view: a name of the select list stays; an
    expression equal to a select item is its position; another is written over inner
    columns (and window markers)."""
    order = select.args["order"].copy()
    aliases = [e.alias.lower() if isinstance(e, exp.Alias) else "" for e in outer_items]
    texts = []
    for item in select.expressions:
        body = item.this if isinstance(item, exp.Alias) else item
        texts.append(body.sql("duckdb"))
    for o in order.expressions:
        node = o.this if isinstance(o, exp.Ordered) else o
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases:
            node.replace(exp.Literal.number(aliases.index(node.name.lower()) + 1))
            continue
        if isinstance(node, exp.Literal):
            continue
        text = node.sql("duckdb")
        if text in texts:
            node.replace(exp.Literal.number(texts.index(text) + 1))
        else:
            node.replace(_order_expr(node.copy(), select, outer_items, lifted))
    return order


def _order_expr(node: exp.Expr, select: exp.Select, outer_items: list[exp.Expr],
                lifted: _Lifted) -> exp.Expr:
    """An ORDER BY expression that is no select item, over the outer view: its parts
    that are select items (by text, or by a name that only a select item has) read the
    outer items' columns, so the ORDER BY is an expression over output columns (``CASE
    WHEN lochierarchy = 0 THEN i_category END``); any other column, aggregate or window
    function is an inner column or window marker (the outer query refuses to order by
    one not in its output). Inside an expression DuckDB reads a name as the FROM's
    column first, the SELECT alias only when the FROM has none: a name the SELECT reads
    as a column is that column; a SELECT alias of another expression is that item where
    the FROM items are base tables without such a column, else refused (the FROM's
    columns are not known here)."""
    bodies = [e.this if isinstance(e, exp.Alias) else e for e in outer_items]
    aliases = [e.alias.lower() if isinstance(e, exp.Alias) else "" for e in outer_items]
    items = [i.this if isinstance(i, exp.Alias) else i for i in select.expressions]
    texts = [i.sql("duckdb") for i in items]
    bare = select.copy()
    bare.set("order", None)
    read = {c.name.lower() for c in bare.find_all(exp.Column)
            if c.find_ancestor(exp.Select) is bare}

    def over(sub: exp.Expr) -> exp.Expr:
        text = sub.sql("duckdb")
        if text in texts and (sub.find(exp.Column) or sub.find(exp.AggFunc)):
            return bodies[texts.index(text)].copy()
        name = sub.name.lower() if isinstance(sub, exp.Column) and not sub.table else ""
        if name in aliases and name not in read and (
                lifted.from_columns is None or name not in lifted.from_columns):
            if lifted.from_columns is not None:
                return bodies[aliases.index(name)].copy()
            raise ExprError(sub, f"ORDER BY {node.sql()!r}: {sub.name!r} names a SELECT "
                                 "item beside window functions (and may name a column "
                                 "of the FROM): write the item's expression")
        if isinstance(sub, (exp.Column, exp.AggFunc, exp.Window)):
            return _outer_expr(sub, lifted)
        return map_args(sub, over)

    return over(node)


from core.schema import Schema  # noqa: E402
from plans.setops import Item  # noqa: E402  (setops imports this module for typing only)
