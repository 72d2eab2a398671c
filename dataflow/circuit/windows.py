"""A window view as a node of the circuit (:mod:`dataflow.circuit.graph`): live on the local
runner (:class:`operators.window.WindowState`) and as a stage on Spark and Flink, its
input's rows partitioned by their PARTITION BY values (a window without PARTITION BY:
one partition), so that a window partition's rows meet in one stage partition
(:class:`dataflow.circuit.stagenodes.WindowTask`).

Example:
    >>> from dataflow.api import compile_query
    >>> q = compile_query('''CREATE TABLE t(a INT, b INT);
    ...     SELECT a, b, ROW_NUMBER() OVER (PARTITION BY a ORDER BY b) AS rn FROM t''')
    >>> [(name, type(node).__name__) for name, node in q.inner]
    [('_wi_0', 'CompiledQuery'), ('_wn_0', 'CompiledWindow')]
    >>> q.inner[1][1].stage_layout(4).partitions
    4
"""

from __future__ import annotations

from functools import partial
from typing import Any

from core.schema import Row
from dataflow.circuit.setops import row_key
from dataflow.circuit.stagenodes import InputLayout, KeyRouter, WholeRow, WindowTask
from operators.node import PartitionNode
from operators.state import State
from operators.window import WindowState
from plans.logical import WindowNode

__all__ = ["CompiledWindow", "partition_key"]


def partition_key(columns: tuple[int, ...], row: Row) -> tuple[Any, ...]:
    """A row's PARTITION BY values as the stage partitioner keys them (equal values,
    as SQL compares them, give equal text)."""
    return row_key(tuple(row[c] for c in columns))


class CompiledWindow:
    """A window view (:class:`plans.logical.WindowNode`) as a circuit node (a
    :class:`dataflow.circuit.graph.CustomNode`)."""

    def __init__(self, node: WindowNode) -> None:
        self.node = node
        self.spec = node.spec

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.spec.source.lower(),)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.node.columns)

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        s = self.spec
        funcs = ", ".join(f"{f.func}({'' if f.arg is None else f.arg}) {f.frame}"
                          for f in s.funcs)
        if s.limit is not None:
            funcs += f"; only rows with {s.names[s.limit[0]]} <= {s.limit[1]} (top-k per partition)"
        return (f"window view over {s.source}: {funcs}; partition by columns "
                f"{list(s.partition_by)}, ordered by {list(s.order_by)}; an ordered index "
                "per partition (O(log n + the rows whose value changes) per change)")

    def maintain(self, parallelism: int = 1, eps: float | None = None,
                 native: bool | None = None, on_compile: Any = None,
                 validate: bool = True) -> WindowState:
        return WindowState(self.spec)

    def stage_layout(self, parallelism: int) -> InputLayout:
        partitions = max(1, parallelism) if self.spec.partition_by else 1
        key = partial(partition_key, self.spec.partition_by)
        inputs: dict[str, list[tuple[int, Any]]] = {self.spec.source.lower(): [(0, WholeRow())]}
        return InputLayout(partitions, KeyRouter({0: key}, partitions), inputs)

    def stage_task(self, state: State, layout: Any) -> PartitionNode:
        return WindowTask(self.spec, state)
