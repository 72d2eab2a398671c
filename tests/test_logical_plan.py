"""The logical plan is what the distributed runners ship (issue 44, item 1): a worker
gets :class:`~dataflow.distributed.partitions.WorkerPlan` (the plan's frozen dataclasses,
pickled), compiles the engines from it without parsing any SQL, and computes what the
local runner computes; the layout stamp of a checkpoint digests the plan's stable
rendering, and a checkpoint stamped by the SQL text (layout 11) fails loud naming its
stamp."""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from sqlglot.parser import Parser

from core.epochs import EpochCursor
from dataflow.api import compile_query
from dataflow.distributed import partitions
from dataflow.distributed.partitions import (
    StateLayoutError,
    WorkerPlan,
    check_layout,
    stamp_checkpoint_dir,
)

ROOT = Path(__file__).resolve().parent.parent
TPCH = ["q02", "q15", "q21"]
"""A correlated scalar (threshold per key), a view and a threshold over its maximum,
EXISTS and NOT EXISTS (keyed views with ON conditions)"""


def _no_parsing(mp: pytest.MonkeyPatch) -> None:
    def refuse(self: Parser, raw_tokens: list, sql: str = "") -> list:
        msg = f"a worker parsed SQL: {sql[:60]!r}"
        raise AssertionError(msg)

    mp.setattr(Parser, "parse", refuse)


@pytest.mark.parametrize("name", TPCH)
def test_a_worker_compiles_the_shipped_plan_without_parsing(
        tpch_sf001: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan round-trips through pickle, carries no SQL text, and compiles (with
    sqlglot's parser refusing every call) to stages whose deltas at P = 2 equal the
    local runner's, every epoch."""
    from connectors.files import read_updates
    from dataflow.distributed.stages import StagePlan, run_stages

    text = (tpch_sf001 / "queries" / f"{name}.sql").read_text()
    local = compile_query(text, source_name=f"{name}.sql")
    records = list(read_updates(str(tpch_sf001 / "updates.csv"), local.schema))
    want = {("delta", d.epoch): sorted(d.rows, key=repr)
            for d in local.run(records) if d.rows}
    blob = pickle.dumps(WorkerPlan.of(local, 2))
    assert b"SELECT" not in blob and b"CREATE TABLE" not in blob
    monkeypatch.setattr(partitions, "_COMPILED", {})  # (a worker's fresh process)
    _no_parsing(monkeypatch)
    shipped: WorkerPlan = pickle.loads(blob)
    assert shipped.layout_stamp() == WorkerPlan.of(local, 2).layout_stamp()
    worker, _layout = shipped.compiled()
    assert worker is not local and worker.logical.digest == local.logical.digest
    got = run_stages(StagePlan.of(worker, 2), list(EpochCursor().number(records)))
    assert {k: sorted(v, key=repr) for k, v in got.items() if k[0] == "delta"} == want


def test_every_tpch_plan_pickles_and_renders_stably(tpch_sf001: Path) -> None:
    """TPC-H's 22 plans pickle with the standard library (no closure in a compiled
    expression's namespace), and a plan renders the same after the round trip."""
    for path in sorted((tpch_sf001 / "queries").glob("q*.sql")):
        q = compile_query(path.read_text(), source_name=path.name)
        again = pickle.loads(pickle.dumps(q.logical))
        assert again.render() == q.logical.render(), path.name


_STAMP = """
import sys
from dataflow.api import compile_query
from dataflow.distributed.partitions import WorkerPlan
from plans.exprtypes import fresh_name
for _ in range(12345):  # (the generated names' numbers, of other digits than here)
    fresh_name()
for path in sys.argv[1:]:
    print(WorkerPlan.of(compile_query(open(path).read()), 2).layout_stamp())
"""

EXPRESSIONS = """CREATE TABLE R(a INT, b DOUBLE, c VARCHAR, d DATE, t TIMESTAMP, e DECIMAL(6,2));
SELECT a, CAST(t AS DATE) AS td, CAST(b AS VARCHAR) AS bs, EXTRACT(year FROM d) + a AS y,
  CAST(c AS INTEGER) AS ci, d - CAST(t AS DATE) AS days
FROM R WHERE b < 1.5 AND c ILIKE '%x_' AND c LIKE 'ab%' AND a IN (1, 2, 3)
  AND CAST(b AS DECIMAL(5,1)) > e AND CAST(e AS DOUBLE) <> b
"""
"""A value of every kind a compiled expression binds in its namespace (a LIKE test, a
run-time CAST, three-valued and DOUBLE comparisons, DATE differences)"""


def test_the_stamp_is_the_same_in_another_process(tmp_path: Path) -> None:
    """Another process (another hash seed, generated names numbered otherwise) stamps
    the same plans the same: a resumed run finds its checkpoint."""
    from connectors import tpch

    fixtures = ROOT / "tests" / "fixtures" / "parse_once"
    texts = [(fixtures / "left_join.sql").read_text(),
             tpch.query_file_text(21, (fixtures / "tpch_q21.sql").read_text()), EXPRESSIONS]
    paths = []
    for i, text in enumerate(texts):
        paths.append(tmp_path / f"q{i}.sql")
        paths[-1].write_text(text)
    here = [WorkerPlan.of(compile_query(t), 2).layout_stamp() for t in texts]
    env = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": str(ROOT)}
    there = subprocess.run([sys.executable, "-c", _STAMP, *map(str, paths)], cwd=ROOT,
                           env=env, check=True, capture_output=True, text=True, timeout=120)
    assert there.stdout.split() == here


def test_every_kind_of_bound_value_pickles_and_renders() -> None:
    plan = compile_query(EXPRESSIONS).logical
    text = pickle.loads(pickle.dumps(plan)).render()
    assert text == plan.render() and " at 0x" not in text
    assert "core.sqlfuncs._like_starts('ab')" in text


@pytest.mark.parametrize("other", [
    "SELECT a FROM R WHERE b > 0.06",           # a constant bound in generated code
    "SELECT a FROM R WHERE c LIKE 'y%' AND b > 0.05",
    "SELECT a FROM R WHERE b > 0.05 AND a IN (1, 3)",
    "SELECT a FROM R LEFT JOIN S ON a = d AND d > 2 WHERE b > 0.05",
])
def test_another_query_stamps_otherwise(other: str) -> None:
    tables = "CREATE TABLE R(a INT, b DECIMAL(5,2), c VARCHAR); CREATE TABLE S(d INT);\n"
    base = compile_query(tables + "SELECT a FROM R WHERE b > 0.05")
    assert WorkerPlan.of(compile_query(tables + other), 1).layout_stamp() != \
        WorkerPlan.of(base, 1).layout_stamp()


def _old_stamp(sql: str, plan: WorkerPlan) -> str:
    """The stamp layout 11 wrote: a digest of the SQL text and the options."""
    fields = repr((sql, plan.rates, plan.parallelism, plan.eps, plan.partitioning))
    return f"layout11-{hashlib.sha256(fields.encode()).hexdigest()[:16]}"


def test_a_checkpoint_stamped_by_the_sql_text_fails_loud(tmp_path: Path) -> None:
    """A checkpoint written under the old stamp (the SQL text's digest) is refused, the
    message naming the stamp it found and the one this run needs: never read as
    this plan's state."""
    sql = (ROOT / "tests" / "fixtures" / "parse_once" / "left_join.sql").read_text()
    plan = WorkerPlan.of(compile_query(sql), 2)
    old, new = _old_stamp(sql, plan), plan.layout_stamp()
    stamp_checkpoint_dir(tmp_path, old, resuming=False, where="flink")
    with pytest.raises(StateLayoutError) as err:
        stamp_checkpoint_dir(tmp_path, new, resuming=True, where="flink")
    assert f"written under {old}, this run needs {new}" in str(err.value)
    with pytest.raises(StateLayoutError, match=f"written under {old}"):
        check_layout(old, new, True, "spark partition 0")


def test_explain_logical_prints_the_plan_the_workers_get(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """``ivmflow explain --logical`` renders the logical plan: its views, join blocks
    and edges, the text whose digest is the layout stamp."""
    from dataflow.cli import main

    query = tmp_path / "q.sql"
    query.write_text("CREATE TABLE R(a INT, b INT); "
                     "SELECT a FROM R WHERE b > (SELECT AVG(b) FROM R)")
    assert main(["explain", "--logical", str(query)]) == 0
    out = capsys.readouterr().out
    plan = compile_query(query.read_text())
    assert out.strip() == plan.logical.render()
    assert "edges: _tv_0 -> _tf_0, _u_0 -> _tf_0, _tf_0 -> the query" in out
