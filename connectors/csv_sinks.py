"""The atomic CSV sinks (docs/formats.md): the delta, snapshot and dead-letter files,
written one committed block at a time, and the in-memory sink of the Python API.

Sinks write each epoch (or snapshot) as one block: a single append, flushed and fsynced,
after which a sidecar ``<path>.commit`` (JSON ``{"epoch": k, "bytes": n}``) records the
committed length, replaced atomically.  A restarted run opens the sink with
``resume=True``: the file is cut back to the committed length, so a half-written epoch is
never kept, and ``last_committed_epoch`` says which epochs are already in the file.
The update CSV reader is :mod:`connectors.files`, which re-exports these sinks.

Example:
    >>> from core.records import EpochDelta
    >>> sink = CollectingSink()
    >>> sink.write_epoch(EpochDelta(1, ((1, (7,)),)))
    >>> [d.rows for d in sink.deltas]
    [((1, (7,)),)]
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, TextIO

from connectors.position import InputCommit
from core.consolidate import OrderBy, order_rows
from core.errors import InputError, IvmflowError
from core.faults import fault_point
from core.records import EpochDelta, csv_line, csv_value
from core.schema import Row

__all__ = ["CollectingSink", "CsvStreamSink", "DeadLetterCsvSink", "DeltaCsvSink",
           "ResumeError", "SnapshotCsvSink"]


class ResumeError(IvmflowError):
    """A sink cannot resume: its file and its commit record disagree."""


# ---------------------------------------------------------------------------------------
# Formatting


_FIELD: dict[type, Callable[[Any], str]] = {
    int: str,
    float: repr,
    str: csv_value,
    bool: lambda v: "true" if v else "false",
    type(None): lambda v: "",
}


def _csv_block(tag: int, rows: Iterable[tuple[int, Row]]) -> str:
    """``tag,mult,v1,...`` lines, quoted as the csv module would (fast path by type)."""
    get = _FIELD.get
    prefix = f"{tag},"
    return "".join([
        f"{prefix}{mult},{','.join([get(type(v), csv_value)(v) for v in row])}\n"
        for mult, row in rows
    ])


# ---------------------------------------------------------------------------------------
# Atomic CSV files


class _AtomicCsvFile:
    """A CSV file appended one committed block at a time (see the module docstring)."""

    def __init__(
        self, path: str | Path, header: Sequence[str], key: str, *, resume: bool, fsync: bool
    ) -> None:
        self.path = Path(path)
        self.commit_path = Path(f"{path}.commit")
        self._key = key
        self._fsync = fsync
        self.last_committed = 0
        self.input: InputCommit | None = None
        """Where the input stood at the last epoch the commit record names."""
        self._input_pending: InputCommit | None = None
        header_bytes = (csv_line(header) + "\n").encode("utf-8")
        # A device or a pipe (/dev/null, /dev/stdout, a FIFO) is written as a stream:
        # it keeps no length to commit (and fsync refuses it), so no sidecar is made
        # beside it and a resumed run cannot cut it back.
        self.stream = self.path.exists() and not self.path.is_file()
        if self.stream:
            if resume:
                msg = (f"cannot resume {self.path}: it is not a regular file (a device or a "
                       "pipe keeps no committed length); write to a file to use --resume")
                raise ResumeError(msg)
            self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed in close()
            self._file.write(header_bytes)
            self._size = len(header_bytes)
            self._file.flush()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        state = self._read_commit() if resume and self.path.exists() else None
        if state is not None:
            k, n, self.input = state
            size = self.path.stat().st_size
            if size < n:
                msg = (f"cannot resume {self.path}: it holds {size} bytes but "
                       f"{self.commit_path} says {n} were committed")
                raise ResumeError(msg)
            with open(self.path, "rb") as f:
                head = f.read(len(header_bytes))
            if head != header_bytes:
                msg = (f"cannot resume {self.path}: its header is {head.decode(errors='replace')!r}"
                       f", this run writes {header_bytes.decode()!r}")
                raise ResumeError(msg)
            self._file = open(self.path, "r+b")  # noqa: SIM115 - closed in close()
            self._file.truncate(n)
            self._file.seek(n)
            self._size = n
            self.last_committed = k
            self._sync()
        else:
            self._file = open(self.path, "wb")  # noqa: SIM115 - closed in close()
            self._file.write(header_bytes)
            self._size = len(header_bytes)
            self._sync()
            self._commit(0)

    def _read_commit(self) -> tuple[int, int, InputCommit | None] | None:
        try:
            text = self.commit_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            state = json.loads(text)
            k, n = state[self._key], state["bytes"]
            where = state.get("input")
            position = None if where is None else InputCommit.from_json(where)
        except (ValueError, KeyError, TypeError, AttributeError):
            msg = f"cannot resume {self.path}: {self.commit_path} is not a commit record"
            raise ResumeError(msg) from None
        if not (isinstance(k, int) and isinstance(n, int)) or k < 0 or n < 0:
            msg = f"cannot resume {self.path}: {self.commit_path} holds {text.strip()!r}"
            raise ResumeError(msg)
        return k, n, position

    def note_input(self, where: InputCommit) -> None:
        """Where the input stands after epoch ``where.epoch``: kept with the next commit,
        or written at :meth:`close` (an epoch without rows commits no block)."""
        latest = self._input_pending or self.input
        if latest is None or where.epoch > latest.epoch:
            self._input_pending = where

    def _sync(self) -> None:
        self._file.flush()
        if self._fsync and not self.stream:
            os.fsync(self._file.fileno())

    def _commit(self, k: int) -> None:
        if self.stream:
            self.last_committed = k
            return
        tmp = Path(f"{self.commit_path}.tmp")
        record: dict[str, Any] = {self._key: k, "bytes": self._size}
        where = self._input_pending or self.input
        if where is not None:
            record["input"] = where.to_json()
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f)
            f.flush()
            if self._fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.commit_path)
        self.last_committed = k
        self.input, self._input_pending = where, None

    def append(self, k: int, block: str) -> None:
        if self._file.closed:
            msg = f"{self.path} is closed"
            raise ValueError(msg)
        if k <= self.last_committed:
            msg = f"{self.path}: {self._key} {k} is not after the last committed one " \
                  f"({self.last_committed})"
            raise ValueError(msg)
        data = block.encode("utf-8")
        self._file.write(data)
        self._sync()
        fault_point("sink.write")  # (the rows are in the file, the record says before)
        self._size += len(data)
        self._commit(k)
        fault_point("sink.commit")

    def close(self) -> None:
        if not self._file.closed:
            if self._input_pending is not None:  # whole epochs since the last block
                self._commit(self.last_committed)
            self._file.close()


class DeltaCsvSink:
    """Delta file sink: header ``epoch,mult,<columns>``, each epoch appended atomically.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "d.csv"
    >>> with DeltaCsvSink(p, ["a", "b"]) as sink:
    ...     sink.write_epoch(EpochDelta(1, ((1, (1, 2.5)), (-1, (2, None)))))
    >>> print(p.read_text(), end="")
    epoch,mult,a,b
    1,1,1,2.5
    1,-1,2,
    >>> DeltaCsvSink(p, ["a", "b"], resume=True).last_committed_epoch
    1
    """

    def __init__(
        self,
        path: str | Path,
        columns: Sequence[str],
        *,
        resume: bool = False,
        fsync: bool = True,
    ) -> None:
        self.columns = tuple(columns)
        self._file = _AtomicCsvFile(
            path, ["epoch", "mult", *self.columns], "epoch", resume=resume, fsync=fsync
        )

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def last_committed_epoch(self) -> int:
        """The last epoch whose rows are in the file (0: none); epochs without rows are
        not recorded (re-running them writes nothing anyway)."""
        return self._file.last_committed

    @property
    def committed_input(self) -> InputCommit | None:
        """Where a file source stood after the last whole epoch the commit record names
        (``None``: the record predates input positions, or the run read no file)."""
        return self._file.input

    def note_input(self, where: InputCommit) -> None:
        """Record where the input stands after epoch ``where.epoch`` (written with the
        next block, or at :meth:`close`)."""
        self._file.note_input(where)

    def write_epoch(self, delta: EpochDelta) -> None:
        """Append the epoch's rows as one committed block; an empty delta writes nothing."""
        if delta.rows:
            self._file.append(delta.epoch, _csv_block(delta.epoch, delta.rows))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> DeltaCsvSink:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class SnapshotCsvSink:
    """Snapshot file sink: header ``snapshot,mult,<columns>``; snapshot k appended
    atomically (sidecar ``{"snapshot": k, "bytes": n}``).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "s.csv"
    >>> with SnapshotCsvSink(p, ["x"]) as sink:
    ...     sink.write_snapshot(1, [(2, ("a",))])
    >>> print(p.read_text(), end="")
    snapshot,mult,x
    1,2,a
    """

    def __init__(
        self,
        path: str | Path,
        columns: Sequence[str],
        *,
        resume: bool = False,
        fsync: bool = True,
        order_by: OrderBy = (),
    ) -> None:
        self.columns = tuple(columns)
        self.order_by = tuple(order_by)
        """The query's ORDER BY (column, descending, nulls first): the order snapshot rows
        are written in, whichever runner merged them."""
        self._file = _AtomicCsvFile(
            path, ["snapshot", "mult", *self.columns], "snapshot", resume=resume, fsync=fsync
        )

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def last_committed_snapshot(self) -> int:
        """The last snapshot with rows in the file (0: none)."""
        return self._file.last_committed

    def write_snapshot(self, k: int, rows: Sequence[tuple[int, Row]]) -> None:
        """Append snapshot ``k`` as one committed block; an empty result writes nothing."""
        if rows:
            if self.order_by:
                rows = list(rows)
                order_rows(rows, self.order_by)
            self._file.append(k, _csv_block(k, rows))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> SnapshotCsvSink:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class CsvStreamSink:
    """Deltas and/or snapshots as CSV on a text stream (stdout): a header, then one
    block per epoch, flushed.  The header comes with the first epoch the run closes
    (rows or not), so a run that fails while connecting prints nothing to the stream.
    The stream is flushed, not closed, by :meth:`close`.

    >>> import sys
    >>> s = CsvStreamSink(sys.stdout, ["a"])
    >>> s.write_epoch(EpochDelta(3, ((-1, (True,)),)))
    epoch,mult,a
    3,-1,true
    """

    def __init__(
        self, stream: TextIO, columns: Sequence[str], *, kind: str = "epoch"
    ) -> None:
        self.stream = stream
        self.columns = tuple(columns)
        self._header: str | None = csv_line([kind, "mult", *self.columns]) + "\n"

    def write_header(self) -> None:
        """Write the header now, if it is not out yet (a runner whose job wrote no rows
        but closed an epoch: the same bytes as a run that wrote its empty epochs)."""
        self._write(0, ())

    def write_epoch(self, delta: EpochDelta) -> None:
        self._write(delta.epoch, delta.rows)

    def write_snapshot(self, k: int, rows: Sequence[tuple[int, Row]]) -> None:
        self._write(k, rows)

    def _write(self, k: int, rows: Sequence[tuple[int, Row]]) -> None:
        text = _csv_block(k, rows) if rows else ""
        if self._header is not None:
            text, self._header = self._header + text, None
        if text:
            self.stream.write(text)
            self.stream.flush()

    def close(self) -> None:
        self.stream.flush()


class DeadLetterCsvSink:
    """Rejected records as CSV ``source,reason,record`` (header included), flushed per
    record; ``count`` says how many were written. ``raw``, when set (a
    :class:`SourceLines`), gives the line a record was read from by its source: the
    record is written as that line (else as the error renders it).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "dead.csv"
    >>> with DeadLetterCsvSink(p) as dl:
    ...     dl.write(InputError("u.csv:4", "+,X,1", "a relation", "relation 'X'"))
    >>> print(p.read_text(), end="")
    source,reason,record
    u.csv:4,"expected a relation, found relation 'X'","+,X,1"
    """

    def __init__(self, path: str | Path, append: bool = False) -> None:
        """``append``: keep what the file holds (a resumed run, or a writer in a job
        that restarts), writing the header only into a new or empty file."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self.raw: Callable[[str], str | None] | None = None
        fresh = not append or not self.path.exists() or self.path.stat().st_size == 0
        self._file = open(self.path, "w" if not append else "a",  # noqa: SIM115
                          encoding="utf-8", newline="")
        self._writer = csv.writer(self._file, lineterminator="\n")
        if fresh:
            self._writer.writerow(["source", "reason", "record"])
            self._file.flush()

    def write(self, error: InputError) -> None:
        line = self.raw(error.source) if self.raw is not None else None
        record = error.record if line is None else line
        self._writer.writerow([error.source, error.reason, record])
        self._file.flush()
        self.count += 1

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> DeadLetterCsvSink:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class CollectingSink:
    """Keeps everything in memory (tests, Python API): ``deltas``, ``snapshots`` and
    ``dead_letters`` lists.  Serves as delta, snapshot and dead-letter sink at once.

    >>> sink = CollectingSink()
    >>> sink.write_epoch(EpochDelta(1, ((1, (1,)),)))
    >>> sink.write_epoch(EpochDelta(2, ()))
    >>> [d.epoch for d in sink.deltas], sink.rows()
    ([1, 2], [(1, 1, (1,))])
    """

    def __init__(self) -> None:
        self.deltas: list[EpochDelta] = []
        self.snapshots: list[tuple[int, list[tuple[int, Row]]]] = []
        self.dead_letters: list[InputError] = []
        self.closed = False

    @property
    def count(self) -> int:
        """Number of dead letters (as :class:`DeadLetterCsvSink`)."""
        return len(self.dead_letters)

    def write_epoch(self, delta: EpochDelta) -> None:
        self.deltas.append(delta)

    def write_snapshot(self, k: int, rows: Sequence[tuple[int, Row]]) -> None:
        self.snapshots.append((k, list(rows)))

    def write(self, error: InputError) -> None:
        self.dead_letters.append(error)

    def rows(self) -> list[tuple[int, int, Row]]:
        """All delta rows as ``(epoch, mult, row)``, as a delta file would hold them."""
        return [(d.epoch, m, r) for d in self.deltas for m, r in d.rows]

    def close(self) -> None:
        self.closed = True
