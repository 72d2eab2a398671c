"""The output finalizer: turns per-epoch row payload changes (merged over partitions)
into the consolidated delta of docs/semantics.md - net multiplicities for bag
semantics, support transitions for DISTINCT, retraction + insertion of changed groups
for aggregates (one row always for an aggregate without GROUP BY).

Example:
    >>> from operators.ring import IntRing
    >>> f = OutputFinalizer("bag", IntRing(), None, (), {})
    >>> f.epoch({(1, 2): 2, (3, 4): 0})
    [(2, (1, 2))]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

from core.codegen import define
from core.consolidate import OrderBy, order_rows, sort_rows, sorted_changes
from core.schema import Row
from operators.aggregate import AggregateLayout
from operators.reaggregate import TAG as REAGG_TAG
from operators.reaggregate import Reaggregator
from operators.topk import TopK


class OutputFinalizer:
    """``mode`` is ``bag``, ``distinct`` or ``aggregate``. ``columns`` describes the output
    row of an aggregate query: ("key", i) takes group variable i, ("agg", j) aggregate j.

    An aggregate finalizer keeps every group's payload in ``state``, unless the engine
    maintains those payloads itself and passes ``current`` (group key -> its payload
    after the epoch, or None): then a group's old payload is the current one minus the
    epoch's change, and the finalizer stores nothing (one map less for the distributed
    runners to write back per group change).

    >>> from operators.ring import IntRing
    >>> counts = {("a",): 3}
    >>> f = OutputFinalizer("aggregate", IntRing(), None, (("key", 0), ("agg", 0)), {},
    ...                     current=counts.get)
    >>> f.epoch({("a",): 1, ("b",): -2})  # a: 2 -> 3; b: 2 -> gone
    [(-1, ('a', 2)), (1, ('a', 3)), (-1, ('b', 2))]
    >>> f.state
    {}
    """

    def __init__(
        self,
        mode: str,
        ring: Any,
        layout: AggregateLayout | None,
        columns: Sequence[tuple[str, int]],
        state: MutableMapping[Any, Any],
        count_supports: bool = False,
        grouped: bool = True,
        current: Callable[[Any], Any] | None = None,
        post: Any = None,
        order_by: OrderBy = (),
        reagg: Any = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> None:
        self.mode = mode
        self.ring = ring
        self.layout = layout
        self.columns = tuple(columns)
        self.state = state
        self.count_supports = count_supports
        self.grouped = grouped
        # Only grouped aggregates read the engine: the one row of an ungrouped aggregate
        # is kept in state (it exists even when no group does).
        self.current = current if mode == "aggregate" and grouped else None
        self.reagg: Reaggregator | None = (
            Reaggregator(reagg, layout) if reagg is not None else None)
        """Final groups over the engine's groups (expressions over several FROM items)."""
        self.final_grouped = reagg.grouped if reagg is not None else grouped
        self.emitted_once = False
        self.post = post
        """The stage after the aggregate (:class:`plans.cq.PostMap`): computed output
        columns and HAVING; a group HAVING drops has no row (None)."""
        self.order_by = tuple(order_by)
        self.topk: TopK | None = None
        """ORDER BY ... LIMIT: the window of the result this finalizer maintains."""
        # bag rows, or DISTINCT rows whose engine already emits 0/1 supports
        self._rows_plain = mode == "bag" or (mode == "distinct" and not count_supports)
        self.plain = self._rows_plain
        """Whether an epoch's delta is just its sorted raw changes (a view's generated
        close then sorts them itself, without calling :meth:`epoch`)."""
        self.keeps_state = not self.plain and (self.current is None or reagg is not None)
        """Whether :attr:`state` is used (a DISTINCT count or aggregate payload per row)."""
        if limit is not None or offset:
            self.topk = TopK(self.order_by, limit, offset, self.state)
            self.keeps_state = True
            self.plain = False
        self._agg_row = self._compile_agg_row()
        self._post_row = self._compile_post_row() if post is not None and mode != "aggregate" \
            else None
        if self._post_row is not None:
            # (not plain: a view's generated close must call epoch(), which maps rows)
            self.plain = False
            self.keeps_state = self.topk is not None
        self.sorted_changes: Callable[[dict[Any, Any]], list[tuple[int, Row]]] = \
            sorted_changes
        """Turns ``row -> net change`` into sorted pairs (a compiled view swaps in a C
        sort: :func:`core.native.native_sorted_changes`)."""

    def _compile_agg_row(self) -> Callable[[Row, Any], Row]:
        """(group key, payload) -> output row, as one generated expression (the columns
        are fixed per query)."""
        cols = [f"key[{i}]" if kind == "key" else f"v[{i}]" for kind, i in self.columns]
        if self.layout is None:
            head = "    v = (int(payload),)"
        else:
            head = "    v = values(payload)"
        env: dict[str, Any] = {"values": None if self.layout is None else self.layout.values}
        if self.reagg is not None:
            env["values"] = self.reagg.values
            head = "    v = values(payload)"
        lines = ["def agg_row(key, payload):", head]
        if self.post is not None:
            env.update(self.post.env)
            cols = list(self.post.exprs)
            if self.post.having is not None:
                lines += [f"    if not ({self.post.having}):", "        return None"]
        text = "\n".join([*lines, "    return (" + "".join(c + ", " for c in cols) + ")"])
        define(text, "<aggregate row>", env)
        fn: Callable[[Row, Any], Row] = env["agg_row"]
        return fn

    def _compile_post_row(self) -> Callable[[Row], Row | None]:
        """A row of a query without aggregates -> its output row, or None when the
        conditions over several FROM items drop it."""
        assert self.post is not None
        env: dict[str, Any] = dict(self.post.env)
        lines = ["def post_row(key):"]
        if self.post.having is not None:
            lines += [f"    if not ({self.post.having}):", "        return None"]
        lines.append("    return (" + "".join(c + ", " for c in self.post.exprs) + ")")
        define("\n".join(lines), "<post row>", env)
        fn: Callable[[Row], Row | None] = env["post_row"]
        return fn

    def _mapped(self, raw: dict[Any, Any]) -> dict[Any, Any]:
        """``raw`` (row -> change) through the post stage, consolidated."""
        post_row = self._post_row
        assert post_row is not None
        out: dict[Any, Any] = {}
        for row, m in raw.items():
            if not m:
                continue
            mapped = post_row(row)
            if mapped is not None:
                out[mapped] = out.get(mapped, 0) + m
        return out

    @property
    def silent_when_unchanged(self) -> bool:
        """Whether an epoch without raw changes has an empty delta: always, except the
        first epoch of an ungrouped aggregate (its one row appears then)."""
        return self.mode != "aggregate" or self.final_grouped or self.emitted_once

    def epoch(self, raw: dict[Any, Any]) -> list[tuple[int, Row]]:
        """The consolidated delta of one epoch, sorted."""
        if self.topk is not None:
            self.topk.state = self.state
            return self.topk.apply(self._result_epoch(raw))
        return self._result_epoch(raw)

    def _result_epoch(self, raw: dict[Any, Any]) -> list[tuple[int, Row]]:
        """The change of the whole result in one epoch (before a top-k window)."""
        if self._post_row is not None:
            return self.sorted_changes({r: m for r, m in self._mapped(raw).items() if m})
        if self._rows_plain:
            return self.sorted_changes(raw)
        out: list[tuple[int, Row]] = []
        ring = self.ring
        if self.mode == "distinct":
            counts = self.state
            for row, m in raw.items():
                if not m:
                    continue
                old = counts.get(row, 0)
                new = old + m
                if new:
                    counts[row] = new
                else:
                    del counts[row]
                if old == 0 and new > 0:
                    out.append((1, row))
                elif old > 0 and new == 0:
                    out.append((-1, row))
        else:
            changes: dict[Row, int] = {}
            zero = ring.zero
            if self.reagg is not None:
                zero = self.reagg.zero
                triples = self.reagg.fold(self._group_changes(raw), self.state)
                if not self.final_grouped and not self.emitted_once and \
                        not any(t[0] == () for t in triples):
                    triples.append(((), None, self.state.get((REAGG_TAG, ()))))
            else:
                if not self.grouped and () not in raw and not self.emitted_once:
                    raw = {**raw, (): ring.zero}
                triples = list(self._group_changes(raw))
            for key, old, new in triples:
                if self.final_grouped:
                    old_row = None if old is None else self._agg_row(key, old)
                    new_row = None if new is None else self._agg_row(key, new)
                else:
                    old_row = (
                        self._agg_row(key, zero if old is None else old)
                        if self.emitted_once else None
                    )
                    new_row = self._agg_row(key, zero if new is None else new)
                if old_row == new_row:
                    continue
                # Several groups can share an output row (GROUP BY keys not selected):
                # consolidate per row.
                if old_row is not None:
                    changes[old_row] = changes.get(old_row, 0) - 1
                if new_row is not None:
                    changes[new_row] = changes.get(new_row, 0) + 1
            self.emitted_once = True
            return self.sorted_changes(changes)
        sort_rows(out)
        return out

    def _group_changes(self, raw: dict[Any, Any]) -> Iterator[tuple[Any, Any, Any]]:
        """(group key, payload before, payload after) per changed group, None for a
        group without rows; the stored payloads are updated on the way. Under a
        reaggregation: (group key, None, the payload's change), nothing stored."""
        ring = self.ring
        current = self.current
        if current is not None:
            zero, sub, count = ring.zero, ring.sub, ring.count
            for key, d in raw.items():
                new = current(key)
                if new is not None and count(new) == 0:
                    new = None
                old = sub(zero if new is None else new, d)
                yield key, (None if count(old) == 0 else old), new
            return
        if self.reagg is not None:
            # A reaggregation folds each engine group's contribution, which is linear in
            # its payload (a count, sums times the count, a condition and values that
            # read the key alone): the change of a group's contribution is the
            # contribution of its change, so no engine group's payload is kept (TPC-H
            # Q9 had one per qualifying lineitem, (nation, year, revenue, cost,
            # quantity): some 18 bytes per base tuple).
            for key, d in raw.items():
                yield key, None, d
            return
        groups = self.state
        for key, d in raw.items():
            old = groups.get(key)
            new = d if old is None else ring.add(old, d)
            if ring.count(new) == 0:
                new = None
                groups.pop(key, None)
            else:
                groups[key] = new
            yield key, old, new

    @property
    def keeps_groups(self) -> bool:
        """Whether :attr:`state` holds every group's payload (an aggregate whose engine
        does not keep them, without a top-k window sharing the map): a snapshot is
        then read from it, O(groups), instead of from a full enumeration of the join
        (an ungrouped aggregate over a join enumerates every joined row)."""
        return (self.mode == "aggregate" and self.topk is None
                and (self.reagg is not None or self.current is None))

    def full(self, enumerate_rows: Callable[[], dict[Any, Any]]) -> list[tuple[int, Row]]:
        """The whole current result: from the maintained groups when :attr:`state`
        holds them all (:attr:`keeps_groups`), else from ``enumerate_rows()``, a full
        enumeration's row payloads (:meth:`snapshot`).

        >>> from operators.ring import IntRing
        >>> f = OutputFinalizer("aggregate", IntRing(), None, (("key", 0), ("agg", 0)), {})
        >>> f.epoch({("a",): 2, ("b",): 1})
        [(1, ('a', 2)), (1, ('b', 1))]
        >>> f.full(lambda: {})  # (not enumerated: the groups are in state)
        [(1, ('a', 2)), (1, ('b', 1))]
        """
        if not self.keeps_groups:
            return self.snapshot(enumerate_rows())
        if self.reagg is None:
            return self._snapshot_of_groups(self.state, self.ring.zero)
        finals = {key[1]: acc for key, acc in self.state.items()
                  if type(key) is tuple and len(key) == 2 and key[0] == REAGG_TAG}
        return self._snapshot_of_groups(finals, self.reagg.zero)

    def snapshot(self, raw: dict[Any, Any]) -> list[tuple[int, Row]]:
        """The full result from a full enumeration's row payloads."""
        out: list[tuple[int, Row]] = []
        if self._post_row is not None:
            raw = self._mapped(raw)
        if self.mode == "bag":
            out = [(int(m), row) for row, m in raw.items() if m]
        elif self.mode == "distinct":
            out = [(1, row) for row, m in raw.items() if m]
        elif self.reagg is not None:
            return self._snapshot_of_groups(self.reagg.groups(raw), self.reagg.zero)
        else:
            return self._snapshot_of_groups(raw, self.ring.zero)
        return self._in_order(out)

    def _snapshot_of_groups(self, groups: Mapping[Any, Any], zero: Any
                            ) -> list[tuple[int, Row]]:
        """An aggregate's whole result from its final groups' payloads (accumulators,
        with a reaggregation)."""
        def live(payload: Any) -> Any:
            return payload[0] if self.reagg is not None else self.ring.count(payload)

        counts: dict[Row, int] = {}
        for key, payload in groups.items():
            if live(payload):
                row = self._agg_row(key, payload)
                if row is not None:
                    counts[row] = counts.get(row, 0) + 1
        out = [(m, row) for row, m in counts.items()]
        if not self.final_grouped and not any(live(p) for p in groups.values()):
            row = self._agg_row((), zero)
            if row is not None:
                out.append((1, row))
        return self._in_order(out)

    def _in_order(self, out: list[tuple[int, Row]]) -> list[tuple[int, Row]]:
        """A whole result sorted, then through the top-k window or in ORDER BY order."""
        sort_rows(out)
        if self.topk is not None:
            return self.topk.snapshot(out)
        if self.order_by:
            order_rows(out, self.order_by)
        return out
