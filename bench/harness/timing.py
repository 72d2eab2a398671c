"""Timing: a runner from outside (the epochs its delta sink commits, polled; the size of
its checkpoint directory, sampled; its phase logs; the CPU of its process tree, a JVM
and its Python workers included), and a stream's load in batches."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from bench.harness.files import dir_bytes
from core.records import EpochEnd, Update

if TYPE_CHECKING:  # (a checkout measured with --root may predate the alias)
    from core.records import Record


def committed_epoch(commit: Path) -> int:
    """The last epoch a delta file's ``.commit`` marker names (0 before the first)."""
    try:
        return int(json.loads(commit.read_text())["epoch"])
    except (OSError, ValueError, KeyError):
        return 0


_P = TypeVar("_P", bound="_Poller")


class _Poller:
    """A daemon thread running ``_poll`` while the ``with`` block runs (``_first`` before
    it starts, ``_last`` after it stops); ``_poll`` returns once ``_done`` is set."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        raise NotImplementedError

    def _first(self) -> None:
        pass

    def _last(self) -> None:
        pass

    def __enter__(self: _P) -> _P:
        self._first()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._done.set()
        self._thread.join()
        self._last()


class CommitWatcher(_Poller):
    """A thread that polls the commit markers every ``tick`` seconds and stamps each newly
    committed epoch (the largest over the markers) with ``perf_counter`` (``marks``) and
    ``time.time`` (``walls``), and sizes ``checkpoint`` every ``size_every`` seconds
    (``sizes``, starting at 0). Use as a context manager around the run; on exit, epochs
    committed after the last poll are stamped with the exit time."""

    def __init__(self, commits: Sequence[Path], checkpoint: Path | None = None,
                 tick: float = 0.005, size_every: float = 0.25) -> None:
        self.commits = tuple(commits)
        self.checkpoint = checkpoint
        self.tick, self.size_every = tick, size_every
        self.marks: dict[int, float] = {}
        self.walls: dict[int, float] = {}
        self.sizes: list[int] = [0]
        super().__init__()

    def last(self) -> int:
        return max((committed_epoch(c) for c in self.commits), default=0)

    def _stamp(self, upto: int, since: int) -> None:
        now, wall = time.perf_counter(), time.time()
        for e in range(since + 1, upto + 1):
            self.marks.setdefault(e, now)
            self.walls.setdefault(e, wall)

    def _poll(self) -> None:
        last, next_size = 0, 0.0
        while not self._done.is_set():
            if self.checkpoint is not None and time.perf_counter() >= next_size:
                self.sizes.append(dir_bytes(self.checkpoint))
                next_size = time.perf_counter() + self.size_every
            k = self.last()
            if k != last:
                self._stamp(k, last)
                last = k
            time.sleep(self.tick)

    def _last(self) -> None:
        self._stamp(self.last(), 0)


def descendants(pid: int) -> list[int]:
    """The process ids below ``pid`` (children, theirs, ...), from /proc."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:  # (a process that ends meanwhile: its directory goes)
            tasks = list(Path(f"/proc/{p}/task").glob("*/children"))
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(k) for k in task.read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def cpu_seconds(pids: Sequence[int]) -> dict[int, float]:
    """User + system CPU seconds so far of each of ``pids`` still running (all their
    threads; not their children)."""
    out = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # 14, 15
    return out


class TreeCpu(_Poller):
    """A thread that samples the CPU seconds of process ``pid`` and every process below
    it every ``tick`` seconds; ``seconds()`` is their sum, each process at its last
    sample. The JVM a PySpark or PyFlink driver starts is not reaped by it (so neither
    ``wait4`` nor ``RUSAGE_CHILDREN`` counts it); sampled, it is. A process's CPU after
    its last sample (at most ``tick`` before it ended) is not counted. Use as a context
    manager around the process's run."""

    def __init__(self, pid: int, tick: float = 0.2) -> None:
        self.pid, self.tick = pid, tick
        self.cpu: dict[int, float] = {}
        super().__init__()

    def sample(self) -> None:
        for p, s in cpu_seconds([self.pid, *descendants(self.pid)]).items():
            self.cpu[p] = max(self.cpu.get(p, 0.0), s)

    def _poll(self) -> None:
        while not self._done.wait(self.tick):
            self.sample()

    def seconds(self) -> float:
        return sum(self.cpu.values())

    def _first(self) -> None:
        self.sample()


def read_phase_logs(prefix: Path | str) -> dict[int, list[float]]:
    """The Flink partitions' phase logs (``IVMFLOW_FLINK_PHASES=PREFIX``: one
    ``PREFIX.*.tsv`` per partition and stage slot, a line per epoch), each column summed
    per epoch over the files: engine s, write-back s, sink s, puts, removes, ..."""
    prefix = Path(prefix)
    per_epoch: dict[int, list[float]] = {}
    for path in prefix.parent.glob(f"{prefix.name}.*.tsv"):
        for line in path.read_text().splitlines():
            epoch, *values = line.split("\t")
            acc = per_epoch.setdefault(int(epoch), [])
            acc.extend([0.0] * (len(values) - len(acc)))
            for i, v in enumerate(values):
                acc[i] += float(v)
    return per_epoch


def apply_load(records: Iterator[Record], apply: Callable[[Update], object] | None,
               clock: Callable[[], float] = time.perf_counter, batch: int = 10_000,
               after_batch: Callable[[int], None] | None = None) -> tuple[float, int]:
    """The stream's first epoch (the load) applied in batches of ``batch`` updates, each
    batch timed by ``clock`` and the reading between them not (so the load is never held
    whole); stops after the epoch's end, the rest of ``records`` left to read. ``apply``
    None reads and counts only (a callgrind baseline). ``after_batch(n)``, untimed,
    after each batch, ``n`` updates in (a memory limit's check). Returns the seconds
    and updates."""
    seconds, n, chunk = 0.0, 0, []
    for r in itertools.chain(records, [EpochEnd()]):
        if isinstance(r, Update):
            chunk.append(r)
            if len(chunk) < batch:
                continue
        t0 = clock()
        if apply is not None:
            for u in chunk:
                apply(u)
        seconds += clock() - t0
        n += len(chunk)
        chunk = []
        if after_batch is not None:
            after_batch(n)
        if isinstance(r, EpochEnd):
            break
    return seconds, n
