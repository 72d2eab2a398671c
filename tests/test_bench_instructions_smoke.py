"""Smoke test of bench/instructions.py: two callgrind runs of a tiny crossover stream,
the timed part's instruction count out (skipped where valgrind is not installed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import instructions


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_instructions_counts_the_timed_part(tmp_path: Path) -> None:
    out = tmp_path / "ir.json"
    args = ["--query", "hop3_filter", "--window", "500", "--epoch", "50", "--updates", "300",
            "--out", str(out)]
    assert instructions.main(args) == 0
    r = json.loads(out.read_text())["rows"][0]
    # The warm-up run pays for the interpreter start and the imports; 300 updates cost
    # far less, and each at least a few thousand instructions.
    assert 1_000 < r["instructions_per_update"] < 1_000_000
    assert r["timed_instructions"] < r["warm_up_instructions"]
