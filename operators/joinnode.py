"""Join-tree node operators: semi-join with counters (R-, P- and S-updates of CROWN),
projection with derivation counts or ring payloads, and live views.

A node keeps, over the State protocol:

* ``base``: tuple -> multiplicity, kept by atom leaves only. An atom node with children
  keeps each tuple's multiplicity in its first child index instead (buckets are
  tuple -> multiplicity there; ``node.base`` reads it, :class:`IndexedBase`); a top leaf
  over integer payloads keeps it in its ``proj`` groups (below); a *sum leaf* (a lower leaf
  over ring payloads, where the caller checks deletes: :attr:`JoinNode.sum_leaf`) keeps
  no tuples at all (:data:`NO_TUPLES`); a generalized node has none. A node declares
  only the maps it uses (:data:`NO_MAP`),
* no ``counter`` (tuple -> number of children whose projection holds the tuple's key,
  CROWN's "horizontal" derivation counter; a generalized node's virtual tuples are
  exactly the keys of its children's projections): a leaf's count is always 0, and any
  other node's is read from its children's projections when needed (one lookup per
  child, where a stored counter would hold a dict entry per tuple of the node: TPC-H
  Q8's and Q9's lineitem, whose part filter leaves most tuples without support, Q18's
  orders under its generalized root; :meth:`JoinNode.support_count`),
* ``index.<child>``: child key -> tuples of this node with that key (for P-updates;
  atoms only; children on one key share one),
* ``proj``: this node's projection on its key to the parent. Top nodes keep it as
  key -> set of semi-join tuples (V_s grouped by key, used for enumeration; a top leaf
  over integer payloads, all of whose tuples are in V_s, keeps key -> {tuple: multiplicity}
  there instead, and no ``base``: one map less to write per update, and an enumeration
  reads a tuple's multiplicity where it finds the tuple); lower
  nodes keep key -> derivation count (set mode) or key -> payload (bag/ring mode).
  A *key leaf* (a lower leaf whose tuples are its keys) keeps nothing else: its
  ``proj`` is key -> multiplicity, and ``base`` reads through it (:class:`KeyedBase`),
* top nodes only: ``live.<child>``: child key -> live tuples with that key (to walk
  upwards). V_l itself (the tuples that occur in the current result) is not stored: a
  tuple is live when it is in V_s and its key is in the parent's live index (every
  tuple of the root's V_s is live), so ``node.live`` (:class:`LiveTuples`) derives it
  and the operators change no map when a tuple turns live or dead.

A node is the maps and the wiring; what it does to them exists once, as generated
code, one namespace per tree compiled when its last node is finished: the R-updates and
the lower part's projections in :mod:`operators.nodecode`, the top part's S- and
P-updates and liveness walks in :mod:`operators.nodewalks`. The interpreted build runs
that code as Python, the native build compiles it (:mod:`core.native`). Projectors and
the read-only views of a node's multiplicities are in :mod:`operators.nodemaps`.

Every change that alters the result is reported to the node's enumerator hook exactly
once, at the place where it enters the top part: a top tuple whose support or payload
changes, or a boundary key (a lower subtree's projection) whose payload changes.
Deletions are enumerated against the pre-delete state, insertions after the state has
absorbed them (CROWN, section 5.2).

Example:
    >>> from operators.state import DictState
    >>> from operators.ring import IntRing
    >>> leaf = JoinNode("R2", ("b",), False, 0, True, "bag", IntRing(), DictState())
    >>> root = JoinNode("R1", ("a", "b"), False, 0, True, "bag", IntRing(), DictState())
    >>> root.attach_child(leaf, key_attrs=("b",))
    >>> root.finish(); leaf.finish()
    >>> events = []
    >>> hook = lambda node, t, f: events.append((node.name, t, f))
    >>> root.on_tuple = leaf.on_tuple = hook
    >>> root.apply((1, 2), 1); leaf.apply((2,), 1)
    >>> events
    [('R2', (2,), 1)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from operators import nodecode
from operators.nodemaps import (
    EMPTY,
    NO_MAP,
    NO_TUPLES,
    IndexedBase,
    KeyedBase,
    NoTuples,
    Projector,
    empty_key,
    holds,
    key_expr,
    make_projector,
    members,
    whole_tuple_lookup,
)
from operators.ring import IntRing, VectorRing
from operators.state import State, read_only_get

__all__ = ["EMPTY", "NO_MAP", "NO_TUPLES", "IndexedBase", "JoinNode", "KeyedBase",
           "LiveTuples", "NoTuples", "key_expr", "make_projector"]


TupleHook = Callable[["JoinNode", Any, Any], None]
KeyHook = Callable[["JoinNode", int, Any, Any], None]


def _no_tuple_hook(node: JoinNode, t: Any, factor: Any) -> None:
    return None


def _no_key_hook(node: JoinNode, child: int, key: Any, factor: Any) -> None:
    return None


def _no_apply(t: Any, dm: int) -> None:
    msg = "a generalized node has no tuples of its own, and a node no code before finish()"
    raise TypeError(msg)


class LiveTuples(Mapping[Any, bool]):
    """V_l of a top node, derived (stored nowhere): the tuples of its semi-join groups
    (``proj``) whose key is in the parent's live index; all of them at the root.

    >>> from operators.state import DictState
    >>> from operators.ring import IntRing
    >>> st = DictState()
    >>> r = JoinNode("R", ("a", "b"), False, 0, True, "bag", IntRing(), st)
    >>> s = JoinNode("S", ("b", "c"), False, 1, True, "bag", IntRing(), st)
    >>> r.attach_child(s, ("b",)); r.finish(); s.finish()
    >>> s.apply((2, 3), 1); (2, 3) in s.live
    False
    >>> r.apply((1, 2), 1); sorted(r.live), sorted(s.live)
    ([(1, 2)], [(2, 3)])
    """

    def __init__(self, node: JoinNode) -> None:
        self._node = node

    def __contains__(self, t: object) -> bool:
        node = self._node
        k = node.key_of(t)
        return holds(node.proj_read(k), t) and node.key_live(k)

    def __getitem__(self, t: Any) -> bool:
        if t in self:
            return True
        raise KeyError(t)

    def __iter__(self) -> Iterator[Any]:
        node = self._node
        for k, group in list(node.proj.items()):
            if node.key_live(k):
                yield from members(group)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class JoinNode:
    """One node of the join tree (semi-join + projection, plus live views on top).

    A top node R over (a, b) with a lower child S over (b, c), payloads (count, sum of
    c): S's projection holds the payload per key b, and each change of it reaches R's
    ``on_key`` hook (the enumeration, which looks up R's live tuples with that key).

    >>> from operators.ring import VectorRing
    >>> from operators.state import DictState
    >>> ring, st = VectorRing(1), DictState()
    >>> r = JoinNode("R", ("a", "b"), False, 0, True, "ring", ring, st, lambda t, m: (m, 0))
    >>> s = JoinNode("S", ("b", "c"), False, 1, False, "ring", ring, st,
    ...              lambda t, m: (m, m * t[1]))
    >>> r.attach_child(s, ("b",)); r.finish(); s.finish()
    >>> keys = []
    >>> r.on_key = lambda node, i, k, f: keys.append((k, f))
    >>> r.apply((1, 2), 1); s.apply((2, 5), 1); s.apply((2, 7), 2); s.apply((3, 1), 1)
    >>> dict(s.proj), keys
    ({2: (3, 19), 3: (1, 1)}, [(2, (1, 5)), (2, (2, 14)), (3, (1, 1))])
    """

    def __init__(
        self,
        name: str,
        attrs: tuple[str, ...],
        generalized: bool,
        node_id: int,
        top: bool,
        mode: str,
        ring: Any,
        state: State,
        base_payload: Callable[[Any, int], Any] | None = None,
        keep_leaf_tuples: bool = True,
    ) -> None:
        """``mode``: ``set`` (supports), ``bag`` or ``ring`` (payloads in ``ring``);
        ``base_payload(t, m)``: the payload of ``m`` copies of tuple ``t``, linear in
        ``m`` (default: ``m``). ``keep_leaf_tuples=False``: a lower leaf that is not
        counting (bag or ring payloads) keeps only its projection, key -> payload sum,
        not its tuples (a *sum leaf*): where deletes are checked before the node (a
        view's delete check), nothing reads a leaf's tuples after the update that adds
        them."""
        self.name = name
        self.id = node_id
        self.attrs = attrs
        self.generalized = generalized
        self.scalar = generalized and len(attrs) == 1
        self.top = top
        self.mode = mode
        self.ring = ring
        self.counting = mode == "set"
        self.base_payload_default = base_payload is None
        self.base_payload = base_payload or (lambda t, m: m)
        self.keep_leaf_tuples = keep_leaf_tuples
        self.sum_leaf = False
        """Whether this node keeps no tuples, only their payload sum per key (set in
        :meth:`finish`; :attr:`base` is then :data:`NO_TUPLES`)."""
        self.children: list[JoinNode] = []
        self.parent: JoinNode | None = None
        self.pos_in_parent = -1
        self.key_attrs: tuple[str, ...] = ()
        self.key_of: Projector = empty_key
        self.child_key_of: list[Projector] = []
        self.state = state
        # base is declared in finish(), once the node knows whether it keeps it (see
        # NO_MAP); counter never is: read from the children (support_count).
        self.base: MutableMapping[Any, int] = NO_MAP  # type: ignore[assignment]
        self.counter: MutableMapping[Any, int] = NO_MAP  # type: ignore[assignment]
        self.base_in_index = False
        """Whether the multiplicities live in the first child index's buckets
        (:class:`IndexedBase`) instead of a base map."""
        self.base_in_proj = False
        """Whether the multiplicities live in the ``proj`` groups (a top leaf over
        integer payloads: groups are tuple -> multiplicity dicts, not sets)."""
        self.unit_group: MutableMapping[Any, int] | None = None
        """A top leaf's one group (its key is empty: every tuple -> its multiplicity)
        as a field map, kept as ``proj[()]`` while it holds a tuple (set in
        :meth:`finish` where the state keeps field maps; else the group is a dict
        bucket as any other's)."""
        # buckets: sets of tuples; dicts tuple -> multiplicity in the first (base_in_index)
        self.index: list[MutableMapping[Any, Any]] = []
        self.index_shared: list[int | None] = []
        """Per child, the earlier child whose index (on the same key) it reads, or None:
        its own."""
        self.index_whole: list[bool] = []
        """Per child, whether its key is this node's whole tuple and its index is read
        from the first one's (a tuple is its own bucket there: present or not), so
        nothing is stored for it (:func:`operators.nodemaps.whole_tuple_lookup`)."""
        self.proj: MutableMapping[Any, Any] = state.map(f"{name}.proj")
        # Read-only lookups for walks that change nothing (see read_only_get).
        self.proj_read = read_only_get(self.proj)
        self.index_read: list[Callable[..., Any]] = []
        self.live: Mapping[Any, bool] = LiveTuples(self)
        self.live_index: list[MutableMapping[Any, set[Any]]] = []
        self.live_read: list[Callable[..., Any]] = []
        self.on_tuple: TupleHook = _no_tuple_hook
        self.on_key: KeyHook = _no_key_hook
        self.apply: Callable[[Any, int], None] = _no_apply
        """The R-update: add ``dm`` (signed) copies of tuple ``t`` (the caller has
        validated deletes); generated code, bound when the tree is finished."""
        self.finished = False
        self.num = 0
        """This node's number in its tree (parents first), the suffix of its names in
        the tree's generated code."""
        self.env: dict[str, Any] = {}
        """The namespace of the tree's generated code, shared by its nodes (set by
        :func:`operators.nodecode.compile_tree`). Its calls out (``emit_n``,
        ``keyhook_n``, ``notify_n``) are names there, resolved per call:
        :meth:`bind_emit` and :meth:`bind_keyhook` rebind them in code already
        compiled."""

    # -- wiring --------------------------------------------------------------------
    def attach_child(self, child: JoinNode, key_attrs: tuple[str, ...]) -> None:
        child.parent = self
        child.pos_in_parent = len(self.children)
        child.key_attrs = key_attrs
        child.key_of = make_projector(child.attrs, child.scalar, key_attrs)
        # Children joined on the same key read one index of this node's tuples under
        # that key, kept once (TPC-H Q21's lineitem joins four views on the order and
        # two on order and supplier): a child's index is an earlier one's when its key
        # is (the tuple goes into and out of both together).
        shared = None if self.generalized else next(
            (j for j, c in enumerate(self.children) if c.key_attrs == key_attrs), None)
        # A later child joined on the whole tuple finds this node's tuple with its key
        # in the first index, which holds every tuple with its multiplicity: an index
        # of its own held each tuple once more (TPC-H Q21's late lineitems by (order,
        # supplier): 9% of its entries at SF 1, though not of its bytes, as a tuple
        # found in a dict bucket is handed on as the child's key, an object of its
        # own). Where the state makes field maps: the runners' state layout stays
        # what their checkpoints hold.
        whole = (shared is None and not self.generalized and bool(self.children)
                 and key_attrs == self.attrs and not self.scalar
                 and self.state.field_map_factory() is not None)
        self.index_shared.append(shared)
        self.index_whole.append(whole)
        self.children.append(child)
        self.child_key_of.append(make_projector(self.attrs, self.scalar, key_attrs))
        # A generalized node's one tuple with a key is the key (no index); only top
        # nodes go live (lower nodes keep no live index).
        self.index.append(NO_MAP if self.generalized or whole  # type: ignore[arg-type]
                          else self.index[shared] if shared is not None
                          else self._index_map(f"{self.name}.index.{child.name}",
                                               len(key_attrs)))
        # (a child sharing an index reads it as the earlier child does: a whole-tuple
        # index has nothing stored to read)
        self.index_read.append(
            whole_tuple_lookup(self.index_read[0], self.child_key_of[0]) if whole
            else self.index_read[shared] if shared is not None
            else read_only_get(self.index[-1]))
        self.live_index.append(self.state.map(f"{self.name}.live.{child.name}") if self.top
                               else NO_MAP)  # type: ignore[arg-type]
        self.live_read.append(read_only_get(self.live_index[-1]))

    def _index_map(self, name: str, nkey: int) -> MutableMapping[Any, Any]:
        """The state's map ``name`` of a child's key (``nkey`` values) -> the bucket of
        this node's tuples with it: where the state makes field maps, a native one,
        the key in fields and the bucket by reference (a dict entry with its key's
        objects was about 70 bytes for an int key, 85 for two, a slot is 24 and 32:
        TPC-H Q9's lineitems by order and by (part, supplier), 9 bytes per base tuple
        at SF 1). Not for tuples of one value, which a field map of one value field
        would keep inline and read back as another object."""
        if (1 <= nkey <= 8 and len(self.attrs) >= 2 and not self.scalar
                and self.state.field_map_factory() is not None):
            return self.state.field_map(name, nkey, 1)
        return self.state.map(name)

    def finish(self) -> None:
        self.nchildren = len(self.children)
        # (No node stores counters: a leaf's count is always 0, any other's is read
        # from its children's projections, supported_n; a stored counter held an entry
        # per tuple, or per key of a generalized node: TPC-H Q18's per order.)
        # (A lower leaf over integer payloads is a key leaf, as the planner projects a
        # lower leaf of a query without aggregates onto its key: never a sum leaf.)
        self.sum_leaf = (not self.keep_leaf_tuples and not self.counting
                         and self._is_lower_leaf() and not self._int_payloads())
        if self.sum_leaf:
            # A leaf's payload at its key is the sum of its tuples' payloads, linear in
            # the multiplicity: an update adds base_payload(t, dm) there, and nothing
            # reads t again (its tuples would be most of the state of an aggregate
            # over one big table: TPC-H's lineitem under Q1, Q3, Q6, ...).
            self.base = NO_TUPLES  # type: ignore[assignment]
            if isinstance(self.ring, VectorRing) and self.key_attrs:
                # (key -> payload sum and nothing else: the backend may keep it natively,
                # an entry in one array where a dict of packed keys and payloads takes
                # some 150 bytes: TPC-H Q5's (nation, order) sums)
                self._field_proj(self.ring.k + 1)
        elif not self.generalized:
            if self.children:
                # An atom node with children indexes every tuple under its first child's
                # key anyway: that bucket holds the tuple's multiplicity too.
                self.base_in_index = True
                self.base = IndexedBase(self.index[0], self.child_key_of[0])  # type: ignore[assignment]
            elif self.top and self._int_payloads():
                self.base_in_proj = True
                if self.key_attrs and self.key_attrs != self.attrs:
                    # (key -> its group, mostly one tuple, bare: natively, the key's and
                    # the tuple's fields in one slot, the key's not twice; TPC-H Q21's
                    # per-(supplier, order) counts read from their view. A key that is
                    # the whole tuple is the tuple already: one object for both, kept
                    # a dict.)
                    self._field_proj(len(self.attrs), tuple(
                        self.attrs.index(a) for a in self.key_attrs))
                elif (not self.key_attrs and 0 < len(self.attrs) <= 8
                      and (make := self.state.field_map_factory()) is not None):
                    # (one group of every tuple: a count view's, as TPC-H Q21's four
                    # counts per (order, supplier) and per order, where a dict of
                    # packed tuples took some 80 bytes a tuple; the map of tuple ->
                    # multiplicity, the tuple's fields and a reference to the count
                    # in one slot, 40 for two fields)
                    # (held in proj only, so its tuples are counted once)
                    self.unit_group = make(len(self.attrs), 1, None)
                self.base = IndexedBase(self.proj, self.key_of)  # type: ignore[assignment]
            elif not (self._int_payloads() and self._is_key_leaf()):
                self.base = self.state.map(f"{self.name}.base")
            else:
                # Read-only: the key leaf's apply writes proj only.
                self.base = KeyedBase(self.proj, self.key_of)  # type: ignore[assignment]
        self.finished = True
        # The last node of the tree to finish compiles the tree's code.
        tree = self._tree()
        if all(node.finished for node in tree):
            nodecode.compile_tree(tree[0])

    def _field_proj(self, nval: int, key_at: tuple[int, ...] | None = None) -> None:
        """:attr:`proj` as the state's :meth:`~operators.state.State.field_map`: keys of
        this node's key's values, values mostly tuples of ``nval`` (holding the key's
        values at ``key_at``: a group's tuple) (called in :meth:`finish`, before the
        tree's code binds the map)."""
        if nval > 8:
            # (kept a dict of tuples: past 8 values a value is no packed row, whose
            # fields a field map copies as they are, but a tuple, whose DECIMALs it
            # would parse on every write and make again on every read; an aggregate
            # of that many sums: TPC-H Q1's, 15% slower so, over 4 keys)
            return
        self.proj = self.state.field_map(f"{self.name}.proj", len(self.key_attrs), nval,
                                         key_at)
        self.proj_read = read_only_get(self.proj)

    @property
    def keeps_tuples(self) -> bool:
        """Whether the node stores the tuples it is given (an atom node that is neither
        a sum leaf, which keeps sums, nor a key leaf, which keeps keys)."""
        return (not self.generalized and not self.sum_leaf
                and not isinstance(self.base, KeyedBase))

    def mult_expr(self, var: str, env: dict[str, Any], name: str) -> str:
        """Generated code for the multiplicity of tuple ``var`` (present):
        :func:`operators.nodecode.mult_expr`."""
        return nodecode.mult_expr(self, var, env, name)

    def count_expr(self, var: str, env: dict[str, Any], name: str) -> str:
        """Generated code for the stored multiplicity of tuple ``var``, 0 when absent:
        :func:`operators.nodecode.count_expr`."""
        return nodecode.count_expr(self, var, env, name)

    def _int_payloads(self) -> bool:
        """Whether the payloads are integers (multiplicities, supports): the layouts of
        a key leaf and a top leaf that keeps its multiplicities in its groups are for
        those only (a ring payload is not its multiplicity)."""
        return (not self.generalized and self.mode in ("bag", "set")
                and self.base_payload_default and isinstance(self.ring, IntRing))

    def _is_lower_leaf(self) -> bool:
        return (not self.top and not self.children and not self.generalized
                and self.parent is not None)

    def _is_key_leaf(self) -> bool:
        """A lower leaf whose tuples are their keys (``attrs == key``): one tuple per key,
        so its projection (multiplicity per key) is its base; it keeps only that."""
        return self._is_lower_leaf() and self.attrs == self.key_attrs

    def _tree(self) -> list[JoinNode]:
        root = self
        while root.parent is not None:
            root = root.parent
        return nodecode.tree_nodes(root)

    # -- binding the generated code's calls out ------------------------------------
    def _emit_via_hook(self, t: Any, factor: Any) -> None:
        """What generated code calls for a changed live tuple until :meth:`bind_emit`:
        the :attr:`on_tuple` hook, looked up per call."""
        self.on_tuple(self, t, factor)

    def _key_via_hook(self, i: int, k: Any, factor: Any) -> None:
        """What generated code calls for a changed boundary key (lower child ``i``'s
        projection at ``k``, live or not): the :attr:`on_key` hook, looked up per call."""
        self.on_key(self, i, k, factor)

    def bind_emit(self, emit: Callable[[Any, Any], None]) -> None:
        """Make this top node's generated code call ``emit(t, factor)`` for a changed
        live tuple, in place of ``on_tuple(node, t, factor)`` (one call less per change;
        the replacement must do the same)."""
        self.env[f"emit_{self.num}"] = emit

    def bind_keyhook(self, keyhook: Callable[[int, Any, Any], None]) -> None:
        """Make this top node's generated code call ``keyhook(i, k, factor)`` for a
        changed boundary key (lower child ``i``'s projection at ``k``), in place of
        ``on_key(node, i, k, factor)`` (the replacement must do the same)."""
        self.env[f"keyhook_{self.num}"] = keyhook

    # -- reads -------------------------------------------------------------------
    def support_count(self, t: Any) -> int:
        """How many children's projections hold ``t``'s key (CROWN's counter, read
        from them: no node stores it).

        >>> from operators.state import DictState
        >>> st = DictState()
        >>> r = JoinNode("R", ("a", "b"), False, 0, True, "bag", IntRing(), st)
        >>> s = JoinNode("S", ("b", "c"), False, 1, True, "bag", IntRing(), st)
        >>> r.attach_child(s, ("b",)); r.finish(); s.finish()
        >>> r.apply((1, 2), 1); r.support_count((1, 2))
        0
        >>> s.apply((2, 3), 1); r.support_count((1, 2)), dict(r.counter)
        (1, {})
        """
        return sum(1 for key_of, child in zip(self.child_key_of, self.children)
                   if key_of(t) in child.proj)

    def key_live(self, k: Any) -> bool:
        """Whether tuples of V_s with key ``k`` are live: ``k`` is in the parent's live
        index (always at the root)."""
        parent = self.parent
        return parent is None or parent.live_read[self.pos_in_parent](k) is not None

    def __repr__(self) -> str:
        kind = "top" if self.top else "lower"
        return f"JoinNode({self.name}, {kind}, attrs={self.attrs})"
