"""The run's memory: ``--max-state SIZE`` stops a local run once the process holds more
than SIZE: at the end of the first epoch after which it does, that epoch's deltas
written and committed, or inside an epoch that grows past it (a load of millions of
rows is one epoch), nothing of that epoch written; with what to do about it either way.

What is measured is the process's resident memory as the operating system counts it
(``/proc/self/statm`` on Linux; the peak, ``getrusage``, elsewhere): what an
out-of-memory killer or a container limit reads, the view's state and everything else
of the process with it. Reading it costs one small file read per epoch and per
:data:`CHECK_EVERY` updates inside one, however big the state is (counting the state's
own bytes would cost a walk over it).

Example:
    >>> parse_size("1.5G"), parse_size("512 MiB"), parse_size("4096")
    (1610612736, 536870912, 4096)
    >>> format_bytes(1610612736)
    '1.5 GiB'
    >>> limit = StateLimit(parse_size("1T"))
    >>> limit.check(7)  # far below: nothing happens
    >>> limit.check_open(8, CHECK_EVERY)  # nor inside epoch 8
"""

from __future__ import annotations

import gc
import os
import re
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from core.errors import IvmflowError

__all__ = ["CHECK_EVERY", "HeapSettler", "StateLimit", "StateLimitError", "format_bytes",
           "parse_size", "resident_bytes"]

CHECK_EVERY = 1 << 16
"""Updates of an open epoch between two in-epoch checks: 64k updates add tens of MB at
most (a few hundred bytes each), and a read of ``/proc/self/statm`` per 64k is free."""

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes in ``text``: a number with an optional binary unit (``K``, ``M``, ``G``,
    ``T``; ``GB`` and ``GiB`` alike mean 2**30). Raises ValueError, saying what is
    expected, for anything else.

    >>> parse_size("2g")
    2147483648
    >>> parse_size("lots")
    Traceback (most recent call last):
    ...
    ValueError: a size such as 2G, 512M or 1073741824 (bytes), not 'lots'
    """
    m = _SIZE.match(text)
    if m is None or float(m.group(1)) <= 0:
        msg = f"a size such as 2G, 512M or 1073741824 (bytes), not {text!r}"
        raise ValueError(msg)
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def format_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit that keeps it at least 1 (one decimal).

    >>> format_bytes(512), format_bytes(3 << 20)
    ('512 B', '3.0 MiB')
    """
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        size = float(1 << (10 * ("KMGT".index(unit[0]) + 1)))
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def resident_bytes() -> int:
    """The process's resident memory now (Linux), else its peak so far."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) if sys.platform == "darwin" else int(peak) * 1024


class StateLimitError(IvmflowError):
    """The process outgrew ``--max-state`` (:class:`StateLimit`)."""


@dataclass
class StateLimit:
    """``--max-state``: :meth:`check` after each epoch is committed, and
    :meth:`check_open` every :data:`CHECK_EVERY` updates inside one, raise
    :class:`StateLimitError` once the process holds more than ``max_bytes``.
    ``entries()``, if given, counts the view's state entries for the message;
    ``resume`` is how the run goes on from its committed epochs."""

    max_bytes: int
    entries: Callable[[], int] | None = None
    resume: str = "--resume"
    measure: Callable[[], int] = resident_bytes

    def check(self, epoch: int) -> None:
        """After epoch ``epoch`` is committed: raise if the process holds too much."""
        held = self.measure()
        if held <= self.max_bytes:
            return
        raise StateLimitError(self._message(
            f"at the end of epoch {epoch}", held,
            f"Epochs 1-{epoch} are written and committed, nothing of a later one"))

    def check_open(self, epoch: int, updates: int) -> None:
        """Inside open epoch ``epoch``, after ``updates`` of its updates: raise if the
        process holds too much. Nothing of that epoch is written (its delta is
        enumerated at its end), so a resumed run recomputes it whole: the stop is as
        clean as one at an epoch's end, and it comes before the kernel's out-of-memory
        killer, which says nothing of why."""
        held = self.measure()
        if held <= self.max_bytes:
            return
        done = (f"Epochs 1-{epoch - 1} are written and committed" if epoch > 1
                else "No epoch is written")
        raise StateLimitError(self._message(
            f"inside epoch {epoch}, after {updates:,} of its updates", held,
            f"{done}, nothing of epoch {epoch}"))

    def _message(self, where: str, held: int, written: str) -> str:
        entries = f", {self.entries():,} state entries" if self.entries is not None else ""
        return (f"the run passed --max-state {format_bytes(self.max_bytes)} {where}: the "
                f"process holds {format_bytes(held)} resident{entries}. {written}; "
                f"{self.resume} goes on from there. To hold less: --trust-deletes where "
                f"the source is consistent by construction (a database's change stream: "
                f"no row digests), a query that reads fewer tables and columns, or "
                f"--runner flink, whose state can live in RocksDB on disk; or a larger "
                f"--max-state")


@dataclass
class HeapSettler:
    """Keeps CPython's cyclic garbage collector off a loaded view's state.

    A view's state is millions of small objects (tuples, dicts, packed rows). The
    collector's full pass walks every object it tracks: at TPC-DS SF 1 a pass took
    0.7-0.8 s and landed inside whatever refresh epoch allocated the object that set it
    off (Q47: 812 of an epoch's 1399 ms). :meth:`epoch_closed`, after an epoch of at
    least ``after_updates`` updates (a load), collects once and then freezes what
    survived (``gc.freeze``): later passes walk only what came after. Only after such
    an epoch: freezing often (every 100k updates of a load cut into small epochs) made
    the collector's passes more frequent and Q47's epochs slower in a measurement
    (``docs/benchmarks.md``, "The garbage collector"). The state holds no reference
    cycles (its objects are freed by their counts when the state drops them;
    ``tests/test_heap.py`` checks), so nothing frozen needs the collector again while
    the view lives. A view itself is cyclic (its nodes know their parents): one frozen
    and then dropped is never freed, so only a loop that keeps its view for the
    process's life settles (``ivmflow run``'s, ``dataflow.circuit.drive.drive``), not
    ``CompiledQuery.run``. ``IVMFLOW_GC_FREEZE=0`` turns it off (:attr:`enabled`).

    >>> settle = HeapSettler(after_updates=10)
    >>> [settle.epoch_closed(n) for n in (12, 4, 9, 10)] if settle.enabled else 0
    [True, False, False, True]
    """

    after_updates: int = 100_000
    enabled: bool = field(
        default_factory=lambda: os.environ.get("IVMFLOW_GC_FREEZE", "1") != "0")

    def epoch_closed(self, updates: int) -> bool:
        """An epoch of ``updates`` closed (its delta written): settle the heap after a
        big one. Returns whether it did."""
        if not self.enabled or updates < self.after_updates:
            return False
        gc.collect()  # (what is garbage now is freed, not frozen)
        gc.freeze()
        return True
