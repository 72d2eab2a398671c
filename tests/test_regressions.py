"""Minimal cases found by the property tests (tests/test_oracle_property.py), each
checked against DuckDB with the same harness."""

from __future__ import annotations

from strategies import Case
from test_oracle_property import run_case

from core.records import Update


def test_group_by_key_not_selected_delta_is_consolidated() -> None:
    """Two groups with the same COUNT give the same output row when the GROUP BY key is
    not selected: the epoch delta must hold that row once, with multiplicity 2 (and
    cancelling changes must vanish)."""
    run_case(
        Case(
            "CREATE TABLE R(a INT, b INT); SELECT COUNT(*) FROM R GROUP BY a;",
            [
                Update("+", "R", (1, 0)),
                Update("+", "R", (2, 0)),
                Update("+", "R", (1, 0)),
                Update("+", "R", (3, 0)),
            ],
            epoch_size=2,
        )
    )
