"""The upsert state of a change-stream reader as files (the Spark runner's: its reader
runs on the driver, outside Spark's state stores), in a directory of the run's
checkpoint.

Versioned by the reader's position (its ``cursor.seq``, :mod:`connectors.kafka.
change_epochs`): ``<seq>.changes`` holds the keys the read that ended at ``seq`` changed
(written before Spark logs that position as a micro-batch's end), ``<seq>.state`` a whole
state. :meth:`FileUpsertStore.restore` loads the newest whole state at or before a
position and the changes after it up to there, and removes what is newer (reads that
Spark will plan again). :meth:`FileUpsertStore.compact`, called when Spark has committed
a position (it will never ask for an older one), folds the changes up to it into a new
whole state once they outweigh the last one, so the files stay O(state) and the work
per read O(changes).

    >>> import tempfile
    >>> from core.schema import Column, Relation, Schema
    >>> schema = Schema({"R": Relation("R", (Column("a", "INT"), Column("b", "INT")),
    ...                                key=(0,))})
    >>> store = FileUpsertStore(tempfile.mkdtemp())
    >>> store.save(3, {("R", (1,)): (1, 10), ("R", (2,)): (2, 20)})
    >>> store.save(5, {("R", (1,)): None})
    >>> a = ChangeApplier(schema); store.restore(3, a); a.state["R"]
    {(1,): (1, 10), (2,): (2, 20)}
    >>> store.save(4, {("R", (3,)): (3, 30)})  # the read after 3 again, another end
    >>> a = ChangeApplier(schema); store.restore(4, a); sorted(a.state["R"])
    [(1,), (2,), (3,)]
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from connectors.kafka.upsert import ChangeApplier
from core.errors import IvmflowError
from core.schema import Row, Schema, Value

__all__ = ["FileUpsertStore", "UpsertStoreError"]

Changes = dict[tuple[str, tuple[Value, ...]], Row | None]

MIN_COMPACT_BYTES = 1 << 20
"""Changes below this size are never folded into a whole state (not worth a rewrite)."""


class UpsertStoreError(IvmflowError):
    """The store does not hold the state a restart needs (files removed by hand)."""


class FileUpsertStore:
    """Module docstring. ``directory`` is created if missing."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _files(self) -> list[tuple[int, str, Path]]:
        """``(seq, "changes" | "state", path)`` in seq order (a state after the
        changes of its seq: it holds them)."""
        out = []
        for p in self.directory.iterdir():
            stem, _, kind = p.name.partition(".")
            if kind in ("changes", "state") and stem.isdigit():
                out.append((int(stem), kind, p))
        return sorted(out, key=lambda f: (f[0], f[1] == "state"))

    def _write(self, name: str, obj: object) -> None:
        tmp = self.directory / f"{name}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / name)

    def save(self, seq: int, changes: Changes) -> None:
        name = f"{seq:020d}.changes"
        # A read without updates ends at the seq of the one before (the same state):
        # its (empty) changes must not replace that one's, only mark the seq as known.
        if changes or not (self.directory / name).exists():
            self._write(name, changes)

    def _load(self, seq: int, applier: ChangeApplier) -> list[tuple[int, str, Path]]:
        """Load the state at ``seq``; returns the files it read."""
        files = [f for f in self._files() if f[0] <= seq]
        states = [i for i, f in enumerate(files) if f[1] == "state"]
        base = states[-1] if states else None
        used = files[base:] if base is not None else files
        if base is None and self._compacted(seq):
            msg = (f"upsert state store {self.directory}: expected the state at sequence "
                   f"{seq}, found it folded into a later one: the checkpoint and the "
                   "store do not match (remove the checkpoint directory to start over)")
            raise UpsertStoreError(msg)
        for _seq, kind, path in used:
            with open(path, "rb") as f:
                data = pickle.load(f)  # noqa: S301 - our own checkpoint files
            if kind == "state":
                for rel, key, row in data:
                    applier.put(rel, key, row)
            else:
                for (rel, key), row in data.items():
                    applier.put(rel, key, row)
        return used

    def _compacted(self, seq: int) -> bool:
        """Whether every whole state is newer than ``seq`` (the changes up to it gone)."""
        states = [f[0] for f in self._files() if f[1] == "state"]
        return bool(states) and min(states) > seq

    def restore(self, seq: int, applier: ChangeApplier) -> None:
        known = {s for s, _kind, _p in self._files()}
        if seq and seq not in known:
            msg = (f"upsert state store {self.directory}: expected the state at sequence "
                   f"{seq} (a position a read ended at), found none there: the checkpoint "
                   "and the store do not match (remove the checkpoint directory to start "
                   "over)")
            raise UpsertStoreError(msg)
        self._load(seq, applier)
        for s, _kind, path in self._files():
            if s > seq:
                path.unlink()

    def compact(self, seq: int, schema: Schema) -> None:
        """Spark committed the position ``seq``: fold the changes up to it into a whole
        state when they weigh more than the last whole state (and
        :data:`MIN_COMPACT_BYTES`), and remove the files it replaces."""
        files = [f for f in self._files() if f[0] <= seq]
        states = [f for f in files if f[1] == "state"]
        last = states[-1] if states else None
        pending = [f for f in files if f[1] == "changes" and (last is None or f[0] > last[0])]
        weight = sum(f[2].stat().st_size for f in pending)
        if weight < max(MIN_COMPACT_BYTES, last[2].stat().st_size if last else 0):
            return
        applier = ChangeApplier(schema)
        used = self._load(seq, applier)
        self._write(f"{seq:020d}.state", list(applier.entries()))
        for _s, _kind, path in used:
            if path.name != f"{seq:020d}.state":
                path.unlink()
