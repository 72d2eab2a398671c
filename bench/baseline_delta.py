"""Plain first-order IVM: delta queries over hash indexes, no intermediate views.

For an update of atom ``A_i`` the delta query ``ΔQ_i = ΔA_i ⋈ (the other atoms)`` is
evaluated directly: the delta tuple binds ``A_i``'s variables, then the other atoms are
joined one at a time in a fixed order (greedy from ``A_i``: the next atom is the first,
in FROM order, that shares a bound variable) by probing a hash index of that atom on its
already-bound variables. Nothing but the atoms (and their indexes) is stored; the result
is kept only as the per-output-row derivation counts needed to render ``DISTINCT`` /
``COUNT`` deltas.

Self-joins: an update to a relation is applied to each occurrence in atom order, the
delta query of occurrence ``i`` seeing occurrences ``< i`` in their new state and ``> i``
in their old state (``ΔQ = Σ_i Q(A_1', .., A_{i-1}', ΔA_i, A_{i+1}, .., A_k)``).

The query is a :class:`bench.baseline_scp.CQ` (hand-written per benchmark query; no SQL
compiler involved). ``end_epoch`` returns the consolidated delta of the rendered result
as ``row -> mult`` (for ``count`` a retraction of the old ``(group..., count)`` row and an
insertion of the new one), the same contract as :class:`bench.baseline_scp.SCP`.

Example:
    >>> from bench.baseline_scp import CQ, Atom
    >>> cq = CQ((Atom("G", ("a", "b")), Atom("G", ("b", "c"))), ("a", "c"))
    >>> ivm = DeltaIVM(cq)
    >>> ivm.apply(Update("+", "G", (1, 2))); ivm.apply(Update("+", "G", (2, 3)))
    >>> ivm.end_epoch()
    {(1, 3): 1}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from bench.baseline_scp import CQ, Bag, Row, _atom_check, _distinct, render, render_delta
from core.records import Update

Index = dict[Any, dict[Row, int]]


def _getter(pos: list[int]) -> Callable[[Row], Any]:
    """Key of a tuple: a bare value for one position, a tuple for several, () for none."""
    if not pos:
        return lambda _r: ()
    return itemgetter(*pos)


def _sub(pos: list[int]) -> Callable[[Row], Row]:
    """Sub-tuple (always a tuple)."""
    if not pos:
        return lambda _r: ()
    if len(pos) == 1:
        p = pos[0]
        return lambda r: (r[p],)
    return itemgetter(*pos)


@dataclass
class _Step:
    """Join the bindings with atom ``j``: probe ``index`` with ``key(env)``, append
    ``ext(row)`` (the atom's unbound variables) to the bindings."""

    index: Index
    key: Callable[[Row], Any]
    ext: Callable[[Row], Row]


@dataclass
class _Occ:
    j: int
    check: Callable[[Row], bool] | None
    start: Callable[[Row], Row]  # atom tuple -> initial bindings (its distinct vars)
    steps: list[_Step]
    out: Callable[[Row], Row]
    indexes: list[tuple[Index, Callable[[Row], Any]]]  # this atom's indexes, key getters


class DeltaIVM:
    """First-order IVM by delta queries (see the module docstring)."""

    def __init__(self, cq: CQ) -> None:
        self.cq = cq
        atoms = cq.atoms
        k = len(atoms)
        avars = [_distinct(a.vars) for a in atoms]
        # index[(j, bound var tuple)] -> Index over atom j's tuples keyed by those vars
        indexes: dict[tuple[int, tuple[str, ...]], Index] = {}
        plans: list[tuple[list[str], list[_Step]]] = []
        pending: list[list[tuple[int, tuple[str, ...], list[str]]]] = []
        for i in range(k):
            bound = list(avars[i])
            order: list[tuple[int, tuple[str, ...], list[str]]] = []
            left = [j for j in range(k) if j != i]
            while left:
                nxt = next((j for j in left if set(avars[j]) & set(bound)), left[0])
                left.remove(nxt)
                key_vars = tuple(v for v in avars[nxt] if v in bound)
                new_vars = [v for v in avars[nxt] if v not in bound]
                indexes.setdefault((nxt, key_vars), {})
                order.append((nxt, key_vars, new_vars))
                bound += new_vars
            pending.append(order)
            plans.append((bound, []))
        self._occs: dict[str, list[_Occ]] = {}
        for i, atom in enumerate(atoms):
            bound_final, steps = plans[i]
            env_vars = list(avars[i])
            for j, key_vars, new_vars in pending[i]:
                steps.append(_Step(
                    indexes[j, key_vars],
                    _getter([env_vars.index(v) for v in key_vars]),
                    _sub([avars[j].index(v) for v in new_vars]),
                ))
                env_vars += new_vars
            raw = [atom.vars.index(v) for v in avars[i]]
            mine = [(idx, _getter([avars[i].index(v) for v in kv]))
                    for (j, kv), idx in indexes.items() if j == i]
            self._occs.setdefault(atom.relation, []).append(_Occ(
                i, _atom_check(atom), _sub(raw), steps,
                _sub([env_vars.index(v) for v in cq.output]), mine))
        self._result: Bag = {}  # output row -> derivations
        self._pre: Bag = {}  # output row -> derivations before this epoch
        self._bag = not (cq.count or cq.distinct)  # bag: only the epoch's net changes
        self._acc: Bag = {}
        self.updates = 0

    def apply(self, u: Update) -> None:
        """Apply one update to every occurrence of its relation, in atom order."""
        self.updates += 1
        occs = self._occs.get(u.relation)
        if not occs:
            return
        m = u.signed_mult
        res = self._result
        pre = self._pre
        for occ in occs:
            t = u.row
            if occ.check is not None and not occ.check(t):
                continue
            a = occ.start(t)
            cur: list[tuple[Row, int]] = [(a, m)]
            for st in occ.steps:
                index, key, ext = st.index, st.key, st.ext
                nxt: list[tuple[Row, int]] = []
                for env, c in cur:
                    bucket = index.get(key(env))
                    if bucket:
                        for row, rc in bucket.items():
                            nxt.append((env + ext(row), c * rc))
                cur = nxt
                if not cur:
                    break
            out = occ.out
            if self._bag:
                acc = self._acc
                for env, c in cur:
                    o = out(env)
                    acc[o] = acc.get(o, 0) + c
                cur = []
            for env, c in cur:
                o = out(env)
                old = res.get(o, 0)
                if o not in pre:
                    pre[o] = old
                new = old + c
                if new:
                    res[o] = new
                else:
                    del res[o]
            for index, key in occ.indexes:
                kk = key(a)
                bucket = index.get(kk)
                if bucket is None:
                    if m < 0:
                        raise ValueError(f"delete of {t} from {u.relation}: not present")
                    index[kk] = {a: m}
                    continue
                n = bucket.get(a, 0) + m
                if n > 0:
                    bucket[a] = n
                elif n == 0:
                    del bucket[a]
                    if not bucket:
                        del index[kk]
                else:
                    raise ValueError(f"delete of {t} from {u.relation}: not present")

    def end_epoch(self) -> Bag:
        """The consolidated delta of the rendered result since the last call."""
        if self._bag:
            acc, self._acc = self._acc, {}
            return {o: c for o, c in acc.items() if c}
        pre, self._pre = self._pre, {}
        return render_delta(self.cq, pre, self._result)

    def snapshot(self) -> Bag:
        """The current rendered result (not kept for bag queries, which only emit
        deltas)."""
        if self._bag:
            raise ValueError("a bag query keeps no result; sum the deltas instead")
        return render(self.cq, self._result)
