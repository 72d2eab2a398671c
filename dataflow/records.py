"""Records that flow into and out of a maintained query.

Example:
    >>> Update("+", "G", (1, 2)).signed_mult
    1
    >>> Update("-", "G", (1, 2), 3).signed_mult
    -3
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from plans.schema import Row

Op = Literal["+", "-"]


@dataclass(frozen=True, slots=True)
class Update:
    """Insert (``+``) or delete (``-``) ``mult`` copies of ``row`` in ``relation``.

    ``source`` says where the record came from (``file:line`` or ``topic@partition:offset``)
    so that errors found later still point at the input.
    """

    op: Op
    relation: str
    row: Row
    mult: int = 1
    source: str = field(default="", compare=False)

    @property
    def signed_mult(self) -> int:
        return self.mult if self.op == "+" else -self.mult


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """An explicit epoch boundary (the ``*`` line / ``{"op": "*"}`` record)."""

    source: str = field(default="", compare=False)


EPOCH_END = EpochEnd()

Record = Update | EpochEnd
"""What sources yield."""


@dataclass(frozen=True)
class EpochDelta:
    """The consolidated change of the query result in one epoch.

    ``rows`` holds ``(mult, row)`` pairs with non-zero ``mult``, sorted for determinism.
    ``snapshot_requested`` is set when the epoch was closed by an explicit marker.
    """

    epoch: int
    rows: tuple[tuple[int, Row], ...]
    updates: int = 0
    closed_by_marker: bool = False

    def __len__(self) -> int:
        return len(self.rows)
