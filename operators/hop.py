"""Enumeration primitives of IVM-epsilon (docs/algorithms.md, after
P0 Fig. 3-5): UnionNext over possibly overlapping duplicate-free iterators, the hop
iterator (a collection with excluded elements skipped through ``skip_to`` /
``skipped_from`` pointers, merged so that no chains form), and the union of buckets
through hop iterators with a skew-aware ``candidates`` function.

Every iterator offers ``next()`` (``EOF`` at the end) and ``contains(x)``. They read a
frozen state: enumerate between updates (the engine does, at epoch ends).

Example (the union of three overlapping sets, each element once):
    >>> a, b = SetIter({1: 1, 2: 1}), SetIter({2: 1, 3: 1})
    >>> u = HopUnion({"x": [3, 4], "y": [4, 5]}, lambda t: ["x", "y"])
    >>> list(drain(Union([a, b, u])))
    [1, 2, 3, 4, 5]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

EOF: Any = object()
"""End of an enumeration."""
_BOF: Any = object()


class Enumerable(Protocol):
    def next(self) -> Any: ...

    def contains(self, x: Any) -> bool: ...


def drain(it: Enumerable) -> Iterator[Any]:
    """A Python iterator over an enumerable."""
    while True:
        x = it.next()
        if x is EOF:
            return
        yield x


class SetIter:
    """A materialized view's keys: O(1) ``contains`` and delay."""

    def __init__(self, view: Mapping[Any, Any]) -> None:
        self.view = view
        self._it = iter(list(view))

    def next(self) -> Any:
        return next(self._it, EOF)

    def contains(self, x: Any) -> bool:
        return x in self.view


class Union:
    """UnionNext (P0 Fig. 3): an element of the first iterators that the last one also
    holds is replaced by the last one's next element (it is emitted from there), so
    every element of the union comes out exactly once."""

    def __init__(self, iters: Sequence[Enumerable]) -> None:
        self.iters = list(iters)

    def next(self) -> Any:
        return self._next(len(self.iters))

    def _next(self, n: int) -> Any:
        last = self.iters[n - 1]
        if n == 1:
            return last.next()
        t = self._next(n - 1)
        if t is not EOF:
            return last.next() if last.contains(t) else t
        return last.next()

    def contains(self, x: Any) -> bool:
        return any(it.contains(x) for it in self.iters)


class Hop:
    """A hop iterator (P0 Fig. 4) over a duplicate-free sequence: ``exclude(x)`` marks
    ``x`` invalid in O(1); ``next_hop()`` skips invalid ranges with one lookup."""

    def __init__(self, items: Sequence[Hashable]) -> None:
        self.items = list(items)
        self.pos = {x: i for i, x in enumerate(self.items)}
        self.skip_to: dict[Any, Any] = {}
        self.skipped_from: dict[Any, Any] = {}
        self.curr: Any = _BOF

    def _succ(self, x: Any) -> Any:
        i = 0 if x is _BOF else self.pos[x] + 1
        return self.items[i] if i < len(self.items) else EOF

    def _hop(self, x: Any) -> Any:
        return self.skip_to.get(x, x) if x is not EOF else EOF

    def open(self) -> None:
        self.curr = _BOF

    def next_hop(self) -> Any:
        self.curr = self._hop(self._succ(self.curr))
        return self.curr

    def is_empty(self) -> bool:
        return self._hop(self._succ(_BOF)) is EOF

    def contains(self, x: Any) -> bool:
        return x in self.pos

    def exclude(self, x: Any) -> None:
        if x not in self.pos:
            return
        to = self._hop(self._succ(x))
        frm = self.skipped_from.get(x, x)
        self.skip_to[frm] = to
        if to is not EOF:
            self.skipped_from[to] = frm


class HopUnion:
    """The union of buckets via hop iterators (P0 Fig. 5): bucket 1, then bucket 2 minus
    bucket 1, ...; after returning ``t`` it is excluded from the buckets
    ``candidates(t)`` names (the skew-aware CandidateBuckets: only the buckets that
    can hold ``t``), and a bucket left empty is excluded from the bucket list.

    ``buckets`` maps a bucket id to its elements, built lazily on first use (a
    callable or a sequence)."""

    def __init__(
        self,
        buckets: Mapping[Any, Sequence[Any] | Callable[[], Sequence[Any]]],
        candidates: Callable[[Any], Iterable[Any]],
        contains: Callable[[Any], bool] | None = None,
    ) -> None:
        self._sources = buckets
        self._hops: dict[Any, Hop] = {}
        self.candidates = candidates
        self._contains = contains
        self.ibuckets = Hop(list(buckets))
        self.current: Hop | None = None
        self.done = False

    def bucket(self, i: Any) -> Hop:
        h = self._hops.get(i)
        if h is None:
            src = self._sources[i]
            h = Hop(src() if callable(src) else src)
            self._hops[i] = h
        return h

    def next(self) -> Any:
        if self.done:
            return EOF
        t = EOF if self.current is None else self.current.next_hop()
        while t is EOF:
            i = self.ibuckets.next_hop()
            if i is EOF:
                self.done = True
                return EOF
            self.current = self.bucket(i)
            self.current.open()
            t = self.current.next_hop()
        for i in self.candidates(t):
            if i not in self._sources:
                continue
            b = self.bucket(i)
            b.exclude(t)
            if b.is_empty():
                self.ibuckets.exclude(i)
        return t

    def contains(self, x: Any) -> bool:
        if self._contains is not None:
            return self._contains(x)
        return any(self.bucket(i).contains(x) for i in self.candidates(x) if i in self._sources)
