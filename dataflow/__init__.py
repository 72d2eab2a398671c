"""ivmflow's dataflow layer: the graph, the engine, the runners and the Python API.

Example:
    >>> from dataflow import compile_query
    >>> compile_query("CREATE TABLE R(a INT); SELECT a FROM R").plan.query_class
    'q-hierarchical'
"""

from __future__ import annotations

from dataflow.api import CompiledQuery, View, compile_query
from dataflow.records import EPOCH_END, EpochDelta, EpochEnd, Update

__all__ = ["EPOCH_END", "CompiledQuery", "EpochDelta", "EpochEnd", "Update", "View", "compile_query"]
