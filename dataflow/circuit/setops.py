"""A set operation as a node of the circuit (:mod:`dataflow.circuit.graph`): live on the local
runner (:class:`operators.setop.SetOpState`) and as a stage on Spark and Flink, its
inputs' rows partitioned by their value, so that a row of every input meets in one
partition (:class:`dataflow.circuit.stagenodes.SetOpTask`): O(the changed rows) per epoch on every
runner.

Example:
    >>> from dataflow.api import compile_query
    >>> q = compile_query('''CREATE TABLE a(x INT); CREATE TABLE b(y INT);
    ...     SELECT x FROM a UNION SELECT y FROM b''')
    >>> [(name, type(node).__name__) for name, node in q.inner]
    [('_sb_0', 'CompiledQuery'), ('_sb_1', 'CompiledQuery'), ('_so_0', 'CompiledSetOp')]
    >>> layout = q.inner[2][1].stage_layout(4)
    >>> layout.partitions, layout.inputs["_sb_0"][0][0], layout.inputs["_sb_1"][0][0]
    (4, 0, 1)
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from core.schema import Row
from dataflow.circuit.stagenodes import InputLayout, KeyRouter, SetOpTask, WholeRow
from operators.node import PartitionNode
from operators.setop import SetOpState
from operators.state import State
from plans.logical import SetOpNode

__all__ = ["CompiledSetOp", "row_key"]


def row_key(row: Row) -> tuple[Any, ...]:
    """A row as the partitioner keys it: equal rows (as SQL's set operations compare
    them) give equal keys and equal text (a DECIMAL without its trailing zeros).

    >>> row_key((Decimal("4.50"), 1, None)) == row_key((Decimal("4.5"), 1, None))
    True
    """
    return tuple(v.normalize() if type(v) is Decimal and v.is_finite() else v for v in row)


class CompiledSetOp:
    """A set operation (:class:`plans.logical.SetOpNode`) as a circuit node: what it
    reads, its columns, its live node and its stage (a node kind of its own,
    :class:`dataflow.circuit.graph.CustomNode`)."""

    def __init__(self, node: SetOpNode) -> None:
        self.node = node
        self.spec = node.spec

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v.lower() for v in self.spec.inputs))

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.node.columns)

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        s = self.spec
        counts = "their sum" if s.op == "union" and not s.distinct else \
            "its multiplicity in each input"
        return (f"set operation: {s.sql_name} of {', '.join(s.inputs)}; per distinct "
                f"row {counts} (O(changed rows) per epoch)")

    def maintain(self, parallelism: int = 1, eps: float | None = None,
                 native: bool | None = None, on_compile: Any = None,
                 validate: bool = True) -> SetOpState:
        return SetOpState(self.spec)

    def stage_layout(self, parallelism: int) -> InputLayout:
        partitions = max(1, parallelism)
        inputs: dict[str, list[tuple[int, Any]]] = {}
        for atom, view in enumerate(self.spec.inputs):
            inputs.setdefault(view.lower(), []).append((atom, WholeRow()))
        keys = dict.fromkeys(range(len(self.spec.inputs)), row_key)
        return InputLayout(partitions, KeyRouter(keys, partitions), inputs)  # type: ignore[arg-type]

    def stage_task(self, state: State, layout: Any) -> PartitionNode:
        return SetOpTask(self.spec, state)
