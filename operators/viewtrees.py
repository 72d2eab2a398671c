"""The view trees of a hierarchical query with the update/delay knob eps (docs/algorithms.md):
count views, heavy/light split of every bound variable above a free one, light
listing views, delta and full enumeration.

State, all named maps of the State protocol (``K_X`` = the values of X's path, i.e.
anc(X) + X; an atom's tuple is the key of its lowest variable):

* ``hier.rel.<i>``: atom i's copy, ``K -> multiplicity``;
* ``hier.prod.<X>``: per anc(X), ``x -> product of X's children's counts at K_X``
  (non-zero only): the keys present in every relation below X (the paper's All_X);
* ``hier.count.<X>``: ``anc(X) -> sum of those products`` (the sibling view V'_X: the
  derivations of X's subtree). Both are maintained in O(1) per variable on the path;
* ``hier.deg.<X>.<i>``: for a split X, ``K_X -> distinct tuples of atom i`` (degrees,
  kept by the :class:`~operators.heavylight.PrefixRouter`);
* ``hier.heavy.<X>``: per anc(X), the heavy x (the paper's H_X; the router's classes);
* ``hier.light.<X>``: per anc(X), ``row -> multiplicity``: the rows over X's free
  subtree variables contributed by light keys (the light view L_X);
* ``hier.meta``: the database size N and the threshold base Theta (the router's).

An update to atom i with tuple t emits ``dm x`` the derivations of the rest of the
query joined with t (the output delta does not depend on the partition, so a migration
between light and heavy emits nothing), adds the same restricted to X's subtree to
L_X for every split X on t's path whose key was light **before** the update, then
updates the counts and degrees bottom-up and rebalances: minor per key (light -> heavy
at degree >= 3/2 theta, heavy -> light below 1/2 theta), major when N leaves
[Theta/4, Theta) (Theta doubles or halves, every key is repartitioned strictly at
theta = Theta^eps, and the light views are rebuilt).

Enumeration walks the variable order: a free variable iterates its present values, a
split variable reads its light view and grounds each heavy key (at most N^(1-eps) per
context), a subtree without free variables is its count.

Example (Q(A,C) = R(A,B), S(B,C), eps = 1/2):
    >>> from plans.hierarchical import plan_hierarchical
    >>> from plans.sql import parse_query
    >>> cq = parse_query("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT);"
    ...                  "SELECT R.a, S.c FROM R, S WHERE R.b = S.b")
    >>> views = HierarchicalViews(plan_hierarchical(cq), DictState(), 0.5)
    >>> # tuples in path order: R(a, b) as (b, a), S(b, c) as (b, c)
    >>> views.update(0, (7, 1), 1); views.update(1, (7, 3), 1); views.update(0, (7, 2), 1)
    >>> sorted(views.take_delta().items()), sorted(views.full().items())
    ([((1, 3), 1), ((2, 3), 1)], [((1, 3), 1), ((2, 3), 1)])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import product
from operator import itemgetter
from typing import Any

from operators.heavylight import PrefixRouter, PrefixSpec
from operators.state import DictState, Grouped, State
from plans.hierarchical import HierarchicalPlan, VarNode

__all__ = ["DictState", "HierarchicalViews"]

Row = tuple[Any, ...]


class HierarchicalViews:
    """The count, degree, heavy and light views of one partition (see the module)."""

    def __init__(self, hp: HierarchicalPlan, state: State, eps: float,
                 emit_deltas: bool = True) -> None:
        self.hp = hp
        self.eps = eps
        self.emit_deltas = emit_deltas
        """False: maintain the views only (the paper's update; the result is read by
        enumeration). Benchmarks of Theorem 3's update time use it; runners never do."""
        self.state = state
        self.nodes: dict[str, VarNode] = {n.var: n for n in hp.nodes}
        self.rel = [state.map(f"hier.rel.{a.index}") for a in hp.cq.atoms]
        self.prod = {n.var: Grouped(state.map(f"hier.prod.{n.var}"), n.depth == 0)
                     for n in hp.nodes}
        self.count = {n.var: state.map(f"hier.count.{n.var}") for n in hp.nodes}
        self.splits = [self.nodes[x] for x in hp.bf]
        self.router = PrefixRouter(
            state, [PrefixSpec(x.var, x.depth, x.under) for x in self.splits], eps,
            name="hier", move=self._move, rebuild=self.rebuild,
        )
        self.heavy = self.router.heavy
        self.light = {x.var: Grouped(state.map(f"hier.light.{x.var}"), x.depth == 0)
                      for x in self.splits}
        self._to_output = _row_mapper(hp.out_positions,
                                      len(self.nodes[hp.root].free_order))
        self.acc: dict[Row, int] = {}
        self.stats = self.router.stats
        """Rebalancing counters (not state: they restart with the worker)."""
        # Per atom: the split nodes on its path, top-down.
        self._atom_splits = [
            [self.nodes[v] for v in path if self.nodes[v].split] for path in hp.atom_paths
        ]

    # -- the state's size and threshold ---------------------------------------------

    @property
    def n(self) -> int:
        """The database size N: distinct tuples over all atoms' copies."""
        return self.router.size

    @property
    def base(self) -> int:
        """The threshold base Theta, with floor(Theta/4) <= N < Theta."""
        return self.router.base

    @property
    def theta(self) -> float:
        """The heavy/light threshold Theta^eps."""
        return self.router.theta

    # -- updates ---------------------------------------------------------------------

    def multiplicity(self, atom: int, key: Row) -> int:
        """Atom ``atom``'s multiplicity of the tuple ``key`` (in path order)."""
        return int(self.rel[atom].get(key, 0))

    def update(self, atom: int, key: Row, dm: int) -> None:
        """Apply ``dm`` copies of atom ``atom``'s tuple ``key`` (in path order)."""
        if not dm:
            return
        rel = self.rel[atom]
        old = rel.get(key, 0)
        new = old + dm
        if new < 0:
            msg = (f"delete of {-dm} copies of {key} from {self.hp.cq.atoms[atom].alias},"
                   f" which holds {old}")
            raise ValueError(msg)
        splits = self._atom_splits[atom]
        router = self.router
        light_before = [router.routes_light(x.var, key) for x in splits]
        path = self.hp.atom_paths[atom]
        # The output delta and the light views: derivations of the rest joined with t.
        # The root's rows serve the output and a light root split alike: one walk.
        root_rows = None
        if self.emit_deltas:
            root_rows = self._path_rows(0, path, key, atom)
            acc = self.acc
            to_output = self._to_output
            for row, m in root_rows:
                out = to_output(row)
                acc[out] = acc.get(out, 0) + dm * m
        for x, light in zip(splits, light_before, strict=True):
            if light:
                anc = key[: x.depth]
                view = self.light[x.var]
                rows = root_rows if x.depth == 0 and root_rows is not None else \
                    self._path_rows(x.depth, path, key, atom)
                view.add_many(anc, rows, dm)
        if new:
            rel[key] = new
        else:
            del rel[key]
        self._recount(path, key)
        if (old == 0) != (new == 0):
            router.tuple_changed(atom, key, 1 if new else -1)

    def _recount(self, path: tuple[str, ...], key: Row) -> None:
        """Recompute the products and counts on the path, bottom-up, until one holds."""
        for depth in range(len(path) - 1, -1, -1):
            node = self.nodes[path[depth]]
            k = key[: depth + 1]
            anc = key[:depth]
            new = self._product(node, k)
            prod = self.prod[node.var]
            old = prod.get(anc, k[-1])
            if new == old:
                return
            prod.put(anc, k[-1], new)
            count = self.count[node.var]
            c = count.get(anc, 0) + new - old
            if c:
                count[anc] = c
            else:
                del count[anc]

    def _product(self, node: VarNode, k: Row) -> int:
        p = 1
        for i in node.atoms:
            p *= self.rel[i].get(k, 0)
            if not p:
                return 0
        for c in node.children:
            p *= self.count[c].get(k, 0)
            if not p:
                return 0
        return p

    # -- heavy/light (the router decides, the views follow) ----------------------------

    def _is_heavy(self, x: VarNode, key: Row) -> bool:
        return self.router.is_heavy(x.var, key)

    def _degree(self, x: VarNode, k: Row) -> int:
        return self.router.degree(x.var, k)

    def _move(self, spec: PrefixSpec, k: Row, to_heavy: bool) -> None:
        """A minor rebalance: the key's contributions leave (or join) the light view."""
        anc = k[:-1]
        sign = -1 if to_heavy else 1
        view = self.light[spec.name]
        for row, m in self._expand(self.nodes[spec.name], k):
            view.add(anc, row, sign * m)
            self.stats["moved"] += 1

    def rebuild(self) -> None:
        """After a major rebalance (classes strict at the new theta): light views
        recomputed from the light keys."""
        for x in self.splits:
            heavy, light = self.heavy[x.var], self.light[x.var]
            light.clear()
            for anc, xv, _ in self.prod[x.var].groups():
                k = (*anc, xv)
                if not heavy.get(anc, xv):
                    for row, m in self._expand(x, k):
                        light.add(anc, row, m)

    # -- enumeration ------------------------------------------------------------------

    def _produce(self, node: VarNode, ctx: Row) -> Iterator[tuple[Row, int]]:
        """The rows over ``node.free_order`` of the node's subtree in context ``ctx``
        (= anc(node)), with multiplicities; a row may come several times (summed by the
        caller) where a bound variable is projected away."""
        if not node.has_free:
            c = self.count[node.var].get(ctx, 0)
            if c:
                yield (), c
            return
        prod = self.prod[node.var]
        if node.split:
            yield from self.light[node.var].members(ctx)
            for xv, _ in self.heavy[node.var].members(ctx):
                if prod.get(ctx, xv):
                    yield from self._expand(node, (*ctx, xv))
            return
        if len(node.free_order) == 1:
            # No free variable below: the product is the multiplicity.
            for xv, p in prod.members(ctx):
                yield (xv,), p
            return
        for xv, _ in prod.members(ctx):
            for row, m in self._expand(node, (*ctx, xv)):
                yield (xv, *row), m

    def _split_children(self, node: VarNode, k: Row) -> tuple[int, list[VarNode]]:
        """Under key ``k``: the product of the atoms' multiplicities and of the counts of
        the children without free variables, and the children with free variables."""
        scalar = 1
        for i in node.atoms:
            scalar *= self.rel[i].get(k, 0)
        free_children = []
        for c in node.children:
            child = self.nodes[c]
            if child.has_free:
                free_children.append(child)
            else:
                scalar *= self.count[c].get(k, 0)
        return scalar, free_children

    def _expand(self, node: VarNode, k: Row) -> Iterator[tuple[Row, int]]:
        """The rows of the node's children's free variables under key ``k``."""
        scalar, free_children = self._split_children(node, k)
        if scalar:
            yield from _combine(scalar, [list(self._produce(c, k)) for c in free_children])

    def _path_rows(self, depth: int, path: tuple[str, ...], key: Row, atom: int
                   ) -> list[tuple[Row, int]]:
        """The rows over ``free_order`` of the node at ``depth`` on the path, for the
        derivations that use atom ``atom``'s tuple ``key`` (its multiplicity left out).
        Lists, not generators: an update's rows are all needed, and list building is
        the cheapest per row."""
        node = self.nodes[path[depth]]
        k = key[: depth + 1]
        scalar = 1
        for i in node.atoms:
            if i != atom:
                scalar *= self.rel[i].get(k, 0)
        below = path[depth + 1] if depth + 1 < len(path) else None
        parts: list[list[tuple[Row, int]]] = []
        for c in node.children:
            child = self.nodes[c]
            if c == below:
                parts.append(self._path_rows(depth + 1, path, key, atom))
            elif child.has_free:
                parts.append(list(self._produce(child, k)))
            else:
                scalar *= self.count[c].get(k, 0)
            if not scalar:
                return []
        rows = _combine(scalar, parts)
        if node.free:
            xv = k[-1]
            return [((xv, *row), m) for row, m in rows]
        return rows

    def full(self) -> dict[Row, int]:
        """The whole result: row (engine row variables) -> multiplicity."""
        root = self.nodes[self.hp.root]
        to_output = self._to_output
        out: dict[Row, int] = {}
        for row, m in self._produce(root, ()):
            r = to_output(row)
            out[r] = out.get(r, 0) + m
        return {r: m for r, m in out.items() if m}

    # -- enumeration with bounded delay (distinct rows, summed multiplicities) -------

    def enumerate(self) -> Iterator[tuple[Row, int]]:
        """The whole result, each row once with its multiplicity, with the delay of
        Proposition 21: a split variable's light view and its heavy keys' buckets (at
        most N^(1-eps) per context) are merged by UNION with lookups, children by a lazy
        PRODUCT. ``full()`` gives the same rows through a dict (faster in total, but
        no bound on the time to the first or next row).

        >>> from plans.hierarchical import plan_hierarchical
        >>> from plans.sql import parse_query
        >>> cq = parse_query("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT);"
        ...                  "SELECT R.a FROM R, S WHERE R.b = S.b")
        >>> views = HierarchicalViews(plan_hierarchical(cq), DictState(), 0.0)
        >>> for b in (1, 2):
        ...     views.update(1, (b,), 1)
        ...     for a in (5, 6, 7):
        ...         views.update(0, (b, a), 1)
        >>> sorted(views.enumerate())
        [((5,), 2), ((6,), 2), ((7,), 2)]
        """
        root = self.nodes[self.hp.root]
        to_output = self._to_output
        for row, m in self._distinct(root, ()):
            yield to_output(row), m

    def _distinct(self, node: VarNode, ctx: Row) -> Iterator[tuple[Row, int]]:
        """The distinct rows over ``node.free_order`` in context ``ctx``, lazily."""
        if not node.has_free:
            c = self.count[node.var].get(ctx, 0)
            if c:
                yield (), c
            return
        prod = self.prod[node.var]
        if not node.split:
            for xv, _ in prod.members(ctx):
                for row, m in self._children_product(node, (*ctx, xv)):
                    yield (xv, *row), m
            return
        light = self.light[node.var]
        heavy = [xv for xv, _ in self.heavy[node.var].members(ctx) if prod.get(ctx, xv)]
        light_rows = light.members(ctx)

        def lookup(bucket: int, row: Row) -> int:
            if bucket == 0:
                return int(light.get(ctx, row))
            return self._lookup_children(node, (*ctx, heavy[bucket - 1]), row)

        buckets: list[Iterator[tuple[Row, int]]] = [iter(light_rows)]
        buckets += [self._children_product(node, (*ctx, xv)) for xv in heavy]
        for row in _union(buckets, lambda b, r: lookup(b, r) != 0):
            yield row, sum(lookup(b, row) for b in range(len(buckets)))

    def _children_product(self, node: VarNode, k: Row) -> Iterator[tuple[Row, int]]:
        """PRODUCT of the children's distinct rows under key ``k`` (an odometer: later
        children are re-enumerated for each row of earlier ones, nothing materialised)."""
        scalar, free_children = self._split_children(node, k)
        if not scalar:
            return

        def odometer(j: int) -> Iterator[tuple[Row, int]]:
            if j == len(free_children):
                yield (), scalar
                return
            for row, m in self._distinct(free_children[j], k):
                for rest, mr in odometer(j + 1):
                    yield (*row, *rest), m * mr

        yield from odometer(0)

    def _lookup(self, node: VarNode, ctx: Row, row: Row) -> int:
        """The multiplicity of ``row`` (over ``node.free_order``) in the node's subtree
        in context ``ctx``: O(1) through free variables, O(heavy keys) at a split."""
        if not node.has_free:
            return int(self.count[node.var].get(ctx, 0))
        if not node.split:
            xv = row[0]
            if not self.prod[node.var].get(ctx, xv):
                return 0
            return self._lookup_children(node, (*ctx, xv), row[1:])
        total = int(self.light[node.var].get(ctx, row))
        prod = self.prod[node.var]
        for xv, _ in self.heavy[node.var].members(ctx):
            if prod.get(ctx, xv):
                total += self._lookup_children(node, (*ctx, xv), row)
        return total

    def _lookup_children(self, node: VarNode, k: Row, row: Row) -> int:
        m = 1
        for i in node.atoms:
            m *= self.rel[i].get(k, 0)
        at = 0
        for c in node.children:
            child = self.nodes[c]
            width = len(child.free_order)
            m *= self._lookup(child, k, row[at: at + width])
            at += width
            if not m:
                return 0
        return m

    def take_delta(self) -> dict[Row, int]:
        """Row changes since the last call (zero entries possible)."""
        out, self.acc = self.acc, {}
        return out

    def check_invariants(self) -> None:
        """Assert what the views promise (for tests): counts equal their products, every
        heavy key's degree is at least theta/2 and every light key's below 3 theta/2,
        floor(Theta/4) <= N < Theta, and each light view equals its recomputation."""
        n = sum(len(r) for r in self.rel)
        assert n == self.n and self.base // 4 <= n < self.base, (n, self.base)
        for node in self.hp.nodes:
            sums: dict[Row, int] = {}
            for anc, xv, p in self.prod[node.var].groups():
                assert p == self._product(node, (*anc, xv)) != 0, (node.var, anc, xv)
                sums[anc] = sums.get(anc, 0) + p
            assert sums == dict(self.count[node.var]), node.var
        theta = self.theta
        for x in self.splits:
            expected = Grouped({}, x.depth == 0)
            for anc, xv, _ in self.prod[x.var].groups():
                k = (*anc, xv)
                heavy = self._is_heavy(x, k)
                d = self._degree(x, k)
                assert (d >= 0.5 * theta) if heavy else (d < 1.5 * theta), (x.var, k, d)
                if not heavy:
                    for row, m in self._expand(x, k):
                        expected.add(anc, row, m)
            got = {(a, r): m for a, r, m in self.light[x.var].groups()}
            assert got == {(a, r): m for a, r, m in expected.groups()}, x.var

    def light_rows(self) -> int:
        """Rows held by the light views (their space)."""
        return sum(1 for v in self.light.values() for _ in v.groups())


def _row_mapper(positions: tuple[int, ...], width: int) -> Callable[[Row], Row]:
    """Root row -> output row (the identity when the orders agree)."""
    if positions == tuple(range(width)):
        return lambda row: row
    if len(positions) == 1:
        p = positions[0]
        return lambda row: (row[p],)
    return itemgetter(*positions)


def _union(buckets: list[Iterator[tuple[Row, int]]],
           contains: Callable[[int, Row], bool]) -> Iterator[Row]:
    """UNION of buckets of distinct rows, each row once (Durand-Strozecki, as in the
    paper's Fig. 12, without recursion): a candidate climbs from the lowest live level
    through the later buckets; where bucket k holds it too, bucket k's next row takes
    its place (bucket k emits it in its turn), so each row costs O(buckets) lookups."""
    n = len(buckets)
    if n == 1:
        for row, _ in buckets[0]:
            yield row
        return
    done = [False] * n  # done[k]: the union of buckets 0..k is exhausted
    while not done[n - 1]:
        level = done.index(False)  # done is a prefix: buckets below are exhausted
        item = next(buckets[level], None)
        if item is None:
            done[level] = True
            continue
        row = item[0]
        k = level + 1
        while k < n:
            if contains(k, row):
                replacement = next(buckets[k], None)
                if replacement is None:
                    break  # bucket k is drained and has emitted this row already
                row = replacement[0]
            k += 1
        else:
            yield row


def _combine(scalar: int, parts: list[list[tuple[Row, int]]]) -> list[tuple[Row, int]]:
    """The product of the children's row lists, rows concatenated in child order."""
    if not parts:
        return [((), scalar)]
    if len(parts) == 1:
        if scalar == 1:
            return parts[0]
        return [(row, scalar * m) for row, m in parts[0]]
    if len(parts) == 2:
        return [((*r1, *r2), scalar * m1 * m2) for r1, m1 in parts[0] for r2, m2 in parts[1]]
    out = []
    for combo in product(*parts):
        joined: Row = ()
        m = scalar
        for r, cm in combo:
            joined += r
            m *= cm
        out.append((joined, m))
    return out
