"""Hypergraph classes and free-connex generalized join trees (CROWN, section 3).

A tree node is an atom (an input relation occurrence) or a *generalized* node (a set of
variables; its relation is the intersection of its children's projections). Trees are
searched exhaustively over a memoised recursion and chosen by height, then by
sum over atoms of depth(e) * N(e) (N(e) = update rate of atom e).

The search is bounded, so that every query compiles in seconds (TPC-DS's joins of up
to 18 relations): a generalized node's candidates are the subsets of an atom's
variables shared with another atom (exact: no other subset can split the atoms);
a non-free-connex output is ruled out by GYO before any search; past
:data:`SEARCH_BUDGET` subproblems the greedy search takes each subproblem's first tree,
and past :data:`EXTENSION_BUDGET` candidate extensions of a non-free-connex output one
inclusion-minimal extension is found greedily. A fallback's tree is as valid as the
searched one (it may be higher or cost more); ``explain`` names it after the tree.

Example:
    >>> edges = [frozenset("AB"), frozenset("BC"), frozenset("CD"), frozenset("DE")]
    >>> is_acyclic(edges), is_hierarchical(edges)
    (True, False)
    >>> t = best_tree(edges, free=frozenset("BCD"), rates=[1, 1, 1, 1])
    >>> t.height
    2
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from core.errors import UnsupportedQueryError

Edge = frozenset[str]


def gyo_reduce(edges: Sequence[Edge]) -> list[Edge]:
    """GYO reduction: drop variables that occur in one edge only and edges contained in
    another; the hypergraph is alpha-acyclic iff nothing non-empty remains."""
    return [frozenset(e) for e in _gyo(edges).values() if e]


def gyo_core(edges: Sequence[Edge]) -> list[int]:
    """The positions of the edges :func:`gyo_reduce` leaves (those on a cycle).

    >>> gyo_core([frozenset("ab"), frozenset("bc"), frozenset("ca"), frozenset("cd")])
    [0, 1, 2]
    """
    return [i for i, e in _gyo(edges).items() if e]


def _gyo(edges: Sequence[Edge]) -> dict[int, set[str]]:
    """What GYO reduction leaves of each edge not dropped, by its position."""
    work = {i: set(e) for i, e in enumerate(edges)}
    changed = True
    while changed:
        changed = False
        counts: dict[str, int] = {}
        for e in work.values():
            for v in e:
                counts[v] = counts.get(v, 0) + 1
        for e in work.values():
            lonely = {v for v in e if counts[v] == 1}
            if lonely:
                e -= lonely
                changed = True
        for i, e in work.items():
            if any(j != i and (e < f or (e == f and j < i)) for j, f in work.items()):
                del work[i]
                changed = True
                break
    return work


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
    greedy: str = ""
    """Set on a root a fallback chose (the exhaustive search went over its budget):
    why; explain prints it."""

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


def _shared_vars(atoms: frozenset[int], edges: Sequence[Edge]) -> frozenset[str]:
    """The variables of two or more of ``atoms``."""
    seen: set[str] = set()
    shared: set[str] = set()
    for a in atoms:
        shared |= edges[a] & seen
        seen |= edges[a]
    return frozenset(shared)


SEARCH_BUDGET = 20_000
"""Subproblems (atom set, variables needed from above, flags) the exhaustive search may
solve for one tree; past it, :func:`best_tree` searches greedily (the first tree each
subproblem finds)."""
GREEDY_BUDGET = 20_000
"""Subproblems the greedy search may solve; past it the query is refused."""


class _OverBudget(Exception):
    """The search visited more than its budget of subproblems."""


def search_trees(
    edges: Sequence[Edge], free: frozenset[str], rates: Sequence[float], *,
    greedy: bool = False, budget: int | None = None,
) -> list[_Option]:
    """Pareto-optimal (height, cost) free-connex generalized join trees, or [] if none.

    A subtree may introduce a bound (non-free) variable only if nothing below it
    introduces a free one (the free-connex condition, checked locally). ``greedy``:
    each subproblem keeps the first tree it finds (atom roots first, the atom with the
    most variables first; then generalized roots, the smallest first) instead of
    comparing all. More than ``budget`` subproblems raise :class:`_OverBudget`."""
    n = len(edges)
    visited = 0

    def children(comps: list[frozenset[int]], root: Edge, generalized: bool, bound: bool
                 ) -> tuple[list[list[_Option]], list[float]] | None:
        """The subtrees below a root: one front per component (None: one has none).
        Below an atom a component needs what it shares with the root; below a
        generalized root, all of the root (and is again allowed one)."""
        fronts: list[list[_Option]] = []
        sums: list[float] = []
        for comp in comps:
            attrs_c = frozenset().union(*(edges[b] for b in comp))
            need_c = root if generalized else attrs_c & root
            if not need_c <= attrs_c:
                return None
            sub = build(comp, need_c, generalized, bound)
            if not sub:
                return None
            fronts.append(list(sub))
            sums.append(sum(rates[b] for b in comp))
        return fronts, sums

    @cache
    def build(
        atoms: frozenset[int], need: frozenset[str], gen_ok: bool, bound_above: bool
    ) -> tuple[_Option, ...]:
        nonlocal visited
        visited += 1
        if budget is not None and visited > budget:
            raise _OverBudget
        attrs_s = frozenset().union(*(edges[a] for a in atoms))
        if bound_above and (attrs_s & free) - need:
            return ()
        options: list[_Option] = []
        # (a) an atom as the root of this subtree
        order = sorted(atoms, key=lambda a: (-len(edges[a]), a)) if greedy else sorted(atoms)
        for a in order:
            e = edges[a]
            if not need <= e:
                continue
            introduces_bound = bool((e - need) - free)
            below = children(_components(atoms - {a}, edges, e), e, False,
                             bound_above or introduces_bound)
            if below is not None:
                options.extend(_combine(e, a, *below))
                if greedy:
                    return tuple(options)
        # (b) a generalized root (only above atoms, CROWN's condition 3). It splits the
        # atoms into two or more components and lies inside each, so each of its
        # variables is in two atoms or more: subsets of an atom's *shared* variables
        # only (the other subsets fail below; skipping them keeps the search
        # polynomial in an atom's private variables).
        if gen_ok:
            shared = _shared_vars(atoms, edges)
            candidates: set[frozenset[str]] = set()
            for a in atoms:
                if not need <= edges[a] & shared:
                    continue
                optional = sorted((edges[a] & shared) - need)
                for r in range(len(optional) + 1):
                    for sub_attrs in itertools.combinations(optional, r):
                        candidates.add(need | frozenset(sub_attrs))
            for g in sorted(candidates, key=lambda s: (len(s), sorted(s))):
                comps = _components(atoms, edges, g)
                if len(comps) < 2:
                    continue
                introduces_bound = bool((g - need) - free)
                below = children(comps, g, True, bound_above or introduces_bound)
                if below is not None:
                    options.extend(_combine(g, None, *below))
                    if greedy:
                        return tuple(options)
        return tuple(_pareto(options))

    if n == 0:
        return []
    return list(build(frozenset(range(n)), frozenset(), True, False))


def best_tree(
    edges: Sequence[Edge], free: frozenset[str], rates: Sequence[float]
) -> TreeNode | None:
    """The chosen tree: lowest height, then lowest sum of depth * rate; None when the
    query is not free-connex for ``free`` (decided by GYO first, in polynomial time).

    Past :data:`SEARCH_BUDGET` subproblems, the first tree of the greedy search, marked
    ``greedy`` (explain says so); past :data:`GREEDY_BUDGET` there, the query is
    refused (:class:`UnsupportedQueryError`)."""
    if edges and not is_free_connex(edges, free):
        return None
    greedy = False
    try:
        options = search_trees(edges, free, rates, budget=SEARCH_BUDGET)
    except _OverBudget:
        greedy = True
        try:
            options = search_trees(edges, free, rates, greedy=True, budget=GREEDY_BUDGET)
        except _OverBudget:
            msg = (f"a join of {len(edges)} relations over "
                   f"{len(frozenset().union(*edges))} variables: no join tree found "
                   f"within {SEARCH_BUDGET} search steps, nor greedily within "
                   f"{GREEDY_BUDGET}")
            raise UnsupportedQueryError(msg) from None
    if not options:
        return None
    node = min(options, key=lambda o: (o.height, o.cost, _render(o.node))).node
    if greedy:
        why = f"the greedy tree: the exhaustive search went over {SEARCH_BUDGET} steps"
        return dataclasses.replace(node, greedy=why)
    return node


EXTENSION_BUDGET = 2_000
"""Sets of bound variables :func:`free_connex_tree` may try as the output's extension;
past it, one inclusion-minimal extension, found greedily."""


def free_connex_tree(
    edges: Sequence[Edge], free: frozenset[str], bound: Sequence[str],
    rates: Sequence[float], names: Sequence[str],
) -> tuple[TreeNode, tuple[str, ...]] | None:
    """The tree for the output ``free`` extended by the fewest ``bound`` variables that
    make the query free-connex (CROWN's extension of a non-free-connex query), and those
    variables: among the sets of the smallest size, the lowest (height, cost,
    rendering). Past :data:`EXTENSION_BUDGET` sets tried, the fallback: all of
    ``bound``, less each variable (in order) without which a tree is still found (an
    inclusion-minimal extension), a tree marked ``greedy``. None for a cyclic query.

    The search's trees are CROWN's (generalized nodes inside an atom, above atoms
    only), so a free-connex output (by GYO) does not always have one: GYO only rules
    sets out."""
    tried = 0
    for size in range(len(bound) + 1):
        best: tuple[int, float, str, TreeNode, tuple[str, ...]] | None = None
        for combo in itertools.combinations(bound, size):
            tried += 1
            if tried > EXTENSION_BUDGET:
                return _greedy_extension(edges, free, bound, rates)
            t = best_tree(edges, free | frozenset(combo), rates)
            if t is None:
                continue
            cand = (t.height, t.cost(rates), render_tree(t, names), t, combo)
            if best is None or cand[:3] < best[:3]:
                best = cand
        if best is not None:
            return best[3], best[4]
    return None


def _greedy_extension(edges: Sequence[Edge], free: frozenset[str], bound: Sequence[str],
                      rates: Sequence[float]) -> tuple[TreeNode, tuple[str, ...]] | None:
    """All of ``bound``, less each variable (in order) without which a tree is still
    found (GYO first; then the greedy search, within its budget)."""
    def has_tree(out: frozenset[str]) -> bool:
        if not is_free_connex(edges, out):
            return False
        try:
            return bool(search_trees(edges, out, rates, greedy=True, budget=GREEDY_BUDGET))
        except _OverBudget:
            return False

    extra = list(bound)
    for v in bound:
        rest = [x for x in extra if x != v]
        if has_tree(free | frozenset(rest)):
            extra = rest
    tree = best_tree(edges, free | frozenset(extra), rates)
    if tree is None:
        return None
    why = (f"the output extended greedily: more than {EXTENSION_BUDGET} sets of bound "
           "variables to try")
    why += f"; {tree.greedy}" if tree.greedy else ""
    return dataclasses.replace(tree, greedy=why), tuple(extra)


def render_tree(node: TreeNode, names: Sequence[str]) -> str:
    """A compact one-line rendering, e.g. ``[C](G2(G1), G3(G4))``; a tree a fallback
    chose says so after it."""
    head = names[node.atom] if node.atom is not None else "[" + ",".join(sorted(node.attrs)) + "]"
    note = f" (fallback: {node.greedy})" if node.greedy else ""
    if not node.children:
        return head + note
    return head + "(" + ", ".join(render_tree(c, names) for c in node.children) + ")" + note
