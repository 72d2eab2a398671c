"""A PySpark streaming data source over the update CSV (a file, or a directory of
``*.csv`` files read in name order that may grow).

Records are numbered and cut into epochs here, deterministically from the offset, so
that a restarted query re-reads a batch exactly as before. The offset holds the read
position and the :class:`dataflow.distributed.partitions.EpochCursor`; Spark keeps it in the
query's checkpoint. Rows carry the typed update pickled as binary.

This module imports pyspark; ``operators/`` and ``plans/`` never do.
"""

from __future__ import annotations

import itertools
import operator
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.types import StructType

from connectors.files import read_updates_from_lines
from core.epochs import CLOSE, EpochCursor
from core.faults import fault_point, faults_armed
from core.schema import Schema
from dataflow.distributed.partitions import WorkerPlan
from dataflow.distributed.stages import plan_tags

SOURCE_NAME = "ivmflow_updates"
TAGGED_SCHEMA = (
    "partition INT, seq LONG, epoch INT, kind STRING, atom INT, tup BINARY, dm LONG, "
    "snapshot INT"
)
"""Rows tagged with their partitions (with the option ``plan``, a pickled-then-hex
:class:`~dataflow.distributed.partitions.WorkerPlan`)."""
ROW_SCHEMA = (
    "seq LONG, epoch INT, kind STRING, relation STRING, op STRING, mult LONG, "
    "payload BINARY, snapshot INT"
)


def read_fault_points(before: EpochCursor, after: EpochCursor) -> None:
    """The ``read`` fault point (:mod:`core.faults`) once per update a micro-batch read
    (between the two cursors: each update and each epoch close takes a sequence number).
    Spark plans a batch by reading it in one Python process on the driver, so the count
    follows the stream; a batch read again after a restart (``readBetweenOffsets``)
    does not count."""
    if faults_armed():
        for _ in range((after.seq - before.seq) - (after.epoch - before.epoch)):
            fault_point("read")


def _files(path: str) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        return sorted(f for f in p.iterdir() if f.suffix == ".csv" and f.is_file())
    return [p]


class UpdateCsvSource(DataSource):
    """``spark.readStream.format("ivmflow_updates").option("path", ...)``.

    Options: ``path``; ``schema`` (pickled-then-hex :class:`Schema`); ``epoch`` (updates
    per epoch, 0 = markers only); ``batch_lines`` (lines per micro-batch);
    ``bounded`` (``true``: a file that ends - close the last epoch at its end);
    ``plan`` (optional: rows come tagged with their partitions, :data:`TAGGED_SCHEMA`)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return TAGGED_SCHEMA if "plan" in self.options else ROW_SCHEMA

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return UpdateCsvStreamReader(dict(self.options))


class UpdateCsvStreamReader(SimpleDataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["path"]
        self.schema_obj: Schema = pickle.loads(bytes.fromhex(options["schema"]))
        self.epoch_size = int(options.get("epoch", "0")) or None
        self.batch_lines = int(options.get("batch_lines", "10000"))
        self.bounded = options.get("bounded", "true") == "true"
        self.plan: WorkerPlan | None = (
            pickle.loads(bytes.fromhex(options["plan"])) if "plan" in options else None
        )

    def initialOffset(self) -> dict[str, Any]:
        return {"file": 0, "line": 0, "byte": 0, "done": False, **EpochCursor().to_dict()}

    def _lines(
        self, start: dict[str, Any], limit: int | None, stop: dict[str, Any] | None = None
    ) -> tuple[list[tuple[str, int, str]], dict[str, Any]]:
        """Up to ``limit`` complete lines from the start position, or the lines up to the
        position ``stop``: (file, lineno, text), and the position after them. A file is
        entered at the offset's byte position, so a batch reads its own lines, not the
        whole file before them (an offset without one, from ivmflow 0.2, skips lines)."""
        files = _files(self.path)
        fi, li = int(start["file"]), int(start["line"])
        byte: int | None = start.get("byte")
        out: list[tuple[str, int, str]] = []
        while fi < len(files):
            stop_line = int(stop["line"]) if stop is not None and fi == int(stop["file"]) else None
            with open(files[fi], "rb") as fh:
                if byte is None:
                    for _ in range(li):
                        fh.readline()
                    byte = fh.tell()
                else:
                    fh.seek(byte)
                while (limit is None or len(out) < limit) and (stop_line is None or li < stop_line):
                    raw = fh.readline()
                    if not raw.endswith(b"\n"):
                        break  # the end, or a line still being written: wait for it
                    li += 1
                    byte += len(raw)
                    out.append((str(files[fi]), li, raw.decode("utf-8")))
                else:
                    break  # the limit or the stop position
            if stop_line is not None or fi + 1 >= len(files):
                break
            fi, li, byte = fi + 1, 0, 0
        return out, {"file": fi, "line": li, "byte": byte}

    def _rows(
        self, start: dict[str, Any], lines: list[tuple[str, int, str]], at_end: bool
    ) -> tuple[list[tuple[Any, ...]], EpochCursor]:
        cursor = EpochCursor.from_dict(start)
        records: list[Any] = []
        # One parser call per file's run of lines (consecutive by construction of _lines).
        for fname, run in itertools.groupby(lines, key=operator.itemgetter(0)):
            texts = list(run)
            records.extend(read_updates_from_lines(
                [text for _f, _n, text in texts], self.schema_obj, fname,
                first_line=texts[0][1]))
        numbered = list(cursor.number(records, self.epoch_size, final=at_end))
        if self.plan is not None:
            # Tagged here, in the source: one Python stage less per micro-batch.
            dumps = pickle.dumps
            return [(p, seq, epoch, kind, atom, None if t is None else dumps(t), dm, snap)
                    for p, seq, epoch, kind, atom, t, dm, snap in plan_tags(self.plan, numbered)
                    ], cursor
        rows: list[tuple[Any, ...]] = []
        for n in numbered:
            if n.kind == CLOSE:
                rows.append((n.seq, n.epoch, CLOSE, None, None, 0, None, n.snapshot))
            else:
                u = n.update
                assert u is not None
                rows.append(
                    (n.seq, n.epoch, "u", u.relation, u.op, u.mult,
                     pickle.dumps((u.row, u.source)), 0)
                )
        return rows, cursor

    def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[Any, ...]], dict[str, Any]]:
        if start.get("done"):
            return iter(()), start
        lines, pos = self._lines(start, self.batch_lines)
        files = _files(self.path)
        exhausted = self.bounded and (
            pos["file"] >= len(files) - 1 and len(lines) < self.batch_lines
        )
        rows, cursor = self._rows(start, lines, at_end=exhausted)
        end = {**pos, "done": exhausted, **cursor.to_dict()}
        read_fault_points(EpochCursor.from_dict(start), cursor)
        return iter(rows), end

    def readBetweenOffsets(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[tuple[Any, ...]]:
        if start.get("done"):
            return iter(())
        lines, _ = self._lines(start, None, stop=end)
        rows, _ = self._rows(start, lines, at_end=bool(end.get("done")))
        return iter(rows)

    def commit(self, end: dict[str, Any]) -> None:
        return None
