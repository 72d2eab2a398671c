"""File connectors: the update CSV reader and the atomic CSV sinks (docs/formats.md).

Update file, one record a line::

    # comment
    +,G,1,2        insert one copy of (1, 2) into G
    -2,G,1,2       delete two copies
    *              end of epoch (and snapshot request)

Sinks write each epoch (or snapshot) as one block: a single append, flushed and fsynced,
after which a sidecar ``<path>.commit`` (JSON ``{"epoch": k, "bytes": n}``) records the
committed length, replaced atomically.  A restarted run opens the sink with
``resume=True``: the file is cut back to the committed length, so a half-written epoch is
never kept, and ``last_committed_epoch`` says which epochs are already in the file.

Example:
    >>> from core.schema import Column, Relation, Schema
    >>> s = Schema({"G": Relation("G", (Column("src", "INT"), Column("dst", "INT")))})
    >>> recs = list(read_updates_from_lines(["+,g,1,2", "*", "-3,G,1,"], s, "u.csv"))
    >>> recs[0]
    Update(op='+', relation='G', row=(1, 2), mult=1, source='u.csv:1')
    >>> recs[2].mult, recs[2].row
    (3, (1, None))
"""

from __future__ import annotations

import csv
import errno
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Literal, TextIO

from connectors.base import DeadLetterSink
from connectors.position import InputCommit, InputTracker
from core.consolidate import order_rows
from core.errors import InputError, IvmflowError
from core.faults import fault_point
from core.records import EpochDelta, EpochEnd, Op, Record, Update, csv_line, format_value
from core.schema import ColumnType, Relation, Row, Schema, Value, ValueParseError

__all__ = [
    "SKIP_HINT",
    "CollectingSink",
    "CsvStreamSink",
    "DeadLetterCsvSink",
    "DeltaCsvSink",
    "OnError",
    "ResumeError",
    "SnapshotCsvSink",
    "SourceLines",
    "holds_records",
    "source_files",
    "read_updates",
    "read_updates_from_lines",
]

OnError = Literal["fail", "skip"]

SKIP_HINT = "fix the record or run with --on-error skip to send it to the dead-letter file"
"""The hint every bad-record error carries."""

_OP_RE = re.compile(r"([+-])([0-9]+)")
_PLAIN_OPS: dict[str, tuple[Op, int]] = {"+": ("+", 1), "-": ("-", 1)}
_TYPE_WORDS: dict[ColumnType, str] = {
    "INT": "an INT (integer)",
    "FLOAT": "a FLOAT (number)",
    "TEXT": "a TEXT value",
    "BOOL": "a BOOL (true/false)",
    "DECIMAL": "a DECIMAL (plain decimal text, e.g. 1234.50)",
    "DATE": "a DATE (ISO, e.g. 1995-03-15)",
    "TIMESTAMP": "a TIMESTAMP (ISO, e.g. 1995-03-15 10:00:00)",
}


class ResumeError(IvmflowError):
    """A sink cannot resume: its file and its commit record disagree."""


# ---------------------------------------------------------------------------------------
# Reading


class _Undecodable(str):
    """A line whose bytes are not UTF-8 (shown with backslash escapes)."""

    __slots__ = ()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def holds_records(path: str | Path) -> bool:
    """Whether an update file (or directory of ``*.csv``) holds any record, an update or
    a ``*`` line, i.e. whether a run over it closes an epoch: scans to the first line
    that is neither blank nor a ``#`` comment (stdin, ``-``: unknown, ``False``).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "u.csv"
    >>> _ = p.write_text("# nothing yet\\n\\n")
    >>> holds_records(p), (p.write_text("*\\n") and holds_records(p))
    (False, True)
    """
    p = Path(path)
    if str(path) == "-" or not p.exists():
        return False
    files = sorted(f for f in p.iterdir() if f.suffix == ".csv" and f.is_file()) \
        if p.is_dir() else [p]
    for f in files:
        with open(f, "rb") as fh:
            for raw in fh:
                line = raw.strip()
                if line and not line.startswith(b"#"):
                    return True
    return False


def source_files(path: str | Path) -> list[Path]:
    """The files an update source reads, in order: the file itself, or a directory's
    ``*.csv`` files in name order (stdin, ``-``, and a missing path: none)."""
    p = Path(path)
    if str(path) == "-" or not p.exists():
        return []
    if p.is_dir():
        return sorted(f for f in p.iterdir() if f.suffix == ".csv" and f.is_file())
    return [p]


class SourceLines:
    """The line a record was read from, by the record's ``source`` (``<path>:<line>``
    as :func:`read_updates` names it): what a dead letter holds, the line as it was
    read and not the record written anew from its values (``1`` in a DECIMAL(5,2)
    column stays ``1``, not ``1.00``). Nothing is kept while a file is read: a lookup
    reads the file again, on from the line looked up before (a run's dead letters in
    file order cost one pass over the file). Stdin cannot be read again: its
    :attr:`tracker` (the reader's :class:`~connectors.position.InputTracker`) keeps the
    line read last, which is the record's while the runner applies it (stdin is never
    read ahead). A source this reader did not name gives ``None``.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "u.csv"
    >>> _ = p.write_text("# prices\\n+,P,1\\n-,P,2.5\\n")
    >>> lines = SourceLines(p)
    >>> lines(f"{p}:3"), lines(f"{p}:2"), lines("other.csv:1")
    ('-,P,2.5', '+,P,1', None)
    """

    def __init__(self, path: str | Path) -> None:
        name = str(path)
        self.stdin = name == "-"
        self.tracker: InputTracker = _LastLine() if self.stdin else InputTracker()
        p = Path(path)
        files = source_files(p) if not self.stdin else []
        self._paths = {(os.path.join(name, f.name) if p.is_dir() else name): f
                       for f in files}
        self._at: tuple[str, int, int] = ("", 1, 0)
        """(name, line number, byte offset) where the last lookup stopped reading"""

    def __call__(self, source: str) -> str | None:
        name, _, number = source.rpartition(":")
        if not number.isdigit():
            return None
        lineno = int(number)
        if self.stdin:
            last = self.tracker
            assert isinstance(last, _LastLine)
            if name != "<stdin>" or last.count != lineno:
                return None
            return _line_text(last.last, lineno)
        path = self._paths.get(name)
        if path is None:
            return None
        at_name, at_line, offset = self._at
        if at_name != name or at_line > lineno:
            at_line, offset = 1, 0
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                while True:
                    raw = f.readline()
                    if not raw:
                        return None
                    offset += len(raw)
                    at_line += 1
                    if at_line - 1 == lineno:
                        self._at = (name, at_line, offset)
                        return _line_text(raw, lineno)
        except OSError:
            return None


class _LastLine(InputTracker):
    """An input tracker that also keeps the line read last and counts lines."""

    __slots__ = ("count", "last")

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.last = b""

    def line(self, raw: bytes) -> None:
        InputTracker.line(self, raw)
        self.count += 1
        self.last = raw


def _line_text(raw: bytes, lineno: int) -> str:
    """A line's text as the reader sees it (no line break; no byte order mark)."""
    text = raw.decode("utf-8", errors="backslashreplace").rstrip("\r\n")
    return text[1:] if lineno == 1 and text.startswith("\ufeff") else text


def _check_on_error(on_error: str) -> None:
    if on_error not in ("fail", "skip"):
        msg = f"on_error must be 'fail' or 'skip', not {on_error!r}"
        raise ValueError(msg)


def read_updates(
    path: str | Path,
    schema: Schema,
    *,
    on_error: OnError = "fail",
    dead_letter: DeadLetterSink | None = None,
    opened: Callable[[BinaryIO], object] | None = None,
    tracker: InputTracker | None = None,
) -> Iterator[Record]:
    """Read an update CSV file, a directory of them (``*.csv`` in name order), or stdin
    (``"-"``), yielding :class:`Update` and :class:`EpochEnd` records in file order.
    ``opened`` is called with each file as it is opened (a progress line reads its
    position from it). ``tracker`` follows the bytes read (the files of a directory as
    one stream) and notes the position after every record yielded
    (:mod:`connectors.position`).

    Each record's ``source`` is ``"<path>:<line>"``.  A bad record raises
    :class:`InputError`, or with ``on_error="skip"`` goes to ``dead_letter`` and reading
    continues.  A missing path raises :class:`FileNotFoundError` at once (not lazily).

    >>> import tempfile, pathlib
    >>> from core.schema import Column, Relation, Schema
    >>> s = Schema({"G": Relation("G", (Column("src", "INT"), Column("dst", "INT")))})
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "u.csv"
    >>> _ = p.write_text("# demo\\n+,G,1,2\\n*\\n")
    >>> [type(r).__name__ for r in read_updates(p, s)]
    ['Update', 'EpochEnd']
    """
    _check_on_error(on_error)
    name = str(path)
    if name == "-":
        raw = getattr(sys.stdin, "buffer", None)  # (a test's StringIO has none)
        return read_updates_from_lines(
            sys.stdin if raw is None else _decode_lines(raw, tracker), schema, "<stdin>",
            on_error=on_error, dead_letter=dead_letter,
            tracker=tracker if raw is not None else None,
        )
    p = Path(path)
    if p.is_dir():
        files = sorted(f.name for f in p.iterdir() if f.suffix == ".csv" and f.is_file())
        paths = [(p / f, os.path.join(name, f)) for f in files]
    elif p.exists():
        paths = [(p, name)]
    else:
        raise FileNotFoundError(errno.ENOENT, "update source not found", name)
    return _read_files(paths, schema, on_error, dead_letter, opened, tracker)


def _read_files(
    paths: list[tuple[Path, str]],
    schema: Schema,
    on_error: OnError,
    dead_letter: DeadLetterSink | None,
    opened: Callable[[BinaryIO], object] | None = None,
    tracker: InputTracker | None = None,
) -> Iterator[Record]:
    for p, name in paths:
        with open(p, "rb") as f:
            if opened is not None:
                opened(f)
            yield from read_updates_from_lines(
                _decode_lines(f, tracker), schema, name, on_error=on_error,
                dead_letter=dead_letter, tracker=tracker,
            )


def _decode_lines(f: Iterable[bytes], tracker: InputTracker | None = None) -> Iterator[str]:
    # The tracker has read a line when it is handed on: the record parsed from it is
    # marked at the position after it.
    see = tracker.line if tracker is not None else None
    for raw in f:
        if see is not None:
            see(raw)
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            yield _Undecodable(raw.decode("utf-8", errors="backslashreplace"))


def read_updates_from_lines(
    lines: Iterable[str],
    schema: Schema,
    source_name: str = "<input>",
    *,
    on_error: OnError = "fail",
    dead_letter: DeadLetterSink | None = None,
    first_line: int = 1,
    tracker: InputTracker | None = None,
) -> Iterator[Record]:
    """Parse update-CSV lines (e.g. a list, a text file, ``sys.stdin``); see
    :func:`read_updates`.  Lines are numbered from ``first_line``; each record's
    ``source`` is ``f"{source_name}:{lineno}"``.  ``tracker`` (following the bytes
    behind ``lines``) is told of every record yielded.

    >>> from core.schema import Column, Relation, Schema
    >>> s = Schema({"R": Relation("R", (Column("a", "TEXT"), Column("b", "FLOAT")))})
    >>> list(read_updates_from_lines(['+2,R,"x,y",1.5'], s, "mem"))
    [Update(op='+', relation='R', row=('x,y', 1.5), mult=2, source='mem:1')]
    """
    _check_on_error(on_error)
    relations: dict[str, Relation | None] = {}
    mark = tracker.mark if tracker is not None else None
    for lineno, raw in enumerate(lines, first_line):
        text = raw.rstrip("\r\n")
        if lineno == first_line and text.startswith("\ufeff"):  # byte order mark
            text = text[1:]
        stripped = text.strip()
        if not stripped or stripped[0] == "#":
            continue
        source = f"{source_name}:{lineno}"
        if stripped == "*":
            if mark is not None:
                mark()
            yield EpochEnd(source)
            continue
        try:
            record = _parse_record(text, isinstance(raw, _Undecodable), schema, relations,
                                   source)
        except InputError as err:
            if on_error == "fail":
                raise
            if dead_letter is not None:
                dead_letter.write(err)
            continue
        if mark is not None:
            mark()
        yield record


def _bad(source: str, text: str, expected: str, found: str) -> InputError:
    return InputError(source, text, expected, found, SKIP_HINT)


def _parse_record(
    text: str,
    undecodable: bool,
    schema: Schema,
    relations: dict[str, Relation | None],
    source: str,
) -> Record:
    if undecodable:
        raise _bad(source, text, "UTF-8 text", "bytes that are not valid UTF-8")
    quoted: set[int] = set()
    if '"' in text:
        try:
            fields = next(csv.reader([text], strict=True))
        except csv.Error as exc:
            raise _bad(source, text, "a CSV record op,relation,v1,...,vn",
                       f"malformed CSV ({exc})") from None
        # (a field written "" is the empty string, an empty field NULL: DuckDB's CSV
        # reader with allow_quoted_nulls=false)
        quoted = {i - 2 for i in _quoted_empty(text) if i >= 2}
    else:
        fields = text.split(",")

    op_text = fields[0].strip()
    if op_text == "*":
        extra = [f for f in fields[1:] if f.strip()]
        if extra:
            raise _bad(source, text, "'*' alone on its line (epoch end)",
                       f"{_plural(len(extra), 'more field')} after '*'")
        return EpochEnd(source)
    plain = _PLAIN_OPS.get(op_text)
    if plain is not None:
        op, mult = plain
    else:
        m = _OP_RE.fullmatch(op_text)
        if m is None:
            raise _bad(source, text, "op '+', '-', '+N', '-N' or '*'", f"op {op_text!r}")
        op = "+" if m.group(1) == "+" else "-"
        mult = int(m.group(2))
        if mult <= 0:
            raise _bad(source, text, "a positive multiplicity after the op",
                       f"multiplicity {mult} in {op_text!r}")

    if len(fields) < 2:
        raise _bad(source, text, "a relation name after the op", "end of line")
    name = fields[1].strip()
    if name in relations:
        rel = relations[name]
    else:
        rel = relations[name] = schema.lookup(name)
    if rel is None:
        known = ", ".join(sorted(schema.relations)) or "none"
        raise _bad(source, text, f"a relation the query declares ({known})",
                   f"relation {name!r}")

    values = fields[2:]
    if len(values) != rel.arity:
        signature = f"{rel.name}({', '.join(rel.column_names)})"
        raise _bad(source, text, f"{_plural(rel.arity, 'value')} for {signature}",
                   _plural(len(values), "value"))
    try:
        row = rel.parse_row(values, quoted)
    except ValueParseError:
        for i, (col, field_text) in enumerate(zip(rel.columns, values)):
            try:
                if i in quoted:
                    col.parse_quoted_empty()
                else:
                    col.parse(field_text)
            except ValueParseError as err:
                # (out of its type's range: the type and its range; else the words)
                what = err.expected if err.out_of_range else _TYPE_WORDS[col.type]
                raise _bad(source, text, f"{what} for column {rel.name}.{col.name}",
                           err.found) from None
        raise  # pragma: no cover - parse_row failed, so some column fails
    return Update(op, rel.name, row, mult, source)


def _quoted_empty(text: str) -> set[int]:
    """The positions of the fields of a CSV line written ``""`` (the csv module reads
    them as it reads an empty field).

    >>> sorted(_quoted_empty('+,S,"",,"a""b",""'))
    [2, 5]
    """
    out: set[int] = set()
    i = pos = 0
    n = len(text)
    while True:
        if text.startswith('""', pos) and (pos + 2 == n or text[pos + 2] == ","):
            out.add(i)
        elif pos < n and text[pos] == '"':  # (a quoted field: past its closing quote)
            pos += 1
            while pos < n:
                if text[pos] == '"':
                    if text.startswith('""', pos):
                        pos += 2
                        continue
                    break
                pos += 1
        comma = text.find(",", pos)
        if comma < 0:
            return out
        pos = comma + 1
        i += 1


# ---------------------------------------------------------------------------------------
# Formatting


def _text_field(text: str) -> str:
    """A string field as DuckDB's CSV writer quotes it: ``""`` for the empty string (an
    empty field is NULL), quotes around a comma, quote or line break."""
    if not text:
        return '""'
    if '"' in text:
        return '"' + text.replace('"', '""') + '"'
    if "," in text or "\n" in text or "\r" in text:
        return f'"{text}"'
    return text


_FIELD: dict[type, Callable[[Any], str]] = {
    int: str,
    float: repr,
    str: _text_field,
    bool: lambda v: "true" if v else "false",
    type(None): lambda v: "",
}


def _csv_field(value: Value) -> str:
    text = format_value(value)
    return _text_field(text) if isinstance(value, str) else text


def _csv_block(tag: int, rows: Iterable[tuple[int, Row]]) -> str:
    """``tag,mult,v1,...`` lines, quoted as the csv module would (fast path by type)."""
    get = _FIELD.get
    prefix = f"{tag},"
    return "".join([
        f"{prefix}{mult},{','.join([get(type(v), _csv_field)(v) for v in row])}\n"
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
            self._file: BinaryIO = open(self.path, "r+b")  # noqa: SIM115 - closed in close()
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
        if self._fsync:
            os.fsync(self._file.fileno())

    def _commit(self, k: int) -> None:
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
        order_by: Sequence[tuple[int, bool, bool]] = (),
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
