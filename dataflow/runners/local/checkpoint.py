"""State checkpoints of the local runner over a Kafka update topic.

Without a checkpoint the local runner rebuilds its state by replaying the update topic
from its first record on every start, so the topic must keep its whole history.  With
``--checkpoint DIR`` it writes, at an epoch boundary whose output is already committed,
the database (every base tuple with its multiplicity), the epoch and snapshot numbers and
the source offsets of that boundary (for a change stream cut by ``--epoch-ms``, each
partition's window there too).  A restart loads the database into a fresh view (the
maintained structures, heavy/light classes included, are a function of the database, so
the deltas that follow are the same) and reads on from the offsets; the epochs between the
checkpoint and the last one in the output are recomputed and skipped by the sinks as
before.

The file, ``DIR/local-state.jsonl``, is JSON Lines: a header object, then one
``[relation, [values...], multiplicity]`` array per base tuple (``int``, ``float``,
``str``, ``bool`` and ``null`` as JSON keeps them exactly; ``DECIMAL``, ``DATE`` and
``TIMESTAMP`` values as their text, read back by the query's column types).  It is written to a
temporary file, fsynced and renamed over the old one, so a crash leaves the old or the new
checkpoint, never a torn one.

Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> ck = Checkpoint("q1", epoch=3, snapshots=1, updates=5, last_rows_epoch=2,
    ...                 positions={("updates", 0): 9}, base=[("G", (1, 2.5, "x"), 2)],
    ...                 windows={("updates", 0): 1_700_000_000})
    >>> write_checkpoint(d, ck)
    >>> read_checkpoint(d, "q1") == ck
    True
    >>> import datetime, decimal
    >>> from core.schema import Column, Relation, Schema
    >>> s = Schema({"T": Relation("T", (Column("p", "DECIMAL", scale=2), Column("d", "DATE")))})
    >>> row = (decimal.Decimal("1.50"), datetime.date(1995, 3, 15))
    >>> write_checkpoint(d, Checkpoint("q2", 1, 0, 1, 1, {}, base=[("T", row, 1)]))
    >>> read_checkpoint(d, "q2", s).base == [("T", row, 1)]
    True
    >>> try:
    ...     read_checkpoint(d, "another query")
    ... except CheckpointError as err:
    ...     print(str(err).split(": ", 1)[1][:60])
    expected a checkpoint of this query and update source, found
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import IvmflowError
from core.records import format_value
from core.schema import Schema

__all__ = [
    "CHECKPOINT_FILE",
    "Checkpoint",
    "CheckpointError",
    "fingerprint",
    "read_checkpoint",
    "write_checkpoint",
]

CHECKPOINT_FILE = "local-state.jsonl"
FORMAT = "ivmflow-local-checkpoint"
VERSION = 1

Row = tuple[Any, ...]
BaseTuple = tuple[str, Row, int]


class CheckpointError(IvmflowError):
    """A checkpoint that cannot be used (exit code 1): torn, foreign or ahead of the
    output.  The message names the file and says what to do."""


@dataclass(frozen=True)
class Checkpoint:
    """The local runner's state at an epoch boundary."""

    fingerprint: str
    """Query text and update source it belongs to (:func:`fingerprint`)."""
    epoch: int
    """Epochs closed (the last one is committed in the output)."""
    snapshots: int
    """Snapshots taken (``*`` markers seen)."""
    updates: int
    """Updates applied so far (for the run's summary)."""
    last_rows_epoch: int
    """The last epoch up to :attr:`epoch` whose delta had rows: the output must hold it
    (sinks write nothing for empty epochs, so the output may end before :attr:`epoch`)."""
    positions: Mapping[tuple[str, int], int]
    """Next offset to read per (topic, partition); streams not listed start at 0."""
    base: list[BaseTuple] = field(default_factory=list)
    """The database: (relation, row, multiplicity > 0)."""
    windows: Mapping[tuple[str, int], int] = field(default_factory=dict)
    """A change stream read with ``--epoch-ms``: per (topic, partition), the window of
    its last event before :attr:`positions` (a partition's windows never go back, so the
    restart must know where it stood); absent in a checkpoint written before them."""


def fingerprint(query_text: str, source: str) -> str:
    """What a checkpoint must match: the query (whitespace-insensitive) and the update
    source (broker and topics, without client options).

    >>> fingerprint("SELECT 1", "kafka://h:1/u") == fingerprint(" SELECT  1 ", "kafka://h:1/u")
    True
    """
    text = " ".join(query_text.split())
    return hashlib.sha256(f"{text}\n{source}".encode()).hexdigest()[:16]


def write_checkpoint(directory: str | os.PathLike[str], ckpt: Checkpoint) -> None:
    """Write ``ckpt`` atomically as ``directory/local-state.jsonl``."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    path = root / CHECKPOINT_FILE
    tmp = path.with_name(path.name + ".tmp")
    header = {
        "format": FORMAT, "version": VERSION, "fingerprint": ckpt.fingerprint,
        "epoch": ckpt.epoch, "snapshots": ckpt.snapshots, "updates": ckpt.updates,
        "last_rows_epoch": ckpt.last_rows_epoch,
        "positions": [[t, p, o] for (t, p), o in sorted(ckpt.positions.items())],
        "tuples": len(ckpt.base),
    }
    if ckpt.windows:
        header["windows"] = [[t, p, w] for (t, p), w in sorted(ckpt.windows.items())]
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=True, default=format_value).encode
        f.writelines(dumps([rel, list(row), mult]) + "\n" for rel, row, mult in ckpt.base)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    # The rename itself must survive a crash too.
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_checkpoint(directory: str | os.PathLike[str], expected: str,
                    schema: Schema | None = None) -> Checkpoint | None:
    """The checkpoint in ``directory`` (``None`` if there is none yet); raises
    :class:`CheckpointError` if it is torn or belongs to another query or source.
    With ``schema``, each row's values are read back as its relation's column types
    (a DECIMAL or DATE is stored as text)."""
    path = Path(directory) / CHECKPOINT_FILE
    try:
        f = open(path, encoding="utf-8")  # noqa: SIM115 - closed below, errors name lines
    except FileNotFoundError:
        return None
    with f:
        header = _header(path, f.readline())
        if header["fingerprint"] != expected:
            msg = (f"{path}: expected a checkpoint of this query and update source, found "
                   f"one written for another ({header['fingerprint']} != {expected}); "
                   f"start with a new --checkpoint directory, or delete this one to "
                   f"recompute from the beginning of the topic")
            raise CheckpointError(msg)
        base = list(_tuples(path, f, schema))
    if len(base) != header["tuples"]:
        raise _torn(path, len(base) + 2, f"{header['tuples']} tuples", f"{len(base)}")
    return Checkpoint(
        fingerprint=header["fingerprint"], epoch=header["epoch"],
        snapshots=header["snapshots"], updates=header["updates"],
        last_rows_epoch=header["last_rows_epoch"],
        positions={(t, p): o for t, p, o in header["positions"]}, base=base,
        windows={(t, p): w for t, p, w in header.get("windows", ())},
    )


def _header(path: Path, line: str) -> dict[str, Any]:
    try:
        header = json.loads(line)
    except ValueError:
        raise _torn(path, 1, "a JSON header", repr(line[:60])) from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _torn(path, 1, f"a header with format {FORMAT!r}", repr(line[:60]))
    if header.get("version") != VERSION:
        raise _torn(path, 1, f"version {VERSION}", repr(header.get("version")))
    return header


def _tuples(path: Path, lines: Iterable[str], schema: Schema | None) -> Iterable[BaseTuple]:
    for lineno, line in enumerate(lines, 2):
        try:
            rel, row, mult = json.loads(line)
            ok = isinstance(rel, str) and isinstance(row, list) and type(mult) is int
        except (ValueError, TypeError):  # not JSON, or not three items
            ok = False
        if not ok or mult < 1:
            raise _torn(path, lineno, "[relation, [values...], multiplicity]", repr(line[:60]))
        relation = schema.lookup(rel) if schema is not None else None
        if relation is None:
            yield rel, tuple(row), mult
            continue
        try:
            yield rel, relation.coerce_row(row), mult
        except ValueError:
            raise _torn(path, lineno, f"values of {rel}'s column types", repr(line[:60])) from None


def _torn(path: Path, line: int, expected: str, found: str) -> CheckpointError:
    return CheckpointError(
        f"{path}:{line}: expected {expected}, found {found}; the checkpoint is damaged "
        f"(it is only ever replaced whole, so the file was changed by hand or the disk "
        f"failed): delete {path.parent} to recompute from the beginning of the topic"
    )
