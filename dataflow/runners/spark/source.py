"""A PySpark streaming data source over the update CSV (a file, or a directory of
``*.csv`` files read in name order that may grow).

Records are numbered and cut into epochs here, deterministically from the offset, so
that a restarted query re-reads a batch exactly as before. The offset holds the read
position and the :class:`dataflow.partitioned.EpochCursor`; Spark keeps it in the
query's checkpoint. Rows carry the typed update pickled as binary.

This module imports pyspark; ``operators/`` and ``plans/`` never do.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.types import StructType

from connectors.files import read_updates_from_lines
from core.epochs import CLOSE, EpochCursor
from core.schema import Schema

SOURCE_NAME = "ivmflow_updates"
ROW_SCHEMA = (
    "seq LONG, epoch INT, kind STRING, relation STRING, op STRING, mult LONG, "
    "payload BINARY, snapshot INT"
)


def _files(path: str) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        return sorted(f for f in p.iterdir() if f.suffix == ".csv" and f.is_file())
    return [p]


class UpdateCsvSource(DataSource):
    """``spark.readStream.format("ivmflow_updates").option("path", ...)``.

    Options: ``path``; ``schema`` (pickled-then-hex :class:`Schema`); ``epoch`` (updates
    per epoch, 0 = markers only); ``batch_lines`` (lines per micro-batch);
    ``bounded`` (``true``: a file that ends - close the last epoch at its end)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return ROW_SCHEMA

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return UpdateCsvStreamReader(dict(self.options))


class UpdateCsvStreamReader(SimpleDataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["path"]
        self.schema_obj: Schema = pickle.loads(bytes.fromhex(options["schema"]))
        self.epoch_size = int(options.get("epoch", "0")) or None
        self.batch_lines = int(options.get("batch_lines", "10000"))
        self.bounded = options.get("bounded", "true") == "true"

    def initialOffset(self) -> dict[str, Any]:
        return {"file": 0, "line": 0, "done": False, **EpochCursor().to_dict()}

    def _lines(
        self, start: dict[str, Any], limit: int | None
    ) -> tuple[list[tuple[str, int, str]], dict[str, Any]]:
        """Up to ``limit`` complete lines from the start position: (file, lineno, text)."""
        files = _files(self.path)
        fi, li = int(start["file"]), int(start["line"])
        out: list[tuple[str, int, str]] = []
        while fi < len(files) and (limit is None or len(out) < limit):
            with open(files[fi], encoding="utf-8") as fh:
                lines = fh.readlines()
            # A line without its newline may still be being written: wait for it.
            complete = len(lines) if not lines or lines[-1].endswith("\n") else len(lines) - 1
            while li < complete and (limit is None or len(out) < limit):
                out.append((str(files[fi]), li + 1, lines[li]))
                li += 1
            if li < complete or (limit is not None and len(out) >= limit):
                break
            if fi + 1 < len(files) or not self.bounded:
                if fi + 1 >= len(files):
                    break
                fi, li = fi + 1, 0
                continue
            break
        return out, {"file": fi, "line": li}

    def _rows(
        self, start: dict[str, Any], lines: list[tuple[str, int, str]], at_end: bool
    ) -> tuple[list[tuple[Any, ...]], EpochCursor]:
        cursor = EpochCursor.from_dict(start)
        records: list[Any] = []
        for fname, lineno, text in lines:
            records.extend(
                read_updates_from_lines([text], self.schema_obj, fname, first_line=lineno)
            )
        rows: list[tuple[Any, ...]] = []
        for n in cursor.number(records, self.epoch_size, final=at_end):
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
        return iter(rows), end

    def readBetweenOffsets(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[tuple[Any, ...]]:
        if start.get("done"):
            return iter(())
        files = _files(self.path)
        lines: list[tuple[str, int, str]] = []
        for fi in range(int(start["file"]), min(int(end["file"]), len(files) - 1) + 1):
            with open(files[fi], encoding="utf-8") as fh:
                text = fh.readlines()
            lo = int(start["line"]) if fi == int(start["file"]) else 0
            hi = int(end["line"]) if fi == int(end["file"]) else len(text)
            lines.extend((str(files[fi]), i + 1, text[i]) for i in range(lo, hi))
        rows, _ = self._rows(start, lines, at_end=bool(end.get("done")))
        return iter(rows)

    def commit(self, end: dict[str, Any]) -> None:
        return None
