"""The engine of a cyclic query planned as a generalized hypertree decomposition
(:mod:`plans.ghd`): each bag maintained inside, CROWN's :class:`dataflow.engines.crown.Engine`
over the bags. It has the interface of :class:`dataflow.engines.crown.Engine`
(``apply_atom``, ``atom_nodes``, ``take_delta``, ``full``, ``state_entries``, ``ring``).

Every atom update is turned into the change of its bag's relation right away (the
triangle listing's per-update deltas, a delta join, or the tuple itself) and each
changed bag tuple is one update of the CROWN engine; applied in sequence, these are
exact for self-joins too (the copies of one base update are fed one after the other).

Example (a 4-cycle R(a,b), S(b,c), T(c,d), U(d,a) counted):
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE E(s INT, d INT); SELECT COUNT(*) FROM E r, E s, E t,"
    ...     " E u WHERE r.d = s.s AND s.d = t.s AND t.d = u.s AND u.d = r.s")
    >>> from operators.input import RelationInput
    >>> inputs = [RelationInput(atom, q.cq.join_vars) for atom in q.cq.atoms]
    >>> e = GhdEngine(q.kind.gp, 0.5)
    >>> for edge in [(1, 2), (2, 3), (3, 4), (4, 1)]:
    ...     for k, project in enumerate(inputs):
    ...         e.apply_atom(k, project(edge), 1)
    >>> e.take_delta(), e.full()
    ({(): 4}, {(): 4})
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataflow.engines import InterpretedEngine
from dataflow.engines.crown import Engine
from dataflow.engines.triangle import TriangleEngine
from operators.deltajoin import DeltaJoin
from operators.state import DictState, State, count_entries
from plans.dag import compile_dataflow
from plans.ghd import GhdPlan


class PrefixedState:
    """A namespace inside another State (each bag's operators use their own map names,
    e.g. two triangle bags both call theirs ``tri.*``), so one State holds the whole
    partition and round-trips as one blob."""

    def __init__(self, inner: State, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix

    def map(self, name: str) -> Any:
        return self.inner.map(self.prefix + name)

    def field_map(self, name: str, nkey: int, nval: int,
                  key_at: tuple[int, ...] | None = None) -> Any:
        return self.inner.field_map(self.prefix + name, nkey, nval, key_at)

    def field_map_factory(self) -> Any:
        return self.inner.field_map_factory()

    def names(self) -> list[str]:
        n = len(self.prefix)
        return [x[n:] for x in self.inner.names() if x.startswith(self.prefix)]

    def entries(self) -> int:
        return count_entries(self.map(name) for name in self.names())


def _projector(src: tuple[str, ...], dst: tuple[str, ...]) -> Any:
    if src == dst:
        return None
    pos = tuple(src.index(v) for v in dst)
    return lambda t: tuple(t[p] for p in pos)


class _Feed:
    """Sends a bag's row changes to the CROWN engine as updates of the bag relation."""

    def __init__(self, crown: Engine, bag: int) -> None:
        self.node = crown.atom_nodes[bag]

    def rows(self, delta: dict[Any, int]) -> None:
        node = self.node
        for row, m in delta.items():
            if m:
                node.apply(row, m)


class _AtomPort:
    """A single-atom bag: the (projected) tuple is the bag tuple."""

    def __init__(self, feed: _Feed, src: tuple[str, ...], dst: tuple[str, ...]) -> None:
        self.node = feed.node
        self.project = _projector(src, dst)
        # A lone atom's join variables all occur in other bags, so it is never summed
        # out: its CROWN node's base holds the copy's multiplicities.
        self.base = self.node.base if self.project is None else None

    @property
    def keeps_tuples(self) -> bool:
        return self.project is None and self.node.keeps_tuples

    def apply(self, t: tuple[Any, ...], dm: int) -> None:
        self.node.apply(t if self.project is None else self.project(t), dm)


class _TrianglePort:
    """One FROM item of a triangle bag (IVM-epsilon listing, projected to the bag)."""

    keeps_tuples = False  # (the triangle views key their maps by the tuples' parts)

    def __init__(
        self, tri: TriangleEngine, k: int, feed: _Feed, src: tuple[str, ...],
        dst: tuple[str, ...],
    ) -> None:
        self.tri = tri
        self.k = k
        self.feed = feed
        self.project = _projector(src, dst)
        self.base = tri.atom_nodes[k].base  # the copy's multiplicities (delete checks)

    def apply(self, t: tuple[Any, ...], dm: int) -> None:
        tri = self.tri
        tri.apply_atom(self.k, t, dm)
        delta = tri.take_delta()
        if self.project is not None:
            out: dict[Any, int] = {}
            for row, m in delta.items():
                key = self.project(row)
                out[key] = out.get(key, 0) + m
            delta = out
        self.feed.rows(delta)


class _JoinPort:
    """One FROM item of a delta-join bag (its relation copy counts the tuples)."""

    keeps_tuples = True

    def __init__(self, join: DeltaJoin, k: int, feed: _Feed) -> None:
        self.join = join
        self.k = k
        self.feed = feed
        self.base = join.rel[k]  # the copy's multiplicities (delete checks)

    def apply(self, t: tuple[Any, ...], dm: int) -> None:
        self.feed.rows(self.join.update(self.k, t, dm))


class GhdEngine(InterpretedEngine):
    """One partition: the bag operators and CROWN over the bags."""

    def __init__(self, gp: GhdPlan, eps: float, state: State | None = None,
                 keep_leaf_tuples: bool = True) -> None:
        """``keep_leaf_tuples=False``: CROWN's leaf bags that only feed sums keep the
        sums (:class:`~dataflow.engines.crown.Engine`), for a caller that checks
        deletes itself. With it True, only single-atom bags' leaves keep their tuples:
        they are those atoms' delete checks. A delta-join or triangle bag checks its
        atoms' deletes against its own relation copies, and its tuples are derived
        from them, so CROWN's leaf over it keeping them too would be a second copy of
        the bag that nothing reads (TPC-H Q5's lineitem-supplier bag: a quarter of
        the partition's state on the runners)."""
        self.gp = gp
        self.plan = gp.plan
        self.eps = eps
        self.state = state if state is not None else DictState()
        keep: bool | frozenset[int] = keep_leaf_tuples and frozenset(
            b.index for b in gp.bags if b.kind == "atom")
        self.crown = Engine(
            gp.bag_plan, compile_dataflow(gp.bag_plan), PrefixedState(self.state, "crown."),
            keep_leaf_tuples=keep,
        )
        self.ring = self.crown.ring
        self.triangles: dict[int, TriangleEngine] = {}
        self.joins: dict[int, DeltaJoin] = {}
        self.atom_nodes: dict[int, _AtomPort | _TrianglePort | _JoinPort] = {}
        cq = gp.cq
        for bag in gp.bags:
            feed = _Feed(self.crown, bag.index)
            if bag.kind == "atom":
                a = bag.atoms[0]
                self.atom_nodes[a] = _AtomPort(feed, cq.atoms[a].vars, bag.vars)
            elif bag.kind == "triangle":
                assert bag.triangle is not None
                tri = TriangleEngine(bag.triangle, eps, PrefixedState(self.state, f"{bag.name}."))
                self.triangles[bag.index] = tri
                tri_vars = tuple(c.var for c in bag.triangle.cq.columns if c.var is not None)
                for k, a in enumerate(bag.atoms):
                    self.atom_nodes[a] = _TrianglePort(tri, k, feed, tri_vars, bag.vars)
            else:
                join = DeltaJoin(
                    [cq.atoms[a].vars for a in bag.atoms], bag.vars, self.state, name=bag.name
                )
                self.joins[bag.index] = join
                for k, a in enumerate(bag.atoms):
                    self.atom_nodes[a] = _JoinPort(join, k, feed)

    def apply_atom(self, atom: int, t: tuple[Any, ...], dm: int) -> None:
        """Apply a (filtered, projected) update of one FROM item's copy."""
        self.atom_nodes[atom].apply(t, dm)

    @property
    def acc(self) -> dict[Any, Any]:
        """The row payload changes not taken yet (the partitioned runners save them)."""
        return self.crown.acc

    @acc.setter
    def acc(self, value: dict[Any, Any]) -> None:
        self.crown.acc = value

    def take_delta(self) -> dict[Any, Any]:
        """Row payload changes since the last call (zero entries possible)."""
        return self.crown.take_delta()

    def full(self) -> dict[Any, Any]:
        """Full enumeration from CROWN's structure over the bags."""
        return self.crown.full()

    def state_entries(self) -> int:
        return self.state.entries()

    def pack_payloads(self, pack: Callable[[Any], Any]) -> int:
        """CROWN's over the bags (:meth:`~dataflow.engines.crown.Engine.pack_payloads`);
        the bags' own operators keep integers."""
        return self.crown.pack_payloads(pack)
