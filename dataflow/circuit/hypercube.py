"""The partitioner (docs/architecture.md): HyperCube shares over join variables, so that
every full derivation lives in exactly one partition. When one variable occurs in every
atom, all of P goes to it and nothing is replicated.

Example:
    >>> from dataflow.api import compile_query
    >>> q = compile_query("CREATE TABLE G(src INT, dst INT); SELECT G1.src, G2.dst, G3.dst"
    ...                   " FROM G G1, G G2, G G3 WHERE G1.dst = G2.src AND G2.dst = G3.src")
    >>> p = Partitioner(q.plan, 4)
    >>> p.shares
    {'g1.dst': 2, 'dst': 2}
    >>> sorted(p.route(1, (7, 8))), len(p.route(0, (1, 7)))
    ([1], 2)
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from plans.plan import Plan


def stable_hash(v: Any) -> int:
    """A hash that is the same in every process (Python's str hash is salted)."""
    if v is None:
        return 0
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v & 0x7FFFFFFFFFFFFFFF
    if isinstance(v, float):
        if v.is_integer():
            return int(v) & 0x7FFFFFFFFFFFFFFF
        return zlib.crc32(repr(v).encode())
    return zlib.crc32(str(v).encode())


def _factorizations(p: int, k: int) -> list[tuple[int, ...]]:
    """All ordered k-tuples of positive integers with product p."""
    if k == 0:
        return [()] if p == 1 else []
    out = []
    for d in range(1, p + 1):
        if p % d == 0:
            for rest in _factorizations(p // d, k - 1):
                out.append((d, *rest))
    return out


def choose_shares(
    atoms: Sequence[frozenset[str]], candidates: Sequence[str], p: int, rates: Sequence[float]
) -> dict[str, int]:
    """Shares minimising the expected replicated load sum_a rate_a * p / prod_{v in a} s_v."""
    if p <= 1 or not candidates:
        return {}
    for v in candidates:
        if all(v in a for a in atoms):
            return {v: p}
    best: tuple[float, int, tuple[int, ...]] | None = None
    for shares in _factorizations(p, len(candidates)):
        load = 0.0
        for a, r in zip(atoms, rates):
            covered = 1
            for v, s in zip(candidates, shares):
                if v in a:
                    covered *= s
            load += r * p / covered
        spread = sum(1 for s in shares if s > 1)
        key = (load, spread, tuple(-s for s in shares))
        if best is None or key < best:
            best = (load, spread, shares)
    assert best is not None
    return {v: s for v, s in zip(candidates, best[2]) if s > 1}


class Partitioner:
    """Routes each atom tuple to the partitions (grid cells) that need it."""

    def __init__(
        self, plan: Plan, parallelism: int, allowed: set[str] | None = None,
        keyed: bool = False,
    ) -> None:
        cq = plan.cq
        atoms = [frozenset(a.vars) for a in cq.atoms]
        counts = {v: sum(1 for a in atoms if v in a) for v in cq.var_order}
        # keyed: a variable of one atom may be hashed too (a stage of a DAG of views
        # keyed by its GROUP BY over one table, which has no join variable to hash).
        least = 1 if keyed else 2
        candidates = [
            v for v in cq.var_order if counts[v] >= least and (allowed is None or v in allowed)
        ]
        self.shares = choose_shares(atoms, candidates, max(1, parallelism), plan.rates)
        dims = [v for v in cq.var_order if v in self.shares]
        strides: dict[str, int] = {}
        stride = 1
        for v in dims:
            strides[v] = stride
            stride *= self.shares[v]
        self.partitions = stride
        self._fixed: list[list[tuple[int, int, int]]] = []
        self._offsets: list[list[int]] = []
        for a in cq.atoms:
            fixed = [(a.vars.index(v), self.shares[v], strides[v]) for v in dims if v in a.vars]
            free = [v for v in dims if v not in a.vars]
            offsets = [0]
            for v in free:
                offsets = [o + c * strides[v] for o in offsets for c in range(self.shares[v])]
            self._fixed.append(fixed)
            self._offsets.append(sorted(offsets))

    def route(self, atom: int, t: tuple[Any, ...]) -> list[int]:
        base = 0
        for pos, share, stride in self._fixed[atom]:
            base += (stable_hash(t[pos]) % share) * stride
        return [base + o for o in self._offsets[atom]]

    def describe(self) -> str:
        if not self.shares:
            return "1 partition (no join variable to hash)" if self.partitions == 1 else ""
        parts = " x ".join(f"{v}:{s}" for v, s in self.shares.items())
        return f"{self.partitions} partitions, shares {parts}"

