"""Golden files: a test's output against a reviewed file in tests/fixtures/.

A missing golden file fails the test (a test that writes its own expectation and then
passes checks nothing). ``IVMFLOW_UPDATE_GOLDEN=1`` writes the files instead, to be
reviewed in the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

UPDATE = "IVMFLOW_UPDATE_GOLDEN"


def assert_matches_golden(text: str, golden: Path) -> None:
    """``text`` equals the golden file ``golden`` (written instead under
    ``IVMFLOW_UPDATE_GOLDEN=1``)."""
    if os.environ.get(UPDATE):
        golden.write_text(text)
    elif not golden.exists():
        pytest.fail(f"golden file {golden} is missing: create it with {UPDATE}=1 and review it")
    assert text == golden.read_text(), f"differs from {golden} ({UPDATE}=1 rewrites it)"
