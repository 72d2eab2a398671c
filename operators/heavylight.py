"""The heavy/light routers of IVM-epsilon (docs/algorithms.md,
partitions and the router): relations split into parts by the class (heavy or light) of their
values on one partition column (parts ``H`` and ``L``) or on two (parts ``HH``, ``HL``,
``LH``, ``LL``, one letter per partition column in the order given), degree counters
over the whole relation, the class of every value, the threshold base N with
``floor(N/4) <= |D| < N``, minor and major rebalancing. :class:`DoubleRouter` is the
router; :class:`HeavyLightRouter` is its one-column case. :class:`PrefixRouter` routes
the keys of hierarchical view trees.

Routing follows the corrected AffectedPart (docs/algorithms.md, corrections): an update goes to
the part named by the current class of each of its partition values (an unseen value is
light, everything is heavy at eps = 0), never blindly to ``LL``.

The router owns the relation parts (keyed bags with an index per column) and calls
back into the query's operator:

- ``apply(rel, part, t, m)`` before the part is written, so the operator computes its
  deltas against the pre-update state (the relation part is updated last);
- ``rebuild()`` after a major rebalance (strict repartition), so the operator
  recomputes its views from the parts.

A value whose degree leaves the loose band [theta/2, 3 theta/2) moves, with all its
tuples, to the parts with its letter flipped (``H <-> L``; ``HH <-> LH`` and
``HL <-> LL`` for the first of two columns): a minor rebalance, as paired updates
through the same ``apply`` (insert into the new part, then delete from the old one). By
linearity the query result does not change, only the auxiliary views re-route the
tuples. ``|D|`` reaching N or dropping below floor(N/4) triggers a major rebalance: a
strict repartition and the operator's ``rebuild``.

Example (eps = 1/2; value 1 becomes heavy once its degree reaches 3/2 * N^eps):
    >>> from operators.state import DictState
    >>> r = HeavyLightRouter(DictState(), [RelationSpec("R", 2, 0)], 0.5)
    >>> for b in range(6):
    ...     _ = r.update("R", (1, b), 1)
    >>> r.update("R", (2, 0), 1), r.size, r.base
    ('L', 7, 8)
    >>> r.is_heavy("R", 1), r.part("R", "H").get((1, 5)), r.degree("R", 1)
    (True, 1, 6)
    >>> for b in range(5):
    ...     _ = r.update("R", (1, b), -1)
    >>> r.is_heavy("R", 1), r.part("R", "L").get((1, 5)), r.stats["minor"]
    (False, 1, 1)

Example (S(B,C) double partitioned, eps = 1/2):
    >>> r = DoubleRouter(DictState(), [PartSpec("S", (0, 1))], 0.5)
    >>> for c in range(6):
    ...     _ = r.update("S", (1, c), 1)
    >>> r.update("S", (2, 0), 1), r.size, r.base
    ('LL', 7, 8)
    >>> r.update("S", (1, 9), 1), r.is_heavy("S", 1, k=0), len(r.part("S", "HL"))
    ('HL', True, 7)
    >>> r.check_invariants()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

from operators.state import Grouped, State

HEAVY = "H"
LIGHT = "L"

ApplyFn = Callable[[str, str, tuple[Any, ...], int], None]
"""``apply(relation, part, tuple, m)``: the query's update rules for one part update."""


@dataclass(frozen=True)
class RelationSpec:
    """A relation of the router: its name, arity and the position it is partitioned on."""

    name: str
    arity: int
    key: int


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


class KeyedBag:
    """A relation part or a view: tuple -> non-zero multiplicity, with one index per
    column (value -> {tuple: multiplicity}) so that degrees and ``sigma_{X=x}`` are O(1)
    to find. Entries that reach zero are dropped.

    >>> from operators.state import DictState
    >>> k = KeyedBag(DictState(), "R.H", 2)
    >>> k.add((1, 2), 2), k.add((1, 3), 1), k.add((1, 2), -2)
    (2, 1, 0)
    >>> dict(k.match(0, 1)), k.degree(1, 2), len(k)
    ({(1, 3): 1}, 0, 1)
    """

    def __init__(self, state: State, name: str, arity: int) -> None:
        self.name = name
        self.rows: MutableMapping[tuple[Any, ...], int] = state.map(f"{name}.rows")
        self.index: list[MutableMapping[Any, dict[tuple[Any, ...], int]]] = [
            state.map(f"{name}.idx{i}") for i in range(arity)
        ]

    def get(self, t: tuple[Any, ...]) -> int:
        return self.rows.get(t, 0)

    def add(self, t: tuple[Any, ...], m: int) -> int:
        """Add ``m`` copies (negative: remove); returns the new multiplicity."""
        new = self.rows.get(t, 0) + m
        if new:
            self.rows[t] = new
            for pos, idx in enumerate(self.index):
                bucket = idx.get(t[pos])
                if bucket is None:
                    idx[t[pos]] = {t: new}
                else:
                    bucket[t] = new
        else:
            self.rows.pop(t, None)
            for pos, idx in enumerate(self.index):
                bucket = idx.get(t[pos])
                if bucket is not None:
                    bucket.pop(t, None)
                    if not bucket:
                        del idx[t[pos]]
        return new

    def match(self, pos: int, v: Any) -> dict[tuple[Any, ...], int]:
        """``sigma_{pos=v}``: tuple -> multiplicity (do not mutate)."""
        return self.index[pos].get(v) or _EMPTY

    def degree(self, pos: int, v: Any) -> int:
        bucket = self.index[pos].get(v)
        return len(bucket) if bucket else 0

    def items(self) -> Iterator[tuple[tuple[Any, ...], int]]:
        return iter(list(self.rows.items()))

    def clear(self) -> None:
        self.rows.clear()
        for idx in self.index:
            idx.clear()

    def __len__(self) -> int:
        return len(self.rows)


_EMPTY: dict[tuple[Any, ...], int] = {}


def _noop_apply(rel: str, part: str, t: tuple[Any, ...], m: int) -> None:
    return None


def _noop_rebuild() -> None:
    return None


class ThresholdRouter:
    """What every heavy/light router shares: eps, |D| and the threshold base N (kept in
    ``state`` so they survive a state round trip), the view callbacks and the counters.

    Subclasses add the parts, degrees and classes for their partition columns.
    """

    parts: dict[str, dict[str, KeyedBag]]

    def __init__(
        self,
        state: State,
        name: str,
        eps: float,
        apply: ApplyFn | None,
        rebuild: Callable[[], None] | None,
    ) -> None:
        if not 0.0 <= eps <= 1.0:
            msg = f"eps must be between 0 and 1, got {eps}"
            raise ValueError(msg)
        self.eps = float(eps)
        self.meta: MutableMapping[str, int] = state.map(f"{name}.meta")
        self.meta.setdefault("size", 0)
        self.meta.setdefault("base", 1)  # N = 2|D| + 1 on the empty database
        self.apply: ApplyFn = apply or _noop_apply
        self.rebuild: Callable[[], None] = rebuild or _noop_rebuild
        self.stats: dict[str, int] = {"minor": 0, "major": 0, "moved": 0}

    @property
    def size(self) -> int:
        """|D|: distinct tuples over all relations."""
        return self.meta["size"]

    @property
    def base(self) -> int:
        """The threshold base N."""
        return self.meta["base"]

    @property
    def theta(self) -> float:
        return float(self.base) ** self.eps

    def part(self, rel: str, label: str) -> KeyedBag:
        return self.parts[rel][label]

    def rebase(self) -> bool:
        """Keep floor(N/4) <= |D| < N after |D| changed: double N (or set it to
        floor(N/2) - 1) when |D| left that range, then :meth:`major_rebalance`. True if it
        ran (the caller's minor checks are moot then)."""
        meta = self.meta
        size, base = meta["size"], meta["base"]
        if size >= base:
            meta["base"] = 2 * base
        elif size < base // 4:
            meta["base"] = max(1, base // 2 - 1)
        else:
            return False
        self.major_rebalance()
        return True

    def major_rebalance(self) -> None:
        """Strict repartition at the current theta (each router's own)."""
        raise NotImplementedError


class DoubleRouter(ThresholdRouter):
    """Relation parts partitioned on one or two columns each (:class:`PartSpec`), with
    rebalancing.

    ``eps`` in [0, 1] sets the threshold theta = N^eps. eps = 0 puts every tuple in the
    all-heavy part and eps = 1 every tuple in the all-light part (theta = N exceeds every
    degree), which gives back classical first-order IVM.
    """

    numbered_columns = True
    """State maps per partition column are ``{name}.{rel}.degree{k}`` and ``.heavy{k}``
    (:class:`HeavyLightRouter`'s one column: ``.degree`` and ``.heavy``)."""

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

        def column_maps(rel: PartSpec, what: str) -> list[MutableMapping[Any, Any]]:
            tags = range(len(rel.keys)) if self.numbered_columns else ("",)
            return [state.map(f"{name}.{rel.name}.{what}{k}") for k in tags]

        # Per relation and partition column: value -> degree in the whole relation, and
        # the values whose class is heavy (a value absent from the relation has no class).
        self.degrees: dict[str, list[MutableMapping[Any, int]]] = {
            r.name: column_maps(r, "degree") for r in relations
        }
        self.heavy: dict[str, list[MutableMapping[Any, bool]]] = {
            r.name: column_maps(r, "heavy") for r in relations
        }

    # -- reading -------------------------------------------------------------------
    def get(self, rel: str, t: tuple[Any, ...]) -> int:
        """Multiplicity of ``t`` in the whole relation."""
        return sum(bag.rows.get(t, 0) for bag in self.parts[rel].values())

    def degree(self, rel: str, v: Any, k: int = 0) -> int:
        """The degree of value ``v`` on partition column ``k`` (the first by default)."""
        return self.degrees[rel][k].get(v, 0)

    def is_heavy(self, rel: str, v: Any, k: int = 0) -> bool:
        """The class of value ``v`` on partition column ``k`` (the first by default)."""
        return v in self.heavy[rel][k]

    def route(self, rel: str, t: tuple[Any, ...]) -> str:
        """The part an update of ``t`` goes to (AffectedPart): one letter per partition
        column, the current class of the value (unseen values light; all heavy at
        eps = 0)."""
        keys = self.specs[rel].keys
        if self.eps == 0.0:
            return HEAVY * len(keys)
        heavy = self.heavy[rel]
        if len(keys) == 1:
            return HEAVY if t[keys[0]] in heavy[0] else LIGHT
        return "".join(HEAVY if t[pos] in heavy[k] else LIGHT for k, pos in enumerate(keys))

    # -- updating ------------------------------------------------------------------
    def update(self, rel: str, t: tuple[Any, ...], m: int) -> str:
        """Apply one base update (``m`` copies, negative for a delete) and rebalance if
        needed; returns the part label the update went to."""
        spec = self.specs[rel]
        label = self.route(rel, t)
        bag = self.parts[rel][label]
        old = bag.get(t)
        if old + m < 0:
            msg = f"{rel}{t}: delete of {-m} copies, {old} present"
            raise ValueError(msg)
        if self.eps == 0.0:
            for heavy, pos in zip(self.heavy[rel], spec.keys):
                if t[pos] not in heavy:
                    heavy[t[pos]] = True
        self.apply(rel, label, t, m)
        new = bag.add(t, m)
        if old == 0 and new > 0:
            step = 1
        elif old > 0 and new == 0:
            step = -1
        else:
            return label
        self.meta["size"] += step
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


class HeavyLightRouter(DoubleRouter):
    """:class:`DoubleRouter`'s one-column case: per relation a heavy and a light part
    (``H``, ``L``), partitioned on ``spec.key``; its state maps keep the names
    ``{name}.{rel}.degree`` and ``.heavy``."""

    numbered_columns = False

    def __init__(
        self,
        state: State,
        relations: Sequence[RelationSpec],
        eps: float,
        *,
        name: str = "hl",
        apply: ApplyFn | None = None,
        rebuild: Callable[[], None] | None = None,
    ) -> None:
        specs = [PartSpec(r.name, (r.key,), r.arity) for r in relations]
        super().__init__(state, specs, eps, name=name, apply=apply, rebuild=rebuild)


@dataclass(frozen=True)
class PrefixSpec:
    """A partition of hierarchical view trees: the split variable's name, its depth (a
    key is the first ``depth + 1`` values of a path-ordered tuple: anc(X) + X) and the
    atoms below it, whose degrees decide the key's class."""

    name: str
    depth: int
    atoms: tuple[int, ...]


MoveFn = Callable[[PrefixSpec, tuple[Any, ...], bool], None]
"""``move(partition, key, to_heavy)``: re-route a key's contributions (minor rebalance)."""


class PrefixRouter(ThresholdRouter):
    """The heavy/light router of hierarchical view trees (docs/algorithms.md): one partition
    per split variable X, on the key anc(X) + X, over every atom below X. A key is light
    while its largest degree among those atoms stays below 3/2 theta, heavy while it
    stays at or above theta/2 (the loose band), strict at theta after a major rebalance;
    new keys start light (pre-update membership, docs/algorithms.md), except at eps = 0 where
    every key is heavy. |D| and the threshold base N are :class:`ThresholdRouter`'s.

    The router keeps degrees and classes only; the view trees own the tuples and views.
    It calls ``move(partition, key, to_heavy)`` before flipping a key's class on a minor
    rebalance, and ``rebuild()`` after a major one (classes already strict).

    >>> from operators.state import DictState
    >>> r = PrefixRouter(DictState(), [PrefixSpec("B", 0, (0,))], 0.5)
    >>> for a in range(6):
    ...     r.tuple_changed(0, (1, a), 1)
    >>> r.is_heavy("B", (1,)), r.degree("B", (1,)), r.base, r.stats["major"]
    (True, 6, 8, 3)
    """

    def __init__(
        self,
        state: State,
        specs: Sequence[PrefixSpec],
        eps: float,
        *,
        name: str = "hier",
        move: MoveFn | None = None,
        rebuild: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(state, name, eps, None, rebuild)
        self.specs = {s.name: s for s in specs}
        self.move: MoveFn = move or (lambda spec, key, to_heavy: None)
        self.degrees: dict[str, dict[int, MutableMapping[tuple[Any, ...], int]]] = {
            s.name: {i: state.map(f"{name}.deg.{s.name}.{i}") for i in s.atoms} for s in specs
        }
        self.heavy: dict[str, Grouped] = {
            s.name: Grouped(state.map(f"{name}.heavy.{s.name}"), s.depth == 0) for s in specs
        }
        self._of_atom: dict[int, list[PrefixSpec]] = {}
        for s in specs:
            for i in s.atoms:
                self._of_atom.setdefault(i, []).append(s)
        self.stats["moved"] = 0

    def is_heavy(self, name: str, key: tuple[Any, ...]) -> bool:
        """The class of the key ``key[:depth + 1]`` of partition ``name``."""
        depth = self.specs[name].depth
        return bool(self.heavy[name].get(key[:depth], key[depth]))

    def routes_light(self, name: str, key: tuple[Any, ...]) -> bool:
        """Whether an update of a tuple with this key goes to the light side (its class
        before the update; a new key is light except at eps = 0)."""
        return self.eps != 0.0 and not self.is_heavy(name, key)

    def degree(self, name: str, key: tuple[Any, ...]) -> int:
        """The key's largest degree (distinct tuples) among the partition's atoms."""
        k = key[: self.specs[name].depth + 1]
        return max((deg.get(k, 0) for deg in self.degrees[name].values()), default=0)

    def tuple_changed(self, atom: int, key: tuple[Any, ...], step: int) -> None:
        """A path-ordered tuple of ``atom`` appeared (``step`` 1) or left (-1): degrees,
        classes, |D|, then a major rebalance or the minor checks of its keys."""
        specs = self._of_atom.get(atom, ())
        zero_degree: list[PrefixSpec] = []
        for spec in specs:
            k = key[: spec.depth + 1]
            deg = self.degrees[spec.name][atom]
            d = deg.get(k, 0) + step
            if d:
                deg[k] = d
            else:
                del deg[k]
            if step > 0 and self.eps == 0.0:
                self.heavy[spec.name].put(k[:-1], k[-1], True)
            elif step < 0 and not self.degree(spec.name, k):
                zero_degree.append(spec)
        for spec in zero_degree:  # the key left every relation: it has no class any more
            k = key[: spec.depth + 1]
            self.heavy[spec.name].put(k[:-1], k[-1], 0)
        self.meta["size"] += step
        if not self.rebase() and 0.0 < self.eps < 1.0:
            # eps = 0: all heavy; eps = 1: no degree reaches 3/2 N
            for spec in specs:
                self.check_minor(spec, key[: spec.depth + 1])

    def check_minor(self, spec: PrefixSpec, k: tuple[Any, ...]) -> None:
        """Move key ``k`` to the other class if its degree left the band on the wrong
        side."""
        d = self.degree(spec.name, k)
        heavy = self.is_heavy(spec.name, k)
        theta = self.theta
        if heavy and d < theta / 2 or not heavy and d >= 1.5 * theta:
            self.stats["minor"] += 1
            self.move(spec, k, not heavy)
            self.heavy[spec.name].put(k[:-1], k[-1], 0 if heavy else True)

    def major_rebalance(self) -> None:
        """Strict classes at the current theta (heavy iff the largest degree >= theta;
        every key at eps = 0), then the view trees rebuild their light views."""
        self.stats["major"] += 1
        theta = self.theta
        for spec in self.specs.values():
            heavy = self.heavy[spec.name]
            heavy.clear()
            keys: set[tuple[Any, ...]] = set()
            for deg in self.degrees[spec.name].values():
                keys.update(deg.keys())
            for k in keys:
                if self.eps == 0.0 or (self.eps < 1.0 and self.degree(spec.name, k) >= theta):
                    heavy.put(k[:-1], k[-1], True)
        self.rebuild()
