"""A query as keyed stages on the distributed runners: a DAG of views and top-k.

The local runner closes a DAG of views (:mod:`dataflow.circuit.views`) in one process. Spark
and Flink run it as a chain of **stages**, one per node, each partitioned by its own
keys: a view's stage is its compiled query with its own
:class:`~dataflow.distributed.partitions.PartitionLayout` (shares on its output keys), the query's
stage likewise, and ``ORDER BY ... LIMIT`` adds one global stage holding the window
(:class:`TopKTask`), as the local runner's one output finalizer does. Every stage
partition is a **slot** (stage offset + partition): the runners key their stateful
operators by slot, so a stage's state lives per entry in its own keyed state.

Rows between stages are :class:`~dataflow.distributed.partitions.TaggedRow` tuples whose
``partition`` is the slot. The reader tags base updates for every stage reading their
table and broadcasts each epoch close to every slot; a stage partition closing epoch
``e`` routes its consolidated delta to the slots of the stages that read it (by their
layouts: a shuffle where keys differ) followed by a close marker (``atom`` =
:data:`UPSTREAM`) to every one of their slots. A slot closes ``e`` once all its
**channels** - the reader, and every partition of every stage it reads - have closed
``e`` (:class:`StageTask`); rows of a later epoch that arrive earlier wait. So a
stage's delta of epoch ``e`` is applied to its readers within epoch ``e``, and the sum
of the query's deltas 1..k is Q(D_k), as on the local runner. Each stage's work per
epoch is O(its input changes): nothing is ever re-read or re-sent whole.

The stages come from the query's circuit (:mod:`dataflow.circuit.graph`): one per vertex,
two for an aggregate finalized globally (its partitions' payloads, then one
finalizer), their channels from the circuit's edges. Every stage partition's task is a
node (:class:`operators.node.Node` of tagged rows: a compiled query's partition, a
keyed or threshold view's, the window, a partial or global finalizer, or a
:class:`~dataflow.circuit.graph.CustomNode`'s), driven by :func:`operators.node.drive_rows`;
a vertex of no known kind, or a custom one whose task is no node, is refused before
the job starts.

Example (two partitions per stage, the runner's shuffles done by hand):
    >>> from dataflow.api import compile_query
    >>> from core.epochs import EpochCursor
    >>> from core.records import Update, EPOCH_END
    >>> q = compile_query('''CREATE TABLE R(a INT, b INT);
    ...     SELECT a, b FROM R WHERE b > (SELECT AVG(b) FROM R) ORDER BY b DESC LIMIT 1''')
    >>> plan = StagePlan.of(q, 2)
    >>> [(s.name or "(query)", s.layout.partitions)
    ...  for s in plan.stages]  # doctest: +NORMALIZE_WHITESPACE
    [('\\x00partial:_u_0', 2), ('_u_0', 1), ('_tv_0', 2), ('_tf_0', 1),
     ('\\x00result', 2), ('(query)', 1)]
    >>> numbered = EpochCursor().number([Update("+", "R", (1, 10)), Update("+", "R", (2, 20)),
    ...                                  Update("+", "R", (3, 30)), EPOCH_END])
    >>> print(run_stages(plan, list(numbered)))
    {('delta', 1): [(1, (3, 30))], ('snapshot', 1): [(1, (3, 30))]}
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedKeyList

from core.epochs import CLOSE, UPDATE, NumberedRecord
from core.errors import UnsupportedQueryError
from core.records import Update
from dataflow.circuit.graph import RESULT, CustomNode, Vertex
from dataflow.circuit.stagenodes import stage_layout, stage_task
from dataflow.circuit.views import circuit_of
from dataflow.distributed.partitions import (
    FINALIZE_META,
    FINALIZE_OUTPUT,
    PartitionLayout,
    PartitionTask,
    WorkerPlan,
    needs_stages,
    tag_rows,
)
from dataflow.engines.finalizer import make_finalizer
from operators.node import Change, Node, PartitionNode, TaggedTuple, drive_rows
from operators.state import State
from operators.topk import TAG, TopK
from operators.writeback import WriteBackState
from plans.cq import ConjunctiveQuery
from plans.dag import finalize_mode

__all__ = ["RESULT", "UPSTREAM", "CustomNode", "Stage", "StagePlan", "StageTask", "TopKTask",
           "needs_stages", "plan_tags", "run_stages", "stage_plan"]

PARTIAL, FULL = "\x00partial:", "\x00full:"
"""Prefixes of the relations a global finalizer reads from its partial stage: each
partition's epoch change of its aggregate payloads, and all of them at a snapshot."""

UPSTREAM = -2
"""``atom`` of a close marker sent by a stage partition to its readers' slots (the
reader's own closes have ``atom`` -1)."""

_SLOT, _SEQ, _EPOCH, _KIND, _ATOM, _SNAPSHOT = 0, 1, 2, 3, 4, 7  # TaggedRow's fields


class _Whole:
    """A projector that takes the row as it is (the top-k stage's one input)."""

    @staticmethod
    def project(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return row


class _OnePartition:
    partitions = 1

    @staticmethod
    def route(atom: int, t: tuple[Any, ...]) -> list[int]:
        return [0]


class TopKLayout:
    """The global top-k stage's layout: one partition reading :data:`RESULT` whole."""

    partitions = 1
    partitioner = _OnePartition()
    inputs = {RESULT: [(0, _Whole())]}


class FinalizeLayout:
    """A global finalizer stage's layout: one partition reading the payloads of its
    partial stage, per epoch (:data:`PARTIAL`) and per snapshot (:data:`FULL`)."""

    partitions = 1
    partitioner = _OnePartition()

    def __init__(self, name: str) -> None:
        self.inputs = {PARTIAL + name: [(0, _Whole())], FULL + name: [(1, _Whole())]}


@dataclass
class Stage:
    """One stage: ``name`` (its output relation; ``""`` for the query's), the circuit
    vertex it runs, its layout, its first slot, the stages reading it and its channels
    (the reader + every partition it reads)."""

    index: int
    name: str
    vertex: Vertex
    layout: Any
    first: int = 0
    readers: list[int] = field(default_factory=list)
    channels: int = 1
    final: bool = False
    feeds_window: bool = False
    """Whether the top-k stage reads this one's result (its finalizer keeps no window)."""
    part: str = ""
    """``partial``: the partitions of an aggregate whose output keys cannot be hashed
    (an aggregate without GROUP BY), emitting their payloads' changes; ``finalize``:
    its one global finalizer (:class:`FinalizeTask`); else ``""``."""
    enumerates: bool = False
    """Whether its closes carry the snapshot number (the final stage, and a partial
    stage feeding a final finalizer)."""
    trust_deletes: bool = False
    """``--trust-deletes``: its join partitions check no delete and keep no tuple for
    it (:class:`~dataflow.distributed.partitions.PartitionTask`)."""

    @property
    def slots(self) -> range:
        return range(self.first, self.first + self.layout.partitions)

    def task(self, state: State) -> PartitionNode:
        """The node of one partition of this stage, all its state in ``state``."""
        v = self.vertex
        if v.kind == "window":
            assert v.window is not None
            return TopKTask(v.window, state)
        if v.kind in ("keyed", "threshold"):
            return stage_task(v.node, state)
        if v.kind == "custom":
            task = v.node.stage_task(state, self.layout)
            if not isinstance(task, Node):
                msg = (f"view {v.name}: {type(v.node).__name__}.stage_task() made a "
                       f"{type(task).__name__}, not a node (operators.node.Node): it "
                       "cannot run as a stage")
                raise UnsupportedQueryError(msg)
            return task
        if self.part == "finalize":
            return FinalizeTask(v.node, state, self.feeds_window)
        if self.part == "partial":
            return PartialTask(v.node, self.layout, state=state,
                               trust_deletes=self.trust_deletes)
        part = PartitionTask(v.node, self.layout, state=state,
                             trust_deletes=self.trust_deletes)
        if self.feeds_window:
            # The window is the top-k stage's: this one emits the whole result's change.
            part.finalizer.topk = None
        return part


def _layout(vertex: Vertex, parallelism: int) -> Any:
    if vertex.kind == "query":
        return PartitionLayout(vertex.node, parallelism, keyed=True)
    if vertex.kind == "window":
        return TopKLayout()
    if vertex.kind == "custom":
        return vertex.node.stage_layout(parallelism)
    return stage_layout(vertex.node, parallelism)  # (a keyed or threshold view)


class StagePlan:
    """The stages of a query in closing order, from its circuit: the inner views, the
    query, and the top-k window when it has one; each stage's readers are its vertex's
    readers (a globally finalized aggregate: its partial stage feeds its finalizer)."""

    def __init__(self, stages: list[Stage], edges: Iterable[tuple[int, int]]) -> None:
        self.stages = stages
        self.by_name = {s.name.lower(): s for s in stages if s.name}
        first = 0
        for s in stages:
            s.first = first
            first += s.layout.partitions
        self.slots = first
        for up, down in sorted(set(edges), key=lambda e: (e[1], e[0])):
            stages[up].readers.append(down)
            stages[down].channels += stages[up].layout.partitions
        self.stage_of = [s.index for s in stages for _ in s.slots]

    @classmethod
    def of(cls, query: Any, parallelism: int, trust_deletes: bool = False) -> StagePlan:
        """The stage plan of a compiled query: its circuit's vertices as stages, their
        edges as channels (``trust_deletes``: its join partitions check no delete). A
        vertex of no known kind, or a custom one whose task is no node, is refused here
        (:class:`~core.errors.UnsupportedQueryError`)."""
        circuit = circuit_of(query)
        stages: list[Stage] = []
        into: dict[int, int] = {}  # vertex -> the stage its inputs go to
        out: dict[int, int] = {}   # vertex -> the stage writing its output
        edges: list[tuple[int, int]] = []
        for v in circuit.vertices:
            layout = _layout(v, parallelism)
            name = v.name
            whole = None
            if layout.partitions == 1 < parallelism and v.kind == "query" and \
                    finalize_mode(v.node.plan) == "aggregate":
                # An aggregate whose output keys cannot be hashed (no GROUP BY, or only
                # carried ones) would hold its whole join in one partition: its join
                # runs partitioned and one global finalizer sums the payloads.
                whole = PartitionLayout(v.node, parallelism, keyed=True,
                                        global_finalizer=True)
            into[v.index] = len(stages)
            if whole is not None and whole.partitions > 1:
                stages.append(Stage(len(stages), PARTIAL + name, v, whole, part="partial"))
                edges.append((len(stages) - 1, len(stages)))
                stages.append(Stage(len(stages), name, v, FinalizeLayout(name),
                                    part="finalize"))
            else:
                stages.append(Stage(len(stages), name, v, layout))
            out[v.index] = len(stages) - 1
            if v.kind == "custom":
                stages[-1].task(WriteBackState())  # (refused here if it is no node)
        edges += [(out[v.index], into[r]) for v in circuit.vertices for r in v.readers]
        if circuit.window is not None:
            stages[out[circuit.query.index]].feeds_window = True
        stages[-1].final = stages[-1].enumerates = True
        if stages[-1].part == "finalize":
            stages[-2].enumerates = True
        for stage in stages:
            stage.trust_deletes = trust_deletes
        return cls(stages, edges)

    def tag_base(self, numbered: Sequence[NumberedRecord]) -> list[tuple[Any, ...]]:
        """Base updates tagged for the slots of every stage reading their table; every
        close to every slot (plain :class:`~dataflow.distributed.partitions.TaggedRow` tuples)."""
        out: list[tuple[Any, ...]] = []
        for s in self.stages:
            out += _shifted(tag_rows(s.layout, numbered), s.first)
        return out

    def route_delta(self, stage: Stage, seq: int, epoch: int,
                    delta: Iterable[tuple[int, Any]], full: Iterable[tuple[int, Any]] = ()
                    ) -> list[tuple[Any, ...]]:
        """A stage partition's delta of ``epoch`` (and a partial stage's ``full``
        payloads at a snapshot) as tagged rows for the slots of the stages reading it
        (by their own layouts), then a close marker to each slot."""
        name = stage.name
        numbered = [NumberedRecord(seq, epoch, UPDATE, Update(
            "+" if m > 0 else "-", rel, row, abs(m), f"view {name}"), 0)
            for rel, rows in ((name, delta), (FULL + name.removeprefix(PARTIAL), full))
            for m, row in rows]
        out: list[tuple[Any, ...]] = []
        for i in stage.readers:
            reader = self.stages[i]
            if numbered:
                out += _shifted(tag_rows(reader.layout, numbered), reader.first)
            out += [(slot, seq, epoch, CLOSE, UPSTREAM, None, 0, 0) for slot in reader.slots]
        return out

    def map_names(self, index: int) -> list[str]:
        """The named maps of a stage's State (what a runner binds to keyed map states)."""
        return self.stages[index].task(WriteBackState()).state_maps()


def _shifted(rows: list[tuple[Any, ...]], first: int) -> list[tuple[Any, ...]]:
    if not first:
        return rows
    return [(r[0] + first, *r[1:]) for r in rows]


class TopKTask(Node[TaggedTuple]):
    """The global window of ``ORDER BY ... LIMIT k OFFSET m``: the result's rows with
    their multiplicities one entry each in the map ``topk.rows``, the window's rows in
    ``topk.window``; the ordered index (:class:`~operators.topk.TopK`) is derived, built
    from ``topk.rows`` when the task is made (after a restore). An epoch costs
    O(changes log n + m + k), and writes back only the entries it changed."""

    def __init__(self, cq: ConjunctiveQuery, state: State) -> None:
        self.state = state
        rows, window = state.map("topk.rows"), state.map("topk.window")
        self.topk = TopK(cq.order_by, cq.limit, cq.offset, {})
        index = SortedKeyList(key=self.topk._key)  # noqa: SLF001 - the window's own order
        index.update(rows.items())
        self.topk.state[TAG] = (index, rows, window)
        self.acc: dict[Any, int] = {}

    def open_epoch(self, epoch: int) -> None:
        pass

    def apply_batch(self, batch: Sequence[TaggedTuple]) -> None:
        acc = self.acc
        for r in batch:
            t = r[5]
            acc[t] = acc.get(t, 0) + r[6]

    def close_epoch(self) -> list[Change]:
        changes = [(m, row) for row, m in self.acc.items() if m]
        self.acc.clear()
        return self.topk.apply(changes)

    def snapshot(self) -> list[Change]:
        chosen = self.topk.select(self.topk.state[TAG][0])
        return [(c, row) for row, c in chosen.items()]

    def state_maps(self) -> list[str]:
        return self.state.names()

    def state_entries(self) -> int:
        return self.state.entries()

    def checkpoint(self) -> dict[Any, int]:
        return dict(self.acc)

    def restore_checkpoint(self, blob: Any) -> None:
        self.acc = dict(blob or {})


class PartialTask(PartitionTask):
    """A partition of an aggregate finalized globally: at each close it emits its
    engine's payload changes ``(1, (group, payload))`` as its delta, and at a snapshot
    all its payloads, for :class:`FinalizeTask` to sum. Its own finalizer is unused."""

    def close_epoch(self) -> list[Change]:
        return [(1, item) for item in self.engine.take_delta().items()]

    def snapshot(self) -> list[Change]:
        return [(1, item) for item in self.engine.full().items()]


class FinalizeTask(Node[TaggedTuple]):
    """The one finalizer of an aggregate whose partitions are :class:`PartialTask`:
    sums their payload changes per group (the ring's addition) and finalizes them as
    the local runner's finalizer does, keeping each group's payload one entry in the
    map ``finalize.output`` (O(changed groups) per epoch)."""

    def __init__(self, query: Any, state: State, window: bool) -> None:
        self.state = state
        self.finalizer = make_finalizer(query.plan, query.kind.engine_emits_bags,
                                        lambda: state.map(FINALIZE_OUTPUT))
        if window:
            self.finalizer.topk = None  # (the top-k stage keeps the window)
        self.meta = state.map(FINALIZE_META)
        self.finalizer.emitted_once = bool(self.meta.get("emitted_once", False))
        self.acc: dict[Any, Any] = {}
        self.full: dict[Any, Any] = {}

    def open_epoch(self, epoch: int) -> None:
        pass

    def apply_batch(self, batch: Sequence[TaggedTuple]) -> None:
        add = self.finalizer.ring.add
        for r in batch:
            into = self.acc if r[_ATOM] == 0 else self.full
            key, payload = r[5]
            into[key] = payload if key not in into else add(into[key], payload)

    def close_epoch(self) -> list[Change]:
        delta = self.finalizer.epoch(self.acc)
        self.acc = {}
        if self.meta.get("emitted_once") is not self.finalizer.emitted_once:
            self.meta["emitted_once"] = self.finalizer.emitted_once
        return delta

    def snapshot(self) -> list[Change]:
        """The result from every partition's payloads (sent at a snapshot's close)."""
        full = self.finalizer.snapshot(self.full)
        self.full = {}
        return full

    def state_maps(self) -> list[str]:
        return self.state.names()

    def state_entries(self) -> int:
        return self.state.entries()

    def checkpoint(self) -> tuple[dict[Any, Any], dict[Any, Any]]:
        return (self.acc, self.full)

    def restore_checkpoint(self, blob: Any) -> None:
        self.acc, self.full = blob or ({}, {})


class StageTask:
    """One slot: its node's task and the alignment of its channels. :meth:`feed` takes
    rows in arrival order (each channel's in its own order) and returns the rows for
    downstream slots and, for the final stage, the output bundles of the epochs it
    closed. ``closed`` is the last epoch closed here; rows of later epochs than the open
    one wait in :attr:`held`. :attr:`unclosed` is every row received since the last
    close (what a runner keeps in a list state to replay after a restore)."""

    def __init__(self, plan: StagePlan, slot: int, state: State, closed: int = 0) -> None:
        self.plan = plan
        self.slot = slot
        self.stage = plan.stages[plan.stage_of[slot]]
        self.task = self.stage.task(state)
        self.task.open_epoch(closed + 1)
        self.closed = closed
        self.closes = 0
        self.reader_close: tuple[Any, ...] | None = None
        self.held: list[tuple[Any, ...]] = []
        self.unclosed: list[tuple[Any, ...]] = []

    def feed(self, rows: Iterable[tuple[Any, ...]], on_close: Callable[..., None] | None = None
             ) -> tuple[list[tuple[Any, ...]], dict[tuple[str, int], list[tuple[int, Any]]]]:
        """Take ``rows``; return the rows for downstream slots and the final stage's
        output bundles of the epochs closed. ``on_close(close_row, bundles)`` is called
        at each close, when the state holds exactly the epochs closed so far (a runner
        writing back per epoch does it there)."""
        downstream: list[tuple[Any, ...]] = []
        final: dict[tuple[str, int], list[tuple[int, Any]]] = {}
        applying: list[tuple[Any, ...]] = []
        stage = self.stage
        queue = deque(rows)
        self.unclosed.extend(queue)
        while queue:
            r = tuple(queue.popleft())
            if r[_EPOCH] > self.closed + 1:
                self.held.append(r)
                continue
            if r[_EPOCH] <= self.closed:
                msg = (f"stage {stage.name or 'query'} slot {self.slot}: a row of epoch "
                       f"{r[_EPOCH]} after that epoch closed (a channel out of order)")
                raise RuntimeError(msg)
            if r[_KIND] != CLOSE:
                applying.append(r)
                continue
            self.closes += 1
            if r[_ATOM] != UPSTREAM:
                self.reader_close = r
            if self.closes < stage.channels:
                continue
            close = self.reader_close
            assert close is not None
            if not stage.enumerates:
                close = (*close[:_SNAPSHOT], 0)  # (only the final stage enumerates)
            applying.append(close)
            out = drive_rows(self.task, applying)
            applying = []
            epoch = r[_EPOCH]
            if stage.final:
                final.update(out)
            else:
                downstream += self.plan.route_delta(
                    stage, close[_SEQ], epoch, out.get(("delta", epoch), ()),
                    out.get(("snapshot", close[_SNAPSHOT]), ()))
            self.closed, self.closes, self.reader_close = epoch, 0, None
            if on_close is not None:
                on_close(close, out)
            self.unclosed = [u for u in self.unclosed if u[_EPOCH] > epoch]
            held, self.held = self.held, []
            queue.extendleft(reversed(held))
        if applying:
            self.task.apply_batch(applying)  # updates of the open epoch: no output
        return downstream, final

    def checkpoint(self) -> bytes:
        """What this slot holds outside its maps (its node's checkpoint: the open
        epoch's accumulated changes; the channels' closes, the rows that wait), for a
        runner that stores it between batches: O(the open epoch's changes)."""
        return pickle.dumps((self.task.checkpoint(), self.closed, self.closes,
                             self.reader_close, self.held), pickle.HIGHEST_PROTOCOL)

    def restore_checkpoint(self, blob: bytes | None) -> None:
        if not blob:
            self.task.restore_checkpoint(None)
            return
        acc, self.closed, self.closes, self.reader_close, held = pickle.loads(blob)
        self.held = list(held)
        self.task.restore_checkpoint(acc)
        self.task.open_epoch(self.closed + 1)


def run_stages(plan: StagePlan, numbered: Sequence[NumberedRecord],
               late_upstream: bool = False) -> dict[tuple[str, int], list[tuple[int, Any]]]:
    """Every stage in one process over a numbered stream, slot by slot in stage order
    (what the runners do with shuffles): the final stage's outputs merged over its
    partitions. Each slot gets its rows epoch by epoch, or, ``late_upstream``, all the
    reader's rows first and its upstream stages' after them (the rows of later epochs
    wait for the channels). For tests and the docs; state in fresh write-back caches."""
    from dataflow.distributed.partitions import merge_epoch_parts

    inbox: dict[int, list[tuple[Any, ...]]] = {}
    for r in plan.tag_base(numbered):
        inbox.setdefault(r[_SLOT], []).append(r)
    parts = []
    for slot in range(plan.slots):
        task = StageTask(plan, slot, WriteBackState())
        rows = inbox.pop(slot, [])
        if not late_upstream:
            rows.sort(key=lambda r: (r[_EPOCH], r[_KIND] == CLOSE))
        down, final = task.feed(rows)
        for r in down:
            inbox.setdefault(r[_SLOT], []).append(r)
        parts.append([(k, n, m, row) for (k, n), rows_ in final.items() for m, row in rows_])
    return merge_epoch_parts(parts)


_PLANS: dict[WorkerPlan, StagePlan] = {}


def stage_plan(plan: WorkerPlan) -> StagePlan:
    """The :class:`StagePlan` of a worker plan, once per worker process."""
    hit = _PLANS.get(plan)
    if hit is None:
        hit = _PLANS[plan] = StagePlan.of(plan.compiled()[0], plan.parallelism,
                                          plan.trust_deletes)
    return hit


def plan_tags(plan: WorkerPlan, numbered: Sequence[NumberedRecord]) -> list[tuple[Any, ...]]:
    """:func:`~dataflow.distributed.partitions.tag_rows` for a worker plan: by its one layout, or,
    for a plan run as stages, for the slots of every stage reading each table. A plan
    without snapshots (``plan.snapshots``) tags every close as asking for none.

    >>> from core.epochs import EpochCursor
    >>> from core.records import EPOCH_END, Update
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE R(a INT); SELECT a FROM R")
    >>> numbered = list(EpochCursor().number([Update("+", "R", (1,)), EPOCH_END]))
    >>> [r[-1] for r in plan_tags(WorkerPlan.of(q, 1), numbered)]
    [0, 1]
    >>> from dataclasses import replace
    >>> [r[-1] for r in plan_tags(replace(WorkerPlan.of(q, 1), snapshots=False), numbered)]
    [0, 0]
    """
    if not plan.snapshots:
        numbered = [n._replace(snapshot=0) if n.kind == CLOSE and n.snapshot else n
                    for n in numbered]
    if plan.staged:
        return stage_plan(plan).tag_base(numbered)
    return tag_rows(plan.compiled()[1], numbered)
