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
import functools
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import BinaryIO, Literal

from connectors.base import DeadLetterSink
from connectors.csv_sinks import (  # (the sinks, re-exported: this module's API)
    CollectingSink,
    CsvStreamSink,
    DeadLetterCsvSink,
    DeltaCsvSink,
    ResumeError,
    SnapshotCsvSink,
)
from connectors.position import InputTracker
from core.errors import InputError
from core.records import EpochEnd, Op, Record, Update
from core.schema import (
    INT_RANGES,
    SHARED_VALUES_PER_COLUMN,
    Column,
    ColumnType,
    Relation,
    Schema,
    ValueParseError,
    shared_parser,
)

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
    "KEY": "an IVMFLOW_KEY value (text)",
}


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
    fast = line_parser(schema)
    for lineno, raw in enumerate(lines, first_line):
        if fast is not None:
            done = fast(raw, source_name, lineno)
            if done is not None:
                if mark is not None:
                    mark()
                yield done
                continue
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


LineParse = Callable[[str, str, int], "Record | None"]
"""``(line, source name, line number)``: the record of a common update-file line, or
``None`` for the Python parser to read it."""

# The column types the C parser reads itself (core/native_parse.pyx); the others (FLOAT,
# TIMESTAMP, BOOL, KEY) go through their Python parser from C, field by field.
_C_KINDS: dict[ColumnType, int] = {"INT": 0, "DECIMAL": 1, "DATE": 2, "TEXT": 3}
_C_OTHER = 4
_LONG = 2**63 - 1


def line_parser(schema: Schema) -> LineParse | None:
    """The C parser of the update file's common lines for ``schema`` (one copy, fields
    plain or quoted without a quote inside: ``+,lineitem,1,...``), where the native
    build runs and is not turned off (``IVMFLOW_NATIVE=0``,
    :func:`core.native.native_mode`); ``None`` otherwise.
    It makes the very records the Python parser makes, and leaves it every line or
    field it is not sure of, so errors read the same (docs/architecture.md, "Reading
    update files"). A failed build falls back to Python quietly unless the native
    build is required (``IVMFLOW_NATIVE=1``).

    >>> from core.schema import Column, Relation, Schema
    >>> s = Schema({"G": Relation("G", (Column("src", "INT"), Column("dst", "INT")))})
    >>> parse = line_parser(s)  # (None where no native build runs, or IVMFLOW_NATIVE=0)
    >>> parse is None or parse("+,G,1,2\\n", "u.csv", 3) == Update("+", "G", (1, 2))
    True
    """
    from core.native import native_mode

    mode = native_mode(None)
    return None if mode == "off" else _built_line_parser(schema, mode == "on")


@functools.lru_cache(maxsize=32)
def _built_line_parser(schema: Schema, required: bool) -> LineParse | None:
    from core.native import NativeBuildError, native_available, native_parse

    if not required and native_available() is not None:
        return None
    try:
        module = native_parse()
    except NativeBuildError:
        if required:
            raise
        return None
    relations = {rel.name: [_c_column(c) for c in rel.columns]
                 for rel in schema.relations.values()}
    parser = module.LineParser(relations, Update, EpochEnd)
    record: LineParse = parser.record
    return record


def _c_column(col: Column) -> tuple[int, int, int, int, int, object, object, int]:
    """A column as the C parser takes it: (kind, low, high, digits before the point,
    scale, the Python parser, Decimal, the shared values' cap)."""
    kind = _C_KINDS.get(col.type, _C_OTHER)
    lo, hi = INT_RANGES[col.width or 64] if col.type == "INT" else (0, 0)
    return (kind, max(lo, -_LONG), min(hi, _LONG),
            col.precision - col.scale if col.type == "DECIMAL" else 0,
            col.scale if col.type == "DECIMAL" else 0,
            shared_parser(col), Decimal, SHARED_VALUES_PER_COLUMN)


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
