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
    >>> from core.epochs import EpochCursor
    >>> from core.records import Update, EPOCH_END
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

import hashlib
import os
import pickle
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from core.consolidate import consolidate_by
from core.epochs import CLOSE, UPDATE, NumberedRecord
from core.errors import InputError, IvmflowError
from dataflow.circuit.hypercube import Partitioner
from dataflow.circuit.kinds import VIEW_TREES
from dataflow.engines import AtomPort, PartitionEngine
from dataflow.engines.finalizer import make_finalizer
from operators.finalize import OutputFinalizer
from operators.input import RelationInput
from operators.node import Change, Node, TaggedTuple, drive_rows
from operators.state import DictState, State
from operators.writeback import WriteBackState
from plans.dag import finalize_mode
from plans.logical import LogicalPlan

_SEQ = itemgetter(1)  # TaggedRow.seq, also of a plain tuple

FINALIZE_OUTPUT, FINALIZE_META = "finalize.output", "finalize.meta"
"""The maps of a partition's State that hold the output finalizer's rows and flags."""

__all__ = [
    "FINALIZE_META", "FINALIZE_OUTPUT", "OutputRow", "PartitionLayout", "PartitionTask",
    "TaggedRow", "WorkerPlan",
    "bundle_by_partition", "compiled_for_workers", "merge_outputs", "needs_stages",
    "tag_records", "tag_rows",
]


class TaggedRow(NamedTuple):
    """One row of a partition's input: an update of one self-join copy, or a close.

    A named tuple, not a dataclass: the readers build one per update and self-join
    copy, and the runners pickle bundles of them across the Python/JVM boundary, where
    a tuple builds, pickles and unpickles several times faster."""

    partition: int
    seq: int
    epoch: int
    kind: str
    atom: int
    tuple: tuple[Any, ...] | None
    dm: int
    snapshot: int


class OutputRow(NamedTuple):
    """A final change: ``kind`` is ``delta`` (epoch) or ``snapshot`` (number in epoch).
    A named tuple for the same reason as :class:`TaggedRow` (partitions send every
    output row of an epoch to the merger)."""

    kind: str
    epoch: int
    mult: int
    row: tuple[Any, ...]


class PartitionLayout:
    """The partitioner of a query for P partitions, with shares restricted to output
    variables when the finalizer keeps state."""

    def __init__(self, query: Any, parallelism: int, keyed: bool = False,
                 global_finalizer: bool = False) -> None:
        plan = query.plan
        # (global_finalizer: the output is finalized elsewhere, from every partition's
        # payloads, so the shares need not keep each output row in one partition)
        stateful_output = finalize_mode(plan) != "bag" and not global_finalizer
        restrict = None
        if stateful_output:
            cq = plan.cq
            restrict = set(cq.group_by or ()) if cq.is_aggregate else set(plan.out_vars)
            if cq.reagg is not None:  # (a final group must live in one partition)
                restrict = set((cq.group_by or ())[:cq.reagg.n_keys])
            restrict -= set(plan.extra_vars)
        self.partitioner = Partitioner(plan, parallelism, allowed=restrict)
        if keyed and self.partitioner.partitions == 1 and parallelism > 1 and restrict != set():
            # (no join variable to hash: a stage is keyed by its own output keys)
            self.partitioner = Partitioner(plan, parallelism, allowed=restrict, keyed=True)
        self.partitions = self.partitioner.partitions
        cq = plan.cq
        self.inputs: dict[str, list[tuple[int, RelationInput]]] = {}
        for atom in cq.atoms:
            self.inputs.setdefault(atom.relation.name.lower(), []).append(
                (atom.index, RelationInput(atom, cq.join_vars))
            )


_COMPILED: dict[tuple[Any, ...], tuple[Any, PartitionLayout]] = {}


def compiled_for_workers(
    plan: LogicalPlan,
    rates: tuple[float, ...],
    parallelism: int,
    eps: float = 0.5,
    partitioning: str = "single",
) -> tuple[Any, PartitionLayout]:
    """The compiled query and its layout, once per worker process (Spark reuses Python
    workers, Flink keeps one interpreter): runners ship the logical plan and the rates
    (picklable data, no SQL text), and every worker compiles exactly the same engines
    from them (:func:`dataflow.api.compile_plan`)."""
    key = (plan.digest, rates, parallelism, eps, partitioning)
    hit = _COMPILED.get(key)
    if hit is None:
        from dataflow.api import compile_plan

        if partitioning == VIEW_TREES:
            q = compile_plan(plan, rates=list(rates), eps=eps, view_trees=True)
        else:
            q = compile_plan(plan, rates=list(rates), eps=eps,
                             triangle_partitioning=partitioning)
        hit = (q, PartitionLayout(q, parallelism))
        _COMPILED[key] = hit
    return hit


def needs_stages(query: Any) -> bool:
    """Whether the distributed runners run ``query`` as keyed stages
    (:mod:`dataflow.distributed.stages`): a DAG of views, or a top-k, whose window must see every
    partition's rows."""
    cq = query.cq
    return bool(query.logical.views) or cq.limit is not None or bool(cq.offset)


@dataclass(frozen=True)
class WorkerPlan:
    """What a runner ships to its workers: the query's logical plan
    (:class:`~plans.logical.LogicalPlan`, frozen dataclasses that pickle), the
    planner's rates and the parallelism, from which :func:`compiled_for_workers`
    builds the same engines and layout in every worker. No SQL text: a worker parses
    nothing. Plans compare (and hash) by their digest."""

    plan: LogicalPlan = field(compare=False, repr=False)
    digest: str
    """The plan's :attr:`~plans.logical.LogicalPlan.digest`."""
    rates: tuple[float, ...]
    parallelism: int
    eps: float = 0.5
    """IVM-epsilon's exponent and partitioning (triangle queries)."""
    partitioning: str = "single"
    trust_deletes: bool = False
    """``--trust-deletes``: no delete check; an aggregate's leaves keep sums at their
    keys, not the tuples that checked deletes against (TPC-H Q1: a few groups, not
    every lineitem row). Part of the layout stamp: the maps differ."""
    snapshots: bool = True
    """Whether the run writes snapshots. Without a snapshot sink the closes reach the
    partitions asking for none (:func:`~dataflow.distributed.stages.plan_tags`): a snapshot costs
    the whole result (and a staged query's partial stages ship all their payloads), so
    a run that writes none must not build one per ``*`` marker. Not part of the layout
    stamp: it changes no state."""

    @classmethod
    def of(cls, query: Any, parallelism: int, trust_deletes: bool = False) -> WorkerPlan:
        plan: LogicalPlan = query.logical
        eps, partitioning = query.kind.worker_options()
        return cls(plan, plan.digest, tuple(query.plan.rates), parallelism, eps,
                   partitioning, trust_deletes)

    @property
    def staged(self) -> bool:
        """Whether this plan runs as several stages (:mod:`dataflow.distributed.stages`)."""
        return needs_stages(self.compiled()[0])

    def compiled(self) -> tuple[Any, PartitionLayout]:
        return compiled_for_workers(
            self.plan, self.rates, self.parallelism, self.eps, self.partitioning
        )

    def layout_stamp(self) -> str:
        """What a checkpoint's keyed state must have been written under to be resumed:
        the engines' layout version and a digest of the plan's stable rendering
        (:meth:`~plans.logical.LogicalPlan.render`), the rates, parallelism, eps and
        partitioning.

        >>> from dataflow.api import compile_query
        >>> q = compile_query("CREATE TABLE R(a INT); SELECT a FROM R")
        >>> a = WorkerPlan.of(q, 2)
        >>> a.layout_stamp() == WorkerPlan.of(q, 2).layout_stamp()
        True
        >>> a.layout_stamp() == WorkerPlan.of(q, 4).layout_stamp()
        False
        >>> a.layout_stamp()[:9]
        'layout22-'
        """
        fields = repr((self.digest, self.rates, self.parallelism, self.eps,
                       self.partitioning) + (("trust-deletes",) if self.trust_deletes else ()))
        digest = hashlib.sha256(fields.encode()).hexdigest()[:16]
        return f"layout{STATE_LAYOUT}-{digest}"

    def map_names(self) -> list[str]:
        """The named maps of a partition's State, fixed by the plan: what a runner binds
        to its keyed map states. Learnt once per worker process from a throw-away task."""
        names = _MAP_NAMES.get(self)
        if names is None:
            q, layout = self.compiled()
            names = PartitionTask(q, layout, state=WriteBackState(),
                                  trust_deletes=self.trust_deletes).state.names()
            _MAP_NAMES[self] = names
        return names


_MAP_NAMES: dict[WorkerPlan, list[str]] = {}

STATE_LAYOUT = 22
"""Version of what the engines' maps hold in the runners' keyed state, and of the jobs'
stateful operators. Bump it whenever that changes (2: absorbed lower nodes, key leaves,
one-child counters; 3: no ``.live`` maps, V_l derived; 4: no counters on one-child
generalized nodes; 5: an atom node with children keeps its multiplicities in its first
index, maps declared only where used, entries stored unframed:
:func:`~operators.writeback.encode_entry`; 6: a Flink job with one partition has no epoch
merger; 7: set and dict values of over 64 elements stored one entry per element, see
:class:`~operators.writeback.TrackedMap`; 8: a top leaf with generated code keeps its
multiplicities in its ``proj`` groups, tuple -> multiplicity dicts, and no ``base``; 9:
the per-element tags pickle from :mod:`operators.writeback`; 10: an entry whose key's
text reads back stores only its value, :func:`~operators.writeback.encode_entry`; 11: a
keyed view's delete check keeps row digests per base table, ``keyed.base.<table>``, not
whole rows in ``keyed.base``: :mod:`operators.deletecheck`; 12: the stamp digests the
query's logical plan, :meth:`~plans.logical.LogicalPlan.render`, not its SQL text; 13:
the modules whose classes the checkpointed state pickles moved, ``dataflow.distributed``
to :mod:`dataflow.distributed.partitions`, ``dataflow.stages`` to
:mod:`dataflow.distributed.stages`; 14: compact buckets, a join node's index, live index
or group of one tuple holds the tuple bare, :mod:`operators.nodemaps`; 15: a set bucket
of 2 to 8 tuples is a list; 16: shared indexes, ``JoinNode.index_shared``; 17: an
atom's support count read from its children's projections, not stored; 18: an atom of
a delta-join bag that another atom probes by an index keeps its multiplicities in that
index, no ``<bag>.atom<i>`` map, :class:`~operators.deltajoin.DeltaJoin`; 19: no
node stores counters, a generalized node's read from its children too; 20: an element
of a value stored per element, and a nested tuple key, store their value alone under
key text that reads back, :func:`~operators.writeback.encode_entry`; 21: a GHD's CROWN
leaves over delta-join and triangle bags keep payload sums, not the bag's tuples,
:class:`~dataflow.engines.ghd.GhdEngine`; 22: a finalizer that reaggregates keeps only
its final groups, not the engine's groups' payloads:
:class:`~operators.finalize.OutputFinalizer`), so that a checkpoint of another layout fails
loud instead of being read wrongly."""


class StateLayoutError(IvmflowError):
    """A checkpoint's keyed state was written under another layout or plan."""


def check_layout(found: str | None, expected: str, has_state: bool, where: str) -> None:
    """Fail loud unless the stamp ``found`` in a checkpoint is ``expected`` (a missing
    stamp is fine only for empty state: a fresh start).

    >>> check_layout(None, "layout2-ab", False, "flink")
    >>> try:
    ...     check_layout("layout1-ab", "layout2-ab", True, "flink")
    ... except StateLayoutError as err:
    ...     print(str(err)[:70])
    flink: the checkpoint's state was written under layout1-ab, this run n
    """
    if found == expected or (found is None and not has_state):
        return
    msg = (f"{where}: the checkpoint's state was written under "
           f"{found or 'an unstamped layout (ivmflow before layout 2)'}, this run needs "
           f"{expected} (another query, parallelism or ivmflow version); resume with "
           "the query, options and version that wrote it, or start with a fresh "
           "--checkpoint directory")
    raise StateLayoutError(msg)


LAYOUT_FILE = "ivmflow-state-layout"
"""The file in a runner's checkpoint directory holding the stamp its state was written
under (:func:`stamp_checkpoint_dir`)."""


def stamp_checkpoint_dir(directory: str | os.PathLike[str], expected: str, resuming: bool,
                         where: str) -> None:
    """Check a checkpoint directory's layout stamp before a job starts, or stamp a fresh
    one. The partitions check their own stamps too, but only when their state is first
    read; a partition that has none (another parallelism) could fail first on an update
    that is wrong for it, with a message that names the update instead of the cause.

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> stamp_checkpoint_dir(d, "layout2-ab", resuming=False, where="flink")
    >>> stamp_checkpoint_dir(d, "layout2-ab", resuming=True, where="flink")
    >>> try:
    ...     stamp_checkpoint_dir(d, "layout2-cd", resuming=True, where="flink")
    ... except StateLayoutError as err:
    ...     print(str(err)[:58])
    flink: the checkpoint's state was written under layout2-ab
    """
    path = Path(directory) / LAYOUT_FILE
    if resuming:
        found = path.read_text().strip() if path.exists() else None
        check_layout(found, expected, True, where)
        return
    tmp = path.with_name(LAYOUT_FILE + ".tmp")
    tmp.write_text(expected + "\n")
    os.replace(tmp, path)


def tag_records(layout: PartitionLayout, numbered: Iterable[NumberedRecord]) -> list[TaggedRow]:
    """Route updates to partitions (one row per partition and self-join copy) and
    broadcast closes to every partition."""
    make = TaggedRow._make
    return [make(t) for t in tag_rows(layout, numbered)]


def tag_rows(layout: PartitionLayout, numbered: Iterable[NumberedRecord]
             ) -> list[tuple[Any, ...]]:
    """:func:`tag_records` as plain tuples in :class:`TaggedRow`'s field order: what the
    runners send across their process boundaries (a named tuple costs a Python-level
    ``__new__`` per row, and pickles slower)."""
    out: list[tuple[Any, ...]] = []
    append = out.append
    route = layout.partitioner.route
    single = layout.partitions == 1  # no routing to do: the hot path of one partition
    everyone = range(layout.partitions)
    inputs = layout.inputs
    copies: dict[str, list[tuple[int, Any]]] = {}
    for n in numbered:
        if n.kind == CLOSE:
            out.extend((p, n.seq, n.epoch, CLOSE, -1, None, 0, n.snapshot) for p in everyone)
            continue
        u = n.update
        assert u is not None
        dm = u.mult if u.op == "+" else -u.mult
        atoms = copies.get(u.relation)
        if atoms is None:
            atoms = copies[u.relation] = [
                (atom, ri.project) for atom, ri in inputs.get(u.relation.lower(), [])
            ]
        seq, epoch, row = n.seq, n.epoch, u.row
        for atom, project in atoms:
            t = project(row)
            if t is None:
                continue
            if single:
                append((0, seq, epoch, UPDATE, atom, t, dm, 0))
            else:
                for p in route(atom, t):
                    append((p, seq, epoch, UPDATE, atom, t, dm, 0))
    return out


def bundle_by_partition(tagged: Iterable[tuple[Any, ...]]
                        ) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
    """Group a batch's tagged rows per partition, each group in stream order: a runner
    sends one element per partition and batch across its process boundary, not one per
    update.

    >>> rows = [TaggedRow(p, s, 1, UPDATE, 0, (s,), 1, 0) for p, s in [(1, 0), (0, 1), (1, 2)]]
    >>> [(p, [r.seq for r in rs]) for p, rs in bundle_by_partition(rows)]
    [(1, [0, 2]), (0, [1])]
    """
    per: dict[int, list[tuple[Any, ...]]] = {}
    for t in tagged:
        per.setdefault(t[0], []).append(t)  # t[0]: TaggedRow.partition
    yield from per.items()


class PartitionTask(Node[TaggedTuple]):
    """One partition of a compiled query: its engine and output finalizer, processing
    its rows in stream order, as a node (:mod:`operators.node`). Its state is either
    restored from and dumped to a blob (``blob``), or, with ``state`` (a
    :class:`~operators.writeback.WriteBackState` the runner fills from its keyed
    store), kept entirely in that State - the finalizer's rows in the map
    ``finalize.output`` and its flags in ``finalize.meta`` - so that a runner can write
    back per epoch only the entries that changed; its :meth:`checkpoint` is the open
    epoch's row payload changes. ``trust_deletes``: deletes are not checked, and the
    engine keeps no tuple for a check (its sum leaves keep sums at their keys)."""

    def __init__(self, query: Any, layout: PartitionLayout, blob: bytes | None = None,
                 state: State | None = None, trust_deletes: bool = False) -> None:
        plan = query.plan
        self.trust_deletes = trust_deletes
        if state is not None:
            self.state: State = state
            # Same operators as the local runner, whatever the kind of query.
            self.engine: PartitionEngine = query.kind.make_engine(
                state, keep_leaf_tuples=not trust_deletes)
            self.finalizer: OutputFinalizer = make_finalizer(
                plan, query.kind.engine_emits_bags, lambda: state.map(FINALIZE_OUTPUT),
                self.engine)
            # Only an ungrouped aggregate reads its flag (its one row exists from the
            # first epoch on): other queries declare no map for it.
            self._meta: MutableMapping[str, Any] | None = (
                state.map(FINALIZE_META)
                if self.finalizer.mode == "aggregate" and not self.finalizer.final_grouped
                else None)
            if self._meta is not None:
                self.finalizer.emitted_once = bool(self._meta.get("emitted_once", False))
        else:
            saved: dict[str, Any] = pickle.loads(blob) if blob else {}
            self.state = DictState()
            for name, m in saved.get("maps", {}).items():
                self.state.map(name).update(m)
            self.engine = query.kind.make_engine(self.state,
                                                 keep_leaf_tuples=not trust_deletes)
            self.engine.acc = saved.get("acc", {})
            self.finalizer = make_finalizer(plan, query.kind.engine_emits_bags,
                                            engine=self.engine)
            self.finalizer.state.update(saved.get("fin", {}))
            self.finalizer.emitted_once = saved.get("emitted_once", False)
            self._meta = None
        self.atom_nodes: Mapping[int, AtomPort] = self.engine.atom_nodes

    def process(self, rows: Sequence[TaggedTuple]) -> list[OutputRow]:
        """Apply ``rows`` (:class:`TaggedRow`, or plain tuples of its fields as the
        runners ship them) in stream order; the changes of the epochs they close."""
        return [OutputRow(kind, n, mult, row)
                for (kind, n), part in self.process_bundles(rows).items()
                for mult, row in part]

    def process_bundles(self, rows: Sequence[TaggedTuple]
                        ) -> dict[tuple[str, int], list[tuple[int, Any]]]:
        """:meth:`process`, its changes grouped per (kind, number) as the finalizer
        gives them (consolidated, sorted ``(mult, row)`` lists; what
        :func:`bundle_outputs` makes of :meth:`process`'s rows), with no object built
        per change: what a runner that writes or ships bundles wants. The rows are
        put in stream order first (a runner's shuffle may not keep it)."""
        return drive_rows(self, sorted(rows, key=_SEQ))

    # -- the node protocol (operators.node) --
    def open_epoch(self, epoch: int) -> None:
        pass

    def apply_batch(self, batch: Sequence[TaggedTuple]) -> None:
        """Apply tagged updates in stream order. The epoch's tuples are netted per FROM
        item before a node sees them (as the local view does): an update of columns
        the query does not read cancels here, and neither runs through the joins nor
        touches the keyed state. A delete of copies not there raises
        :class:`~core.errors.InputError`, naming the update."""
        nodes = self.atom_nodes
        net: dict[tuple[int, Any], int] = {}
        check = not self.trust_deletes
        for _p, seq, _epoch, _kind, atom, t, dm, _snapshot in sorted(batch, key=_SEQ):
            key = (atom, t)
            pending = net.get(key, 0)
            if dm < 0 and check:
                have = nodes[atom].base.get(t, 0) + pending
                if have + dm < 0:
                    where = f"update #{seq + 1}"
                    raise InputError(
                        where, repr(t),
                        f"a delete of at most {have} copies present",
                        f"a delete of {-dm}", "fix the update stream",
                    )
            if pending + dm:
                net[key] = pending + dm
            else:
                del net[key]
        for (atom, t), dm in net.items():
            nodes[atom].apply(t, dm)

    def close_epoch(self) -> list[Change]:
        """The epoch's delta (a stage of :mod:`dataflow.distributed.stages` may emit its engine's
        payloads instead)."""
        delta = self.finalizer.epoch(self.engine.take_delta())
        if self._meta is not None and self._meta.get("emitted_once") is not True:
            self._meta["emitted_once"] = self.finalizer.emitted_once
        return delta

    def snapshot(self) -> list[Change]:
        return self.finalizer.full(self.engine.full)

    def state_maps(self) -> list[str]:
        return self.state.names()

    def state_entries(self) -> int:
        return self.state.entries()

    def checkpoint(self) -> dict[Any, Any]:
        """The open epoch's row payload changes, not taken yet (outside the maps)."""
        return self.engine.acc

    def restore_checkpoint(self, blob: dict[Any, Any] | None) -> None:
        self.engine.acc = blob or {}

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
    return consolidate_by(((r.kind, r.epoch), r.mult, r.row) for r in rows)


def merge_bundles(
    bundles: Mapping[tuple[str, int], Sequence[list[tuple[int, Any]]]],
) -> dict[tuple[str, int], list[tuple[int, Any]]]:
    """Per (kind, number), the partitions' bundles of consolidated, sorted ``(mult,
    row)`` changes summed into one (what :func:`merge_outputs` gives for their rows). A
    bundle no other partition shares is already merged: taken as is, not summed and
    sorted again. Changes that cancel leave no entry.

    >>> merge_bundles({("delta", 1): [[(1, (2,)), (-1, (3,))]]})
    {('delta', 1): [(1, (2,)), (-1, (3,))]}
    >>> merge_bundles({("delta", 1): [[(1, (2,))], [(-1, (2,))]], ("delta", 2): [[(1, (5,))]]})
    {('delta', 2): [(1, (5,))]}
    """
    out: dict[tuple[str, int], list[tuple[int, Any]]] = {}
    for key, parts in bundles.items():
        rows = parts[0] if len(parts) == 1 else consolidate_by(
            (key, mult, row) for part in parts for mult, row in part).get(key, [])
        if rows:
            out[key] = rows
    return out


def merge_epoch_parts(
    parts: Sequence[Iterable[Sequence[Any]]],
) -> dict[tuple[str, int], list[tuple[int, Any]]]:
    """:func:`merge_bundles` of the partitions' outputs for one epoch, each part as
    :meth:`PartitionTask.process` returns it (plain ``(kind, number, mult, row)``
    tuples, consolidated and sorted per (kind, number)).

    >>> merge_epoch_parts([[("delta", 1, 1, (2,)), ("delta", 1, -1, (1,))]])
    {('delta', 1): [(1, (2,)), (-1, (1,))]}
    >>> merge_epoch_parts([[("delta", 1, 1, (2,))], [("delta", 1, -1, (2,))]])
    {}
    """
    bundles: dict[tuple[str, int], list[list[tuple[int, Any]]]] = {}
    for part in parts:
        for key, rows in bundle_outputs(part).items():
            bundles.setdefault(key, []).append(rows)
    return merge_bundles(bundles)


def bundle_outputs(
    rows: Iterable[Sequence[Any]],
) -> dict[tuple[str, int], list[tuple[int, Any]]]:
    """One partition's output rows (:class:`OutputRow`, or plain tuples of its fields)
    grouped into bundles of ``(mult, row)`` per (kind, number), in their order.

    >>> bundle_outputs([OutputRow("delta", 1, 1, (2,)), ("snapshot", 1, 1, (2,))])
    {('delta', 1): [(1, (2,))], ('snapshot', 1): [(1, (2,))]}
    """
    bundles: dict[tuple[str, int], list[tuple[int, Any]]] = {}
    for kind, n, mult, row in rows:
        bundles.setdefault((kind, n), []).append((mult, row))
    return bundles
