"""ivmflow's composing layer: the Python API (:mod:`dataflow.api`), the query kinds and
their engines, the partitioner, running (:mod:`dataflow.runners.run`), the runners
(:mod:`dataflow.runners`) and the command line (:mod:`dataflow.cli`).

The front door re-exports what a user needs first.

Example:
    >>> from dataflow import Update, compile_query
    >>> q = compile_query("CREATE TABLE R(a INT); SELECT a FROM R")
    >>> q.plan.query_class
    'q-hierarchical'
    >>> v = q.maintain(); v.apply(Update("+", "R", (1,))); v.end_epoch().rows
    ((1, (1,)),)
"""

from __future__ import annotations

from core.records import EPOCH_END, EpochDelta, EpochEnd, Update
from dataflow.api import CompiledQuery, View, compile_query

__all__ = [
    "EPOCH_END", "CompiledQuery", "EpochDelta", "EpochEnd", "Update", "View", "compile_query",
]
