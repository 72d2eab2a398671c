"""Recognise triangle queries and plan them for IVM-epsilon (notes ivm-eps-triangles.md).

A triangle query has three binary atoms over three variables forming a 3-cycle (any
aliases, self-joins over one edge table, per-atom filters). The atoms are oriented as
R(A,B), S(B,C), T(C,A): R is the first FROM item, A and B its variables in the
query's variable order. Supported outputs: ``COUNT(*)`` without GROUP BY (the nullary
query) and the full listing, i.e. a SELECT list made of the three variables (the
ternary query, with or without DISTINCT). Other cyclic queries stay rejected by
:func:`plans.plan.build_plan`.

Example:
    >>> from plans.sql import parse_query
    >>> cq = parse_query("CREATE TABLE G(src INT, dst INT); SELECT COUNT(*) FROM G a, G b, G c"
    ...                  " WHERE a.dst = b.src AND b.dst = c.src AND c.dst = a.src")
    >>> tp = recognise_triangle(cq)
    >>> tp.kind, tp.roles, tp.variables
    ('count', (0, 1, 2), ('c.dst', 'a.dst', 'b.dst'))
    >>> print(predicted_costs(tp, 0.5)[0])
      update: O(N^0.5) amortized (O(N^max(eps,1-eps)); worst case O(N^1.5) at a major rebalance)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dataflow.errors import UnsupportedQueryError
from dataflow.graph import Dataflow, Edge, Op
from plans.cq import ConjunctiveQuery
from plans.plan import Mode, Plan

TriangleKind = Literal["count", "listing"]
ROLE_NAMES = ("R", "S", "T")


@dataclass(frozen=True)
class TrianglePlan:
    """A triangle query planned for IVM-epsilon.

    ``roles[k]`` is the role (0 = R, 1 = S, 2 = T) of FROM item ``k``; ``swapped[k]``
    tells that the item's projected tuple (in variable order) is (second, first) of its
    role; ``variables`` are A, B, C; ``out_positions`` index (a, b, c) per output column
    of a listing. ``plan`` is the generic plan record (class, mode, output variables)
    the finalizer and the API read."""

    cq: ConjunctiveQuery
    kind: TriangleKind
    roles: tuple[int, ...]
    swapped: tuple[bool, ...]
    variables: tuple[str, str, str]
    out_positions: tuple[int, ...]
    plan: Plan


def _is_triangle_shape(cq: ConjunctiveQuery) -> bool:
    if len(cq.atoms) != 3 or any(len(a.vars) != 2 for a in cq.atoms):
        return False
    edges = {frozenset(a.vars) for a in cq.atoms}
    variables = {v for a in cq.atoms for v in a.vars}
    return len(edges) == 3 and len(variables) == 3


def recognise_triangle(cq: ConjunctiveQuery) -> TrianglePlan | None:
    """The triangle plan of ``cq``, None if it is not a triangle query; a triangle with
    an output IVM-epsilon does not maintain yet raises :class:`UnsupportedQueryError`."""
    if not _is_triangle_shape(cq):
        return None
    atoms = cq.atoms
    a, b = atoms[0].vars
    s_atom = next(x for x in atoms[1:] if b in x.vars)
    c = next(v for v in s_atom.vars if v != b)
    oriented = {atoms[0].index: (a, b), s_atom.index: (b, c)}
    t_atom = next(x for x in atoms if x.index not in oriented)
    oriented[t_atom.index] = (c, a)
    role_of = {atoms[0].index: 0, s_atom.index: 1, t_atom.index: 2}
    roles = tuple(role_of[x.index] for x in atoms)
    swapped = tuple(x.vars != oriented[x.index] for x in atoms)
    variables = (a, b, c)
    out_vars = tuple(col.var for col in cq.columns if col.var is not None)
    kind: TriangleKind
    mode: Mode
    positions: tuple[int, ...]
    if (
        cq.is_aggregate
        and cq.group_by is None
        and len(cq.columns) == 1
        and [g.func for g in cq.aggregates] == ["count_star"]
    ):
        kind, mode, positions = "count", "bag", ()
    elif not cq.is_aggregate and cq.group_by is None and set(out_vars) == set(variables):
        kind = "listing"
        mode = "set" if cq.distinct else "bag"
        positions = tuple(variables.index(v) for v in out_vars)
    else:
        msg = (
            f"triangle query with output ({', '.join(cq.output_names)}): ivmflow maintains "
            "triangle queries with heavy/light IVM-epsilon for COUNT(*) without GROUP BY "
            "and for the listing of all three variables; projections, GROUP BY and other "
            "aggregates over a triangle are not supported yet"
        )
        raise UnsupportedQueryError(msg)
    names = [x.alias for x in atoms]
    tree_text = "triangle " + ", ".join(
        f"{ROLE_NAMES[roles[k]]}={names[k]}" for k in range(3)
    )
    plan = Plan(
        cq=cq,
        query_class="cyclic",
        classes=("cyclic", "triangle"),
        nodes=(),
        root=0,
        out_vars=out_vars if kind == "listing" else (),
        extra_vars=(),
        mode=mode,
        height=0,
        tree_text=tree_text,
        rates=(1.0, 1.0, 1.0),
    )
    return TrianglePlan(cq, kind, roles, swapped, variables, positions, plan)


def _fmt(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def predicted_costs(tp: TrianglePlan, eps: float) -> list[str]:
    """Update time, space and delay as exponents of N for ``eps`` (notes section 0)."""
    hi = max(eps, 1.0 - eps)
    lo = 1.0 - hi
    lines = [
        f"  update: O(N^{_fmt(hi)}) amortized (O(N^max(eps,1-eps)); worst case O(N^1.5) "
        "at a major rebalance)",
    ]
    if tp.kind == "count":
        lines.append(f"  space:  O(N^{_fmt(1 + lo)}) (O(N^(1+min(eps,1-eps))), single partition)")
        lines.append("  delay:  O(N^0) (the count is materialized)")
    else:
        lines.append("  space:  O(N^1.5) (listing views; view trees O(N^(1+min(eps,1-eps))))")
        lines.append("  delay:  O(N^0) for full enumeration (five disjoint views); deltas in "
                     "O(update + delta size)")
    return lines


def describe(tp: TrianglePlan, eps: float) -> list[str]:
    """The explain lines specific to a triangle plan."""
    cq = tp.cq
    names = [x.alias for x in cq.atoms]
    a, b, c = tp.variables
    role_atom = {tp.roles[k]: k for k in range(3)}
    attrs = (("A", "B"), ("B", "C"), ("C", "A"))
    var_of = {"A": a, "B": b, "C": c}
    lines = [
        f"triangle: A={a}, B={b}, C={c}; "
        + ", ".join(
            f"{ROLE_NAMES[r]}({','.join(attrs[r])}) = {names[role_atom[r]]}" for r in range(3)
        ),
        "query: " + ("count (nullary triangle query)" if tp.kind == "count"
                     else "full listing (ternary triangle query)"),
        f"heavy/light partitioning (single, eps = {_fmt(eps)}, theta = N^eps, "
        "loose bounds theta/2 and 3theta/2, floor(N/4) <= |D| < N):",
    ]
    for r in range(3):
        first = attrs[r][0]
        lines.append(
            f"  {ROLE_NAMES[r]} = {names[role_atom[r]]} on {first} ({var_of[first]})"
        )
    if tp.kind == "count":
        lines += [
            "views: V_RS(A,C) = sum_B R^H*S^L, V_ST(B,A) = sum_C S^H*T^L, "
            "V_TR(C,B) = sum_A T^H*R^L, count",
        ]
    else:
        lines += [
            "views: HHH(A,B,C), LLL(A,B,C); view trees R^H*S^L (V_RS, sum, root *T), "
            "S^H*T^L (V_ST, sum, root *R), T^H*R^L (V_TR, sum, root *S)",
        ]
    if len(set(x.relation.name for x in cq.atoms)) < 3:
        lines.append("self-join: one copy per occurrence, updated in FROM order")
    return lines


def compile_triangle_dataflow(tp: TrianglePlan) -> Dataflow:
    """The operator DAG of a triangle plan (for explain and the runners)."""
    cq = tp.cq
    ops: list[Op] = []
    edges: list[Edge] = []
    relations = tuple(sorted({x.relation.name for x in cq.atoms}))
    ops.append(Op("source", "source", (("relations", relations),)))
    ops.append(Op("validate", "validate", (("state", "base multiplicities"),)))
    edges.append(Edge("source", "validate", "updates"))
    parts = tuple(
        f"{ROLE_NAMES[tp.roles[k]]}:{cq.atoms[k].alias}" for k in range(3)
    )
    ops.append(Op("router", "heavylight", (("partition", ("R on A", "S on B", "T on C")),
                                          ("relations", parts))))
    for atom in cq.atoms:
        filters = tuple(f.render(atom.alias) for f in atom.filters)
        ops.append(Op(f"input_{atom.alias}", "input", (
            ("atom", atom.index), ("relation", atom.relation.name),
            ("role", ROLE_NAMES[tp.roles[atom.index]]), ("filters", filters),
        )))
        edges.append(Edge("validate", f"input_{atom.alias}", atom.relation.name))
        edges.append(Edge(f"input_{atom.alias}", "router", atom.alias))
    views = (
        ("V_RS", "V_ST", "V_TR", "count") if tp.kind == "count"
        else ("HHH", "LLL", "tree_RS", "tree_ST", "tree_TR")
    )
    ops.append(Op("ivmeps", "ivm-eps", (("query", tp.kind), ("views", views))))
    edges.append(Edge("router", "ivmeps", "part deltas, rebalancing"))
    ops.append(Op("enumerate", "enumerate", (("delay", "constant"), ("modes", ("delta", "full")))))
    edges.append(Edge("ivmeps", "enumerate", "views"))
    mode = "aggregate" if tp.kind == "count" else ("distinct" if cq.distinct else "bag")
    ops.append(Op("finalize", "finalize", (("mode", mode), ("columns", cq.output_names))))
    edges.append(Edge("enumerate", "finalize", "row deltas"))
    ops.append(Op("sink", "sink", ()))
    edges.append(Edge("finalize", "sink", "epoch deltas"))
    name = "triangle_" + "_".join(x.alias for x in cq.atoms)
    return Dataflow(name, tuple(ops), tuple(edges))


def explain_triangle(tp: TrianglePlan, dataflow: Dataflow, eps: float) -> str:
    cq = tp.cq
    out = [
        f"query: {', '.join(cq.output_names)} from {', '.join(x.alias for x in cq.atoms)}",
        f"class: {tp.plan.query_class} ({', '.join(tp.plan.classes)})",
        *describe(tp, eps),
        f"predicted cost (N = database size, eps = {_fmt(eps)}):",
        *predicted_costs(tp, eps),
        "execution: parallelism 1 (local engine)",
        dataflow.render(),
    ]
    return "\n".join(out)
