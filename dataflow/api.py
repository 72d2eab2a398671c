"""The Python API: everything the CLI can do.

Example:
    >>> from dataflow.api import compile_query
    >>> from core.records import Update
    >>> q = compile_query('''
    ...     CREATE TABLE G(src INT, dst INT);
    ...     SELECT G1.src AS a, G2.dst AS c FROM G G1, G G2 WHERE G1.dst = G2.src;
    ... ''')
    >>> view = q.maintain()
    >>> for u in [Update("+", "G", (1, 2)), Update("+", "G", (2, 3))]:
    ...     view.apply(u)
    >>> view.end_epoch().rows
    ((1, (1, 3)),)
    >>> view.apply(Update("-", "G", (2, 3)))
    >>> view.end_epoch().rows, view.snapshot()
    (((-1, (1, 3)),), [])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias

from core.errors import UnsupportedQueryError, UsageError
from core.graph import Dataflow
from core.native import (
    NativeBuildError,
    cache_dir,
    is_built,
    native_mode,
    native_source,
    one_line,
)
from core.records import EpochDelta, Record
from core.schema import Schema
from dataflow.circuit.drive import run_view
from dataflow.circuit.kinds import (
    CrownKind,
    GhdKind,
    HierarchicalKind,
    QueryKind,
    TriangleKind,
    estimate_rates,
)
from dataflow.circuit.setops import CompiledSetOp
from dataflow.circuit.view import View, _check_eps, make_finalizer
from dataflow.circuit.windows import CompiledWindow
from operators.keyedview import CompiledKeyedView
from operators.threshold import CompiledThreshold
from plans.cq import ConjunctiveQuery
from plans.ghd import build_ghd
from plans.hierarchical import HierarchicalPlan, plan_hierarchical
from plans.logical import (
    JoinBlock,
    KeyedViewNode,
    LogicalPlan,
    SetOpNode,
    ThresholdNode,
    ViewNode,
    WindowNode,
    logical_plan,
)
from plans.plan import Plan, build_plan, classify
from plans.sqlparse import parse_file
from plans.triangle import recognise_triangle

__all__ = ["Compiled", "CompiledQuery", "View", "compile_plan", "compile_query", "make_finalizer"]

if TYPE_CHECKING:
    from dataflow.circuit.views import CompiledDag

@dataclass
class CompiledQuery:
    """A query compiled to its plan and dataflow; ``maintain()`` starts a live view.
    ``kind`` (:mod:`dataflow.circuit.kinds`) is CROWN, triangle or GHD."""

    cq: ConjunctiveQuery
    kind: QueryKind
    source_name: str
    logical: LogicalPlan
    """The plan it was compiled from (what the distributed runners ship)."""

    @property
    def plan(self) -> Plan:
        return self.kind.plan

    @property
    def dataflow(self) -> Dataflow:
        return self.kind.dataflow

    @property
    def eps(self) -> float:
        """IVM-epsilon's threshold exponent (triangle queries and triangle bags of a GHD)."""
        return self.kind.eps

    @property
    def schema(self) -> Schema:
        return self.cq.schema

    @property
    def output_columns(self) -> tuple[str, ...]:
        return self.cq.output_names

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        return self.kind.explain(parallelism, eps)

    def replanned(self, prefix: Iterable[Record]) -> CompiledQuery:
        """The same query planned with update rates estimated from a stream prefix."""
        kind = self.kind.replanned(prefix)
        return self if kind is self.kind else replace(self, kind=kind)

    def maintain(self, parallelism: int = 1, eps: float | None = None,
                 native: bool | None = None,
                 on_compile: Callable[[], None] | None = None,
                 validate: bool = True, keep_rows: bool = False) -> View:
        """A live view; ``eps`` (triangle queries) overrides the compiled epsilon;
        ``native`` and ``on_compile``: whether its generated code is compiled, and a
        call before a first-use build; ``validate`` and ``keep_rows``: its delete
        check (see :class:`View`)."""
        return View(self, parallelism, eps, native, on_compile, validate, keep_rows)

    def delete_check(self, parallelism: int = 1, validate: bool = True,
                     keep_rows: bool = False) -> str:
        """What a view's delete check keeps per relation (``ivmflow explain``)."""
        view = View(self, parallelism, native=False, validate=validate,
                    keep_rows=keep_rows)
        declared = [r.name for r in self.schema.relations.values()]
        return view.validator.explain(declared)

    def native_status(self, parallelism: int = 1, eps: float | None = None,
                      native: bool | None = None) -> str:
        """What a view of this query would run, and why (``ivmflow explain``), without
        building anything: ``compiled (...)``, ``interpreted: <reason>``, or the error
        that ``native=True`` (or ``$IVMFLOW_NATIVE=1``) would raise."""
        try:
            mode = native_mode(native)
        except UsageError as err:
            return f"a run fails: {err}"
        # (the code a native run generates, packed rows and all: nothing built here)
        view = View(self, parallelism, eps, native=False,
                    row_packer=None if mode == "off" else _unchanged)
        try:
            why = view._interpreted_because(mode, native)
        except NativeBuildError as err:
            return f"a run fails: {err}"
        if why is not None:
            return f"interpreted: {why}"
        try:
            text = native_source(view._bindings.entries(), typed_rows=not view.packed_rows)
        except Exception as err:  # (the same fallback as View's)
            if mode == "on":
                return f"a run fails: {one_line(err)}"
            return f"interpreted: the generated code does not translate ({one_line(err)})"
        if is_built(text):
            return f"compiled (this query shape is built, in {cache_dir()})"
        return "compiled (the first run builds this query shape: a few seconds, then cached)"

    def run(
        self, records: Iterable[Record], epoch_size: int | None = None, parallelism: int = 1
    ) -> Iterator[EpochDelta]:
        """Per-epoch deltas of a stream: an epoch ends at a marker, after ``epoch_size``
        updates, and at the end of the stream (if it holds updates)."""
        yield from run_view(self.maintain(parallelism), records, epoch_size)


def _unchanged(t: tuple[Any, ...]) -> tuple[Any, ...]:
    return t


def compile_query(
    sql: str,
    *,
    source_name: str = "<query>",
    rates: list[float] | None = None,
    prefix: Iterable[Record] | None = None,
    eps: float = 0.5,
    triangle_partitioning: str = "single",
    view_trees: bool = False,
) -> Compiled:
    """Parse, plan and compile a query file's text: its logical plan
    (:func:`plans.logical.logical_plan`, from the file's one parse), then
    :func:`compile_plan`.

    ``rates`` (one per FROM item) or a ``prefix`` of the update stream steer the join
    tree choice (sum of depth * update rate); without them rates are uniform. Triangle
    queries are planned for IVM-epsilon with threshold exponent ``eps``;
    ``triangle_partitioning="double"`` picks the double-partitioned triangle count.
    ``view_trees=True`` (the CLI sets it when ``--eps`` is given) maintains a
    hierarchical query that is not q-hierarchical with view trees and the knob ``eps``
    (:mod:`plans.hierarchical`) instead of CROWN."""
    _check_eps(eps)
    return compile_plan(logical_plan(parse_file(sql, source_name)), rates=rates,
                        prefix=prefix, eps=eps, triangle_partitioning=triangle_partitioning,
                        view_trees=view_trees)


def compile_plan(
    plan: LogicalPlan,
    *,
    rates: list[float] | None = None,
    prefix: Iterable[Record] | None = None,
    eps: float = 0.5,
    triangle_partitioning: str = "single",
    view_trees: bool = False,
) -> Compiled:
    """The engines of a logical plan (options as :func:`compile_query`'s): one join
    block is classified and planned as one of the kinds (:mod:`dataflow.circuit.kinds`); a
    DAG of views compiles each view, then the query over them
    (:class:`~dataflow.circuit.views.CompiledDag`). What the distributed runners' workers do
    with the plan they are shipped (:mod:`dataflow.distributed.partitions`): no SQL is parsed."""
    if not plan.views:
        return _compile_block(plan, plan.query, rates, prefix, eps, triangle_partitioning,
                              view_trees)
    from dataflow.circuit.views import CompiledDag

    inner = [(node.name, _compile_view(plan, node, eps, view_trees)) for node in plan.views]
    outer = _compile_block(plan, plan.query, None, None, eps, "single", view_trees)
    return CompiledDag(inner, outer, plan.base, plan.source, plan)


def _compile_view(plan: LogicalPlan, node: ViewNode, eps: float, view_trees: bool
                  ) -> (CompiledQuery | CompiledKeyedView | CompiledThreshold | CompiledSetOp
                        | CompiledWindow):
    """One inner view of a DAG (a join block planned as usual, with uniform rates)."""
    if isinstance(node, SetOpNode):
        return CompiledSetOp(node)
    if isinstance(node, WindowNode):
        return CompiledWindow(node)
    if isinstance(node, KeyedViewNode):
        return CompiledKeyedView(node.spec, node.own, node.other, set(node.base))
    if isinstance(node, ThresholdNode):
        return CompiledThreshold(node.spec, node.rows, node.scalar)
    source = f"{plan.source} (view {node.name})"
    alone = LogicalPlan(source, node.cq.schema, (), node, ())
    return _compile_block(alone, node, None, None, eps, "single", view_trees)


def _compile_block(plan: LogicalPlan, block: JoinBlock, rates: list[float] | None,
                   prefix: Iterable[Record] | None, eps: float, triangle_partitioning: str,
                   view_trees: bool) -> CompiledQuery:
    """A join block classified and planned: a triangle, another cyclic query (GHD),
    with ``view_trees`` a hierarchical one, else CROWN."""
    cq = block.cq
    tri = recognise_triangle(cq, triangle_partitioning)  # type: ignore[arg-type]
    if tri is None and triangle_partitioning != "single":
        msg = (f"triangle_partitioning={triangle_partitioning!r} (--partitioning): only "
               "triangle queries have heavy/light partitions; use single")
        raise UnsupportedQueryError(msg)
    kind: QueryKind
    if tri is not None:
        kind = TriangleKind.of(tri, eps)
    elif classify(cq)[0] == "cyclic":
        kind = GhdKind.of(build_ghd(cq), eps)
    elif view_trees and (hp := _view_tree_plan(cq)) is not None:
        kind = HierarchicalKind.of(hp, eps)
    else:
        if rates is None and prefix is not None:
            rates = estimate_rates(cq, prefix)
        kind = CrownKind.of(build_plan(cq, rates))
    return CompiledQuery(cq, kind, plan.source, plan)


Compiled: TypeAlias = "CompiledQuery | CompiledDag"
"""A compiled query: one join block, or a DAG of views (:mod:`dataflow.circuit.views`)."""


def _view_tree_plan(cq: ConjunctiveQuery) -> HierarchicalPlan | None:
    """The view-tree plan of a hierarchical query that is not q-hierarchical (a bound
    variable above a free one: CROWN's updates are not O(1) there), else None."""
    try:
        hp = plan_hierarchical(cq)
    except UnsupportedQueryError:
        return None
    return hp if hp.bf else None
