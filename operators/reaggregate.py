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
        self._ms_slots = [i for j in self.multiset for i in (1 + 2 * j, 2 + 2 * j)]
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
        for key, old, new in changes:
            before = contrib(key, old) if old is not None else None
            after = contrib(key, new) if new is not None else None
            if before == after:
                continue
            fk = tuple(key[:n])
            skey = (TAG, fk)
            acc = state.get(skey)
            if fk not in touched:
                touched[fk] = acc
            cur = list(acc) if acc is not None else list(self.zero)
            if self.multiset:  # (their slots hold a summary, rewritten below)
                for i in self._ms_slots:
                    cur[i] = 0
            if before is not None:
                cur = [a - b for a, b in zip(cur, before)]
            if after is not None:
                cur = [a + b for a, b in zip(cur, after)]
            if self.multiset:
                dc = (after[0] if after is not None else 0) - (
                    before[0] if before is not None else 0)
                self._multiset_change(state, fk, key, dc, cur)
            if cur[0] == 0:
                state.pop(skey, None)
            else:
                state[skey] = tuple(cur)
        return [(fk, old_acc, state.get((TAG, fk))) for fk, old_acc in touched.items()
                if old_acc != state.get((TAG, fk))]

    def _multiset_change(self, state: MutableMapping[Any, Any], fk: Any, key: Any,
                         dc: int, cur: list[Any]) -> None:
        """Add ``dc`` derivations of this engine group's values to the final group's
        multisets and write their aggregates into ``cur``."""
        values = self._values_of(key) if dc else ()
        for j, v in zip(self.multiset, values):
            if v is None:
                continue  # (aggregates skip NULLs)
            mkey = (MS_TAG, fk, j)
            counts = state.get(mkey)
            if counts is None:
                counts = {}
                state[mkey] = counts
            sl = self._ordered(state, fk, j) if self.spec.aggregates[j].func in (
                "min", "max") else None
            n = counts.get(v, 0) + dc
            if n:
                if v not in counts and sl is not None:
                    sl.add(v)
                counts[v] = n
            else:
                del counts[v]
                if sl is not None:
                    sl.remove(v)
            if not counts:
                del state[mkey]
                self._sorted.pop((fk, j), None)
        for j in self.multiset:
            cur[1 + 2 * j], cur[2 + 2 * j] = self._summary(state, fk, j)

    def _ordered(self, state: MutableMapping[Any, Any], fk: Any, j: int) -> SortedList:
        sl = self._sorted.get((fk, j))
        if sl is None:
            sl = self._sorted[(fk, j)] = SortedList(state.get((MS_TAG, fk, j), {}))
        return sl

    def _summary(self, state: MutableMapping[Any, Any], fk: Any, j: int) -> tuple[Any, Any]:
        """(distinct values, the aggregate's raw value) of a final group's multiset."""
        func = self.spec.aggregates[j].func
        counts = state.get((MS_TAG, fk, j))
        if not counts:
            return 0, None if func in ("min", "max") else 0
        if func == "min":
            return len(counts), self._ordered(state, fk, j)[0]
        if func == "max":
            return len(counts), self._ordered(state, fk, j)[-1]
        total = sum(Fraction(v) if isinstance(v, float) else v for v in counts) \
            if func != "count_distinct" else 0
        return len(counts), total

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
