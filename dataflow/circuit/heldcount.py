"""A ``COUNT(*) ... GROUP BY`` view whose counts live once, in its one reader's map.

An ``EXISTS`` or ``NOT EXISTS`` with a condition other than equality becomes two count
views (:mod:`plans.subqueries`): rows per correlation key, and rows per key and value.
TPC-H Q21 has four, and its query reads each through a join node that keeps the view's
rows, one per group: ``(order, supplier, count)``. The view kept the same counts in its
own map, so every count was held twice (60 of Q21's 188 MiB of maps at SF 0.1).

:class:`HeldCount` is the view without that copy. It keeps only the groups the open
epoch (or part of it, :data:`~dataflow.circuit.views.FEED_ROWS`) changed, each with its
count before the epoch and now; a group's count before is read, on its first change,
from the reader's node, which holds every group's row. Its delta is the view's: for a
changed group, its old row out and its new row in. The reader applies the delta before
the next base update reaches the view, so what it holds is always the count as of the
last close.

Only where that holds exactly (:func:`held_count_slot`): the view is a count of one
FROM item's rows grouped by every variable it keeps; it has one reader, a single
partition, whose FROM item over the view has no filter of its own and whose node keeps
every row of it, one per group, under the group's key (a top leaf holding its tuples in
its groups). Elsewhere the view runs as any other.

Example (the counts per (o, s) of an ``EXISTS ... <>``, held by the query):
    >>> from dataflow.api import compile_query
    >>> from core.records import Update
    >>> q = compile_query('''CREATE TABLE L(o INT, s INT);
    ...     SELECT l1.s, COUNT(*) FROM L l1 WHERE EXISTS
    ...     (SELECT * FROM L l2 WHERE l2.o = l1.o AND l2.s <> l1.s) GROUP BY l1.s''')
    >>> view = q.maintain(native=False)
    >>> [type(node).__name__ for _, node in view.views]
    ['HeldCount', 'HeldCount']
    >>> for row in [(1, 1), (1, 2), (1, 2), (2, 3)]:
    ...     view.apply(Update("+", "L", row))
    >>> view.end_epoch().rows
    ((1, (1, 1)), (1, (2, 2)))
    >>> view.apply(Update("-", "L", (1, 1)))
    >>> view.end_epoch().rows
    ((-1, (1, 1)), (-1, (2, 2)))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import operators.nodemaps as nodemaps_module
from core.codegen import define
from core.records import EpochDelta, Update
from operators.input import RelationInput
from operators.joinnode import JoinNode
from operators.node import Change, UpdateNode

if TYPE_CHECKING:
    from dataflow.circuit.view import View
    from plans.cq import ConjunctiveQuery

__all__ = ["HeldCount", "ReaderSlot", "count_view_shape", "held_count_slot"]


@dataclass(frozen=True)
class CountShape:
    """A view that is ``SELECT keys..., COUNT(*) FROM one item GROUP BY keys``: its
    FROM item's input (filter and projection onto the group's variables), and per
    output column the position of its value in the group's key (None: the count)."""

    relation: str
    source: RelationInput
    columns: tuple[int | None, ...]


def count_view_shape(cq: ConjunctiveQuery) -> CountShape | None:
    """The shape of a grouped ``COUNT(*)`` over one FROM item, or None for any other view.

    >>> from plans.sql import parse_query
    >>> shape = count_view_shape(parse_query(
    ...     "CREATE TABLE L(o INT, s INT, d INT); SELECT s, o, COUNT(*) AS n FROM L "
    ...     "WHERE d > 3 GROUP BY o, s"))
    >>> shape.relation, shape.columns, shape.source((7, 8, 4)), shape.source((7, 8, 2))
    ('L', (1, 0, None), (7, 8), None)
    >>> count_view_shape(parse_query("CREATE TABLE L(o INT); SELECT COUNT(*) FROM L"))
    """
    if (len(cq.atoms) != 1 or not cq.group_by or cq.distinct or cq.post is not None
            or cq.reagg is not None or cq.order_by or cq.limit is not None or cq.offset
            or len(cq.aggregates) != 1 or cq.aggregates[0].func != "count_star"):
        return None
    atom = cq.atoms[0]
    if set(cq.group_by) != set(atom.vars) or len(atom.vars) != len(cq.group_by):
        return None
    columns: list[int | None] = []
    for col in cq.columns:
        if col.expr is not None:
            return None
        if col.aggregate is not None:
            columns.append(None)
        elif col.var in atom.vars:
            columns.append(atom.vars.index(col.var))
        else:
            return None
    if columns.count(None) != 1 or sorted(c for c in columns if c is not None) != list(
            range(len(atom.vars))):
        return None
    return CountShape(atom.relation.name, RelationInput(atom, cq.join_vars), tuple(columns))


@dataclass(frozen=True)
class ReaderSlot:
    """Where a reader keeps a count view's rows: its FROM item's input (NULL keys out,
    packed as its node takes them), the node, and the positions in the node's tuple of
    the view's columns."""

    reader: View
    source: RelationInput
    node: JoinNode
    column_at: tuple[int, ...]
    """Per view column, its position in the node's tuple."""
    count_at: int
    """The count's position in the node's tuple."""
    group_at: tuple[int, ...]
    """Per variable of the node's key, its position in the view's group key (the
    group's key in the node's map: that value, or a tuple of several; the reader takes
    no row with a NULL there, as each is a variable it joins on)."""


def held_count_slot(shape: CountShape, view_name: str, reader: Any) -> ReaderSlot | None:
    """The reader's slot holding every row of the view, one per group under the group's
    key, or None where it does not hold them so (then the view keeps its own counts)."""
    from dataflow.circuit.view import View  # (the view module builds on this one's readers)

    if not isinstance(reader, View) or len(reader.engines) != 1:
        return None
    route = reader.routes.get(view_name.lower())
    if route is None or len(route.atoms) != 1:
        return None
    atom_index, source = route.atoms[0]
    atom = source.atom
    node = reader.engines[0].atom_nodes.get(atom_index)
    if (not isinstance(node, JoinNode) or not node.base_in_proj or atom.filters
            or atom.predicates or atom.derived
            or len(set(atom.column_vars)) != len(atom.column_vars)
            or tuple(node.attrs) != tuple(atom.vars)
            or set(atom.vars) != set(atom.column_vars)):
        return None
    column_at = tuple(node.attrs.index(v) for v in atom.column_vars)
    count_col = next(i for i, c in enumerate(shape.columns) if c is None)
    key_vars = {atom.column_vars[i] for i, c in enumerate(shape.columns) if c is not None}
    # Under the group's key, one row per group: the count is no part of the key.
    if set(node.key_attrs) != key_vars:
        return None
    group_at = tuple(shape.columns[atom.column_vars.index(a)] for a in node.key_attrs)
    return ReaderSlot(reader, source, node, column_at, column_at[count_col],
                      group_at)  # type: ignore[arg-type]


class HeldCount(UpdateNode):
    """A grouped ``COUNT(*)`` view whose counts its one reader holds (the module's
    docstring): it keeps the changed groups of the open epoch only, ``key -> [count
    before, count now]``."""

    def __init__(self, shape: CountShape, slot: ReaderSlot) -> None:
        self.shape = shape
        self.slot = slot
        self.relation = shape.relation.lower()
        self.changed: dict[tuple[Any, ...], list[int]] = {}
        """The groups changed since the last close: key -> [count before, count now]
        (emptied in place at a close: the generated apply holds it)."""
        self.epoch = 0
        self._counters = [0, 0]  # (updates taken since the last close; reader current)
        self._row_of = _row_maker(shape.columns)
        """The view's row of a group's key and count."""
        self.apply = self._bind_apply()  # type: ignore[method-assign]

    def _bind_apply(self) -> Any:
        """:meth:`apply` as generated code: the FROM item's filter and projection, the
        changed group's counts, and on its first change the count before, read from the
        reader's node (a bare row; a container only past an internal error). The
        reader applies what it was handed first: its FROM items' net changes wait for
        a flush (:meth:`View._flush`), once after each close."""
        slot = self.slot
        at = slot.group_at
        reader_key = (f"key[{at[0]}]" if len(at) == 1
                      else "(" + "".join(f"key[{i}], " for i in at) + ")")
        no_null = " or ".join(f"key[{i}] is None" for i in sorted(set(at)))
        env: dict[str, Any] = {
            "NAME": self.shape.relation, "LOWER": self.relation,
            "project": self.shape.source.project, "changed": self.changed,
            "changed_get": self.changed.get, "counters": self._counters,
            "proj_get": slot.node.proj_read, "reader": slot.reader,
            "nodemaps": nodemaps_module, "slow_count": self._count_in_container}
        lines = [
            "def apply(update):",
            "    rel = update.relation",
            "    if rel != NAME and rel.lower() != LOWER:",
            "        return",
            "    key = project(update.row)",
            "    if key is None:",
            "        return",
            "    dm = update.mult if update.op == '+' else -update.mult",
            "    counts = changed_get(key)",
            "    if counts is not None:",
            "        counts[1] += dm",
            "    else:",
            f"        if {no_null}:",
            "            return  # (the reader takes no row of the group)",
            "        if not counters[1]:",
            "            reader._flush()",
            "            counters[1] = 1",
            f"        b = proj_get({reader_key})",
            "        if b is None:",
            "            before = 0",
            "        elif isinstance(b, nodemaps.CONTAINERS):",
            "            before = slow_count(b)",
            "        else:",
            f"            before = b[{slot.count_at}]",
            "        changed[key] = [before, before + dm]",
            "    counters[0] += 1"]
        fn = define("\n".join(lines), f"<apply count view {self.shape.relation}>", env)["apply"]
        return fn

    def _count_in_container(self, bucket: Any) -> int:
        """The count of a group the reader holds in a container: one row of one copy,
        or an internal error."""
        rows = list(nodemaps_module.members(bucket))
        if len(rows) != 1 or (isinstance(bucket, dict) and bucket[rows[0]] != 1):
            msg = (f"internal error: the reader of a count view holds {bucket!r} for one "
                   "group, where one row of multiplicity 1 was expected")
            raise RuntimeError(msg)
        n: int = rows[0][self.slot.count_at]
        return n

    # -- the node protocol --------------------------------------------------------
    def apply(self, update: Update) -> None:
        """Apply one base update (generated: :meth:`_bind_apply`)."""
        raise NotImplementedError  # (replaced per instance in __init__)

    def apply_batch(self, batch: Sequence[Update]) -> None:
        apply = self.apply
        for update in batch:
            apply(update)

    def held_changes(self) -> int:
        """Groups changed since the last close."""
        return len(self.changed)

    def close_epoch(self) -> list[Change]:
        out: list[Change] = []
        row_of = self._row_of
        for key, (before, now) in self.changed.items():
            if before == now:
                continue
            if now < 0:
                msg = (f"internal error: a count view's group {key!r} went to {now} rows "
                       "(its deletes are checked before it)")
                raise RuntimeError(msg)
            if before:
                out.append((-1, row_of(key, before)))
            if now:
                out.append((1, row_of(key, now)))
        self.changed.clear()
        self._counters[1] = 0
        return out

    def end_epoch(self, closed_by_marker: bool = False) -> EpochDelta:
        rows = tuple(self.close_epoch())
        self.epoch += 1
        n, self._counters[0] = self._counters[0], 0
        return EpochDelta(self.epoch, rows, n, closed_by_marker)

    def snapshot(self) -> list[Change]:
        """The view's rows: the reader's (after the last close)."""
        slot = self.slot
        slot.reader._flush()
        out: list[Change] = []
        at = slot.column_at
        for bucket in list(slot.node.proj.values()):
            for t in nodemaps_module.members(bucket):
                out.append((1, tuple(t[i] for i in at)))
        return out

    def state_maps(self) -> list[str]:
        return []

    def state_entries(self) -> int:
        return len(self.changed)

    def checkpoint(self) -> Any:
        return dict(self.changed)

    def restore_checkpoint(self, blob: Any) -> None:
        self.changed.clear()
        self.changed.update(blob or {})


def _row_maker(columns: tuple[int | None, ...]) -> Any:
    """``row_of(key, count)``: the view's row (its columns in order) of a group."""
    parts = ", ".join("n" if c is None else f"key[{c}]" for c in columns)
    return define(f"def row_of(key, n):\n    return ({parts},)", "<count view row>",
                  {})["row_of"]
