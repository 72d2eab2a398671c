"""The engine of a hierarchical query with the update/delay knob eps: the view trees of
:mod:`operators.viewtrees` behind the interface every runner drives (``apply_atom``,
``atom_nodes``, ``take_delta``, ``full``, ``state_entries``, ``ring``).

Example (Q(A) = R(A,B), S(B), the paper's Example 5, every key light at eps = 1):
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT);"
    ...                   "SELECT R.a FROM R, S WHERE R.b = S.b", eps=1.0, view_trees=True)
    >>> e = HierarchicalEngine(q.kind.hp, 1.0)
    >>> e.apply_atom(0, (1, 5), 1); e.apply_atom(0, (2, 5), 1); e.apply_atom(1, (5,), 2)
    >>> sorted(e.take_delta().items()), e.views.light_rows()
    ([((1,), 2), ((2,), 2)], 2)
"""

from __future__ import annotations

from typing import Any

from dataflow.engines import InterpretedEngine
from operators.ring import IntRing
from operators.state import DictState, State
from operators.viewtrees import HierarchicalViews
from plans.hierarchical import HierarchicalPlan


class _AtomPort:
    """One FROM item: reorders its projected tuple into its path order."""

    keeps_tuples = False  # (it stores the reordered tuple)

    def __init__(self, views: HierarchicalViews, atom: int, perm: tuple[int, ...]) -> None:
        self.views = views
        self.atom = atom
        self.perm = perm
        self.base = self

    def _key(self, t: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(t[p] for p in self.perm)

    def get(self, t: tuple[Any, ...], default: int = 0) -> int:
        """Multiplicity of the projected tuple ``t`` in this copy."""
        return self.views.multiplicity(self.atom, self._key(t)) or default

    def apply(self, t: tuple[Any, ...], dm: int) -> None:
        self.views.update(self.atom, self._key(t), dm)


class HierarchicalEngine(InterpretedEngine):
    """One partition of a hierarchical query (with P > 1 partitions the root variable,
    which occurs in every atom, is hashed: every output row comes from one partition)."""

    def __init__(self, hp: HierarchicalPlan, eps: float, state: State | None = None) -> None:
        self.hp = hp
        self.plan = hp.plan
        self.eps = eps
        self.state = state if state is not None else DictState()
        self.ring = IntRing()
        self.views = HierarchicalViews(hp, self.state, eps)
        self.atom_nodes: dict[int, _AtomPort] = {
            a.index: _AtomPort(self.views, a.index, hp.atom_perms[a.index])
            for a in hp.cq.atoms
        }

    @property
    def acc(self) -> dict[Any, int]:
        """Result changes not yet taken (the partitioned runners keep them with the
        state)."""
        return self.views.acc

    @acc.setter
    def acc(self, value: dict[Any, int]) -> None:
        self.views.acc = value

    def apply_atom(self, atom: int, t: tuple[Any, ...], dm: int) -> None:
        """Apply a (filtered, projected) update of one FROM item's copy."""
        self.atom_nodes[atom].apply(t, dm)

    def take_delta(self) -> dict[Any, Any]:
        """Row changes since the last call (zero entries possible)."""
        return self.views.take_delta()

    def full(self) -> dict[Any, Any]:
        """The whole result, enumerated from the view trees."""
        return self.views.full()

    def state_entries(self) -> int:
        return self.state.entries()
