"""The State protocol: operators declare named keyed map states; backends bind them.

The local backend hands out plain dicts (the hot path is dict operations); the Flink
and Spark backends bind the same names to their keyed state with a per-epoch cache.

Example:
    >>> st = DictState()
    >>> m = st.map("G2.semijoin")
    >>> m[(1,)] = {(1, 2)}
    >>> st.entries()  # one key, one member
    2
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Protocol


class State(Protocol):
    """Where an operator keeps its keyed state. ``map(name)`` always returns the same
    mapping object for the same name within one partition."""

    def map(self, name: str) -> MutableMapping[Any, Any]: ...

    def names(self) -> list[str]: ...


class DictState:
    """In-process state: one dict per declared name."""

    def __init__(self) -> None:
        self._maps: dict[str, dict[Any, Any]] = {}

    def map(self, name: str) -> dict[Any, Any]:
        m = self._maps.get(name)
        if m is None:
            m = {}
            self._maps[name] = m
        return m

    def names(self) -> list[str]:
        return sorted(self._maps)

    def entries(self) -> int:
        """Stored entries: map keys plus the members of set/dict values."""
        total = 0
        for m in self._maps.values():
            total += len(m)
            for v in m.values():
                if isinstance(v, (set, frozenset, dict)):
                    total += len(v)
        return total
