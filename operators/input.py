"""Relation input: filters and projection onto the atom's variables, one instance per
occurrence, so a self-join fans an update out to every copy. (The delete check that
runs before it: :mod:`operators.deletecheck`.)

Example:
    >>> from plans.sql import parse_query
    >>> cq = parse_query("CREATE TABLE G(src INT, dst INT);"
    ...                  "SELECT G1.src FROM G G1, G G2 WHERE G1.dst = G2.src AND G2.dst > 3")
    >>> g2 = RelationInput(cq.atoms[1], cq.join_vars)
    >>> g2((2, 5)), g2((2, 1))
    ((2,), None)
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from core.codegen import define
from core.schema import Relation, Row
from plans.cq import Atom


class RelationInput:
    """Filters a base row for one atom and projects it onto the atom's variables.

    The test and the projection are compiled into one small Python function per atom
    (this runs for every update and every self-join copy)."""

    def __init__(self, atom: Atom, join_vars: frozenset[str]) -> None:
        self.atom = atom
        self._pack_env: dict[str, Any] = {}
        first: dict[str, int] = {}
        equal_pairs: list[tuple[int, int]] = []
        for i, v in enumerate(atom.column_vars):
            if v in first:
                equal_pairs.append((first[v], i))
            else:
                first[v] = i
        # SQL equality never holds for NULL: a NULL in a join column joins nothing. (A
        # join variable that is a derived cast has its column's IS NOT NULL filter.)
        not_null = sorted(
            {first[v] for v in atom.vars if v in join_vars and v in first}
            | {i for pair in equal_pairs for i in pair}
        )
        self._not_null = not_null
        self._equal_pairs = equal_pairs
        # A derived variable is the compiled expression of a per-relation map.
        derived = {d.var: d.src for d in atom.derived}
        parts = [f"row[{first[v]}]" if v in first else derived[v] for v in atom.vars]
        if parts == [f"row[{i}]" for i in range(atom.relation.arity)]:
            result = "row"
        else:
            result = "(" + "".join(f"{p}, " for p in parts) + ")"
        self.result_expr = result
        """The atom tuple as Python source over ``row`` (names bound by :meth:`typed_test`)."""
        self.takes_whole_rows = (result == "row" and not atom.filters and not equal_pairs
                                 and not atom.predicates)
        """Whether :attr:`project` passes a row unchanged or not at all (None only for a
        NULL in a join column): its node keeps every row it takes, whole."""
        self.project: Callable[[Row], tuple[Any, ...] | None] = self._define_project()
        """The compiled filter and projection (call it directly on hot paths)."""

    def _define_project(self) -> Callable[[Row], tuple[Any, ...] | None]:
        """Compile :attr:`project` from :meth:`typed_test` and :attr:`result_expr`
        (setting :attr:`source`)."""
        # Rows of any type here: every NULL test kept, the predicates called.
        test, env = self.typed_test(frozenset(), "")
        lines = ["def project(row):"]
        if test:
            lines += [f"    if {test}:", "        return None"]
        lines.append(f"    return {self.result_expr}")
        self.source = "\n".join(lines)
        define(self.source, f"<input {self.atom.alias}>", env)
        project: Callable[[Row], tuple[Any, ...] | None] = env["project"]
        return project

    def pack_with(self, pack: Callable[[tuple[Any, ...]], Any]) -> None:
        """Hand the atom's node its tuples packed by ``pack`` (the native build's packed
        rows, :mod:`core.native_rows`: equal to the tuple and hashing as it does, in a
        third of the bytes or less): :attr:`project` and :attr:`result_expr` (which then
        calls ``PACK``, bound by :meth:`typed_test`) both."""
        self._pack_env = {"PACK": pack}
        self.result_expr = f"PACK({self.result_expr})"
        self.project = self._define_project()

    def __call__(self, row: Row) -> tuple[Any, ...] | None:
        return self.project(row)

    def typed_test(self, non_null: frozenset[int], tag: str) -> tuple[str, dict[str, Any]]:
        """The filter test of :attr:`project` (true: the row is filtered out) for rows
        whose columns ``non_null`` are known to hold no NULL (their exact types were
        checked): those NULL tests dropped, comparisons with a constant inlined. Names
        it binds end in ``tag``; returns the expression (empty: nothing is filtered
        out) and what it binds.

        >>> from plans.sql import parse_query
        >>> cq = parse_query("CREATE TABLE G(src INT, dst INT);"
        ...                  "SELECT G1.src FROM G G1, G G2 WHERE G1.dst = G2.src AND G2.dst > 3")
        >>> RelationInput(cq.atoms[1], cq.join_vars).typed_test(frozenset({0, 1}), "_1")
        ('not (row[1] > c0_1)', {'c0_1': 3})
        """
        env: dict[str, Any] = {}
        tests = [f"row[{i}] is None" for i in self._not_null if i not in non_null]
        for n, f in enumerate(self.atom.filters):
            col = f.column
            op = {"=": "==", "<>": "!="}.get(f.op, f.op)
            if col in non_null and op in ("==", "!=", "<", "<=", ">", ">="):
                env[f"c{n}{tag}"] = f.values[0]
                tests.append(f"not (row[{col}] {op} c{n}{tag})")
            elif col in non_null and op == "in":
                env[f"c{n}{tag}"] = frozenset(f.values)
                tests.append(f"row[{col}] not in c{n}{tag}")
            else:
                env[f"p{n}{tag}"] = f.predicate()
                tests.append(f"not p{n}{tag}(row[{col}])")
        tests.extend(f"row[{i}] != row[{j}]" for i, j in self._equal_pairs)
        # Conditions compiled from SQL expressions (their constants have query-unique
        # names, bound once here for the predicates and the derived variables).
        env.update(self.atom.env)
        env.update(self._pack_env)
        tests.extend(f"not {p.src}" for p in self.atom.predicates)
        return " or ".join(tests), env


_PY_TYPES: dict[str, tuple[type, ...]] = {
    "INT": (int,), "FLOAT": (float,), "TEXT": (str,), "BOOL": (bool,),
    "DECIMAL": (Decimal,), "DATE": (datetime.date,), "TIMESTAMP": (datetime.datetime,),
    "KEY": (tuple,)}


@dataclass
class RelationRoute:
    """Where a view sends a relation's updates: the Python types its columns' values
    have (``types``; ``exact_types``, the one a well-typed value has exactly) and the
    FROM items that read it (``atoms``: (atom, its input)).

    >>> from core.schema import Column, Relation
    >>> RelationRoute.of(Relation("R", (Column("a", "INT"),))).exact_types
    (<class 'int'>,)
    """

    relation: Relation
    types: tuple[tuple[type, ...], ...]
    atoms: list[tuple[int, RelationInput]] = field(default_factory=list)

    @classmethod
    def of(cls, relation: Relation) -> RelationRoute:
        return cls(relation, tuple(_PY_TYPES[c.type] for c in relation.columns))

    @property
    def exact_types(self) -> tuple[type, ...]:
        return tuple(t[0] for t in self.types)
