"""The per-partition engines and the one protocol they share.

An engine runs one partition of a compiled query over the State protocol: the runners
feed it (filtered, projected) updates of FROM items with :meth:`PartitionEngine.apply_atom`
and take, per epoch, the row payload changes the output finalizer turns into the delta.

* :class:`~dataflow.engines.crown.Engine`: CROWN's join tree (acyclic queries);
* :class:`~dataflow.engines.triangle.TriangleEngine`: IVM-epsilon triangle views;
* :class:`~dataflow.engines.ghd.GhdEngine`: bags of a hypertree decomposition inside,
  CROWN across them.

Which one a query gets is decided by its :class:`dataflow.circuit.kinds.QueryKind`
(``make_engine``), so no runner branches on the kind of query.

Example:
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE R(a INT); SELECT COUNT(*) FROM R")
    >>> engine: PartitionEngine = q.kind.make_engine()
    >>> engine.apply_atom(0, (7,), 2)
    >>> engine.take_delta()
    {(): 2}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from core.codegen import Bindings
from operators.state import State

__all__ = ["AtomPort", "InterpretedEngine", "PartitionEngine"]


class AtomPort(Protocol):
    """Where the updates of one FROM item's copy enter an engine."""

    def apply(self, t: tuple[Any, ...], dm: int) -> None:
        """Apply ``dm`` (signed) copies of the projected tuple ``t``."""
        ...

    @property
    def base(self) -> Any:
        """The copy's multiplicities (``base.get(t, 0)``; the partitioned runners check
        deletes with it), or None where the port does not keep them."""
        ...

    @property
    def keeps_tuples(self) -> bool:
        """Whether the port stores the tuples it is given as they are (so a view that
        packs them, :mod:`core.native_rows`, stores less)."""
        ...


class PartitionEngine(Protocol):
    """What every engine offers the runners (checked by mypy where kinds make engines)."""

    @property
    def ring(self) -> Any:
        """The payload ring of the rows (integers, or aggregate vectors)."""
        ...

    @property
    def state(self) -> State:
        """All of the engine's keyed state (what a runner binds to its backend)."""
        ...

    @property
    def atom_nodes(self) -> Mapping[int, AtomPort]:
        """FROM item index -> its port."""
        ...

    acc: dict[Any, Any]
    """Row payload changes not taken yet (a runner saves them with the state)."""

    def apply_atom(self, atom: int, t: tuple[Any, ...], dm: int) -> None:
        """Apply a (filtered, projected) update of FROM item ``atom``."""
        ...

    def take_delta(self) -> dict[Any, Any]:
        """Row payload changes since the last call (zero entries possible)."""
        ...

    def full(self) -> dict[Any, Any]:
        """The whole current result of this partition: row -> payload."""
        ...

    def state_entries(self) -> int:
        """Stored state entries (for benchmarks)."""
        ...

    def group_payload(self) -> Callable[[tuple[Any, ...]], Any] | None:
        """Group key -> its current payload, where the engine maintains an aggregate's
        groups itself (the finalizer then keeps no copy of them); else None."""
        ...

    def share_acc(self, env: dict[str, Any]) -> bool:
        """Bind :attr:`acc` as ``acc`` in ``env`` (the globals of generated code that
        takes an epoch's changes itself) and keep it bound there; False, binding
        nothing, where the engine's changes are not one shared map."""
        ...

    def register_native(self, bindings: Bindings, prefix: str) -> None:
        """Register what a native build rebinds in this engine (nothing for most)."""
        ...

    def pack_payloads(self, pack: Callable[[Any], Any]) -> int:
        """Store the ring payloads the engine keeps packed by ``pack`` (before the
        first update); returns how many stores do (0: the engine keeps none, or
        integers only)."""
        ...


class InterpretedEngine:
    """What an engine without generated code of its own offers for the optional parts of
    :class:`PartitionEngine`: no group payloads, no shared change map, nothing for a
    native build to rebind (triangles, GHD, view trees)."""

    def group_payload(self) -> Callable[[tuple[Any, ...]], Any] | None:
        """None: the finalizer keeps the groups (:meth:`PartitionEngine.group_payload`)."""
        return None

    def share_acc(self, env: dict[str, Any]) -> bool:
        """False: the changes are taken with :meth:`take_delta`."""
        return False

    def register_native(self, bindings: Bindings, prefix: str) -> None:
        """Nothing to rebind: this engine runs interpreted."""

    def pack_payloads(self, pack: Callable[[Any], Any]) -> int:
        """0: no ring payloads kept by generated code here."""
        return 0
