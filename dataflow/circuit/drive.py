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
from connectors.position import InputCommit, InputPosition, InputTracker, position
from core.errors import InputError, IvmflowError
from core.faults import fault_point, faults_armed
from core.memory import CHECK_EVERY, HeapSettler, StateLimit
from core.records import EpochDelta, EpochEnd, Record, Update, format_update
from core.schema import Row
from operators.node import Node

__all__ = ["DriveStats", "InputChangedError", "LiveView", "MaintainedView", "drive",
           "input_changed"]

_INVALID_HINT = "fix the record or run with --on-error skip to send it to the dead-letter file"


class MaintainedView(Protocol):
    """What :func:`drive` needs from ``CompiledQuery.maintain()``."""

    def apply(self, update: Update) -> None: ...

    def end_epoch(self) -> EpochDelta: ...

    @property
    def pending_updates(self) -> int: ...

    def snapshot(self) -> list[tuple[int, Row]]: ...


class LiveView(MaintainedView, Node[Update], Protocol):
    """A query's live view hosted in this process (:class:`dataflow.circuit.view.View`, or a
    DAG's :class:`dataflow.circuit.views.DagView`): what :func:`drive` needs, the node protocol
    (:mod:`operators.node`), and the notes of a run's summary."""

    @property
    def native_note(self) -> str:
        """Which hot path runs and why (``compiled``, ``interpreted: <why>``)."""
        ...

    @property
    def delete_check(self) -> str:
        """Which delete check runs, in a few words."""
        ...


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
    stopped: bool = False
    """The run was stopped on request before the end of its source; the epoch open at
    that moment was dropped (every epoch counted here is whole)."""


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
    should_stop: Callable[[], bool] | None = None,
    tracker: InputTracker | None = None,
    on_input: Callable[[InputCommit], None] | None = None,
    resume: InputCommit | None = None,
    limit: StateLimit | None = None,
) -> DriveStats:
    """Apply ``records`` to ``view``, closing epochs by the rules of the module docstring.

    ``on_delta`` receives every closed epoch (also empty ones; file sinks write nothing
    for those).  ``on_snapshot(k, rows)`` is called after the k-th ``*`` marker.  An
    :class:`InputError` from ``view.apply`` (e.g. deleting an absent tuple) stops the run
    (``on_error="fail"``; the open epoch is not emitted) or sends the record to
    ``dead_letter`` and goes on (``"skip"``).  Errors raised by the record iterator itself
    propagate unchanged.  Pass ``stats`` to watch the counters while this runs.

    ``should_stop()`` is asked before each record: once it is true the run ends at the
    last whole epoch (the open one is dropped, never emitted cut short) and
    ``stats.stopped`` says so. With the ``tracker`` of a file source
    (:mod:`connectors.position`), ``on_input`` hears where the input stood after each
    closed epoch, just before ``on_delta``; ``resume``, the input position a sink's
    commit record kept, makes this run close epochs at its cuts too and check that
    epochs ``1..resume.epoch`` end where they did (:class:`InputChangedError` if not).
    ``limit`` (``--max-state``, :class:`core.memory.StateLimit`) is checked once epoch
    ``k`` is written (its delta, and its snapshot after a marker), before the next
    record is read (not after the last epoch), and every ``CHECK_EVERY`` updates of an
    open epoch (a load is one epoch of millions): the :class:`StateLimitError` it
    raises ends the run there, the open epoch not emitted.

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
    read = fault_point if faults_armed() else None
    check = _InputCheck(tracker, resume, epoch_size) if tracker is not None else None

    def close_epoch(by_marker: bool) -> None:
        nonlocal in_epoch
        delta = view.end_epoch()
        if by_marker and not delta.closed_by_marker:
            delta = dataclasses.replace(delta, closed_by_marker=True)
        updates, in_epoch = in_epoch, 0
        st.epochs += 1
        st.delta_rows += len(delta.rows)
        if read is not None:
            fault_point("epoch")
        if check is not None:
            where = check.closed(st.epochs)
            if on_input is not None:
                on_input(where)
        on_delta(delta)
        settler.epoch_closed(updates)  # (after the delta is out: no epoch waits on it)

    settled = 0  # epochs the limit has seen
    settler = HeapSettler()

    for rec in records:
        if should_stop is not None and should_stop():
            st.stopped = True
            return st
        if limit is not None and settled < st.epochs:
            # (here, not in close_epoch: a marker's snapshot is written first)
            settled = st.epochs
            limit.check(settled)
        if check is not None:
            check.consumed(st.epochs)
        if isinstance(rec, EpochEnd):
            close_epoch(True)
            if on_snapshot is not None:
                st.snapshots += 1
                on_snapshot(st.snapshots, view.snapshot())
            continue
        if read is not None:
            read("read")
        try:
            view.apply(rec)
        except InputError as err:
            if on_error == "fail":
                raise _with_source(err, rec) from None
            st.skipped += 1
            if dead_letter is not None:
                dead_letter.write(_with_source(err, rec))
            if in_epoch and check is not None and check.at_cut():
                close_epoch(False)
            continue
        st.updates += 1
        in_epoch += 1
        if limit is not None and in_epoch % CHECK_EVERY == 0:
            limit.check_open(st.epochs + 1, in_epoch)
        if (epoch_size is not None and in_epoch >= epoch_size) or (
                check is not None and check.at_cut()):
            close_epoch(False)
    if in_epoch:
        if check is not None:
            check.cut_here()
        close_epoch(False)
    if check is not None:
        check.ended(st.epochs)
    return st


class InputChangedError(IvmflowError):
    """A resumed run's input differs from the one its committed epochs were read from
    (changed, truncated, or cut into epochs otherwise): resuming would emit wrong rows."""


class _InputCheck:
    """:func:`drive`'s bookkeeping of a file source's position: each consumed record's
    end position, the end-of-input cuts, and the check of a resumed run against the
    commit record (:mod:`connectors.position`)."""

    def __init__(self, tracker: InputTracker, resume: InputCommit | None,
                 epoch_size: int | None) -> None:
        self.tracker = tracker
        self.resume = resume
        self.epoch_size = epoch_size
        self.cuts: list[int] = list(resume.cuts) if resume is not None else []
        self._cut_set = set(self.cuts)
        self.raw: tuple[int, int, int] | None = None  # (offset, crc, adler) of the last record
        if resume is not None and resume.epoch_size != epoch_size:
            def size(n: int | None) -> str:
                return "no --epoch" if n is None else f"--epoch {n}"
            msg = (f"cannot resume: epochs 1-{resume.epoch} were cut with "
                   f"{size(resume.epoch_size)}, this run has {size(epoch_size)}; resume "
                   f"with the same options (or start afresh without --resume)")
            raise InputChangedError(msg)

    def consumed(self, closed: int) -> None:
        self.raw = raw = self.tracker.consume()
        r = self.resume
        if r is not None and closed < r.epoch and raw[0] > r.position.offset:
            found = f"epoch {closed + 1} reads on past that byte"
            raise self._changed(found)

    def at_cut(self) -> bool:
        return self.raw is not None and self.raw[0] in self._cut_set

    def cut_here(self) -> None:
        """The open epoch ends at the end of the input (not at a ``*`` or a count)."""
        if self.raw is not None and self.raw[0] not in self._cut_set:
            self.cuts.append(self.raw[0])
            self._cut_set.add(self.raw[0])

    def closed(self, epoch: int) -> InputCommit:
        pos = position(self.raw) if self.raw is not None else InputPosition(0, 1)
        r = self.resume
        if r is not None and epoch == r.epoch and pos != r.position:
            found = ("other bytes before it" if pos.offset == r.position.offset
                     else f"it ends at byte {pos.offset}")
            raise self._changed(found)
        return InputCommit(epoch, pos, tuple(self.cuts), self.epoch_size)

    def ended(self, epochs: int) -> None:
        r = self.resume
        if r is not None and epochs < r.epoch:
            end = self.tracker.offset
            found = f"the input ends at byte {end}, in epoch {epochs + 1}"
            raise self._changed(found)

    def _changed(self, found: str) -> InputChangedError:
        assert self.resume is not None
        return input_changed(self.resume, found)


def input_changed(resume: InputCommit, found: str) -> InputChangedError:
    """The error of a resume whose input is not the one its committed epochs were read
    from (``found``: what is there now)."""
    r = resume
    msg = (f"cannot resume: the input is not the one epochs 1-{r.epoch} were read "
           f"from (epoch {r.epoch} ended at byte {r.position.offset}; now {found}); "
           f"it was changed or truncated: start afresh without --resume")
    return InputChangedError(msg)


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
