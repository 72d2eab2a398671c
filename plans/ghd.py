"""Cyclic queries through a generalized hypertree decomposition (CROWN section 7;
docs/algorithms.md): the atoms are grouped into *bags* so that the query over the bags is
acyclic; each bag is maintained inside (IVM-epsilon when it is a triangle, a delta join
otherwise, a pass-through for a single atom) and CROWN's join-free plan runs across the
bags, fed with the bags' deltas.

Each atom belongs to exactly one bag (so it is counted once). A bag is the virtual
relation ``B_i`` over its *interface*: the variables of its atoms that another bag, the
output, GROUP BY or an aggregate needs (summing out bag-private variables is exact under
bag semantics). The decomposition is chosen by exhaustive search over partitions of the
atoms into connected groups (at most :data:`MAX_SEARCH_ATOMS` atoms; beyond that a
greedy merge starting from disjoint triangles). The bag query must be acyclic; then, in
order: the lowest per-update exponent (bag maintenance and bag delta size), the lowest
maintenance exponent, the most triangle bags (IVM-epsilon), the lowest width (max over
bags of the space exponent: 1.5 for a triangle, the integral edge cover of the
interface otherwise, with the atoms' declared keys as functional dependencies), the
lowest total update exponent, the smallest delta-join bags (most atoms in one, then
in all), the lowest total width, the fewest bags.

Example (the dumbbell: two triangles joined by an edge):
    >>> from plans.sql import parse_query
    >>> cq = parse_query(
    ...     "CREATE TABLE G(src INT, dst INT); SELECT COUNT(*) FROM G a, G b, G c, G d, G e,"
    ...     " G f, G g WHERE a.dst = b.src AND b.dst = c.src AND c.dst = a.src"
    ...     " AND d.dst = e.src AND e.dst = f.src AND f.dst = d.src AND a.src = g.src"
    ...     " AND g.dst = d.src")
    >>> gp = build_ghd(cq)
    >>> [(b.name, b.kind, "".join(cq.atoms[i].alias for i in b.atoms)) for b in gp.bags]
    [('B0', 'triangle', 'abc'), ('B1', 'triangle', 'def'), ('B2', 'atom', 'g')]
    >>> gp.bag_plan.tree_text
    '[c.dst](B0, B2(B1))'
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from core.errors import UnsupportedQueryError
from core.graph import Dataflow, Edge, Op
from core.schema import Column, Relation, Schema
from plans.cq import Atom, ConjunctiveQuery, OutputColumn, column_type_of
from plans.dag import compile_dataflow, finalize_mode, partition_prelude
from plans.jointree import gyo_core, is_acyclic
from plans.plan import Mode, Plan, build_plan
from plans.triangle import ROLE_NAMES, TrianglePlan, recognise_triangle

BagKind = Literal["triangle", "deltajoin", "atom"]
DELTA_EXPONENT: dict[str, float] = {"triangle": 1.0, "atom": 0.0}
"""Worst-case size of a bag's delta per base update, as an exponent of N (delta joins:
their update exponent)."""
_Key = tuple[float, float, int, float, float, int, int, float, int, str]
MAX_SEARCH_ATOMS = 9
"""Above this many atoms the partition search (Bell numbers) is skipped."""


@dataclass(frozen=True)
class Bag:
    """One bag: its atoms (FROM item indices), its interface ``vars`` (the columns of
    the virtual relation), all variables of its atoms, and how it is maintained."""

    index: int
    atoms: tuple[int, ...]
    vars: tuple[str, ...]
    all_vars: tuple[str, ...]
    kind: BagKind
    width: float
    """Space exponent of the bag relation (|B_i| = O(N^width))."""
    update: float
    """Exponent of the bag maintenance time per update (delta joins; triangles use eps)."""
    triangle: TrianglePlan | None = None
    """The IVM-epsilon plan of a triangle bag (its atoms renumbered 0..2, full listing)."""

    @property
    def name(self) -> str:
        return f"B{self.index}"


@dataclass(frozen=True)
class GhdPlan:
    """A cyclic query planned as bags + CROWN over the bag query ``bag_cq``."""

    cq: ConjunctiveQuery
    bags: tuple[Bag, ...]
    bag_of_atom: tuple[int, ...]
    bag_cq: ConjunctiveQuery
    bag_plan: Plan
    """CROWN's plan over the bags, in ``bag``/``ring`` mode: bags carry multiplicities."""
    plan: Plan
    """The generic plan record of the original query (class, mode, output) that the
    finalizer, the partitioner and the API read; it has no join-tree nodes."""
    searched: bool

    @property
    def width(self) -> float:
        return max(b.width for b in self.bags)


def _fd_cover(target: frozenset[str], atoms: Sequence[Atom],
              given: frozenset[str] = frozenset()) -> int:
    """Fewest of ``atoms`` whose variables, with ``given``, cover ``target`` once closed
    under the atoms' declared keys (``PRIMARY KEY``: the values of an atom's key
    variables fix its tuple, so a key join adds no factor of N); without declared keys,
    the integral edge cover number (brute force: bags are small). Only costs read it:
    a key that the data breaks makes an estimate wrong, never a result.

    >>> from core.schema import Column, Relation
    >>> from plans.cq import Atom
    >>> sales = Atom(0, "s", Relation("s", (Column("d", "INT"), Column("i", "INT"))),
    ...              ("d", "i"), (), ("d", "i"))
    >>> day = Relation("day", (Column("d", "INT"), Column("w", "INT")))
    >>> keyed = Atom(1, "day", dataclasses.replace(day, key=(0,)), ("d", "w"), (), ("d", "w"))
    >>> plain = Atom(1, "day", day, ("d", "w"), (), ("d", "w"))
    >>> _fd_cover(frozenset("diw"), [sales, keyed]), _fd_cover(frozenset("diw"), [sales, plain])
    (1, 2)
    """
    if target <= given:
        return 0
    edges = [frozenset(a.vars) for a in atoms]
    keys = [frozenset(a.column_vars[i] for i in a.relation.key) if a.relation.key else None
            for a in atoms]

    def closure(seen: frozenset[str]) -> frozenset[str]:
        grown = True
        while grown:
            grown = False
            for edge, key in zip(edges, keys):
                if key is not None and key <= seen and not edge <= seen:
                    seen, grown = seen | edge, True
        return seen

    for k in range(len(atoms) + 1):
        for combo in itertools.combinations(edges, k):
            if target <= closure(given.union(*combo)):
                return k
    return len(atoms) + 1  # pragma: no cover - target is always covered by its atoms


def _is_triangle(atoms: Sequence[Atom]) -> bool:
    if len(atoms) != 3 or any(len(a.vars) != 2 for a in atoms):
        return False
    edges = {frozenset(a.vars) for a in atoms}
    return len(edges) == 3 and len({v for a in atoms for v in a.vars}) == 3


def _connected(block: Sequence[int], edges: Sequence[frozenset[str]]) -> bool:
    seen = {block[0]}
    frontier = [block[0]]
    while frontier:
        a = frontier.pop()
        for b in block:
            if b not in seen and edges[a] & edges[b]:
                seen.add(b)
                frontier.append(b)
    return len(seen) == len(block)


def _partitions(items: list[int]) -> Iterator[list[list[int]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for smaller in _partitions(rest):
        for i in range(len(smaller)):
            yield smaller[:i] + [[first, *smaller[i]]] + smaller[i + 1:]
        yield [[first], *smaller]


def _needed(cq: ConjunctiveQuery) -> frozenset[str]:
    agg = {a.var for a in cq.aggregates if a.var is not None}
    return frozenset(cq.free_vars) | frozenset(agg)


def _interfaces(
    cq: ConjunctiveQuery, blocks: Sequence[Sequence[int]]
) -> list[frozenset[str]]:
    edges = cq.hyperedges()
    alls = [frozenset().union(*(edges[a] for a in b)) for b in blocks]
    need = _needed(cq)
    out = []
    for i, vs in enumerate(alls):
        others = frozenset().union(*(alls[j] for j in range(len(alls)) if j != i))
        out.append(vs & (others | need))
    return out


def _block_cost(
    cq: ConjunctiveQuery, block: Sequence[int], interface: frozenset[str]
) -> tuple[BagKind, float, float]:
    atoms = [cq.atoms[a] for a in block]
    edges = [frozenset(a.vars) for a in atoms]
    if len(block) == 1:
        return "atom", 1.0, 0.0
    cover = float(_fd_cover(interface, atoms))
    if _is_triangle(atoms):
        # IVM-eps: O(N^0.5) per update at eps = 1/2, listing views O(N^1.5).
        return "triangle", 1.5, 0.5
    all_vars = frozenset().union(*edges)
    upd = max(
        _fd_cover(all_vars, atoms[:k] + atoms[k + 1:], edges[k]) for k in range(len(edges))
    )
    return "deltajoin", cover, float(upd)


def _score(
    cq: ConjunctiveQuery, blocks: list[list[int]]
) -> tuple[_Key, list[tuple[BagKind, float, float]]] | None:
    edges = cq.hyperedges()
    if any(not _connected(b, edges) for b in blocks):
        return None
    interfaces = _interfaces(cq, blocks)
    if not is_acyclic(list(interfaces)):
        return None
    costs = [_block_cost(cq, b, i) for b, i in zip(blocks, interfaces)]
    widths = [c[1] for c in costs]
    # Per update: the bag's maintenance and the size of its delta (each delta tuple is
    # one CROWN update); a triangle listing's delta is O(N).
    upds = [max(c[2], DELTA_EXPONENT[c[0]]) if c[0] != "deltajoin" else c[2] for c in costs]
    maintenance = [c[2] for c in costs]
    text = "|".join(",".join(str(a) for a in b) for b in blocks)
    triangles = sum(c[0] == "triangle" for c in costs)
    # Among equal exponents, the smallest delta joins: a delta join re-joins each
    # update with all its other atoms, where CROWN across bags updates in place; with
    # declared keys a bag of every key-joined atom is linear too (TPC-DS Q85's eight
    # atoms: 3x slower as one bag than as a bag of two and six single atoms).
    joined = [len(b) for b, c in zip(blocks, costs) if c[0] == "deltajoin"] or [0]
    key = (max(upds), max(maintenance), -triangles, max(widths), sum(upds), max(joined),
           sum(joined), sum(widths), len(blocks), text)
    return key, costs


def choose_bags(cq: ConjunctiveQuery) -> tuple[list[list[int]], bool]:
    """The atom groups of the chosen decomposition (sorted by first atom) and whether
    the exhaustive search ran (False: too many atoms, :func:`_greedy_bags`)."""
    n = len(cq.atoms)
    if n > MAX_SEARCH_ATOMS:
        return _greedy_bags(cq), False
    best: tuple[_Key, list[list[int]]] | None = None
    for blocks in _partitions(list(range(n))):
        blocks = sorted((sorted(b) for b in blocks), key=lambda b: b[0])
        scored = _score(cq, blocks)
        if scored is None:
            continue
        if best is None or scored[0] < best[0]:
            best = (scored[0], blocks)
    if best is None:  # pragma: no cover - the single bag is always acyclic
        return [list(range(n))], True
    return best[1], True


def _greedy_bags(cq: ConjunctiveQuery) -> list[list[int]]:
    """For large queries: disjoint triangles (first found) and single atoms, then merge
    the two variable-sharing groups whose union scores best until the bag query is
    acyclic (one bag holding everything always is)."""
    n = len(cq.atoms)
    edges = cq.hyperedges()
    used: set[int] = set()
    blocks: list[list[int]] = []
    for combo in itertools.combinations(range(n), 3):
        if used.isdisjoint(combo) and _is_triangle([cq.atoms[a] for a in combo]):
            blocks.append(list(combo))
            used.update(combo)
    blocks += [[a] for a in range(n) if a not in used]

    def norm(bs: list[list[int]]) -> list[list[int]]:
        return sorted((sorted(b) for b in bs), key=lambda b: b[0])

    blocks = norm(blocks)
    while _score(cq, blocks) is None and len(blocks) > 1:
        best: tuple[_Key, list[list[int]]] | None = None
        # No merge is acyclic yet: the fallback merges two groups of the cyclic core
        # into the smallest bag (by its width with the declared keys, then its atoms):
        # TPC-DS Q72's catalog_sales with its sale date's date_dim row (a key join, as
        # big as catalog_sales), not with inventory on the item (900M tuples at SF 1).
        fallback: list[list[int]] | None = None
        fallback_key: tuple[int, int] = (0, 0)
        core = _cyclic_core(cq, blocks)
        for i, j in itertools.combinations(range(len(blocks)), 2):
            vi = frozenset().union(*(edges[a] for a in blocks[i]))
            vj = frozenset().union(*(edges[a] for a in blocks[j]))
            if not vi & vj:
                continue
            merged = norm([b for k, b in enumerate(blocks) if k not in (i, j)]
                          + [blocks[i] + blocks[j]])
            if i in core and j in core:
                union = blocks[i] + blocks[j]
                key = (_fd_cover(vi | vj, [cq.atoms[a] for a in union]), len(union))
                if fallback is None or key < fallback_key:
                    fallback, fallback_key = merged, key
            scored = _score(cq, merged)
            if scored is not None and (best is None or scored[0] < best[0]):
                best = (scored[0], merged)
        if best is not None:
            return best[1]
        if fallback is None:  # pragma: no cover - a cyclic core shares variables
            return [list(range(n))]
        blocks = fallback
    return blocks


def _cyclic_core(cq: ConjunctiveQuery, blocks: Sequence[Sequence[int]]) -> set[int]:
    """The groups that GYO reduction of the groups' hypergraph leaves: those on a cycle
    (an ear, whose variables shared with the rest lie in one other group, breaks none)."""
    edges = cq.hyperedges()
    return set(gyo_core([frozenset().union(*(edges[a] for a in b)) for b in blocks]))


def _triangle_subplan(cq: ConjunctiveQuery, block: Sequence[int]) -> TrianglePlan:
    """The full-listing triangle query over the block's atoms (renumbered 0..2), in the
    query's variable order, for :class:`dataflow.engines.triangle.TriangleEngine`.

    The listing is summed out to the bag's interface by the engine: selecting just the
    interface (the one- and two-variable triangle operators) was measured 1.5-2x slower
    per update on the dumbbell COUNT benchmark (|D| = 2k..8k), so the listing it is."""
    atoms = tuple(dataclasses.replace(cq.atoms[a], index=k) for k, a in enumerate(block))
    tri_vars = tuple(v for v in cq.var_order if any(v in a.vars for a in atoms))
    sub = dataclasses.replace(
        cq,
        atoms=atoms,
        columns=tuple(OutputColumn(v, var=v) for v in tri_vars),
        free_vars=tri_vars,
        aggregates=(),
        group_by=None,
        distinct=False,
    )
    tp = recognise_triangle(sub)
    if tp is None:  # pragma: no cover - blocks are checked by _is_triangle
        msg = "internal: a triangle bag is not recognised as a triangle"
        raise AssertionError(msg)
    return tp


def _bag_query(cq: ConjunctiveQuery, bags: Sequence[Bag]) -> ConjunctiveQuery:
    """The acyclic query over the bag relations, with the original output."""
    relations: dict[str, Relation] = {}
    atoms: list[Atom] = []
    for b in bags:
        cols = tuple(Column(v, column_type_of(cq, v).type) for v in b.vars)
        rel = Relation(b.name, cols)
        relations[b.name] = rel
        atoms.append(Atom(b.index, b.name, rel, b.vars, (), b.vars))
    used = {v for b in bags for v in b.vars}
    counts = {v: sum(v in b.vars for b in bags) for v in used}
    return dataclasses.replace(
        cq,
        schema=Schema(relations),
        atoms=tuple(atoms),
        var_order=tuple(v for v in cq.var_order if v in used),
        join_vars=frozenset(v for v, c in counts.items() if c > 1),
    )


def build_ghd(cq: ConjunctiveQuery) -> GhdPlan:
    """Decompose a cyclic query into bags and plan CROWN over them."""
    blocks, searched = choose_bags(cq)
    interfaces = _interfaces(cq, blocks)
    order = {v: i for i, v in enumerate(cq.var_order)}
    bags: list[Bag] = []
    for i, (block, iface) in enumerate(zip(blocks, interfaces)):
        kind, width, upd = _block_cost(cq, block, iface)
        all_vars = frozenset().union(*(frozenset(cq.atoms[a].vars) for a in block))
        bags.append(
            Bag(
                index=i,
                atoms=tuple(block),
                vars=tuple(sorted(iface, key=order.__getitem__)),
                all_vars=tuple(sorted(all_vars, key=order.__getitem__)),
                kind=kind,
                width=width,
                update=upd,
                triangle=_triangle_subplan(cq, block) if kind == "triangle" else None,
            )
        )
    if any(not b.vars for b in bags) and len(bags) > 1:
        msg = (
            "cyclic query whose join graph is disconnected (a cross product): ivmflow "
            "maintains connected queries only; join the parts or split the query"
        )
        raise UnsupportedQueryError(msg)
    bag_cq = _bag_query(cq, bags)
    bag_plan = build_plan(bag_cq)
    if bag_plan.mode == "set":
        # Bags deliver multiplicities; the finalizer turns them into DISTINCT supports.
        bag_plan = dataclasses.replace(bag_plan, mode="bag")
    bag_of_atom = [0] * len(cq.atoms)
    for b in bags:
        for a in b.atoms:
            bag_of_atom[a] = b.index
    mode: Mode = bag_plan.mode if not cq.distinct else "set"
    names = [a.alias for a in cq.atoms]
    tree_text = "ghd " + " ".join(
        f"{b.name}={{{','.join(names[a] for a in b.atoms)}}}" for b in bags
    ) + f"; bags: {bag_plan.tree_text}"
    plan = Plan(
        cq=cq,
        query_class="cyclic",
        classes=("cyclic", "ghd"),
        nodes=(),
        root=0,
        out_vars=bag_plan.out_vars,
        extra_vars=bag_plan.extra_vars,
        mode=mode,
        height=bag_plan.height,
        tree_text=tree_text,
        rates=(1.0,) * len(cq.atoms),
    )
    return GhdPlan(cq, tuple(bags), tuple(bag_of_atom), bag_cq, bag_plan, plan, searched)


def _fmt(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def bag_costs(bag: Bag, eps: float) -> tuple[float, float, float]:
    """(maintenance time per update, bag delta size per update, space) exponents."""
    if bag.kind == "triangle":
        return max(eps, 1.0 - eps), DELTA_EXPONENT["triangle"], 1.5
    if bag.kind == "atom":
        return 0.0, 0.0, 1.0
    return bag.update, bag.update, max(1.0, bag.width)


def predicted_costs(gp: GhdPlan, eps: float) -> list[str]:
    """Per bag and overall, as exponents of N for ``eps`` (CROWN Lemma 7.2 for the
    dumbbell: O(N^1.5) space, O(N) per update, O(1) delay)."""
    lines: list[str] = []
    upd = 0.0
    space = 0.0
    for b in gp.bags:
        m, d, s = bag_costs(b, eps)
        how = {"triangle": "IVM-eps (amortized)", "deltajoin": "delta join (worst case)",
               "atom": "pass-through"}[b.kind]
        lines.append(
            f"  {b.name}: maintenance O(N^{_fmt(m)}) {how}, bag delta O(N^{_fmt(d)}) tuples"
            f" per update, space O(N^{_fmt(s)})"
        )
        upd = max(upd, m, d)
        space = max(space, s)
    classes = set(gp.bag_plan.classes)
    if "q-hierarchical" in classes:
        crown = "O(N^0) per bag tuple (q-hierarchical over the bags)"
    elif "free-connex" in classes:
        crown = "O(N^0) amortized per bag tuple for insert-only streams, O(N^1) worst case"
    else:
        crown = "O(N^1) worst case per bag tuple (output extended over the bags)"
    lines.append(f"  CROWN over the bags: {crown}")
    lines.append(
        f"  update: O(N^{_fmt(upd)}) (max over bags of maintenance and delta size x CROWN)"
    )
    lines.append(f"  space:  O(N^{_fmt(space)}) (bag relations and triangle views)")
    if "free-connex" in classes:
        lines.append("  delay:  O(N^0) for full and delta enumeration (CROWN over the bags)")
    else:
        lines.append("  delay:  as CROWN over the bags (projection needs deduplication)")
    return lines


def describe(gp: GhdPlan, eps: float) -> list[str]:
    """The decomposition, the bag join tree and the triangle bags' partitions."""
    from plans.explain import render_plan_tree

    cq = gp.cq
    names = [a.alias for a in cq.atoms]
    how = {"triangle": "triangle, IVM-eps listing", "deltajoin": "delta join (standard "
           "change propagation over indexed atoms)", "atom": "single atom, pass-through"}
    lines = [
        f"decomposition: generalized hypertree decomposition, {len(gp.bags)} bags, width "
        f"{_fmt(gp.width)}" + ("" if gp.searched else
                               f" (more than {MAX_SEARCH_ATOMS} atoms: greedy, not searched)"),
    ]
    for b in gp.bags:
        body = " * ".join(
            f"{names[a]}({','.join(cq.atoms[a].vars)})" for a in b.atoms
        )
        proj = "" if b.vars == b.all_vars else f" summed to ({','.join(b.vars)})"
        lines.append(f"  {b.name}({','.join(b.vars)}) = {body}{proj}  [{how[b.kind]}]")
    lines.append(f"bag join tree (CROWN over the bags, {gp.bag_plan.query_class}): "
                 f"{gp.bag_plan.tree_text}")
    lines.extend(render_plan_tree(gp.bag_plan))
    tris = [b for b in gp.bags if b.triangle is not None]
    if tris:
        lines.append(
            f"heavy/light partitions of the triangle bags (eps = {_fmt(eps)}, threshold "
            "N^eps; light parts have degree < N^eps on the partition variable):"
        )
        for b in tris:
            tp = b.triangle
            assert tp is not None
            role_atom = {tp.roles[k]: b.atoms[k] for k in range(3)}
            parts = ", ".join(
                f"{ROLE_NAMES[r]} = {names[role_atom[r]]} on {tp.variables[r]}"
                for r in range(3)
            )
            lines.append(f"  {b.name}: {parts}")
    return lines


def explain_ghd(gp: GhdPlan, dataflow: Dataflow, eps: float, parallelism: int = 1,
                partitions: str = "") -> str:
    """``ivmflow explain`` for a cyclic query planned with a GHD."""
    cq = gp.cq
    out = [
        f"query: {', '.join(cq.output_names)} from {', '.join(a.alias for a in cq.atoms)}",
        f"class: {gp.plan.query_class} ({', '.join(gp.plan.classes)})",
        *describe(gp, eps),
        f"predicted cost (N = database size, eps = {_fmt(eps)}):",
        *predicted_costs(gp, eps),
    ]
    if parallelism > 1:
        out.append(f"partitioning: {partitions} (each partition keeps its own bags)")
    out.append(dataflow.render())
    return "\n".join(out)


def _bag_op(bag: Bag, names: list[str]) -> Op:
    how = {"triangle": "ivm-eps listing", "deltajoin": "delta join", "atom": "pass-through"}
    return Op(f"bag_{bag.name}", "bag", (
        ("atoms", tuple(names[a] for a in bag.atoms)),
        ("vars", bag.vars),
        ("maintained", how[bag.kind]),
    ))


def compile_ghd_dataflow(gp: GhdPlan) -> Dataflow:
    """The operator DAG: inputs -> bag operators -> CROWN over the bags -> finalizer."""
    cq = gp.cq
    inner = compile_dataflow(gp.bag_plan)
    ops, edges = partition_prelude(cq)
    names = [a.alias for a in cq.atoms]
    for bag in gp.bags:
        ops.append(_bag_op(bag, names))
        for a in bag.atoms:
            edges.append(Edge("partition", f"bag_{bag.name}", names[a]))
    skip = {"source", "validate", "partition"} | {f"input_{b.name}" for b in gp.bags}
    ops.extend(op for op in inner.ops if op.id not in skip)
    for e in inner.edges:
        if e.src in skip:
            if e.src == "partition":
                edges.append(Edge(f"bag_{e.label}", e.dst, f"delta {e.label}"))
            continue
        edges.append(e)
    mode = finalize_mode(gp.plan)
    ops = [
        Op(op.id, op.kind, tuple((k, mode if k == "mode" else v) for k, v in op.params))
        if op.kind == "finalize" else op
        for op in ops
    ]
    return Dataflow("ghd_" + "_".join(names), tuple(ops), tuple(edges))
