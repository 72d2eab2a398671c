"""A heavy/light router with single *and double* partitions (notes ivm-eps-triangles.md,
sections 2.1, 2.3 and 2.11): every relation is partitioned on one column (parts ``H``
and ``L``) or on two (parts ``HH``, ``HL``, ``LH``, ``LL``, one letter per partition
column in the order given), with degrees counted over the *whole* relation.

Routing follows the corrected AffectedPart of the notes' erratum 7.1: an update goes to
the part named by the current class of each of its partition values (an unseen value is
light, everything is heavy at eps = 0), never blindly to ``LL``. A value whose degree
leaves the loose band [theta/2, 3 theta/2) moves, with all its tuples, to the parts
with its letter flipped (``HH <-> LH`` and ``HL <-> LL`` for the first column), as
paired updates through the operator's ``apply`` (insert into the new part, then delete
from the old one). ``|D|`` reaching N or dropping below floor(N/4) triggers a major
rebalance: a strict repartition and the operator's ``rebuild``.

Example (S(B,C) double partitioned, eps = 1/2):
    >>> from operators.state import DictState
    >>> r = DoubleRouter(DictState(), [PartSpec("S", (0, 1))], 0.5)
    >>> for c in range(6):
    ...     _ = r.update("S", (1, c), 1)
    >>> r.update("S", (2, 0), 1), r.size, r.base
    ('LL', 7, 8)
    >>> r.update("S", (1, 9), 1), r.is_heavy("S", 0, 1), len(r.part("S", "HL"))
    ('HL', True, 7)
    >>> r.check_invariants()
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

from operators.heavylight import HEAVY, LIGHT, ApplyFn, KeyedBag, ThresholdRouter
from operators.state import State


@dataclass(frozen=True)
class PartSpec:
    """A relation (binary), and the columns it is partitioned on: one (single partition)
    or two (double partition; part labels give the class of each, in this order)."""

    name: str
    keys: tuple[int, ...]
    arity: int = 2


def labels(width: int) -> tuple[str, ...]:
    """Part labels for a partition on ``width`` columns: H, L or HH, HL, LH, LL."""
    return tuple("".join(p) for p in product(HEAVY + LIGHT, repeat=width))


class DoubleRouter(ThresholdRouter):
    """Relation parts partitioned on one or two columns each, with rebalancing."""

    def __init__(
        self,
        state: State,
        relations: Sequence[PartSpec],
        eps: float,
        *,
        name: str = "hl2",
        apply: ApplyFn | None = None,
        rebuild: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(state, name, eps, apply, rebuild)
        self.specs = {r.name: r for r in relations}
        self.parts = {
            r.name: {
                p: KeyedBag(state, f"{name}.{r.name}.{p}", r.arity) for p in labels(len(r.keys))
            }
            for r in relations
        }
        # Per relation and partition column: value -> degree in the whole relation, and
        # the values whose class is heavy.
        self.degrees: dict[str, list[MutableMapping[Any, int]]] = {
            r.name: [state.map(f"{name}.{r.name}.degree{k}") for k in range(len(r.keys))]
            for r in relations
        }
        self.heavy: dict[str, list[MutableMapping[Any, bool]]] = {
            r.name: [state.map(f"{name}.{r.name}.heavy{k}") for k in range(len(r.keys))]
            for r in relations
        }

    # -- reading -------------------------------------------------------------------
    def get(self, rel: str, t: tuple[Any, ...]) -> int:
        """Multiplicity of ``t`` in the whole relation."""
        return sum(bag.rows.get(t, 0) for bag in self.parts[rel].values())

    def degree(self, rel: str, k: int, v: Any) -> int:
        return self.degrees[rel][k].get(v, 0)

    def is_heavy(self, rel: str, k: int, v: Any) -> bool:
        return v in self.heavy[rel][k]

    def route(self, rel: str, t: tuple[Any, ...]) -> str:
        """The part an update of ``t`` goes to: one letter per partition column, the
        current class of the value (unseen values light; all heavy at eps = 0)."""
        if self.eps == 0.0:
            return HEAVY * len(self.specs[rel].keys)
        heavy = self.heavy[rel]
        return "".join(
            HEAVY if t[pos] in heavy[k] else LIGHT for k, pos in enumerate(self.specs[rel].keys)
        )

    # -- updating ------------------------------------------------------------------
    def update(self, rel: str, t: tuple[Any, ...], m: int) -> str:
        """Apply one base update and rebalance if needed; returns the part label."""
        spec = self.specs[rel]
        label = self.route(rel, t)
        bag = self.parts[rel][label]
        old = bag.get(t)
        if old + m < 0:
            msg = f"{rel}{t}: delete of {-m} copies, {old} present"
            raise ValueError(msg)
        if self.eps == 0.0:
            for k, pos in enumerate(spec.keys):
                self.heavy[rel][k][t[pos]] = True
        self.apply(rel, label, t, m)
        new = bag.add(t, m)
        meta = self.meta
        if old == 0 and new > 0:
            step = 1
        elif old > 0 and new == 0:
            step = -1
        else:
            return label
        meta["size"] += step
        for k, pos in enumerate(spec.keys):
            degrees = self.degrees[rel][k]
            d = degrees.get(t[pos], 0) + step
            if d:
                degrees[t[pos]] = d
            else:  # the value left the relation: it has no class any more
                degrees.pop(t[pos], None)
                self.heavy[rel][k].pop(t[pos], None)
        if not self.rebase():
            for k, pos in enumerate(spec.keys):
                self.check_minor(rel, k, t[pos])
        return label

    def check_minor(self, rel: str, k: int, x: Any) -> None:
        """Flip ``x``'s class on partition column ``k`` if its whole-relation degree left
        the loose band [theta/2, 3 theta/2)."""
        d = self.degrees[rel][k].get(x, 0)
        if d == 0 or self.eps in (0.0, 1.0):
            return
        theta = self.theta
        if x in self.heavy[rel][k]:
            if d < theta / 2:
                self._move(rel, k, x, HEAVY, LIGHT)
        elif d >= 1.5 * theta:
            self._move(rel, k, x, LIGHT, HEAVY)

    def _move(self, rel: str, k: int, x: Any, src: str, dst: str) -> None:
        self.stats["minor"] += 1
        pos = self.specs[rel].keys[k]
        if dst == HEAVY:
            self.heavy[rel][k][x] = True
        else:
            self.heavy[rel][k].pop(x, None)
        parts = self.parts[rel]
        for label in list(parts):
            if label[k] != src:
                continue
            target = label[:k] + dst + label[k + 1 :]
            sbag, dbag = parts[label], parts[target]
            for t, m in list(sbag.match(pos, x).items()):
                self.stats["moved"] += 1
                self.apply(rel, target, t, m)
                dbag.add(t, m)
                self.apply(rel, label, t, -m)
                sbag.add(t, -m)

    def major_rebalance(self) -> None:
        """Strict repartition with the current N (heavy iff degree >= N^eps), then let
        the operator recompute its views."""
        self.stats["major"] += 1
        theta = self.theta
        for rel, spec in self.specs.items():
            parts = self.parts[rel]
            rows = [item for bag in parts.values() for item in bag.rows.items()]
            for bag in parts.values():
                bag.clear()
            for k in range(len(spec.keys)):
                heavy = self.heavy[rel][k]
                heavy.clear()
                for v, d in self.degrees[rel][k].items():
                    if self.eps == 0.0 or (self.eps < 1.0 and d >= theta):
                        heavy[v] = True
            for t, m in rows:
                parts[self.route(rel, t)].add(t, m)
        self.rebuild()

    def check_invariants(self) -> None:
        """Assert the partition invariants (tests): per partition column a domain
        partition matching the heavy set, loose degree bounds on whole-relation
        degrees, degree counters, |D| and floor(N/4) <= |D| < N."""
        theta = self.theta
        size = 0
        for rel, spec in self.specs.items():
            parts = self.parts[rel]
            size += sum(len(b) for b in parts.values())
            for k, pos in enumerate(spec.keys):
                hv: set[Any] = set()
                lv: set[Any] = set()
                degree: dict[Any, int] = {}
                for label, bag in parts.items():
                    for v, bucket in bag.index[pos].items():
                        (hv if label[k] == HEAVY else lv).add(v)
                        degree[v] = degree.get(v, 0) + len(bucket)
                assert not hv & lv, (rel, k, hv & lv)
                assert hv == set(self.heavy[rel][k]), (rel, k, hv, set(self.heavy[rel][k]))
                assert degree == dict(self.degrees[rel][k]), (rel, k)
                if 0.0 < self.eps < 1.0:
                    for v, d in degree.items():
                        assert d >= theta / 2 if v in hv else d < 1.5 * theta, (rel, v, d)
        assert size == self.size, (size, self.size)
        assert self.base // 4 <= self.size < self.base, (self.size, self.base)
