"""IVM-epsilon for the triangle queries over R(A,B), S(B,C), T(C,A) with integer
multiplicities (docs/algorithms.md): the count (the
nullary query) and the full listing (the ternary query), single partitioning (R on A,
S on B, T on C), with the heavy/light router of :mod:`operators.heavylight`.

The update rules are written once, for an update of relation ``i`` in the cyclic
order R -> S -> T -> R, in the *local* coordinates of that rotation: the updated tuple
is ``(x, y)`` of relation ``i``, relation ``i+1`` joins on ``(y, z)`` and relation
``i+2`` on ``(z, x)``. For ``i = 0`` this is the papers' delta R rule; ``i = 1, 2`` are
its rotations, derived here (docs/algorithms.md). Deltas are computed on the pre-update state (the
router writes the relation part after the rules ran).

A self-join (the triangle over one edge table) keeps three copies: each base update is
applied to the copy of the first occurrence, then the second, then the third, which is
exactly the product rule of the delta query.

Example (the landscape paper's example: 19 triangles, 13 after two deletes):
    >>> from operators.state import DictState
    >>> q = TriangleCount(DictState(), 0.5)
    >>> for t, m in [(("a1", "b1"), 2), (("a2", "b1"), 3)]:
    ...     q.update(0, t, m)
    >>> for t, m in [(("b1", "c1"), 2), (("b1", "c2"), 1)]:
    ...     q.update(1, t, m)
    >>> for t, m in [(("c1", "a1"), 1), (("c2", "a1"), 3), (("c2", "a2"), 3)]:
    ...     q.update(2, t, m)
    >>> q.count, q.take_delta()
    (19, 19)
    >>> q.update(0, ("a2", "b1"), -2)
    >>> q.count, q.take_delta()
    (13, -6)
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from operators.heavylight import HEAVY, LIGHT, HeavyLightRouter, KeyedBag, RelationSpec
from operators.state import State
from operators.state import add_count as _add
from operators.state import add_nested_count as _add_nested

NAMES = ("R", "S", "T")
"""The relations in cyclic order; relation ``i`` is partitioned on its first column."""

Triple = tuple[Any, Any, Any]


def _to_global(i: int) -> Callable[[Any, Any, Any], Triple]:
    """Local (x, y, z) of rotation ``i`` -> global (a, b, c)."""
    if i == 0:
        return lambda x, y, z: (x, y, z)
    if i == 1:  # x = b, y = c, z = a
        return lambda x, y, z: (z, x, y)
    return lambda x, y, z: (y, z, x)  # x = c, y = a, z = b


class TriangleIVM:
    """Shared part of the triangle operators: the router and the part accessors."""

    def __init__(self, state: State, eps: float, name: str = "tri") -> None:
        self.state = state
        self.eps = eps
        self.router = HeavyLightRouter(
            state,
            [RelationSpec(n, 2, 0) for n in NAMES],
            eps,
            name=f"{name}.hl",
            apply=self._on_apply,
            rebuild=self._rebuild,
        )
        self.heavy: list[KeyedBag] = [self.router.part(n, HEAVY) for n in NAMES]
        self.light: list[KeyedBag] = [self.router.part(n, LIGHT) for n in NAMES]
        self.globals = [_to_global(i) for i in range(3)]

    def update(self, i: int, t: tuple[Any, Any], m: int) -> None:
        """A base update of relation ``i`` (0 = R, 1 = S, 2 = T): ``m`` copies of
        ``t`` (negative: delete)."""
        self.router.update(NAMES[i], t, m)

    def whole(self, i: int, t: tuple[Any, Any]) -> int:
        """Multiplicity of ``t`` in the whole relation ``i`` (both parts)."""
        return self.heavy[i].rows.get(t, 0) + self.light[i].rows.get(t, 0)

    def _on_apply(self, rel: str, part: str, t: tuple[Any, ...], m: int) -> None:
        self.rules(NAMES.index(rel), part == HEAVY, t[0], t[1], m)

    def rules(self, i: int, heavy: bool, x: Any, y: Any, m: int) -> None:
        raise NotImplementedError

    def _rebuild(self) -> None:
        raise NotImplementedError


class TriangleCount(TriangleIVM):
    """The count: views V[0] = V_RS(a,c), V[1] = V_ST(b,a), V[2] = V_TR(c,b), where
    V[i](x, z) = sum_y rel_i^H(x,y) * rel_{i+1}^L(y,z) (docs/algorithms.md, the count)."""

    def __init__(self, state: State, eps: float, name: str = "tri") -> None:
        self.views: list[MutableMapping[tuple[Any, Any], int]] = [
            state.map(f"{name}.V_{NAMES[i]}{NAMES[(i + 1) % 3]}") for i in range(3)
        ]
        self.meta: MutableMapping[str, int] = state.map(f"{name}.count")
        self.meta.setdefault("count", 0)
        self.meta.setdefault("delta", 0)
        super().__init__(state, eps, name)

    @property
    def count(self) -> int:
        return self.meta["count"]

    def take_delta(self) -> int:
        """Change of the count since the last call."""
        d = self.meta["delta"]
        self.meta["delta"] = 0
        return d

    def rules(self, i: int, heavy: bool, x: Any, y: Any, m: int) -> None:
        j, k = (i + 1) % 3, (i + 2) % 3
        s_h, s_l = self.heavy[j].rows, self.light[j]
        t_h, t_l = self.heavy[k], self.light[k].rows
        s_l_y = s_l.match(0, y)  # sigma_{first = y} S^L, < 3/2 N^eps tuples
        t_h_x = t_h.match(1, x)  # sigma_{second = x} T^H, <= 2 N^(1-eps) tuples
        d = 0
        # HH: S^H(y,z) * T^H(z,x), iterate T^H by x.
        for (z, _), tm in t_h_x.items():
            sm = s_h.get((y, z))
            if sm:
                d += sm * tm
        # HL: the precomputed V_{i+1}(y, x) = sum_z S^H(y,z) * T^L(z,x).
        d += self.views[j].get((y, x), 0)
        # LH: the smaller of the two index lists (O(N^min(eps, 1-eps))).
        if len(s_l_y) <= len(t_h_x):
            t_h_rows = t_h.rows
            for (_, z), sm in s_l_y.items():
                tm = t_h_rows.get((z, x), 0)
                if tm:
                    d += sm * tm
        else:
            s_l_rows = s_l.rows
            for (z, _), tm in t_h_x.items():
                sm = s_l_rows.get((y, z))
                if sm:
                    d += sm * tm
        # LL: iterate S^L by y.
        for (_, z), sm in s_l_y.items():
            tm = t_l.get((z, x), 0)
            if tm:
                d += sm * tm
        if d:
            self.meta["count"] += m * d
            self.meta["delta"] += m * d
        if heavy:  # V_i(x, z) += m * S^L(y, z)
            vi = self.views[i]
            for (_, z), sm in s_l_y.items():
                _add(vi, (x, z), m * sm)
        else:  # V_{i+2}(z, y) += T^H(z, x) * m
            vk = self.views[k]
            for (z, _), tm in t_h_x.items():
                _add(vk, (z, y), tm * m)

    def _rebuild(self) -> None:
        """Major rebalance: recompute the three views (the count does not change)."""
        for i in range(3):
            v = self.views[i]
            v.clear()
            s_l = self.light[(i + 1) % 3]
            for y, r_rows in self.heavy[i].index[1].items():
                s_rows = s_l.match(0, y)
                if not s_rows:
                    continue
                for (x, _), rm in r_rows.items():
                    for (_, z), sm in s_rows.items():
                        _add(v, (x, z), rm * sm)

    def recount(self) -> int:
        """The count recomputed from the parts (tests)."""
        total = 0
        for (a, b), rm in self._all(0):
            for (_, c), sm in self._all_match(1, b):
                tm = self.whole(2, (c, a))
                if tm:
                    total += rm * sm * tm
        return total

    def _all(self, i: int) -> list[tuple[tuple[Any, Any], int]]:
        return list(self.heavy[i].rows.items()) + list(self.light[i].rows.items())

    def _all_match(self, i: int, v: Any) -> list[tuple[tuple[Any, ...], int]]:
        return list(self.heavy[i].match(0, v).items()) + list(self.light[i].match(0, v).items())


class TriangleListing(TriangleIVM):
    """The full listing (docs/algorithms.md): five disjoint skew-aware views, HHH and
    LLL as listings, and one view tree per rotation ``i`` (i = 0: HL-, 1: -HL, 2: L-H):

    - ``tree[i]``: (x, z) -> {y: rel_i^H(x,y) * rel_{i+1}^L(y,z)} (the view V with its
      index on the two outer variables),
    - ``hat[i]``: (x, z) -> sum over y of the above,
    - ``root[i]``: (x, z) -> hat[i](x, z) * rel_{i+2}(z, x) (whole relation).

    Output deltas (global (a, b, c) -> change) are collected per update, in time
    proportional to the update rules plus the size of the delta.
    """

    def __init__(self, state: State, eps: float, name: str = "tri") -> None:
        self.hhh: MutableMapping[Triple, int] = state.map(f"{name}.HHH")
        self.lll: MutableMapping[Triple, int] = state.map(f"{name}.LLL")
        self.tree: list[MutableMapping[tuple[Any, Any], dict[Any, int]]] = [
            state.map(f"{name}.tree{i}") for i in range(3)
        ]
        self.hat: list[MutableMapping[tuple[Any, Any], int]] = [
            state.map(f"{name}.hat{i}") for i in range(3)
        ]
        self.root: list[MutableMapping[tuple[Any, Any], int]] = [
            state.map(f"{name}.root{i}") for i in range(3)
        ]
        self.acc: dict[Triple, int] = {}
        super().__init__(state, eps, name)

    def take_delta(self) -> dict[Triple, int]:
        """Triangle multiplicity changes since the last call (zero entries possible)."""
        acc = self.acc
        self.acc = {}
        return acc

    def rules(self, i: int, heavy: bool, x: Any, y: Any, m: int) -> None:
        j, k = (i + 1) % 3, (i + 2) % 3
        g = self.globals[i]
        acc = self.acc
        s_h, s_l = self.heavy[j], self.light[j]
        t_h, t_l = self.heavy[k], self.light[k]
        if heavy:
            # HHH(x,y,z) += m * S^H(y,z) * T^H(z,x), iterate T^H by x.
            s_rows = s_h.rows
            for (z, _), tm in t_h.match(1, x).items():
                sm = s_rows.get((y, z))
                if sm:
                    v = m * sm * tm
                    key = g(x, y, z)
                    _add(self.hhh, key, v)
                    acc[key] = acc.get(key, 0) + v
            # tree i: V_i(x,y,z) += m * S^L(y,z), iterate S^L by y.
            tree, hat, root = self.tree[i], self.hat[i], self.root[i]
            for (_, z), sm in s_l.match(0, y).items():
                v = m * sm
                _add_nested(tree, (x, z), y, v)
                _add(hat, (x, z), v)
                tz = t_h.rows.get((z, x), 0) + t_l.rows.get((z, x), 0)
                if tz:
                    _add(root, (x, z), v * tz)
                    key = g(x, y, z)
                    acc[key] = acc.get(key, 0) + v * tz
        else:
            # LLL(x,y,z) += m * S^L(y,z) * T^L(z,x), iterate S^L by y.
            t_rows = t_l.rows
            for (_, z), sm in s_l.match(0, y).items():
                tm = t_rows.get((z, x), 0)
                if tm:
                    v = m * sm * tm
                    key = g(x, y, z)
                    _add(self.lll, key, v)
                    acc[key] = acc.get(key, 0) + v
            # tree i+2: V_{i+2}(z,x,y) += T^H(z,x) * m, iterate T^H by x.
            tree, hat, root = self.tree[k], self.hat[k], self.root[k]
            for (z, _), tm in t_h.match(1, x).items():
                v = tm * m
                _add_nested(tree, (z, y), x, v)
                _add(hat, (z, y), v)
                sz = s_h.rows.get((y, z), 0) + s_l.rows.get((y, z), 0)
                if sz:
                    _add(root, (z, y), v * sz)
                    key = g(x, y, z)
                    acc[key] = acc.get(key, 0) + v * sz
        # tree i+1 (any part): root_{i+1}(y, x) += hat_{i+1}(y, x) * m; the delta
        # triangles are the z's of V_{i+1}(y, ., x).
        vh = self.hat[j].get((y, x))
        if vh:
            _add(self.root[j], (y, x), vh * m)
            for z, v in self.tree[j][(y, x)].items():
                key = g(x, y, z)
                acc[key] = acc.get(key, 0) + m * v

    def _rebuild(self) -> None:
        """Major rebalance: recompute every view from the (strictly repartitioned) parts;
        the listing itself does not change, so no delta is emitted."""
        self.hhh.clear()
        self.lll.clear()
        r_h, r_l = self.heavy[0], self.light[0]
        s_h, s_l = self.heavy[1], self.light[1]
        t_h, t_l = self.heavy[2], self.light[2]
        for (a, b), rm in r_h.rows.items():
            for (c, _), tm in t_h.match(1, a).items():
                sm = s_h.rows.get((b, c))
                if sm:
                    self.hhh[(a, b, c)] = rm * sm * tm
        for (a, b), rm in r_l.rows.items():
            for (_, c), sm in s_l.match(0, b).items():
                tm = t_l.rows.get((c, a), 0)
                if tm:
                    self.lll[(a, b, c)] = rm * sm * tm
        for i in range(3):
            tree, hat, root = self.tree[i], self.hat[i], self.root[i]
            tree.clear()
            hat.clear()
            root.clear()
            nxt = self.light[(i + 1) % 3]
            for y, rows in self.heavy[i].index[1].items():
                s_rows = nxt.match(0, y)
                if not s_rows:
                    continue
                for (x, _), rm in rows.items():
                    for (_, z), sm in s_rows.items():
                        _add_nested(tree, (x, z), y, rm * sm)
                        _add(hat, (x, z), rm * sm)
            k = (i + 2) % 3
            for (x, z), h in hat.items():
                tz = self.whole(k, (z, x))
                if tz:
                    root[(x, z)] = h * tz

    def full(self) -> dict[Triple, int]:
        """Enumerate every triangle with its multiplicity from the five disjoint views."""
        out: dict[Triple, int] = dict(self.hhh)
        for key, v in self.lll.items():
            out[key] = out.get(key, 0) + v
        for i in range(3):
            g = self.globals[i]
            k = (i + 2) % 3
            tree = self.tree[i]
            for (x, z) in self.root[i]:
                tz = self.whole(k, (z, x))
                for y, v in tree[(x, z)].items():
                    key = g(x, y, z)
                    out[key] = out.get(key, 0) + v * tz
        return out
