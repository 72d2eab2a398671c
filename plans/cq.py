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
from dataclasses import dataclass
from typing import Literal

from core.schema import Column, Relation, Schema, Value

CompareOp = Literal["=", "<>", "<", "<=", ">", ">=", "in", "is null", "is not null"]
AggFunc = Literal["count_star", "count", "sum", "avg"]


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

    @property
    def name(self) -> str:
        return self.alias


@dataclass(frozen=True)
class Aggregate:
    """An aggregate of the SELECT list; ``var`` is None for COUNT(*)."""

    func: AggFunc
    var: str | None
    result_type: str


@dataclass(frozen=True)
class OutputColumn:
    """A SELECT item: either a variable or an aggregate (by index)."""

    name: str
    var: str | None = None
    aggregate: int | None = None


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
    sql: str

    @property
    def is_aggregate(self) -> bool:
        return bool(self.aggregates)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def hyperedges(self) -> list[frozenset[str]]:
        return [frozenset(a.vars) for a in self.atoms]


def column_type_of(cq: ConjunctiveQuery, var: str) -> Column:
    """The column (and so the type) that a variable stands for (first occurrence)."""
    for atom in cq.atoms:
        for i, v in enumerate(atom.column_vars):
            if v == var:
                return atom.relation.columns[i]
    msg = f"variable {var!r} does not occur in the query"
    raise KeyError(msg)
