"""What the job's input readers share (:mod:`dataflow.runners.flink.files`,
:mod:`dataflow.runners.flink.kafka`): the tick budget of an unbounded run, the idle wait,
the counters the job keeps of what it read (the driver never sees the updates), and the
tail of every read: count, tag with partitions, bundle per partition.

This module imports pyflink; ``operators/`` and ``plans/`` never do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyflink.datastream import RuntimeContext

from core.epochs import CLOSE, NumberedRecord
from core.faults import fault_point, faults_armed
from dataflow.distributed.partitions import WorkerPlan, bundle_by_partition
from dataflow.distributed.stages import plan_tags

__all__ = ["IDLE_SLEEP_S", "UNBOUNDED_TICKS", "PhaseLog", "Profiling", "ReadCounters"]

UNBOUNDED_TICKS = 2**62
IDLE_SLEEP_S = 0.2
"""An unbounded run with nothing new waits this long per tick (no busy polling)."""


class ReadCounters:
    """Flink metrics ``ivmflow.updates_read`` and ``ivmflow.epochs_read`` of a reader."""

    def __init__(self, runtime_context: RuntimeContext) -> None:
        metrics = runtime_context.get_metrics_group().add_group("ivmflow")
        self.updates = metrics.counter("updates_read")
        self.epochs = metrics.counter("epochs_read")

    def emit(self, plan: WorkerPlan, numbered: Sequence[NumberedRecord]
             ) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
        """Count ``numbered``, then yield its rows tagged and bundled per partition."""
        closes = sum(1 for n in numbered if n.kind == CLOSE)
        self.updates.inc(len(numbered) - closes)
        self.epochs.inc(closes)
        if faults_armed():  # (the job's one reader: the count follows the stream)
            for _ in range(len(numbered) - closes):
                fault_point("read")
        # Plain tuples cross to the partitions: they pickle and unpickle several times
        # faster than named tuples (PartitionTask.process reads either).
        yield from bundle_by_partition(plan_tags(plan, numbered))




class Profiling:
    """``IVMFLOW_FLINK_PROFILE=PREFIX``: cProfile a function's ``process_element`` calls,
    written to ``PREFIX.<role>.<pid>.<id>.prof`` at close (where a Flink run spends its
    Python time: ``python -m pstats FILE``). Off (no cost but a branch) otherwise."""

    def __init__(self, role: str) -> None:
        prefix = os.environ.get("IVMFLOW_FLINK_PROFILE")
        self.profile: Any = None
        if prefix:
            import cProfile

            self.profile = cProfile.Profile()
            self.path = f"{prefix}.{role}.{os.getpid()}.{id(self)}.prof"

    def run(self, fn: Callable[..., Iterator[Any]], *args: Any) -> Iterator[Any]:
        if self.profile is None:
            return fn(*args)
        self.profile.enable()
        try:
            out = list(fn(*args))
        finally:
            self.profile.disable()
        return iter(out)

    def dump(self) -> None:
        if self.profile is not None:
            self.profile.dump_stats(self.path)


class PhaseLog:
    """``IVMFLOW_FLINK_PHASES=PREFIX``: a partition appends one line per epoch it closes
    to ``PREFIX.<pid>.<id>.tsv``: the epoch, the seconds of its engine and finalizer,
    of the write-back and of the sinks (0 where a merger writes them), the state entries
    put and removed, and the rows out. Plain clocks, no profiler: what a steady epoch
    costs, phase by phase (``bench/runner_state_bench.py`` reads it). Off (no cost but
    a branch) otherwise."""

    FIELDS = ("epoch", "engine_s", "write_back_s", "sink_s", "puts", "removes", "rows")

    def __init__(self) -> None:
        prefix = os.environ.get("IVMFLOW_FLINK_PHASES")
        self.on = bool(prefix)
        self.path = f"{prefix}.{os.getpid()}.{id(self)}.tsv" if prefix else ""
        self.lines: list[str] = []

    def add(self, *values: float) -> None:
        self.lines.append("\t".join(map(str, values)))

    def dump(self) -> None:
        """Append the lines so far (at close: the log costs no I/O per epoch)."""
        if self.on and self.lines:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in self.lines))
            self.lines = []
