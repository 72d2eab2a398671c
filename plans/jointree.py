"""Hypergraph classes and free-connex generalized join trees (CROWN, section 3).

A tree node is an atom (an input relation occurrence) or a *generalized* node (a set of
variables; its relation is the intersection of its children's projections). Trees are
searched exhaustively over a memoised recursion and chosen by height, then by
sum over atoms of depth(e) * N(e) (N(e) = update rate of atom e).

Example:
    >>> edges = [frozenset("AB"), frozenset("BC"), frozenset("CD"), frozenset("DE")]
    >>> is_acyclic(edges), is_hierarchical(edges)
    (True, False)
    >>> t = best_tree(edges, free=frozenset("BCD"), rates=[1, 1, 1, 1])
    >>> t.height
    2
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

Edge = frozenset[str]


def gyo_reduce(edges: Sequence[Edge]) -> list[Edge]:
    """GYO reduction: drop variables that occur in one edge only and edges contained in
    another; the hypergraph is alpha-acyclic iff nothing non-empty remains."""
    work = [set(e) for e in edges]
    changed = True
    while changed:
        changed = False
        counts: dict[str, int] = {}
        for e in work:
            for v in e:
                counts[v] = counts.get(v, 0) + 1
        for e in work:
            lonely = {v for v in e if counts[v] == 1}
            if lonely:
                e -= lonely
                changed = True
        for i, e in enumerate(work):
            if any(j != i and (e < f or (e == f and j < i)) for j, f in enumerate(work)):
                work.pop(i)
                changed = True
                break
    return [frozenset(e) for e in work if e]


def is_acyclic(edges: Sequence[Edge]) -> bool:
    return not gyo_reduce(edges)


def is_free_connex(edges: Sequence[Edge], free: Edge) -> bool:
    return is_acyclic(edges) and is_acyclic([*edges, free])


def is_hierarchical(edges: Sequence[Edge]) -> bool:
    """For every two variables the sets of atoms containing them are nested or disjoint."""
    atoms_of = _atoms_of(edges)
    for a, b in itertools.combinations(atoms_of.values(), 2):
        if not (a <= b or b <= a or not (a & b)):
            return False
    return True


def is_q_hierarchical(edges: Sequence[Edge], free: Edge) -> bool:
    """Hierarchical, and a free variable's atom set is never strictly inside a bound
    variable's atom set."""
    if not is_hierarchical(edges):
        return False
    atoms_of = _atoms_of(edges)
    for x, ax in atoms_of.items():
        for z, az in atoms_of.items():
            if x in free and ax < az and z not in free:
                return False
    return True


def _atoms_of(edges: Sequence[Edge]) -> dict[str, frozenset[int]]:
    out: dict[str, set[int]] = {}
    for i, e in enumerate(edges):
        for v in e:
            out.setdefault(v, set()).add(i)
    return {v: frozenset(s) for v, s in out.items()}


@dataclass(frozen=True)
class TreeNode:
    """A node of a generalized join tree. ``atom`` is None for a generalized node."""

    attrs: frozenset[str]
    atom: int | None
    children: tuple[TreeNode, ...] = ()

    @property
    def height(self) -> int:
        """Atoms on the longest leaf-to-root path (generalized nodes not counted)."""
        below = max((c.height for c in self.children), default=0)
        return below + (1 if self.atom is not None else 0)

    def atoms(self) -> list[int]:
        out = [] if self.atom is None else [self.atom]
        for c in self.children:
            out.extend(c.atoms())
        return out

    def cost(self, rates: Sequence[float], depth: int = 0) -> float:
        """Sum over atoms of (atom ancestors) * rate."""
        own = depth * rates[self.atom] if self.atom is not None else 0.0
        below = depth + (1 if self.atom is not None else 0)
        return own + sum(c.cost(rates, below) for c in self.children)


@dataclass(frozen=True)
class _Option:
    height: int
    cost: float
    node: TreeNode


def _components(atoms: frozenset[int], edges: Sequence[Edge], sep: frozenset[str]) -> list[
    frozenset[int]
]:
    """Connected components of ``atoms`` where two atoms touch if they share a variable
    outside ``sep``."""
    remaining = sorted(atoms)
    comps: list[frozenset[int]] = []
    while remaining:
        seed = remaining.pop(0)
        comp = {seed}
        frontier = [seed]
        while frontier:
            a = frontier.pop()
            for b in list(remaining):
                if (edges[a] & edges[b]) - sep:
                    remaining.remove(b)
                    comp.add(b)
                    frontier.append(b)
        comps.append(frozenset(comp))
    return comps


def _pareto(options: list[_Option]) -> list[_Option]:
    options.sort(key=lambda o: (o.height, o.cost, _render(o.node)))
    front: list[_Option] = []
    for o in options:
        if not front or o.cost < front[-1].cost:
            if front and front[-1].height == o.height:
                continue
            front.append(o)
    return front


def _render(node: TreeNode) -> str:
    head = f"R{node.atom}" if node.atom is not None else "[" + ",".join(sorted(node.attrs)) + "]"
    if not node.children:
        return head
    return head + "(" + ",".join(_render(c) for c in node.children) + ")"


def _combine(
    root_attrs: frozenset[str],
    root_atom: int | None,
    child_fronts: list[list[_Option]],
    child_rate_sums: list[float],
) -> list[_Option]:
    """Pareto front of trees with the given root over all choices of child options."""
    bump = 1 if root_atom is not None else 0
    if not child_fronts:
        return [_Option(bump, 0.0, TreeNode(root_attrs, root_atom))]
    heights = sorted({o.height for f in child_fronts for o in f})
    out: list[_Option] = []
    for h in heights:
        chosen: list[_Option] = []
        for front in child_fronts:
            fit = [o for o in front if o.height <= h]
            if not fit:
                break
            chosen.append(min(fit, key=lambda o: (o.cost, _render(o.node))))
        else:
            cost = sum(o.cost for o in chosen) + bump * sum(child_rate_sums)
            height = bump + max(o.height for o in chosen)
            kids = tuple(o.node for o in chosen)
            out.append(_Option(height, cost, TreeNode(root_attrs, root_atom, kids)))
    return out


def search_trees(
    edges: Sequence[Edge], free: frozenset[str], rates: Sequence[float]
) -> list[_Option]:
    """Pareto-optimal (height, cost) free-connex generalized join trees, or [] if none.

    A subtree may introduce a bound (non-free) variable only if nothing below it
    introduces a free one (the free-connex condition, checked locally)."""
    all_vars = frozenset().union(*edges) if edges else frozenset()
    n = len(edges)

    @cache
    def build(
        atoms: frozenset[int], need: frozenset[str], gen_ok: bool, bound_above: bool
    ) -> tuple[_Option, ...]:
        attrs_s = frozenset().union(*(edges[a] for a in atoms))
        if bound_above and (attrs_s & free) - need:
            return ()
        options: list[_Option] = []
        # (a) an atom as the root of this subtree
        for a in sorted(atoms):
            e = edges[a]
            if not need <= e:
                continue
            introduces_bound = bool((e - need) - free)
            rest = atoms - {a}
            fronts: list[list[_Option]] = []
            sums: list[float] = []
            ok = True
            for comp in _components(rest, edges, e):
                attrs_c = frozenset().union(*(edges[b] for b in comp))
                sub = build(comp, attrs_c & e, False, bound_above or introduces_bound)
                if not sub:
                    ok = False
                    break
                fronts.append(list(sub))
                sums.append(sum(rates[b] for b in comp))
            if ok:
                options.extend(_combine(e, a, fronts, sums))
        # (b) a generalized root (only above atoms, CROWN's condition 3)
        if gen_ok:
            candidates: set[frozenset[str]] = set()
            for a in atoms:
                for r in range(len(edges[a]) + 1):
                    for sub_attrs in itertools.combinations(sorted(edges[a]), r):
                        g = frozenset(sub_attrs)
                        if need <= g:
                            candidates.add(g)
            for g in sorted(candidates, key=lambda s: (len(s), sorted(s))):
                comps = _components(atoms, edges, g)
                if len(comps) < 2:
                    continue
                introduces_bound = bool((g - need) - free)
                fronts = []
                sums = []
                ok = True
                for comp in comps:
                    attrs_c = frozenset().union(*(edges[b] for b in comp))
                    if not g <= attrs_c:
                        ok = False
                        break
                    sub = build(comp, g, True, bound_above or introduces_bound)
                    if not sub:
                        ok = False
                        break
                    fronts.append(list(sub))
                    sums.append(sum(rates[b] for b in comp))
                if ok:
                    options.extend(_combine(g, None, fronts, sums))
        return tuple(_pareto(options))

    if n == 0:
        return []
    del all_vars
    return list(build(frozenset(range(n)), frozenset(), True, False))


def best_tree(
    edges: Sequence[Edge], free: frozenset[str], rates: Sequence[float]
) -> TreeNode | None:
    """The chosen tree: lowest height, then lowest sum of depth * rate."""
    options = search_trees(edges, free, rates)
    if not options:
        return None
    return min(options, key=lambda o: (o.height, o.cost, _render(o.node))).node


def render_tree(node: TreeNode, names: Sequence[str]) -> str:
    """A compact one-line rendering, e.g. ``[C](G2(G1), G3(G4))``."""
    head = names[node.atom] if node.atom is not None else "[" + ",".join(sorted(node.attrs)) + "]"
    if not node.children:
        return head
    return head + "(" + ", ".join(render_tree(c, names) for c in node.children) + ")"
