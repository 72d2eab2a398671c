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

import pickle
from collections.abc import Callable, Iterable, Iterator, MutableMapping
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


class Grouped:
    """A map of groups ``anc -> {sub: value}`` kept in one keyed map. Below the root the
    group is one entry (a dict); at the root (``anc == ()``) every member is its own
    entry, so that no single entry holds a whole relation (the runners write entries
    back one by one)."""

    __slots__ = ("flat", "m")

    def __init__(self, m: MutableMapping[Any, Any], flat: bool) -> None:
        self.m = m
        self.flat = flat

    def _read(self, key: Any) -> Any:
        """A read that marks nothing dirty: a TrackedMap marks a key whose value is a
        dict when it is read (the caller might change it); the read-only methods here
        never do, so a snapshot does not make the runners write the whole map back."""
        m = self.m
        return dict.get(m, key) if isinstance(m, dict) else m.get(key)

    def get(self, anc: tuple[Any, ...], sub: Any) -> Any:
        if self.flat:
            return self.m.get(sub, 0)
        group = self._read(anc)
        return 0 if group is None else group.get(sub, 0)

    def add(self, anc: tuple[Any, ...], sub: Any, v: Any) -> None:
        """Add ``v`` to a count, dropping it at zero."""
        if not v:
            return
        if self.flat:
            new = self.m.get(sub, 0) + v
            if new:
                self.m[sub] = new
            else:
                del self.m[sub]
            return
        group = self.m.get(anc)
        if group is None:
            self.m[anc] = {sub: v}
            return
        new = group.get(sub, 0) + v
        if new:
            group[sub] = new
        else:
            del group[sub]
            if not group:
                del self.m[anc]

    def add_many(self, anc: tuple[Any, ...], items: Iterable[tuple[Any, int]], factor: int) -> None:
        """:meth:`add` of ``factor * v`` for each ``(sub, v)``."""
        m: MutableMapping[Any, Any]
        if self.flat:
            m = self.m
        else:
            group = self.m.get(anc)
            m = {} if group is None else group
        for sub, v in items:
            new = m.get(sub, 0) + factor * v
            if new:
                m[sub] = new
            else:
                del m[sub]
        if not self.flat:
            if m:
                self.m[anc] = m
            else:
                self.m.pop(anc, None)

    def put(self, anc: tuple[Any, ...], sub: Any, v: Any) -> None:
        """Set a value (``0`` removes it)."""
        if self.flat:
            if v:
                self.m[sub] = v
            else:
                self.m.pop(sub, None)
            return
        group = self.m.get(anc)
        if v:
            if group is None:
                self.m[anc] = {sub: v}
            else:
                group[sub] = v
        elif group is not None and sub in group:
            del group[sub]
            if not group:
                del self.m[anc]

    def members(self, anc: tuple[Any, ...]) -> Iterable[tuple[Any, Any]]:
        """The group's (sub, value) pairs, a live view (O(1) to start, nothing marked
        dirty): do not change this group while iterating it."""
        if self.flat:
            m = self.m
            return dict.items(m) if isinstance(m, dict) else m.items()
        group = self._read(anc)
        return () if group is None else group.items()

    def groups(self) -> Iterator[tuple[tuple[Any, ...], Any, Any]]:
        """Every (anc, sub, value)."""
        m = self.m
        if self.flat:
            for sub, v in list(dict.items(m) if isinstance(m, dict) else m.items()):
                yield (), sub, v
            return
        for anc, group in list(dict.items(m) if isinstance(m, dict) else m.items()):
            for sub, v in list(group.items()):
                yield anc, sub, v

    def clear(self) -> None:
        for key in list(self.m.keys()):
            del self.m[key]


def _holds_immutable(value: Any) -> bool:
    return isinstance(value, _IMMUTABLE)


def read_only_get(m: MutableMapping[Any, Any]) -> Callable[..., Any]:
    """``m.get`` for a walk that only reads: on a dict (a :class:`TrackedMap` too) the
    C-level ``dict.get``, which marks nothing dirty, so an enumeration does not make
    the runners write back the sets it walked.

    >>> m = TrackedMap(); m[1] = {2}; _ = m.take_dirty(); read_only_get(m)(1), m.dirty
    ({2}, set())
    """
    return dict.get.__get__(m) if isinstance(m, dict) else m.get


class TrackedMap(dict[Any, Any]):
    """A dict that remembers which keys may have changed since :meth:`take_dirty`.

    Every write marks its key. While the map holds only immutable values (counts,
    tuples, flags: most maps), reads are plain dict reads at C speed and mark nothing.
    The first mutable value stored (a set or dict the operator may change in place)
    turns the map, for good, into a :class:`_MutableTrackedMap`, where every read of a
    mutable value marks its key too, and ``items()``/``values()`` mark every key
    (operators that walk a whole map, like a major rebalance, pay O(map) anyway).

    >>> m = TrackedMap(); m["b"] = 2; m["a"] = {1}; _ = m.take_dirty()
    >>> m["a"].add(3); m.get("b"); sorted(m.take_dirty())
    2
    ['a']
    """

    __slots__ = ("dirty",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.dirty: set[Any] = set()
        self.note_values(dict.values(self))

    def note_values(self, values: Iterable[Any]) -> None:
        """Switch to read tracking if any of ``values`` (stored by a path that bypasses
        :meth:`__setitem__`, like a restore) is mutable."""
        if type(self) is TrackedMap and not all(map(_holds_immutable, values)):
            self.__class__ = _MutableTrackedMap

    def take_dirty(self) -> set[Any]:
        """The keys touched since the last call (present or removed now)."""
        out, self.dirty = self.dirty, set()
        return out

    def __setitem__(self, key: Any, value: Any) -> None:
        self.dirty.add(key)
        if not isinstance(value, _IMMUTABLE):
            self.__class__ = _MutableTrackedMap
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        self.dirty.add(key)
        dict.__delitem__(self, key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self.dirty.add(key)
        if not isinstance(default, _IMMUTABLE):
            self.__class__ = _MutableTrackedMap
        return dict.setdefault(self, key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        self.dirty.add(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        key, value = dict.popitem(self)
        self.dirty.add(key)
        return key, value

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        self.dirty.update(dict.keys(self))
        dict.clear(self)

    def __ior__(self, other: Any) -> TrackedMap:  # type: ignore[misc]
        self.update(other)
        return self


class _MutableTrackedMap(TrackedMap):
    """A :class:`TrackedMap` that holds mutable values: a read of one marks its key (the
    caller may change the value in place), and so does every key walked by ``items()``
    or ``values()``. Same layout as its base, so a map switches by ``__class__``."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        self.dirty.add(key)  # already switched: no check of the value's type
        dict.__setitem__(self, key, value)

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if not isinstance(value, _IMMUTABLE):
            self.dirty.add(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        value = dict.get(self, key, default)
        if value is not default and not isinstance(value, _IMMUTABLE):
            self.dirty.add(key)
        return value

    def items(self) -> Any:
        self.dirty.update(dict.keys(self))
        return dict.items(self)

    def values(self) -> Any:
        self.dirty.update(dict.keys(self))
        return dict.values(self)


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
            present = dirty & dict.keys(m)
            # The values by C-level calls (the map's own __getitem__ may mark keys).
            puts = dict(zip(present, map(dict.__getitem__.__get__(m), present)))
            out.append((name, puts, list(dirty - present)))
        return out

    def load(self, name: str, entries: Iterable[tuple[Any, Any]]) -> None:
        """Fill map ``name`` from the store (restore); nothing is marked changed."""
        m = self.map(name)
        for k, v in entries:
            dict.__setitem__(m, k, v)
        m.note_values(dict.values(m))

    def apply_stored(self, name: str, puts: dict[Any, Any], gone: Iterable[Any]) -> None:
        """Apply changes another worker wrote to the store (a catch-up); nothing is
        marked changed."""
        m = self.map(name)
        dict.update(m, puts)
        for k in gone:
            dict.pop(m, k, None)
        m.note_values(puts.values())

    def entries(self) -> int:
        return sum(len(m) for m in self._maps.values())


_SCALARS = frozenset({int, str, float, bool, type(None), bytes})
"""Types whose ``repr`` is their encoding (canonical, injective within the type)."""


def encode_entry(key: Any, value: Any) -> bytes:
    """A state entry as stored in a runner's keyed map state: the pickled ``(key, value)``
    pair (the key too, so that a restore needs no parser for :func:`encode_key`'s text),
    without the 9-byte frame header protocol 4+ puts on every pickle: most entries are a
    few dozen bytes, and an unframed pickle loads the same.

    >>> import pickle
    >>> blob = encode_entry(123, 3); pickle.loads(blob), len(blob)
    ((123, 3), 9)
    >>> pickle.loads(encode_entry((1, "a"), {(1, 2): 2}))
    ((1, 'a'), {(1, 2): 2})
    """
    blob = _dumps((key, value), _PROTOCOL)
    # b"\x80\x05" PROTO, then b"\x95" FRAME and its 8-byte length, then the opcodes
    return blob[:2] + blob[11:] if blob[2] == 0x95 else blob


_dumps = pickle.dumps
_PROTOCOL = pickle.HIGHEST_PROTOCOL


def encode_key(key: Any) -> str:
    """A deterministic, injective text form of a state key (tuples of values, possibly
    nested, and frozensets), for stores keyed by bytes or strings: equal keys give equal
    text, which ``pickle`` does not promise (it memoizes shared objects).

    >>> encode_key((1, "a,b", None, 2.5, (True,))), encode_key(frozenset({"b", "a"}))
    ("(1,'a,b',None,2.5,(True,))", "{'a','b'}")
    """
    if type(key) is int:  # the commonest key of all (a bare join value)
        return repr(key)
    if type(key) is tuple and _SCALARS.issuperset(map(type, key)):
        # The common case (a tuple of plain values) in C: the same text, no recursion.
        return "(" + ",".join(map(repr, key)) + ("," if len(key) == 1 else "") + ")"
    if isinstance(key, tuple):
        return "(" + ",".join(encode_key(k) for k in key) + ("," if len(key) == 1 else "") + ")"
    if isinstance(key, frozenset):
        return "{" + ",".join(sorted(encode_key(k) for k in key)) + "}"
    return repr(key)
