"""Join-tree node operators: semi-join with counters (R-, P- and S-updates of CROWN),
projection with derivation counts or ring payloads, and live views.

A node keeps, over the State protocol:

* ``base``: tuple -> multiplicity, kept by atom leaves only. An atom node with children
  keeps each tuple's multiplicity in its first child index instead (buckets are
  tuple -> multiplicity there; ``node.base`` reads it, :class:`IndexedBase`); a top leaf
  with generated code keeps it in its ``proj`` groups (below); a *sum leaf* (a lower leaf
  over ring payloads, where the caller checks deletes: :attr:`JoinNode.sum_leaf`) keeps
  no tuples at all (:data:`NO_TUPLES`); a generalized node has none. A node declares
  only the maps it uses (:data:`NO_MAP`),
* ``counter``: tuple -> number of children whose projection holds the tuple's key
  (CROWN's "horizontal" derivation counter; a generalized node's virtual tuples are
  exactly the keys of its children's projections). Stored only by nodes with two or
  more children: a leaf's count is always 0, a one-child node's is whether the child's
  projection holds the key (:meth:`JoinNode.support_count` reads either),
* ``index.<child>``: child key -> tuples of this node with that key (for P-updates;
  atoms only),
* ``proj``: this node's projection on its key to the parent. Top nodes keep it as
  key -> set of semi-join tuples (V_s grouped by key, used for enumeration; a top leaf
  with generated code, all of whose tuples are in V_s, keeps key -> {tuple: multiplicity}
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

The generated code of a node (its specialized ``apply``, semi-join updates and walks)
is built by :mod:`operators.nodecode`; projectors and the read-only views of a node's
multiplicities are in :mod:`operators.nodemaps`.

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
    key_expr,
    make_projector,
)
from operators.ring import IntRing
from operators.state import State, read_only_get

__all__ = ["EMPTY", "NO_MAP", "NO_TUPLES", "IndexedBase", "JoinNode", "KeyedBase",
           "LiveTuples", "NoTuples", "key_expr", "make_projector"]


TupleHook = Callable[["JoinNode", Any, Any], None]
KeyHook = Callable[["JoinNode", int, Any, Any], None]


def _no_tuple_hook(node: JoinNode, t: Any, factor: Any) -> None:
    return None


def _no_key_hook(node: JoinNode, child: int, key: Any, factor: Any) -> None:
    return None


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
        group = node.proj_read(k)
        return group is not None and t in group and node.key_live(k)

    def __getitem__(self, t: Any) -> bool:
        if t in self:
            return True
        raise KeyError(t)

    def __iter__(self) -> Iterator[Any]:
        node = self._node
        for k, group in list(node.proj.items()):
            if node.key_live(k):
                yield from group

    def __len__(self) -> int:
        return sum(1 for _ in self)


class JoinNode:
    """One node of the join tree (semi-join + projection, plus live views on top)."""

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
        """``keep_leaf_tuples=False``: a lower leaf that is not counting (bag or ring
        payloads) keeps only its projection, key -> payload sum, not its tuples (a
        *sum leaf*): where deletes are checked before the node (a view's delete
        check), nothing reads a leaf's tuples after the update that adds them."""
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
        # base and counter are declared in finish(), once the node knows whether it
        # keeps them (see NO_MAP).
        self.base: MutableMapping[Any, int] = NO_MAP  # type: ignore[assignment]
        self.counter: MutableMapping[Any, int] = NO_MAP  # type: ignore[assignment]
        self.base_in_index = False
        """Whether the multiplicities live in the first child index's buckets
        (:class:`IndexedBase`) instead of a base map."""
        self.base_in_proj = False
        """Whether the multiplicities live in the ``proj`` groups (a top leaf with
        generated code: groups are tuple -> multiplicity dicts, not sets)."""
        # buckets: sets of tuples; dicts tuple -> multiplicity in the first (base_in_index)
        self.index: list[MutableMapping[Any, Any]] = []
        self.proj: MutableMapping[Any, Any] = state.map(f"{name}.proj")
        # Read-only lookups for walks that change nothing (see read_only_get).
        self.proj_read = read_only_get(self.proj)
        self.index_read: list[Callable[..., Any]] = []
        self.live: Mapping[Any, bool] = LiveTuples(self)
        self.live_index: list[MutableMapping[Any, set[Any]]] = []
        self.live_read: list[Callable[..., Any]] = []
        self.on_tuple: TupleHook = _no_tuple_hook
        self.on_key: KeyHook = _no_key_hook
        # Globals of this node's generated code. Its calls out (emit, notify, make_live,
        # make_dead, support) are names there, resolved per call: bind_emit, bind_notify
        # and bind_walks rebind them in code already compiled.
        self._code_envs: list[dict[str, Any]] = []
        # A top node's semi-join updates, generated code on every top node (finish():
        # :meth:`_compile_sj` says what they do); the generic methods call them too.
        self._sj_insert: Callable[[Any], None]
        self._sj_delete: Callable[[Any], None]

    # -- wiring --------------------------------------------------------------------
    def attach_child(self, child: JoinNode, key_attrs: tuple[str, ...]) -> None:
        child.parent = self
        child.pos_in_parent = len(self.children)
        child.key_attrs = key_attrs
        child.key_of = make_projector(child.attrs, child.scalar, key_attrs)
        self.children.append(child)
        self.child_key_of.append(make_projector(self.attrs, self.scalar, key_attrs))
        # A generalized node's one tuple with a key is the key (no index); only top
        # nodes go live (lower nodes keep no live index).
        self.index.append(NO_MAP if self.generalized  # type: ignore[arg-type]
                          else self.state.map(f"{self.name}.index.{child.name}"))
        self.index_read.append(read_only_get(self.index[-1]))
        self.live_index.append(self.state.map(f"{self.name}.live.{child.name}") if self.top
                               else NO_MAP)  # type: ignore[arg-type]
        self.live_read.append(read_only_get(self.live_index[-1]))

    def finish(self) -> None:
        self.nchildren = len(self.children)
        # A leaf's count is always 0 and a one-child node's (generalized or not) is
        # whether the child's projection holds its key: only nodes with two or more
        # children store counters.
        self.keeps_counter = self.nchildren > 1
        if self.keeps_counter:
            self.counter = self.state.map(f"{self.name}.counter")
        # (Integer payloads compile a leaf's apply: such a leaf is a key leaf, as the
        # planner projects a lower leaf of a query without aggregates onto its key.)
        self.sum_leaf = (not self.keep_leaf_tuples and not self.counting
                         and self._is_lower_leaf() and not self._compiled_apply())
        if self.sum_leaf:
            # A leaf's payload at its key is the sum of its tuples' payloads, linear in
            # the multiplicity: an update adds base_payload(t, dm) there, and nothing
            # reads t again (its tuples would be most of the state of an aggregate
            # over one big table: TPC-H's lineitem under Q1, Q3, Q6, ...).
            self.base = NO_TUPLES  # type: ignore[assignment]
        elif not self.generalized:
            if self.children:
                # An atom node with children indexes every tuple under its first child's
                # key anyway: that bucket holds the tuple's multiplicity too.
                self.base_in_index = True
                self.base = IndexedBase(self.index[0], self.child_key_of[0])  # type: ignore[assignment]
            elif self.top and self._compiled_apply():
                self.base_in_proj = True
                self.base = IndexedBase(self.proj, self.key_of)  # type: ignore[assignment]
            elif not self._key_leaf_compiled():
                self.base = self.state.map(f"{self.name}.base")
        # (child, key of a tuple of this node for it, live index for it), for the walks
        self._walk = list(zip(self.children, self.child_key_of, self.live_index))
        if self.top:
            nodecode.compile_sj(self)
        if self._compiled_apply():
            if self._is_key_leaf():
                # Read-only: the key leaf's apply writes proj only.
                self.base = KeyedBase(self.proj, self.key_of)  # type: ignore[assignment]
                self.apply = nodecode.compile_key_leaf_apply(self)  # type: ignore[method-assign,assignment]
            else:
                self.apply = nodecode.compile_apply(self)  # type: ignore[method-assign,assignment]
        elif self.sum_leaf:
            self.apply = self._apply_to_sum  # type: ignore[method-assign]

    def mult_expr(self, var: str, env: dict[str, Any], name: str) -> str:
        """Generated code for the multiplicity of tuple ``var`` (present):
        :func:`operators.nodecode.mult_expr`."""
        return nodecode.mult_expr(self, var, env, name)

    def count_expr(self, var: str, env: dict[str, Any], name: str) -> str:
        """Generated code for the stored multiplicity of tuple ``var``, 0 when absent:
        :func:`operators.nodecode.count_expr`."""
        return nodecode.count_expr(self, var, env, name)

    def _compiled_apply(self) -> bool:
        """Whether :meth:`apply` is generated code (integer multiplicities as payloads)."""
        return (not self.generalized and self.mode in ("bag", "set")
                and self.base_payload_default and isinstance(self.ring, IntRing))

    def _key_leaf_compiled(self) -> bool:
        return self._compiled_apply() and self._is_key_leaf()

    def _is_lower_leaf(self) -> bool:
        return (not self.top and not self.children and not self.generalized
                and self.parent is not None)

    def _is_key_leaf(self) -> bool:
        """A lower leaf whose tuples are their keys (``attrs == key``): one tuple per key,
        so its projection (multiplicity per key) is its base; it keeps only that."""
        return self._is_lower_leaf() and self.attrs == self.key_attrs

    def _apply_to_sum(self, t: Any, dm: int) -> None:
        """:meth:`apply` of a sum leaf over ring payloads: the payload of ``dm`` copies
        of ``t`` (signed) added at its key; the caller has validated deletes."""
        self._payload_add(self.key_of(t), self.base_payload(t, dm))

    def walk_source(self, env: dict[str, Any], name: Callable[[str, JoinNode], str]) -> str:
        """Python source of this top node's liveness walks and support change:
        :func:`operators.nodecode.walk_source`."""
        return nodecode.walk_source(self, env, name)

    def bind_walks(self, make_live: Callable[[Any], None], make_dead: Callable[[Any], None],
                   child_support: Callable[[int, Any, bool], None]) -> None:
        """Use the compiled :meth:`walk_source` functions for this top node: in its
        generated semi-join code, its children's, and the generic methods."""
        self._make_live = make_live  # type: ignore[method-assign,assignment]
        self._make_dead = make_dead  # type: ignore[method-assign,assignment]
        self._child_support = child_support  # type: ignore[method-assign,assignment]
        for env in self._code_envs:
            env["make_live"] = make_live
            env["make_dead"] = make_dead
        for child in self.children:
            if child.top:
                for env in child._code_envs:
                    env["support"] = child_support


    def apply_source(self) -> tuple[str, dict[str, Any]]:
        """Python source of :meth:`apply` specialized to this node:
        :func:`operators.nodecode.apply_source`."""
        return nodecode.apply_source(self)

    # -- direct hooks for generated code ---------------------------------------------
    def _emit_via_hook(self, t: Any, factor: Any) -> None:
        """What generated code calls for a changed live tuple until :meth:`bind_emit`:
        the :attr:`on_tuple` hook, looked up per call."""
        self.on_tuple(self, t, factor)

    def bind_emit(self, emit: Callable[[Any, Any], None]) -> None:
        """Make this top node's generated code call ``emit(t, factor)`` for a changed
        live tuple, in place of ``on_tuple(node, t, factor)`` (one call less per change;
        the generic path keeps calling :attr:`on_tuple`, which must do the same)."""
        for env in self._code_envs:
            env["emit"] = emit

    def bind_notify(self, notify: Callable[[int, Any, Any, Any], None]) -> None:
        """Make this lower node's generated code call ``notify(pos, key, old, new)`` when
        its projection changes, in place of the parent's :meth:`_boundary_change` (or
        lower-child handler); the replacement must do what that does."""
        for env in self._code_envs:
            env["notify"] = notify

    # -- R-update: a change of multiplicity of tuple t of this atom -------------------
    def apply(self, t: Any, dm: int) -> None:
        """Add ``dm`` (signed) copies of ``t``; the caller has validated deletes."""
        base = self.base
        in_index = self.base_in_index
        if in_index:
            k0 = self.child_key_of[0](t)
            b0 = self.index[0].get(k0)
            old = 0 if b0 is None else b0.get(t, 0)
        else:
            old = base.get(t, 0)
        new = old + dm
        if old == 0:
            c = 0
            for i, child in enumerate(self.children):
                if i == 0 and in_index:  # bucket looked up above
                    k = k0
                    if b0 is None:
                        self.index[0][k] = {t: new}
                    else:
                        b0[t] = new
                else:
                    k = self.child_key_of[i](t)
                    bucket = self.index[i].get(k)
                    if bucket is None:
                        self.index[i][k] = {t}
                    else:
                        bucket.add(t)
                if k in child.proj:
                    c += 1
            if self.keeps_counter:
                self.counter[t] = c
            if not in_index:
                base[t] = new
        else:
            c = self.support_count(t)
            if new:
                if in_index:
                    assert b0 is not None, "old > 0: the tuple is in its bucket"
                    b0[t] = new
                else:
                    base[t] = new
        if c == self.nchildren:
            if self.top:
                self._top_base_change(t, old, new)
            else:
                self._lower_base_change(t, old, new)
        if new == 0:
            if not in_index:
                del base[t]
            if self.keeps_counter:
                del self.counter[t]
            for i in range(self.nchildren):
                if i == 0 and in_index:  # (old > 0: b0 is the bucket that holds t)
                    assert b0 is not None
                    k, bucket = k0, b0
                    del bucket[t]
                else:
                    k = self.child_key_of[i](t)
                    bucket = self.index[i][k]
                    bucket.discard(t)
                if not bucket:
                    del self.index[i][k]

    def support_count(self, t: Any) -> int:
        """How many children's projections hold ``t``'s key (CROWN's counter), stored
        or derived.

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
        if self.keeps_counter:
            return int(self.counter.get(t, 0))
        if not self.nchildren:
            return 0
        return 1 if self.child_key_of[0](t) in self.children[0].proj else 0

    # -- top part ------------------------------------------------------------------
    def key_live(self, k: Any) -> bool:
        """Whether tuples of V_s with key ``k`` are live: ``k`` is in the parent's live
        index (always at the root)."""
        parent = self.parent
        return parent is None or parent.live_read[self.pos_in_parent](k) is not None

    def _top_base_change(self, t: Any, old: int, new: int) -> None:
        # Called with t in V_s (all children support it): live iff its key is. Read
        # after the S-update, which can make the key live (t completes its parent).
        if old == 0:
            self._sj_insert(t)
            if self.key_live(self.key_of(t)):
                self.on_tuple(self, t, 1 if self.counting else self.base_payload(t, new))
        elif new == 0:
            if self.key_live(self.key_of(t)):
                self.on_tuple(
                    self, t, -1 if self.counting else self.ring.neg(self.base_payload(t, old))
                )
            self._sj_delete(t)
        elif not self.counting and self.key_live(self.key_of(t)):
            self.on_tuple(
                self, t, self.ring.sub(self.base_payload(t, new), self.base_payload(t, old))
            )

    def _child_support(self, i: int, k: Any, appear: bool) -> None:
        """P-update on a top node: key k entered/left child i's projection."""
        n = self.nchildren
        if not self.keeps_counter:  # one child: every tuple with the key turns over
            turn = self._sj_insert if appear else self._sj_delete
            # (a generalized node's one tuple with the key is the key itself)
            for u in list((k,) if self.generalized else self.index_read[i](k) or ()):
                turn(u)
            return
        if self.generalized:
            c = self.counter.get(k, 0)
            if appear:
                c += 1
                self.counter[k] = c
                if c == n:
                    self._sj_insert(k)
            else:
                if c == n:
                    self._sj_delete(k)
                c -= 1
                if c:
                    self.counter[k] = c
                else:
                    del self.counter[k]
            return
        bucket = self.index_read[i](k)
        if not bucket:
            return
        counter = self.counter
        for u in list(bucket):
            c = counter[u]
            if appear:
                c += 1
                counter[u] = c
                if c == n:
                    self._sj_insert(u)
            else:
                if c == n:
                    self._sj_delete(u)
                counter[u] = c - 1

    def _make_live(self, t: Any) -> None:
        """t turned live (it entered V_s under a live key, or its key turned live):
        index it in the live views of its children, and make the child tuples it
        newly reaches live. Called once per transition; V_l itself is derived."""
        for child, key_of, live_index in self._walk:
            k = key_of(t)
            bucket = live_index.get(k)
            if bucket is None:
                live_index[k] = {t}
                if child.top:
                    group = child.proj_read(k)
                    if group:
                        for u in list(group):
                            child._make_live(u)
            else:
                bucket.add(t)

    def _make_dead(self, t: Any) -> None:
        """t turned dead: the reverse of :meth:`_make_live`."""
        for child, key_of, live_index in self._walk:
            k = key_of(t)
            bucket = live_index[k]
            bucket.discard(t)
            if not bucket:
                del live_index[k]
                if child.top:
                    group = child.proj_read(k)
                    if group:
                        for u in list(group):
                            child._make_dead(u)

    def _boundary_change(self, i: int, k: Any, old: Any, new: Any) -> None:
        """A lower child's projection changed at key k (this node is top)."""
        if old is None:
            self._child_support(i, k, True)
            self.on_key(self, i, k, 1 if self.counting else new)
        elif new is None:
            self.on_key(self, i, k, -1 if self.counting else self.ring.neg(old))
            self._child_support(i, k, False)
        else:
            self.on_key(self, i, k, self.ring.sub(new, old))

    # -- lower part ----------------------------------------------------------------
    def _payload(self, t: Any, skip: int = -1) -> Any:
        """Product of the children's payloads at t's keys (all present), times t's own."""
        ring = self.ring
        if self.generalized:
            acc = ring.one
        else:  # (IndexedBase's lookup inlined: this is the P-update's inner step)
            m = (self.index_read[0](self.child_key_of[0](t))[t] if self.base_in_index
                 else self.base[t])
            acc = self.base_payload(t, m)
        for j, child in enumerate(self.children):
            if j != skip:
                acc = ring.mul(acc, child.proj[self.child_key_of[j](t)])
        return acc

    def _lower_base_change(self, t: Any, old: int, new: int) -> None:
        k = self.key_of(t)
        if self.counting:
            if old == 0:
                self._count_add(k, 1)
            elif new == 0:
                self._count_add(k, -1)
            return
        ring = self.ring
        d = ring.sub(self.base_payload(t, new), self.base_payload(t, old))
        for j, child in enumerate(self.children):
            d = ring.mul(d, child.proj[self.child_key_of[j](t)])
        self._payload_add(k, d)

    def _count_add(self, k: Any, d: int) -> None:
        old = self.proj.get(k, 0)
        new = old + d
        if new:
            self.proj[k] = new
        else:
            del self.proj[k]
        if (old == 0) != (new == 0):
            self._notify(k, True if old else None, True if new else None)

    def _payload_add(self, k: Any, d: Any) -> None:
        ring = self.ring
        old = self.proj.get(k)
        new = d if old is None else ring.add(old, d)
        if ring.count(new) == 0:
            assert ring.is_zero(new), "a key without derivations must have a zero payload"
            if old is not None:
                del self.proj[k]
            new = None
        else:
            self.proj[k] = new
        if old is not None or new is not None:
            self._notify(k, old, new)

    def _notify(self, k: Any, old: Any, new: Any) -> None:
        parent = self.parent
        if parent is None:
            return
        if parent.top:
            parent._boundary_change(self.pos_in_parent, k, old, new)
        else:
            parent._lower_child_change(self.pos_in_parent, k, old, new)

    def _lower_child_change(self, i: int, k: Any, old: Any, new: Any) -> None:
        n = self.nchildren
        support_change = (old is None) != (new is None)
        if not self.keeps_counter:  # one child: full exactly when its key is present
            was_full, is_full = old is not None, new is not None
            # (a generalized node's one tuple with the key is the key itself)
            for u in list((k,) if self.generalized else self.index_read[i](k) or ()):
                self._lower_tuple_change(u, i, old, new, was_full, is_full)
            return
        if self.generalized:
            c = self.counter.get(k, 0)
            was_full = c == n
            if support_change:
                c += 1 if new is not None else -1
                if c:
                    self.counter[k] = c
                else:
                    del self.counter[k]
            is_full = c == n
            self._lower_tuple_change(k, i, old, new, was_full, is_full)
            return
        bucket = self.index_read[i](k)
        if not bucket:
            return
        counter = self.counter
        for u in list(bucket):
            c = counter[u]
            was_full = c == n
            if support_change:
                c += 1 if new is not None else -1
                counter[u] = c
            self._lower_tuple_change(u, i, old, new, was_full, c == n)

    def _lower_tuple_change(
        self, u: Any, i: int, old: Any, new: Any, was_full: bool, is_full: bool
    ) -> None:
        if self.counting:
            if was_full != is_full:
                self._count_add(self.key_of(u), 1 if is_full else -1)
            return
        if not (was_full or is_full):
            return
        ring = self.ring
        zero = ring.zero
        diff = ring.sub(new if new is not None else zero, old if old is not None else zero)
        rest = self._payload(u, skip=i) if (was_full or is_full) else None
        if rest is None:
            return
        self._payload_add(self.key_of(u), ring.mul(diff, rest))

    # -- bookkeeping ---------------------------------------------------------------
    def __repr__(self) -> str:
        kind = "top" if self.top else "lower"
        return f"JoinNode({self.name}, {kind}, attrs={self.attrs})"
