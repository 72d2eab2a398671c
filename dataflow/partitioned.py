"""The partitioned execution protocol shared by the distributed runners.

A stream of records is numbered (``seq``) and cut into epochs by :class:`EpochCursor`;
:func:`tag_records` routes every update to its partitions (HyperCube shares, one row
per partition and self-join copy) and broadcasts epoch closes to every partition;
:class:`PartitionTask` runs one partition's engine and output finalizer over its rows
and emits final ``(epoch, mult, row)`` changes, which the runner sums per (epoch, row)
across partitions. A partition's whole state round-trips as one blob per batch.

When the output needs state (DISTINCT supports, aggregate groups), shares are put on
output variables only, so each output row lives in exactly one partition and the
per-partition finalizer is exact.

Example:
    >>> from dataflow.api import compile_query
    >>> from dataflow.records import Update, EPOCH_END
    >>> q = compile_query("CREATE TABLE G(src INT, dst INT); SELECT G1.src, G2.dst "
    ...                   "FROM G G1, G G2 WHERE G1.dst = G2.src")
    >>> cursor = EpochCursor()
    >>> numbered = list(cursor.number([Update("+", "G", (1, 2)), Update("+", "G", (2, 3)),
    ...                                EPOCH_END]))
    >>> layout = PartitionLayout(q, 2)
    >>> rows = tag_records(layout, numbered)
    >>> out = []
    >>> for p in range(layout.partitions):
    ...     task = PartitionTask(q, layout, None)
    ...     out += task.process([r for r in rows if r.partition == p])
    >>> [(o.epoch, o.mult, o.row) for o in out if o.kind == "delta"]
    [(1, 1, (1, 3))]
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dataflow.engine import Engine
from dataflow.errors import InputError
from dataflow.ghd import GhdEngine
from dataflow.partitioner import Partitioner
from dataflow.records import EpochEnd, Record, Update
from dataflow.triangle import TriangleEngine
from operators.finalize import OutputFinalizer
from operators.input import RelationInput
from operators.state import DictState
from plans.dag import finalize_mode

UPDATE, CLOSE = "u", "c"


@dataclass
class EpochCursor:
    """Where a numbered stream stands: next sequence number, the open epoch, updates in
    it, and how many ``*`` markers were seen (snapshot numbers). Plain data, so a
    source can keep it in its offsets."""

    seq: int = 0
    epoch: int = 1
    pending: int = 0
    markers: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"seq": self.seq, "epoch": self.epoch, "pending": self.pending,
                "markers": self.markers}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpochCursor:
        return cls(int(d["seq"]), int(d["epoch"]), int(d["pending"]), int(d["markers"]))

    def number(
        self, records: Iterable[Record], epoch_size: int | None = None, final: bool = False
    ) -> Iterator[NumberedRecord]:
        """Number records and insert epoch closes (markers, every ``epoch_size`` updates,
        and - with ``final`` - the end of a bounded stream if the epoch holds updates)."""
        for rec in records:
            if isinstance(rec, EpochEnd):
                self.markers += 1
                yield self._close(snapshot=self.markers)
                continue
            yield NumberedRecord(self.seq, self.epoch, UPDATE, rec, 0)
            self.seq += 1
            self.pending += 1
            if epoch_size and self.pending >= epoch_size:
                yield self._close(snapshot=0)
        if final and self.pending:
            yield self._close(snapshot=0)

    def _close(self, snapshot: int) -> NumberedRecord:
        rec = NumberedRecord(self.seq, self.epoch, CLOSE, None, snapshot)
        self.seq += 1
        self.epoch += 1
        self.pending = 0
        return rec


@dataclass(frozen=True)
class NumberedRecord:
    seq: int
    epoch: int
    kind: str
    update: Update | None
    snapshot: int


@dataclass(frozen=True)
class TaggedRow:
    """One row of a partition's input: an update of one self-join copy, or a close."""

    partition: int
    seq: int
    epoch: int
    kind: str
    atom: int
    tuple: tuple[Any, ...] | None
    dm: int
    snapshot: int


@dataclass(frozen=True)
class OutputRow:
    """A final change: ``kind`` is ``delta`` (epoch) or ``snapshot`` (number in epoch)."""

    kind: str
    epoch: int
    mult: int
    row: tuple[Any, ...]


class PartitionLayout:
    """The partitioner of a query for P partitions, with shares restricted to output
    variables when the finalizer keeps state."""

    def __init__(self, query: Any, parallelism: int) -> None:
        plan = query.plan
        stateful_output = finalize_mode(plan) != "bag"
        restrict = None
        if stateful_output:
            cq = plan.cq
            restrict = set(cq.group_by or ()) if cq.is_aggregate else set(plan.out_vars)
            restrict -= set(plan.extra_vars)
        self.partitioner = Partitioner(plan, parallelism, allowed=restrict)
        self.partitions = self.partitioner.partitions
        cq = plan.cq
        self.inputs: dict[str, list[tuple[int, RelationInput]]] = {}
        for atom in cq.atoms:
            self.inputs.setdefault(atom.relation.name.lower(), []).append(
                (atom.index, RelationInput(atom, cq.join_vars))
            )


_COMPILED: dict[tuple[Any, ...], tuple[Any, PartitionLayout]] = {}


def compiled_for_workers(
    sql: str,
    rates: tuple[float, ...],
    parallelism: int,
    eps: float = 0.5,
    partitioning: str = "single",
) -> tuple[Any, PartitionLayout]:
    """The compiled query and its layout, once per worker process (Spark reuses Python
    workers, Flink keeps one interpreter): runners ship the SQL text and rates, not
    the compiled objects, so every worker plans exactly the same tree."""
    key = (sql, rates, parallelism, eps, partitioning)
    hit = _COMPILED.get(key)
    if hit is None:
        from dataflow.api import compile_query

        q = compile_query(sql, rates=list(rates), eps=eps, triangle_partitioning=partitioning)
        hit = (q, PartitionLayout(q, parallelism))
        _COMPILED[key] = hit
    return hit


@dataclass(frozen=True)
class WorkerPlan:
    """What a runner ships to its workers: the SQL text, the planner's rates and the
    parallelism (plain data), from which :func:`compiled_for_workers` rebuilds the
    same query and layout in every worker."""

    sql: str
    rates: tuple[float, ...]
    parallelism: int
    eps: float = 0.5
    """IVM-epsilon's exponent and partitioning (triangle queries)."""
    partitioning: str = "single"

    @classmethod
    def of(cls, query: Any, parallelism: int) -> WorkerPlan:
        tri = getattr(query, "triangle", None)
        return cls(query.cq.sql, tuple(query.plan.rates), parallelism,
                   float(getattr(query, "eps", 0.5)),
                   tri.partitioning if tri is not None else "single")

    def compiled(self) -> tuple[Any, PartitionLayout]:
        return compiled_for_workers(
            self.sql, self.rates, self.parallelism, self.eps, self.partitioning
        )


def tag_records(layout: PartitionLayout, numbered: Iterable[NumberedRecord]) -> list[TaggedRow]:
    """Route updates to partitions (one row per partition and self-join copy) and
    broadcast closes to every partition."""
    out: list[TaggedRow] = []
    route = layout.partitioner.route
    everyone = range(layout.partitions)
    for n in numbered:
        if n.kind == CLOSE:
            out.extend(
                TaggedRow(p, n.seq, n.epoch, CLOSE, -1, None, 0, n.snapshot) for p in everyone
            )
            continue
        u = n.update
        assert u is not None
        dm = u.mult if u.op == "+" else -u.mult
        for atom, project in layout.inputs.get(u.relation.lower(), []):
            t = project(u.row)
            if t is None:
                continue
            for p in route(atom, t):
                out.append(TaggedRow(p, n.seq, n.epoch, UPDATE, atom, t, dm, 0))
    return out


class PartitionTask:
    """One partition: its engine and output finalizer, restored from and dumped to a
    blob, processing its rows in stream order."""

    def __init__(self, query: Any, layout: PartitionLayout, blob: bytes | None) -> None:
        saved: dict[str, Any] = pickle.loads(blob) if blob else {}
        state = DictState()
        for name, m in saved.get("maps", {}).items():
            state.map(name).update(m)
        plan = query.plan
        tri = getattr(query, "triangle", None)
        ghd = getattr(query, "ghd", None)
        self.engine: Engine | TriangleEngine | GhdEngine
        if tri is not None:  # IVM-epsilon, same operators as the local runner
            self.engine = TriangleEngine(tri, query.eps, state)
        elif ghd is not None:  # bags inside, CROWN across them, all in ``state``
            self.engine = GhdEngine(ghd, query.eps, state)
        else:
            self.engine = Engine(plan, query.dataflow, state)
        self.engine.acc = saved.get("acc", {})
        from dataflow.api import make_finalizer

        # A triangle engine emits bag multiplicities: DISTINCT needs support counts.
        self.finalizer: OutputFinalizer = make_finalizer(
            plan, bool(plan.extra_vars) or tri is not None or ghd is not None
        )
        self.finalizer.state.update(saved.get("fin", {}))
        self.finalizer.emitted_once = saved.get("emitted_once", False)
        self.state = state
        self.atom_nodes: dict[int, Any] = self.engine.atom_nodes

    def process(self, rows: Sequence[TaggedRow]) -> list[OutputRow]:
        out: list[OutputRow] = []
        nodes = self.atom_nodes
        for r in sorted(rows, key=lambda r: r.seq):
            if r.kind == UPDATE:
                node = nodes[r.atom]
                if r.dm < 0 and node.base.get(r.tuple, 0) + r.dm < 0:
                    where = f"update #{r.seq + 1}"
                    have = f"{node.base.get(r.tuple, 0)} copies present"
                    raise InputError(
                        where, repr(r.tuple), f"a delete of at most {have}",
                        f"a delete of {-r.dm}", "fix the update stream",
                    )
                node.apply(r.tuple, r.dm)
                continue
            raw = self.engine.take_delta()
            for mult, row in self.finalizer.epoch(raw):
                out.append(OutputRow("delta", r.epoch, mult, row))
            if r.snapshot:
                full = self.finalizer.snapshot(self.engine.full())
                out.extend(OutputRow("snapshot", r.snapshot, m, row) for m, row in full)
        return out

    def dump(self) -> bytes:
        maps = {name: self.state.map(name) for name in self.state.names()}
        return pickle.dumps(
            {
                "maps": maps,
                "acc": self.engine.acc,
                "fin": dict(self.finalizer.state),
                "emitted_once": self.finalizer.emitted_once,
            },
            protocol=pickle.HIGHEST_PROTOCOL,
        )


def merge_outputs(rows: Iterable[OutputRow]) -> dict[tuple[str, int], list[tuple[int, Any]]]:
    """Sum mults per (kind, number, row) over partitions; drop zeros; sorted per epoch."""
    from operators.finalize import sort_rows

    acc: dict[tuple[str, int, Any], int] = {}
    for r in rows:
        key = (r.kind, r.epoch, r.row)
        acc[key] = acc.get(key, 0) + r.mult
    out: dict[tuple[str, int], list[tuple[int, Any]]] = {}
    for (kind, n, row), m in acc.items():
        if m:
            out.setdefault((kind, n), []).append((m, row))
    for rows_ in out.values():
        sort_rows(rows_)
    return out
