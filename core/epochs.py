"""Epoch numbering: a record stream numbered (``seq``) and cut into epochs, the same way
on every runner (docs/semantics.md).

An epoch ends at a ``*`` marker (which also asks for snapshot k, k counting markers),
after ``epoch_size`` updates, and - for a bounded stream - at its end if it holds
updates. The cursor is plain data, so a source can keep it in its offsets or checkpoint.

Example:
    >>> from core.records import EPOCH_END, Update
    >>> c = EpochCursor()
    >>> [(n.seq, n.epoch, n.kind, n.snapshot) for n in
    ...  c.number([Update("+", "R", (1,)), EPOCH_END, Update("+", "R", (2,))], final=True)]
    [(0, 1, 'u', 0), (1, 1, 'c', 1), (2, 2, 'u', 0), (3, 2, 'c', 0)]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from core.records import EpochEnd, Record, Update

__all__ = ["CLOSE", "UPDATE", "EpochCursor", "NumberedRecord"]

UPDATE, CLOSE = "u", "c"


@dataclass
class EpochCursor:
    """Where a numbered stream stands: next sequence number, the open epoch, updates in
    it, and how many ``*`` markers were seen (snapshot numbers). Plain data, so a
    source can keep it in its offsets."""

    seq: int = 0
    epoch: int = 1
    pending: int = 0
    markers: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"seq": self.seq, "epoch": self.epoch, "pending": self.pending,
                "markers": self.markers}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpochCursor:
        return cls(int(d["seq"]), int(d["epoch"]), int(d["pending"]), int(d["markers"]))

    def number(
        self, records: Iterable[Record], epoch_size: int | None = None, final: bool = False
    ) -> Iterator[NumberedRecord]:
        """Number records and insert epoch closes (markers, every ``epoch_size`` updates,
        and - with ``final`` - the end of a bounded stream if the epoch holds updates)."""
        for rec in records:
            if isinstance(rec, EpochEnd):
                self.markers += 1
                yield self._close(snapshot=self.markers)
                continue
            yield NumberedRecord(self.seq, self.epoch, UPDATE, rec, 0)
            self.seq += 1
            self.pending += 1
            if epoch_size and self.pending >= epoch_size:
                yield self._close(snapshot=0)
        if final and self.pending:
            yield self._close(snapshot=0)

    def _close(self, snapshot: int) -> NumberedRecord:
        rec = NumberedRecord(self.seq, self.epoch, CLOSE, None, snapshot)
        self.seq += 1
        self.epoch += 1
        self.pending = 0
        return rec


class NumberedRecord(NamedTuple):
    """One record of a numbered stream: an update (``kind`` ``u``) or an epoch close
    (``c``, with the snapshot number it asks for, 0 for none). A named tuple: one is
    built per record on the readers' hot path."""

    seq: int
    epoch: int
    kind: str
    update: Update | None
    snapshot: int
