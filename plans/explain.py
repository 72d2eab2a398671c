"""``ivmflow explain``: class, join tree, normalised plan, predicted costs, the DAG.

Example:
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE R(a INT, b INT); SELECT a, COUNT(*) FROM R GROUP BY a")
    >>> print(q.explain().splitlines()[1])
    class: q-hierarchical (acyclic, free-connex, hierarchical, q-hierarchical)
"""

from __future__ import annotations

from core.graph import Dataflow
from plans.plan import NodeSpec, Plan


def predicted_costs(plan: Plan) -> list[str]:
    """Update time, space and delay as exponents of N (the database size)."""
    classes = set(plan.classes)
    lines: list[str] = []
    lower_depth = _lower_depth(plan)
    if "q-hierarchical" in classes:
        upd = "O(N^0) per update, any stream (q-hierarchical: height-1 tree)"
    elif "free-connex" in classes:
        upd = "O(N^1) worst case, O(lambda_T) amortized: O(N^0) for insert-only streams"
        if plan.height <= 2:
            upd += " and FIFO windows (tree height <= 2)"
    else:
        upd = (
            "O(N^1) worst case, O(lambda_T) amortized over the extended output "
            f"({', '.join(plan.extra_vars)} added)"
        )
    if plan.mode != "set" and lower_depth > 1:
        upd += "; payload changes fan out below the output (no O(1) guarantee)"
    lines.append(f"  update: {upd}")
    lines.append("  space:  O(N^1) (semi-join, projection and live views are linear)")
    if "free-connex" in classes:
        lines.append("  delay:  O(N^0) for full and delta enumeration")
    elif plan.cq.distinct or plan.cq.is_aggregate:
        lines.append("  delay:  O(N^1) worst case (projection needs deduplication)")
    else:
        lines.append(
            "  delay:  O(N^0) per derivation of the extended output; projected rows repeat"
        )
    return lines


def _lower_depth(plan: Plan) -> int:
    depth = 0

    def walk(n: NodeSpec, d: int) -> None:
        nonlocal depth
        if not n.top:
            d += 1
            depth = max(depth, d)
        for c in n.children:
            walk(plan.nodes[c], d)

    walk(plan.nodes[plan.root], 0)
    return depth


def render_plan_tree(plan: Plan) -> list[str]:
    lines: list[str] = []

    def walk(n: NodeSpec, indent: int) -> None:
        kind = "generalized" if n.generalized else "atom"
        part = "top" if n.top else "lower"
        key = ",".join(n.key) if n.parent is not None else "-"
        attrs = ",".join(n.attrs)
        lines.append(f"  {'  ' * indent}{n.name}({attrs})  {kind}, {part}, key ({key})")
        for c in n.children:
            walk(plan.nodes[c], indent + 1)

    walk(plan.nodes[plan.root], 0)
    return lines


def explain(plan: Plan, dataflow: Dataflow, partitions: str = "") -> str:
    cq = plan.cq
    semantics = {
        "set": "set (DISTINCT): supports propagate, CROWN's counters",
        "bag": "bag: multiplicities are ring payloads",
        "ring": "aggregate ring payloads (count, sums)",
    }[plan.mode]
    out = [
        f"query: {', '.join(cq.output_names)} from {', '.join(a.alias for a in cq.atoms)}",
        f"class: {plan.query_class} ({', '.join(plan.classes)})",
        f"output variables: {', '.join(plan.out_vars) or '(none)'}"
        + (f"  [extended by {', '.join(plan.extra_vars)}]" if plan.extra_vars else ""),
        f"semantics: {semantics}",
        f"join tree (height {plan.height}): {plan.tree_text}",
        "plan tree (top part drives enumeration; lower subtrees feed payloads):",
        *render_plan_tree(plan),
        "predicted cost (N = database size):",
        *predicted_costs(plan),
    ]
    if partitions:
        out.append(f"partitioning: {partitions}")
    out.append(dataflow.render())
    return "\n".join(out)
