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

from collections.abc import Iterable, MutableMapping
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


# ---------------------------------------------------------------------------------------
# A write-back cache for runners whose state lives in an external keyed store (Flink
# MapState, Spark transformWithState MapState): the operators work on plain dicts; the
# runner writes back, at each epoch or batch end, only the entries touched since.

_IMMUTABLE = (int, float, str, bytes, bool, tuple, frozenset, type(None))


class TrackedMap(dict[Any, Any]):
    """A dict that remembers which keys may have changed since :meth:`take_dirty`.

    Every write marks its key; so does every read of a mutable value (a set or dict
    the operator may change in place), and ``items()``/``values()`` mark every key
    (operators that walk a whole map, like a major rebalance, pay O(map) anyway). Reads
    of immutable values (counts, tuples) mark nothing.

    >>> m = TrackedMap(); m["a"] = {1}; m["b"] = 2; _ = m.take_dirty()
    >>> m["a"].add(3); m.get("b"); sorted(m.take_dirty())
    2
    ['a']
    """

    __slots__ = ("dirty",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.dirty: set[Any] = set()

    def take_dirty(self) -> set[Any]:
        """The keys touched since the last call (present or removed now)."""
        out, self.dirty = self.dirty, set()
        return out

    def __setitem__(self, key: Any, value: Any) -> None:
        self.dirty.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self.dirty.add(key)
        super().__delitem__(key)

    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        if not isinstance(value, _IMMUTABLE):
            self.dirty.add(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        value = super().get(key, default)
        if value is not default and not isinstance(value, _IMMUTABLE):
            self.dirty.add(key)
        return value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self.dirty.add(key)
        return super().setdefault(key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        self.dirty.add(key)
        return super().pop(key, *default)

    def popitem(self) -> tuple[Any, Any]:
        key, value = super().popitem()
        self.dirty.add(key)
        return key, value

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        self.dirty.update(self.keys())
        super().clear()

    def items(self) -> Any:
        self.dirty.update(self.keys())
        return super().items()

    def values(self) -> Any:
        self.dirty.update(self.keys())
        return super().values()


class WriteBackState:
    """The State protocol over :class:`TrackedMap` caches, for a runner that keeps the
    entries in an external keyed store and writes back per epoch only what changed.

    >>> st = WriteBackState()
    >>> st.map("n.base")[(1, 2)] = 1; st.map("n.base")[(3, 4)] = 1
    >>> sorted(st.map("n.base").take_dirty()); del st.map("n.base")[(1, 2)]
    [(1, 2), (3, 4)]
    >>> [(name, sorted(puts), sorted(gone)) for name, puts, gone in st.changes()]
    [('n.base', [], [(1, 2)])]
    """

    def __init__(self) -> None:
        self._maps: dict[str, TrackedMap] = {}

    def map(self, name: str) -> TrackedMap:
        m = self._maps.get(name)
        if m is None:
            m = TrackedMap()
            self._maps[name] = m
        return m

    def names(self) -> list[str]:
        return sorted(self._maps)

    def changes(self) -> list[tuple[str, dict[Any, Any], list[Any]]]:
        """Per map with changes: (name, key -> new value, removed keys); resets the
        tracking."""
        out = []
        for name, m in self._maps.items():
            dirty = m.take_dirty()
            if not dirty:
                continue
            puts = {k: dict.__getitem__(m, k) for k in dirty if dict.__contains__(m, k)}
            gone = [k for k in dirty if not dict.__contains__(m, k)]
            out.append((name, puts, gone))
        return out

    def load(self, name: str, entries: Iterable[tuple[Any, Any]]) -> None:
        """Fill map ``name`` from the store (restore); nothing is marked changed."""
        m = self.map(name)
        for k, v in entries:
            dict.__setitem__(m, k, v)

    def entries(self) -> int:
        return sum(len(m) for m in self._maps.values())


def encode_key(key: Any) -> str:
    """A deterministic, injective text form of a state key (tuples of values, possibly
    nested, and frozensets), for stores keyed by bytes or strings: equal keys give equal
    text, which ``pickle`` does not promise (it memoizes shared objects).

    >>> encode_key((1, "a,b", None, 2.5, (True,))), encode_key(frozenset({"b", "a"}))
    ("(1,'a,b',None,2.5,(True,))", "{'a','b'}")
    """
    if isinstance(key, tuple):
        return "(" + ",".join(encode_key(k) for k in key) + ("," if len(key) == 1 else "") + ")"
    if isinstance(key, frozenset):
        return "{" + ",".join(sorted(encode_key(k) for k in key)) + "}"
    return repr(key)
