"""Outer joins as inner joins over *keyed views* (and with them NOT EXISTS, which
sqlglot's unnesting leaves as ``LEFT JOIN`` + ``IS NULL``, and correlated ``COUNT``
subqueries, which it leaves as ``LEFT JOIN`` + ``COALESCE``).

``A LEFT JOIN B ON A.x = B.y AND pA AND pB`` is ``A' JOIN B' ON A'.key = B'.key`` where

- ``A'`` is A with a hidden join key: ``(0, x)``, or ``(1,)`` for a row that can match
  nothing (a NULL in x, or pA not TRUE); every row of A is kept;
- ``B'`` is B's rows that pass pB with key ``(0, y)`` (a NULL y matches nothing: dropped),
  plus one NULL-padded row for every key of A' that no row of B' has.

Each row of A then meets its matches, or exactly one padded row: the LEFT JOIN. A
padded row appears when the last match of its key goes and disappears when the first
arrives, in that epoch's delta (:mod:`operators.keyedview` keeps a count per key on
both sides). RIGHT JOIN swaps the roles; FULL JOIN keeps and pads both sides (B's
unmatchable rows get tag 2, and A' pads B's keys). The tag keeps NULL keys apart: SQL's
NULL never equals NULL, and a tagged key never equals a real one.

Example:
    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT a.x, b.z FROM a AS a LEFT JOIN b AS b ON a.x = b.y")
    >>> views = rewrite_outer_joins(q, iter(range(9)))
    >>> [(v.name, v.own.source, v.preserve, v.pad is not None) for v in views]
    [('_kv_0', 'a', True, False), ('_kv_1', 'b', False, True)]
    >>> q.sql()
    'SELECT a.x, b.z FROM _kv_0 AS a JOIN _kv_1 AS b ON a._kv_0_k0 = b._kv_1_k0'
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from core.schema import Relation
from plans.expr import Code, ExprCompiler, ExprError, SqlType, column_refs, conjuncts

PRESERVED_TAG = 1
"""Hidden tag of a row of the left (first) side that can match nothing."""
RIGHT_TAG = 2
"""Hidden tag of a row of the right side that can match nothing (FULL JOIN)."""


@dataclass(frozen=True)
class Condition:
    """The ON conjuncts over one side's row, compiled: ``src`` is Python over ``row``
    (names bound in ``env``), true exactly when the SQL condition is TRUE; ``sql`` is
    what the user wrote (explain)."""

    src: str
    sql: str
    env: dict[str, Any] = field(default_factory=dict, compare=False, hash=False,
                                repr=False)

    def __str__(self) -> str:
        return self.sql


@dataclass(frozen=True)
class JoinSide:
    """One side of an outer join's ON: rows of ``source`` (a base table or an earlier
    view) under ``alias``; ``columns`` are equated, in order, with the other side's;
    ``condition`` is the ON conjuncts over this side alone, which a row must pass to
    match; ``tag`` marks its rows that can match nothing. The split leaves the
    conjuncts' tree in ``on`` (the source's columns are typed only once the views
    before it are built); :func:`compile_condition` makes it ``condition``."""

    source: str
    alias: str
    columns: tuple[str, ...]
    condition: Condition | None
    tag: int
    on: exp.Expr | None = field(default=None, compare=False, repr=False)


def compile_condition(side: JoinSide, rel: Relation) -> JoinSide:
    """``side`` with its ON conjuncts (``on``) compiled over the rows of ``rel``, its
    source; raises :class:`~plans.expr.ExprError` at a column of another table."""
    if side.on is None:
        return side
    names = [c.name.lower() for c in rel.columns]

    def resolve(node: exp.Expr) -> Code | None:
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            if node.table and node.table.lower() != side.alias.lower():
                raise ExprError(node, f"column {node.sql()!r} is not of {side.alias}")
            i = names.index(node.name.lower())
            return Code(f"row[{i}]", SqlType.of_column(rel.columns[i]), True, simple=True)
        return None

    env: dict[str, Any] = {}
    src = ExprCompiler(env, resolve).predicate(side.on)
    return replace(side, condition=Condition(src, side.on.sql("duckdb"), env), on=None)


@dataclass(frozen=True)
class KeyedView:
    """A view of the rows of ``keys[0].source`` with one hidden join key column per
    entry of ``keys`` (``{name}_k0``, ...; each value the tuple ``(tag, *key)``), then
    the source's columns. Rows that can match nothing are kept, tagged, when
    ``preserve``, else dropped; with ``pad`` (one key only), one NULL-padded row per key
    of ``pad``'s rows that no kept row here has. A preserved table in several outer
    joins gets one view with a key per join (one stage, one join variable each)."""

    name: str
    keys: tuple[JoinSide, ...]
    preserve: bool
    pad: JoinSide | None

    @property
    def own(self) -> JoinSide:
        return self.keys[0]

    @property
    def hidden(self) -> tuple[str, ...]:
        return tuple(f"{self.name}_k{j}" for j in range(len(self.keys)))


def rewrite_outer_joins(select: exp.Select, names: Iterator[int]) -> list[KeyedView]:
    """Rewrite ``select``'s outer joins (in place) into inner joins over keyed views;
    return those views in the order they are built (a view reads only tables and views
    before it). ``select`` is qualified (every column names its table alias)."""
    joins = select.args.get("joins") or []
    if not any((j.args.get("side") or "") for j in joins):
        return []
    from_ = select.args.get("from_") or select.args.get("from")
    assert from_ is not None
    items: list[exp.Table] = [from_.this] + list(getattr(from_, "expressions", []) or [])
    current: dict[str, str] = {}
    for item in items:
        current[_alias(item)] = _table_name(item)
    out: list[KeyedView] = []
    wrapper: dict[str, int] = {}
    """alias -> index in ``out`` of the keyed view that only adds keys to its rows
    (further LEFT JOINs on that alias add a key to it; their pads read its source)."""
    for join in joins:
        right = join.this
        side = (join.args.get("side") or "").upper()
        if not side:
            items.append(right)
            current[_alias(right)] = _table_name(right)
            continue
        if not isinstance(right, exp.Table):
            raise ExprError(right, f"{side} OUTER JOIN of this item is not supported "
                                   "(join a table, a view or a WITH name)")
        if (join.args.get("kind") or "").upper() not in ("", "OUTER"):
            raise ExprError(right, f"{side} {join.args['kind']} JOIN is not supported")
        r_alias = _alias(right)
        current[r_alias] = _table_name(right)
        left_aliases = [_alias(i) for i in items]
        pairs, conds = _split_on(join, left_aliases, r_alias, side)
        l_alias = pairs[0][0].table
        if side in ("RIGHT", "FULL") and len(items) != 1:
            raise ExprError(right, f"{side} OUTER JOIN after several FROM items is not "
                                   "supported (its left side must be one table or view)")
        w = wrapper.get(l_alias) if side == "LEFT" else None
        l_source = out[w].own.source if w is not None else current[l_alias]
        left = JoinSide(l_source, l_alias, tuple(a.name for a, _ in pairs), None,
                        PRESERVED_TAG, _and(conds[l_alias]))
        right_side = JoinSide(current[r_alias], r_alias, tuple(b.name for _, b in pairs),
                              None, RIGHT_TAG, _and(conds[r_alias]))
        keep_left, keep_right = side in ("LEFT", "FULL"), side in ("RIGHT", "FULL")
        if w is not None:
            kv_left = replace(out[w], keys=(*out[w].keys, left))
            out[w] = kv_left
        else:
            kv_left = KeyedView(f"_kv_{next(names)}", (left,), keep_left,
                                None if keep_left and not keep_right else right_side)
            out.append(kv_left)
            _retarget(select, l_alias, kv_left.name)
            current[l_alias] = kv_left.name
            if side == "LEFT":
                wrapper[l_alias] = len(out) - 1
        kv_right = KeyedView(f"_kv_{next(names)}", (right_side,), keep_right,
                             None if keep_right and not keep_left else left)
        out.append(kv_right)
        wrapper.pop(r_alias, None)
        if side == "RIGHT":
            wrapper[r_alias] = len(out) - 1
        right.set("this", exp.to_identifier(kv_right.name))
        current[r_alias] = kv_right.name
        on = exp.EQ(this=exp.column(kv_left.hidden[-1], table=l_alias),
                    expression=exp.column(kv_right.hidden[0], table=r_alias))
        join.set("on", on)
        join.set("side", None)
        join.set("kind", None)
        items.append(right)
    return out


def _alias(item: exp.Expr) -> str:
    return str(item.alias_or_name)


def _table_name(item: exp.Expr) -> str:
    return str(item.name) if isinstance(item, exp.Table) else _alias(item)


def _retarget(select: exp.Select, alias: str, name: str) -> None:
    """Point the FROM item ``alias`` at relation ``name`` (its columns keep their
    names: a keyed view has its source's columns)."""
    for table in select.find_all(exp.Table):
        if _alias(table) == alias and table.find_ancestor(exp.Select) is select:
            table.set("this", exp.to_identifier(name))
            return


def _and(conds: list[exp.Expr]) -> exp.Expr | None:
    if not conds:
        return None
    return exp.and_(*conds) if len(conds) > 1 else conds[0].copy()


def _split_on(join: exp.Join, left_aliases: list[str], r_alias: str,
              side: str) -> tuple[list[tuple[exp.Column, exp.Column]], dict[str, list[exp.Expr]]]:
    """The ON's equalities (left column, right column) and its conjuncts per side."""
    on = join.args.get("on")
    if on is None:
        raise ExprError(join.this, f"{side} OUTER JOIN without ON is not supported")
    parts = conjuncts(on)
    pairs: list[tuple[exp.Column, exp.Column]] = []
    per_side: dict[str, list[exp.Expr]] = {}
    rest: list[exp.Expr] = []
    for c in parts:
        while isinstance(c, exp.Paren):
            c = c.this
        if isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(
                c.expression, exp.Column):
            a, b = c.this, c.expression
            if b.table in left_aliases and a.table == r_alias:
                a, b = b, a
            if a.table in left_aliases and b.table == r_alias:
                pairs.append((a, b))
                continue
        rest.append(c)
    if not pairs:
        raise ExprError(join.this, f"{side} OUTER JOIN needs an equality between a column "
                                   "of each side in its ON")
    l_alias = pairs[0][0].table
    if any(a.table != l_alias for a, _ in pairs):
        raise ExprError(join.this, f"{side} OUTER JOIN whose ON equates columns of several "
                                   "left tables is not supported (one table per side)")
    per_side[l_alias], per_side[r_alias] = [], []
    for c in rest:
        tables = {col.table for col in column_refs(c)}
        if not tables:
            # (a column-free conjunct: a row of either side matches only if it holds)
            per_side[l_alias].append(c)
            per_side[r_alias].append(c.copy())
        elif len(tables) == 1 and next(iter(tables)) in per_side:
            per_side[next(iter(tables))].append(c)
        else:
            raise ExprError(c, f"{side} OUTER JOIN condition over both sides other than "
                               "column equalities is not supported")
    return pairs, per_side
