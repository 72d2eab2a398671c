"""Plan: the classified query, the chosen join tree, normalised into a *top part* (nodes
whose variables are all output variables; they drive enumeration) and *lower subtrees*
(hanging under the top part by a key of output variables; they only feed annotations:
supports, counts or aggregate payloads).

Example:
    >>> from plans.sql import parse_query
    >>> cq = parse_query("CREATE TABLE G(src INT, dst INT);"
    ...     "SELECT DISTINCT G2.src AS B, G3.src AS C, G3.dst AS D FROM G G1, G G2, G G3, G G4"
    ...     " WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G4.src")
    >>> p = build_plan(cq)
    >>> p.query_class, p.tree_text
    ('free-connex', '[C](G2(G1), G3(G4))')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from core.errors import UnsupportedQueryError
from plans.cq import ConjunctiveQuery
from plans.jointree import (
    TreeNode,
    free_connex_tree,
    is_acyclic,
    is_free_connex,
    is_hierarchical,
    is_q_hierarchical,
    render_tree,
)

Mode = Literal["set", "bag", "ring"]
"""How annotations flow: ``set`` propagates supports only (DISTINCT, CROWN's set
semantics), ``bag`` integer multiplicities, ``ring`` aggregate payloads."""


@dataclass(frozen=True)
class NodeSpec:
    """One node of the normalised join tree."""

    id: int
    name: str
    attrs: tuple[str, ...]
    atom: int | None
    parent: int | None
    children: tuple[int, ...]
    key: tuple[str, ...]
    top: bool

    @property
    def generalized(self) -> bool:
        return self.atom is None


@dataclass(frozen=True)
class Plan:
    """Everything the operator DAG is compiled from."""

    cq: ConjunctiveQuery
    query_class: str
    classes: tuple[str, ...]
    nodes: tuple[NodeSpec, ...]
    root: int
    out_vars: tuple[str, ...]
    extra_vars: tuple[str, ...]
    mode: Mode
    height: int
    tree_text: str
    rates: tuple[float, ...]

    def node(self, i: int) -> NodeSpec:
        return self.nodes[i]

    @property
    def top_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.top]


def classify(cq: ConjunctiveQuery) -> tuple[str, tuple[str, ...]]:
    """The most specific class and every class the query belongs to."""
    edges = cq.hyperedges()
    free = frozenset(cq.free_vars)
    classes: list[str] = []
    if not is_acyclic(edges):
        return "cyclic", ("cyclic",)
    classes.append("acyclic")
    if is_free_connex(edges, free):
        classes.append("free-connex")
    if is_hierarchical(edges):
        classes.append("hierarchical")
        if is_q_hierarchical(edges, free):
            classes.append("q-hierarchical")
    return classes[-1], tuple(classes)


def build_plan(cq: ConjunctiveQuery, rates: Sequence[float] | None = None) -> Plan:
    """Classify, choose the join tree (extending the output if the query is not
    free-connex) and normalise it. Cyclic queries are rejected."""
    query_class, classes = classify(cq)
    if query_class == "cyclic":
        msg = (
            "the query is cyclic (its join hypergraph has a cycle); ivmflow maintains "
            "acyclic queries with CROWN's join-free plans and triangle queries (COUNT(*) "
            "or the listing of all three variables) with heavy/light IVM-epsilon "
            "(compile_query); other cyclic queries are not supported yet"
        )
        raise UnsupportedQueryError(msg)
    edges = cq.hyperedges()
    n = len(edges)
    rate = tuple(float(r) for r in rates) if rates is not None else (1.0,) * n
    if len(rate) != n:
        msg = f"rates: expected {n} values (one per FROM item), got {len(rate)}"
        raise ValueError(msg)
    free = frozenset(cq.free_vars)
    bound = [v for v in cq.var_order if v not in free]
    found = free_connex_tree(edges, free, bound, rate, [a.alias for a in cq.atoms])
    tree, extra = found if found is not None else (None, ())
    if tree is None:  # pragma: no cover - acyclic queries always have a tree with all vars
        msg = "internal: no join tree found for an acyclic query"
        raise AssertionError(msg)
    out_vars = tuple(v for v in cq.var_order if v in free or v in extra) + tuple(
        v for v in cq.free_vars if v not in cq.var_order
    )
    y = frozenset(out_vars)
    nodes = _normalise(cq, tree, y)
    if cq.is_aggregate:
        only_count = all(a.func == "count_star" for a in cq.aggregates)
        mode: Mode = "bag" if only_count else "ring"
    elif cq.distinct:
        mode = "set"
    else:
        mode = "bag"
    names = [a.alias for a in cq.atoms]
    return Plan(
        cq=cq,
        query_class=query_class,
        classes=classes,
        nodes=tuple(nodes),
        root=0,
        out_vars=out_vars,
        extra_vars=extra,
        mode=mode,
        height=tree.height,
        tree_text=render_tree(tree, names),
        rates=rate,
    )


def _normalise(cq: ConjunctiveQuery, tree: TreeNode, y: frozenset[str]) -> list[NodeSpec]:
    """Number the nodes in preorder and insert a generalized node ``e & y`` above every
    node that is the first on its path with a bound variable (unless its key already is
    ``e & y``), so that the top part holds output variables only."""
    order = {v: i for i, v in enumerate(cq.var_order)}

    def ordered(attrs: frozenset[str]) -> tuple[str, ...]:
        return tuple(sorted(attrs, key=lambda v: order.get(v, len(order))))

    specs: list[_Draft] = []

    def add(attrs: frozenset[str], atom: int | None, parent: int | None, top: bool) -> int:
        idx = len(specs)
        parent_attrs = frozenset(specs[parent].attrs) if parent is not None else frozenset()
        specs.append(_Draft(ordered(attrs), atom, parent, [], ordered(attrs & parent_attrs), top))
        if parent is not None:
            specs[parent].children.append(idx)
        return idx

    def subtree_vars(node: TreeNode) -> frozenset[str]:
        out = node.attrs
        for c in node.children:
            out |= subtree_vars(c)
        return out

    def absorbed(node: TreeNode, parent: int | None) -> bool:
        """The subtree adds no output variable its parent lacks: it only scales the
        parent's rows by a payload (or supports them), so it hangs below the top part
        as a lower subtree; enumeration multiplies by one projection lookup instead
        of walking into the node's tuples."""
        if parent is None:
            return False
        return subtree_vars(node) & y <= frozenset(specs[parent].attrs) & node.attrs

    def walk(node: TreeNode, parent: int | None, in_top: bool) -> None:
        if in_top and node.attrs <= y and not absorbed(node, parent):
            me = add(node.attrs, node.atom, parent, True)
            for c in node.children:
                walk(c, me, True)
            return
        if in_top:
            parent_attrs = frozenset(specs[parent].attrs) if parent is not None else frozenset()
            ky = node.attrs & y
            if parent is None or ky != (node.attrs & parent_attrs):
                parent = add(ky, None, parent, True)
        me = add(node.attrs, node.atom, parent, False)
        for c in node.children:
            walk(c, me, False)

    walk(tree, None, True)
    out: list[NodeSpec] = []
    for i, d in enumerate(specs):
        name = cq.atoms[d.atom].alias if d.atom is not None else "[" + ",".join(d.attrs) + "]"
        out.append(
            NodeSpec(i, name, d.attrs, d.atom, d.parent, tuple(d.children), d.key, d.top)
        )
    return out


@dataclass
class _Draft:
    attrs: tuple[str, ...]
    atom: int | None
    parent: int | None
    children: list[int]
    key: tuple[str, ...]
    top: bool
