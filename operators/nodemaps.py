"""What the join-tree nodes share besides the node itself: projectors from a node's
tuple onto a key (as functions and as generated source), compact buckets, and the
read-only views of a node's multiplicities (:class:`KeyedBase`, :class:`IndexedBase`),
:data:`NO_TUPLES` for a sum leaf that keeps none, and :data:`NO_MAP` for a map a node
does not keep.

**Compact buckets.** A node's indexes, live indexes and semi-join groups map a key to
the node's tuples with that key: a set, or a dict tuple -> multiplicity where the
bucket holds the multiplicities. Most keys hold one tuple (an order's key, a part's),
and a one-element set costs 216 bytes in CPython, a one-item dict 184-232, the tuple
itself a pointer: so a bucket of one tuple (of multiplicity 1, in a dict bucket) is the
tuple itself, stored bare, and a container only from the second on (or a multiplicity
above 1). A set bucket of 2 to 64 tuples is a list (96 bytes for 4, where a set costs
216; about 300 for 30, where a set costs 1,240: :data:`core.codegen.SMALL_BUCKET`), and
so is a dict bucket of 2 to 64 tuples of multiplicity 1 (a dict of 2 costs 184 bytes; a
multiplicity above 1 makes it a dict). A tuple is never a list, set or dict, so they
read apart; an absent key reads None, and a bare member is never None (a NULL tuple
of a one-variable node is kept in a container). :func:`members`, :func:`counted` and
:func:`count_in` read any bucket; the generated code writes them (:func:`core.codegen.set_add`,
:func:`operators.nodecode.bucket_put_lines`).

Example:
    >>> make_projector(("a", "b", "c"), False, ("c", "a"))((1, 2, 3))
    (3, 1)
    >>> key_expr("t", ("a", "b"), False, ("b",))
    't[1]'
    >>> list(members((1, 2))), sorted(members({(1, 2), (3, 4)})), members([(1, 2), (3, 4)])
    ([(1, 2)], [(1, 2), (3, 4)], [(1, 2), (3, 4)])
    >>> count_in((1, 2), (1, 2)), count_in({(1, 2): 3}, (1, 2)), count_in(None, (1, 2))
    (1, 3, 0)
    >>> count_in([(1, 2), (3, 4)], (3, 4)), count_in([(1, 2), (3, 4)], (5, 6))
    (1, 0)
    >>> list(counted([(1, 2), (3, 4)])), list(counted({(1, 2): 3})), list(counted((1, 2)))
    ([((1, 2), 1), ((3, 4), 1)], [((1, 2), 3)], [((1, 2), 1)])
    >>> count_in((1, 2), (1, 3)), holds((1, 2), (1, 3)), holds(0, 0), holds(None, None)
    (0, False, True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from operator import itemgetter
from types import MappingProxyType
from typing import Any

import operators.state as state_module
from operators.state import read_only_get

Projector = Callable[[Any], Any]
EMPTY: frozenset[Any] = frozenset()

CONTAINERS: tuple[type[Any], ...] = (list, set, frozenset, dict, MappingProxyType)
"""The types of a bucket that holds its tuples in a container (subclasses too: the
runners' write-back cache tracks sets and dicts as subclasses); anything else is one
bare tuple."""

DICTS: tuple[type[Any], ...] = (dict, MappingProxyType)
"""The container types of a dict bucket (tuple -> multiplicity)."""


def register_dict_bucket(kind: type) -> None:
    """Read maps of type ``kind`` as dict buckets from now on (the native build's
    ``FieldMap``: a top leaf's one group of every tuple,
    :attr:`~operators.joinnode.JoinNode.unit_group`).

    >>> class Counts(dict): ...
    >>> register_dict_bucket(Counts); sorted(counted(Counts({(1, 2): 3, (4, 5): 1})))
    [((1, 2), 3), ((4, 5), 1)]
    """
    global CONTAINERS, DICTS
    if kind not in DICTS:
        CONTAINERS = (*CONTAINERS, kind)
        DICTS = (*DICTS, kind)
        state_module.BUCKETS = (*state_module.BUCKETS, kind)


def members(bucket: Any) -> Any:
    """The tuples of a present bucket (a list, a set, a dict's keys, or the one bare
    tuple)."""
    return bucket if isinstance(bucket, CONTAINERS) else (bucket,)


def counted(bucket: Any) -> Any:
    """(tuple, multiplicity) pairs of a present dict bucket (a bare tuple, and each
    tuple of a list, counts 1)."""
    if isinstance(bucket, DICTS):
        return bucket.items()
    if isinstance(bucket, list):
        return [(t, 1) for t in bucket]
    return ((bucket, 1),)


def count_in(bucket: Any, t: Any) -> int:
    """The multiplicity of ``t`` in a dict bucket, or None (absent): 0 if not there."""
    if bucket is None:
        return 0
    if isinstance(bucket, DICTS):
        n: int = bucket.get(t, 0)
        return n
    if isinstance(bucket, list):
        return 1 if t in bucket else 0
    return 1 if bucket == t else 0


def holds(bucket: Any, t: Any) -> bool:
    """Whether a bucket (None: absent) holds ``t``."""
    if bucket is None:
        return False
    if isinstance(bucket, CONTAINERS):
        return t in bucket
    return bool(bucket == t)


def whole_tuple_lookup(first_read: Callable[..., Any], first_key_of: Projector
                       ) -> Callable[..., Any]:
    """A node's index on its whole tuple, read from its first index (``first_read``:
    its read-only lookup, under ``first_key_of``'s key), which holds every tuple of
    the node: a key's bucket is the tuple itself while the node holds it (its
    multiplicity is the first index's to say), else ``default``.

    >>> by_first = {1: {(1, 2): 3}, 4: (4, 5)}
    >>> read = whole_tuple_lookup(by_first.get, make_projector(("a", "b"), False, ("a",)))
    >>> read((1, 2)), read((4, 5)), read((1, 3)), read((7, 7), EMPTY)
    ((1, 2), (4, 5), None, frozenset())
    """

    def read(k: Any, default: Any = None) -> Any:
        bucket = first_read(first_key_of(k))
        if bucket is None:
            return default
        if isinstance(bucket, DICTS):
            return k if bucket.get(k, 0) else default
        if isinstance(bucket, list):
            # (the member itself, not ``k``: the walks hand it on into the groups it
            # enters, where the node's packed row is 48 bytes and a tuple of its own
            # with its ints some 120: Q21's late lineitems per supplier)
            for u in bucket:
                if u == k:
                    return u
            return default
        # (the tuple the node stores, where it is there bare: the same object)
        return bucket if bucket == k else default

    return read


def empty_key(_t: Any) -> tuple[()]:
    return ()


def _identity(t: Any) -> Any:
    return t


def make_projector(src: tuple[str, ...], src_scalar: bool, dst: tuple[str, ...]) -> Projector:
    """Project a node tuple over ``src`` onto ``dst``. Keys of one variable are bare
    values, of several tuples, of none ``()``; generalized nodes over one variable
    store bare values too."""
    if not dst:
        return empty_key
    if src_scalar:
        return _identity
    pos = [src.index(v) for v in dst]
    if len(pos) == 1:
        return itemgetter(pos[0])
    return itemgetter(*pos)


def key_expr(var: str, src: tuple[str, ...], src_scalar: bool, dst: tuple[str, ...]) -> str:
    """Python source of the same projection applied to the variable named ``var``."""
    if not dst:
        return "()"
    if src_scalar:
        return var
    pos = [src.index(v) for v in dst]
    if len(pos) == 1:
        return f"{var}[{pos[0]}]"
    return "(" + ", ".join(f"{var}[{p}]" for p in pos) + ",)"


def stored_key_expr(var: str, src: tuple[str, ...], src_scalar: bool, dst: tuple[str, ...],
                    key: str) -> str:
    """Python source of the object a new map entry is stored under, for the key
    :func:`key_expr` makes of ``var`` (bound to local ``key``): ``kpack(key)`` when the
    key has several values (the generated code's global: the native build's packed
    row, 48 bytes where a tuple of two ints above 256 takes 112; else as it is), else
    ``key``. Equal to ``key`` and hashing as it does, so readers look it up with plain
    tuples. When the projection keeps every value in order, ``kpack(var)``: a tuple the
    node holds packed is the key itself (one object for the bucket and its key).

    >>> stored_key_expr("t", ("a", "b"), False, ("a", "b"), "k")
    'kpack(t)'
    >>> stored_key_expr("t", ("a", "b", "c"), False, ("c", "a"), "k")
    'kpack(k)'
    >>> stored_key_expr("t", ("a", "b"), False, ("b",), "k")
    'k'
    """
    if src_scalar or len(dst) < 2:
        return key
    return f"kpack({var if dst == src else key})"


class KeyedBase(Mapping[Any, int]):
    """The multiplicities of a key leaf, read through its projection (tuple -> count):
    what callers of ``node.base`` (delete checks, tests) read on other nodes.

    >>> b = KeyedBase({7: 2}, lambda t: t[0])
    >>> b.get((7,), 0), b.get((8,), 0), (7,) in b, len(b)
    (2, 0, True, 1)
    """

    def __init__(self, proj: MutableMapping[Any, int], key_of: Projector) -> None:
        self._proj = proj
        self._key_of = key_of

    def __getitem__(self, t: Any) -> int:
        return self._proj[self._key_of(t)]

    def get(self, t: Any, default: Any = None) -> Any:
        return self._proj.get(self._key_of(t), default)

    def __contains__(self, t: object) -> bool:
        return self._key_of(t) in self._proj

    def __iter__(self) -> Iterator[Any]:
        return (k if type(k) is tuple else (k,) for k in self._proj)

    def __len__(self) -> int:
        return len(self._proj)


class IndexedBase(Mapping[Any, int]):
    """The multiplicities of an atom node with children, read from its first child
    index, whose buckets map each tuple to its multiplicity (so the node keeps no
    ``base`` map: one entry less to store and write back per tuple).

    >>> b = IndexedBase({5: {(1, 5): 2}}, lambda t: t[1])
    >>> b.get((1, 5), 0), b.get((2, 5), 0), b[(1, 5)], (1, 5) in b, list(b), len(b)
    (2, 0, 2, True, [(1, 5)], 1)
    """

    def __init__(self, index: MutableMapping[Any, dict[Any, int]], key_of: Projector) -> None:
        self._get = read_only_get(index)  # a delete check or an enumeration changes nothing
        self._index = index
        self._key_of = key_of

    def __getitem__(self, t: Any) -> int:
        n = count_in(self._get(self._key_of(t)), t)
        if not n:
            raise KeyError(t)
        return n

    def get(self, t: Any, default: Any = None) -> Any:
        return count_in(self._get(self._key_of(t)), t) or default

    def __contains__(self, t: object) -> bool:
        return holds(self._get(self._key_of(t)), t)

    def __iter__(self) -> Iterator[Any]:
        for k in list(self._index):
            yield from members(self._get(k))

    def __len__(self) -> int:
        return sum(len(members(self._get(k))) for k in list(self._index))


class NoTuples:
    """The ``base`` of a *sum leaf*, which keeps no tuples (see :meth:`JoinNode.finish`):
    not a mapping, so no delete check or caller mistakes it for the multiplicities.

    >>> NO_TUPLES.get((1, 2))
    Traceback (most recent call last):
    ...
    LookupError: this node keeps no tuples (a sum leaf: the view checks deletes itself)
    """

    def get(self, t: Any, default: Any = None) -> Any:
        msg = "this node keeps no tuples (a sum leaf: the view checks deletes itself)"
        raise LookupError(msg)

    __getitem__ = get

    def __repr__(self) -> str:
        return "NO_TUPLES"


NO_TUPLES = NoTuples()

NO_MAP: Mapping[Any, Any] = MappingProxyType({})
"""What a node binds in place of a map it does not keep (a generalized node's base, a
lower node's live indexes, ...): empty, and a write fails loudly. Maps are declared only
where they are used, so the distributed runners bind (and Spark initializes per batch)
no state they never write."""
