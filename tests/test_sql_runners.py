"""TPC-H Q1, Q5 and Q9 as written (DATE, DECIMAL, expressions, several-table aggregates)
on the Spark and Flink runners at parallelism 1 and 2: every epoch's delta equals the
local runner's record for record (and the local runner equals DuckDB:
tests/test_sql_layer.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _deltas(query: Path, updates: Path, out: Path, *args: str) -> Counter[str]:
    argv = ["run", str(query), "--updates", str(updates), "--deltas", str(out), "--quiet",
            *args]
    if "flink" in args:  # (PyFlink's gateway beside PySpark's in one process is flaky)
        subprocess.run([sys.executable, "-m", "dataflow", *argv], cwd=ROOT, check=True,
                       timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    else:  # the command in this process: a Spark run reuses this process's JVM if any
        from dataflow.cli import main

        assert main(argv) == 0, argv
    lines = out.read_text().splitlines()
    assert lines[0].startswith("epoch,mult,")
    return Counter(lines)


class _OnFirstUse(dict[str, Any]):
    """A dict whose value for a key is made when first read: a local reference run only
    for the queries the selected cells compare with (the slice, a worker's share)."""

    def __init__(self, make: Callable[[str], Any]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, key: str) -> Any:
        self[key] = value = self._make(key)
        return value


def local_reference(data: Path, tmp: Path) -> dict[str, Counter[str]]:
    """The local runner's deltas of each query of ``data/queries`` over
    ``data/updates.csv`` (by query name), each run when first read."""
    return _OnFirstUse(lambda name: _deltas(data / "queries" / f"{name}.sql",
                                            data / "updates.csv", tmp / f"{name}.csv"))


@pytest.fixture(scope="module")
def local_deltas(tpch_sf001: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, Counter[str]]:
    return local_reference(tpch_sf001, tmp_path_factory.mktemp("local"))


# The default slice: Q1 (one block, an aggregate) on Flink at P=1, Q5 (six tables) on
# Flink at P=2 (Spark runs TPC-H in the slice as Q18's views and top-k below: a Spark
# cell costs 2-3 Flink cells); every other cell with IVMFLOW_FULL_MATRIX=1.
_SQL_SLICE = {("q01", "flink", 1), ("q05", "flink", 2)}


@pytest.mark.integration
@pytest.mark.parametrize(("name", "runner", "parallelism"), [
    pytest.param(name, runner, p,
                 marks=() if (name, runner, p) in _SQL_SLICE else pytest.mark.matrix)
    for name in ("q01", "q05", "q09") for runner in ("spark", "flink") for p in (1, 2)
])
def test_tpch_on_runner_equals_local(tpch_sf001: Path, tmp_path: Path,
                                     local_deltas: dict[str, Counter[str]],
                                     name: str, runner: str, parallelism: int) -> None:
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    got = _deltas(tpch_sf001 / "queries" / f"{name}.sql", tpch_sf001 / "updates.csv",
                  tmp_path / "out.csv", "--runner", runner, "--parallelism", str(parallelism),
                  "--checkpoint", str(tmp_path / "ckpt"))
    want = local_deltas[name]
    assert sum(want.values()) > 1
    assert got == want


@pytest.mark.integration
@pytest.mark.parametrize(("name", "runner", "parallelism"), [
    pytest.param("q01", "flink", 1),
    pytest.param("q01", "spark", 2, marks=pytest.mark.matrix),
    pytest.param("q03", "flink", 2, marks=pytest.mark.matrix),
])
def test_trust_deletes_on_runner_equals_local(tpch_sf001: Path, tmp_path: Path,
                                              local_deltas: dict[str, Counter[str]],
                                              name: str, runner: str,
                                              parallelism: int) -> None:
    """``--trust-deletes`` on Spark and Flink: the join partitions check no delete and
    keep no tuple for it (an aggregate's sums at its keys), and on a consistent stream
    every epoch equals the local runner's (which checks)."""
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    got = _deltas(tpch_sf001 / "queries" / f"{name}.sql", tpch_sf001 / "updates.csv",
                  tmp_path / "out.csv", "--runner", runner, "--parallelism", str(parallelism),
                  "--checkpoint", str(tmp_path / "ckpt"), "--trust-deletes")
    want = local_deltas[name]
    assert sum(want.values()) > 1
    assert got == want
    # (the job's state was written in the trusting layout: the flag reached the workers)
    from dataflow.api import compile_query
    from dataflow.distributed.partitions import LAYOUT_FILE, WorkerPlan

    q = compile_query((tpch_sf001 / "queries" / f"{name}.sql").read_text())
    stamp = (tmp_path / "ckpt" / LAYOUT_FILE).read_text().strip()
    assert stamp == WorkerPlan.of(q, parallelism, trust_deletes=True).layout_stamp()
    assert stamp != WorkerPlan.of(q, parallelism).layout_stamp()


_ORDERED = ("CREATE TABLE R(a INT, b INT);\n"
            "SELECT a, SUM(b) AS s FROM R GROUP BY a ORDER BY s DESC, a;\n")
_ORDERED_UPDATES = "+,R,1,5\n+,R,2,7\n+,R,3,1\n+,R,4,7\n*\n+,R,3,10\n*\n"
_ORDERED_SNAPSHOTS = ("snapshot,mult,a,s\n1,1,2,7\n1,1,4,7\n1,1,1,5\n1,1,3,1\n"
                      "2,1,3,11\n2,1,2,7\n2,1,4,7\n2,1,1,5\n")


@pytest.mark.parametrize("runner", ["local", pytest.param("flink", marks=pytest.mark.integration)])
def test_snapshots_are_written_in_order_by_order(tmp_path: Path, runner: str) -> None:
    """ORDER BY orders every snapshot file, also when partitions' rows were merged."""
    if runner != "local":
        pytest.importorskip("pyflink")
    query, updates = tmp_path / "q.sql", tmp_path / "u.csv"
    query.write_text(_ORDERED)
    updates.write_text(_ORDERED_UPDATES)
    snaps = tmp_path / "snaps.csv"
    extra = [] if runner == "local" else ["--checkpoint", str(tmp_path / "ckpt")]
    _deltas(query, updates, tmp_path / "d.csv", "--runner", runner, "--parallelism", "2",
            "--snapshots", str(snaps), *extra)
    assert snaps.read_text() == _ORDERED_SNAPSHOTS


_MINMAX = ("CREATE TABLE R(a INT, b DECIMAL(6,2), c VARCHAR);\n"
           "SELECT a, MIN(b) AS lo, MAX(c) AS hi, COUNT(DISTINCT c) AS n, "
           "SUM(DISTINCT b) AS s FROM R GROUP BY a;\n")


@pytest.mark.integration
@pytest.mark.parametrize("runner", ["spark", "flink"])
def test_min_max_and_distinct_aggregates_on_runners(tmp_path: Path, runner: str) -> None:
    """MIN/MAX (deletes of the current minimum included) and DISTINCT aggregates keep
    their per-group multisets in the runners' keyed state: equal to the local runner."""
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    query = tmp_path / "q.sql"
    query.write_text(_MINMAX)
    updates = ROOT / "tests/fixtures/minmax_updates.csv"
    want = _deltas(query, updates, tmp_path / "local.csv")
    got = _deltas(query, updates, tmp_path / "out.csv", "--runner", runner,
                  "--parallelism", "2", "--checkpoint", str(tmp_path / "ckpt"))
    assert sum(want.values()) > 100
    assert got == want


_MATRIX_CELL = pytest.mark.matrix
"""(Spark's cell: 3.5 minutes on a loaded 2-core machine, Flink's 36 s.)"""

_TPCDS_SHAPES = ("CREATE TABLE R(a INT, b DECIMAL(6,2), c VARCHAR);\n"
                 "SELECT a, c, n, RANK() OVER (PARTITION BY a ORDER BY n DESC, c) AS r\n"
                 "FROM (SELECT a, c, COUNT(*) AS n FROM (SELECT a, c FROM R WHERE b > 0 "
                 "UNION ALL SELECT a, c FROM R WHERE b < 1) u GROUP BY ROLLUP(a, c)) t;\n")
"""A set operation, grouping sets (a UNION ALL of three GROUP BYs) and a window
function over them: each a stage of its own on Spark and Flink."""


@pytest.mark.integration
@pytest.mark.parametrize("runner", [pytest.param("spark", marks=_MATRIX_CELL), "flink"])
def test_set_operations_grouping_sets_and_windows_on_runners(tmp_path: Path,
                                                             runner: str) -> None:
    """The stages of issue 42's node kinds (set operation: rows partitioned by value;
    window: by PARTITION BY) on the JVM runners at P = 2: equal to the local runner,
    epoch by epoch (the local runner equals DuckDB: tests/test_setops.py,
    test_grouping.py, test_windows.py)."""
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    query = tmp_path / "q.sql"
    query.write_text(_TPCDS_SHAPES)
    updates = ROOT / "tests/fixtures/minmax_updates.csv"
    want = _deltas(query, updates, tmp_path / "local.csv", "--no-native")
    got = _deltas(query, updates, tmp_path / "out.csv", "--runner", runner,
                  "--parallelism", "2", "--checkpoint", str(tmp_path / "ckpt"))
    assert sum(want.values()) > 100
    assert got == want


# A query as keyed stages (dataflow/distributed/stages.py): TPC-H Q4 (EXISTS: a semi-join view),
# Q17 (a correlated scalar subquery: a grouped view), Q18 (IN over GROUP BY ... HAVING,
# then ORDER BY ... LIMIT: views and the global top-k stage) and Q3 (top-k).
_STAGED = ("q03", "q04", "q17", "q18")
_KEYED = ("q13", "q16", "q21", "q22")
"""Outer joins and anti-joins: keyed views as stages (operators/keyedview.py); Q21's
EXISTS and NOT EXISTS, over lineitem as its outer row is, are inner joins with count
views (plans/subqueries.py), four view stages."""


def _staged_outputs(tpch: Path, name: str, out: Path, *args: str) -> tuple[Counter[str], str]:
    """A run's deltas (as a multiset of lines) and its snapshot file, byte for byte."""
    snaps = out.with_suffix(".snapshots.csv")
    deltas = _deltas(tpch / "queries" / f"{name}.sql", tpch / "updates.csv", out,
                     "--snapshots", str(snaps), *args)
    return deltas, snaps.read_text()


@pytest.fixture(scope="module")
def local_staged(tpch_sf001: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, tuple[Counter[str], str]]:
    tmp = tmp_path_factory.mktemp("local_staged")
    return _OnFirstUse(lambda name: _staged_outputs(tpch_sf001, name, tmp / f"{name}.csv"))


_MATRIX = pytest.mark.matrix


@pytest.mark.integration
@pytest.mark.parametrize(("runner", "name", "parallelism"), [
    # The default slice: Q18 (view stages and the global top-k stage) on both runners at
    # P=2, Q17 (a view keyed apart from its reader) on Flink at P=1, Q22 (NOT EXISTS: a
    # keyed view padding customers without orders, by join key) and Q11 (a threshold
    # view: HAVING against a moving uncorrelated scalar) on Flink at P=2. The rest with
    # IVMFLOW_FULL_MATRIX=1 (bench/tpch_runners_all.py: every query, runner and P).
    *[pytest.param("flink", name, p, marks=() if (name, p) in {("q18", 2), ("q17", 1)}
                   else _MATRIX) for name in _STAGED for p in (1, 2)],
    pytest.param("spark", "q18", 1, marks=_MATRIX), ("spark", "q18", 2),
    pytest.param("spark", "q17", 2, marks=_MATRIX),
    ("flink", "q22", 2), pytest.param("spark", "q22", 2, marks=_MATRIX),
    ("flink", "q11", 2),
])
def test_tpch_views_and_topk_on_runner_equal_local(
        tpch_sf001: Path, tmp_path: Path, local_staged: dict[str, tuple[Counter[str], str]],
        runner: str, name: str, parallelism: int) -> None:
    """Each view a stage keyed by its own keys, a stage's epoch delta applied to its
    readers in the same epoch, top-k one global window: every epoch's delta and every
    snapshot equal the local runner's."""
    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    got = _staged_outputs(tpch_sf001, name, tmp_path / "out.csv", "--runner", runner,
                          "--parallelism", str(parallelism),
                          "--checkpoint", str(tmp_path / "ckpt"))
    want = local_staged[name]
    assert sum(want[0].values()) > 1 and want[1].count("\n") > 1
    assert got == want


@pytest.mark.parametrize("name", [*_STAGED, "q11", "q15"])
def test_stages_in_process_equal_local(tpch_sf001: Path, name: str) -> None:
    """The stages of dataflow/distributed/stages.py run slot by slot in one process (no JVM), at
    P=2 with channels interleaved as Flink may deliver them (an upstream stage's delta
    after the next epoch's base rows): the query's deltas equal the local runner's, and
    no stage but a global one is forced onto one partition."""
    from connectors.files import read_updates
    from core.epochs import EpochCursor
    from dataflow.api import compile_query
    from dataflow.distributed.stages import StagePlan, run_stages

    q = compile_query((tpch_sf001 / "queries" / f"{name}.sql").read_text())
    records = list(read_updates(str(tpch_sf001 / "updates.csv"), q.schema))
    want = {("delta", d.epoch): sorted(d.rows) for d in q.run(records) if d.rows}
    plan = StagePlan.of(q, 2)
    # Only the global stages (a top-k window, the finalizer of an aggregate
    # without GROUP BY: Q17's query, Q11's and Q15's scalar views; the threshold
    # view comparing Q11's and Q15's rows with that scalar) are one partition.
    assert all(s.layout.partitions == 2 for s in plan.stages
               if s.vertex.kind in ("query", "keyed") and s.part != "finalize"), name
    got = run_stages(plan, list(EpochCursor().number(records)), late_upstream=True)
    assert {k: sorted(v) for k, v in got.items() if k[0] == "delta"} == want, name


def _sql_layer_stream(seed: int) -> list[object]:
    """Five epochs of random R and S rows (tests/test_sql_layer.py's), 40% deletes."""
    import random

    from core.records import EPOCH_END, Update
    from tests import test_sql_layer as layer

    rng = random.Random(seed)
    records: list[object] = []
    live: list[tuple[str, tuple[object, ...]]] = []
    for _epoch in range(5):
        for _ in range(rng.randrange(1, 15)):
            if live and rng.random() < 0.4:
                rel, row = live.pop(rng.randrange(len(live)))
                records.append(Update("-", rel, row))
            else:
                rel, row = layer._random_rows(rng)
                live.append((rel, row))
                records.append(Update("+", rel, row))
        records.append(EPOCH_END)
    return records


@pytest.mark.parametrize("case", [*_KEYED, "sql_layer_queries"])
def test_keyed_views_as_stages_equal_local(tpch_sf001: Path, case: str) -> None:
    """Outer joins and anti-joins (TPC-H Q13, Q16, Q21, Q22, one a test, and the SQL
    layer's outer join and threshold view queries on random streams with deletes) as
    stages at P=1 and 2, channels interleaved: every epoch's delta equals the local
    runner's."""
    from connectors.files import read_updates
    from core.epochs import EpochCursor
    from dataflow.api import compile_query
    from dataflow.distributed.stages import StagePlan, run_stages
    from tests import test_sql_layer as layer

    if case in _KEYED:
        q = compile_query((tpch_sf001 / "queries" / f"{case}.sql").read_text())
        cases = [(case, q, list(read_updates(str(tpch_sf001 / "updates.csv"), q.schema)))]
    else:
        cases = [(sql, compile_query(layer._SCHEMA + sql), _sql_layer_stream(i))
                 for i, sql in enumerate(layer._OUTER_QUERIES + layer._THRESHOLD_QUERIES)]
    for name, q, records in cases:
        want = {("delta", d.epoch): sorted(d.rows, key=repr) for d in q.run(records) if d.rows}
        for parallelism in (1, 2):
            got = run_stages(StagePlan.of(q, parallelism), list(EpochCursor().number(records)),
                             late_upstream=True)
            assert {k: sorted(v, key=repr) for k, v in got.items() if k[0] == "delta"} == \
                want, (name, parallelism)


def test_stage_plan_refuses_a_node_it_cannot_host() -> None:
    """A DAG node of no known kind (and no CustomNode) fails loud before any job
    starts, naming the view."""
    from core.errors import UnsupportedQueryError
    from dataflow.api import compile_query
    from dataflow.distributed.stages import StagePlan

    q = compile_query("CREATE TABLE R(a INT, b INT);\n"
                      "SELECT a FROM R WHERE b > (SELECT AVG(b) FROM R)")
    q.inner[0] = (q.inner[0][0], object())
    with pytest.raises(UnsupportedQueryError, match="view _u_0: a object is no node kind"):
        StagePlan.of(q, 2)


def test_a_stage_node_plugs_in() -> None:
    """A DAG node of a kind from outside runs as a stage through the CustomNode
    interface (what it reads, its layout and its task, a node): here the view's own
    engine behind it."""
    from core.epochs import EpochCursor
    from core.records import EPOCH_END, Update
    from dataflow.api import compile_query
    from dataflow.circuit.graph import CustomNode
    from dataflow.distributed.partitions import PartitionLayout, PartitionTask
    from dataflow.distributed.stages import StagePlan, run_stages
    from operators.node import LocalNode
    from operators.state import State

    class Wrapped(CustomNode):
        def __init__(self, q: Any) -> None:
            self.q = q

        @property
        def reads(self) -> tuple[str, ...]:
            return tuple(a.relation.name for a in self.q.cq.atoms)

        def maintain(self, parallelism: int = 1, eps: float | None = None,
                     native: bool | None = None, on_compile: Any = None,
                     validate: bool = True) -> LocalNode:
            return self.q.maintain(parallelism, eps, native, on_compile, validate=validate)

        def stage_layout(self, parallelism: int) -> PartitionLayout:
            return PartitionLayout(self.q, parallelism, keyed=True)

        def stage_task(self, state: State, layout: Any) -> PartitionTask:
            return PartitionTask(self.q, layout, state=state)

    q = compile_query("CREATE TABLE R(a INT, b INT);\n"
                      "SELECT a FROM R WHERE b > (SELECT AVG(b) FROM R)")
    records = [Update("+", "R", (a, 10 * a)) for a in range(1, 5)] + [EPOCH_END]
    records += [Update("-", "R", (4, 40)), EPOCH_END]
    want = {("delta", d.epoch): sorted(d.rows) for d in q.run(records) if d.rows}
    q.inner[0] = (q.inner[0][0], Wrapped(q.inner[0][1]))
    got = run_stages(StagePlan.of(q, 2), list(EpochCursor().number(records)))
    assert {k: sorted(v) for k, v in got.items() if k[0] == "delta"} == want
    # (and on the local runner, live through its maintain())
    assert {("delta", d.epoch): sorted(d.rows) for d in q.run(records) if d.rows} == want
