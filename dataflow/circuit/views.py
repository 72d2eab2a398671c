"""Running a DAG of maintained views (:mod:`plans.views`): every view is an ordinary
compiled query with its own live :class:`~dataflow.api.View`; base updates go to the
views that read their table, and at each epoch's end the views close in order, each
one's consolidated delta applied to the views that read it before they close. So the
query's epoch delta reflects every inner change of that epoch, and the sum of deltas
1..k is Q(D_k) for the whole query.

Example:
    >>> from dataflow.api import compile_query
    >>> from core.records import Update
    >>> q = compile_query('''CREATE TABLE R(a INT, b INT);
    ...     SELECT a, b FROM R WHERE b > (SELECT AVG(b) FROM R)''')
    >>> view = q.maintain()
    >>> for row in [(1, 10), (2, 20), (3, 30)]:
    ...     view.apply(Update("+", "R", row))
    >>> view.end_epoch().rows
    ((1, (3, 30)),)
    >>> view.apply(Update("-", "R", (3, 30)))   # the average drops to 15: (2, 20) enters
    >>> view.end_epoch().rows
    ((1, (2, 20)), (-1, (3, 30)))
    >>> kept = q.maintain(keep_rows=True)         # (what a state checkpoint saves)
    >>> for u in [Update("+", "R", (1, 10)), Update("+", "R", (2, 20))]:
    ...     kept.apply(u)
    >>> again = q.maintain()                      # from a checkpoint of that state
    >>> again.restore(kept.base_tuples(), epoch=2)
    >>> again.apply(Update("+", "R", (4, 40)))
    >>> d = again.end_epoch()
    >>> d.epoch, d.rows
    (3, ((-1, (2, 20)), (1, (4, 40))))
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from core.native import native_mode
from core.records import EpochDelta, Record, Update
from core.schema import Row, Schema
from dataflow.circuit.drive import run_view
from dataflow.circuit.graph import Circuit, build_circuit
from dataflow.circuit.heldcount import HeldCount, count_view_shape, held_count_slot
from operators.deletecheck import CheckMode, DeleteCheck, digest_maps
from operators.node import LocalNode, UpdateNode

if TYPE_CHECKING:
    from dataflow.circuit.view import View
    from plans.logical import LogicalPlan


class CompiledDag:
    """A query compiled as a DAG of views: ``inner`` (name, compiled view) in the order
    they close, and ``outer``, the query itself over them. It offers what a
    :class:`~dataflow.api.CompiledQuery` offers to the local runner and the API."""

    def __init__(self, inner: list[tuple[str, Any]], outer: Any, base: Schema,
                 source_name: str, logical: LogicalPlan) -> None:
        self.inner = inner
        self.outer = outer
        self.base_schema = base
        self.source_name = source_name
        self.logical = logical
        """The plan it was compiled from, each view in ``inner`` from its node (what
        the distributed runners ship to their workers:
        :meth:`dataflow.distributed.partitions.WorkerPlan.of`)."""

    # What callers read of a compiled query: the query's own (outer) plan and output.
    @property
    def cq(self) -> Any:
        return self.outer.cq

    @property
    def kind(self) -> Any:
        return self.outer.kind

    @property
    def plan(self) -> Any:
        return self.outer.plan

    @property
    def eps(self) -> float:
        return float(self.outer.eps)

    @property
    def schema(self) -> Schema:
        """The base tables (what an update may name)."""
        return self.base_schema

    @property
    def output_columns(self) -> tuple[str, ...]:
        return tuple(self.outer.output_columns)

    @property
    def circuit(self) -> Circuit:
        """Its circuit: the views, the query and its window (:mod:`dataflow.circuit.graph`)."""
        return build_circuit(self.inner, self.outer)

    def explain(self, parallelism: int = 1, eps: float | None = None) -> str:
        parts = [f"a DAG of {len(self.inner) + 1} maintained views (each view's epoch delta "
                 "is the update stream of the views reading it)", ""]
        for name, q in self.inner:
            parts += [f"== view {name}", q.explain(parallelism, eps), ""]
        parts += ["== the query", self.outer.explain(parallelism, eps)]
        return "\n".join(parts)

    def native_status(self, parallelism: int = 1, eps: float | None = None,
                      native: bool | None = None) -> str:
        return str(self.outer.native_status(parallelism, eps, native))

    def delete_check(self, parallelism: int = 1, validate: bool = True,
                     keep_rows: bool = False) -> str:
        """What the delete check keeps per base table (``ivmflow explain``)."""
        view = DagView(self, parallelism, None, False, None, validate, keep_rows)
        return view.validator.explain([r.name for r in self.base_schema.relations.values()])

    def replanned(self, prefix: Iterable[Record]) -> CompiledDag:
        return self

    def maintain(self, parallelism: int = 1, eps: float | None = None,
                 native: bool | None = None, on_compile: Any = None,
                 validate: bool = True, keep_rows: bool = False) -> DagView:
        return DagView(self, parallelism, eps, native, on_compile, validate, keep_rows)

    def run(self, records: Iterable[Record], epoch_size: int | None = None,
            parallelism: int = 1) -> Iterator[EpochDelta]:
        """Per-epoch deltas of a stream (as :meth:`dataflow.api.CompiledQuery.run`)."""
        yield from run_view(self.maintain(parallelism), records, epoch_size)


class DagView(UpdateNode):
    """The live nodes of a :class:`CompiledDag`'s circuit, closed together per epoch: a
    base update goes to the nodes that read its table, and at an epoch's end each
    inner node's delta goes to the nodes that read it (the circuit's edges) before they
    close. The delete check is the DAG's, once per base table any view reads
    (``validate``, ``keep_rows``: as :class:`~dataflow.api.View`'s); the nodes check
    none (a view's delta is consistent by construction, and every reader of a base
    table is fed the same checked updates). Itself a node (:mod:`operators.node`)."""

    def __init__(self, dag: CompiledDag, parallelism: int, eps: float | None,
                 native: bool | None, on_compile: Any, validate: bool = True,
                 keep_rows: bool = False, shared_counts: bool = True) -> None:
        self.dag = dag
        circuit = dag.circuit
        self.nodes: dict[int, LocalNode] = {}
        # A COUNT(*) view with one reader that keeps its rows keeps no counts of its own
        # (heldcount): made once its reader is, else as any other view.
        counts = {v.index: shape for v in circuit.vertices[:circuit.query.index]
                  if len(v.readers) == 1 and v.kind == "query" and shared_counts
                  and (shape := count_view_shape(v.node.cq)) is not None}
        for v in circuit.vertices[:circuit.query.index]:
            if v.index not in counts:
                self.nodes[v.index] = v.live(parallelism, eps, native, on_compile)
        # (the window, if any, is fused: the query's finalizer applies it)
        self.outer: View = dag.outer.maintain(parallelism, eps, native, on_compile,
                                              validate=False)
        self.nodes[circuit.query.index] = self.outer
        for index, shape in counts.items():
            v = circuit.vertices[index]
            slot = held_count_slot(shape, v.name, self.nodes.get(v.readers[0]))
            self.nodes[index] = (HeldCount(shape, slot) if slot is not None
                                 else v.live(parallelism, eps, native, on_compile))
        self.nodes = dict(sorted(self.nodes.items()))
        self.views: list[tuple[str, LocalNode]] = [
            (circuit.vertices[i].name, node) for i, node in self.nodes.items()
            if node is not self.outer]
        self.closing = [(v.name, node, [self.nodes[r] for r in v.readers if r in self.nodes])
                        for v, node in ((circuit.vertices[i], n) for i, n in self.nodes.items())
                        if node is not self.outer]
        """(name, node, its readers) of every inner node, in closing order"""
        self._base = {name.lower(): rel for name, rel in dag.base_schema.relations.items()}
        self.readers: dict[str, list[LocalNode]] = {
            rel: [self.nodes[v.index] for v in circuit.readers_of(rel)] for rel in self._base}
        self.readers = {rel: nodes for rel, nodes in self.readers.items() if nodes}
        self.pending = 0
        self.feed_rows = FEED_ROWS
        """Changed rows an inner view may hold before the views' changes so far reach
        their readers (else at the epoch's end)."""
        self.feed_check = FEED_CHECK
        """Base updates between two looks at the inner views' changed rows."""
        read = {rel.name: rel for name, rel in self._base.items() if name in self.readers}
        mode: CheckMode = "rows" if keep_rows else "digests" if validate else "off"
        self.validator = DeleteCheck(
            read, mode, digest_maps(native_mode(native), on_compile)
            if mode == "digests" else None)

    @property
    def delete_check(self) -> str:
        """Which delete check runs (:attr:`dataflow.api.View.delete_check`)."""
        return self.validator.describe()

    @property
    def native_note(self) -> str:
        """Which hot path the query's node runs, and why (:attr:`View.native_note`)."""
        return self.outer.native_note

    @property
    def pending_updates(self) -> int:
        return self.pending

    def __getattr__(self, name: str) -> Any:  # (native, epoch, ...: the query's)
        return getattr(self.outer, name)

    def apply(self, update: Update) -> None:
        """Apply a base update to every node reading its table, once its shape, types
        and delete are checked: a refused one changes nothing."""
        rel = update.relation.lower()
        nodes = self.readers.get(rel)
        if nodes is None or rel not in self._base:
            # (its error names the relation; a table no view reads: shape and type only)
            self.outer.apply(update)
            return
        name, row = self.outer.typed(update)
        self.validator.update(name, row, update.signed_mult, update.source)
        if row is not update.row or name != update.relation:
            update = Update(update.op, name, row, update.mult, update.source)
        batch = (update,)
        for node in nodes:
            node.apply_batch(batch)
        self.pending += 1
        if not self.pending % self.feed_check and self.closing and any(
                isinstance(node, UpdateNode) and node.held_changes() >= (
                    min(self.feed_rows, HELD_FEED_GROUPS) if isinstance(node, HeldCount)
                    else self.feed_rows)
                for _, node, _ in self.closing):
            # A long epoch (the load) reaches the views' readers in parts once a view
            # holds feed_rows changed rows: an inner view's delta is a Z-set, so its
            # parts sum to the epoch's, and the query's own delta is still the epoch's
            # whole; a view grouped per lineitem row no longer holds the whole table's
            # rows as changes at once. (Not every few updates: a view of few groups,
            # an average per part, would hand on each group again with each part.)
            self._feed_views()

    def _feed_views(self) -> None:
        """Close every inner node's changes so far and hand them to its readers, in
        closing order (a reader of a view is closed after it)."""
        for name, node, readers in self.closing:
            delta = node.close_epoch()
            if delta and readers:
                source = f"view {name}"
                for start in range(0, len(delta), _FEED_SLICE):
                    batch = [Update("+" if mult > 0 else "-", name, row, abs(mult), source)
                             for mult, row in delta[start:start + _FEED_SLICE]]
                    for reader in readers:
                        reader.apply_batch(batch)

    def end_epoch(self, closed_by_marker: bool = False) -> EpochDelta:
        self._feed_views()
        self.pending = 0
        out: EpochDelta = self.outer.end_epoch(closed_by_marker=closed_by_marker)
        self.open_epoch(out.epoch + 1)
        return out

    def snapshot(self, enumerate_join: bool = False) -> list[tuple[int, Row]]:
        """The whole current result (the outer view's, :meth:`View.snapshot`)."""
        rows: list[tuple[int, Row]] = self.outer.snapshot(enumerate_join)
        return rows

    def state_entries(self) -> int:
        """Stored state entries over every node (a keyed view's: its counts per key) and
        the delete check's."""
        return self.validator.entries() + sum(n.state_entries() for n in self.nodes.values())

    def base_tuples(self) -> list[tuple[str, Row, int]]:
        """The tuples of the base tables the views read (what a local checkpoint
        saves): only with ``keep_rows=True`` (:meth:`dataflow.api.View.base_tuples`)."""
        return list(self.validator.items())

    def restore(self, base: Iterable[tuple[str, Row, int]], epoch: int) -> None:
        """Load ``base`` into these fresh views as the state after ``epoch`` closed
        epochs (as :meth:`dataflow.api.View.restore`): the inner views' deltas reach
        their readers, and the query's restored result is not output."""
        for rel, row, mult in base:
            self.apply(Update("+", rel, row, mult, "checkpoint"))
        self.end_epoch()
        self.open_epoch(epoch + 1)

    # -- the node protocol (operators.node): the DAG as one node --
    def open_epoch(self, epoch: int) -> None:
        for node in self.nodes.values():
            node.open_epoch(epoch)

    def state_maps(self) -> list[str]:
        """Every node's maps, each named ``<view>/<map>`` (``(query)/...``)."""
        return [f"{self.dag.circuit.vertices[i].name or '(query)'}/{m}"
                for i, node in self.nodes.items() for m in node.state_maps()]

    def checkpoint(self) -> tuple[int, list[tuple[str, Row, int]]]:
        """As :meth:`View.checkpoint`: the closed epochs and the base tuples."""
        return (self.outer.epoch, self.base_tuples())

    def restore_checkpoint(self, blob: tuple[int, Iterable[tuple[str, Row, int]]] | None
                           ) -> None:
        if blob is not None:
            self.restore(blob[1], blob[0])


def circuit_of(query: Any) -> Circuit:
    """The circuit of a compiled query: a DAG's views, the query, its window."""
    return query.circuit if isinstance(query, CompiledDag) else build_circuit((), query)


FEED_ROWS = 1 << 18
"""A DAG's inner views hand their changes on when one holds this many changed rows."""

HELD_FEED_GROUPS = 1 << 14
"""... or when a count view whose reader holds its counts (:mod:`.heldcount`) holds
this many changed groups: each costs its key and two counts (some 200 bytes) until
then, where a view's changed row is its engine's anyway, and Q21's counts per order
and per (order, supplier) change once or twice in a load ordered by order, so handing
them on sooner repeats little (SF 0.1 after the load: 149 MiB, against 246 at 2**18)."""

FEED_CHECK = 1 << 12
"""Base updates between two looks at the views' changed rows."""

_FEED_SLICE = 4096
"""Updates of a view's delta handed to its readers at a time."""
