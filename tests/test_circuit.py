"""The circuit and its one node protocol (issue 44, item 2): every kind of node a
compiled query runs as, on the local runner and as a stage partition on Spark and
Flink, is an :class:`operators.node.Node`; a node kind that is not is refused, naming
its view, before any input is read or any job starts."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import UnsupportedQueryError
from dataflow.api import compile_query
from dataflow.circuit.graph import CustomNode
from dataflow.circuit.views import DagView, circuit_of
from dataflow.distributed.stages import StagePlan
from operators.node import LocalNode, Node, PartitionNode
from operators.state import State
from operators.writeback import WriteBackState

_QUERIES = {
    "crown": ("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c INT);"
              "SELECT R.a, S.c FROM R, S WHERE R.b = S.b", {}),
    "triangle": ("CREATE TABLE G(src INT, dst INT); SELECT COUNT(*) FROM G a, G b, G c "
                 "WHERE a.dst = b.src AND b.dst = c.src AND c.dst = a.src", {}),
    "ghd": ("CREATE TABLE E(x INT, y INT); SELECT a.x, b.x, c.x, d.x FROM E a, E b, E c, "
            "E d WHERE a.y = b.x AND b.y = c.x AND c.y = d.x AND d.y = a.x", {}),
    "view trees": ("CREATE TABLE R(a INT); CREATE TABLE S(a INT, b INT);"
                   "SELECT S.b FROM R, S WHERE R.a = S.a", {"view_trees": True}),
    "outer join": ("CREATE TABLE A(x INT); CREATE TABLE B(y INT, z INT);"
                   "SELECT A.x, B.z FROM A LEFT JOIN B ON A.x = B.y", {}),
    "threshold, global finalizer, top-k": (
        "CREATE TABLE R(a INT, b INT);"
        "SELECT a, b FROM R WHERE b > (SELECT AVG(b) FROM R) ORDER BY b DESC LIMIT 2", {}),
}


def test_every_node_kind_of_a_compiled_circuit_is_a_node() -> None:
    """Each query's circuit, live on the local runner and as stages at P = 2: every node
    (and every stage partition's task) is a Node, and the queries cover every kind."""
    live: set[str] = set()
    tasks: set[str] = set()
    engines: set[str] = set()
    for name, (sql, options) in _QUERIES.items():
        q = compile_query(sql, **options)
        view = q.maintain()
        assert isinstance(view, Node), name
        nodes = list(view.nodes.values()) if isinstance(view, DagView) else [view]
        for node in [view, *nodes]:
            assert isinstance(node, Node), (name, node)
            live.add(type(node).__name__)
            engines.update(type(e).__name__ for e in getattr(node, "engines", ()))
        plan = StagePlan.of(q, 2)
        assert [s.vertex.index for s in plan.stages if s.part != "partial"] == \
            [v.index for v in circuit_of(q).vertices], name
        for stage in plan.stages:
            task = stage.task(WriteBackState())
            assert isinstance(task, Node), (name, stage.name)
            assert task.state_maps() == plan.map_names(stage.index)
            tasks.add(type(task).__name__)
    assert live == {"View", "DagView", "KeyedViewState", "ThresholdState"}
    assert engines == {"Engine", "TriangleEngine", "GhdEngine", "HierarchicalEngine"}
    assert tasks == {"PartitionTask", "KeyedViewTask", "ThresholdTask", "TopKTask",
                     "PartialTask", "FinalizeTask"}


def _dag() -> Any:
    return compile_query("CREATE TABLE R(a INT, b INT);\n"
                         "SELECT a FROM R WHERE b > (SELECT AVG(b) FROM R)")


class _Custom(CustomNode):
    """A node kind from outside, around a compiled query, whose live node or stage task
    can be made wrong on purpose."""

    def __init__(self, q: Any, live: Any = None, task: Any = None) -> None:
        self.q, self.live, self.task = q, live, task

    @property
    def reads(self) -> tuple[str, ...]:
        return ("r",)

    def maintain(self, parallelism: int = 1, eps: float | None = None,
                 native: bool | None = None, on_compile: Any = None,
                 validate: bool = True) -> LocalNode:
        return self.live if self.live is not None else self.q.maintain(validate=validate)

    def stage_layout(self, parallelism: int) -> Any:
        from dataflow.distributed.partitions import PartitionLayout

        return PartitionLayout(self.q, parallelism, keyed=True)

    def stage_task(self, state: State, layout: Any) -> PartitionNode:
        from dataflow.distributed.partitions import PartitionTask

        return self.task if self.task is not None else PartitionTask(self.q, layout,
                                                                     state=state)


def test_a_node_of_no_known_kind_is_refused_before_a_job_starts() -> None:
    """An inner view that is neither a compiled query, a keyed or threshold view, nor a
    CustomNode: both executors refuse the circuit, naming the view, before any input."""
    q = _dag()
    q.inner[0] = (q.inner[0][0], object())
    for build in (lambda: StagePlan.of(q, 2), q.maintain):
        with pytest.raises(UnsupportedQueryError,
                           match=r"view _u_0: a object is no node kind a circuit runs"):
            build()


def test_a_custom_node_whose_task_is_no_node_is_refused_before_a_job_starts() -> None:
    """A CustomNode whose stage task (or live node) does not implement the protocol is
    refused when the stage plan (the local DAG) is built: before the runner's job."""
    q = _dag()
    name, inner = q.inner[0]
    q.inner[0] = (name, _Custom(inner, task=object()))
    with pytest.raises(UnsupportedQueryError, match=r"view _u_0: _Custom.stage_task\(\) "
                       r"made a object, not a node \(operators.node.Node\)"):
        StagePlan.of(q, 2)
    q.inner[0] = (name, _Custom(inner, live=object()))
    with pytest.raises(UnsupportedQueryError, match=r"view _u_0: _Custom.maintain\(\) "
                       r"made a object, not a node"):
        q.maintain()
    q.inner[0] = (name, _Custom(inner))
    assert isinstance(StagePlan.of(q, 2).stages[0].task(WriteBackState()), Node)
    assert isinstance(q.maintain(), DagView)
