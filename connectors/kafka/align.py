"""How the records of several partitions (and topics) become one deterministic
stream of epochs; see :mod:`connectors.kafka`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


@dataclass
class AlignedEpoch(Generic[T]):
    """One whole epoch: its records in stream order, and the marker that closed it in
    each stream (stream order)."""

    items: list[T]
    markers: list[T]


class EpochAligner(Generic[K, T]):
    """Cut several ordered streams into common epochs at their markers (module
    docstring, "Deterministic order").

    Push each stream's records in its own order with :meth:`push` (and its markers with
    :meth:`mark`); :meth:`pop_epochs` returns the epochs that every stream has closed,
    each with the streams' records concatenated in stream order; :meth:`tail` returns
    what follows the last complete epoch (end of a bounded read).

    >>> a: EpochAligner[int, str] = EpochAligner([0, 1])
    >>> a.push(1, "b1"); a.mark(1, "*1"); a.push(1, "b2")
    >>> a.pop_epochs()                   # stream 0 has not reached its marker yet
    []
    >>> a.push(0, "a1"); a.mark(0, "*0")
    >>> [(e.items, e.markers) for e in a.pop_epochs()]
    [(['a1', 'b1'], ['*0', '*1'])]
    >>> a.tail()
    ['b2']
    """

    def __init__(self, streams: Sequence[K]) -> None:
        if not streams:
            msg = "an EpochAligner needs at least one stream"
            raise ValueError(msg)
        if len(set(streams)) != len(streams):
            msg = f"streams must be distinct, found {list(streams)!r}"
            raise ValueError(msg)
        self.streams = tuple(streams)
        self._open: dict[K, list[T]] = {s: [] for s in self.streams}
        self._closed: dict[K, deque[tuple[list[T], T]]] = {s: deque() for s in self.streams}

    def push(self, stream: K, item: T) -> None:
        """Append a record to ``stream``'s open epoch."""
        self._open[stream].append(item)

    def mark(self, stream: K, marker: T) -> None:
        """``stream`` reached its next marker (``marker`` is returned with the epoch)."""
        self._closed[stream].append((self._open[stream], marker))
        self._open[stream] = []

    @property
    def buffered(self) -> int:
        """Records held back (closed in some streams but not yet in all, or open)."""
        closed = sum(len(seg) for q in self._closed.values() for seg, _ in q)
        return closed + sum(len(v) for v in self._open.values())

    def pop_epochs(self) -> list[AlignedEpoch[T]]:
        """The epochs every stream has closed, oldest first (removed from the buffer)."""
        out: list[AlignedEpoch[T]] = []
        while all(self._closed[s] for s in self.streams):
            items: list[T] = []
            markers: list[T] = []
            for s in self.streams:
                seg, marker = self._closed[s].popleft()
                items.extend(seg)
                markers.append(marker)
            out.append(AlignedEpoch(items, markers))
        return out

    def take_head(self) -> dict[K, list[T]]:
        """Each stream's records of the oldest epoch not yet released (its first closed
        segment, else its open records), removed from the buffer: the epoch's later
        records and its markers stay, so :meth:`pop_epochs` releases it, with what is
        left of it, once every stream has closed it."""
        out: dict[K, list[T]] = {}
        for s in self.streams:
            seg = self._closed[s][0][0] if self._closed[s] else self._open[s]
            out[s] = list(seg)
            seg.clear()
        return out

    def tail(self) -> list[T]:
        """Everything not yet released, in stream order: each stream's closed segments
        (markers dropped) then its open one.  Call at the end of a bounded read, after
        :meth:`pop_epochs`; the buffer is emptied."""
        out: list[T] = []
        for s in self.streams:
            for seg, _ in self._closed[s]:
                out.extend(seg)
            self._closed[s].clear()
            out.extend(self._open[s])
            self._open[s] = []
        return out
