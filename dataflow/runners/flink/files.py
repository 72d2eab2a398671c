"""A streaming update-file source hosted in the PyFlink job, its read position in Flink
state.

PyFlink has no Python source API, so (as for Kafka, :mod:`dataflow.runners.flink.kafka`)
a tick source (``NumberSequenceSource``, parallelism 1) drives :class:`FileEpochSource`,
a keyed process function (one key) that on every tick reads the next lines of the
update file from the :class:`FilePosition` in its ``ValueState`` (file, byte offset,
line number, and the :class:`~core.epochs.EpochCursor`), parses them, numbers them and
cuts epochs once, in stream order, tags them with their partitions and emits one bundle
per partition. A checkpoint barrier passes between two ticks, so a restored job goes on
from the position of its checkpoint: nothing is read twice, and memory does not grow
with the input (no spool).

* A file is bounded (docs/semantics.md): its last line is read even without a newline,
  the last epoch closes at its end, and the job ends after it. The tick count is
  bounded by its line count (every tick before the end consumes a bundle of lines).
* A directory is a growing stream of ``*.csv`` files in name order: only complete lines
  are read, a file is finished once a later one exists, and new lines or files are
  picked up as they come, until the run is stopped (SIGTERM) - or, with
  ``--stop-at-end``, until the end of what the directory held when the run started.

Bad records fail the job with the file and line (the run exits 1 naming them), or with
``--on-error skip`` are appended to the dead-letter file by the job (at least once: a
restart from a checkpoint may append again the bad records read after it).

This module imports pyflink; ``operators/`` and ``plans/`` never do.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from connectors.files import DeadLetterCsvSink, OnError, read_updates_from_lines
from core.epochs import EpochCursor
from core.schema import Schema
from dataflow.distributed.partitions import WorkerPlan
from dataflow.runners.flink.reader import IDLE_SLEEP_S, UNBOUNDED_TICKS, Profiling, ReadCounters


@dataclass
class FilePosition:
    """Where the source stands: the file being read (a name inside a directory, or the
    file itself), its byte offset and next line number, and the epoch cursor."""

    file: str
    offset: int = 0
    line: int = 1
    cursor: dict[str, int] = field(default_factory=lambda: EpochCursor().to_dict())
    done: bool = False
    stop_after: str | None = None
    """--stop-at-end over a directory: the last file present at the first start, and"""
    stop_size: int | None = None
    """its size then: the run ends there."""


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.csv") if p.is_file())


def _line_count(path: Path, limit: int | None = None) -> int:
    """Lines in a file (the last one may lack its newline), read in 1 MiB chunks."""
    count = 0
    left = limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            chunk = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not chunk:
                break
            count += chunk.count(b"\n")
            if left is not None:
                left -= len(chunk)
    return count + 1


def start_position(path: str, checkpoint_dir: Path, stop_at_end: bool, fresh: bool,
                   batch_lines: int = 1) -> tuple[FilePosition, int]:
    """The first run's start position and tick count, kept in ``file-start.json`` next
    to the checkpoints so that a restarted run uses the same ones. Every tick before
    the end reads ``batch_lines`` lines (or the rest of a file), so a bounded input
    needs its line count / ``batch_lines`` ticks, plus one per file and a margin: no
    run of idle ticks after the end (each would read the position state)."""
    saved = checkpoint_dir / "file-start.json"
    if not fresh and saved.exists():
        data = json.loads(saved.read_text())
        return FilePosition(**data["position"]), int(data["ticks"])
    src = Path(path)
    if src.is_dir():
        files = _files(src)
        pos = FilePosition(files[0].name if files else "")
        ticks = UNBOUNDED_TICKS
        if stop_at_end:
            pos.stop_after = files[-1].name if files else ""
            pos.stop_size = files[-1].stat().st_size if files else 0
            lines = sum(_line_count(f, pos.stop_size if f.name == pos.stop_after else None)
                        for f in files)
            ticks = lines // batch_lines + 2 * len(files) + 10
    else:
        pos = FilePosition(src.name)
        ticks = _line_count(src) // batch_lines + 10
    tmp = saved.with_suffix(".tmp")
    tmp.write_text(json.dumps({"position": asdict(pos), "ticks": ticks}))
    os.replace(tmp, saved)
    return pos, ticks


class FileEpochSource(KeyedProcessFunction):
    """Per tick: up to ``batch_lines`` lines of the input, numbered, tagged and bundled
    per partition (``(partition, [TaggedRow, ...])``)."""

    def __init__(self, path: str, schema: Schema, start: FilePosition, plan: WorkerPlan,
                 epoch_size: int | None, batch_lines: int, on_error: OnError = "fail",
                 dead_letter: str | None = None) -> None:
        self.path = str(Path(path).resolve())
        self.directory = Path(path).is_dir()
        self.schema_blob = pickle.dumps(schema)
        self.start = asdict(start)
        self.plan = plan
        self.epoch_size = epoch_size
        self.batch_lines = batch_lines
        self.on_error = on_error
        self.dead_letter_path = dead_letter
        self.dead_letter: DeadLetterCsvSink | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self.position = runtime_context.get_state(
            ValueStateDescriptor("file_position", Types.PICKLED_BYTE_ARRAY())
        )
        self.schema: Schema = pickle.loads(self.schema_blob)
        self.counters = ReadCounters(runtime_context)
        if self.on_error == "skip" and self.dead_letter_path:
            self.dead_letter = DeadLetterCsvSink(self.dead_letter_path, append=True)
        self.profiling = Profiling("reader")
        self.finished = False  # the input is read to its end (idle ticks skip the state)

    def close(self) -> None:
        if self.dead_letter is not None:
            self.dead_letter.close()
        self.profiling.dump()

    def _current(self, pos: FilePosition) -> Path:
        return Path(self.path) / pos.file if self.directory else Path(self.path)

    def _read_lines(self, pos: FilePosition) -> tuple[list[bytes], bool, str | None]:
        """Complete lines from the position (all lines, the last without newline too,
        when the file is finished); whether the file is read to its end; and, in a
        directory, the file after it (None while there is none)."""
        if self.directory and not pos.file:
            files = _files(Path(self.path))
            if not files:
                return [], False, None
            pos.file = files[0].name
        path = self._current(pos)
        finished = not self.directory
        following: str | None = None
        if self.directory:
            later = [f for f in _files(Path(self.path)) if f.name > pos.file]
            following = later[0].name if later else None
            finished = following is not None or (pos.stop_after == pos.file)
        lines: list[bytes] = []
        limit = pos.stop_size if pos.stop_after == pos.file else None
        with open(path, "rb") as f:
            f.seek(pos.offset)
            while len(lines) < self.batch_lines:
                if limit is not None and f.tell() >= limit:
                    break
                line = f.readline()
                if not line:
                    break
                if not line.endswith(b"\n") and not finished:
                    break  # a line still being written: read it when it is whole
                lines.append(line)
            eof = (limit is not None and f.tell() >= limit) or f.read(1) == b""
        return lines, finished and eof, following

    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        yield from self.profiling.run(self._process)

    def _process(self) -> Iterator[Any]:
        if self.finished:
            return
        saved = self.position.value()
        pos = FilePosition(**(saved if saved is not None else self.start))
        if pos.done:
            self.finished = True
            return
        lines, finished, following = self._read_lines(pos)
        name = str(self._current(pos))
        text = [line.decode("utf-8", errors="surrogateescape") for line in lines]
        records = list(read_updates_from_lines(
            text, self.schema, name, on_error=self.on_error, dead_letter=self.dead_letter,
            first_line=pos.line,
        ))
        pos.offset += sum(len(line) for line in lines)
        pos.line += len(lines)
        last_file = not self.directory or pos.stop_after == pos.file
        if finished and not last_file and following is not None:
            pos.file, pos.offset, pos.line = following, 0, 1
        end = finished and last_file
        cursor = EpochCursor.from_dict(pos.cursor)
        numbered = list(cursor.number(records, self.epoch_size, final=end))
        pos.cursor = cursor.to_dict()
        pos.done = end
        self.position.update(asdict(pos))
        if not numbered:
            if not lines and not end:
                time.sleep(IDLE_SLEEP_S)
            return
        yield from self.counters.emit(self.plan, numbered)
