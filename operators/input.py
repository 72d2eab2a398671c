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

from core.codegen import define
from core.errors import InputError
from core.schema import Row
from plans.cq import Atom


class RelationInput:
    """Filters a base row for one atom and projects it onto the atom's variables.

    The test and the projection are compiled into one small Python function per atom
    (this runs for every update and every self-join copy)."""

    def __init__(self, atom: Atom, join_vars: frozenset[str]) -> None:
        self.atom = atom
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
        self._not_null = not_null
        self._equal_pairs = equal_pairs
        # Rows of any type here: every NULL test kept, the predicates called.
        test, env = self.typed_test(frozenset(), "")
        self.positions = tuple(first[v] for v in atom.vars)
        if self.positions == tuple(range(atom.relation.arity)):
            result = "row"
        else:
            result = "(" + "".join(f"row[{i}], " for i in self.positions) + ")"
        self.result_expr = result
        lines = ["def project(row):"]
        if test:
            lines.append(f"    if {test}:")
            lines.append("        return None")
        lines.append(f"    return {result}")
        self.source = "\n".join(lines)
        define(self.source, f"<input {atom.alias}>", env)
        self.project: Callable[[Row], tuple[Any, ...] | None] = env["project"]
        """The compiled filter and projection (call it directly on hot paths)."""

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
        return " or ".join(tests), env


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

    def update(self, relation: str, row: Row, dm: int, source: str) -> None:
        """Check, then apply: a refused delete changes nothing."""
        key = (relation, row)
        n = self.counts.get(key, 0) + dm
        if n > 0:
            self.counts[key] = n
        elif n == 0:
            del self.counts[key]
        else:
            self.check(relation, row, dm, source)
