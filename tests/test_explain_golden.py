"""Golden `explain` output for the benchmark queries (tests/fixtures/explain/*.sql).

Regenerate after an intended change with
``IVMFLOW_UPDATE_GOLDEN=1 pytest tests/test_explain_golden.py`` and review the diff."""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import assert_matches_golden

from dataflow.api import compile_query

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "explain"
CASES = sorted(FIXTURES.glob("*.sql"))


@pytest.mark.parametrize("sql_file", CASES, ids=[c.stem for c in CASES])
def test_explain_matches_golden(sql_file: Path) -> None:
    text = compile_query(sql_file.read_text(), source_name=sql_file.name).explain(parallelism=4)
    assert_matches_golden(text + "\n", sql_file.with_suffix(".txt"))


def test_explain_is_deterministic_across_compiles() -> None:
    sql = CASES[0].read_text()
    assert compile_query(sql).explain() == compile_query(sql).explain()
