"""Relation input (filters, projection onto the atom's variables; one instance per
occurrence, so a self-join fans an update out to every copy) and the base validator
(multiplicities of base tuples, so that an invalid delete is refused before anything
changes).

Example:
    >>> from plans.sql import parse_query
    >>> cq = parse_query("CREATE TABLE G(src INT, dst INT);"
    ...                  "SELECT G1.src FROM G G1, G G2 WHERE G1.dst = G2.src AND G2.dst > 3")
    >>> g2 = RelationInput(cq.atoms[1], cq.join_vars)
    >>> g2((2, 5)), g2((2, 1))
    ((2,), None)
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from dataflow.errors import InputError
from plans.cq import Atom
from plans.schema import Row


class RelationInput:
    """Filters a base row for one atom and projects it onto the atom's variables."""

    def __init__(self, atom: Atom, join_vars: frozenset[str]) -> None:
        self.atom = atom
        checks: list[tuple[int, Callable[[Any], bool]]] = []
        for f in atom.filters:
            checks.append((f.column, f.predicate()))
        first: dict[str, int] = {}
        equal_pairs: list[tuple[int, int]] = []
        for i, v in enumerate(atom.column_vars):
            if v in first:
                equal_pairs.append((first[v], i))
            else:
                first[v] = i
        # SQL equality never holds for NULL: a NULL in a join column joins nothing.
        not_null = sorted(
            {first[v] for v in atom.vars if v in join_vars}
            | {i for pair in equal_pairs for i in pair}
        )
        self.checks = checks
        self.equal_pairs = equal_pairs
        self.not_null = not_null
        self.positions = tuple(first[v] for v in atom.vars)
        self.trivial = not checks and not equal_pairs and not not_null

    def __call__(self, row: Row) -> tuple[Any, ...] | None:
        if not self.trivial:
            for i in self.not_null:
                if row[i] is None:
                    return None
            for i, pred in self.checks:
                if not pred(row[i]):
                    return None
            for i, j in self.equal_pairs:
                if row[i] != row[j]:
                    return None
        return tuple([row[i] for i in self.positions])


class BaseValidator:
    """Keeps the multiplicity of every base tuple and refuses deletes of absent copies."""

    def __init__(self, counts: MutableMapping[Any, int]) -> None:
        self.counts = counts

    def check(self, relation: str, row: Row, dm: int, source: str) -> None:
        if dm >= 0:
            return
        have = self.counts.get((relation, row), 0)
        if have + dm < 0:
            shown = ",".join("" if v is None else str(v) for v in row)
            raise InputError(
                source or "<updates>",
                f"-{-dm},{relation},{shown}" if dm != -1 else f"-,{relation},{shown}",
                f"a delete of at most {have} cop{'y' if have == 1 else 'ies'} present",
                f"a delete of {-dm}",
                "a delete must remove copies that were inserted before",
            )

    def apply(self, relation: str, row: Row, dm: int) -> None:
        key = (relation, row)
        n = self.counts.get(key, 0) + dm
        if n:
            self.counts[key] = n
        else:
            del self.counts[key]
