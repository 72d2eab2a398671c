"""ivmflow's dataflow layer: the graph, the engine, the runners and the Python API.

The API names are imported lazily so that ``plans`` can use ``dataflow.errors``
without an import cycle.

Example:
    >>> from dataflow import compile_query
    >>> compile_query("CREATE TABLE R(a INT); SELECT a FROM R").plan.query_class
    'q-hierarchical'
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EPOCH_END", "CompiledQuery", "EpochDelta", "EpochEnd", "Update", "View", "compile_query",
]


def __getattr__(name: str) -> Any:
    if name in ("CompiledQuery", "View", "compile_query"):
        from dataflow import api

        return getattr(api, name)
    if name in ("EPOCH_END", "EpochDelta", "EpochEnd", "Update"):
        from dataflow import records

        return getattr(records, name)
    msg = f"module 'dataflow' has no attribute {name!r}"
    raise AttributeError(msg)
