"""The Dataflow: a frozen graph of operator specs, the description of one compiled
join block that ``ivmflow explain`` prints.

Each query kind describes its plan as one (:func:`plans.dag.compile_dataflow` for
CROWN, ``compile_triangle_dataflow``, ``compile_ghd_dataflow`` and
``compile_hierarchical_dataflow`` in :mod:`plans.triangle`, :mod:`plans.ghd` and
:mod:`plans.hierarchical`). It is not what runs: a query runs as the circuit of
:mod:`dataflow.circuit.graph`, whose nodes the kinds build from their plans (the
CROWN engine names its join-tree nodes after the DAG's semi-join steps). Building it
never touches an execution engine. It renders to deterministic text (golden tests) and
converts to a networkx DiGraph.

Example:
    >>> g = Dataflow("demo", (Op("source", "source", ()), Op("sink", "sink", ())),
    ...              (Edge("source", "sink", "deltas"),))
    >>> print(g.render())
    dataflow demo
      source  source
      sink    sink
      source -> sink  [deltas]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import networkx as nx


@dataclass(frozen=True)
class Op:
    """One operator: a unique dot-free id, its kind, and its parameters as sorted
    (name, value) pairs (values are plain data)."""

    id: str
    kind: str
    params: tuple[tuple[str, Any], ...]

    def param(self, name: str, default: Any = None) -> Any:
        for k, v in self.params:
            if k == name:
                return v
        return default

    def render(self) -> str:
        if not self.params:
            return self.kind
        inner = ", ".join(f"{k}={_fmt(v)}" for k, v in self.params)
        return f"{self.kind}({inner})"


def _fmt(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt(x) for x in v) + ")"
    return str(v)


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    label: str = ""


@dataclass(frozen=True)
class Dataflow:
    """The operator DAG of one compiled query."""

    name: str
    ops: tuple[Op, ...]
    edges: tuple[Edge, ...]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for op in self.ops:
            if op.id in seen:
                msg = f"step {op.id!r} already exists; do you have two steps with the same id?"
                raise ValueError(msg)
            if "." in op.id:
                msg = f"step id {op.id!r} must not contain '.'"
                raise ValueError(msg)
            seen.add(op.id)
        for e in self.edges:
            for end in (e.src, e.dst):
                if end not in seen:
                    msg = f"edge {e.src} -> {e.dst} names unknown step {end!r}"
                    raise ValueError(msg)

    def op(self, op_id: str) -> Op:
        for op in self.ops:
            if op.id == op_id:
                return op
        raise KeyError(op_id)

    def to_networkx(self) -> nx.DiGraph:
        g = nx.DiGraph(name=self.name)
        for op in self.ops:
            g.add_node(op.id, kind=op.kind, **dict(op.params))
        for e in self.edges:
            g.add_edge(e.src, e.dst, label=e.label)
        if not nx.is_directed_acyclic_graph(g):  # pragma: no cover - compiler bug guard
            msg = "the compiled dataflow has a cycle"
            raise AssertionError(msg)
        return g

    def render(self) -> str:
        """Operators in a deterministic topological order, then the edges."""
        g = self.to_networkx()
        position = {op.id: i for i, op in enumerate(self.ops)}
        order = list(nx.lexicographical_topological_sort(g, key=lambda n: f"{position[n]:05d}"))
        width = max(len(o) for o in order)
        lines = [f"dataflow {self.name}"]
        for op_id in order:
            lines.append(f"  {op_id.ljust(width)}  {self.op(op_id).render()}")
        for e in sorted(self.edges, key=lambda e: (position[e.src], position[e.dst], e.label)):
            label = f"  [{e.label}]" if e.label else ""
            lines.append(f"  {e.src} -> {e.dst}{label}")
        return "\n".join(lines)
