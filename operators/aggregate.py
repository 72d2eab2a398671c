"""Aggregates as ring payloads: which vector component holds what, the payload a base
tuple contributes, and the SQL values read back from a group's payload.

Components: 0 is the number of derivations (COUNT(*)); each aggregated variable x gets
``n_x`` (derivations where x is not NULL) and, for SUM/AVG, ``s_x`` (sum of x).
Only one atom *owns* x (its first occurrence), so a derivation counts x once.

Example:
    >>> lay = AggregateLayout([("sum", "x", "INT")], {"x": 0})
    >>> lay.base_payload(0, 2, 5)   # atom 0, multiplicity 2, x = 5
    (2, 2, 10)
    >>> lay.values((2, 2, 10))
    (10,)
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

from core.schema import Value


class AggregateLayout:
    """Maps the query's aggregates onto ring components."""

    def __init__(
        self, aggregates: Sequence[tuple[str, str | None, str]], owner: dict[str, int]
    ) -> None:
        self.aggregates = list(aggregates)
        self.slots: dict[str, tuple[int, int | None]] = {}
        width = 1
        for func, var, _rtype in self.aggregates:
            if var is None:
                continue
            n_slot, s_slot = self.slots.get(var, (width, None))
            if var not in self.slots:
                width += 1
            if func in ("sum", "avg") and s_slot is None:
                s_slot = width
                width += 1
            self.slots[var] = (n_slot, s_slot)
        self.width = width
        self.owner = owner
        # per atom: [(var position handled by the caller, n_slot, s_slot)]
        self.by_atom: dict[int, list[tuple[str, int, int | None]]] = {}
        for var, (n_slot, s_slot) in self.slots.items():
            self.by_atom.setdefault(owner[var], []).append((var, n_slot, s_slot))

    def owned_vars(self, atom: int) -> list[str]:
        return [v for v, _, _ in self.by_atom.get(atom, [])]

    def base_payload(self, atom: int, mult: int, *values: Value) -> tuple[Any, ...]:
        """Payload of ``mult`` copies of a tuple of ``atom`` whose owned variables have
        ``values`` (in :meth:`owned_vars` order)."""
        out: list[Any] = [0] * self.width
        out[0] = mult
        for (_var, n_slot, s_slot), v in zip(self.by_atom.get(atom, []), values):
            if v is None:
                continue
            out[n_slot] = mult
            if s_slot is not None:
                out[s_slot] = mult * (Fraction(v) if isinstance(v, float) else v)  # type: ignore[operator]
        return tuple(out)

    def values(self, payload: Sequence[Any]) -> tuple[Value, ...]:
        """The SQL values of the aggregates for a group with this payload."""
        out: list[Value] = []
        for func, var, rtype in self.aggregates:
            if func == "count_star":
                out.append(int(payload[0]))
                continue
            assert var is not None
            n_slot, s_slot = self.slots[var]
            n = payload[n_slot]
            if func == "count":
                out.append(int(n))
                continue
            if n == 0:
                out.append(None)
                continue
            assert s_slot is not None
            s = payload[s_slot]
            if func == "sum":
                if rtype == "DECIMAL":
                    out.append(Decimal(s))
                else:
                    out.append(float(s) if rtype == "FLOAT" else int(s))
            else:
                out.append(float(Fraction(s) / n))
        return tuple(out)
