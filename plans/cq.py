"""The conjunctive query (CQ) that a SQL file compiles to.

Variables are the equality classes of columns; each FROM item (alias) is an atom over
its relation; filters are per atom; the output is a list of variables and aggregates.

Example:
    >>> from plans.sql import parse_query
    >>> cq = parse_query("CREATE TABLE G(src INT, dst INT);"
    ...                  "SELECT G1.src, G2.dst FROM G G1, G G2 WHERE G1.dst = G2.src")
    >>> [a.vars for a in cq.atoms]
    [('src', 'g1.dst'), ('g1.dst', 'dst')]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from core.consolidate import ComputedKey
from core.schema import Column, Relation, Schema, Value

CompareOp = Literal["=", "<>", "<", "<=", ">", ">=", "in", "is null", "is not null"]
AggFunc = Literal["count_star", "count", "sum", "avg", "min", "max", "count_distinct",
                  "sum_distinct", "avg_distinct"]


@dataclass(frozen=True)
class Filter:
    """A predicate on one column of one atom: ``column <op> value(s)``."""

    column: int
    column_name: str
    op: CompareOp
    values: tuple[Value, ...] = ()

    def render(self, alias: str) -> str:
        col = f"{alias}.{self.column_name}"
        if self.op in ("is null", "is not null"):
            return f"{col} {self.op.upper()}"
        if self.op == "in":
            return f"{col} IN ({', '.join(repr(v) for v in self.values)})"
        return f"{col} {self.op} {self.values[0]!r}"

    def predicate(self) -> Callable[[Value], bool]:
        """A Python test with SQL's three-valued logic collapsed to False on NULL."""
        op = self.op
        if op == "is null":
            return lambda v: v is None
        if op == "is not null":
            return lambda v: v is not None
        if op == "in":
            allowed = frozenset(self.values)
            return lambda v: v is not None and v in allowed
        c = self.values[0]
        if op == "=":
            return lambda v: v is not None and v == c
        if op == "<>":
            return lambda v: v is not None and v != c
        if op == "<":
            return lambda v: v is not None and v < c  # type: ignore[operator]
        if op == "<=":
            return lambda v: v is not None and v <= c  # type: ignore[operator]
        if op == ">":
            return lambda v: v is not None and v > c  # type: ignore[operator]
        return lambda v: v is not None and v >= c  # type: ignore[operator]


@dataclass(frozen=True)
class DerivedVar:
    """A variable an atom computes from its row (a per-relation map): ``src`` is Python
    source over ``row`` (names bound in the atom's ``env``), ``sql`` what the user
    wrote."""

    var: str
    src: str
    column: Column
    sql: str


@dataclass(frozen=True)
class Predicate:
    """A condition over one atom's row that is not a plain column filter: ``src`` is
    Python source over ``row``, true exactly when the SQL condition is TRUE."""

    src: str
    sql: str


@dataclass(frozen=True)
class Atom:
    """One occurrence of a relation in FROM (self-joins give several atoms).

    ``column_vars[i]`` is the variable of column ``i``; ``vars`` are the distinct
    variables the plan keeps (used by a join, the output, a GROUP BY or an aggregate),
    in global variable order.
    """

    index: int
    alias: str
    relation: Relation
    column_vars: tuple[str, ...]
    filters: tuple[Filter, ...]
    vars: tuple[str, ...]
    derived: tuple[DerivedVar, ...] = ()
    predicates: tuple[Predicate, ...] = ()
    env: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Constants and helpers the generated code of ``derived`` and ``predicates`` reads."""

    @property
    def name(self) -> str:
        return self.alias

    def render_conditions(self) -> tuple[str, ...]:
        """Filters and predicates as explain shows them."""
        return tuple(f.render(self.alias) for f in self.filters) + tuple(
            p.sql for p in self.predicates) + tuple(
            f"{d.var} := {d.sql}" for d in self.derived)


@dataclass(frozen=True)
class Aggregate:
    """An aggregate of the SELECT list; ``var`` is None for COUNT(*)."""

    func: AggFunc
    var: str | None
    result_type: str
    scale: int = 0
    """Digits after the point of a DECIMAL SUM."""


@dataclass(frozen=True)
class OutputColumn:
    """A SELECT item: either a variable or an aggregate (by index)."""

    name: str
    var: str | None = None
    aggregate: int | None = None
    expr: str | None = None
    """SQL text of a column computed after the aggregate (its code is in ``PostMap``)."""


@dataclass(frozen=True)
class FinalAggregate:
    """An aggregate of the stage after the join block's groups (:class:`Reaggregate`):
    over an engine variable (``var``: its per-group count and sum are read from the
    ring payload) or over ``glue``, Python source over the extended group key
    (``key[i]``) that an expression over several FROM items became."""

    func: AggFunc
    var: str | None
    glue: str | None
    result_type: str
    scale: int = 0


@dataclass(frozen=True)
class Reaggregate:
    """Expressions over several FROM items, maintained as a view over the join block:
    the engine groups by the final GROUP BY keys plus the *carried* variables (each the
    value of a largest one-item subexpression), and this stage folds those groups'
    changes into the final groups: ``condition`` (over ``key``) keeps or drops a whole
    engine group, ``aggregates`` are the final ones."""

    n_keys: int
    grouped: bool
    condition: str | None
    aggregates: tuple[FinalAggregate, ...]
    carried: tuple[str, ...]
    """SQL text of each carried variable (explain)."""
    env: dict[str, Any] = field(compare=False, hash=False)


@dataclass(frozen=True)
class PostMap:
    """The stage after the aggregate: output row and HAVING over a group's key
    (``key[i]``) and aggregate values (``v[j]``), as Python source; ``having`` is None
    when every group is kept."""

    exprs: tuple[str, ...]
    having: str | None
    env: dict[str, Any] = field(compare=False, hash=False)
    types: tuple[Any, ...] = ()
    """The static type (:class:`plans.expr.SqlType`) of each of ``exprs``."""
    names: tuple[str, ...] = ()
    """For a query without aggregates: the output columns' names. Its rows are then the
    engine's rows (``key``: the SELECT list's variables, then the carried ones),
    filtered by ``having`` (the conditions over several FROM items) and mapped by
    ``exprs``."""


@dataclass(frozen=True)
class ConjunctiveQuery:
    """A SQL query in the supported class, as atoms over variables."""

    schema: Schema
    atoms: tuple[Atom, ...]
    var_order: tuple[str, ...]
    join_vars: frozenset[str]
    columns: tuple[OutputColumn, ...]
    free_vars: tuple[str, ...]
    aggregates: tuple[Aggregate, ...]
    group_by: tuple[str, ...] | None
    distinct: bool
    source: str
    """The query file's name (messages); its text stays with the parse."""
    post: PostMap | None = None
    reagg: Reaggregate | None = None
    order_by: tuple[tuple[int | ComputedKey, bool, bool], ...] = ()
    """ORDER BY as (output column, descending, nulls first): the order of snapshots; a
    key that is an expression over output columns (not one itself) is a
    :class:`~core.consolidate.ComputedKey`."""
    output_types: tuple[str, ...] = ()
    """Each output column's SQL type, as a CREATE TABLE of a view reading this one
    declares it (``BIGINT``, ``DECIMAL(38,2)``, ``DOUBLE``, ``VARCHAR``, ``DATE``...)."""
    limit: int | None = None
    offset: int = 0
    """``ORDER BY ... LIMIT k OFFSET m``: the result is the top-k window (maintained)."""

    @property
    def is_aggregate(self) -> bool:
        return bool(self.aggregates)

    @property
    def output_names(self) -> tuple[str, ...]:
        if self.post is not None and self.post.names:
            return self.post.names
        return tuple(c.name for c in self.columns)

    def hyperedges(self) -> list[frozenset[str]]:
        return [frozenset(a.vars) for a in self.atoms]


def column_type_of(cq: ConjunctiveQuery, var: str) -> Column:
    """The column (and so the type) that a variable stands for (first occurrence)."""
    for atom in cq.atoms:
        for i, v in enumerate(atom.column_vars):
            if v == var:
                return atom.relation.columns[i]
        for d in atom.derived:
            if d.var == var:
                return d.column
    msg = f"variable {var!r} does not occur in the query"
    raise KeyError(msg)
