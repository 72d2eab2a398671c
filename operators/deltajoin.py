"""Delta join: the join of a few indexed atoms maintained by standard change propagation,
reported as deltas of its projection (a GHD bag that is not a triangle, CROWN 2.9:
"standard change propagation inside each bag").

Nothing but the atoms' indexes is stored (an atom no other atom probes by a part of its
tuple keeps its multiplicities in a map of its own): an update ``dm`` of atom ``i`` with
tuple ``t`` yields ``dm * (t joined with the current state of every other atom)``,
projected on the output variables, and then ``t`` is applied. Feeding the copies of a
self-join one after the other (as the input operators do) is the delta query's
product rule: each copy joins the others' states with the earlier copies already
updated, so several atoms changed by one base update stay exact.

Example (a 2-path R(a,b) * S(b,c) projected on (a, c)):
    >>> from operators.state import DictState
    >>> j = DeltaJoin([("a", "b"), ("b", "c")], ("a", "c"), DictState())
    >>> j.update(0, (1, 2), 2)
    {}
    >>> j.update(1, (2, 3), 1)
    {(1, 3): 2}
    >>> j.update(0, (5, 2), 1), j.update(1, (2, 3), -1)
    ({(5, 3): 1}, {(1, 3): -2, (5, 3): -1})
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from operator import itemgetter
from typing import Any

from operators.nodemaps import IndexedBase
from operators.state import State

BIG_BUCKET = 8
"""Tuples from which a delta join's bucket is a field map (where the state makes
them: a few tuples keep a dict, as a field map's first table holds 8 slots)."""

Step = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""(atom, key positions in the atom, their variable slots, the atom's new variable slots
(-1 for an already bound position))."""


def _key_of(key: tuple[int, ...]) -> Callable[[tuple[Any, ...]], Any]:
    """A tuple's key at positions ``key`` (none: ``()``; one: the bare value)."""
    if not key:
        return lambda t: ()
    if len(key) == 1:
        return itemgetter(key[0])
    return lambda t: tuple(t[p] for p in key)


class DeltaJoin:
    """The join of ``atom_vars`` (each a tuple of distinct variables) projected on
    ``out_vars``, with bag semantics (multiplicities multiply)."""

    def __init__(
        self,
        atom_vars: Sequence[tuple[str, ...]],
        out_vars: tuple[str, ...],
        state: State,
        name: str = "dj",
    ) -> None:
        self.atom_vars = [tuple(a) for a in atom_vars]
        variables: list[str] = []
        for a in self.atom_vars:
            for v in a:
                if v not in variables:
                    variables.append(v)
        missing = [v for v in out_vars if v not in variables]
        if missing:
            msg = f"delta join: output variables {missing} occur in no atom"
            raise ValueError(msg)
        self.variables = tuple(variables)
        slot = {v: i for i, v in enumerate(variables)}
        self.slots = [tuple(slot[v] for v in a) for a in self.atom_vars]
        self.out_slots = tuple(slot[v] for v in out_vars)
        # Indexes: (atom, key positions) -> key -> {tuple: multiplicity}.
        self.indexes: dict[tuple[int, tuple[int, ...]],
                           MutableMapping[Any, MutableMapping[Any, int]]] = {}
        self.plans: list[list[Step]] = []
        for i in range(len(self.atom_vars)):
            steps = self._order(i)
            for j, key, _slots, _new in steps:
                if 0 < len(key) < len(self.atom_vars[j]) and (j, key) not in self.indexes:
                    label = ",".join(str(p) for p in key)
                    self.indexes[(j, key)] = state.map(f"{name}.atom{j}.by{label}")
                elif not key and (j, key) not in self.indexes:
                    self.indexes[(j, key)] = state.map(f"{name}.atom{j}.all")
            self.plans.append(steps)
        # (per atom its indexes, each with the function that files a tuple under its key)
        self._by_atom: list[list[tuple[Callable[[tuple[Any, ...]], Any],
                                       MutableMapping[Any, MutableMapping[Any, int]]]]]
        self._by_atom = [[] for _ in self.atom_vars]
        for (j, key), idx in sorted(self.indexes.items(), key=lambda kv: kv[0]):
            self._by_atom[j].append((_key_of(key), idx))
        # A bucket past BIG_BUCKET tuples becomes a field map where the state makes them
        # (tuple -> multiplicity, the tuple's fields in the slot: some 70 bytes a tuple
        # where a dict of packed rows took 100; TPC-H Q5's lineitems per supplier).
        self._field_bucket = state.field_map_factory()
        # An atom's multiplicities: read from its first index's buckets where it has
        # one (which hold them already: a second map of every tuple would double the
        # bag's bytes, TPC-H Q5's lineitem), else its own map ``<name>.atom<i>``.
        self.rel: list[MutableMapping[tuple[Any, ...], int]] = []
        self._own: list[bool] = []
        for i in range(len(self.atom_vars)):
            if self._by_atom[i]:
                key_of, idx = self._by_atom[i][0]
                self.rel.append(IndexedBase(idx, key_of))  # type: ignore[arg-type]
                self._own.append(False)
            else:
                self.rel.append(state.map(f"{name}.atom{i}"))
                self._own.append(True)

    def _order(self, i: int) -> list[Step]:
        """Greedy join order after an update of atom ``i``: next the atom with the most
        bound variables (then the fewest new ones, then the lowest index), so that every
        probe goes through an index on the bound positions."""
        bound = set(self.slots[i])
        rest = [j for j in range(len(self.atom_vars)) if j != i]
        steps: list[Step] = []
        while rest:
            j = min(
                rest,
                key=lambda j: (
                    -sum(s in bound for s in self.slots[j]),
                    sum(s not in bound for s in self.slots[j]),
                    j,
                ),
            )
            rest.remove(j)
            key = tuple(p for p, s in enumerate(self.slots[j]) if s in bound)
            key_slots = tuple(self.slots[j][p] for p in key)
            new = tuple(-1 if s in bound else s for s in self.slots[j])
            bound.update(self.slots[j])
            steps.append((j, key, key_slots, new))
        return steps

    def update(self, i: int, t: tuple[Any, ...], dm: int) -> dict[tuple[Any, ...], int]:
        """Apply ``dm`` copies of ``t`` to atom ``i``; return the projected join's change
        (zero entries dropped)."""
        out: dict[tuple[Any, ...], int] = {}
        binding: list[Any] = [None] * len(self.variables)
        for s, v in zip(self.slots[i], t):
            binding[s] = v
        self._extend(self.plans[i], 0, binding, dm, out)
        self._apply(i, t, dm)
        return {k: v for k, v in out.items() if v}

    def _extend(
        self, steps: list[Step], k: int, binding: list[Any], m: int, out: dict[Any, int]
    ) -> None:
        if k == len(steps):
            key = tuple(binding[s] for s in self.out_slots)
            out[key] = out.get(key, 0) + m
            return
        j, key, key_slots, new = steps[k]
        if len(key) == len(new):  # every variable bound: a lookup
            tm = self.rel[j].get(tuple(binding[s] for s in key_slots), 0)
            if tm:
                self._extend(steps, k + 1, binding, m * tm, out)
            return
        probe: Any
        if not key:
            probe = ()
        elif len(key) == 1:
            probe = binding[key_slots[0]]
        else:
            probe = tuple(binding[s] for s in key_slots)
        matches = self.indexes[(j, key)].get(probe)
        if not matches:
            return
        for tup, tm in matches.items():
            for p, s in enumerate(new):
                if s >= 0:
                    binding[s] = tup[p]
            self._extend(steps, k + 1, binding, m * tm, out)
        for s in new:
            if s >= 0:
                binding[s] = None

    def _apply(self, i: int, t: tuple[Any, ...], dm: int) -> None:
        rel = self.rel[i]
        new = rel.get(t, 0) + dm
        if new < 0:
            msg = f"delta join: atom {i} would hold {new} copies of {t!r}"
            raise AssertionError(msg)
        if self._own[i]:
            if new:
                rel[t] = new
            else:
                rel.pop(t, None)
        for key_of, idx in self._by_atom[i]:
            k = key_of(t)
            bucket = idx.get(k)
            if new:
                if bucket is None:
                    idx[k] = {t: new}
                elif (type(bucket) is dict and len(bucket) >= BIG_BUCKET
                      and self._field_bucket is not None and 0 < len(t) <= 8):
                    grown = self._as_field_map(bucket, len(t))
                    grown[t] = new
                    idx[k] = grown
                else:
                    bucket[t] = new
            elif bucket is not None:
                bucket.pop(t, None)
                if not bucket:
                    del idx[k]

    def _as_field_map(self, bucket: dict[Any, int], width: int) -> MutableMapping[Any, int]:
        """The tuples of a dict bucket in a field map (of tuples of ``width``)."""
        assert self._field_bucket is not None
        grown = self._field_bucket(width, 1, None)
        for tup, m in bucket.items():
            grown[tup] = m
        return grown

    def full(self) -> dict[tuple[Any, ...], int]:
        """The whole projected join, recomputed from the atoms (tests, snapshots)."""
        out: dict[tuple[Any, ...], int] = {}
        if not self.atom_vars:
            return out
        binding: list[Any] = [None] * len(self.variables)
        for t, m in self.rel[0].items():
            for s, v in zip(self.slots[0], t):
                binding[s] = v
            self._extend(self.plans[0], 0, binding, m, out)
        return {k: v for k, v in out.items() if v}
