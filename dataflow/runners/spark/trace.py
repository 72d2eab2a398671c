"""``IVMFLOW_SPARK_TRACE=FILE``: every partition (or stage slot) task appends a JSON line
of where its time went (cache lookup, reading the batch's rows, engine, write-back) to
FILE. ``bench/stage_cost_bench.py`` reads it: the time in Python, without the
micro-batch's scheduling around it."""

from __future__ import annotations

import json
import os
from typing import Any

TRACE = os.environ.get("IVMFLOW_SPARK_TRACE")
"""The trace file, or None: tracing off."""


def trace(**record: Any) -> None:
    """Append ``record`` as a JSON line to the ``IVMFLOW_SPARK_TRACE`` file, if set."""
    if TRACE:
        with open(TRACE, "a") as fh:
            fh.write(json.dumps(record) + "\n")
