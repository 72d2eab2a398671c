"""A live view: the maintained result of a compiled query (``query.maintain()``), fed
update by update and closed epoch by epoch.

Per update it checks the record against the schema and the delete check, projects it
onto each FROM item that reads its relation, nets it over the epoch and applies it to
the partitions' engines; at an epoch's close it sums their row payload changes and the
output finalizer turns them into the consolidated delta (docs/architecture.md, "From
SQL to deltas", steps 4-5). Where a native build can run, the generated hot path runs
compiled (:mod:`core.native`).

Example:
    >>> from dataflow.api import compile_query
    >>> from core.records import Update
    >>> view = compile_query("CREATE TABLE R(a INT); SELECT a, COUNT(*) FROM R GROUP BY a"
    ...                      ).maintain()
    >>> view.apply(Update("+", "R", (7,))); view.apply(Update("+", "R", (7,)))
    >>> view.end_epoch().rows
    ((1, (7, 2)),)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from core.codegen import Bindings, define
from core.errors import InputError
from core.native import (
    NATIVE_ENV,
    NativeBuildError,
    NativeFallbackWarning,
    first_line,
    native_available,
    native_mode,
    native_rows,
    native_sorted_changes,
    nativize,
    one_line,
)
from core.records import EpochDelta, Update, format_update
from core.schema import Row
from dataflow.circuit.hypercube import Partitioner
from dataflow.engines import PartitionEngine
from dataflow.engines.finalizer import make_finalizer
from operators.deletecheck import CheckMode, DeleteCheck, RowDigest, digest_maps
from operators.input import RelationInput, RelationRoute
from operators.joinnode import JoinNode
from operators.node import UpdateNode
from operators.nodemaps import register_dict_bucket
from operators.state import DictState, FieldMaps

if TYPE_CHECKING:
    from dataflow.api import CompiledQuery

__all__ = ["View", "make_finalizer"]


def _check_eps(eps: float) -> None:
    if not 0.0 <= eps <= 1.0:
        msg = f"eps must be between 0 and 1, got {eps}"
        raise ValueError(msg)


def _bound_hash(digest: RowDigest, _build: Any) -> Callable[[tuple[Any, ...]], int]:
    """The hash ``digest`` has bound (a compiled build's, once it bound it)."""
    return digest.hash


def _native_rows_module(native: bool | None, on_compile: Callable[[], None] | None
                        ) -> Any | None:
    """The built :mod:`core.native_rows` where the native build can run (rows packed,
    field maps), else None: nothing native then."""
    if native_mode(native) == "off" or native_available() is not None:
        return None
    try:
        return native_rows(on_compile)
    except NativeBuildError:
        return None


class StandInFieldMap(dict[Any, Any]):
    """What ``explain`` binds where a native run binds a ``FieldMap``: not a ``dict``
    itself, so the generated code's translation types it as the run's (an object,
    not a ``cdef dict``), and predicts the same module."""

    def __init__(self, nkey: int, nval: int, key_at: tuple[int, ...] | None = None) -> None:
        super().__init__()


class View(UpdateNode):
    """A live, incrementally maintained query result (one or more partitions)."""

    def __init__(
        self, query: CompiledQuery, parallelism: int = 1, eps: float | None = None,
        native: bool | None = None, on_compile: Callable[[], None] | None = None,
        validate: bool = True, keep_rows: bool = False,
        row_packer: Callable[[tuple[Any, ...]], Any] | None = None,
    ) -> None:
        """``native``: the generated hot path of a single-partition view runs compiled
        with Cython and a C compiler (:mod:`core.native`; ``pip install
        'ivmflow[native]'``). ``None`` (auto, unless ``$IVMFLOW_NATIVE`` is ``1`` or
        ``0``) compiles where a build can run and else runs interpreted; a build that
        fails falls back to the interpreter with a one-line
        :class:`~core.native.NativeFallbackWarning`. ``True`` requires the build and
        fails with the reason when it cannot run; ``False`` keeps it interpreted.
        Results are the same either way; :attr:`native` and :attr:`native_note` say
        which runs and why. ``on_compile()`` is called before a build that is not
        cached yet (first use of the query shape: a few seconds).

        The delete check (:mod:`operators.deletecheck`): a delete of copies that are not
        there raises :class:`InputError` with nothing changed. It keeps a multiset of
        row digests per relation the query reads (none where a FROM item's node keeps
        the rows whole: checked there), nothing for a relation it does not read (shape
        and type checked only). ``validate=False`` turns it off, for sources consistent
        by construction (``--trust-deletes``); ``keep_rows=True`` keeps the rows whole
        instead of digests, for :meth:`base_tuples` (the local runner's state
        checkpoint), checking deletes against them either way."""
        if parallelism < 1:
            msg = f"parallelism must be at least 1, got {parallelism}"
            raise ValueError(msg)
        self.query = query
        plan = query.plan
        self.partitioner = Partitioner(plan, parallelism)
        self.eps = query.eps if eps is None else eps
        _check_eps(self.eps)
        # The view checks deletes itself (below), so leaves that only feed sums keep
        # the sums, not their tuples; where the native build runs, in native maps:
        # a sum leaf's projection and a top leaf's groups are field maps (one native
        # array each, some 60 bytes an entry where a dict of packed keys and values
        # takes 150). Not with keep_rows, as rows are not packed then either.
        # (the native module loaded once, for the field maps and the row packer)
        field_maps: FieldMaps | None = None
        packer = row_packer
        if self.partitioner.partitions == 1 and not keep_rows:
            if row_packer is not None:  # (explain: not a dict, as a native run's)
                field_maps = StandInFieldMap
            elif (module := _native_rows_module(native, on_compile)) is not None:
                field_maps = module.FieldMap
                packer = module.packer(True)
                # (a top leaf's one group, a delta join's big bucket: read as buckets)
                register_dict_bucket(module.FieldMap)
        self.engines: list[PartitionEngine] = [
            query.kind.make_engine(state=DictState(field_maps), eps=self.eps,
                                   keep_leaf_tuples=False)
            for _ in range(self.partitioner.partitions)
        ]
        self.native_field_maps = field_maps is not None
        """Whether the join trees' sum leaves and top leaves' groups are field maps."""
        # Partitions (and engines that emit bag multiplicities) make DISTINCT count
        # supports in the finalizer.
        self.finalizer = make_finalizer(
            plan, count_supports=query.kind.engine_emits_bags or len(self.engines) > 1,
            engine=self.engines[0] if len(self.engines) == 1 else None,
        )
        cq = plan.cq
        self.routes: dict[str, RelationRoute] = {
            name.lower(): RelationRoute.of(rel) for name, rel in cq.schema.relations.items()}
        for atom in cq.atoms:
            self.routes[atom.relation.name.lower()].atoms.append(
                (atom.index, RelationInput(atom, cq.join_vars))
            )
        self.packed_rows = self._pack_rows(keep_rows, packer)
        """How many FROM items hand their node packed tuples (:meth:`_pack_rows`)."""
        # The delete check: over the relations the query reads (a relation declared
        # and not read is checked for shape and type only).
        reads = {route.relation.name: route.relation for route in self.routes.values()
                 if route.atoms}
        mode: CheckMode = "rows" if keep_rows else "digests" if validate else "off"
        self.validator = DeleteCheck(
            reads, mode, digest_maps(native_mode(native), on_compile)
            if mode == "digests" else None)
        # Fast path: exact relation name and exactly typed values skip _check.
        self._fast: dict[str, tuple[str, int, tuple[type, ...], list[Any]]] = {}
        for route in self.routes.values():
            rel = route.relation
            inputs = [(atom, ri.project) for atom, ri in route.atoms]
            self._fast[rel.name] = (rel.name, rel.arity, route.exact_types, inputs)
        self._held = self._hold_relations()
        self._pending = [0]  # (one slot: generated code counts into it)
        # closed epochs, updates in them (updates_total adds the open epoch's)
        self._counters = [0, 0]
        self._close: Callable[..., EpochDelta]  # (generated: _bind_close)
        self._bindings = Bindings()
        """The generated entry points and what a native build patches: bound and
        rebound only through it (:meth:`_register`)."""
        self._bind_fast()
        self._flush = self._bind_flush()
        self._register(self._bind_apply(), self._bind_close())
        self.native = False
        """Whether the hot path runs compiled."""
        self.native_note = ""
        """Which runs and why: ``compiled``, ``compiled (first use of this query shape:
        built in 3.2s)`` or ``interpreted: <why>``."""
        self._setup_native(native, on_compile)

    # -- input -----------------------------------------------------------------------
    def _check(self, update: Update) -> tuple[RelationRoute, Row]:
        route = self.routes.get(update.relation.lower())
        src = update.source or "<updates>"
        if route is None:
            known = ", ".join(sorted(r.relation.name for r in self.routes.values()))
            raise InputError(
                src, format_update(update), f"a relation of the query ({known})",
                f"relation {update.relation!r}", "fix the record or declare the table",
            )
        rel = route.relation
        row = update.row
        if len(row) != rel.arity:
            cols = ", ".join(rel.column_names)
            raise InputError(
                src, format_update(update), f"{rel.arity} values for {rel.name}({cols})",
                f"{len(row)} value{'s' if len(row) != 1 else ''}",
            )
        for v, t in zip(row, route.types):
            if v is not None and type(v) not in t:
                try:
                    row = rel.coerce_row(list(row))
                except ValueError as err:
                    raise InputError(src, format_update(update), "typed values", str(err)) from None
                break
        if update.mult < 1:
            raise InputError(src, format_update(update), "a multiplicity of at least 1",
                             str(update.mult))
        return route, row

    def _pack_rows(self, keep_rows: bool,
                   packer: Callable[[tuple[Any, ...]], Any] | None) -> int:
        """Where the native build can run, a single partition's FROM items whose node
        keeps their tuples (not a sum leaf, not a key leaf: those keep sums and keys)
        hand it each tuple packed (:mod:`core.native_rows`: 80 bytes where the tuple with
        its values is about 270 for a 5-column lineitem row). Not with
        ``keep_rows`` (the local checkpoint writes a node's rows as they are), and not
        where the build cannot run (then nothing changes). The engine's projections
        store their ring payloads (aggregate vectors) packed alike
        (:attr:`packed_payloads`). ``packer``: the native build's (None where it
        cannot run), or a stand-in (``explain`` generates a native run's code without
        building). Returns how many."""
        self.packed_payloads = 0
        """How many join trees store ring payloads packed (:meth:`_pack_rows`)."""
        if keep_rows or len(self.engines) != 1 or packer is None:
            return 0
        engine = self.engines[0]
        nodes = engine.atom_nodes
        packed = 0
        for route in self.routes.values():
            for atom, ri in route.atoms:
                if nodes[atom].keeps_tuples:
                    ri.pack_with(packer)
                    packed += 1
        # (ring payloads are tuples the nodes build: the same packer stores them)
        self.packed_payloads = engine.pack_payloads(packer)
        return packed

    def _hold_relations(self) -> dict[str, int]:
        """With one partition, per relation the first FROM item that takes its rows
        whole (no filter, every column in order): its atom node keeps each row's
        multiplicity, so the validator checks deletes there instead of counting every
        row a second time (one map, and its writes, less per update). Returns relation
        name -> that item's position among the relation's FROM items."""
        held: dict[str, int] = {}
        if len(self.engines) != 1 or self.validator.mode == "off":
            return held
        nodes = self.engines[0].atom_nodes
        for route in self.routes.values():
            for n, (atom, ri) in enumerate(route.atoms):
                base = nodes[atom].base
                if ri.takes_whole_rows and isinstance(base, Mapping):
                    self.validator.hold(route.relation.name, base, ri.project)
                    held[route.relation.name] = n
                    break
        return held

    def _bind_fast(self) -> None:
        """Per relation of a single partition, one generated function for well-typed
        updates (the common case): type check, delete check, then for every FROM
        item of the relation its filter, projection and node apply (itself specialized
        code). It returns False, having changed nothing, when the update needs the
        checked path."""
        self._direct: dict[str, Any] = {}
        self._nets: list[tuple[dict[Any, int], Any]] = []
        """Per FROM item, the open epoch's net change of its tuples (none zero) and its
        node's apply: :meth:`_flush` applies them."""
        if len(self.engines) != 1:
            return
        nodes = self.engines[0].atom_nodes
        for route in self.routes.values():
            rel = route.relation
            env: dict[str, Any] = {"check": self.validator.check, "NAME": rel.name}
            type_tests = ["type(row) is not tuple", f"len(row) != {rel.arity}"]
            for i, t in enumerate(route.exact_types):
                env[f"T{i}"] = t
                type_tests.append(f"type(row[{i}]) is not T{i}")
            lines = [
                "def fast(u):",
                "    row = u.row",
                f"    if {' or '.join(type_tests)}:",
                "        return False",
                "    m = u.mult",
                "    if m < 1:",
                "        return False",
                "    dm = m if u.op == '+' else -m",
            ]
            count_lines = self._count_lines(rel.name, env)
            # Past the exact type checks no column holds a NULL (unless typed so).
            non_null = frozenset(i for i, t in enumerate(route.exact_types)
                                 if t is not type(None))
            tests = [ri.typed_test(non_null, f"_{n}") for n, (_a, ri) in enumerate(route.atoms)]
            held = self._held.get(rel.name)
            # Each FROM item's tuples are netted over the epoch before its node sees
            # them: a delete and an insert of rows that agree on the columns the query
            # reads (an update of a column it does not read) cancel here instead of
            # running through the join twice.
            nets: list[dict[Any, int]] = [{} for _ in route.atoms]
            if held is None:
                lines += count_lines
            else:
                # The holding node's multiplicity, read before any node changes; only a
                # delete can go below zero.
                node = nodes[route.atoms[held][0]]
                if isinstance(node, JoinNode):
                    have = node.count_expr("row", env, "HELD")
                else:
                    env["HELD"] = node.base.get
                    have = "HELD(row, 0)"
                test = tests[held][0]
                # (the node's count lags by the epoch's net change of the row, not
                # applied yet: the flush applies it)
                env["HELD_NET"] = nets[held].get
                have = f"{have} + HELD_NET(row, 0)"
                check = [f"    {'elif' if test else 'if'} dm < 0 and {have} + dm < 0:",
                         f"        check(NAME, row, dm, u.source, {have})"]
                if test:  # (rows the holding node does not take are counted here)
                    lines += [f"    if {test}:", *("    " + ln for ln in count_lines)]
                lines += check
            for n, (atom, ri) in enumerate(route.atoms):
                test, bound = tests[n]
                env.update(bound)
                net = nets[n]
                self._nets.append((net, nodes[atom].apply))
                env[f"NET{n}"] = net
                env[f"NET{n}_get"] = net.get
                ind = "    "
                if test:
                    lines.append(f"    if not ({test}):")
                    ind = "        "
                lines += [f"{ind}t{n} = {ri.result_expr}",
                          f"{ind}v{n} = NET{n}_get(t{n}, 0) + dm",
                          f"{ind}if v{n}:", f"{ind}    NET{n}[t{n}] = v{n}", f"{ind}else:",
                          f"{ind}    del NET{n}[t{n}]"]
            lines.append("    return True")
            define("\n".join(lines), f"<apply {rel.name}>", env)
            self._direct[rel.name] = env["fast"]

    def _count_lines(self, name: str, env: dict[str, Any]) -> list[str]:
        """The fast path's lines that count a row of relation ``name`` in the delete
        check (its digest, or the row itself) and refuse a delete of copies that are
        not there, binding what they use in ``env``; none for a relation not checked.
        (Lines at one indent; they may ``return False`` before the count, for a value
        whose digest needs the checked path.)"""
        check = self.validator
        counts = check.counts.get(name)
        if counts is None:
            return []
        env["counts"], env["counts_get"] = counts, counts.get
        digest = check.digests.get(name)
        if digest is None:
            lines = ["    key = row"]
        else:
            dlines, bound = digest.fast_lines("row", "key", "_dg")
            env.update(bound)
            lines = ["    " + ln for ln in dlines]
        return [*lines, "    have = counts_get(key, 0)", "    n = have + dm",
                "    if n > 0:", "        counts[key] = n", "    elif n == 0:",
                "        del counts[key]", "    else:",
                "        check(NAME, row, dm, u.source, have)"]

    def _bind_flush(self) -> Callable[[], None]:
        """The generated function that applies the open epoch's netted tuples
        (:attr:`_nets`) to their nodes and empties them: the epoch's close runs it
        first, and so does everything that reads the engine's state (a snapshot, the
        base tuples, the checked input path)."""
        env: dict[str, Any] = {}
        lines = ["def flush():"]
        for n, (net, apply) in enumerate(self._nets):
            env[f"NET{n}"], env[f"apply{n}"] = net, apply
            lines += [f"    if NET{n}:", f"        for t, v in NET{n}.items():",
                      f"            apply{n}(t, v)", f"        NET{n}.clear()"]
        if not self._nets:
            lines.append("    return None")
        define("\n".join(lines), "<flush>", env)
        fn: Callable[[], None] = env["flush"]
        return fn

    def _interpreted_because(self, mode: str, flag: bool | None) -> str | None:
        """Why this view runs interpreted before any build is tried (None: try one);
        raises :class:`NativeBuildError` where ``mode`` ``on`` requires a build that
        cannot run here."""
        if mode == "off":
            return ("turned off (--no-native / native=False)" if flag is False
                    else f"turned off ({NATIVE_ENV}=0)")
        if not self._direct:
            return (f"{len(self.engines)} partitions (only a single-partition view "
                    "compiles)")
        why = native_available()
        if why is not None and mode == "on":
            how = "--native / native=True" if flag else f"{NATIVE_ENV}=1"
            msg = (f"native build requested ({how}), but {why}; without it the hot path "
                   "runs interpreted where no build can run (--no-native / native=False: "
                   "always)")
            raise NativeBuildError(msg)
        return why

    def _register(self, apply: Callable[[Update], None] | None,
                  close_env: dict[str, Any]) -> None:
        """Bind the generated entry points through :attr:`_bindings`, the one interface a
        native build rebinds them by: ``apply`` (generated where there are fast paths),
        ``end_epoch`` (``close_env``'s), the fast path of each relation, the engines'
        namespaces of ``acc``, the finalizer's sort and, in the epoch close, the C sort
        and the delta made in C."""
        bindings = self._bindings
        if apply is not None:
            bindings.entry("apply", apply, self._set_apply)
            bindings.entry("flush", self._flush, partial(setattr, self, "_flush"))
        bindings.entry("end_epoch", close_env["end_epoch"], self._set_close)
        for name, fast in self._direct.items():
            bindings.entry(f"fast {name}", fast, partial(self._direct.__setitem__, name))
            # The delete check's digests in C (core/native_sort.pyx), for the fast path
            # and the checked path alike: the same hash for every row of the view.
            digest = self.validator.digests.get(name)
            if digest is not None and digest.bits <= 64:
                bindings.value(f"digest {name}", digest.bind_hash,
                               lambda build: build.module.row_digest64)
                bindings.global_(f"fast {name} digest", fast.__globals__, "HASH_dg",
                                 partial(_bound_hash, digest))
        for n, engine in enumerate(self.engines):
            engine.register_native(bindings, f"engine {n}")
        finalizer = self.finalizer
        bindings.value("finalizer sort", partial(setattr, finalizer, "sorted_changes"),
                       lambda build: native_sorted_changes(build.module))
        # The C sort itself (its None, rows it does not take, falls back in the code)
        # and the delta made in C.
        if "sort" in close_env:
            bindings.global_("end_epoch sort", close_env, "sort",
                             lambda build: build.module.sorted_int_changes)
        bindings.global_("end_epoch new_delta", close_env, "new_delta",
                         lambda build: partial(build.module.new_epoch_delta, EpochDelta))

    def _set_apply(self, fn: Any) -> None:
        # (a plain assignment: vars(self)[...] would turn the instance's inline attribute
        # values into a dict and slow every other attribute access of the view)
        self.apply = fn  # type: ignore[method-assign]

    def _set_close(self, fn: Callable[..., EpochDelta]) -> None:
        self._close = fn
        self.end_epoch = fn  # type: ignore[method-assign]

    def _setup_native(self, flag: bool | None, on_compile: Callable[[], None] | None) -> None:
        """Compile the hot path as ``flag`` (and ``$IVMFLOW_NATIVE``) say, setting
        :attr:`native` and :attr:`native_note`. In auto mode anything that goes wrong
        before the compiled code is swapped in (translation, Cython, the C compiler,
        loading) leaves the view interpreted, with a warning."""
        mode = native_mode(flag)
        why = self._interpreted_because(mode, flag)
        if why is not None:
            self.native_note = f"interpreted: {why}"
            return
        try:
            build = nativize(self._bindings.entries(), on_compile,
                             typed_rows=not self.packed_rows)
        except Exception as err:
            if mode == "on":
                if isinstance(err, NativeBuildError):
                    raise
                msg = f"the native build failed: {first_line(err)}"
                raise NativeBuildError(msg) from err
            warnings.warn(f"the native build failed, running interpreted (same results): "
                          f"{one_line(err)}", NativeFallbackWarning, stacklevel=4)
            short = first_line(err)
            short = short if len(short) <= 80 else short[:77] + "..."
            self.native_note = f"interpreted: the native build failed ({short})"
            return
        self._bindings.rebind(build)
        self.native = True
        secs = build.built_seconds
        self.native_note = ("compiled" if secs is None else
                            f"compiled (first use of this query shape: built in {secs:.1f}s)")

    def _bind_apply(self) -> Callable[[Update], None] | None:
        """With typed fast paths, :meth:`apply` of this view is generated code doing the
        same: one comparison per relation, a direct call of its fast path, the update
        counted in a one-slot list. Bound as an instance attribute shadowing the method
        (:meth:`_register`), so a call runs no Python method frame (the compiled build's
        is a C method). Returns it, None without fast paths."""
        if not self._direct:
            return None
        env: dict[str, Any] = {"checked": self._apply_checked, "pending": self._pending,
                               "flush": self._flush}
        lines = ["def apply(update):", "    rel = update.relation"]
        for i, (name, fast) in enumerate(self._direct.items()):
            env[f"NAME{i}"] = name
            env[f"fast{i}"] = fast
            lines += [f"    {'elif' if i else 'if'} rel == NAME{i}:",
                      f"        if not fast{i}(update):", "            checked(update)"]
        # (the netted tuples are applied every 2**15 updates too: a long epoch, the
        # initial load, holds no more of them than that)
        lines += ["    else:", "        checked(update)", "    n = pending[0] + 1",
                  "    pending[0] = n", "    if not n & 32767:", "        flush()"]
        define("\n".join(lines), "<apply>", env)
        fn: Callable[[Update], None] = env["apply"]
        return fn

    def _bind_close(self) -> dict[str, Any]:
        """:meth:`end_epoch` of this view as generated code (an instance attribute, like
        :meth:`_bind_apply`'s, compiled with the hot path): with one engine that shares
        its change map, that map is read and cleared in place (no copy), a plain
        finalizer's sort is called directly, the counters are list slots. Returns its
        globals."""
        engines = self.engines
        finalizer = self.finalizer
        env: dict[str, Any] = {"counters": self._counters, "pending": self._pending,
                               "new_delta": EpochDelta, "finalizer": finalizer,
                               "flush": self._flush}
        if len(engines) == 1 and engines[0].share_acc(env):
            take, clear = ["    raw = acc"], ["        raw.clear()"]
        else:
            env["take"] = self._take_changes
            take, clear = ["    raw = take()"], []
        if finalizer.plain:
            # (sort: a compiled build's C sort, None for rows it does not take)
            env["sort"] = env["general_sort"] = finalizer.sorted_changes
            finish = ["        out = sort(raw)", "        if out is None:",
                      "            out = general_sort(raw)"]
        else:
            env["finish"] = finalizer.epoch
            finish = ["        out = finish(raw)"]
        # Small epochs mostly change nothing in the result: skip the finalizer then (an
        # ungrouped aggregate's first epoch shows its one row even so).
        always = finalizer.mode == "aggregate" and not finalizer.final_grouped
        test = "raw or not finalizer.silent_when_unchanged" if always else "raw"
        lines = ["def end_epoch(closed_by_marker=False):", "    flush()", *take,
                 f"    if {test}:",
                 *finish, "        rows = tuple(out)", *clear, "    else:",
                 "        rows = ()", "    epoch = counters[0] + 1", "    counters[0] = epoch",
                 "    n = pending[0]", "    pending[0] = 0", "    counters[1] += n",
                 "    return new_delta(epoch, rows, n, closed_by_marker)"]
        define("\n".join(lines), "<end_epoch>", env)
        return env

    def _take_changes(self) -> dict[Any, Any]:
        """The open epoch's row changes, merged over the partitions, taken."""
        return self._merged([e.take_delta() for e in self.engines])

    def held_changes(self) -> int:
        """Changed result rows the engines hold for the open epoch's delta (the input
        netted but not yet applied is bounded apart: applied every 2**15 updates)."""
        return sum(len(e.acc) for e in self.engines)

    @property
    def epoch(self) -> int:
        """Closed epochs (the number of the last one)."""
        return self._counters[0]

    @epoch.setter
    def epoch(self, value: int) -> None:
        self._counters[0] = value

    def apply(self, update: Update) -> None:
        """Apply one update; on bad input raise :class:`InputError` with nothing changed."""
        fast = self._direct.get(update.relation)
        if fast is None or not fast(update):
            self._apply_checked(update)
        self._pending[0] += 1

    @property
    def pending_updates(self) -> int:
        """Updates applied in the open epoch."""
        return self._pending[0]

    @pending_updates.setter
    def pending_updates(self, value: int) -> None:
        self._pending[0] = value

    @property
    def updates_total(self) -> int:
        """Updates applied since this view was made (the open epoch's too)."""
        return self._counters[1] + self._pending[0]

    def typed(self, update: Update) -> tuple[str, Row]:
        """The declared name of ``update``'s relation and its row typed by the columns
        (as :meth:`apply` checks them), or :class:`InputError`: an unknown relation, a
        wrong number of values, a value not of its column's type, a multiplicity below
        one."""
        fast = self._fast.get(update.relation)
        row = update.row
        if fast is None or type(row) is not tuple or tuple(map(type, row)) != fast[2] \
                or update.mult < 1:
            route, row = self._check(update)
            return route.relation.name, row
        return fast[0], row

    def _apply_checked(self, update: Update) -> None:
        self._flush()  # (the validator and the nodes below read the nodes' counts)
        row = update.row
        fast = self._fast.get(update.relation)
        if fast is None or tuple(map(type, row)) != fast[2] or update.mult < 1:
            route, row = self._check(update)
            fast = self._fast[route.relation.name]
        name = fast[0]
        if float in fast[2]:
            # (NaN is one value, as DuckDB's NaN = NaN: the NaN ivmflow parses)
            row = tuple(math.nan if type(v) is float and v != v else v for v in row)
        dm = update.mult if update.op == "+" else -update.mult
        self.validator.update(name, row, dm, update.source)
        engines = self.engines
        if len(engines) == 1:
            nodes = engines[0].atom_nodes
            for atom, project in fast[3]:
                t = project(row)
                if t is not None:
                    nodes[atom].apply(t, dm)
            return
        route_of = self.partitioner.route
        for atom, project in fast[3]:
            t = project(row)
            if t is None:
                continue
            for p in route_of(atom, t):
                engines[p].apply_atom(atom, t, dm)

    # -- output ----------------------------------------------------------------------
    def _merged(self, parts: list[dict[Any, Any]]) -> dict[Any, Any]:
        if len(parts) == 1:
            return parts[0]
        ring = self.engines[0].ring
        out: dict[Any, Any] = {}
        for part in parts:
            for row, v in part.items():
                old = out.get(row)
                out[row] = v if old is None else ring.add(old, v)
        return out

    def end_epoch(self, closed_by_marker: bool = False) -> EpochDelta:
        """Close the current epoch and return its consolidated delta. (Each view runs
        this as generated code, :meth:`_bind_close`; this method documents it.)"""
        return self._close(closed_by_marker)

    def base_tuples(self) -> list[tuple[str, Row, int]]:
        """The database the view holds: ``(relation, row, multiplicity)`` per distinct
        base tuple of the relations the query reads (what
        :mod:`dataflow.runners.local.checkpoint` saves). Only a view made with
        ``keep_rows=True`` has them (else :class:`UsageError`)."""
        self._flush()
        return list(self.validator.items())

    @property
    def delete_check(self) -> str:
        """Which delete check runs, in a few words (the run's summary line):
        ``row digests (64-bit)``, ``off (--trust-deletes)``, ..."""
        return self.validator.describe()

    def restore(self, base: Iterable[tuple[str, Row, int]], epoch: int) -> None:
        """Load ``base`` into this fresh view as the state after ``epoch`` closed epochs:
        the next :meth:`end_epoch` is ``epoch + 1`` and its delta is relative to
        ``base``.

        >>> from dataflow.api import compile_query
        >>> q = compile_query("CREATE TABLE R(a INT); SELECT COUNT(*) FROM R;")
        >>> v = q.maintain()
        >>> v.restore([("R", (1,), 2), ("R", (5,), 1)], epoch=7)
        >>> v.apply(Update("+", "R", (9,)))
        >>> d = v.end_epoch()
        >>> d.epoch, d.rows
        (8, ((-1, (3,)), (1, (4,))))
        """
        if self.updates_total or self.epoch:
            msg = "restore() needs a fresh view (no update applied, no epoch closed)"
            raise ValueError(msg)
        for rel, row, mult in base:
            self.apply(Update("+", rel, row, mult, "checkpoint"))
        self.end_epoch()  # the finalizer learns the restored result; its delta is dropped
        self.epoch = epoch

    def snapshot(self, enumerate_join: bool = False) -> list[tuple[int, Row]]:
        """The whole current result, from the maintained structure: an aggregate's
        maintained groups after a closed epoch, else (and with ``enumerate_join``) a
        full enumeration of the engines' state.

        >>> from dataflow.api import compile_query
        >>> q = compile_query("CREATE TABLE R(a INT, b INT); SELECT a, SUM(b) FROM R GROUP BY a")
        >>> v = q.maintain()
        >>> for row in [(1, 10), (1, 5), (2, 7)]:
        ...     v.apply(Update("+", "R", row))
        >>> _ = v.end_epoch()
        >>> v.snapshot() == v.snapshot(enumerate_join=True) == [(1, (1, 15)), (1, (2, 7))]
        True
        """
        self._flush()

        def enumerate_rows() -> dict[Any, Any]:
            return self._merged([e.full() for e in self.engines])

        if enumerate_join or self.pending_updates:
            # (an open epoch's changes are in the engines, not yet in the groups)
            return self.finalizer.snapshot(enumerate_rows())
        return self.finalizer.full(enumerate_rows)

    def state_entries(self) -> int:
        """Stored state entries over all partitions (base validator and output included)."""
        self._flush()
        total = sum(e.state_entries() for e in self.engines)
        total += self.validator.entries() + len(self.finalizer.state)
        return total

    # -- the node protocol (operators.node): a View is the local compiled-query node;
    # its epochs open, take batches and close as UpdateNode's --
    def state_maps(self) -> list[str]:
        return self.engines[0].state.names()

    def checkpoint(self) -> tuple[int, list[tuple[str, Row, int]]]:
        """The maps of a live view live in this process only, so its checkpoint is its
        database: the closed epochs and the base tuples (``keep_rows=True``)."""
        return (self.epoch, self.base_tuples())

    def restore_checkpoint(self, blob: tuple[int, Iterable[tuple[str, Row, int]]] | None
                           ) -> None:
        if blob is not None:
            self.restore(blob[1], blob[0])
