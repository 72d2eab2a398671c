"""The write-back cache for runners whose state lives in an external keyed store (Flink
MapState, Spark transformWithState MapState): the operators work on plain dicts
(:class:`TrackedMap`, through :class:`WriteBackState`, the State protocol of
:mod:`operators.state`); the runner writes back, at each epoch or batch end, only the
entries touched since, in the byte form of :func:`encode_entry` / :func:`encode_key`.

Example:
    >>> st = WriteBackState()
    >>> st.map("G2.semijoin")[(1,)] = 1
    >>> st.changes()
    [('G2.semijoin', {(1,): 1}, [])]
"""

from __future__ import annotations

import datetime
import pickle
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

_IMMUTABLE = (int, float, str, bytes, bool, tuple, frozenset, type(None))


def _holds_immutable(value: Any) -> bool:
    return isinstance(value, _IMMUTABLE)



class _Tag:
    """Marks a stored key as one element of a container value (see :class:`TrackedMap`):
    ``(MEMBER, key, element)`` for a set, ``(ITEM, key, item key)`` for a dict. Pickles
    as a reference to its module-level name, so it loads as the same object."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:  # encode_key's text of it: no plain value reads like this
        return f"<{self.name}>"

    def __reduce__(self) -> str:
        return self.name


MEMBER = _Tag("MEMBER")
"""Tag of a stored set member: ``(MEMBER, key, element) -> None``."""
ITEM = _Tag("ITEM")
"""Tag of a stored dict item: ``(ITEM, key, item key) -> item value``."""


BIG_CONTAINER = 64
"""A set or dict value with more elements than this is stored one entry per element
(see :class:`TrackedMap`)."""
SMALL_CONTAINER = 16
"""A value stored per element goes back to one entry once it has fewer elements than
this (far below BIG_CONTAINER, so a value near the bound does not switch every epoch)."""


class TrackedMap(dict[Any, Any]):
    """A dict that remembers which keys may have changed since :meth:`take_dirty`.

    Every write marks its key. While the map holds only immutable values (counts,
    tuples, flags: most maps), reads are plain dict reads at C speed and mark nothing.
    The first mutable value stored (a set or dict the operator may change in place)
    turns the map, for good, into a :class:`_MutableTrackedMap`, where every read of a
    mutable value marks its key too, and ``items()``/``values()`` mark every key
    (operators that walk a whole map, like a major rebalance, pay O(map) anyway).

    A marked key's value is written back whole. That is right for the small groups and
    buckets most keys hold, not for a big one: the root's group holds every top tuple
    of the partition, and rewriting it whole at every epoch that changes it would make
    an epoch cost O(state). So a set or dict value of over :data:`BIG_CONTAINER`
    elements is stored one entry per element (``(MEMBER, key, element) -> None``,
    ``(ITEM, key, item key) -> value``): at write-back it becomes a
    :class:`TrackedSet` / :class:`TrackedDict`, which notes each element it gains or
    loses in ``elements`` (reads of it mark nothing), and only those are written.

    >>> m = TrackedMap(); m["b"] = 2; m["a"] = {1}; _ = m.take_dirty()
    >>> m["a"].add(3); m.get("b"); sorted(m.take_dirty())
    2
    ['a']
    >>> st = WriteBackState(); g = st.map("root.proj"); g[()] = set(range(100))
    >>> len(st.changes()[0][1]), type(g[()]).__name__  # past 64: put per element
    (100, 'TrackedSet')
    >>> g[()].add(100); st.changes()
    [('root.proj', {(<MEMBER>, (), 100): None}, [])]
    """

    __slots__ = ("dirty", "elements", "tag")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.dirty: set[Any] = set()
        self.elements: dict[Any, set[Any]] = {}
        """Key -> the elements its per-element value gained or lost since the last
        :meth:`take_elements` (filled by the TrackedSet/TrackedDict values)."""
        self.tag: _Tag | None = None
        """MEMBER or ITEM once a value is stored per element (a map holds sets or
        dicts, not both)."""
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

    def take_elements(self) -> dict[Any, set[Any]]:
        """Per key stored per element, the elements changed since the last call."""
        # The values note into this very dict (TrackedSet.record): cleared, not swapped.
        out = self.elements.copy()
        self.elements.clear()
        return out

    def track(self, key: Any, value: set[Any] | dict[Any, Any]) -> TrackedSet | TrackedDict:
        """Replace ``key``'s set or dict value by its per-element kind (nothing noted)."""
        tag = MEMBER if isinstance(value, set) else ITEM
        if self.tag is None:
            self.tag = tag
        elif self.tag is not tag:
            msg = "a map stores sets or dicts per element, not both"
            raise TypeError(msg)
        tracked: TrackedSet | TrackedDict = (
            TrackedSet(value) if tag is MEMBER else TrackedDict(value))
        tracked.record, tracked.key = self.elements, key
        dict.__setitem__(self, key, tracked)
        return tracked

    def _release(self, key: Any) -> None:
        """``key``'s value is about to leave the map: if stored per element, note all its
        elements (their entries must go) and detach it."""
        old = dict.get(self, key)
        if type(old) is TrackedSet or type(old) is TrackedDict:
            self.elements.setdefault(key, set()).update(old)
            old.record = None

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
        self._release(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        key = next(reversed(dict.keys(self)))
        return key, self.pop(key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        for key in list(dict.keys(self)):
            self._release(key)
        self.dirty.update(dict.keys(self))
        dict.clear(self)

    def __ior__(self, other: Any) -> TrackedMap:  # type: ignore[misc]
        self.update(other)
        return self


class _NotesElements:
    """What :class:`TrackedSet` and :class:`TrackedDict` share: ``_note`` records one
    changed element in the owning map's change record (``record``) under the value's
    ``key``; a value outside any map (``record`` None) records nothing."""

    __slots__ = ()
    record: dict[Any, set[Any]] | None
    key: Any

    def _note(self, element: Any) -> None:
        record = self.record
        if record is not None:
            changed = record.get(self.key)
            if changed is None:
                record[self.key] = {element}
            else:
                changed.add(element)


class TrackedSet(_NotesElements, set[Any]):
    """A set value of a :class:`TrackedMap`: notes every element it gains or loses in
    the map's change record (``record``) under its key. Pickles as a plain set.

    >>> m = TrackedMap(); g = m.track(1, {2})
    >>> g.add(3); g.discard(2); g.discard(9); sorted(m.take_elements()[1])
    [2, 3, 9]
    """

    __slots__ = ("key", "record")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.record: dict[Any, set[Any]] | None = None
        """The owning map's change record (None outside a map)."""
        self.key: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (set, (list(self),))

    def add(self, element: Any) -> None:
        self._note(element)
        set.add(self, element)

    def discard(self, element: Any) -> None:
        self._note(element)
        set.discard(self, element)

    def remove(self, element: Any) -> None:
        set.remove(self, element)
        self._note(element)

    def pop(self) -> Any:
        element = set.pop(self)
        self._note(element)
        return element

    def clear(self) -> None:
        for element in self:
            self._note(element)
        set.clear(self)

    def update(self, *others: Iterable[Any]) -> None:
        for other in others:
            for element in other:
                self.add(element)

    def difference_update(self, *others: Iterable[Any]) -> None:
        for other in others:
            for element in other:
                self.discard(element)

    def intersection_update(self, *others: Iterable[Any]) -> None:
        keep = set(self).intersection(*others)
        self.difference_update([e for e in self if e not in keep])

    def symmetric_difference_update(self, other: Iterable[Any]) -> None:
        for element in set(other):
            if element in self:
                self.discard(element)
            else:
                self.add(element)

    def __ior__(self, other: Any) -> TrackedSet:  # type: ignore[misc]
        self.update(other)
        return self

    def __isub__(self, other: Any) -> TrackedSet:  # type: ignore[misc]
        self.difference_update(other)
        return self

    def __iand__(self, other: Any) -> TrackedSet:  # type: ignore[misc]
        self.intersection_update(other)
        return self

    def __ixor__(self, other: Any) -> TrackedSet:  # type: ignore[misc]
        self.symmetric_difference_update(other)
        return self


class TrackedDict(_NotesElements, dict[Any, Any]):
    """A dict value of a :class:`TrackedMap` (a bucket of item -> count): notes every
    item key it sets or removes in the map's change record under its key. Reads are
    plain dict reads. Its items' values must be immutable (they are counts). Pickles as
    a plain dict.

    >>> m = TrackedMap(); b = m.track(1, {"a": 1})
    >>> b["a"] = 2; del b["a"]; b["c"] = 1; sorted(m.take_elements()[1])
    ['a', 'c']
    """

    __slots__ = ("key", "record")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record: dict[Any, set[Any]] | None = None
        """The owning map's change record (None outside a map)."""
        self.key: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))

    def __setitem__(self, item: Any, value: Any) -> None:
        self._note(item)
        dict.__setitem__(self, item, value)

    def __delitem__(self, item: Any) -> None:
        dict.__delitem__(self, item)
        self._note(item)

    def setdefault(self, item: Any, default: Any = None) -> Any:
        self._note(item)
        return dict.setdefault(self, item, default)

    def pop(self, item: Any, *default: Any) -> Any:
        self._note(item)
        return dict.pop(self, item, *default)

    def popitem(self) -> tuple[Any, Any]:
        item, value = dict.popitem(self)
        self._note(item)
        return item, value

    def update(self, *args: Any, **kwargs: Any) -> None:
        for item, value in dict(*args, **kwargs).items():
            self[item] = value

    def clear(self) -> None:
        for item in self:
            self._note(item)
        dict.clear(self)

    def __ior__(self, other: Any) -> TrackedDict:  # type: ignore[misc]
        self.update(other)
        return self


class _MutableTrackedMap(TrackedMap):
    """A :class:`TrackedMap` that holds mutable values: a read of one marks its key (the
    caller may change the value in place), and so does every key walked by ``items()``
    or ``values()``; values stored per element note their own changes and are not
    marked. Same layout as its base, so a map switches by ``__class__``."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        if self.tag is not None:
            if dict.get(self, key) is value:
                return  # a value stored per element, stored again: nothing changes
            self._release(key)
        self.dirty.add(key)  # already switched: no check of the value's type
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        self.dirty.add(key)
        if self.tag is not None:
            self._release(key)
        dict.__delitem__(self, key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self.dirty.add(key)
        return dict.setdefault(self, key, default)

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if not isinstance(value, _UNMARKED):
            self.dirty.add(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        value = dict.get(self, key, default)
        if value is not default and not isinstance(value, _UNMARKED):
            self.dirty.add(key)
        return value

    def items(self) -> Any:
        self.dirty.update(k for k, v in dict.items(self) if not isinstance(v, _UNMARKED))
        return dict.items(self)

    def values(self) -> Any:
        self.dirty.update(k for k, v in dict.items(self) if not isinstance(v, _UNMARKED))
        return dict.values(self)


_CONTAINERS = (TrackedSet, TrackedDict)
_UNMARKED = (*_IMMUTABLE, *_CONTAINERS)
"""Values a read does not mark: immutable ones, and those that note their own changes."""
_ABSENT = object()


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

    def field_map(self, name: str, nkey: int, nval: int,
                  key_at: tuple[int, ...] | None = None) -> TrackedMap:
        """:meth:`map`: the runners write these entries back as any other's."""
        return self.map(name)

    def field_map_factory(self) -> None:
        """None: a map is never kept inside another here (the write-back tracks each
        map's own entries)."""
        return None

    def names(self) -> list[str]:
        return sorted(self._maps)

    def changes(self) -> list[tuple[str, dict[Any, Any], list[Any]]]:
        """Per map with changes: (name, stored key -> new value, removed stored keys);
        resets the tracking. A stored key is a map key, or for an element of a value
        stored per element ``(MEMBER, key, element)`` / ``(ITEM, key, item key)``."""
        out = []
        for name, m in self._maps.items():
            dirty = m.take_dirty()
            if not dirty and not m.elements:
                continue
            get = dict.get.__get__(m)
            puts: dict[Any, Any] = {}
            gone: list[Any] = []
            for key in dirty:
                value = get(key, _ABSENT)
                if value is _ABSENT:
                    gone.append(key)
                elif type(value) in _CONTAINERS:
                    continue  # stored per element: its own record says what changed
                elif type(value) in (set, dict) and len(value) > BIG_CONTAINER:
                    # From now on per element: its whole entry goes, and every element
                    # counts as changed (written below with the other elements).
                    m.elements.setdefault(key, set()).update(m.track(key, value))
                    gone.append(key)
                else:
                    puts[key] = value
            elements = m.take_elements()
            if elements:
                _element_changes(m, elements, puts, gone)
            out.append((name, puts, gone))
        return out

    def load(self, name: str, entries: Iterable[tuple[Any, Any]]) -> None:
        """Fill map ``name`` from the store (restore); nothing is marked changed."""
        m = self.map(name)
        for k, v in entries:
            _store(m, k, v)
        m.note_values(dict.values(m))

    def apply_stored(self, name: str, puts: dict[Any, Any], gone: Iterable[Any]) -> None:
        """Apply changes another worker wrote to the store (a catch-up); nothing is
        marked changed. Removals first: a value that changes how it is stored (whole,
        per element) loses its old entries and gains its new ones in one write-back."""
        m = self.map(name)
        for k in gone:
            if _tagged(k):
                container: Any = dict.get(m, k[1])
                if type(container) in _CONTAINERS:
                    # C-level removal: nothing noted as changed.
                    (set.discard if k[0] is MEMBER else _dict_pop)(container, k[2])
                    if not container:
                        container.record = None
                        dict.__delitem__(m, k[1])
            else:
                old: Any = dict.pop(m, k, None)
                if type(old) in _CONTAINERS:
                    old.record = None
        for k, v in puts.items():
            _store(m, k, v)
        m.note_values(dict.values(m) if m.tag is not None else puts.values())

    def entries(self) -> int:
        return sum(len(m) for m in self._maps.values())


def _element_changes(m: TrackedMap, elements: dict[Any, set[Any]],
                     puts: dict[Any, Any], gone: list[Any]) -> None:
    """The stored entries of the per-element values' changes (see :class:`TrackedMap`);
    a value that shrank below SMALL_CONTAINER goes back to one whole entry."""
    tag = m.tag
    get = dict.get.__get__(m)
    for key, changed in elements.items():
        value = get(key)
        if type(value) not in _CONTAINERS:
            # Removed or replaced (a whole value's entry is put above): its elements go.
            gone.extend((tag, key, e) for e in changed)
        elif len(value) < SMALL_CONTAINER:
            # What is stored of it lies within its elements now and the changed ones.
            gone.extend((tag, key, e) for e in changed.union(value))
            plain: Any = set(value) if tag is MEMBER else dict(value)
            value.record = None
            dict.__setitem__(m, key, plain)
            puts[key] = plain
        elif tag is MEMBER:
            for e in changed:
                if e in value:
                    puts[(tag, key, e)] = None
                else:
                    gone.append((tag, key, e))
        else:
            for e in changed:
                v = dict.get(value, e, _ABSENT)
                if v is _ABSENT:
                    gone.append((tag, key, e))
                else:
                    puts[(tag, key, e)] = v


def _dict_pop(d: dict[Any, Any], item: Any) -> None:
    dict.pop(d, item, None)


def _store(m: TrackedMap, k: Any, v: Any) -> None:
    """Put one stored entry into ``m``: a whole value, or one element of a value stored
    per element (created, tracked, on its first element); nothing noted as changed."""
    if _tagged(k):
        tag, key, element = k
        container: Any = dict.get(m, key)
        if type(container) not in _CONTAINERS:
            container = m.track(key, set() if tag is MEMBER else {})
        if tag is MEMBER:
            set.add(container, element)
        else:
            dict.__setitem__(container, element, v)
    else:
        dict.__setitem__(m, k, v)


_SCALARS = frozenset({int, str, float, bool, type(None), bytes, Decimal, datetime.date})
"""Types whose ``repr`` is their encoding (canonical, injective within the type) and
reads back as the same value (:func:`decode_key`)."""

_KEY_NAMES: dict[str, Any] = {"__builtins__": {}, "Decimal": Decimal, "datetime": datetime,
                              "nan": float("nan"), "inf": float("inf"),
                              "MEMBER": MEMBER, "ITEM": ITEM}
"""The names :func:`decode_key` evaluates a key's text with (what ``repr`` writes, and
the tags of a value stored per element)."""


def _tagged(key: Any) -> bool:
    """Whether ``key`` is one element of a value stored per element: ``(tag, key,
    element)``."""
    return type(key) is tuple and len(key) == 3 and type(key[0]) is _Tag


def _reads_back(key: Any) -> bool:
    """Whether :func:`encode_key`'s text of ``key`` evaluates back to it: a plain value,
    or a tuple (nested or not) of them."""
    return type(key) in _SCALARS or (type(key) is tuple and all(map(_reads_back, key)))


def encode_entry(key: Any, value: Any) -> bytes:
    """A state entry as stored in a runner's keyed map state, stored under
    :func:`encode_key`'s text of ``key``: a pickled 1-tuple ``(value,)`` when that text
    reads back as the key (:func:`decode_key`: a plain value, a tuple of them, nested or
    not, or one element of a value stored per element), else the pickled ``(key,
    value)`` pair. Without the 9-byte frame header protocol 4+
    puts on every pickle: most entries are a few bytes, and an unframed pickle loads the
    same. Not pickling the key again is most of an entry's cost for keys of decimals
    and dates (a TPC-H row: ~9 us pickled, ~0.4 us for its count alone), and most of
    its bytes.

    >>> import pickle
    >>> blob = encode_entry(123, 3); pickle.loads(blob), len(blob)
    ((3,), 7)
    >>> pickle.loads(encode_entry(((1, "a"),), {(1, 2): 2}))  # nested: the value too
    ({(1, 2): 2},)
    >>> decode_entry("(1,'a')", pickle.loads(encode_entry((1, "a"), 5)))
    ((1, 'a'), 5)
    >>> key = (ITEM, (), (58368,))  # one item of a dict stored per element
    >>> decode_entry(encode_key(key), pickle.loads(encode_entry(key, 6))) == (key, 6)
    True
    >>> pickle.loads(encode_entry(frozenset({1}), 2))  # (a set's text reads as a set)
    (frozenset({1}), 2)
    """
    if type(key) in _SCALARS or (type(key) is tuple and _SCALARS.issuperset(map(type, key))):
        blob = _dumps((value,), _PROTOCOL)
    elif _reads_back(key[1:] if _tagged(key) else key):
        # A nested tuple, or one element of a value stored per element (a big group's
        # member): its key's text reads back too, so the entry is its value alone (a
        # few bytes, where the pair repeated the key and pickled a tag by its module's
        # name: 45 bytes an entry for an order key's count).
        blob = _dumps((value,), _PROTOCOL)
    else:
        blob = _dumps((key, value), _PROTOCOL)
    # b"\x80\x05" PROTO, then b"\x95" FRAME and its 8-byte length, then the opcodes
    return blob[:2] + blob[11:] if blob[2] == 0x95 else blob


def decode_entry(text: str, stored: tuple[Any, ...]) -> tuple[Any, Any]:
    """The (key, value) pair of an entry read back from a store: ``text`` its key's
    :func:`encode_key` text, ``stored`` its :func:`encode_entry` bytes unpickled (a
    1-tuple: the key is read from ``text``; a pair, as every entry before layout 10:
    the key is in it)."""
    if len(stored) == 1:
        return decode_key(text), stored[0]
    return stored[0], stored[1]


def decode_key(text: str) -> Any:
    """The key :func:`encode_key` wrote as ``text``, for the keys whose entries
    :func:`encode_entry` stores without it (plain values and tuples of them: their
    text is their ``repr``; the elements of a value stored per element). Read at a
    restore only (an ``eval`` with no builtins, over a checkpoint this job wrote, which
    is trusted as much as the pickles beside it).

    >>> from decimal import Decimal; import datetime
    >>> key = (1, "a'b", None, 2.5, True, b"x", Decimal("1.50"), datetime.date(1996, 3, 13))
    >>> decode_key(encode_key(key)) == key, decode_key(encode_key(float("-inf")))
    (True, -inf)
    """
    return eval(text, _KEY_NAMES)  # noqa: S307 - repr text of plain values, see above


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
    if _tagged(key):
        # One element of a value stored per element: the generic text below, no loop.
        return f"({key[0].name},{encode_key(key[1])},{encode_key(key[2])})"
    if isinstance(key, tuple):
        return "(" + ",".join(encode_key(k) for k in key) + ("," if len(key) == 1 else "") + ")"
    if isinstance(key, frozenset):
        return "{" + ",".join(sorted(encode_key(k) for k in key)) + "}"
    return repr(key)
