"""Shared pytest setup: import paths and hypothesis profiles.

Profiles (select with ``HYPOTHESIS_PROFILE``; default ``ci``):

- ``dev``: few examples, for quick local runs;
- ``ci``: the README/CI setting (derandomized, so CI runs are reproducible);
- ``thorough``: long exploratory runs (``HYPOTHESIS_PROFILE=thorough pytest -m slow``).

The property tests scale their example counts from the loaded profile's
``max_examples`` (see ``tests/test_oracle_property.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

_TESTS = Path(__file__).resolve().parent
for _p in (_TESTS.parent, _TESTS):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

_COMMON = {
    "deadline": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("dev", max_examples=10, **_COMMON)
settings.register_profile("ci", max_examples=100, derandomize=True, **_COMMON)
settings.register_profile("thorough", max_examples=1000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
