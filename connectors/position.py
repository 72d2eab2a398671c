"""Where a file source stood at an epoch boundary, so that a stopped run resumes exactly
there (docs/formats.md, "Commit records").

A file source (an update file, a directory of them read in name order as one stream, or
stdin) is a sequence of bytes. :class:`InputTracker` follows the reader through it line
by line and notes, for every record the reader yields, the :class:`InputPosition` just
after that record's line: the byte offset and a 64-bit digest of every byte before it
(CRC-32 and Adler-32 side by side, both running values, so noting one costs nothing).
The runner takes the position of each record as it consumes it (the reader may be
ahead, buffering), and the delta sink's commit record keeps an :class:`InputCommit` with
each committed epoch: the epoch, its end position, the epoch size the run cut with, and
the *cuts*, the offsets where an epoch ended at the end of the input rather than at a
``*`` line or after ``--epoch`` updates. A resumed run replays the input through those
cuts, so its epochs 1..k are the committed ones even if the input grew since; a digest
that differs (the input changed or was truncated) stops the resume with one line.

Example:
    >>> t = InputTracker()
    >>> for line in (b"+,R,1\\n", b"*\\n"):
    ...     t.line(line)
    ...     t.mark()
    >>> position(t.consume()), t.consume()[0]
    (InputPosition(offset=6, digest=...), 8)
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["InputCommit", "InputPosition", "InputTracker", "digest_prefix", "position"]


@dataclass(frozen=True)
class InputPosition:
    """A byte offset into a file source and the digest of the bytes before it."""

    offset: int
    digest: int
    """CRC-32 (high 32 bits) and Adler-32 (low 32 bits) of bytes ``[0, offset)``: two
    inputs that differ there have the same digest with probability about 2^-64 for
    random changes (CRC-32 alone catches every burst of up to 32 bits)."""

    def __repr__(self) -> str:
        return f"InputPosition(offset={self.offset}, digest=...)"


def digest_prefix(files: Iterable[Path], offset: int) -> InputPosition:
    """The position after the first ``offset`` bytes of ``files`` read as one stream (the
    offset is smaller if they hold fewer bytes): a resume checks its input against the
    commit record before it replays anything.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "u.csv"
    >>> _ = p.write_bytes(b"+,R,1\\n*\\n")
    >>> t = InputTracker(); t.line(b"+,R,1\\n"); t.mark()
    >>> digest_prefix([p], 6) == position(t.consume()), digest_prefix([p], 99).offset
    (True, 8)
    """
    crc, adler, done = 0, 1, 0
    for path in files:
        with open(path, "rb") as f:
            while done < offset:
                chunk = f.read(min(1 << 20, offset - done))
                if not chunk:
                    break
                crc, adler = zlib.crc32(chunk, crc), zlib.adler32(chunk, adler)
                done += len(chunk)
        if done >= offset:
            break
    return InputPosition(done, (crc << 32) | adler)


class InputTracker:
    """Follows a reader through its bytes and notes the position after each record."""

    __slots__ = ("_pending", "adler", "crc", "offset")

    def __init__(self) -> None:
        self.offset = 0
        self.crc = 0
        self.adler = 1
        self._pending: deque[tuple[int, int, int]] = deque()

    def line(self, raw: bytes) -> None:
        """The reader has read ``raw`` (one line, its newline included)."""
        self.offset += len(raw)
        self.crc = zlib.crc32(raw, self.crc)
        self.adler = zlib.adler32(raw, self.adler)

    def mark(self) -> None:
        """The reader yields a record that ends at the current position."""
        self._pending.append((self.offset, self.crc, self.adler))

    def consume(self) -> tuple[int, int, int]:
        """The position after the next record the runner consumes (in yield order), as
        ``(offset, crc, adler)``: :func:`position` makes it an :class:`InputPosition`
        (only at an epoch's end: this runs per record)."""
        return self._pending.popleft()


def position(raw: tuple[int, int, int]) -> InputPosition:
    """The :class:`InputPosition` of :meth:`InputTracker.consume`'s tuple."""
    offset, crc, adler = raw
    return InputPosition(offset, (crc << 32) | adler)


@dataclass(frozen=True)
class InputCommit:
    """What a commit record keeps of the input: epochs ``1..epoch`` were read from the
    bytes before ``position``, with ``epoch_size`` (``--epoch``) and the end-of-input
    ``cuts``.

    >>> c = InputCommit(3, InputPosition(120, 77), (40,), None)
    >>> InputCommit.from_json(c.to_json()) == c
    True
    """

    epoch: int
    position: InputPosition
    cuts: tuple[int, ...] = ()
    epoch_size: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "offset": self.position.offset,
                "digest": f"{self.position.digest:016x}", "cuts": list(self.cuts),
                "epoch_size": self.epoch_size}

    @classmethod
    def from_json(cls, data: Any) -> InputCommit:
        """Read :meth:`to_json`'s form back; raises ``ValueError`` on anything else."""
        try:
            epoch, offset = data["epoch"], data["offset"]
            digest = int(data["digest"], 16)
            cuts = tuple(data["cuts"])
            size = data["epoch_size"]
        except (KeyError, TypeError, ValueError):
            msg = "not an input position"
            raise ValueError(msg) from None
        ints = (epoch, offset, *cuts) + (() if size is None else (size,))
        if not all(type(v) is int and v >= 0 for v in ints):
            msg = "not an input position"
            raise ValueError(msg)
        return cls(epoch, InputPosition(offset, digest), cuts, size)
