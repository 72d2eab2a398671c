"""Aggregates over expressions of several FROM items: a view over the join block's
groups (``plans.cq.Reaggregate``).

The engine groups by the final GROUP BY keys plus the carried variables and keeps, per
such group, its derivation count and the sums of one-item variables (ring payloads).
Per epoch, the changed engine groups are folded into the final groups here: each engine
group contributes ``(count, n_1, s_1, ..., n_k, s_k)`` - the count of its derivations
the condition keeps and, per final aggregate, how many non-NULL values and their sum
(an expression over the carried key times the count, or the engine's own sum). The
cost is O(changed engine groups), never a rescan.

Example:
    >>> from plans.cq import FinalAggregate, Reaggregate
    >>> spec = Reaggregate(1, True, "key[1] > 0", (
    ...     FinalAggregate("sum", None, "key[1] * 2", "INT"),), ("t.x",), {})
    >>> r = Reaggregator(spec, None)
    >>> state = {}
    >>> r.fold([(("a", 5), None, 3), (("a", -1), None, 4)], state)   # a: 3 rows of x=5
    [(('a',), None, (3, 3, 30))]
    >>> r.values((3, 3, 30))
    (30,)
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from decimal import Decimal
from fractions import Fraction
from typing import Any

from sortedcontainers import SortedList

from core.codegen import define
from operators.aggregate import AggregateLayout
from plans.cq import Reaggregate

MULTISET = ("min", "max", "count_distinct", "sum_distinct", "avg_distinct")
"""Final aggregates over the multiset of their argument's values in a group (value ->
count of derivations): MIN and MAX read its ends (an ordered index, O(log n) per
change: deleting the minimum finds the next without a rescan), DISTINCT aggregates its
distinct values."""
MS_TAG = "\x00ivmflow.reagg.values"
"""A final group's multiset of one aggregate: ``(MS_TAG, key, j) -> {value: count}``."""

TAG = "\x00ivmflow.reagg"
"""Final groups are kept in the finalizer's map under ``(TAG, key)`` (the map may also
hold the engine groups' payloads, keyed by plain tuples)."""


class Reaggregator:
    """Folds engine group changes into final group accumulators."""

    def __init__(self, spec: Reaggregate, layout: AggregateLayout | None) -> None:
        self.spec = spec
        self.n_keys = spec.n_keys
        width = 1 + 2 * len(spec.aggregates)
        self.zero: tuple[Any, ...] = (0,) * width
        env: dict[str, Any] = dict(spec.env)
        env["_Fraction"] = Fraction
        lines = ["def contrib(key, p):"]
        if spec.condition:
            lines += [f"    if not ({spec.condition}):", "        return None"]
        lines.append("    c = p if type(p) is int else p[0]" if layout is None
                     else "    c = p[0]")
        parts = ["c"]
        self.multiset = [j for j, fa in enumerate(spec.aggregates) if fa.func in MULTISET]
        values: list[str] = []
        for j, fa in enumerate(spec.aggregates):
            if fa.func in MULTISET:
                parts += ["0", "0"]  # (filled from the group's multiset)
                values.append(f"{fa.glue}")
            elif fa.func == "count_star":
                parts += ["c", "0"]
            elif fa.var is not None:
                assert layout is not None
                n_slot, s_slot = layout.slots[fa.var]
                parts += [f"p[{n_slot}]", f"p[{s_slot}]" if s_slot is not None else "0"]
            else:
                lines.append(f"    e{j} = {fa.glue}")
                value = f"_Fraction(e{j})" if fa.result_type == "FLOAT" else f"e{j}"
                parts += [f"(0 if e{j} is None else c)",
                          f"(0 if e{j} is None else {value} * c)"]
        lines.append("    return (" + ", ".join(parts) + ",)")
        define("\n".join(lines), "<reaggregate>", env)
        self._contrib = env["contrib"]
        self._values_of: Any = None
        if values:
            source = ["def values_of(key):", "    return (" + ", ".join(values) + ",)"]
            define("\n".join(source), "<reaggregate values>", env)
            self._values_of = env["values_of"]
        self._extremes = [j for j in self.multiset
                          if spec.aggregates[j].func in ("min", "max")]
        """The MIN/MAX aggregates: their slots are read from the ordered index."""
        self._additive = [i for i in range(width) if (i - 1) // 2 not in self.multiset]
        """The accumulator's slots that are sums of the engine groups' contributions."""
        self._sorted: dict[Any, SortedList] = {}
        """(final key, aggregate) -> the ordered values of a MIN/MAX multiset: a cache of
        the state's dict (rebuilt from it after a restore)."""

    def contrib(self, key: tuple[Any, ...], payload: Any) -> tuple[Any, ...] | None:
        out: tuple[Any, ...] | None = self._contrib(key, payload)
        return out

    def fold(self, changes: Iterable[tuple[Any, Any, Any]],
             state: MutableMapping[Any, Any]) -> list[tuple[Any, Any, Any]]:
        """``(engine key, payload before, after)`` -> ``(final key, accumulator before,
        after)`` per changed final group (None: the group has no row), applied to the
        accumulators in ``state``."""
        n = self.n_keys
        contrib = self._contrib
        touched: dict[Any, Any] = {}
        """final key -> its accumulator before this fold"""
        current: dict[Any, list[Any]] = {}
        """final key -> its accumulator as it is being folded (written back at the end)"""
        multiset = bool(self.multiset)
        additive = self._additive
        for key, old, new in changes:
            before = contrib(key, old) if old is not None else None
            after = contrib(key, new) if new is not None else None
            if before == after:
                continue
            fk = tuple(key[:n])
            cur = current.get(fk)
            if cur is None:
                acc = touched[fk] = state.get((TAG, fk))
                cur = current[fk] = list(acc) if acc is not None else list(self.zero)
            # (a multiset aggregate's slots are not summed: _multiset_change keeps a
            # DISTINCT's, the end of the fold writes a MIN/MAX's, possibly None)
            if before is not None:
                for i in additive:
                    cur[i] -= before[i]
            if after is not None:
                for i in additive:
                    cur[i] += after[i]
            if multiset:
                dc = (after[0] if after is not None else 0) - (
                    before[0] if before is not None else 0)
                if dc:
                    self._multiset_change(state, fk, key, dc, cur)
        for fk, cur in current.items():
            skey = (TAG, fk)
            if cur[0] == 0:
                state.pop(skey, None)
                continue
            # MIN/MAX read their ordered index once per final group and epoch, not per
            # engine group change.
            for j in self._extremes:
                counts = state.get((MS_TAG, fk, j))
                if counts:
                    sl = self._ordered(state, fk, j)
                    cur[1 + 2 * j] = len(counts)
                    cur[2 + 2 * j] = sl[0] if self.spec.aggregates[j].func == "min" \
                        else sl[-1]
                else:
                    cur[1 + 2 * j], cur[2 + 2 * j] = 0, None
            state[skey] = tuple(cur)
        return [(fk, old_acc, state.get((TAG, fk))) for fk, old_acc in touched.items()
                if old_acc != state.get((TAG, fk))]

    def _multiset_change(self, state: MutableMapping[Any, Any], fk: Any, key: Any,
                         dc: int, cur: list[Any]) -> None:
        """Add ``dc`` derivations of this engine group's values to the final group's
        multisets; a DISTINCT aggregate's slots in ``cur`` (distinct values, their sum)
        change by the values whose count leaves or reaches 0, so O(1) per value (MIN/MAX
        slots are written by :meth:`fold`)."""
        for j, v in zip(self.multiset, self._values_of(key)):
            if v is None:
                continue  # (aggregates skip NULLs)
            mkey = (MS_TAG, fk, j)
            counts = state.get(mkey)
            if counts is None:
                counts = {}
                state[mkey] = counts
            func = self.spec.aggregates[j].func
            # (the ordered index is built from the counts before this change)
            sl = self._ordered(state, fk, j) if func in ("min", "max") else None
            old = counts.get(v, 0)
            n = old + dc
            if n:
                counts[v] = n
            else:
                del counts[v]
            if (old == 0) == (n == 0):
                continue  # (the set of distinct values is unchanged)
            sign = 1 if old == 0 else -1
            if sl is not None:
                if sign > 0:
                    sl.add(v)
                else:
                    sl.remove(v)
            else:
                cur[1 + 2 * j] += sign
                if func != "count_distinct":
                    # exact: a DECIMAL adds as a Decimal (76 digits, core.sqlfuncs), a
                    # DOUBLE as the Fraction of its binary value, so the sum after any
                    # order of changes is the sum of the distinct values
                    x = Fraction(v) if isinstance(v, float) else v
                    cur[2 + 2 * j] += x if sign > 0 else -x
            if not counts:
                del state[mkey]
                self._sorted.pop((fk, j), None)

    def _ordered(self, state: MutableMapping[Any, Any], fk: Any, j: int) -> SortedList:
        sl = self._sorted.get((fk, j))
        if sl is None:
            sl = self._sorted[(fk, j)] = SortedList(state.get((MS_TAG, fk, j), {}))
        return sl

    def groups(self, raw: dict[Any, Any]) -> dict[Any, tuple[Any, ...]]:
        """Final accumulators from a full enumeration's engine groups (snapshots)."""
        out: dict[Any, list[Any]] = {}
        sets: dict[Any, list[dict[Any, int]]] = {}
        n = self.n_keys
        for key, payload in raw.items():
            c = self._contrib(key, payload)
            if c is None:
                continue
            fk = tuple(key[:n])
            cur = out.setdefault(fk, list(self.zero))
            for i, x in enumerate(c):
                cur[i] += x
            if self.multiset:
                per = sets.setdefault(fk, [{} for _ in self.multiset])
                for d, v in zip(per, self._values_of(key)):
                    if v is not None:
                        d[v] = d.get(v, 0) + c[0]
        for fk, per in sets.items():
            for j, d in zip(self.multiset, per):
                func = self.spec.aggregates[j].func
                vals = [v for v, m in d.items() if m]
                cur = out[fk]
                cur[1 + 2 * j] = len(vals)
                if func == "min":
                    cur[2 + 2 * j] = min(vals) if vals else None
                elif func == "max":
                    cur[2 + 2 * j] = max(vals) if vals else None
                elif func != "count_distinct":
                    cur[2 + 2 * j] = sum(Fraction(v) if isinstance(v, float) else v
                                         for v in vals)
        return {k: tuple(v) for k, v in out.items() if v[0]}

    def values(self, acc: tuple[Any, ...]) -> tuple[Any, ...]:
        """The SQL values of the final aggregates of a group with this accumulator."""
        out: list[Any] = []
        for j, fa in enumerate(self.spec.aggregates):
            n, s = acc[1 + 2 * j], acc[2 + 2 * j]
            if fa.func in ("count_star", "count", "count_distinct"):
                out.append(int(n))
            elif n == 0:
                out.append(None)
            elif fa.func in ("min", "max"):
                out.append(s)
            elif fa.func in ("avg", "avg_distinct"):
                out.append(float(Fraction(s) / n))
            elif fa.result_type == "DECIMAL":
                out.append(Decimal(s))
            elif fa.result_type == "FLOAT":
                out.append(float(s))
            else:
                out.append(int(s))
        return tuple(out)
