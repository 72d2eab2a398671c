"""The engine: runs the compiled Dataflow on one partition over the State protocol.

It instantiates the operators named by the graph (one :class:`JoinNode` per semi-join/
projection pair, the enumerator over the top part) and collects, per epoch, the row
payload changes that the finalizer turns into the consolidated delta.

Example:
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT);"
    ...                   "SELECT R.a, S.c FROM R, S WHERE R.b = S.b")
    >>> e = Engine(q.plan, q.dataflow)
    >>> e.apply_atom(0, (1, 2), 1); e.apply_atom(1, (2, 3), 2)
    >>> e.take_delta()
    {(1, 3): 2}
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from core.codegen import Bindings
from core.graph import Dataflow
from core.native import NativeBuild, NativeNamespace
from operators.aggregate import AggregateLayout
from operators.enumerate import Enumerator
from operators.joinnode import JoinNode
from operators.nodecode import pack_payloads
from operators.nodemaps import count_in, members
from operators.ring import IntRing, VectorRing
from operators.state import DictState, State
from plans.plan import Plan


def aggregate_layout(plan: Plan) -> AggregateLayout | None:
    """The ring layout of an aggregate query in ``ring`` mode (None otherwise)."""
    if plan.mode != "ring":
        return None
    owner: dict[str, int] = {}
    for agg in plan.cq.aggregates:
        if agg.var is not None and agg.var not in owner:
            owner[agg.var] = next(a.index for a in plan.cq.atoms if agg.var in a.vars)
    return AggregateLayout(
        [(a.func, a.var, a.result_type) for a in plan.cq.aggregates], owner
    )


def make_ring(plan: Plan) -> Any:
    layout = aggregate_layout(plan)
    return IntRing() if layout is None else VectorRing(layout.width - 1)


def row_vars(plan: Plan) -> tuple[str, ...]:
    """Variables of the rows the engine emits: the GROUP BY key for aggregates, else the
    SELECT list (repeats allowed; extension variables projected away)."""
    cq = plan.cq
    if cq.is_aggregate:
        return cq.group_by or ()
    return tuple(c.var for c in cq.columns if c.var is not None)


class Engine:
    """One partition: the join-tree operators and their state."""

    def __init__(self, plan: Plan, dataflow: Dataflow, state: State | None = None, *,
                 generated_hooks: bool = True,
                 keep_leaf_tuples: bool | frozenset[int] = True) -> None:
        """``generated_hooks=False`` passes the changes to the enumeration through the
        nodes' ``on_tuple``/``on_key`` hooks instead of generated delta walks (the same
        results, slower; tests compare the two). ``keep_leaf_tuples=False``:
        lower leaves keep their payload sums only (:attr:`JoinNode.sum_leaf`), for a
        caller that checks deletes itself; a set of atoms: only those atoms' leaves
        keep their tuples (a GHD's bags whose atoms are checked inside the bag)."""
        self.plan = plan
        self.state = state if state is not None else DictState()
        self.ring = make_ring(plan)
        layout = aggregate_layout(plan)
        nodes: dict[int, JoinNode] = {}
        specs = {n.id: n for n in plan.nodes}
        for op in dataflow.ops:
            if op.kind not in ("semijoin", "intersect"):
                continue
            spec = specs[op.param("node")]
            payload: Callable[[Any, int], Any] | None = None
            if layout is not None and spec.atom is not None:
                payload = self._payload_fn(layout, spec.atom, spec.attrs)
            nodes[spec.id] = JoinNode(
                op.id,
                spec.attrs,
                spec.generalized,
                spec.id,
                spec.top,
                plan.mode,
                self.ring,
                self.state,
                payload,
                keep_leaf_tuples if isinstance(keep_leaf_tuples, bool)
                else spec.atom in keep_leaf_tuples,
            )
        for spec in plan.nodes:
            if spec.parent is not None:
                nodes[spec.parent].attach_child(nodes[spec.id], spec.key)
        for node in nodes.values():
            node.finish()
        self.nodes = [nodes[i] for i in sorted(nodes)]
        self.atom_nodes: dict[int, JoinNode] = {
            spec.atom: nodes[spec.id] for spec in plan.nodes if spec.atom is not None
        }
        top = [n for n in self.nodes if n.top]
        self.enumerator = Enumerator(top, row_vars(plan), plan.mode, self.ring)
        self._acc: dict[Any, Any] = {}
        self._acc_envs: list[dict[str, Any] | NativeNamespace] = []
        walk = self.enumerator.compiled  # (cached: compiled on first use)

        # The generic hooks; with generated hooks over integers only code that stays
        # generic calls them (lower subtrees deeper than one node, ring payloads).
        def on_tuple(node: JoinNode, t: Any, factor: Any) -> None:
            walk(node, "tuple")((t,), factor, self.acc)

        def on_key(node: JoinNode, child: int, key: Any, factor: Any) -> None:
            # Read-only: a walk must not make the runners write back the sets it read.
            cands = node.live_read[child](key)
            if cands is not None:  # (a compact bucket: a set, or one bare tuple)
                walk(node, f"key {child}")(list(members(cands)), factor, self.acc)

        for node in top:
            node.on_tuple = on_tuple
            node.on_key = on_key
        # Generated node code calls its own delta walks directly (no hook in between);
        # their globals hold ``acc``, rebound whenever it is.
        if generated_hooks and isinstance(self.ring, IntRing):
            self._bind_direct(top)

    def _bind_direct(self, top: list[JoinNode]) -> None:
        """Bind, for integer payloads, each top node's changed-tuple walk and its key
        hook (a lower child's projection changed at a key: the tree's generated
        ``boundary_n`` changes the support, then calls it) to generated delta walks that
        do what ``on_tuple`` / ``on_key`` do."""
        enum = self.enumerator
        for node in top:
            if not node.generalized:
                walk, env = enum.delta_walk(node, "tuple")
                self._acc_envs.append(env)
                node.bind_emit(walk)
            walks: dict[int, Callable[..., None]] = {}
            for i, child in enumerate(node.children):
                if not child.top:
                    walks[i], env = enum.delta_walk(node, f"key {i}")
                    self._acc_envs.append(env)
            if walks:
                node.bind_keyhook(_key_walks(node.live_read, walks))
        self.acc = self._acc  # (binds it in every walk)

    def register_native(self, bindings: Bindings, prefix: str) -> None:
        """Register the namespaces ``acc`` is bound in: a native build swaps each for its
        compiled stand-in (where it compiled it), so ``acc`` is rebound in the compiled
        walks too, from then on."""
        for i, env in enumerate(self._acc_envs):
            bindings.value(f"{prefix} acc {i}", partial(self._acc_envs.__setitem__, i),
                           partial(_compiled_namespace, env))

    def pack_payloads(self, pack: Callable[[Any], Any]) -> int:
        """Have the trees' projections store ring payloads packed by ``pack`` (call
        before the first update and before a native build: it rebinds a global of the
        generated code). Returns how many trees store them so (0 over integers)."""
        return sum(pack_payloads(node, pack) for node in self.nodes if node.parent is None)

    def share_acc(self, env: dict[str, Any]) -> bool:
        """Bind :attr:`acc` as ``acc`` in ``env``, the globals of generated code that
        takes an epoch's changes itself (a view's epoch close), and rebind it there too
        whenever :attr:`acc` is replaced (call before :meth:`register_native`)."""
        env["acc"] = self._acc
        self._acc_envs.append(env)
        return True

    @property
    def acc(self) -> dict[Any, Any]:
        """Row payload changes of the current epoch (the delta walks add into it)."""
        return self._acc

    @acc.setter
    def acc(self, value: dict[Any, Any]) -> None:
        self._acc = value
        for env in self._acc_envs:
            env["acc"] = value

    @staticmethod
    def _payload_fn(
        layout: AggregateLayout, atom: int, attrs: tuple[str, ...]
    ) -> Callable[[Any, int], Any]:
        positions = [attrs.index(v) for v in layout.owned_vars(atom)]

        def payload(t: Any, m: int) -> Any:
            return layout.base_payload(atom, m, *(t[p] for p in positions))

        return payload

    def apply_atom(self, atom: int, t: tuple[Any, ...], dm: int) -> None:
        """Apply a (filtered, projected) update of one FROM item's copy."""
        self.atom_nodes[atom].apply(t, dm)

    def take_delta(self) -> dict[Any, Any]:
        """Row payload changes since the last call (zero entries possible)."""
        acc = self._acc
        if not acc:
            return {}
        # A copy (one C loop) instead of a fresh dict bound in every walk's namespace:
        # rebinding costs a Python call per walk, more than copying a small epoch's rows.
        out = acc.copy()
        acc.clear()
        return out

    def full(self) -> dict[Any, Any]:
        """Full enumeration of this partition's result: row -> payload."""
        out: dict[Any, Any] = {}
        self.enumerator.full(out)
        return out

    def group_payload(self) -> Callable[[tuple[Any, ...]], Any] | None:
        """For a grouped aggregate whose top part is one generalized node over the GROUP
        BY variables (COUNT per vertex, a star's SUM per center, ...): group key ->
        its current payload (the product of the lower children's payloads at the key),
        or None. The finalizer then keeps no copy of the groups. None for other plans.

        >>> from dataflow.api import compile_query
        >>> q = compile_query("CREATE TABLE G(src INT, dst INT); SELECT G1.src, COUNT(*) "
        ...                   "FROM G G1, G G2 WHERE G1.dst = G2.src GROUP BY G1.src")
        >>> e = q.kind.make_engine()
        >>> for t in [(1, 2), (2, 3), (2, 4)]:
        ...     e.apply_atom(0, t, 1); e.apply_atom(1, (t[0],), 1)
        >>> read = e.group_payload()
        >>> read((1,)), read((2,)), read((9,))
        (2, None, None)
        """
        cq = self.plan.cq
        top = [n for n in self.nodes if n.top]
        if not cq.is_aggregate or not cq.group_by or len(top) != 1:
            return None
        root = top[0]
        group = tuple(cq.group_by)
        if sorted(root.attrs) != sorted(group):
            return None
        pos = [group.index(v) for v in root.attrs]
        scalar = root.scalar
        if not root.generalized:
            if not root.base_in_proj or root.mode != "bag":
                return None
            # A top leaf whose tuple is the group (a count per key of one table: the
            # views of an EXISTS over the outer row's own table): its groups hold each
            # tuple's multiplicity, the COUNT.
            key_of, proj = root.key_of, root.proj_read

            def multiplicity(key: tuple[Any, ...]) -> Any:
                t = key[pos[0]] if scalar else tuple(key[p] for p in pos)
                return count_in(proj(key_of(t)), t) or None

            return multiplicity
        reads = [(child.proj_read, root.child_key_of[i])
                 for i, child in enumerate(root.children)]
        one, mul = self.ring.one, self.ring.mul

        def payload(key: tuple[Any, ...]) -> Any:
            t = key[pos[0]] if scalar else tuple(key[p] for p in pos)
            acc = one
            for read, key_of in reads:
                p = read(key_of(t))
                if p is None:
                    return None
                acc = mul(acc, p)
            return acc

        return payload

    def state_entries(self) -> int:
        return self.state.entries()


def _key_walks(live_read: list[Callable[[Any], Any]], walks: dict[int, Callable[..., None]]
               ) -> Callable[[int, Any, Any], None]:
    """A top node's key hook: the live tuples with key ``k`` for lower child ``i``, if
    any, to that child's delta walk (``on_key`` without the walk lookup)."""
    reads = tuple(live_read)
    by_child = tuple(walks.get(i) for i in range(len(reads)))

    def keyhook(i: int, k: Any, factor: Any) -> None:
        cands = reads[i](k)
        if cands is not None:  # (a compact bucket: a set, or one bare tuple)
            by_child[i](k, members(cands), factor)  # type: ignore[misc]

    return keyhook


def _compiled_namespace(env: object, build: NativeBuild) -> Any:
    """``env``'s compiled stand-in in ``build``, or ``env`` where it did not compile it."""
    return build.namespace(env) or env
