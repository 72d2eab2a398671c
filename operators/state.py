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

from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any, Protocol

FieldMaps = Callable[[int, int, "tuple[int, ...] | None"], MutableMapping[Any, Any]]
"""What makes a :class:`DictState`'s field maps: ``(nkey, nval, key_at) -> map``
(:meth:`State.field_map`)."""


class State(Protocol):
    """Where an operator keeps its keyed state. ``map(name)`` always returns the same
    mapping object for the same name within one partition."""

    def map(self, name: str) -> MutableMapping[Any, Any]: ...

    def field_map(self, name: str, nkey: int, nval: int,
                  key_at: tuple[int, ...] | None = None) -> MutableMapping[Any, Any]:
        """The map ``name``, still empty, for keys of ``nkey`` values whose values are
        mostly tuples of ``nval`` (a join tree's sum leaf: key -> ring payload; a top
        leaf's groups: key -> its one tuple, which holds the key's values at positions
        ``key_at``): a backend may hold it natively (:class:`DictState` with
        ``field_maps``); else ``map(name)``."""
        ...

    def field_map_factory(self) -> FieldMaps | None:
        """What makes this state's field maps (native ones, or explain's stand-ins), or
        None where :meth:`field_map` gives plain maps: a map kept inside another's
        entry (a top leaf's one group of every tuple, a delta join's bucket) is a field
        map only where this gives one (the runners' write-back tracks each map's own
        entries: None there)."""
        ...

    def names(self) -> list[str]: ...

    def entries(self) -> int:
        """Stored entries: map keys plus the members of set/dict values (what a
        runner's summary and the benches count)."""
        ...


class DictState:
    """In-process state: one dict per declared name; with ``field_maps(nkey, nval,
    key_at)``,
    the maps asked for by :meth:`field_map` are made by it instead (the native build's
    ``FieldMap`` of ``core/native_rows.pyx``: entries in one native array)."""

    def __init__(self, field_maps: FieldMaps | None = None) -> None:
        self._maps: dict[str, MutableMapping[Any, Any]] = {}
        self.field_maps = field_maps

    def map(self, name: str) -> MutableMapping[Any, Any]:
        m = self._maps.get(name)
        if m is None:
            m = {}
            self._maps[name] = m
        return m

    def field_map(self, name: str, nkey: int, nval: int,
                  key_at: tuple[int, ...] | None = None) -> MutableMapping[Any, Any]:
        """``field_maps(nkey, nval, key_at)`` under ``name`` where given (replacing the
        empty dict :meth:`map` made), else :meth:`map`.

        >>> st = DictState(field_maps=lambda nkey, nval, key_at: {"native": (nkey, nval)})
        >>> _ = st.map("S.proj"); st.field_map("S.proj", 2, 3), st.map("S.proj")
        ({'native': (2, 3)}, {'native': (2, 3)})
        """
        m = self.map(name)
        if self.field_maps is None:
            return m
        if len(m):
            msg = f"state map {name} holds entries: a field map replaces it before any update"
            raise RuntimeError(msg)
        self._maps[name] = m = self.field_maps(nkey, nval, key_at)
        return m

    def field_map_factory(self) -> FieldMaps | None:
        """``field_maps``.

        >>> DictState().field_map_factory() is None, DictState(dict).field_map_factory()
        (True, <class 'dict'>)
        """
        return self.field_maps

    def names(self) -> list[str]:
        return sorted(self._maps)

    def entries(self) -> int:
        """Stored entries: map keys plus the members of set/dict values."""
        return count_entries(self._maps.values())


BUCKETS: tuple[type[Any], ...] = (list, set, frozenset, dict)
"""The values whose members :func:`count_entries` counts (the native build's field
maps join them: :func:`operators.nodemaps.register_dict_bucket`)."""


def count_entries(maps: Iterable[MutableMapping[Any, Any]]) -> int:
    """Map keys plus the members of list/set/dict values, over ``maps``.

    >>> count_entries([{1: {2, 3}}, {4: 5}])
    4
    """
    total = 0
    for m in maps:
        total += len(m)
        for v in m.values():
            if isinstance(v, BUCKETS):
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


def read_only_get(m: MutableMapping[Any, Any]) -> Callable[..., Any]:
    """``m.get`` for a walk that only reads: on a dict (a :class:`TrackedMap` too) the
    C-level ``dict.get``, which marks nothing dirty, so an enumeration does not make
    the runners write back the sets it walked.

    >>> from operators.writeback import TrackedMap
    >>> m = TrackedMap(); m[1] = {2}; _ = m.take_dirty(); read_only_get(m)(1), m.dirty
    ({2}, set())
    """
    return dict.get.__get__(m) if isinstance(m, dict) else m.get
