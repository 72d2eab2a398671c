"""IVM-epsilon for the triangle queries with one and two free variables and for the
count with double partitioning (docs/algorithms.md;
P0 and P1 there), over R(A,B), S(B,C), T(C,A) with integer multiplicities:

- :class:`TriangleBinary`: Delta2(a,b) = sum_c R(a,b) S(b,c) T(c,a); R single on A, S
  and T double; seven skew-aware views, two of them enumerated through hop iterators
  (delay O(N^min(eps,1-eps))).
- :class:`TriangleUnary`: Delta1(a) = sum_{b,c} R(a,b) S(b,c) T(c,a); R and T double, S
  single on B; seven skew-aware views, one through a hop iterator (delay
  O(N^(2 min(eps,1-eps)))).
- :class:`TriangleCountDouble`: the count with every relation double partitioned, the
  auxiliary views built from parts heavy on their free variables (space
  O(N^max(1, min(1+eps, 2-2eps))), linear for eps >= 1/2).

Parts come from :class:`operators.heavylight.DoubleRouter` (routing by value class, the
corrected AffectedPart of docs/algorithms.md). Every rule is an exact delta of its view on the
pre-update state (the router writes the part last), so the results are right whatever
the partition; the partition invariants only bound the cost. Changes of the query
result are collected per update (``take_delta``) in time proportional to the rules
plus the size of the change. A self-join applies each base update to the copy of every
occurrence in turn (the product rule, as :mod:`operators.triangle` does).

A major rebalance of the binary and unary queries rebuilds the views by replaying the
strictly repartitioned parts through the same rules: O(|D| N^max(eps,1-eps)),
amortized over the >= N/4 updates before the next one to O(N^max(eps,1-eps)), the
update bound (P0 recomputes them in O(|D|^(3/2)) with a worst-case optimal join). The
count recomputes its three views directly, O(|D|^(1+min(eps,1-eps))).

Example (two triangles through the edge (1, 2) of R):
    >>> from operators.state import DictState
    >>> q = TriangleBinary(DictState(), 0.5)
    >>> q.update(0, (1, 2), 1)
    >>> for c in (3, 4):
    ...     q.update(1, (2, c), 1); q.update(2, (c, 1), 1)
    >>> q.take_delta(), q.full()
    ({(1, 2): 2}, {(1, 2): 2})
    >>> u = TriangleUnary(DictState(), 0.5)
    >>> for i, t in [(0, (1, 2)), (1, (2, 3)), (2, (3, 1))]:
    ...     u.update(i, t, 2)
    >>> u.full(), TriangleCountDouble(DictState(), 0.5).count
    ({1: 8}, 0)
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from operators.heavylight import DoubleRouter, KeyedBag, PartSpec
from operators.hop import HopUnion, SetIter, Union, drain
from operators.state import State
from operators.state import add_count as _add
from operators.state import add_nested_count as _add_nested

NAMES = ("R", "S", "T")
H_, L_ = ("HH", "HL"), ("LH", "LL")
"""Double-partition parts whose *first* partition column is heavy / light."""

Parts = dict[str, KeyedBag]


def _get(parts: Parts, labels: tuple[str, ...], t: tuple[Any, Any]) -> int:
    """Multiplicity of ``t`` in the union of some parts."""
    return sum(parts[p].rows.get(t, 0) for p in labels)


def _whole(parts: Parts, t: tuple[Any, Any]) -> int:
    return sum(bag.rows.get(t, 0) for bag in parts.values())


class _PartitionedTriangle:
    """Shared: the router over R, S, T with per-relation partition columns, the
    collected result changes, and the rebuild by replay after a major rebalance."""

    KEYS: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] = ((0,), (0,), (0,))

    def __init__(self, state: State, eps: float, name: str) -> None:
        self.state = state
        self.eps = eps
        self.acc: dict[Any, int] = {}
        self.router = DoubleRouter(
            state,
            [PartSpec(n, k) for n, k in zip(NAMES, self.KEYS)],
            eps,
            name=f"{name}.hl",
            apply=self._on_apply,
            rebuild=self._rebuild,
        )
        self.p: list[Parts] = [self.router.parts[n] for n in NAMES]

    def update(self, i: int, t: tuple[Any, Any], m: int) -> None:
        """A base update of relation ``i`` (0 = R, 1 = S, 2 = T): ``m`` copies of ``t``
        (negative: delete)."""
        self.router.update(NAMES[i], t, m)

    def whole(self, i: int, t: tuple[Any, Any]) -> int:
        """Multiplicity of ``t`` in the whole relation ``i``."""
        return _whole(self.p[i], t)

    def take_delta(self) -> dict[Any, int]:
        """Result changes since the last call (zero entries possible)."""
        acc = self.acc
        self.acc = {}
        return acc

    def _emit(self, key: Any, v: int) -> None:
        self.acc[key] = self.acc.get(key, 0) + v

    def _bump(self, view: MutableMapping[Any, int], key: Any, v: int) -> None:
        """A materialized skew-aware view changes, and with it the result."""
        if v:
            _add(view, key, v)
            self.acc[key] = self.acc.get(key, 0) + v

    def _on_apply(self, rel: str, label: str, t: tuple[Any, ...], m: int) -> None:
        self.rules(NAMES.index(rel), label, t[0], t[1], m)

    def rules(self, i: int, label: str, x: Any, y: Any, m: int) -> None:
        raise NotImplementedError

    def views(self) -> list[MutableMapping[Any, Any]]:
        raise NotImplementedError

    def _rebuild(self) -> None:
        """Recompute every view from the (strictly repartitioned) parts by replaying
        them through the rules; the result does not change, so no change is kept."""
        saved, self.acc = self.acc, {}
        for v in self.views():
            v.clear()
        rows = [
            (i, label, t, m)
            for i in range(3)
            for label, bag in self.p[i].items()
            for t, m in bag.rows.items()
        ]
        for parts in self.p:
            for bag in parts.values():
                bag.clear()
        for i, label, t, m in rows:
            self.rules(i, label, t[0], t[1], m)
            self.p[i][label].add(t, m)
        self.acc = saved

    def enumerate(self) -> Iterator[tuple[Any, int]]:
        raise NotImplementedError

    def full(self) -> dict[Any, int]:
        """The whole result, enumerated from the views (each key once)."""
        return dict(self.enumerate())


class TriangleBinary(_PartitionedTriangle):
    """Delta2(a,b) (docs/algorithms.md, P0 section 5). Views, keyed by (a,b) unless said:

    - ``hhh`` R^H S^{H-} T^{H-}, ``lll`` R^L S^{L-} T^{L-}, ``hll`` R^H S^LL T,
      ``lhh`` R^L S T^HH (materialized);
    - tree H(LH)-: ``v_rs`` (a,c) -> {b: R^H(a,b) S^LH(b,c)} and ``v_rs_ab`` (a,b) -> {c},
      ``hat_rs`` (a,c) -> sum_b, ``root1`` c -> {a: hat_rs(a,c) T(c,a)} (hop buckets);
    - tree -HL: ``v_st`` (b,a) -> sum_c S^{H-}(b,c) T^{L-}(c,a), ``root_st`` (a,b) ->
      R(a,b) v_st(b,a) (materialized root);
    - tree L-(HL): ``v_tr`` (c,b) -> {a: T^HL(c,a) R^L(a,b)} and ``v_tr_ab`` (a,b) -> {c},
      ``hat_tr`` (c,b) -> sum_a, ``root3`` c -> {b: S(b,c) hat_tr(c,b)} (hop buckets).
    """

    KEYS = ((0,), (0, 1), (0, 1))

    def __init__(self, state: State, eps: float, name: str = "tri2") -> None:
        def m(x: str) -> MutableMapping[Any, Any]:
            return state.map(f"{name}.{x}")

        self.hhh, self.lll, self.hll, self.lhh = m("HHH"), m("LLL"), m("H(LL)-"), m("L-(HH)")
        self.v_rs, self.v_rs_ab, self.hat_rs, self.root1 = (
            m("V_RS"), m("V_RS.ab"), m("V_RS.hat"), m("V_H(LH)-"))
        self.v_st, self.root_st = m("V_ST"), m("V_-HL")
        self.v_tr, self.v_tr_ab, self.hat_tr, self.root3 = (
            m("V_TR"), m("V_TR.ab"), m("V_TR.hat"), m("V_L-(HL)"))
        super().__init__(state, eps, name)

    def views(self) -> list[MutableMapping[Any, Any]]:
        return [self.hhh, self.lll, self.hll, self.lhh, self.v_rs, self.v_rs_ab,
                self.hat_rs, self.root1, self.v_st, self.root_st, self.v_tr,
                self.v_tr_ab, self.hat_tr, self.root3]

    # The three trees' leaf updates (one place each, shared by two relations' rules).
    def _tree1(self, a: Any, b: Any, c: Any, v: int) -> None:
        """V_RS(a,b,c) += v, through to the root and the result (m2)."""
        _add_nested(self.v_rs, (a, c), b, v)
        _add_nested(self.v_rs_ab, (a, b), c, v)
        _add(self.hat_rs, (a, c), v)
        tw = _whole(self.p[2], (c, a))
        if tw:
            _add_nested(self.root1, c, a, v * tw)
            self._emit((a, b), v * tw)

    def _tree3(self, a: Any, b: Any, c: Any, v: int) -> None:
        """V_TR(c,a,b) += v, through to the root and the result (m3)."""
        _add_nested(self.v_tr, (c, b), a, v)
        _add_nested(self.v_tr_ab, (a, b), c, v)
        _add(self.hat_tr, (c, b), v)
        sw = _whole(self.p[1], (b, c))
        if sw:
            _add_nested(self.root3, c, b, v * sw)
            self._emit((a, b), v * sw)

    def rules(self, i: int, label: str, x: Any, y: Any, m: int) -> None:
        R, S, T = self.p
        if i == 0:
            self._rules_r(R, S, T, label, x, y, m)
        elif i == 1:
            self._rules_s(R, S, T, label, x, y, m)
        else:
            self._rules_t(R, S, T, label, x, y, m)

    def _rules_r(self, R: Parts, S: Parts, T: Parts, r: str, a: Any, b: Any, m: int) -> None:
        if r == "H":
            d = 0  # HHH: iterate T^{H-} by A (<= 2N^(1-eps) C-values)
            for p in H_:
                for (c, _), tm in T[p].match(1, a).items():
                    d += _get(S, H_, (b, c)) * tm
            self._bump(self.hhh, (a, b), m * d)
            d = 0  # H(LL)-: iterate S^LL by B (light: < 3/2 N^eps)
            for (_, c), sm in S["LL"].match(0, b).items():
                d += sm * _whole(T, (c, a))
            self._bump(self.hll, (a, b), m * d)
            # H(LH)-: S^LL light on B and heavy on C, O(N^min(eps,1-eps)) values.
            for (_, c), sm in list(S["LH"].match(0, b).items()):
                self._tree1(a, b, c, m * sm)
        else:
            d = 0  # LLL: iterate S^{L-} by B
            for p in L_:
                for (_, c), sm in S[p].match(0, b).items():
                    d += sm * _get(T, L_, (c, a))
            self._bump(self.lll, (a, b), m * d)
            d = 0  # L-(HH): iterate T^HH by A (heavy on A: <= 2N^(1-eps))
            for (c, _), tm in T["HH"].match(1, a).items():
                d += _whole(S, (b, c)) * tm
            self._bump(self.lhh, (a, b), m * d)
            # L-(HL): T^HL light on A and heavy on C, O(N^min(eps,1-eps)) values.
            for (c, _), tm in list(T["HL"].match(1, a).items()):
                self._tree3(a, b, c, tm * m)
        vst = self.v_st.get((b, a))
        if vst:
            self._bump(self.root_st, (a, b), m * vst)

    def _rules_s(self, R: Parts, S: Parts, T: Parts, s: str, b: Any, c: Any, m: int) -> None:
        if s[0] == "H":
            for (a, _), rm in R["H"].match(1, b).items():
                tm = _get(T, H_, (c, a))
                if tm:
                    self._bump(self.hhh, (a, b), rm * m * tm)
            for p in L_:
                for (_, a), tm in T[p].match(0, c).items():
                    _add(self.v_st, (b, a), m * tm)
                    rw = _whole(R, (a, b))
                    if rw:
                        self._bump(self.root_st, (a, b), rw * m * tm)
        else:
            for p in L_:
                for (_, a), tm in T[p].match(0, c).items():
                    rl = R["L"].rows.get((a, b), 0)
                    if rl:
                        self._bump(self.lll, (a, b), rl * m * tm)
            if s == "LL":
                for (a, _), rm in R["H"].match(1, b).items():
                    tw = _whole(T, (c, a))
                    if tw:
                        self._bump(self.hll, (a, b), rm * m * tw)
            else:
                for (a, _), rm in list(R["H"].match(1, b).items()):
                    self._tree1(a, b, c, rm * m)
        for (_, a), tm in T["HH"].match(0, c).items():
            rl = R["L"].rows.get((a, b), 0)
            if rl:
                self._bump(self.lhh, (a, b), rl * m * tm)
        h = self.hat_tr.get((c, b))
        if h:  # root3(b,c) += m * hat_tr(c,b); the result at (a,b) by V_TR(c,a,b) m
            _add_nested(self.root3, c, b, m * h)
            for a, v in self.v_tr[(c, b)].items():
                self._emit((a, b), m * v)

    def _rules_t(self, R: Parts, S: Parts, T: Parts, t: str, c: Any, a: Any, m: int) -> None:
        if t[0] == "H":
            for p in H_:
                for (b, _), sm in S[p].match(1, c).items():
                    rh = R["H"].rows.get((a, b), 0)
                    if rh:
                        self._bump(self.hhh, (a, b), rh * sm * m)
        else:
            for (_, b), rm in R["L"].match(0, a).items():
                sm = _get(S, L_, (b, c))
                if sm:
                    self._bump(self.lll, (a, b), rm * sm * m)
            for p in H_:
                for (b, _), sm in S[p].match(1, c).items():
                    _add(self.v_st, (b, a), sm * m)
                    rw = _whole(R, (a, b))
                    if rw:
                        self._bump(self.root_st, (a, b), rw * sm * m)
        for (b, _), sm in S["LL"].match(1, c).items():
            rh = R["H"].rows.get((a, b), 0)
            if rh:
                self._bump(self.hll, (a, b), rh * sm * m)
        h = self.hat_rs.get((a, c))
        if h:  # root1(a,c) += hat_rs(a,c) m; the result at (a,b) by V_RS(a,b,c) m
            _add_nested(self.root1, c, a, h * m)
            for b, v in self.v_rs[(a, c)].items():
                self._emit((a, b), v * m)
        if t == "HH":
            for (_, b), rm in R["L"].match(0, a).items():
                sw = _whole(S, (b, c))
                if sw:
                    self._bump(self.lhh, (a, b), rm * sw * m)
        elif t == "HL":
            for (_, b), rm in list(R["L"].match(0, a).items()):
                self._tree3(a, b, c, m * rm)

    # -- enumeration (P0 Fig. 13) -------------------------------------------------
    def m2(self, ab: tuple[Any, Any]) -> int:
        """sum_c V_RS(a,b,c) T(c,a): at most min(3/2 N^eps, 2N^(1-eps)) values of c."""
        T = self.p[2]
        return sum(v * _whole(T, (c, ab[0])) for c, v in self.v_rs_ab.get(ab, {}).items())

    def m3(self, ab: tuple[Any, Any]) -> int:
        """sum_c V_TR(c,a,b) S(b,c)."""
        S = self.p[1]
        return sum(v * _whole(S, (ab[1], c)) for c, v in self.v_tr_ab.get(ab, {}).items())

    def m1(self, ab: tuple[Any, Any]) -> int:
        return sum(v.get(ab, 0) for v in (self.hhh, self.lll, self.hll, self.lhh, self.root_st))

    def enumerate(self) -> Iterator[tuple[tuple[Any, Any], int]]:
        """EnumerateBinary: UnionNext over the five materialized views and two unions
        of buckets (one per c of each hop tree) through hop iterators, whose
        CandidateBuckets(a,b) are the c's of V_RS(a,b,.) (V_TR(.,a,b))."""
        root1, v_rs, root3, v_tr = self.root1, self.v_rs, self.root3, self.v_tr

        def bucket1(c: Any) -> Any:
            return lambda: [(a, b) for a in root1[c] for b in v_rs[(a, c)]]

        def bucket3(c: Any) -> Any:
            return lambda: [(a, b) for b in root3[c] for a in v_tr[(c, b)]]

        hop1 = HopUnion({c: bucket1(c) for c in root1},
                        lambda t: list(self.v_rs_ab.get(t, ())), lambda t: self.m2(t) != 0)
        hop3 = HopUnion({c: bucket3(c) for c in root3},
                        lambda t: list(self.v_tr_ab.get(t, ())), lambda t: self.m3(t) != 0)
        it = Union([SetIter(v) for v in (self.hhh, self.lll, self.hll, self.lhh,
                                          self.root_st)] + [hop1, hop3])
        for ab in drain(it):
            yield ab, self.m1(ab) + self.m2(ab) + self.m3(ab)


class TriangleUnary(_PartitionedTriangle):
    """Delta1(a) (docs/algorithms.md, P0 section 6). Views keyed by a unless said:

    - ``hhh`` R^{H-} S^H T^{H-}, ``lll`` R^{L-} S^L T^{L-}, ``llh`` R^LL S T^{H-},
      ``lhhh`` R^LH S T^HH (materialized);
    - tree HL-: ``v_rs`` (a,c) -> sum_b R^{H-}(a,b) S^L(b,c), root ``root_rs`` a ->
      sum_c v_rs(a,c) T(c,a);
    - tree -HL: ``v_st`` (b,a) -> sum_c S^H(b,c) T^{L-}(c,a), root ``root_st`` a ->
      sum_b R(a,b) v_st(b,a);
    - tree (LH)-(HL): ``v_tr`` (c,b) -> {a: T^HL(c,a) R^LH(a,b)} and ``v_tr_a`` a ->
      {(b,c)}, ``hat_tr`` (c,b) -> sum_a, ``root3`` (b,c) -> S(b,c) hat_tr(c,b) (hop
      buckets, one per (b,c)).
    """

    KEYS = ((0, 1), (0,), (0, 1))

    def __init__(self, state: State, eps: float, name: str = "tri1") -> None:
        def m(x: str) -> MutableMapping[Any, Any]:
            return state.map(f"{name}.{x}")

        self.hhh, self.lll, self.llh, self.lhhh = (
            m("HHH"), m("LLL"), m("(LL)-H"), m("(LH)-(HH)"))
        self.v_rs, self.root_rs = m("V_RS"), m("V_HL-")
        self.v_st, self.root_st = m("V_ST"), m("V_-HL")
        self.v_tr, self.v_tr_a, self.hat_tr, self.root3 = (
            m("V_TR"), m("V_TR.a"), m("V_TR.hat"), m("V_(LH)-(HL)"))
        super().__init__(state, eps, name)

    def views(self) -> list[MutableMapping[Any, Any]]:
        return [self.hhh, self.lll, self.llh, self.lhhh, self.v_rs, self.root_rs,
                self.v_st, self.root_st, self.v_tr, self.v_tr_a, self.hat_tr, self.root3]

    def _tree3(self, a: Any, b: Any, c: Any, v: int) -> None:
        """V_TR(c,a,b) += v, through to the root and the result (m2)."""
        _add_nested(self.v_tr, (c, b), a, v)
        _add_nested(self.v_tr_a, a, (b, c), v)
        _add(self.hat_tr, (c, b), v)
        sw = _whole(self.p[1], (b, c))
        if sw:
            _add(self.root3, (b, c), v * sw)
            self._emit(a, v * sw)

    def rules(self, i: int, label: str, x: Any, y: Any, m: int) -> None:
        R, S, T = self.p
        if i == 0:
            self._rules_r(R, S, T, label, x, y, m)
        elif i == 1:
            self._rules_s(R, S, T, label, x, y, m)
        else:
            self._rules_t(R, S, T, label, x, y, m)

    def _rules_r(self, R: Parts, S: Parts, T: Parts, r: str, a: Any, b: Any, m: int) -> None:
        if r[0] == "H":
            d = 0  # HHH: iterate T^{H-} by A
            for p in H_:
                for (c, _), tm in T[p].match(1, a).items():
                    d += S["H"].rows.get((b, c), 0) * tm
            self._bump(self.hhh, a, m * d)
            for (_, c), sm in S["L"].match(0, b).items():  # HL-: S^L by B
                _add(self.v_rs, (a, c), m * sm)
                tw = _whole(T, (c, a))
                if tw:
                    self._bump(self.root_rs, a, m * sm * tw)
        else:
            d = 0  # LLL: iterate S^L by B
            for (_, c), sm in S["L"].match(0, b).items():
                d += sm * _get(T, L_, (c, a))
            self._bump(self.lll, a, m * d)
            if r == "LL":
                d = 0  # (LL)-H: iterate T^{H-} by A
                for p in H_:
                    for (c, _), tm in T[p].match(1, a).items():
                        d += _whole(S, (b, c)) * tm
                self._bump(self.llh, a, m * d)
            else:
                d = 0  # (LH)-(HH): iterate T^HH by A
                for (c, _), tm in T["HH"].match(1, a).items():
                    d += _whole(S, (b, c)) * tm
                self._bump(self.lhhh, a, m * d)
                # (LH)-(HL): T^HL light on A, heavy on C: O(N^min(eps,1-eps)).
                for (c, _), tm in list(T["HL"].match(1, a).items()):
                    self._tree3(a, b, c, tm * m)
        vst = self.v_st.get((b, a))
        if vst:
            self._bump(self.root_st, a, m * vst)

    def _rules_s(self, R: Parts, S: Parts, T: Parts, s: str, b: Any, c: Any, m: int) -> None:
        if s == "H":
            for p in H_:
                for (a, _), rm in R[p].match(1, b).items():
                    tm = _get(T, H_, (c, a))
                    if tm:
                        self._bump(self.hhh, a, rm * m * tm)
            for p in L_:
                for (_, a), tm in T[p].match(0, c).items():
                    _add(self.v_st, (b, a), m * tm)
                    rw = _whole(R, (a, b))
                    if rw:
                        self._bump(self.root_st, a, rw * m * tm)
        else:
            for p in L_:
                for (_, a), tm in T[p].match(0, c).items():
                    rl = _get(R, L_, (a, b))
                    if rl:
                        self._bump(self.lll, a, rl * m * tm)
            for p in H_:
                for (a, _), rm in R[p].match(1, b).items():
                    _add(self.v_rs, (a, c), rm * m)
                    tw = _whole(T, (c, a))
                    if tw:
                        self._bump(self.root_rs, a, rm * m * tw)
        for (a, _), rm in R["LL"].match(1, b).items():  # light on B: < 3/2 N^eps
            tm = _get(T, H_, (c, a))
            if tm:
                self._bump(self.llh, a, rm * m * tm)
        for (_, a), tm in T["HH"].match(0, c).items():  # heavy on A: <= 2N^(1-eps)
            rl = R["LH"].rows.get((a, b), 0)
            if rl:
                self._bump(self.lhhh, a, rl * m * tm)
        h = self.hat_tr.get((c, b))
        if h:
            _add(self.root3, (b, c), m * h)
            for a, v in self.v_tr[(c, b)].items():
                self._emit(a, m * v)

    def _rules_t(self, R: Parts, S: Parts, T: Parts, t: str, c: Any, a: Any, m: int) -> None:
        if t[0] == "H":
            for (b, _), sm in S["H"].match(1, c).items():
                rh = _get(R, H_, (a, b))
                if rh:
                    self._bump(self.hhh, a, rh * sm * m)
            for (_, b), rm in R["LL"].match(0, a).items():
                sw = _whole(S, (b, c))
                if sw:
                    self._bump(self.llh, a, rm * sw * m)
        else:
            for p in L_:
                for (_, b), rm in R[p].match(0, a).items():
                    sl = S["L"].rows.get((b, c), 0)
                    if sl:
                        self._bump(self.lll, a, rm * sl * m)
            for (b, _), sm in S["H"].match(1, c).items():
                _add(self.v_st, (b, a), sm * m)
                rw = _whole(R, (a, b))
                if rw:
                    self._bump(self.root_st, a, rw * sm * m)
        if t == "HH":
            for (_, b), rm in R["LH"].match(0, a).items():
                sw = _whole(S, (b, c))
                if sw:
                    self._bump(self.lhhh, a, rm * sw * m)
        elif t == "HL":
            for (_, b), rm in list(R["LH"].match(0, a).items()):
                self._tree3(a, b, c, m * rm)
        vrs = self.v_rs.get((a, c))
        if vrs:
            self._bump(self.root_rs, a, vrs * m)

    # -- enumeration (P0 Fig. 15) -------------------------------------------------
    def m2(self, a: Any) -> int:
        """sum_{b,c} V_TR(c,a,b) S(b,c): fewer than (9/4) N^(2 eps) and at most
        4 N^(2-2eps) pairs (A is light in R^LH and in T^HL)."""
        S = self.p[1]
        return sum(v * _whole(S, bc) for bc, v in self.v_tr_a.get(a, {}).items())

    def m1(self, a: Any) -> int:
        return sum(v.get(a, 0) for v in (self.hhh, self.lll, self.llh, self.lhhh,
                                         self.root_rs, self.root_st))

    def enumerate(self) -> Iterator[tuple[Any, int]]:
        """EnumerateUnary: UnionNext over the six materialized views and the union of
        the buckets {a : V_TR(c,a,b) != 0}, one per (b,c) of the root, through hop
        iterators with CandidateBuckets(a) = the (b,c) of V_TR(.,a,.)."""
        v_tr = self.v_tr

        def bucket(bc: tuple[Any, Any]) -> Any:
            return lambda: list(v_tr[(bc[1], bc[0])])

        hop = HopUnion({bc: bucket(bc) for bc in self.root3},
                       lambda a: list(self.v_tr_a.get(a, ())), lambda a: self.m2(a) != 0)
        it = Union([SetIter(v) for v in (self.hhh, self.lll, self.llh, self.lhhh,
                                          self.root_rs, self.root_st)] + [hop])
        for a in drain(it):
            yield a, self.m1(a) + self.m2(a)


class TriangleCountDouble(_PartitionedTriangle):
    """The count with double partitioning (docs/algorithms.md, P0's disjoint four-way
    split, corrected routing). ``views[i]`` (x,z) = sum_y rel_i^HL(x,y) rel_{i+1}^LH(y,z)
    (V_RS, V_ST, V_TR); rules in the local coordinates of rotation ``i`` as in
    :class:`operators.triangle.TriangleCount`."""

    KEYS = ((0, 1), (0, 1), (0, 1))

    def __init__(self, state: State, eps: float, name: str = "tri0d") -> None:
        self.vs: list[MutableMapping[tuple[Any, Any], int]] = [
            state.map(f"{name}.V_{NAMES[i]}{NAMES[(i + 1) % 3]}") for i in range(3)
        ]
        self.meta: MutableMapping[str, int] = state.map(f"{name}.count")
        self.meta.setdefault("count", 0)
        self.meta.setdefault("delta", 0)
        super().__init__(state, eps, name)

    @property
    def count(self) -> int:
        return self.meta["count"]

    def take_delta(self) -> dict[Any, int]:
        d = self.meta["delta"]
        self.meta["delta"] = 0
        return {(): d} if d else {}

    def views(self) -> list[MutableMapping[Any, Any]]:
        return list(self.vs)

    def _rebuild(self) -> None:
        """Major rebalance: recompute the three views from the strictly repartitioned
        parts, O(N^(1+min(eps,1-eps))); the count does not change (P1 section 4)."""
        for i in range(3):
            v = self.vs[i]
            v.clear()
            nxt = self.p[(i + 1) % 3]["LH"]
            for y, rows in self.p[i]["HL"].index[1].items():
                s_rows = nxt.match(0, y)
                if not s_rows:
                    continue
                for (x, _), rm in rows.items():
                    for (_, z), sm in s_rows.items():
                        _add(v, (x, z), rm * sm)

    def view_entries(self) -> int:
        """Entries of the auxiliary views (the space the double partition saves)."""
        return sum(len(v) for v in self.vs)

    def rules(self, i: int, label: str, x: Any, y: Any, m: int) -> None:
        j, k = (i + 1) % 3, (i + 2) % 3
        S, T = self.p[j], self.p[k]
        s_hh, s_hl, s_lh, s_ll = (S[p].rows for p in ("HH", "HL", "LH", "LL"))
        t_hh, t_hl, t_lh, t_ll = (T[p].rows for p in ("HH", "HL", "LH", "LL"))
        s_lh_y, s_ll_y = S["LH"].match(0, y), S["LL"].match(0, y)
        t_hh_x, t_hl_x = T["HH"].match(1, x), T["HL"].match(1, x)
        d = 0
        # S^{H-} T^{H-}: iterate T^{H-} by x (heavy on C: <= 2N^(1-eps)).
        for bucket in (t_hh_x, t_hl_x):
            for (z, _), tm in bucket.items():
                sm = s_hh.get((y, z), 0) + s_hl.get((y, z), 0)
                if sm:
                    d += sm * tm
        # S^{L-} T^{H-}: the smaller index list, O(N^min(eps,1-eps)).
        if len(s_lh_y) + len(s_ll_y) <= len(t_hh_x) + len(t_hl_x):
            for bucket in (s_lh_y, s_ll_y):
                for (_, z), sm in bucket.items():
                    tm = t_hh.get((z, x), 0) + t_hl.get((z, x), 0)
                    if tm:
                        d += sm * tm
        else:
            for bucket in (t_hh_x, t_hl_x):
                for (z, _), tm in bucket.items():
                    sm = s_lh.get((y, z), 0) + s_ll.get((y, z), 0)
                    if sm:
                        d += sm * tm
        # S^{L-} T^{L-}: iterate S^{L-} by y (light on B: < 3/2 N^eps).
        for bucket in (s_lh_y, s_ll_y):
            for (_, z), sm in bucket.items():
                tm = t_lh.get((z, x), 0) + t_ll.get((z, x), 0)
                if tm:
                    d += sm * tm
        # S^HH T^{L-}: S^HH by y, heavy on C.
        for (_, z), sm in S["HH"].match(0, y).items():
            tm = t_lh.get((z, x), 0) + t_ll.get((z, x), 0)
            if tm:
                d += sm * tm
        # S^HL T^LL: T^LL by x, light on A.
        for (z, _), tm in T["LL"].match(1, x).items():
            sm = s_hl.get((y, z), 0)
            if sm:
                d += sm * tm
        # S^HL T^LH: the view.
        d += self.vs[j].get((y, x), 0)
        if d:
            self.meta["count"] += m * d
            self.meta["delta"] += m * d
        if label == "HL":  # V_i(x,z) += m S^LH(y,z): light on B, heavy on C
            vi = self.vs[i]
            for (_, z), sm in s_lh_y.items():
                _add(vi, (x, z), m * sm)
        elif label == "LH":  # V_{i+2}(z,y) += T^HL(z,x) m: heavy on C, light on A
            vk = self.vs[k]
            for (z, _), tm in t_hl_x.items():
                _add(vk, (z, y), tm * m)

    def enumerate(self) -> Iterator[tuple[Any, int]]:
        if self.count:
            yield (), self.count

    def recount(self) -> int:
        """The count recomputed from the parts (tests)."""
        R, S, T = self.p
        total = 0
        for bag in R.values():
            for (a, b), rm in bag.rows.items():
                for sb in S.values():
                    for (_, c), sm in sb.match(0, b).items():
                        total += rm * sm * _whole(T, (c, a))
        return total
