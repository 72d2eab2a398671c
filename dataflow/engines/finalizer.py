"""The output finalizer of a compiled query's plan, as every node that hosts one makes
it: the local :class:`~dataflow.circuit.view.View`, a partition on Spark or Flink
(:class:`~dataflow.distributed.partitions.PartitionTask`) and the global finalizer of a staged
aggregate (:class:`~dataflow.distributed.stages.FinalizeTask`).

Example:
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE R(a INT); SELECT a, COUNT(*) FROM R GROUP BY a")
    >>> f = make_finalizer(q.plan, count_supports=False)
    >>> f.mode, f.epoch({(7,): 2})
    ('aggregate', [(1, (7, 2))])
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from dataflow.engines import PartitionEngine
from dataflow.engines.crown import aggregate_layout, make_ring
from operators.finalize import OutputFinalizer
from plans.dag import finalize_mode
from plans.plan import Plan

__all__ = ["make_finalizer"]


def make_finalizer(plan: Plan, count_supports: bool,
                   output_state: MutableMapping[Any, Any]
                   | Callable[[], MutableMapping[Any, Any]] | None = None,
                   engine: PartitionEngine | None = None) -> OutputFinalizer:
    """The output finalizer of a plan (DISTINCT supports, aggregate groups, bag), keeping
    its per-row state in ``output_state`` (a fresh dict by default; a function making
    the map is called only if the finalizer keeps state), or reading an aggregate's
    group payloads from ``engine`` (the one engine whose output it finalizes) where that
    engine maintains them (``group_payload``: CROWN's, None elsewhere)."""
    cq = plan.cq
    columns: list[tuple[str, int]] = []
    group = cq.group_by or ()
    for c in cq.columns if cq.is_aggregate else ():
        if c.var is not None:
            columns.append(("key", group.index(c.var)))
        elif c.aggregate is not None:
            columns.append(("agg", c.aggregate))
        # (else a column computed after the aggregate: cq.post builds the row)
    finalizer = OutputFinalizer(
        finalize_mode(plan),
        make_ring(plan),
        aggregate_layout(plan),
        columns,
        {},
        count_supports=count_supports,
        grouped=cq.group_by is not None,
        current=engine.group_payload() if engine is not None else None,
        post=cq.post,
        order_by=cq.order_by,
        reagg=cq.reagg,
        limit=cq.limit,
        offset=cq.offset,
    )
    if callable(output_state):
        if finalizer.keeps_state:
            finalizer.state = output_state()
    elif output_state is not None:
        finalizer.state = output_state
    return finalizer
