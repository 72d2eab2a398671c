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
after that transaction (tests/tpch_oracle.py). Q9's deltas are written as Debezium
events (``--deltas ...?format=debezium-json``) and read back by a consumer.

On Spark and Flink (P = 2), Q9 over either stream, its deltas as Debezium events read
back: the same, with reads of at most ``BATCH_LINES`` records per stream, so that the
load's transaction (8,695 events, about 3,000 of lineitem's per partition) goes in
parts, as SF 0.1's does at the default 10,000 (tests/test_change_stream_parts.py). One
cell (Flink, full before-images) is in CI's default slice, the others beyond it
(tests/conftest.py).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import tpch_oracle as to
from test_change_stream_runners import _debezium_epochs

from connectors.files import read_updates
from connectors.kafka import parse_kafka_url, read_deltas
from core.records import format_value
from dataflow.api import compile_query
from dataflow.cli import main

SF = 0.001
TRANSACTIONS = 7  # load, then (RF1, RF2, UPD) x 2
QUERIES = (9, 10, 13)
BATCH_LINES = 1000  # Spark's and Flink's reads: fewer than the load's lineitem events

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


def _value(text: str) -> Any:
    for kind in (int, Decimal):
        try:
            return kind(text)
        except (ValueError, ArithmeticError):
            pass
    return text


def _debezium_rows(bootstrap: str, topic: str, query: Path
                   ) -> tuple[Epochs, list[tuple[int, int, tuple[Any, ...]]]]:
    """A Debezium delta topic read back by a consumer (read_committed): the delta rows
    per epoch (as text, as the update CSV's are compared) and as ``(epoch, mult, row)``
    with numbers parsed (for DuckDB's answers)."""
    columns = list(compile_query(query.read_text()).output_columns)
    got = _debezium_epochs(bootstrap, topic, columns)
    rows = [(epoch, int(r[0]), tuple(_value(v) for v in r[1:]))
            for epoch, c in sorted(got.items()) for r, n in c.items() for _ in range(n)]
    return got, rows


def _query_files(tpch_stream: Path, tmp: Path, before_images: str, queries: tuple[int, ...]
                 ) -> dict[int, Path]:
    """The queries over the spec's schema (full before-images) or the keyed one."""
    from connectors import tpch

    keyed = before_images == "key"
    schema = tpch.schema_sql(keys=[t for t in tpch.TABLES if t != "partsupp"] if keyed
                             else False)
    files = {}
    for q in queries:
        text = (tpch_stream / "queries" / f"q{q:02d}.sql").read_text()
        files[q] = tmp / f"q{q:02d}.sql"
        files[q].write_text(f"{schema}\n{to.query_part(text)};\n")
    return files


def _produce(bootstrap: str, tpch_stream: Path, query: Path, before_images: str) -> str:
    """The stream as Debezium events (two partitions per table, transaction metadata):
    the source URL."""
    prefix = f"tpch{os.urandom(4).hex()}"
    assert main(["produce", str(tpch_stream / "updates.csv"), f"kafka://{bootstrap}/"
                 f"{prefix}", "--format", "debezium-json", "--query", str(query),
                 "--partitions", "2", "--before-images", before_images, "--quiet"]) == 0
    return (f"kafka://{bootstrap}/{prefix}?format=debezium-json"
            f"&transactions={prefix}.transaction")


def _check(q: int, got: Epochs, rows: list[tuple[int, int, tuple[Any, ...]]],
           expected: dict[int, tuple[Epochs, list[list[to.Row]]]], what: str) -> None:
    csv_epochs, duck = expected[q]
    assert got == csv_epochs, f"Q{q} ({what}): the deltas differ from the update CSV's"
    problems = to.compare_answers(to.accumulate_deltas(rows, n_epochs=TRANSACTIONS), duck)
    assert not problems, f"Q{q} ({what}): " + "\n".join(problems[:5])


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
    files = _query_files(tpch_stream, tmp_path, before_images, QUERIES)
    source = _produce(kafka_bootstrap, tpch_stream, files[QUERIES[0]], before_images)
    prefix = parse_kafka_url(source).topic
    # What the customer table's topic holds: the load and UPD's changes of 2 x 3 rows.
    ops = _ops(kafka_bootstrap, f"{prefix}.public.customer", 8)
    if before_images == "key":
        assert ops == {("c", False): 150, ("u", False): 6}  # u: before = null
    else:
        assert ops == {("c", False): 156, ("d", True): 6}
    for q in QUERIES:
        topic = f"{prefix}-q{q}"
        debezium = q == 9  # (its deltas as Debezium events, read back by a consumer)
        deltas = f"kafka://{kafka_bootstrap}/{topic}" + ("?format=debezium-json" if debezium
                                                         else "")
        assert main(["run", str(files[q]), "--updates", source, "--deltas", deltas,
                     "--stop-at-end", "--quiet", "--no-native"]) == 0
        if debezium:
            got, rows = _debezium_rows(kafka_bootstrap, topic, files[q])
        else:
            rows = _kafka_rows(deltas)
            got = {}
            for epoch, mult, row in rows:
                got.setdefault(epoch, Counter())[_text(mult, row)] += 1
        _check(q, got, rows, expected, before_images)
    assert {q: sorted(e) for q, (e, _d) in expected.items()} == {
        9: [1, 2, 3, 5, 7], 10: [1, 4, 7], 13: [1, 2, 3, 5, 6]}  # every kind of epoch


@pytest.mark.parametrize(("runner", "before_images"), [
    ("flink", "full"), ("flink", "key"), ("spark", "full"), ("spark", "key")])
def test_tpch_debezium_stream_on_spark_and_flink(
        kafka_bootstrap: str, tpch_stream: Path, tmp_path: Path, runner: str,
        before_images: str, expected: dict[int, tuple[Epochs, list[list[to.Row]]]]) -> None:
    """Q9 over the full or the key-only stream (every table keyed but partsupp) on Spark
    and Flink at P = 2, the load's transaction read in parts (``BATCH_LINES``), its
    deltas written as Debezium events (Spark's executors, Flink's merger) and read back
    by a consumer: the update CSV's deltas epoch by epoch, DuckDB's answer after every
    transaction (tests/test_change_stream_runners.py covers both runners' reader)."""
    import subprocess
    import sys

    pytest.importorskip("pyspark" if runner == "spark" else "pyflink")
    query = _query_files(tpch_stream, tmp_path, before_images, (9,))[9]
    source = _produce(kafka_bootstrap, tpch_stream, query, before_images)
    topic = f"{parse_kafka_url(source).topic}-q9"
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow.cli", "run", str(query), "--updates", source,
         "--deltas", f"kafka://{kafka_bootstrap}/{topic}?format=debezium-json",
         "--runner", runner, "--parallelism", "2", "--stop-at-end",
         "--batch-lines", str(BATCH_LINES), "--checkpoint", str(tmp_path / "ckpt"),
         "--quiet"],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True,
        text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got, rows = _debezium_rows(kafka_bootstrap, topic, query)
    _check(9, got, rows, expected, f"{runner}, {before_images}")
