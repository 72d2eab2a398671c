"""Recognise triangle queries and plan them for IVM-epsilon (docs/algorithms.md).

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

from core.errors import UnsupportedQueryError
from core.graph import Dataflow, Edge, Op
from plans.cq import ConjunctiveQuery
from plans.dag import dataflow_epilogue, dataflow_prelude
from plans.plan import Mode, Plan

TriangleKind = Literal["count", "listing", "binary", "unary"]
Partitioning = Literal["single", "double"]
ROLE_NAMES = ("R", "S", "T")


@dataclass(frozen=True)
class TrianglePlan:
    """A triangle query planned for IVM-epsilon.

    ``roles[k]`` is the role (0 = R, 1 = S, 2 = T) of FROM item ``k``; ``swapped[k]``
    tells that the item's projected tuple (in variable order) is (second, first) of its
    role; ``variables`` are A, B, C; ``out_positions`` index (a, b, c) per column of the
    rows the engine emits (the SELECT list, or the GROUP BY key under COUNT(*));
    ``plan`` is the generic plan record (class, mode, output variables) the finalizer
    and the API read; ``partitioning`` is ``double`` for the double-partitioned count."""

    cq: ConjunctiveQuery
    kind: TriangleKind
    roles: tuple[int, ...]
    swapped: tuple[bool, ...]
    variables: tuple[str, str, str]
    out_positions: tuple[int, ...]
    plan: Plan
    partitioning: Partitioning = "single"


def _is_triangle_shape(cq: ConjunctiveQuery) -> bool:
    if len(cq.atoms) != 3 or any(len(a.vars) != 2 for a in cq.atoms):
        return False
    edges = {frozenset(a.vars) for a in cq.atoms}
    variables = {v for a in cq.atoms for v in a.vars}
    return len(edges) == 3 and len(variables) == 3


def _orient(
    cq: ConjunctiveQuery, r_index: int, a: str, b: str
) -> tuple[tuple[int, ...], tuple[bool, ...], tuple[str, str, str]]:
    """Roles and swaps with FROM item ``r_index`` as R(A,B), A = ``a`` and B = ``b``."""
    atoms = cq.atoms
    r_atom = atoms[r_index]
    s_atom = next(x for x in atoms if x.index != r_index and b in x.vars)
    c = next(v for v in s_atom.vars if v != b)
    oriented = {r_atom.index: (a, b), s_atom.index: (b, c)}
    t_atom = next(x for x in atoms if x.index not in oriented)
    oriented[t_atom.index] = (c, a)
    role_of = {r_atom.index: 0, s_atom.index: 1, t_atom.index: 2}
    roles = tuple(role_of[x.index] for x in atoms)
    swapped = tuple(x.vars != oriented[x.index] for x in atoms)
    return roles, swapped, (a, b, c)


def _unsupported(cq: ConjunctiveQuery, construct: str) -> UnsupportedQueryError:
    msg = (
        f"triangle query with output ({', '.join(cq.output_names)}): {construct} is not "
        "supported over a triangle; ivmflow maintains (heavy/light IVM-epsilon) COUNT(*), "
        "and SELECT [DISTINCT] of one, two or all three triangle variables, also with "
        "COUNT(*) and GROUP BY exactly those variables"
    )
    return UnsupportedQueryError(msg)


def output_shape(cq: ConjunctiveQuery) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(free variables in first-use order, the engine's row variables) of a supported
    output, or an error naming the construct."""
    out_vars = tuple(col.var for col in cq.columns if col.var is not None)
    if cq.is_aggregate:
        funcs = [g.func for g in cq.aggregates]
        if funcs != ["count_star"]:
            bad = next((f for f in funcs if f != "count_star"), "count_star")
            name = {"count": "COUNT(column)", "sum": "SUM", "avg": "AVG"}.get(bad, bad)
            raise _unsupported(cq, name if bad != "count_star" else "more than one COUNT(*)")
        group = cq.group_by or ()
        if set(group) != set(out_vars):
            raise _unsupported(cq, "GROUP BY a variable that is not in the SELECT list")
        return tuple(dict.fromkeys(group)), tuple(group)
    if cq.group_by is not None:
        raise _unsupported(cq, "GROUP BY without COUNT(*)")
    return tuple(dict.fromkeys(out_vars)), out_vars


def recognise_triangle(
    cq: ConjunctiveQuery, partitioning: Partitioning = "single"
) -> TrianglePlan | None:
    """The triangle plan of ``cq``, None if it is not a triangle query; a triangle with
    an output IVM-epsilon does not maintain raises :class:`UnsupportedQueryError`.

    The count and the listing take R = the first FROM item (A, B its variables in
    order); two free variables take R = the item over both (A, B in output order);
    one free variable A takes R = the first item over A. ``partitioning`` = ``double``
    chooses the double-partitioned count (docs/algorithms.md)."""
    if not _is_triangle_shape(cq):
        return None
    atoms = cq.atoms
    free, row_vars = output_shape(cq)
    kind: TriangleKind
    if not free:
        kind = "count"
        a, b = atoms[0].vars
        r_index = 0
    elif len(free) == 3:
        kind = "listing"
        a, b = atoms[0].vars
        r_index = 0
    elif len(free) == 2:
        kind = "binary"
        r_index = next(x.index for x in atoms if set(x.vars) == set(free))
        a, b = free
    else:
        kind = "unary"
        r_index = next(x.index for x in atoms if free[0] in x.vars)
        a = free[0]
        b = next(v for v in atoms[r_index].vars if v != a)
    if partitioning not in ("single", "double"):
        msg = f"triangle partitioning must be single or double, got {partitioning!r}"
        raise ValueError(msg)
    if partitioning == "double" and kind != "count":
        msg = (f"triangle query with output ({', '.join(cq.output_names)}): double "
               f"heavy/light partitioning (--partitioning double) is for the triangle "
               f"COUNT(*) only, not the {kind} query; use single")
        raise UnsupportedQueryError(msg)
    roles, swapped, variables = _orient(cq, r_index, a, b)
    positions = tuple(variables.index(v) for v in row_vars)
    mode: Mode = "set" if cq.distinct else "bag"
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
        out_vars=tuple(col.var for col in cq.columns if col.var is not None),
        extra_vars=(),
        mode=mode,
        height=0,
        tree_text=tree_text,
        rates=(1.0, 1.0, 1.0),
    )
    return TrianglePlan(cq, kind, roles, swapped, variables, positions, plan, partitioning)


def _fmt(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def predicted_costs(tp: TrianglePlan, eps: float) -> list[str]:
    """Update time, space and delay as exponents of N for ``eps`` (docs/algorithms.md,
    costs)."""
    hi = max(eps, 1.0 - eps)
    lo = 1.0 - hi
    lines = [
        f"  update: O(N^{_fmt(hi)}) amortized (O(N^max(eps,1-eps)); worst case O(N^1.5) "
        "at a major rebalance)",
    ]
    if tp.kind == "count" and tp.partitioning == "double":
        space = max(1.0, min(1.0 + eps, 2.0 - 2.0 * eps))
        lines.append(f"  space:  O(N^{_fmt(space)}) (O(N^max(1, min(1+eps, 2-2eps))), "
                     "double partition)")
        lines.append("  delay:  O(N^0) (the count is materialized)")
    elif tp.kind == "count":
        lines.append(f"  space:  O(N^{_fmt(1 + lo)}) (O(N^(1+min(eps,1-eps))), single partition)")
        lines.append("  delay:  O(N^0) (the count is materialized)")
    elif tp.kind == "binary":
        lines.append(f"  space:  O(N^{_fmt(1 + lo)}) (O(N^(1+min(eps,1-eps))))")
        lines.append(f"  delay:  O(N^{_fmt(lo)}) (O(N^min(eps,1-eps)): union of five views "
                     "and two hop iterators); deltas in O(update + delta size)")
    elif tp.kind == "unary":
        lines.append(f"  space:  O(N^{_fmt(1 + lo)}) (O(N^(1+min(eps,1-eps))))")
        lines.append(f"  delay:  O(N^{_fmt(2 * lo)}) (O(N^(2 min(eps,1-eps))): union of six "
                     "views and a hop iterator); deltas in O(update + delta size)")
    else:
        lines.append("  space:  O(N^1.5) (listing views; view trees O(N^(1+min(eps,1-eps))))")
        lines.append("  delay:  O(N^0) for full enumeration (five disjoint views); deltas in "
                     "O(update + delta size)")
    return lines


_QUERY_TEXT = {
    "count": "count (nullary triangle query)",
    "listing": "full listing (ternary triangle query)",
    "binary": "binary triangle query Delta2(A,B) = sum_C R*S*T",
    "unary": "unary triangle query Delta1(A) = sum_B,C R*S*T",
}

# Partition columns per relation (R, S, T) and query (docs/algorithms.md).
_PARTITIONS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("count", "single"): ("A", "B", "C"),
    ("count", "double"): ("A,B", "B,C", "C,A"),
    ("listing", "single"): ("A", "B", "C"),
    ("binary", "single"): ("A", "B,C", "C,A"),
    ("unary", "single"): ("A,B", "B", "C,A"),
}

_VIEWS: dict[tuple[str, str], list[str]] = {
    ("count", "single"): [
        "views: V_RS(A,C) = sum_B R^H*S^L, V_ST(B,A) = sum_C S^H*T^L, "
        "V_TR(C,B) = sum_A T^H*R^L, count",
    ],
    ("count", "double"): [
        "views: V_RS(A,C) = sum_B R^HL*S^LH, V_ST(B,A) = sum_C S^HL*T^LH, "
        "V_TR(C,B) = sum_A T^HL*R^LH (parts heavy on the view's variables), count",
    ],
    ("listing", "single"): [
        "views: HHH(A,B,C), LLL(A,B,C); view trees R^H*S^L (V_RS, sum, root *T), "
        "S^H*T^L (V_ST, sum, root *R), T^H*R^L (V_TR, sum, root *S)",
    ],
    ("binary", "single"): [
        "views: HHH(A,B) = sum_C R^H*S^H-*T^H-, LLL(A,B) = sum_C R^L*S^L-*T^L-, "
        "H(LL)-(A,B) = sum_C R^H*S^LL*T, L-(HH)(A,B) = sum_C R^L*S*T^HH (materialized)",
        "  tree H(LH)-: V_RS(A,B,C) = R^H*S^LH, sum over B, root (A,C) *T, per-C buckets "
        "(hop iterator)",
        "  tree -HL: V_ST(B,A) = sum_C S^H-*T^L-, root (A,B) R*V_ST (materialized)",
        "  tree L-(HL): V_TR(C,A,B) = T^HL*R^L, sum over A, root (B,C) S*, per-C buckets "
        "(hop iterator)",
    ],
    ("unary", "single"): [
        "views: HHH(A) = sum R^H-*S^H*T^H-, LLL(A) = sum R^L-*S^L*T^L-, "
        "(LL)-H(A) = sum R^LL*S*T^H-, (LH)-(HH)(A) = sum R^LH*S*T^HH (materialized)",
        "  tree HL-: V_RS(A,C) = sum_B R^H-*S^L, root (A) sum_C V_RS*T (materialized)",
        "  tree -HL: V_ST(B,A) = sum_C S^H*T^L-, root (A) sum_B R*V_ST (materialized)",
        "  tree (LH)-(HL): V_TR(C,A,B) = T^HL*R^LH, sum over A, root (B,C) S*, per-(B,C) "
        "buckets (hop iterator)",
    ],
}


def describe(tp: TrianglePlan, eps: float) -> list[str]:
    """The explain lines specific to a triangle plan."""
    cq = tp.cq
    names = [x.alias for x in cq.atoms]
    a, b, c = tp.variables
    role_atom = {tp.roles[k]: k for k in range(3)}
    attrs = (("A", "B"), ("B", "C"), ("C", "A"))
    var_of = {"A": a, "B": b, "C": c}
    key = (tp.kind, tp.partitioning)
    kinds = {len(x.split(",")) for x in _PARTITIONS[key]}
    how = "single" if kinds == {1} else ("double" if kinds == {2} else "single and double")
    lines = [
        f"triangle: A={a}, B={b}, C={c}; "
        + ", ".join(
            f"{ROLE_NAMES[r]}({','.join(attrs[r])}) = {names[role_atom[r]]}" for r in range(3)
        ),
        "query: " + _QUERY_TEXT[tp.kind],
        f"heavy/light partitioning ({how}, eps = {_fmt(eps)}, theta = N^eps, "
        "loose bounds theta/2 and 3theta/2, floor(N/4) <= |D| < N):",
    ]
    for r in range(3):
        cols = _PARTITIONS[key][r]
        shown = ",".join(var_of[x] for x in cols.split(","))
        lines.append(f"  {ROLE_NAMES[r]} = {names[role_atom[r]]} on {cols} ({shown})")
    lines += _VIEWS[key]
    if len(set(x.relation.name for x in cq.atoms)) < 3:
        lines.append("self-join: one copy per occurrence, updated in FROM order")
    return lines


def compile_triangle_dataflow(tp: TrianglePlan) -> Dataflow:
    """The operator DAG of a triangle plan (for explain and the runners)."""
    cq = tp.cq
    parts = tuple(
        f"{ROLE_NAMES[tp.roles[k]]}:{cq.atoms[k].alias}" for k in range(3)
    )
    cols = _PARTITIONS[(tp.kind, tp.partitioning)]
    partition = tuple(f"{ROLE_NAMES[r]} on {cols[r]}" for r in range(3))
    router = Op("router", "heavylight", (("partition", partition), ("relations", parts)))
    ops, edges = dataflow_prelude(
        cq, router, lambda atom: ("role", ROLE_NAMES[tp.roles[atom.index]])
    )
    views = {
        "count": ("V_RS", "V_ST", "V_TR", "count"),
        "listing": ("HHH", "LLL", "tree_RS", "tree_ST", "tree_TR"),
        "binary": ("HHH", "LLL", "H(LL)-", "L-(HH)", "tree_H(LH)-", "tree_-HL",
                   "tree_L-(HL)"),
        "unary": ("HHH", "LLL", "(LL)-H", "(LH)-(HH)", "tree_HL-", "tree_-HL",
                  "tree_(LH)-(HL)"),
    }[tp.kind]
    params: tuple[tuple[str, object], ...] = (("query", tp.kind), ("views", views))
    if tp.partitioning != "single":
        params = (("partitioning", tp.partitioning), *params)
    ops.append(Op("ivmeps", "ivm-eps", params))
    edges.append(Edge("router", "ivmeps", "part deltas, rebalancing"))
    delay = {"binary": "N^min(eps,1-eps) (union, hop iterators)",
             "unary": "N^(2 min(eps,1-eps)) (union, hop iterator)"}.get(tp.kind, "constant")
    ops.append(Op("enumerate", "enumerate", (("delay", delay), ("modes", ("delta", "full")))))
    edges.append(Edge("ivmeps", "enumerate", "views"))
    dataflow_epilogue(tp.plan, ops, edges)
    name = "triangle_" + "_".join(x.alias for x in cq.atoms)
    return Dataflow(name, tuple(ops), tuple(edges))


def explain_triangle(tp: TrianglePlan, dataflow: Dataflow, eps: float, parts: str = "") -> str:
    """The explain text; ``parts`` describes the partitioner when parallelism > 1."""
    cq = tp.cq
    execution = "execution: parallelism 1 (local engine)"
    if parts:
        execution = (f"execution: {parts}; one IVM-epsilon engine per partition (HyperCube "
                     "shares put every triangle in exactly one partition)")
    out = [
        f"query: {', '.join(cq.output_names)} from {', '.join(x.alias for x in cq.atoms)}",
        f"class: {tp.plan.query_class} ({', '.join(tp.plan.classes)})",
        *describe(tp, eps),
        f"predicted cost (N = database size, eps = {_fmt(eps)}):",
        *predicted_costs(tp, eps),
        execution,
        dataflow.render(),
    ]
    return "\n".join(out)
