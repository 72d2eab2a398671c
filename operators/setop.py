"""Set operations maintained: ``UNION [ALL]``, ``INTERSECT [ALL]`` and ``EXCEPT [ALL]``
over views (:class:`plans.setops.SetOperation`), as Z-set sums and counters.

State: per distinct row, its multiplicity in each input (map ``setop.counts``; for
``UNION ALL`` only their sum). The result's multiplicity of a row is a function of its
counts, SQL's bag and set semantics:

=================  =======================================
``UNION ALL``      ``c1 + c2 + ...``
``UNION``          1 if any ``ci > 0``
``INTERSECT ALL``  ``min(c1, c2)``
``INTERSECT``      1 if ``c1 > 0`` and ``c2 > 0``
``EXCEPT ALL``     ``max(c1 - c2, 0)``
``EXCEPT``         1 if ``c1 > 0`` and ``c2 == 0``
=================  =======================================

Rows are equal as SQL's set operations compare them: NULLs equal each other (``IS NOT
DISTINCT FROM``). An epoch costs O(its changed rows): each changed row's counts are
updated once and its result multiplicity compared before and after.

Example (``SELECT x FROM a EXCEPT SELECT y FROM b``, the branches as views ``_sb_0``
and ``_sb_1``):
    >>> from core.records import Update
    >>> from plans.setops import SetOperation
    >>> view = SetOpState(SetOperation("_so_0", "except", True, ("_sb_0", "_sb_1")))
    >>> view.apply(Update("+", "_sb_0", (1,), 2)); view.apply(Update("+", "_sb_0", (2,)))
    >>> view.apply(Update("+", "_sb_1", (2,)))
    >>> view.end_epoch().rows
    ((1, (1,)),)
    >>> view.apply(Update("-", "_sb_1", (2,)))      # 2 is no longer in b: it enters
    >>> view.end_epoch().rows
    ((1, (2,)),)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from core.records import Update
from core.schema import Row
from operators.node import BatchNode, Change
from operators.state import DictState, State
from plans.setops import SetOperation

__all__ = ["SetOpState", "multiplicity"]


def _union_all(c: Sequence[int]) -> int:
    return sum(c)


def _union(c: Sequence[int]) -> int:
    return 1 if any(c) else 0


def _intersect_all(c: Sequence[int]) -> int:
    return min(c)


def _intersect(c: Sequence[int]) -> int:
    return 1 if all(c) else 0


def _except_all(c: Sequence[int]) -> int:
    return max(c[0] - sum(c[1:]), 0)


def _except(c: Sequence[int]) -> int:
    return 1 if c[0] and not any(c[1:]) else 0


_RESULT: dict[tuple[str, bool], Callable[[Sequence[int]], int]] = {
    ("union", False): _union_all, ("union", True): _union,
    ("intersect", False): _intersect_all, ("intersect", True): _intersect,
    ("except", False): _except_all, ("except", True): _except}


def multiplicity(op: SetOperation) -> Callable[[Sequence[int]], int]:
    """The result multiplicity of a row from its multiplicity in each input.

    >>> multiplicity(SetOperation("s", "except", False, ("a", "b")))((3, 1))
    2
    """
    return _RESULT[(op.op, op.distinct)]


class SetOpState(BatchNode):
    """A live set operation: ``apply`` its inputs' updates, ``end_epoch`` for the delta
    (the local runner's node; :class:`SetOpTask` is one partition of it on Spark and
    Flink, fed the rows its partition owns)."""

    def __init__(self, spec: SetOperation, state: State | None = None) -> None:
        self.spec = spec
        self.state: State = state if state is not None else DictState()
        self.counts = self.state.map("setop.counts")
        """row -> its multiplicity in each input (a tuple; ``UNION ALL``: their sum)."""
        self.result = multiplicity(spec)
        self.summed = spec.op == "union" and not spec.distinct
        self.width = 1 if self.summed else len(spec.inputs)
        self.inputs_of: dict[str, tuple[int, ...]] = {}
        """relation (lower case) -> the inputs it is (one relation may be several)"""
        for i, rel in enumerate(spec.inputs):
            slot = 0 if self.summed else i
            self.inputs_of[rel.lower()] = (*self.inputs_of.get(rel.lower(), ()), slot)
        self.pending: dict[Row, list[int]] = {}
        self.epoch = 0
        self.updates = 0

    def apply(self, update: Update) -> None:
        self.updates += 1
        self.add(self.inputs_of[update.relation.lower()], update.row, update.signed_mult)

    def add(self, inputs: tuple[int, ...], row: Row, dm: int) -> None:
        """``dm`` copies of ``row`` in each of ``inputs`` (input positions)."""
        d = self.pending.get(row)
        if d is None:
            d = self.pending[row] = [0] * self.width
        for i in inputs:
            d[i] += dm

    def _counts(self, stored: Any) -> tuple[int, ...]:
        if stored is None:
            return (0,) * self.width
        return (stored,) if self.summed else stored

    def close_epoch(self) -> list[Change]:
        counts, result, out = self.counts, self.result, []
        for row, d in self.pending.items():
            before = self._counts(counts.get(row))
            after = tuple(b + x for b, x in zip(before, d))
            if any(c < 0 for c in after):
                msg = (f"set operation {self.spec.name}: row {row!r} would be in input "
                       f"{after.index(min(after)) + 1} {min(after)} times (an input view "
                       "deleted a row it never had)")
                raise RuntimeError(msg)
            if not any(after):
                counts.pop(row, None)
            elif after != before:
                counts[row] = after[0] if self.summed else after
            change = result(after) - result(before)
            if change:
                out.append((change, row))
        self.pending = {}
        return out

    # -- the node protocol (operators.node) --
    def snapshot(self) -> list[Change]:
        """The rows in the result with their multiplicities."""
        out: list[Change] = []
        for row, stored in self.counts.items():
            m = self.result(self._counts(stored))
            if m:
                out.append((m, row))
        return out

    def state_maps(self) -> list[str]:
        return self.state.names()

    def state_entries(self) -> int:
        return len(self.counts)

    def checkpoint(self) -> dict[Row, list[int]]:
        """The open epoch's changes per row and input."""
        return self.pending

    def restore_checkpoint(self, blob: Any) -> None:
        self.pending = blob or {}

