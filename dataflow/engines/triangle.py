"""The engine of a triangle query: the IVM-epsilon operators of
:mod:`operators.triangle` behind the interface of :class:`dataflow.engines.crown.Engine`
(``apply_atom``, ``atom_nodes``, ``take_delta``, ``full``, ``state_entries``, ``ring``).

Example (a directed 3-cycle over one edge table; each occurrence is one copy):
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE G(src INT, dst INT); SELECT COUNT(*) FROM G a, G b,"
    ...                   " G c WHERE a.dst = b.src AND b.dst = c.src AND c.dst = a.src")
    >>> from operators.input import RelationInput
    >>> inputs = [RelationInput(atom, q.cq.join_vars) for atom in q.cq.atoms]
    >>> e = TriangleEngine(q.kind.tp, 0.5)
    >>> for edge in [(1, 2), (2, 3), (3, 1)]:
    ...     for k, project in enumerate(inputs):  # tuples in the atom's variable order
    ...         e.apply_atom(k, project(edge), 1)
    >>> e.take_delta(), e.full()
    ({(): 3}, {(): 3})
"""

from __future__ import annotations

from typing import Any

from dataflow.engines import InterpretedEngine
from operators.ring import IntRing
from operators.state import DictState, State
from operators.triangle import TriangleCount, TriangleListing
from operators.triangle_freevars import TriangleBinary, TriangleCountDouble, TriangleUnary
from plans.triangle import TrianglePlan

TriangleOp = TriangleCount | TriangleListing | TriangleBinary | TriangleUnary | TriangleCountDouble


class _AtomPort:
    """One FROM item: turns its projected tuple into its role's (first, second).
    ``base`` reads the copy's multiplicities (the partitioned runners validate deletes
    with it)."""

    keeps_tuples = False  # (it stores the tuple's parts)

    def __init__(self, op: TriangleOp, role: int, swapped: bool) -> None:
        self.op = op
        self.role = role
        self.swapped = swapped
        self.base = self

    def get(self, t: tuple[Any, ...], default: int = 0) -> int:
        """Multiplicity of the projected tuple ``t`` in this copy."""
        key = (t[1], t[0]) if self.swapped else (t[0], t[1])
        return self.op.whole(self.role, key) or default

    def apply(self, t: tuple[Any, ...], dm: int) -> None:
        self.op.update(self.role, (t[1], t[0]) if self.swapped else (t[0], t[1]), dm)


class TriangleEngine(InterpretedEngine):
    """One partition of a triangle query (with P > 1 partitions, HyperCube shares over
    A, B, C put every triangle in exactly one partition)."""

    def __init__(self, tp: TrianglePlan, eps: float, state: State | None = None) -> None:
        self.tp = tp
        self.plan = tp.plan
        self.eps = eps
        self.state = state if state is not None else DictState()
        self.ring = IntRing()
        self.op: TriangleOp
        if tp.kind == "count" and tp.partitioning == "double":
            self.op = TriangleCountDouble(self.state, eps)
        elif tp.kind == "count":
            self.op = TriangleCount(self.state, eps)
        elif tp.kind == "binary":
            self.op = TriangleBinary(self.state, eps)
        elif tp.kind == "unary":
            self.op = TriangleUnary(self.state, eps)
        else:
            self.op = TriangleListing(self.state, eps)
        self.atom_nodes: dict[int, _AtomPort] = {
            k: _AtomPort(self.op, tp.roles[k], tp.swapped[k]) for k in range(3)
        }
        self._positions = tp.out_positions

    @property
    def router(self) -> Any:
        return self.op.router

    @property
    def acc(self) -> dict[Any, int]:
        """Result changes not yet taken (kept with the state by the partitioned
        runners; the counts keep theirs in the state already)."""
        op = self.op
        return {} if isinstance(op, TriangleCount) else op.acc

    @acc.setter
    def acc(self, value: dict[Any, int]) -> None:
        op = self.op
        if not isinstance(op, TriangleCount):
            op.acc = value

    def apply_atom(self, atom: int, t: tuple[Any, ...], dm: int) -> None:
        """Apply a (filtered, projected) update of one FROM item's copy."""
        self.atom_nodes[atom].apply(t, dm)

    def _rows(self, results: dict[Any, int]) -> dict[Any, Any]:
        """Operator keys ((a,b,c), (a,b) or a) -> rows of the engine's row variables."""
        pos = self._positions
        kind = self.tp.kind
        if kind == "listing" and pos == (0, 1, 2) or kind == "binary" and pos == (0, 1):
            return results
        out: dict[Any, Any] = {}
        for t, m in results.items():
            key = (t,) if kind == "unary" else t
            row = tuple(key[p] for p in pos)
            out[row] = out.get(row, 0) + m
        return out

    def take_delta(self) -> dict[Any, Any]:
        """Row changes since the last call: ``{(): change of the count}`` for the count,
        triangle rows for the listing (zero entries possible)."""
        op = self.op
        if isinstance(op, TriangleCount):
            d = op.take_delta()
            return {(): d} if d else {}
        if isinstance(op, TriangleCountDouble):
            return op.take_delta()
        return self._rows(op.take_delta())

    def full(self) -> dict[Any, Any]:
        """The whole result from the maintained views."""
        op = self.op
        if isinstance(op, (TriangleCount, TriangleCountDouble)):
            return {(): op.count} if op.count else {}
        return self._rows(op.full())

    def state_entries(self) -> int:
        return self.state.entries()
