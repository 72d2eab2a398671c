"""Standard change propagation (SCP): a plain first-order IVM baseline, plus a
brute-force evaluator used as a test oracle.

A query is a tiny conjunctive-query description (:class:`CQ`) written by hand per
benchmark query (no SQL compiler involved). SCP evaluates it with a left-deep plan in
atom order::

    V0 = A1,  V1 = V0 ⋈ A2,  V2 = V1 ⋈ A3,  ...,  result = π_out(V_{k-1})

Every store is a bag kept as a hash index ``key -> {row: count}`` on the join key it is
probed with: ``V_i`` (i <= k-2) on its join variables with ``A_{i+2}``, atom ``A_j``
(j >= 2) on its join variables with ``V_{j-2}``. Views hold *all* variables of their
atoms (no projection before the end) unless ``early_projection=True``. ``V_{k-1}`` is
not stored: its delta is projected into the result bag ``out_row -> derivations``.

Delta rules: an update of atom ``A_j`` gives ``ΔV_{j-1} = V_{j-2} ⋈ ΔA_j`` (for ``A_1``:
``ΔV_0 = ΔA_1``), then ``ΔV_i = ΔV_{i-1} ⋈ A_{i+1}`` for the later views by index probes.
Self-joins: an update to a relation is applied to each of its occurrences in turn,
in atom order, each against the state left by the previous one (the standard way).

Per epoch the consolidated delta of the *rendered* result is returned: bag rows with
net multiplicity; for ``distinct`` the 0/1 support transitions; for ``count`` a
retraction of the old ``(group..., count)`` row and an insertion of the new one.

Example:
    >>> cq = CQ((Atom("R", ("a", "b")), Atom("S", ("b", "c"))), ("a", "c"))
    >>> scp = SCP(cq)
    >>> scp.apply(Update("+", "R", (1, 2))); scp.apply(Update("+", "S", (2, 3)))
    >>> scp.end_epoch()
    {(1, 3): 1}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from core.records import Update

Row = tuple[Any, ...]
Bag = dict[Row, int]
Index = dict[Any, dict[Row, int]]


@dataclass(frozen=True)
class Atom:
    """One occurrence of ``relation`` in the query, its columns bound to ``vars``
    (a repeated variable means equal columns) and an optional per-atom filter on the
    raw tuple (``label`` documents it)."""

    relation: str
    vars: tuple[str, ...]
    where: Callable[[Row], bool] | None = None
    label: str = ""


@dataclass(frozen=True)
class CQ:
    """A conjunctive query: atoms (join = shared variable names), output variables,
    and the result semantics: bag, ``distinct`` (set) or ``count`` (``GROUP BY`` the
    output variables with ``COUNT(*)`` appended as the last column)."""

    atoms: tuple[Atom, ...]
    output: tuple[str, ...]
    distinct: bool = False
    count: bool = False

    def __post_init__(self) -> None:
        if not self.atoms:
            raise ValueError("a CQ needs at least one atom")
        if self.distinct and self.count:
            raise ValueError("distinct and count are exclusive")
        seen = {v for a in self.atoms for v in a.vars}
        missing = [v for v in self.output if v not in seen]
        if missing:
            raise ValueError(f"output variables {missing} occur in no atom")


def _distinct(vs: Iterable[str]) -> list[str]:
    out: list[str] = []
    for v in vs:
        if v not in out:
            out.append(v)
    return out


def _key_getter(pos: list[int]) -> Callable[[Row], Any]:
    """Key of a row: scalar for one position, tuple for several, ``()`` for none."""
    if not pos:
        return lambda _r: ()
    return itemgetter(*pos)


def _tuple_getter(pos: list[int]) -> Callable[[Row], Row]:
    """Sub-tuple of a row (always a tuple)."""
    if not pos:
        return lambda _r: ()
    if len(pos) == 1:
        p = pos[0]
        return lambda r: (r[p],)
    return itemgetter(*pos)


def _atom_check(atom: Atom) -> Callable[[Row], bool] | None:
    """Filter + repeated-variable equalities + arity, or ``None`` if nothing to check."""
    first: dict[str, int] = {}
    eqs: list[tuple[int, int]] = []
    for i, v in enumerate(atom.vars):
        if v in first:
            eqs.append((first[v], i))
        else:
            first[v] = i
    where = atom.where
    if not eqs and where is None:
        return None

    def check(t: Row) -> bool:
        for i, j in eqs:
            if t[i] != t[j]:
                return False
        return where is None or bool(where(t))

    return check


def _bump(index: Index, key: Any, row: Row, m: int) -> None:
    """Add ``m`` to ``row`` under ``key``; drop zero counts and empty buckets."""
    bucket = index.get(key)
    if bucket is None:
        index[key] = {row: m}
        return
    c = bucket.get(row, 0) + m
    if c:
        bucket[row] = c
    else:
        del bucket[row]
        if not bucket:
            del index[key]


@dataclass
class _Occ:
    """An occurrence of a relation: atom position and its precomputed getters."""

    j: int
    check: Callable[[Row], bool] | None
    avars: Callable[[Row], Row]
    key: Callable[[Row], Any]
    ext: Callable[[Row], Row]


class SCP:
    """Standard (first-order) change propagation over a left-deep binary-join plan."""

    def __init__(self, cq: CQ, early_projection: bool = False) -> None:
        self.cq = cq
        atoms = cq.atoms
        k = len(atoms)
        self._k = k
        needed_after: list[set[str]] = []  # vars needed once V_i is formed
        for i in range(k):
            later = {v for a in atoms[i + 1:] for v in a.vars}
            needed_after.append(later | set(cq.output))
        avars = [_distinct(a.vars) for a in atoms]
        layouts: list[list[str]] = []  # variables of V_i, in row order
        self._proj: list[Callable[[Row], Row] | None] = []  # V_i row after concat
        self._vkey: list[Callable[[Row], Any]] = []  # V_i row -> key with A_{i+1}
        occs: dict[str, list[_Occ]] = {}
        for i, atom in enumerate(atoms):
            raw_pos = [atom.vars.index(v) for v in avars[i]]
            get_avars = _tuple_getter(raw_pos) if raw_pos != list(range(len(atom.vars))) \
                else (lambda t: t)
            if i == 0:
                concat = list(avars[0])
                key_pos: list[int] = []
                new_pos = list(range(len(avars[0])))
            else:
                prev = layouts[i - 1]
                join = [v for v in avars[i] if v in prev]
                new = [v for v in avars[i] if v not in prev]
                concat = prev + new
                key_pos = [avars[i].index(v) for v in join]
                new_pos = [avars[i].index(v) for v in new]
            layout = concat
            proj = None
            if early_projection:
                layout = [v for v in concat if v in needed_after[i]]
                if layout != concat:
                    proj = _tuple_getter([concat.index(v) for v in layout])
            layouts.append(layout)
            self._proj.append(proj)
            occs.setdefault(atom.relation, []).append(
                _Occ(i, _atom_check(atom), get_avars, _key_getter(key_pos),
                     _tuple_getter(new_pos)))
        for i in range(k - 1):
            nxt = avars[i + 1]
            self._vkey.append(_key_getter([layouts[i].index(v) for v in nxt
                                           if v in layouts[i]]))
        self._out = _tuple_getter([layouts[k - 1].index(v) for v in cq.output])
        self._occs = occs
        self._views: list[Index] = [{} for _ in range(k - 1)]  # V_0..V_{k-2}
        self._atoms: list[Index] = [{} for _ in range(k)]  # A_j store, j >= 1 used
        self._result: Bag = {}
        self._pre: Bag = {}  # output row -> its count before this epoch
        self.updates = 0

    # -- maintenance -----------------------------------------------------------------

    def apply(self, u: Update) -> None:
        """Apply one update to every occurrence of its relation, in atom order."""
        occs = self._occs.get(u.relation)
        self.updates += 1
        if not occs:
            return
        m = u.signed_mult
        t = u.row
        for occ in occs:
            if occ.check is not None and not occ.check(t):
                continue
            a = occ.avars(t)
            j = occ.j
            if j == 0:
                p0 = self._proj[0]
                self._propagate(0, [(a if p0 is None else p0(a), m)])
                continue
            key = occ.key(a)
            ext = occ.ext(a)
            bucket = self._views[j - 1].get(key)
            store = self._atoms[j]
            old = store.get(key, {}).get(ext, 0)
            if old + m < 0:
                raise ValueError(f"delete of {-m} copies of {t} from {u.relation} "
                                 f"holding {old}")
            _bump(store, key, ext, m)
            if bucket:
                proj = self._proj[j]
                if proj is None:
                    delta = [(row + ext, c * m) for row, c in bucket.items()]
                else:
                    delta = [(proj(row + ext), c * m) for row, c in bucket.items()]
                self._propagate(j, delta)

    def _propagate(self, level: int, delta: list[tuple[Row, int]]) -> None:
        """Push ``ΔV_level`` into ``V_level`` and through the later views."""
        last = self._k - 1
        views = self._views
        while level < last:
            kf = self._vkey[level]
            view = views[level]
            probe = self._atoms[level + 1]
            proj = self._proj[level + 1]
            nxt: list[tuple[Row, int]] = []
            for row, m in delta:
                key = kf(row)
                _bump(view, key, row, m)
                bucket = probe.get(key)
                if bucket:
                    if proj is None:
                        for ext, c in bucket.items():
                            nxt.append((row + ext, m * c))
                    else:
                        for ext, c in bucket.items():
                            nxt.append((proj(row + ext), m * c))
            if not nxt:
                return
            delta = nxt
            level += 1
        res = self._result
        pre = self._pre
        out = self._out
        for row, m in delta:
            o = out(row)
            old = res.get(o, 0)
            if o not in pre:
                pre[o] = old
            new = old + m
            if new:
                res[o] = new
            else:
                del res[o]

    def end_epoch(self) -> Bag:
        """The consolidated delta of the rendered result since the last call."""
        pre, self._pre = self._pre, {}
        return render_delta(self.cq, pre, self._result)

    # -- inspection ------------------------------------------------------------------

    def snapshot(self) -> Bag:
        """The current rendered result (row -> multiplicity)."""
        return render(self.cq, self._result)

    def state_entries(self) -> int:
        """Stored entries: for every index its keys plus its rows, plus the result."""
        total = len(self._result)
        for idx in self._views + self._atoms[1:]:
            total += len(idx) + sum(len(b) for b in idx.values())
        return total


# -- rendering and the brute-force oracle ---------------------------------------------


def render(cq: CQ, bag: Mapping[Row, int]) -> Bag:
    """Derivation counts per output row -> the SQL result (bag / DISTINCT / COUNT)."""
    if cq.count:
        return {o + (c,): 1 for o, c in bag.items() if c}
    if cq.distinct:
        return {o: 1 for o, c in bag.items() if c > 0}
    return {o: c for o, c in bag.items() if c}


def render_delta(cq: CQ, before: Mapping[Row, int], now: Mapping[Row, int]) -> Bag:
    """The change of the rendered result (bag / DISTINCT / COUNT) where the derivation
    counts of the output rows in ``before`` went from those values to ``now``'s."""
    delta: Bag = {}
    for o, was in before.items():
        count = now.get(o, 0)
        if count == was:
            continue
        if cq.count:
            if was:
                delta[o + (was,)] = -1
            if count:
                delta[o + (count,)] = 1
        elif cq.distinct:
            d = (count > 0) - (was > 0)
            if d:
                delta[o] = d
        else:
            delta[o] = count - was
    return delta


def diff(new: Mapping[Row, int], old: Mapping[Row, int]) -> Bag:
    """``new - old`` as signed multisets, zeros dropped."""
    out: Bag = {}
    for r, c in new.items():
        d = c - old.get(r, 0)
        if d:
            out[r] = d
    for r, c in old.items():
        if r not in new and c:
            out[r] = -c
    return out


def evaluate(cq: CQ, db: Mapping[str, Mapping[Row, int]]) -> Bag:
    """Brute-force derivation counts per output row (backtracking join, tiny inputs)."""
    counts: Counter[Row] = Counter()
    atoms = cq.atoms
    checks = [_atom_check(a) for a in atoms]

    def go(i: int, env: dict[str, Any], mult: int) -> None:
        if i == len(atoms):
            counts[tuple(env[v] for v in cq.output)] += mult
            return
        atom = atoms[i]
        for t, c in db.get(atom.relation, {}).items():
            if c <= 0:
                continue
            chk = checks[i]
            if chk is not None and not chk(t):
                continue
            bound: list[str] = []
            ok = True
            for v, x in zip(atom.vars, t):
                if v in env:
                    if env[v] != x:
                        ok = False
                        break
                else:
                    env[v] = x
                    bound.append(v)
            if ok:
                go(i + 1, env, mult * c)
            for v in bound:
                del env[v]

    go(0, {}, 1)
    return {r: c for r, c in counts.items() if c}


def oracle_deltas(cq: CQ, epochs: Iterable[Iterable[Update]]) -> list[Bag]:
    """Per-epoch deltas by recomputing the rendered result after every epoch."""
    db: dict[str, Counter[Row]] = {}
    old: Bag = render(cq, {})
    out: list[Bag] = []
    for epoch in epochs:
        for u in epoch:
            rel = db.setdefault(u.relation, Counter())
            rel[u.row] += u.signed_mult
            if rel[u.row] < 0:
                raise ValueError(f"invalid delete of {u.row} from {u.relation}")
        new = render(cq, evaluate(cq, db))
        out.append(diff(new, old))
        old = new
    return out


# -- the benchmark queries, by hand ---------------------------------------------------


def bench_cq(name: str, threshold: int, tuned: bool = False) -> CQ:
    """The CQ of a benchmark query (see ``bench.workloads.query_sql``).

    By default the left-deep join order is the FROM order, which is what a streaming SQL
    engine without statistics runs (Flink SQL's regular joins, the CROWN paper's
    baseline). ``tuned=True`` picks the order by hand, selective atoms first (what a sane
    optimizer would do): the filtered ``G3`` leads ``hop3_full``; ``V1`` leads ``comb2``.
    """
    if name == "hop3_full":
        t = threshold
        g3 = Atom("G", ("C", "D"), lambda r: r[1] > t, f"G3.dst > {t}")
        g1, g2 = Atom("G", ("A", "B")), Atom("G", ("B", "C"))
        return CQ((g3, g2, g1) if tuned else (g1, g2, g3), ("A", "B", "C", "D"))
    if name == "hop4_project":
        return CQ((Atom("G", ("A", "B")), Atom("G", ("B", "C")), Atom("G", ("C", "D")),
                   Atom("G", ("D", "E"))), ("B", "C", "D"), distinct=True)
    if name == "star_count":
        return CQ((Atom("G", ("A", "B1")), Atom("G", ("A", "B2")), Atom("G", ("A", "B3"))),
                  ("A",), count=True)
    if name == "comb2":
        v1, v2 = Atom("V1", ("A",)), Atom("V2", ("D",))
        g1, g2, g3 = Atom("G", ("A", "B")), Atom("G", ("B", "C")), Atom("G", ("C", "D"))
        atoms = (v1, g1, g2, g3, v2) if tuned else (g1, g2, g3, v1, v2)
        return CQ(atoms, ("A", "B", "C", "D"))
    raise ValueError(f"unknown benchmark query {name!r}")
