"""Hierarchical queries with the update/delay knob eps (Kara, Nikolic, Olteanu, Zhang,
"Trade-offs in static and dynamic evaluation of hierarchical queries"; docs/algorithms.md).

A query is hierarchical when any two variables' atom sets are disjoint or nested. The
planner builds its **canonical variable order** (a variable's ancestors are the variables
whose atom sets contain its own; among equal sets free variables go above bound ones,
which minimises the bound variables above free ones), then reads off:

* ``bf``: bound variables with a free variable below them. These are the nodes the
  view-tree compiler tau splits by degree into a light part (a materialised listing
  view) and heavy keys (grounded at enumeration). An empty ``bf`` is a q-hierarchical
  query;
* ``njb``: the non-join bound variables of each residual query Q_X;
* ``rho*`` of a restriction, by counting inclusion-minimal atom sets (exact for
  hierarchical queries, Lemma 11);
* the factorization width ``w`` and the delta width ``delta``, from which the predicted
  exponents follow: preprocessing ``1 + (w-1) eps``, update ``delta eps`` (amortized),
  delay ``1 - eps``.

``w`` is computed on the canonical order with the bound of Lemma 33 (the largest rho* of
a split variable's restriction to itself, its ancestors and the free variables below
it); it equals the paper's w on all of the paper's examples (golden tests).

Example (the paper's Example 4, Q(A,C) = R(A,B), S(B,C)):
    >>> from plans.sql import parse_query
    >>> cq = parse_query("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT);"
    ...                  "SELECT R.a, S.c FROM R, S WHERE R.b = S.b")
    >>> hp = plan_hierarchical(cq)
    >>> hp.order_text, hp.bf, hp.w, hp.delta
    ('r.b - { a - R(a, r.b) ; c - S(r.b, c) }', ('r.b',), 2, 1)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.errors import UnsupportedQueryError
from core.graph import Dataflow, Edge, Op
from plans.cq import ConjunctiveQuery
from plans.dag import dataflow_epilogue, dataflow_prelude
from plans.jointree import is_hierarchical
from plans.plan import Mode, Plan, classify
from plans.triangle import output_shape

__all__ = ["HierarchicalPlan", "VarNode", "explain_hierarchical", "plan_hierarchical",
           "predicted_exponents", "compile_hierarchical_dataflow", "rho_star"]


@dataclass(frozen=True)
class VarNode:
    """One variable of the canonical order."""

    var: str
    depth: int
    parent: str | None
    children: tuple[str, ...]
    """Child variables, in order."""
    atoms: tuple[int, ...]
    """Atoms whose lowest variable this is (their tuples are this node's key)."""
    free: bool
    has_free: bool
    """A free variable in this node's subtree (itself included)."""
    split: bool
    """Bound with a free variable below: the node is in bf and tau splits it by degree."""
    free_order: tuple[str, ...]
    """The free variables of the subtree, in the order of a row of this node's views:
    the node itself (if free), then each child's, in child order."""
    path: tuple[str, ...]
    """anc(X) + (X,): the variables of this node's key."""
    under: tuple[int, ...]
    """All atoms of the subtree."""


@dataclass(frozen=True)
class HierarchicalPlan:
    """A connected hierarchical query planned for the view-tree engine."""

    cq: ConjunctiveQuery
    nodes: tuple[VarNode, ...]
    root: str
    atom_paths: tuple[tuple[str, ...], ...]
    """Per atom: the variables of its root-to-parent path (its tuple in path order)."""
    atom_perms: tuple[tuple[int, ...], ...]
    """Per atom: for each path variable, its position in the atom's projected tuple."""
    row_vars: tuple[str, ...]
    out_positions: tuple[int, ...]
    """For each engine row variable, its position in the root's ``free_order``."""
    bf: tuple[str, ...]
    njb: tuple[tuple[str, tuple[str, ...]], ...]
    """(split variable X, njb(Q_X))."""
    w: int
    delta: int
    plan: Plan
    order_text: str

    def node(self, var: str) -> VarNode:
        return next(n for n in self.nodes if n.var == var)


def rho_star(atom_sets: Iterable[frozenset[int]]) -> int:
    """rho* of a hierarchical restriction: the number of inclusion-minimal distinct atom
    sets among its variables' (they form a laminar family; the minimal ones are disjoint
    and each needs weight 1, and one atom from each covers every variable).

    >>> rho_star([frozenset({0, 1}), frozenset({0}), frozenset({1})])
    2
    >>> rho_star([])
    0
    """
    sets = set(atom_sets)
    return sum(1 for s in sets if not any(o < s for o in sets))


def plan_hierarchical(cq: ConjunctiveQuery) -> HierarchicalPlan:
    """The canonical variable order and widths of a connected hierarchical query; an
    :class:`UnsupportedQueryError` names what is not (cyclic or non-hierarchical body,
    several connected components, an aggregate other than COUNT(*))."""
    at: dict[str, frozenset[int]] = {}
    for a in cq.atoms:
        if not a.vars:
            raise _unsupported(cq, f"FROM item {a.alias} shares no variable with the query")
        for v in a.vars:
            at[v] = at.get(v, frozenset()) | {a.index}
    if not is_hierarchical(cq.hyperedges()):
        raise _unsupported(cq, "a body that is not hierarchical (two variables whose "
                               "atom sets overlap without nesting)")
    free_vars, row_vars = output_shape(cq)
    free = set(free_vars)
    rank = {v: i for i, v in enumerate(cq.var_order)}
    # Ancestors come first: bigger atom sets, then free before bound, then query order.
    order = sorted(at, key=lambda v: (-len(at[v]), v not in free, rank.get(v, 0)))
    position = {v: i for i, v in enumerate(order)}
    parent: dict[str, str | None] = {}
    for v in order:
        ancestors = [u for u in order[: position[v]] if at[u] >= at[v]]
        parent[v] = ancestors[-1] if ancestors else None
    roots = [v for v in order if parent[v] is None]
    if len(roots) != 1:
        raise _unsupported(cq, "a body of several connected components")
    children = {v: tuple(u for u in order if parent[u] == v) for v in order}
    lowest = {a.index: max(a.vars, key=position.__getitem__) for a in cq.atoms}

    def path_of(v: str) -> tuple[str, ...]:
        p = parent[v]
        return (*path_of(p), v) if p is not None else (v,)

    def subtree(v: str) -> list[str]:
        return [v, *(u for c in children[v] for u in subtree(c))]

    def free_order(v: str) -> tuple[str, ...]:
        own = (v,) if v in free else ()
        return own + tuple(u for c in children[v] for u in free_order(c))

    nodes: list[VarNode] = []
    for v in order:
        below = subtree(v)
        has_free = any(u in free for u in below)
        nodes.append(VarNode(
            var=v, depth=len(path_of(v)) - 1, parent=parent[v], children=children[v],
            atoms=tuple(i for i, low in lowest.items() if low == v),
            free=v in free, has_free=has_free, split=v not in free and has_free,
            free_order=free_order(v), path=path_of(v),
            under=tuple(sorted(set().union(*(at[u] for u in below)))),
        ))
    by_var = {n.var: n for n in nodes}
    bf = tuple(n.var for n in nodes if n.split)
    njb = tuple(
        (x, tuple(u for u in subtree(x) if u not in free and len(at[u]) == 1)) for x in bf
    )
    # delta: per split X and atom R under it, rho* of Q_X without njb(Q_X) and vars(R).
    delta = 0
    for x, non_join in njb:
        node = by_var[x]
        q_vars = set(node.path) | set(subtree(x))
        for i in node.under:
            rest = q_vars - set(non_join) - set(cq.atoms[i].vars)
            delta = max(delta, rho_star(at[u] & set(node.under) for u in rest))
    w = 1
    for x in bf:
        node = by_var[x]
        keep = {x, *node.path, *(u for u in subtree(x) if u in free)}
        w = max(w, rho_star(at[u] for u in keep))
    root_order = by_var[roots[0]].free_order
    atom_paths = tuple(path_of(lowest[a.index]) for a in cq.atoms)
    atom_perms = tuple(
        tuple(a.vars.index(v) for v in atom_paths[a.index]) for a in cq.atoms
    )
    order_text = _render(cq, roots[0], children, lowest)
    query_class, classes = classify(cq)
    mode: Mode = "set" if cq.distinct else "bag"
    plan = Plan(
        cq=cq, query_class=query_class, classes=classes, nodes=(), root=0,
        out_vars=tuple(c.var for c in cq.columns if c.var is not None), extra_vars=(),
        mode=mode, height=max(n.depth for n in nodes) + 1, tree_text=order_text,
        rates=tuple(1.0 for _ in cq.atoms),
    )
    return HierarchicalPlan(
        cq=cq, nodes=tuple(nodes), root=roots[0], atom_paths=atom_paths,
        atom_perms=atom_perms, row_vars=tuple(row_vars),
        out_positions=tuple(root_order.index(v) for v in row_vars), bf=bf, njb=njb,
        w=w, delta=delta, plan=plan, order_text=order_text,
    )


def _render(cq: ConjunctiveQuery, root: str, children: dict[str, tuple[str, ...]],
            lowest: dict[int, str]) -> str:
    """The order in the paper's notation: ``B - { A - R(A,B) ; C - S(B,C) }``."""
    def show(v: str) -> str:
        kids = [show(c) for c in children[v]]
        kids += [f"{cq.atoms[i].alias}({', '.join(cq.atoms[i].vars)})"
                 for i, low in sorted(lowest.items()) if low == v]
        inner = kids[0] if len(kids) == 1 else "{ " + " ; ".join(kids) + " }"
        return f"{v} - {inner}"
    return show(root)


def _unsupported(cq: ConjunctiveQuery, what: str) -> UnsupportedQueryError:
    return UnsupportedQueryError(
        f"{cq.source}: the hierarchical view-tree engine does not support "
        f"{what}; drop --eps to maintain it with CROWN (acyclic) or the GHD engine (cyclic)"
    )


def predicted_exponents(hp: HierarchicalPlan, eps: float) -> dict[str, float]:
    """Theorem 3's exponents of N for ``eps``: preprocessing, amortized update, delay,
    and the space of the light views (the same as preprocessing).

    >>> from plans.sql import parse_query
    >>> cq = parse_query("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT);"
    ...                  "SELECT R.a FROM R, S WHERE R.b = S.b")
    >>> predicted_exponents(plan_hierarchical(cq), 0.5)
    {'preprocessing': 1.0, 'update': 0.5, 'delay': 0.5, 'space': 1.0}
    """
    pre = 1 + (hp.w - 1) * eps
    return {"preprocessing": pre, "update": hp.delta * eps, "delay": 1 - eps, "space": pre}


def _fmt(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".") or "0"


def _power(x: float) -> str:
    return "1" if x == 0 else ("N" if x == 1 else f"N^{_fmt(x)}")


def describe(hp: HierarchicalPlan) -> list[str]:
    """The decomposition lines of ``explain``."""
    lines = [f"variable order (canonical): {hp.order_text}"]
    bf = ", ".join(hp.bf) or "none (q-hierarchical: nothing to split)"
    lines.append(f"bound above free (bf): {bf}")
    for x, non_join in hp.njb:
        node = hp.node(x)
        light_vars = ", ".join(node.path[:-1] + node.free_order)
        lines.append(
            f"  split {x}: key ({', '.join(node.path)}); njb(Q_{x}) = "
            f"{{{', '.join(non_join)}}}; light view L_{x}({light_vars})"
            f" over light keys; heavy keys grounded at enumeration"
        )
    lines.append(f"widths: w = {hp.w}, delta = {hp.delta}")
    return lines


def explain_hierarchical(hp: HierarchicalPlan, dataflow: Dataflow, eps: float,
                         parts: str = "") -> str:
    """The ``ivmflow explain`` text of a hierarchical plan for ``eps``."""
    cq = hp.cq
    e = predicted_exponents(hp, eps)
    execution = "execution: parallelism 1 (local engine)"
    if parts:
        execution = (f"execution: {parts}; one view-tree engine per partition (the root "
                     f"variable {hp.root} occurs in every atom)")
    out = [
        f"query: {', '.join(cq.output_names)} from {', '.join(x.alias for x in cq.atoms)}",
        f"class: {hp.plan.query_class} ({', '.join(hp.plan.classes)})",
        *describe(hp),
        f"predicted cost (N = database size, eps = {_fmt(eps)}): preprocessing "
        f"{_power(e['preprocessing'])}, update {_power(e['update'])} amortized, "
        f"delay {_power(e['delay'])}, space {_power(e['space'])}",
        execution,
        dataflow.render(),
    ]
    return "\n".join(out)


def compile_hierarchical_dataflow(hp: HierarchicalPlan) -> Dataflow:
    """The operator DAG of a hierarchical plan (for explain and the runners)."""
    cq = hp.cq
    ops, edges = dataflow_prelude(cq, "counts", lambda atom: ("key", hp.atom_paths[atom.index]))
    ops.append(Op("counts", "count-views", (
        ("views", tuple(f"C_{n.var}" for n in hp.nodes)),
        ("update", "O(1) per variable on the path"),
    )))
    splits = tuple(f"{x} on ({', '.join(hp.node(x).path)})" for x in hp.bf)
    ops.append(Op("router", "heavylight", (
        ("partition", splits or ("none",)), ("rebalance", "minor per key, major on N"),
    )))
    edges.append(Edge("counts", "router", "degrees"))
    ops.append(Op("light", "light-views", (
        ("views", tuple(f"L_{x}" for x in hp.bf) or ("none",)),
    )))
    edges.append(Edge("router", "light", "light keys, migrations"))
    ops.append(Op("enumerate", "enumerate", (
        ("delay", "N^(1-eps) (union over heavy keys)" if hp.bf else "constant"),
        ("modes", ("delta", "full")),
    )))
    edges.append(Edge("light", "enumerate", "light views"))
    edges.append(Edge("counts", "enumerate", "count views"))
    dataflow_epilogue(hp.plan, ops, edges)
    return Dataflow("hierarchical_" + "_".join(x.alias for x in cq.atoms), tuple(ops),
                    tuple(edges))

