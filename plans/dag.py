"""Describe a :class:`plans.plan.Plan` as the operator :class:`core.graph.Dataflow`
(what ``ivmflow explain`` prints for a CROWN block; the triangle, GHD and
hierarchical kinds describe theirs with the shared prelude and epilogue here).

One input operator per FROM item (filters, self-join fan-out), the partitioner, then per
join-tree node a semi-join (with counters; an intersection at generalized nodes) and a
projection, live views on the top part, delta/full enumeration and the output finalizer.

Example:
    >>> from plans.sql import parse_query
    >>> from plans.plan import build_plan
    >>> cq = parse_query("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT);"
    ...                  "SELECT R.a, S.c FROM R, S WHERE R.b = S.b")
    >>> print(compile_dataflow(build_plan(cq)).render().splitlines()[0])
    dataflow R_S
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.graph import Dataflow, Edge, Op
from plans.cq import Atom, ConjunctiveQuery
from plans.plan import NodeSpec, Plan


def _node_id(n: NodeSpec) -> str:
    if n.atom is not None:
        return n.name
    return "gen" + str(n.id)


def finalize_mode(plan: Plan) -> str:
    if plan.cq.is_aggregate:
        return "aggregate"
    if plan.cq.distinct:
        return "distinct"
    return "bag"


def dataflow_prelude(
    cq: ConjunctiveQuery,
    into: Op | str,
    column: Callable[[Atom], tuple[str, Any]],
) -> tuple[list[Op], list[Edge]]:
    """The start every operator DAG shares: ``source -> validate`` (base multiplicities)
    -> one ``input_<alias>`` per FROM item (its atom, relation, ``column(atom)`` and
    filters) -> the operator ``into``. Given as an :class:`Op`, ``into`` is placed
    before the inputs (it renders first among equals); given as an id, the caller adds
    that operator after them."""
    relations = tuple(sorted({a.relation.name for a in cq.atoms}))
    ops = [
        Op("source", "source", (("relations", relations),)),
        Op("validate", "validate", (("state", "base multiplicities"),)),
    ]
    edges = [Edge("source", "validate", "updates")]
    if isinstance(into, Op):
        ops.append(into)
        into = into.id
    for atom in cq.atoms:
        filters = atom.render_conditions()
        ops.append(Op(f"input_{atom.alias}", "input", (
            ("atom", atom.index), ("relation", atom.relation.name), column(atom),
            ("filters", filters),
        )))
        edges.append(Edge("validate", f"input_{atom.alias}", atom.relation.name))
        edges.append(Edge(f"input_{atom.alias}", into, atom.alias))
    return ops, edges


def partition_prelude(cq: ConjunctiveQuery) -> tuple[list[Op], list[Edge]]:
    """:func:`dataflow_prelude` into the HyperCube ``partition`` operator over the
    join variables, each input showing its atom's variables (CROWN and GHD DAGs)."""
    hub = Op("partition", "partition", (("join_vars", tuple(sorted(cq.join_vars))),))
    return dataflow_prelude(cq, hub, lambda atom: ("vars", atom.vars))


def dataflow_epilogue(plan: Plan, ops: list[Op], edges: list[Edge]) -> None:
    """The end every operator DAG shares, appended to ``ops`` and ``edges``:
    ``enumerate -> finalize`` (the output mode and columns) ``-> sink``."""
    mode = finalize_mode(plan)
    cq = plan.cq
    into = "enumerate"
    if cq.reagg is not None:
        # A view over the join block's groups: expressions over several FROM items.
        r = cq.reagg
        aggs = tuple(
            f"{fa.func}({fa.var})" + (" from ring payloads" if fa.func != "count_star" else "")
            if fa.var is not None or fa.func == "count_star"
            else f"{fa.func}(<carried expression>) at the finalizer" for fa in r.aggregates)
        ops.append(Op("reaggregate", "reaggregate", (
            ("final_keys", tuple((cq.group_by or ())[:r.n_keys])), ("carried", r.carried),
            ("condition", "yes" if r.condition else "none"), ("aggregates", aggs))))
        edges.append(Edge(into, "reaggregate", "group payload deltas"))
        into = "reaggregate"
    if cq.post is not None:
        ops.append(Op("post", "map", (
            ("having", "yes" if cq.post.having else "none"),
            ("computed", tuple(c.expr for c in cq.columns if c.expr is not None)))))
        edges.append(Edge(into, "post", "group deltas"))
        into = "post"
    ops.append(Op("finalize", "finalize", (("mode", mode), ("columns", cq.output_names))))
    edges.append(Edge(into, "finalize", "row deltas"))
    ops.append(Op("sink", "sink", ()))
    edges.append(Edge("finalize", "sink", "epoch deltas"))


def compile_dataflow(plan: Plan) -> Dataflow:
    cq = plan.cq
    ops, edges = partition_prelude(cq)
    payload = {"set": "support counts", "bag": "multiplicities", "ring": "aggregate payloads"}
    for n in plan.nodes:
        nid = _node_id(n)
        kind = "intersect" if n.generalized else "semijoin"
        ops.append(
            Op(
                f"sj_{nid}",
                kind,
                (
                    ("node", n.id),
                    ("attrs", n.attrs),
                    ("atom", -1 if n.atom is None else n.atom),
                    ("part", "top" if n.top else "lower"),
                    ("children", tuple(_node_id(plan.nodes[c]) for c in n.children)),
                ),
            )
        )
        if n.parent is not None:
            proj = "groups by key" if n.top else payload[plan.mode]
            ops.append(Op(f"proj_{nid}", "project", (("key", n.key), ("keeps", proj))))
            edges.append(Edge(f"sj_{nid}", f"proj_{nid}", "delta V_s"))
            edges.append(
                Edge(f"proj_{nid}", f"sj_{_node_id(plan.nodes[n.parent])}", "delta V_p")
            )
        if n.atom is not None:
            edges.append(Edge("partition", f"sj_{nid}", cq.atoms[n.atom].alias))
        if n.top and n.children:
            ops.append(Op(f"live_{nid}", "liveview", (("node", n.id),)))
            edges.append(Edge(f"sj_{nid}", f"live_{nid}", "liveness"))
    for n in plan.nodes:
        if n.top and n.children:
            for c in n.children:
                child = plan.nodes[c]
                if child.top and child.children:
                    edges.append(Edge(f"live_{_node_id(n)}", f"live_{_node_id(child)}", "V_l"))
    ops.append(
        Op(
            "enumerate",
            "enumerate",
            (("vars", plan.out_vars), ("delay", "constant"), ("modes", ("delta", "full"))),
        )
    )
    for n in plan.nodes:
        if n.top:
            edges.append(Edge(f"sj_{_node_id(n)}", "enumerate", "witness"))
    dataflow_epilogue(plan, ops, edges)
    name = "_".join(a.alias for a in cq.atoms)
    return Dataflow(name, tuple(ops), tuple(edges))
