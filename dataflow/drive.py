"""The local runner: drive a maintained view with a record stream, cutting epochs.

Epoch rules (docs/semantics.md): epochs are numbered from 1 in stream order; an epoch ends
at a ``*`` marker (always, even when it holds no update: it still consumes a number, and
snapshot k is taken after the k-th marker), after ``epoch_size`` applied updates, and at
the end of the stream if it holds updates.  Updates rejected with ``on_error="skip"`` do
not count towards ``epoch_size``.

Example (with a toy view that maintains ``SELECT * FROM R``):
    >>> from core.records import Update, EPOCH_END
    >>> class Copy:
    ...     def __init__(self): self.bag, self.open = {}, {}
    ...     pending_updates = property(lambda self: len(self.open))
    ...     def apply(self, u):
    ...         self.open[u.row] = self.open.get(u.row, 0) + u.signed_mult
    ...     def end_epoch(self):
    ...         self.n = getattr(self, "n", 0) + 1
    ...         rows = tuple(sorted((m, r) for r, m in self.open.items() if m))
    ...         self.open = {}
    ...         return EpochDelta(self.n, rows)
    ...     def snapshot(self): return []
    >>> out = []
    >>> stats = drive(Copy(), [Update("+", "R", (1,)), EPOCH_END, Update("+", "R", (2,))],
    ...               epoch_size=None, on_delta=out.append)
    >>> [(d.epoch, d.rows) for d in out], stats.epochs
    ([(1, ((1, (1,)),)), (2, ((1, (2,)),))], 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from connectors.base import DeadLetterSink
from core.errors import InputError
from core.records import EpochDelta, EpochEnd, Record, Update, format_update
from core.schema import Row

__all__ = ["DriveStats", "MaintainedView", "drive"]

_INVALID_HINT = "fix the record or run with --on-error skip to send it to the dead-letter file"


class MaintainedView(Protocol):
    """What :func:`drive` needs from ``CompiledQuery.maintain()``."""

    def apply(self, update: Update) -> None: ...

    def end_epoch(self) -> EpochDelta: ...

    @property
    def pending_updates(self) -> int: ...

    def snapshot(self) -> list[tuple[int, Row]]: ...


@dataclass
class DriveStats:
    """Counters of one :func:`drive` call (also updated live, for progress displays)."""

    updates: int = 0
    """Updates applied."""
    epochs: int = 0
    """Epochs closed (including empty ones)."""
    delta_rows: int = 0
    snapshots: int = 0
    skipped: int = 0
    """Updates rejected by the view and skipped (source-level rejects are not counted)."""


def drive(
    view: MaintainedView,
    records: Iterable[Record],
    *,
    epoch_size: int | None = None,
    on_delta: Callable[[EpochDelta], None],
    on_snapshot: Callable[[int, Sequence[tuple[int, Row]]], None] | None = None,
    on_error: Literal["fail", "skip"] = "fail",
    dead_letter: DeadLetterSink | None = None,
    stats: DriveStats | None = None,
) -> DriveStats:
    """Apply ``records`` to ``view``, closing epochs by the rules of the module docstring.

    ``on_delta`` receives every closed epoch (also empty ones; file sinks write nothing
    for those).  ``on_snapshot(k, rows)`` is called after the k-th ``*`` marker.  An
    :class:`InputError` from ``view.apply`` (e.g. deleting an absent tuple) stops the run
    (``on_error="fail"``; the open epoch is not emitted) or sends the record to
    ``dead_letter`` and goes on (``"skip"``).  Errors raised by the record iterator itself
    propagate unchanged.  Pass ``stats`` to watch the counters while this runs.

    >>> class Null:
    ...     pending_updates, n = 0, 0
    ...     def end_epoch(self):
    ...         self.n += 1
    ...         return EpochDelta(self.n, ())
    ...     def snapshot(self): return []
    >>> from core.records import EPOCH_END
    >>> drive(Null(), [EPOCH_END, EPOCH_END], on_delta=lambda d: None).epochs
    2
    """
    if epoch_size is not None and epoch_size < 1:
        msg = f"epoch_size must be a positive number of updates, not {epoch_size}"
        raise ValueError(msg)
    if on_error not in ("fail", "skip"):
        msg = f"on_error must be 'fail' or 'skip', not {on_error!r}"
        raise ValueError(msg)
    st = stats if stats is not None else DriveStats()
    in_epoch = 0

    def close_epoch(by_marker: bool) -> None:
        nonlocal in_epoch
        delta = view.end_epoch()
        if by_marker and not delta.closed_by_marker:
            delta = dataclasses.replace(delta, closed_by_marker=True)
        in_epoch = 0
        st.epochs += 1
        st.delta_rows += len(delta.rows)
        on_delta(delta)

    for rec in records:
        if isinstance(rec, EpochEnd):
            close_epoch(True)
            if on_snapshot is not None:
                st.snapshots += 1
                on_snapshot(st.snapshots, view.snapshot())
            continue
        try:
            view.apply(rec)
        except InputError as err:
            if on_error == "fail":
                raise _with_source(err, rec) from None
            st.skipped += 1
            if dead_letter is not None:
                dead_letter.write(_with_source(err, rec))
            continue
        st.updates += 1
        in_epoch += 1
        if epoch_size is not None and in_epoch >= epoch_size:
            close_epoch(False)
    if in_epoch:
        close_epoch(False)
    return st


def _with_source(err: InputError, update: Update) -> InputError:
    """Make sure an error raised by the view names the input record and says how to skip
    it."""
    hint = err.hint
    if "--on-error skip" not in hint:
        hint = f"{hint}; {_INVALID_HINT}" if hint else _INVALID_HINT
    if err.source and err.record and hint == err.hint:
        return err
    return InputError(
        err.source or update.source or "<input>",
        err.record or format_update(update),
        err.expected,
        err.found,
        hint,
    )


def run_view(view: Any, records: Iterable[Record], epoch_size: int | None
             ) -> Iterator[EpochDelta]:
    """Feed ``records`` to a live view (a :class:`~dataflow.api.View`, or a DAG of
    views), yielding each closed epoch's delta: an epoch ends at a marker, after
    ``epoch_size`` updates, and at the end of the stream (if it holds updates)."""
    for rec in records:
        if isinstance(rec, EpochEnd):
            yield view.end_epoch(closed_by_marker=True)
            continue
        view.apply(rec)
        if epoch_size and view.pending_updates >= epoch_size:
            yield view.end_epoch()
    if view.pending_updates:
        yield view.end_epoch()
