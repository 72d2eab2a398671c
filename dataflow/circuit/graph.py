"""The circuit a query runs as: its nodes and the edges between them, built in one place
(:func:`build_circuit`) from the compiled query - its inner views in closing order, the
query itself over them, and the ``ORDER BY ... LIMIT`` window over the query's result -
and read by both executors: the local runner's DAG of live views
(:class:`dataflow.circuit.views.DagView`) and the distributed runners' keyed stages
(:class:`dataflow.distributed.stages.StagePlan`, one or two stages per vertex, their channels
from the circuit's edges).

A vertex has a kind: ``query`` (a compiled query: CROWN, GHD, triangle or view trees),
``keyed`` (an outer join's keyed view), ``threshold`` (a threshold view), ``window``
(top-k) or ``custom`` (a node kind from outside, :class:`CustomNode`). Whatever runs a
vertex runs it through the node protocol (:mod:`operators.node`); a compiled node of
no known kind is refused here, naming its view, before any input is read or any job
starts. Locally one process sees the whole result, so the query's own finalizer applies
the window (the window vertex is fused into the query's); on Spark and Flink the window
is a stage of its own.

Example:
    >>> from dataflow.api import compile_query
    >>> from dataflow.circuit.views import circuit_of
    >>> c = circuit_of(compile_query('''CREATE TABLE R(a INT, b INT);
    ...     SELECT a, b FROM R WHERE b > (SELECT AVG(b) FROM R) ORDER BY b LIMIT 1'''))
    >>> [(v.name, v.kind, v.reads, v.readers) for v in c.vertices]  # doctest: +NORMALIZE_WHITESPACE
    [('_u_0', 'query', ('r',), [2]), ('_tv_0', 'query', ('r',), [2]),
     ('_tf_0', 'threshold', ('_tv_0', '_u_0'), [3]), ('\\x00result', 'query', ('_tf_0',), [4]),
     ('', 'window', ('\\x00result',), [])]
    >>> [v.name for v in c.readers_of("R")]
    ['_u_0', '_tv_0']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from core.errors import UnsupportedQueryError
from operators.keyedview import CompiledKeyedView
from operators.node import LocalNode, Node, PartitionNode
from operators.state import State
from operators.threshold import CompiledThreshold

if TYPE_CHECKING:
    from dataflow.api import CompiledQuery
    from plans.cq import ConjunctiveQuery

__all__ = ["RESULT", "Circuit", "CustomNode", "QueryNode", "Vertex", "VertexKind",
           "build_circuit"]

RESULT = "\x00result"
"""The relation the window reads: the query's result before its ``LIMIT``."""

VertexKind = Literal["query", "keyed", "threshold", "window", "custom"]


@runtime_checkable
class QueryNode(Protocol):
    """A compiled query as a vertex reads it (:class:`dataflow.api.CompiledQuery`)."""

    @property
    def cq(self) -> ConjunctiveQuery: ...

    @property
    def plan(self) -> Any: ...

    def maintain(self, parallelism: int = 1, eps: float | None = None,
                 native: bool | None = None, on_compile: Any = None,
                 validate: bool = True, keep_rows: bool = False) -> LocalNode: ...


@runtime_checkable
class CustomNode(Protocol):
    """A node kind from outside ivmflow's own: what it reads, how it runs live on the
    local runner (``maintain``), and as a stage on Spark and Flink: its layout
    (``partitions``; ``inputs``: relation -> [(atom, projector with ``project(row)``)];
    ``partitioner.route(atom, tuple)`` -> its partitions) and one partition's task,
    all its state in ``state``'s maps."""

    @property
    def reads(self) -> tuple[str, ...]: ...

    def maintain(self, parallelism: int = 1, eps: float | None = None,
                 native: bool | None = None, on_compile: Any = None,
                 validate: bool = True) -> LocalNode: ...

    def stage_layout(self, parallelism: int) -> Any: ...

    def stage_task(self, state: State, layout: Any) -> PartitionNode: ...


@dataclass
class Vertex:
    """One node of the circuit: the relation it writes (``""``: the query's result),
    its kind and compiled node (None for the window), the relations it reads (lower
    case) and the vertices that read it (the circuit's edges)."""

    index: int
    name: str
    kind: VertexKind
    node: Any
    reads: tuple[str, ...]
    readers: list[int] = field(default_factory=list)
    window: ConjunctiveQuery | None = None
    """The window's query (its ORDER BY, LIMIT and OFFSET); None elsewhere."""

    def live(self, parallelism: int = 1, eps: float | None = None,
             native: bool | None = None, on_compile: Any = None) -> LocalNode:
        """The live node of this vertex on the local runner (no delete check of its
        own: the circuit's executor checks base deletes once)."""
        node = self.node.maintain(parallelism, eps, native, on_compile, validate=False)
        if not isinstance(node, Node):
            msg = (f"view {self.name}: {type(self.node).__name__}.maintain() made a "
                   f"{type(node).__name__}, not a node (operators.node.Node)")
            raise UnsupportedQueryError(msg)
        return node


class Circuit:
    """The vertices of a query in closing order (each after every vertex it reads),
    with their edges."""

    def __init__(self, vertices: list[Vertex]) -> None:
        self.vertices = vertices
        self.by_name = {v.name.lower(): v for v in vertices if v.name}
        for v in vertices:
            for rel in v.reads:
                up = self.by_name.get(rel)
                if up is not None:
                    up.readers.append(v.index)

    @property
    def query(self) -> Vertex:
        """The query's own vertex (before its window, if it has one)."""
        return next(v for v in reversed(self.vertices) if v.kind != "window")

    @property
    def window(self) -> Vertex | None:
        last = self.vertices[-1]
        return last if last.kind == "window" else None

    def readers_of(self, relation: str) -> list[Vertex]:
        """The vertices reading ``relation`` (a base table or a view), in order."""
        rel = relation.lower()
        return [v for v in self.vertices if rel in v.reads]


def _vertex(index: int, name: str, node: Any) -> Vertex:
    """The vertex of one compiled node, by its kind; a node of no known kind is refused
    naming its view."""
    if isinstance(node, (CompiledKeyedView, CompiledThreshold)):
        kind: VertexKind = "keyed" if isinstance(node, CompiledKeyedView) else "threshold"
        return Vertex(index, name, kind, node, tuple(node.reads))
    if isinstance(node, CustomNode):
        return Vertex(index, name, "custom", node, tuple(r.lower() for r in node.reads))
    if isinstance(node, QueryNode):
        reads = tuple(dict.fromkeys(a.relation.name.lower() for a in node.cq.atoms))
        return Vertex(index, name, "query", node, reads)
    msg = (f"view {name or '(the query)'}: a {type(node).__name__} is no node kind a "
           "circuit runs (a compiled query, a keyed or threshold view, or a node "
           "implementing dataflow.circuit.graph.CustomNode)")
    raise UnsupportedQueryError(msg)


def build_circuit(inner: Sequence[tuple[str, Any]], outer: CompiledQuery | QueryNode
                  ) -> Circuit:
    """The circuit of a query: ``inner`` (name, compiled view) in closing order, then
    the query ``outer`` over them, then its window if it has ``LIMIT`` or ``OFFSET``."""
    vertices = [_vertex(i, name, node) for i, (name, node) in enumerate(inner)]
    query = _vertex(len(vertices), "", outer)
    vertices.append(query)
    cq = outer.cq
    if cq.limit is not None or cq.offset:
        query.name = RESULT
        vertices.append(Vertex(len(vertices), "", "window", None, (RESULT,), window=cq))
    return Circuit(vertices)
