"""Set operations (``UNION [ALL]``, ``INTERSECT [ALL]``, ``EXCEPT [ALL]``) as views of
the plan: each branch of a set operation becomes a view of its own, and the set
operation a view over them (:class:`SetOperation`, maintained by
:mod:`operators.setop`) that the query reads as a table.

:func:`lift_set_operations` turns a query file's SELECT into such **items**, in an
order where each reads only base tables and the items before it: every WITH (or
CREATE VIEW) of the file, every branch, every set operation, and last the query
itself. A set operation anywhere - a WITH's body, a derived table, an ``IN`` or
scalar subquery, the file's top level - is replaced where it stood by ``SELECT * FROM
<its view>``. Chains of one operation are one view (``A UNION ALL B UNION ALL C``
reads three branches; ``(A EXCEPT B) EXCEPT C`` is ``A`` minus both); an operation
of another kind or flag nested in one is a view of its own. Queries without a set
operation are not touched (None), so their plans stay what they were.

Example:
    >>> from plans.sqlparse import parse_file
    >>> parsed = parse_file('''CREATE TABLE a(x INT); CREATE TABLE b(y INT);
    ...     SELECT COUNT(*) FROM (SELECT x FROM a INTERSECT SELECT y FROM b) t''', "q.sql")
    >>> for item in lift_set_operations(parsed.select):
    ...     print(item.name or "(query)", item.setop or item.select.sql())
    _sb_0 SELECT x FROM a
    _sb_1 SELECT y FROM b
    _so_0 SetOperation(name='_so_0', op='intersect', distinct=True, inputs=('_sb_0', '_sb_1'))
    (query) SELECT COUNT(*) FROM (SELECT * FROM _so_0 AS _so_0) AS t
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from plans.expr import ExprError

if TYPE_CHECKING:
    from plans.windows import WindowOp

__all__ = ["Item", "SetOperation", "common_type", "lift_items", "lift_set_operations"]

_OPS: dict[type[exp.SetOperation], str] = {
    exp.Union: "union", exp.Intersect: "intersect", exp.Except: "except"}


@dataclass(frozen=True)
class SetOperation:
    """The view ``name``: ``op`` (``union``, ``intersect`` or ``except``) of the views
    ``inputs`` (two or more, in order: ``except`` takes the rows of the first not in
    the others), with set semantics (``distinct``) or bag semantics (``ALL``)."""

    name: str
    op: str
    distinct: bool
    inputs: tuple[str, ...]

    @property
    def sql_name(self) -> str:
        """``UNION ALL``, ``EXCEPT``, ... as SQL writes it."""
        return self.op.upper() + ("" if self.distinct else " ALL")


@dataclass(frozen=True)
class Item:
    """One view (or, with ``name == ""``, the query) of a lifted file: a SELECT over
    base tables and the items before it, or a set operation over items before it."""

    name: str
    select: exp.Select | None = None
    setop: SetOperation | None = None
    window: WindowOp | None = None
    """A window view over an item before it (:mod:`plans.windows`)."""


def lift_set_operations(select: exp.Select) -> list[Item] | None:
    """The items of a query file's SELECT (WITHs included) when it holds a set
    operation anywhere, else None. ``select`` is not changed."""
    if not any(True for _ in select.find_all(exp.SetOperation)):
        return None
    return lift_items(select)


def lift_items(select: exp.Select) -> list[Item]:
    """The items of a query file's SELECT: each WITH, each set operation and its
    branches, then the query (what :func:`lift_set_operations` gives, also for a file
    without a set operation: window functions are lifted from these)."""
    return _Lifter().lift_file(select)


class _Lifter:
    def __init__(self) -> None:
        self.items: list[Item] = []
        self.branches: Iterator[int] = itertools.count()
        self.setops: Iterator[int] = itertools.count()

    def lift_file(self, select: exp.Select) -> list[Item]:
        main = select.copy()
        with_ = main.args.get("with_")
        main.set("with_", None)
        for cte in with_.expressions if with_ is not None else []:
            if cte.args.get("alias") is not None and cte.args["alias"].columns:
                raise ExprError(cte, "a WITH (or CREATE VIEW) naming its columns beside a "
                                     "set operation is not supported: name them in its "
                                     "SELECT")
            body = _unwrap(cte.this)
            if isinstance(body, exp.SetOperation):
                self.lift_setop(body, cte.alias)
            elif isinstance(body, exp.Select):
                self.lift_select(body, cte.alias)
            else:
                raise ExprError(body, "a view must be one SELECT or set operation")
        self.lift_select(main, "")
        return self.items

    def lift_select(self, select: exp.Select, name: str) -> None:
        """``select`` with each outermost set operation in it replaced by a SELECT of
        its view (lifted first), then itself as item ``name``."""
        for node in list(select.find_all(exp.SetOperation)):
            if node.find_ancestor(exp.SetOperation) is not None or not _inside(node, select):
                continue  # (a branch of an outer one, or already replaced)
            view = f"_so_{next(self.setops)}"
            self.lift_setop(node, view)
            table = exp.Table(this=exp.to_identifier(view),
                              alias=exp.TableAlias(this=exp.to_identifier(view)))
            node.replace(exp.select("*").from_(table))
        if select.args.get("with_") is not None:
            raise ExprError(select, "a WITH inside a set operation's branch or a derived "
                                    "table is not supported beside set operations: move it "
                                    "to the query's WITH")
        self.items.append(Item(name, select=select))

    def lift_setop(self, node: exp.SetOperation, name: str) -> None:
        if any(node.args.get(arg) is not None for arg in ("order", "limit", "offset")):
            raise ExprError(node, "ORDER BY, LIMIT or OFFSET on a set operation inside the "
                                  "query is not supported: apply them in a SELECT over it")
        if node.args.get("with_") is not None:
            raise ExprError(node, "a WITH on a set operation inside the query is not "
                                  "supported: move it to the query's WITH")
        if node.args.get("by_name") or node.args.get("side") or node.args.get("kind"):
            raise ExprError(node, "UNION BY NAME and outer set operations are not supported")
        op = _OPS[type(node)]
        distinct = bool(node.args.get("distinct"))
        inputs: list[str] = []
        for branch in _branches(node, op, distinct):
            if isinstance(branch, exp.SetOperation):
                view = f"_so_{next(self.setops)}"
                self.lift_setop(branch, view)
            elif isinstance(branch, exp.Select):
                view = f"_sb_{next(self.branches)}"
                self.lift_select(branch.copy(), view)
            else:
                raise ExprError(branch, f"a branch of {op.upper()} must be a SELECT")
            inputs.append(view)
        self.items.append(Item(name, setop=SetOperation(name, op, distinct, tuple(inputs))))


def _inside(node: exp.Expr, select: exp.Select) -> bool:
    parent = node.parent
    while parent is not None:
        if parent is select:
            return True
        parent = parent.parent
    return False


def _unwrap(node: exp.Expr) -> exp.Expr:
    while isinstance(node, (exp.Subquery, exp.Paren)) and not node.args.get("alias"):
        node = node.this
    return node


def _branches(node: exp.SetOperation, op: str, distinct: bool) -> list[exp.Expr]:
    """The branches of a chain of one operation with one flag, in order: UNION and
    INTERSECT on either side (associative), EXCEPT on the left only (``A EXCEPT (B
    EXCEPT C)`` is not ``A EXCEPT B EXCEPT C``)."""
    out: list[exp.Expr] = []
    for i, side in enumerate((node.this, node.expression)):
        side = _unwrap(side)
        same = isinstance(side, exp.SetOperation) and _OPS[type(side)] == op and \
            bool(side.args.get("distinct")) == distinct and (op != "except" or i == 0) and \
            not any(side.args.get(a) for a in ("order", "limit", "offset", "with_"))
        out += _branches(side, op, distinct) if same else [side]  # type: ignore[arg-type]
    return out


_NUMERIC_RANK = {"TINYINT": 0, "SMALLINT": 1, "INT": 2, "INTEGER": 2, "BIGINT": 3,
                 "HUGEINT": 4}


def common_type(types: list[str]) -> str | None:
    """The type the branches' column of ``types`` (SQL type names as the plan writes
    them) has in a set operation's result, as DuckDB unifies them, or None when they
    cannot be unified: one type stays; integers widen; integers and DECIMALs give a
    DECIMAL with the widest integer part and the largest scale; any DOUBLE gives
    DOUBLE; a NULL column takes the others' type.

    >>> common_type(["INT", "DECIMAL(7,2)"]), common_type(["DECIMAL(7,2)", "DECIMAL(15,4)"])
    ('DECIMAL(12,2)', 'DECIMAL(15,4)')
    >>> common_type(["VARCHAR", "INT"]) is None
    True
    """
    known = [t.upper() for t in types if t.upper() not in ("NULL", "UNKNOWN")]
    if not known:
        return types[0]
    if len(set(known)) == 1:
        return known[0]
    if any(t in ("DOUBLE", "FLOAT", "REAL") for t in known):
        return "DOUBLE" if all(_numeric(t) for t in known) else None
    if not all(_numeric(t) for t in known):
        texts = {"VARCHAR", "TEXT", "STRING"}
        if all(t in texts or t.startswith(("CHAR", "VARCHAR")) for t in known):
            return "VARCHAR"
        return None
    if all(t in _NUMERIC_RANK for t in known):
        return max(known, key=_NUMERIC_RANK.__getitem__)
    whole, scale = 0, 0
    for t in known:
        p, s = _decimal(t)
        whole, scale = max(whole, p - s), max(scale, s)
    return f"DECIMAL({min(38, whole + scale)},{scale})"


def _numeric(t: str) -> bool:
    return t in _NUMERIC_RANK or t.startswith(("DECIMAL", "NUMERIC")) or t in (
        "DOUBLE", "FLOAT", "REAL")


def _decimal(t: str) -> tuple[int, int]:
    """(precision, scale) of a DECIMAL or integer type (integers as DuckDB casts them)."""
    if t in _NUMERIC_RANK:
        return ({0: 3, 1: 5, 2: 10, 3: 19, 4: 38}[_NUMERIC_RANK[t]], 0)
    inside = t[t.find("(") + 1:t.rfind(")")] if "(" in t else "18,3"
    p, _, s = inside.partition(",")
    return int(p), int(s or 0)
