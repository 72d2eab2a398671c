"""The kinds of query ivmflow maintains, one plan type each, behind one interface.

* ``crown``: a free-connex join tree (:mod:`plans.plan`), run by
  :class:`~dataflow.engines.crown.Engine`;
* ``triangle``: IVM-epsilon heavy/light views (:mod:`plans.triangle`), run by
  :class:`~dataflow.engines.triangle.TriangleEngine`;
* ``ghd``: bags of a hypertree decomposition (:mod:`plans.ghd`), run by
  :class:`~dataflow.engines.ghd.GhdEngine`;
* ``hierarchical``: view trees with the update/delay knob eps for a hierarchical
  query that is not q-hierarchical (:mod:`plans.hierarchical`), run by
  :class:`~dataflow.engines.hierarchical.HierarchicalEngine` (chosen with ``--eps``).

A :class:`QueryKind` makes its engine (one per partition), explains itself, says what
its output finalizer needs, re-plans itself from a stream prefix where it has a choice,
and names the options a distributed runner must ship to its workers. Callers never
branch on the kind.

Example:
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE G(s INT, d INT); SELECT COUNT(*) FROM G a, G b, G c"
    ...                   " WHERE a.d = b.s AND b.d = c.s AND c.d = a.s")
    >>> q.kind.name, q.kind.engine_emits_bags, q.kind.worker_options()
    ('triangle', True, (0.5, 'single'))
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from core.graph import Dataflow
from core.records import Record, Update
from dataflow.circuit.hypercube import Partitioner
from dataflow.engines import PartitionEngine
from dataflow.engines.crown import Engine
from dataflow.engines.ghd import GhdEngine
from dataflow.engines.hierarchical import HierarchicalEngine
from dataflow.engines.triangle import TriangleEngine
from operators.input import RelationInput
from operators.state import State
from plans.cq import ConjunctiveQuery
from plans.dag import compile_dataflow
from plans.explain import explain
from plans.ghd import GhdPlan, compile_ghd_dataflow, explain_ghd
from plans.hierarchical import (
    HierarchicalPlan,
    compile_hierarchical_dataflow,
    explain_hierarchical,
)
from plans.plan import Plan, build_plan
from plans.triangle import TrianglePlan, compile_triangle_dataflow, explain_triangle

__all__ = ["CrownKind", "GhdKind", "HierarchicalKind", "KindName", "QueryKind", "TriangleKind",
           "estimate_rates"]

KindName = Literal["crown", "triangle", "ghd", "hierarchical"]


class QueryKind(Protocol):
    """What every kind of query offers (mypy checks the three classes against it)."""

    @property
    def name(self) -> KindName: ...

    @property
    def plan(self) -> Plan:
        """The plan record the partitioner and the finalizer read (class, mode, output
        variables, update rates)."""
        ...

    @property
    def dataflow(self) -> Dataflow:
        """The frozen operator DAG."""
        ...

    @property
    def eps(self) -> float:
        """IVM-epsilon's threshold exponent (unused by CROWN-only plans)."""
        ...

    @property
    def engine_emits_bags(self) -> bool:
        """True when the engine emits bag multiplicities even for DISTINCT queries, so
        the finalizer must count supports."""
        ...

    def make_engine(self, state: State | None = None, eps: float | None = None,
                    keep_leaf_tuples: bool = True) -> PartitionEngine:
        """A fresh engine for one partition (``state``: the backend to keep it in;
        ``keep_leaf_tuples=False`` where deletes are checked before the engine: join
        tree leaves that only feed sums keep the sums, not their tuples)."""
        ...

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        """The ``ivmflow explain`` text."""
        ...

    def replanned(self, prefix: Iterable[Record]) -> QueryKind:
        """The same query planned with update rates from a stream prefix (itself where
        the kind has no choice to make)."""
        ...

    def worker_options(self) -> tuple[float, str]:
        """``(eps, partitioning)``: what workers need besides the logical plan and the
        rates to plan the same engine."""
        ...


def _parts(plan: Plan, parallelism: int) -> str:
    return Partitioner(plan, parallelism).describe() if parallelism > 1 else ""


def estimate_rates(cq: ConjunctiveQuery, prefix: Iterable[Record]) -> list[float]:
    """N(e) per FROM item from a buffered prefix of the stream (updates that pass the
    item's filters), +1 so that unseen items still count."""
    inputs = [RelationInput(a, cq.join_vars) for a in cq.atoms]
    rates = [1.0] * len(cq.atoms)
    for rec in prefix:
        if not isinstance(rec, Update):
            continue
        for i, a in enumerate(cq.atoms):
            if a.relation.name.lower() == rec.relation.lower() and len(rec.row) == len(
                a.relation.columns
            ) and inputs[i](rec.row) is not None:
                rates[i] += 1
    return rates


@dataclass(frozen=True)
class CrownKind:
    """An acyclic query: CROWN over a free-connex (generalized) join tree."""

    plan: Plan
    dataflow: Dataflow
    eps: float = 0.5
    name: KindName = "crown"

    @property
    def engine_emits_bags(self) -> bool:
        # An extended output (non-free-connex) is projected while enumerating.
        return bool(self.plan.extra_vars)

    @classmethod
    def of(cls, plan: Plan) -> CrownKind:
        return cls(plan, compile_dataflow(plan))

    def make_engine(self, state: State | None = None, eps: float | None = None,
                    keep_leaf_tuples: bool = True) -> PartitionEngine:
        return Engine(self.plan, self.dataflow, state, keep_leaf_tuples=keep_leaf_tuples)

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        return explain(self.plan, self.dataflow, _parts(self.plan, parallelism))

    def replanned(self, prefix: Iterable[Record]) -> CrownKind:
        return CrownKind.of(build_plan(self.plan.cq, estimate_rates(self.plan.cq, prefix)))

    def worker_options(self) -> tuple[float, str]:
        return (self.eps, "single")


@dataclass(frozen=True)
class TriangleKind:
    """A triangle query: IVM-epsilon heavy/light views."""

    tp: TrianglePlan
    dataflow: Dataflow
    eps: float = 0.5
    name: KindName = "triangle"
    engine_emits_bags: bool = True

    @classmethod
    def of(cls, tp: TrianglePlan, eps: float) -> TriangleKind:
        return cls(tp, compile_triangle_dataflow(tp), eps)

    @property
    def plan(self) -> Plan:
        return self.tp.plan

    def make_engine(self, state: State | None = None, eps: float | None = None,
                    keep_leaf_tuples: bool = True) -> PartitionEngine:
        return TriangleEngine(self.tp, self.eps if eps is None else eps, state)

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        e = self.eps if eps is None else eps
        return explain_triangle(self.tp, self.dataflow, e, _parts(self.plan, parallelism))

    def replanned(self, prefix: Iterable[Record]) -> TriangleKind:
        return self  # no join tree to choose

    def worker_options(self) -> tuple[float, str]:
        return (self.eps, self.tp.partitioning)


@dataclass(frozen=True)
class GhdKind:
    """Another cyclic query: bags of a hypertree decomposition, CROWN over them."""

    gp: GhdPlan
    dataflow: Dataflow
    eps: float = 0.5
    name: KindName = "ghd"
    engine_emits_bags: bool = True

    @classmethod
    def of(cls, gp: GhdPlan, eps: float) -> GhdKind:
        return cls(gp, compile_ghd_dataflow(gp), eps)

    @property
    def plan(self) -> Plan:
        return self.gp.plan

    def make_engine(self, state: State | None = None, eps: float | None = None,
                    keep_leaf_tuples: bool = True) -> PartitionEngine:
        return GhdEngine(self.gp, self.eps if eps is None else eps, state, keep_leaf_tuples)

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        e = self.eps if eps is None else eps
        return explain_ghd(self.gp, self.dataflow, e, parallelism,
                           _parts(self.plan, parallelism))

    def replanned(self, prefix: Iterable[Record]) -> GhdKind:
        return self  # the decomposition does not depend on rates

    def worker_options(self) -> tuple[float, str]:
        return (self.eps, "single")


VIEW_TREES = "view-trees"
"""What :meth:`HierarchicalKind.worker_options` ships as its partitioning: workers plan
the query with view trees too."""


@dataclass(frozen=True)
class HierarchicalKind:
    """A hierarchical query, not q-hierarchical: view trees with the knob eps."""

    hp: HierarchicalPlan
    dataflow: Dataflow
    eps: float = 0.5
    name: KindName = "hierarchical"
    engine_emits_bags: bool = True

    @classmethod
    def of(cls, hp: HierarchicalPlan, eps: float) -> HierarchicalKind:
        return cls(hp, compile_hierarchical_dataflow(hp), eps)

    @property
    def plan(self) -> Plan:
        return self.hp.plan

    def make_engine(self, state: State | None = None, eps: float | None = None,
                    keep_leaf_tuples: bool = True) -> PartitionEngine:
        return HierarchicalEngine(self.hp, self.eps if eps is None else eps, state)

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        e = self.eps if eps is None else eps
        return explain_hierarchical(self.hp, self.dataflow, e, _parts(self.plan, parallelism))

    def replanned(self, prefix: Iterable[Record]) -> HierarchicalKind:
        return self  # the canonical order does not depend on rates

    def worker_options(self) -> tuple[float, str]:
        return (self.eps, VIEW_TREES)
