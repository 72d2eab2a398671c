"""The Spark data generator (`ivmflow generate graph --engine spark`) writes the same
update streams as the in-process generator, and its edge-list path filters, shuffles
and windows correctly."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration


def _generate(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "dataflow.cli", "generate", "graph", *args,
                    "--quiet"], cwd=ROOT, check=True, timeout=300)


def test_spark_stream_equals_python_stream(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    common = ["--edges", "400", "--window", "0.2", "--seed", "5", "--epoch-every", "37"]
    _generate(*common, "--out", str(tmp_path / "py.csv"))
    _generate(*common, "--out", str(tmp_path / "spark.csv"), "--engine", "spark")
    assert (tmp_path / "spark.csv").read_text() == (tmp_path / "py.csv").read_text()


def test_edge_list_filter_and_fifo_window(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    edges = [(i % 17, (i * 7) % 23) for i in range(120)]
    src = tmp_path / "edges.csv"
    src.write_text("# src,dst\n" + "".join(f"{s},{d}\n" for s, d in edges + edges[:10]))
    out = tmp_path / "u.csv"
    _generate("--edges", "1", "--edge-list", str(src), "--min-dst", "5", "--window", "10",
              "--seed", "2", "--out", str(out), "--engine", "spark")
    lines = out.read_text().splitlines()
    kept = {(s, d) for s, d in edges if s != d and d >= 5}
    ins = [tuple(map(int, line.split(",")[2:])) for line in lines if line.startswith("+")]
    dels = [tuple(map(int, line.split(",")[2:])) for line in lines if line.startswith("-")]
    assert Counter(ins) == Counter(kept)  # deduplicated, filtered, each inserted once
    assert len(dels) == len(kept) - 10
    # FIFO: the k-th delete removes the k-th insert, right after insert k + 10
    assert dels == ins[: len(dels)]
    live = 0
    for line in lines:
        live += 1 if line.startswith("+") else -1
        assert live <= 11


def test_social_tables_stream_is_valid_and_windowed(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from connectors.files import read_updates
    from dataflow.api import compile_query
    from dataflow.runners.spark.datagen import SOCIAL_SCHEMA_SQL

    out = tmp_path / "social.csv"
    subprocess.run([sys.executable, "-m", "dataflow.cli", "generate", "social", "--persons",
                    "40", "--knows", "200", "--messages", "300", "--window", "0.25",
                    "--seed", "4", "--epoch-every", "50", "--out", str(out), "--quiet"],
                   cwd=ROOT, check=True, timeout=300)
    q = compile_query(SOCIAL_SCHEMA_SQL + "SELECT p.name, COUNT(*) FROM person p, message m, "
                      "knows k WHERE p.id = m.creator AND k.p2 = p.id GROUP BY p.name")
    # every delete removes a present tuple (the view refuses anything else)
    deltas = list(q.run(read_updates(out, q.schema)))
    assert deltas and any(d.rows for d in deltas)
    live: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    for line in out.read_text().splitlines():
        if line == "*":
            continue
        table = line.split(",")[1]
        live[table] += 1 if line.startswith("+") else -1
        peak[table] = max(peak[table], live[table])
    assert live["person"] == 40
    assert peak["message"] <= 0.25 * 300 + 1
    assert live["message"] == int(0.25 * 300)
