"""The engine of a triangle query: the IVM-epsilon operators of
:mod:`operators.triangle` behind the interface of :class:`dataflow.engine.Engine`
(``apply_atom``, ``atom_nodes``, ``take_delta``, ``full``, ``state_entries``, ``ring``).

Example (a directed 3-cycle over one edge table; each occurrence is one copy):
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE G(src INT, dst INT); SELECT COUNT(*) FROM G a, G b,"
    ...                   " G c WHERE a.dst = b.src AND b.dst = c.src AND c.dst = a.src")
    >>> from operators.input import RelationInput
    >>> inputs = [RelationInput(atom, q.cq.join_vars) for atom in q.cq.atoms]
    >>> e = TriangleEngine(q.triangle, 0.5)
    >>> for edge in [(1, 2), (2, 3), (3, 1)]:
    ...     for k, project in enumerate(inputs):  # tuples in the atom's variable order
    ...         e.apply_atom(k, project(edge), 1)
    >>> e.take_delta(), e.full()
    ({(): 3}, {(): 3})
"""

from __future__ import annotations

from typing import Any

from operators.ring import IntRing
from operators.state import DictState, State
from operators.triangle import TriangleCount, TriangleListing
from plans.triangle import TrianglePlan


class _AtomPort:
    """One FROM item: turns its projected tuple into its role's (first, second)."""

    def __init__(self, op: TriangleCount | TriangleListing, role: int, swapped: bool) -> None:
        self.op = op
        self.role = role
        self.swapped = swapped

    def apply(self, t: tuple[Any, ...], dm: int) -> None:
        self.op.update(self.role, (t[1], t[0]) if self.swapped else (t[0], t[1]), dm)


class TriangleEngine:
    """One partition (the only one: triangle queries run with parallelism 1)."""

    def __init__(self, tp: TrianglePlan, eps: float, state: State | None = None) -> None:
        self.tp = tp
        self.plan = tp.plan
        self.eps = eps
        self.state = state if state is not None else DictState()
        self.ring = IntRing()
        self.op: TriangleCount | TriangleListing
        if tp.kind == "count":
            self.op = TriangleCount(self.state, eps)
        else:
            self.op = TriangleListing(self.state, eps)
        self.atom_nodes: dict[int, _AtomPort] = {
            k: _AtomPort(self.op, tp.roles[k], tp.swapped[k]) for k in range(3)
        }
        self._positions = tp.out_positions

    @property
    def router(self) -> Any:
        return self.op.router

    def apply_atom(self, atom: int, t: tuple[Any, ...], dm: int) -> None:
        """Apply a (filtered, projected) update of one FROM item's copy."""
        self.atom_nodes[atom].apply(t, dm)

    def _rows(self, triangles: dict[tuple[Any, Any, Any], int]) -> dict[Any, Any]:
        pos = self._positions
        if pos == (0, 1, 2):
            return triangles
        out: dict[Any, Any] = {}
        for t, m in triangles.items():
            row = tuple(t[p] for p in pos)
            out[row] = out.get(row, 0) + m
        return out

    def take_delta(self) -> dict[Any, Any]:
        """Row changes since the last call: ``{(): change of the count}`` for the count,
        triangle rows for the listing (zero entries possible)."""
        op = self.op
        if isinstance(op, TriangleCount):
            d = op.take_delta()
            return {(): d} if d else {}
        return self._rows(op.take_delta())

    def full(self) -> dict[Any, Any]:
        """The whole result from the maintained views."""
        op = self.op
        if isinstance(op, TriangleCount):
            return {(): op.count} if op.count else {}
        return self._rows(op.full())

    def state_entries(self) -> int:
        entries = getattr(self.state, "entries", None)
        return int(entries()) if callable(entries) else 0
