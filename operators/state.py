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


def add_count(m: MutableMapping[Any, int], key: Any, v: int) -> None:
    """Add ``v`` to the count of ``key``, dropping the key when it reaches zero (views
    keep no zero entries, so their size is their support).

    >>> m = {}; add_count(m, "a", 2); add_count(m, "a", -2); m
    {}
    """
    new = m.get(key, 0) + v
    if new:
        m[key] = new
    else:
        m.pop(key, None)


def add_nested_count(
    m: MutableMapping[Any, dict[Any, int]], key: Any, sub: Any, v: int
) -> None:
    """:func:`add_count` on ``m[key][sub]``, dropping an inner dict when it empties.

    >>> m = {}; add_nested_count(m, 1, "x", 1); m
    {1: {'x': 1}}
    >>> add_nested_count(m, 1, "x", -1); m
    {}
    """
    inner = m.get(key)
    if inner is None:
        m[key] = {sub: v}
        return
    new = inner.get(sub, 0) + v
    if new:
        inner[sub] = new
    else:
        inner.pop(sub, None)
        if not inner:
            del m[key]
