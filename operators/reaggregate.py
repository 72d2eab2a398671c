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

from core.codegen import define
from operators.aggregate import AggregateLayout
from plans.cq import Reaggregate

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
        for j, fa in enumerate(spec.aggregates):
            if fa.func == "count_star":
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
            if before is not None:
                cur = [a - b for a, b in zip(cur, before)]
            if after is not None:
                cur = [a + b for a, b in zip(cur, after)]
            if cur[0] == 0:
                state.pop(skey, None)
            else:
                state[skey] = tuple(cur)
        return [(fk, old_acc, state.get((TAG, fk))) for fk, old_acc in touched.items()
                if old_acc != state.get((TAG, fk))]

    def groups(self, raw: dict[Any, Any]) -> dict[Any, tuple[Any, ...]]:
        """Final accumulators from a full enumeration's engine groups (snapshots)."""
        out: dict[Any, list[Any]] = {}
        n = self.n_keys
        for key, payload in raw.items():
            c = self._contrib(key, payload)
            if c is None:
                continue
            cur = out.setdefault(tuple(key[:n]), list(self.zero))
            for i, x in enumerate(c):
                cur[i] += x
        return {k: tuple(v) for k, v in out.items() if v[0]}

    def values(self, acc: tuple[Any, ...]) -> tuple[Any, ...]:
        """The SQL values of the final aggregates of a group with this accumulator."""
        out: list[Any] = []
        for j, fa in enumerate(self.spec.aggregates):
            n, s = acc[1 + 2 * j], acc[2 + 2 * j]
            if fa.func in ("count_star", "count"):
                out.append(int(n))
            elif n == 0:
                out.append(None)
            elif fa.func == "avg":
                out.append(float(Fraction(s) / n))
            elif fa.result_type == "DECIMAL":
                out.append(Decimal(s))
            elif fa.result_type == "FLOAT":
                out.append(float(s))
            else:
                out.append(int(s))
        return tuple(out)
