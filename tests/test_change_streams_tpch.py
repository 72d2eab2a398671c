"""TPC-H as a database's change stream (issue 43), on the local runner and the real
broker of the ``kafka_bootstrap`` fixture.

``ivmflow generate tpch --sf 0.001 --refresh-pairs 2`` (the load, then RF1, RF2, UPD
twice: 7 epochs) is written by ``ivmflow produce --format debezium-json`` as Debezium
events, one source transaction per epoch with its metadata on ``PREFIX.transaction``,
two partitions per table:

* ``full``: the spec's schema (no keys), full before-images (REPLICA IDENTITY FULL):
  each update one ``c`` or ``d`` event;
* ``key``: the schema with the spec's PRIMARY KEYs (``connectors.tpch.schema_sql(keys=
  ...)``) and key-only before-images (Postgres' default): UPD's changes are ``u``
  events with ``before = null``, RF2's deletes ``d`` events with only the key (a
  composite one for lineitem), so ivmflow's upsert state supplies the old rows.
  Except partsupp: at this scale dbgen repeats 100 of its ``(ps_partkey, ps_suppkey)``
  pairs, so it has no key and full before-images (REPLICA IDENTITY FULL), as a table
  without a primary key in a Postgres database would.

For TPC-H Q9 (six tables; RF1, RF2 and partsupp's UPD change it), Q10 (customer's UPD)
and Q13 (an outer join; RF1 and RF2): the run over the topics (one epoch per
transaction) gives, epoch by epoch, the deltas of the same stream read from the update
CSV, and the result after every transaction equals DuckDB's answer on the database
after that transaction (tests/tpch_oracle.py).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import tpch_oracle as to

from connectors.files import read_updates
from connectors.kafka import parse_kafka_url, read_deltas
from core.records import format_value
from dataflow.api import compile_query
from dataflow.cli import main

SF = 0.001
TRANSACTIONS = 7  # load, then (RF1, RF2, UPD) x 2
QUERIES = (9, 10, 13)

Epochs = dict[int, Counter[tuple[str, ...]]]


def _text(mult: int, row: Any) -> tuple[str, ...]:
    return (str(mult), *(format_value(v) for v in row))


@pytest.fixture(scope="module")
def tpch_stream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return to.generate(tmp_path_factory.mktemp("tpch_changes"), sf=SF, refresh_pairs=2,
                       seed=0)


@pytest.fixture(scope="module")
def expected(tpch_stream: Path) -> dict[int, tuple[Epochs, list[list[to.Row]]]]:
    """Per query: the update CSV's deltas per epoch (text) and DuckDB's answer after
    every epoch (= transaction)."""
    updates = tpch_stream / "updates.csv"
    paths = {q: tpch_stream / "queries" / f"q{q:02d}.sql" for q in QUERIES}
    duck = to.duckdb_answers_many(tpch_stream / "schema.sql", updates,
                                  {str(q): p for q, p in paths.items()})
    out = {}
    for q, path in paths.items():
        cq = compile_query(path.read_text())
        csv_epochs = {d.epoch: Counter(_text(m, r) for m, r in d.rows)
                      for d in cq.run(read_updates(updates, cq.schema)) if d.rows}
        assert len(duck[str(q)]) == TRANSACTIONS
        out[q] = (csv_epochs, duck[str(q)])
    return out


def _kafka_rows(url: str) -> list[tuple[int, int, tuple[Any, ...]]]:
    return [(e, m, tuple(row.values())) for e, m, row in read_deltas(parse_kafka_url(url))]


def _ops(bootstrap: str, topic: str, columns: int) -> Counter[tuple[str, bool]]:
    """(op, the before-image has all ``columns``) of a topic's events."""
    from connectors.kafka.topics import _read_committed

    recs, _whole = _read_committed(parse_kafka_url(f"kafka://{bootstrap}/{topic}"), topic,
                                   lambda b, e: b)
    out: Counter[tuple[str, bool]] = Counter()
    for rec in recs:
        ev = json.loads(rec.value)
        out[ev["op"], len(ev["before"] or ()) == columns] += 1
    return out


@pytest.mark.parametrize("before_images", ["full", "key"])
def test_tpch_debezium_stream_per_transaction(
        kafka_bootstrap: str, tpch_stream: Path, tmp_path: Path, before_images: str,
        expected: dict[int, tuple[Epochs, list[list[to.Row]]]]) -> None:
    from connectors import tpch

    keyed = before_images == "key"
    schema = tpch.schema_sql(keys=[t for t in tpch.TABLES if t != "partsupp"] if keyed
                             else False)
    files = {}
    for q in QUERIES:
        text = (tpch_stream / "queries" / f"q{q:02d}.sql").read_text()
        files[q] = tmp_path / f"q{q:02d}.sql"
        files[q].write_text(f"{schema}\n{to.query_part(text)};\n")
    prefix = f"tpch{os.urandom(4).hex()}"
    assert main(["produce", str(tpch_stream / "updates.csv"), f"kafka://{kafka_bootstrap}/"
                 f"{prefix}", "--format", "debezium-json", "--query", str(files[QUERIES[0]]),
                 "--partitions", "2", "--before-images", before_images, "--quiet"]) == 0
    # What the customer table's topic holds: the load and UPD's changes of 2 x 3 rows.
    ops = _ops(kafka_bootstrap, f"{prefix}.public.customer", 8)
    if keyed:
        assert ops == {("c", False): 150, ("u", False): 6}  # u: before = null
    else:
        assert ops == {("c", False): 156, ("d", True): 6}
    source = (f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
              f"&transactions={prefix}.transaction")
    for q in QUERIES:
        deltas = f"kafka://{kafka_bootstrap}/{prefix}-q{q}"
        assert main(["run", str(files[q]), "--updates", source, "--deltas", deltas,
                     "--stop-at-end", "--quiet", "--no-native"]) == 0
        rows = _kafka_rows(deltas)
        got: Epochs = {}
        for epoch, mult, row in rows:
            got.setdefault(epoch, Counter())[_text(mult, row)] += 1
        csv_epochs, duck = expected[q]
        assert got == csv_epochs, f"Q{q}: the deltas differ from the update CSV's"
        answers = to.accumulate_deltas(rows, n_epochs=TRANSACTIONS)
        problems = to.compare_answers(answers, duck)
        assert not problems, f"Q{q} ({before_images}): " + "\n".join(problems[:5])
    assert {q: sorted(e) for q, (e, _d) in expected.items()} == {
        9: [1, 2, 3, 5, 7], 10: [1, 4, 7], 13: [1, 2, 3, 5, 6]}  # every kind of epoch


@pytest.mark.parametrize("runner", ["flink", "spark"])
def test_tpch_debezium_stream_on_spark_and_flink(
        kafka_bootstrap: str, tpch_stream: Path, tmp_path: Path, runner: str,
        expected: dict[int, tuple[Epochs, list[list[to.Row]]]]) -> None:
    """Q9 over the key-only stream (every table keyed but partsupp) on Spark and Flink at
    P = 2: the update CSV's deltas epoch by epoch, DuckDB's answer after every
    transaction (tests/test_change_stream_runners.py covers both runners' reader)."""
    import subprocess
    import sys

    from connectors import tpch

    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    schema = tpch.schema_sql(keys=[t for t in tpch.TABLES if t != "partsupp"])
    text = (tpch_stream / "queries" / "q09.sql").read_text()
    query = tmp_path / "q09.sql"
    query.write_text(f"{schema}\n{to.query_part(text)};\n")
    prefix = f"tpch{os.urandom(4).hex()}"
    assert main(["produce", str(tpch_stream / "updates.csv"), f"kafka://{kafka_bootstrap}/"
                 f"{prefix}", "--format", "debezium-json", "--query", str(query),
                 "--partitions", "2", "--before-images", "key", "--quiet"]) == 0
    source = (f"kafka://{kafka_bootstrap}/{prefix}?format=debezium-json"
              f"&transactions={prefix}.transaction")
    deltas = f"kafka://{kafka_bootstrap}/{prefix}-q9"
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow.cli", "run", str(query), "--updates", source,
         "--deltas", deltas, "--runner", runner, "--parallelism", "2", "--stop-at-end",
         "--checkpoint", str(tmp_path / "ckpt"), "--quiet"],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True,
        text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _kafka_rows(deltas)
    got: Epochs = {}
    for epoch, mult, row in rows:
        got.setdefault(epoch, Counter())[_text(mult, row)] += 1
    csv_epochs, duck = expected[9]
    assert got == csv_epochs
    problems = to.compare_answers(to.accumulate_deltas(rows, n_epochs=TRANSACTIONS), duck)
    assert not problems, "\n".join(problems[:5])
