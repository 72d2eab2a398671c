"""The logical plan: what a query file is, as frozen data, produced once from its one
parse (:func:`logical_plan`) and never written back out as SQL text.

A plan is the query's own join block over a DAG of inner views, each a node:

- :class:`JoinBlock`: a conjunctive query (:class:`~plans.cq.ConjunctiveQuery`: atoms,
  variables, filters, aggregates, the maps after them), with its top-k window
  (:class:`TopKWindow`) when it has ``ORDER BY ... LIMIT``;
- :class:`KeyedViewNode`: one side of an outer join with its hidden join keys
  (:mod:`plans.outerjoin`), its ON condition compiled;
- :class:`ThresholdNode`: the rows of a view that compare true with a scalar view
  (:mod:`plans.threshold`);

and :class:`Edge` says which view's deltas feed which reader. Everything a worker
needs to build the query's engines is here, so the distributed runners ship the plan
(it pickles: no closures, no sqlglot trees), and its :meth:`LogicalPlan.render`, a
stable text of all of it, is what a checkpoint's layout stamp digests.

Example:
    >>> from plans.sqlparse import parse_file
    >>> plan = logical_plan(parse_file('''CREATE TABLE R(a INT, b INT);
    ...     SELECT a FROM R WHERE b > (SELECT AVG(b) FROM R)''', "q.sql"))
    >>> [(v.name, type(v).__name__) for v in plan.views]
    [('_u_0', 'JoinBlock'), ('_tv_0', 'JoinBlock'), ('_tf_0', 'ThresholdNode')]
    >>> [(e.source, e.reader) for e in plan.edges]
    [('_tv_0', '_tf_0'), ('_u_0', '_tf_0'), ('_tf_0', '')]
    >>> print(plan.render().splitlines()[-2])
    edges: _tv_0 -> _tf_0, _u_0 -> _tf_0, _tf_0 -> the query
"""

from __future__ import annotations

import hashlib
import itertools
import re
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

from sqlglot import exp

from core.consolidate import ComputedKey
from core.errors import QueryError
from core.schema import Column, Relation, Schema
from core.sqlfuncs import HELPERS
from plans.cq import Atom, ConjunctiveQuery
from plans.expr import ExprError, SqlType
from plans.grouping import expand_grouping
from plans.outerjoin import Condition, JoinSide, KeyedView, compile_condition
from plans.pushdown import push_constants
from plans.setops import Item, SetOperation, common_type, lift_items, lift_set_operations
from plans.sql import build_query
from plans.sqlcheck import check_supported, describe
from plans.sqlerrors import set_operation
from plans.sqlparse import ParsedQuery, ddl_type, offset_of, view_relation
from plans.threshold import ScalarShape, ThresholdFilter, scalar_view
from plans.views import split_views
from plans.windows import WindowOp, lift_windows, window_type

__all__ = ["Edge", "JoinBlock", "KeyedViewNode", "LogicalPlan", "SetOpNode", "ThresholdNode",
           "TopKWindow", "ViewNode", "WindowNode", "logical_plan"]

QUERY = ""
"""The name of the query's own block (an edge into it reads ``reader == QUERY``)."""


@dataclass(frozen=True)
class TopKWindow:
    """``ORDER BY ... LIMIT k OFFSET m`` of a block: its result is the window of rows
    ``m + 1 .. m + k`` in that order, maintained (``order_by``: output column,
    descending, nulls first)."""

    order_by: tuple[tuple[int | ComputedKey, bool, bool], ...]
    limit: int | None
    offset: int


@dataclass(frozen=True)
class JoinBlock:
    """A view (or the query, ``name == ""``) that is one conjunctive query."""

    name: str
    cq: ConjunctiveQuery

    @property
    def reads(self) -> tuple[str, ...]:
        """The relations (base tables and views) its FROM items read, in order."""
        return tuple(dict.fromkeys(a.relation.name for a in self.cq.atoms))

    @property
    def columns(self) -> list[tuple[str, str]]:
        """Its output columns (name, the SQL type a reader's table declares)."""
        return list(zip(self.cq.output_names, self.cq.output_types))

    @property
    def window(self) -> TopKWindow | None:
        """Its top-k window, if it has one."""
        cq = self.cq
        if cq.limit is None and not cq.offset:
            return None
        return TopKWindow(cq.order_by, cq.limit, cq.offset)


@dataclass(frozen=True)
class KeyedViewNode:
    """A keyed view (:class:`~plans.outerjoin.KeyedView`, its sides' conditions
    compiled) over ``own``, its rows' relation, and ``other``, the padded-from side's;
    ``base`` names the base tables (whose deletes it checks when it reads them)."""

    spec: KeyedView
    own: Relation
    other: Relation | None
    base: frozenset[str]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def reads(self) -> tuple[str, ...]:
        pad = (self.spec.pad.source,) if self.spec.pad else ()
        return tuple(dict.fromkeys((self.spec.own.source, *pad)))

    @property
    def columns(self) -> list[tuple[str, str]]:
        cols = (*(Column(name, "KEY") for name in self.spec.hidden), *self.own.columns)
        return [(c.name, ddl_type(SqlType.of_column(c))) for c in cols]


@dataclass(frozen=True)
class ThresholdNode:
    """A threshold filter (:class:`~plans.threshold.ThresholdFilter`) over ``rows``, the
    rows view's relation, and ``scalar``, the scalar view's."""

    spec: ThresholdFilter
    rows: Relation
    scalar: Relation

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.spec.source, self.spec.scalar)

    @property
    def columns(self) -> list[tuple[str, str]]:
        return [(c.name, ddl_type(SqlType.of_column(c))) for c in self.rows.columns]


@dataclass(frozen=True)
class SetOpNode:
    """A set operation (:class:`~plans.setops.SetOperation`) over views of one shape,
    ``columns`` its result's (the first input's names, the inputs' types unified)."""

    spec: SetOperation
    columns: list[tuple[str, str]]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.spec.inputs))


@dataclass(frozen=True)
class WindowNode:
    """A window view (:class:`~plans.windows.WindowOp`) over one view, ``columns`` its
    result's (the input's, then one per window function)."""

    spec: WindowOp
    columns: list[tuple[str, str]]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.spec.source,)


ViewNode = JoinBlock | KeyedViewNode | ThresholdNode | SetOpNode | WindowNode
"""An inner view of a plan."""


@dataclass(frozen=True)
class Edge:
    """The view ``source``'s epoch deltas are updates of ``reader`` (a view, or the
    query: :data:`QUERY`), in the same epoch."""

    source: str
    reader: str


@dataclass(frozen=True)
class LogicalPlan:
    """A query file's plan: ``views`` in an order where each reads only base tables
    and the views before it, then ``query`` over them; ``base`` holds the base tables
    (what an update may name), ``source`` names the file (errors, explain)."""

    source: str
    base: Schema
    views: tuple[ViewNode, ...]
    query: JoinBlock
    edges: tuple[Edge, ...]

    @property
    def nodes(self) -> tuple[ViewNode, ...]:
        """The views, then the query."""
        return (*self.views, self.query)

    def render(self) -> str:
        """The whole plan as stable text: the same plan renders the same in any
        process (generated names renumbered, the values bound to them shown, sets
        sorted), another plan differently."""
        lines = [f"plan of {len(self.views)} views and the query"]
        for node in self.nodes:
            lines += _render_node(node)
        lines.append("edges: " + (", ".join(
            f"{e.source} -> {e.reader or 'the query'}" for e in self.edges) or "(none)"))
        lines.append("base tables: " + ", ".join(
            _relation(r) for r in self.base.relations.values()))
        return "\n".join(lines)

    @cached_property
    def digest(self) -> str:
        """A digest of :meth:`render` (what a checkpoint's layout stamp is made of)."""
        return hashlib.sha256(self.render().encode()).hexdigest()[:16]


def logical_plan(parsed: ParsedQuery) -> LogicalPlan:
    """The plan of a parsed query file: checked, split into views
    (:func:`~plans.views.split_views`), each view built over the base tables and the
    views before it (typed by their outputs), then the query over them. A file with
    set operations is first lifted into items (:mod:`plans.setops`), each planned so
    over the ones before it; grouping sets are a union first (:mod:`plans.grouping`)."""
    parsed = expand_grouping(push_constants(parsed))
    try:
        items = lift_set_operations(parsed.select)
    except ExprError as err:
        name, offset = set_operation(err.node, parsed.text) if isinstance(
            err.node, exp.SetOperation) else ("set operation", offset_of(err.node))
        raise QueryError(describe([(offset, name, str(err))], parsed.text,
                                  parsed.source)) from None
    if parsed.select.find(exp.Window) is not None:  # (window functions: plans.windows)
        try:
            items = lift_windows(items if items is not None else lift_items(parsed.select),
                                 parsed.schema)
        except ExprError as err:
            raise QueryError(describe([(offset_of(err.node), "window function", str(err))],
                                      parsed.text, parsed.source)) from None
    if items is not None:
        return _plan_items(parsed, items)
    views, query = _plan_select(parsed, dict(parsed.schema.relations))
    return _assemble(parsed, views, query)


def _assemble(parsed: ParsedQuery, views: list[ViewNode], query: JoinBlock) -> LogicalPlan:
    if not views:
        return LogicalPlan(parsed.source, parsed.schema, (), query, ())
    names = {v.name.lower() for v in views}
    base_schema = Schema({k: v for k, v in query.cq.schema.relations.items()
                          if k.lower() not in names})
    edges = tuple(Edge(view, node.name) for node in (*views, query)
                  for view in node.reads if view.lower() in names)
    return LogicalPlan(parsed.source, base_schema, tuple(views), query, edges)


def _plan_select(parsed: ParsedQuery, relations: dict[str, Relation],
                 names: Iterator[int] | None = None, tag: str = "", name: str = QUERY,
                 base: frozenset[str] | None = None,
                 scalars: dict[str, ScalarShape] | None = None
                 ) -> tuple[list[ViewNode], JoinBlock]:
    """The inner views of one SELECT (added to ``relations`` as they are built) and
    its own block, named ``name``; ``base``: the file's tables (default: the SELECT's
    schema's); ``scalars``: the views before it with one value (per key)."""
    check_supported(parsed.select, parsed.text, parsed.source)
    split = split_views(parsed, names, tag, scalars)
    if split is None:
        return [], JoinBlock(name, build_query(parsed))
    base = base if base is not None else frozenset(parsed.schema.relations)
    views: list[ViewNode] = []
    for view_name, body in split.views:
        known = Schema(dict(relations))
        node: ViewNode
        if isinstance(body, KeyedView):
            node = _keyed_view(body, known, base, parsed)
        elif isinstance(body, ThresholdFilter):
            rows, scalar = known.lookup(body.source), known.lookup(body.scalar)
            assert rows is not None and scalar is not None
            node = ThresholdNode(body, rows, scalar)
        else:
            view = ParsedQuery(parsed.text, f"{parsed.source} (view {view_name})", known,
                               body.copy())
            check_supported(view.select, view.text, view.source)
            assert split_views(view) is None  # (the split leaves no view to split)
            node = JoinBlock(view_name, build_query(view))
        _add_relation(parsed, relations, view_name, node.columns)
        views.append(node)
    outer = ParsedQuery(parsed.text, parsed.source, Schema(relations), split.query.copy())
    check_supported(outer.select, outer.text, outer.source)
    assert split_views(outer) is None
    return views, JoinBlock(name, build_query(outer))


def _add_relation(parsed: ParsedQuery, relations: dict[str, Relation], name: str,
                  columns: list[tuple[str, str]]) -> None:
    if name.lower() in {r.lower() for r in relations}:
        msg = (f"{parsed.source}: the view {name} has the name of a table declared "
               "before it; rename the WITH or CREATE VIEW")
        raise QueryError(msg)
    relations[name] = view_relation(name, columns)


def _plan_items(parsed: ParsedQuery, items: list[Item]) -> LogicalPlan:
    """The plan of a file lifted into items (:func:`~plans.setops.lift_set_operations`):
    each SELECT planned over the base tables and the items before it (its own inner
    views numbered on from the others', the optimizer's tagged with the item's
    number), each set operation over its branches, their columns' types unified (a
    branch whose type differs is planned again with its columns CAST)."""
    relations = dict(parsed.schema.relations)
    names = itertools.count()
    views: list[ViewNode] = []
    made: dict[str, tuple[int, int, Item]] = {}
    """a SELECT item's name -> where its views lie in ``views`` (start, end), itself"""
    scalars: dict[str, ScalarShape] = {}
    """the SELECT items with one value (per key): compared with in a later item (TPC-DS
    Q14's average of a WITH, read by three branches' HAVINGs), a threshold view there"""
    query: JoinBlock | None = None
    for i, item in enumerate(items):
        if item.setop is not None or item.window is not None:
            node: SetOpNode | WindowNode = _window(parsed, item.window, relations) \
                if item.window is not None else \
                _set_operation(parsed, item.setop, relations, views, made, names)  # type: ignore[arg-type]
            _add_relation(parsed, relations, node.name, node.columns)
            views.append(node)
            continue
        assert item.select is not None
        start = len(views)
        block_views, block = _plan_item(parsed, item, relations, names, f"_{i}", scalars)
        views += block_views
        if not item.name:
            query = block
            continue
        shape = scalar_view(item.select)
        if shape is not None:
            scalars[item.name] = shape
        _add_relation(parsed, relations, item.name, block.columns)
        views.append(block)
        made[item.name.lower()] = (start, len(views), item)
    assert query is not None
    return _assemble(parsed, views, query)


def _plan_item(parsed: ParsedQuery, item: Item, relations: dict[str, Relation],
               names: Iterator[int], tag: str, scalars: dict[str, ScalarShape] | None = None
               ) -> tuple[list[ViewNode], JoinBlock]:
    assert item.select is not None
    source = f"{parsed.source} (view {item.name})" if item.name else parsed.source
    sub = ParsedQuery(parsed.text, source, Schema(dict(relations)), item.select.copy())
    return _plan_select(sub, relations, names, tag, item.name,
                        frozenset(parsed.schema.relations), scalars)


def _set_operation(parsed: ParsedQuery, spec: SetOperation, relations: dict[str, Relation],
                   views: list[ViewNode], made: dict[str, tuple[int, int, Item]],
                   names: Iterator[int]) -> SetOpNode:
    """The set operation's node: its inputs' columns checked and unified; an input
    planned here whose types differ from the result's is planned again with CASTs."""
    shapes = [[(c.name, ddl_type(SqlType.of_column(c))) for c in relations[v].columns]
              for v in spec.inputs]
    width = len(shapes[0])
    for v, shape in zip(spec.inputs, shapes):
        if len(shape) != width:
            msg = (f"{parsed.source}: {spec.sql_name}: its first input has {width} "
                   f"columns, {_input_label(v)} has {len(shape)}; each SELECT of a set "
                   "operation must have as many columns")
            raise QueryError(msg)
    nulls = [_null_columns(made.get(v.lower())) for v in spec.inputs]
    types: list[str] = []
    for k in range(width):
        found = ["NULL" if k in nulls[j] else shape[k][1] for j, shape in enumerate(shapes)]
        common = common_type(found)
        if common is None:
            msg = (f"{parsed.source}: {spec.sql_name}: column {k + 1} ({shapes[0][k][0]}) "
                   f"is {' / '.join(dict.fromkeys(found))} in its inputs, which do not "
                   "unify; CAST them to one type")
            raise QueryError(msg)
        types.append(common)
    for v, shape in zip(spec.inputs, shapes):
        if [t for _, t in shape] != types:
            _recast(parsed, v, types, relations, views, made, names)
    return SetOpNode(spec, [(shapes[0][k][0], types[k]) for k in range(width)])


def _window(parsed: ParsedQuery, spec: WindowOp, relations: dict[str, Relation]
            ) -> WindowNode:
    """The window view's node: its input's columns, then its functions', typed."""
    cols = [(c.name, ddl_type(SqlType.of_column(c))) for c in relations[spec.source].columns]
    out = list(cols)
    for f, name in zip(spec.funcs, spec.names):
        try:
            out.append((name, window_type(f, cols[f.arg][1] if f.arg is not None else None)))
        except ValueError as err:
            msg = f"{parsed.source}: window function {f.func.upper()}: {err}"
            raise QueryError(msg) from None
    return WindowNode(spec, out)


def _null_columns(made: tuple[int, int, Item] | None) -> set[int]:
    """The columns of an item's SELECT that are a bare NULL (typed by the others)."""
    if made is None or made[2].select is None:
        return set()
    exprs = made[2].select.expressions
    return {k for k, e in enumerate(exprs)
            if isinstance(e.unalias() if isinstance(e, exp.Alias) else e, exp.Null)}


def _input_label(view: str) -> str:
    return "another input" if view.startswith(("_sb_", "_so_")) else f"input {view}"


def _recast(parsed: ParsedQuery, view: str, types: list[str], relations: dict[str, Relation],
            views: list[ViewNode], made: dict[str, tuple[int, int, Item]],
            names: Iterator[int]) -> None:
    """Plan input ``view`` of a set operation again as ``SELECT CAST(c AS T) ...``
    over its SELECT (in place of its first plan: nothing read it yet)."""
    where = made.get(view.lower())
    if where is None or not view.startswith("_sb_"):
        msg = (f"{parsed.source}: a set operation reads {view}, whose column types "
               f"differ from the result's ({', '.join(types)}); CAST them in its SELECT")
        raise QueryError(msg)
    start, end, item = where
    assert item.select is not None
    cols = relations[view].columns
    branch = item.select.copy()
    if len(branch.expressions) == len(cols) and not any(
            isinstance(e, exp.Star) or isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
            for e in branch.expressions):
        # (every column named as the view's relation names it: an unnamed `NULL` or
        # `SUM(c)` would be `_col_k` in the derived table below)
        branch.set("expressions", [exp.alias_(e.unalias() if isinstance(e, exp.Alias) else e,
                                              c.name, quoted=True)
                                   for e, c in zip(branch.expressions, cols)])
    inner = exp.Subquery(this=branch, alias=exp.TableAlias(this=exp.to_identifier("_b")))
    exprs = [exp.alias_(exp.cast(exp.column(c.name, "_b", quoted=True), t), c.name,
                        quoted=True) for c, t in zip(cols, types)]
    recast = Item(item.name, select=exp.select(*exprs).from_(inner))
    del relations[view]
    for old in views[start:end]:
        relations.pop(old.name, None)
    block_views, block = _plan_item(parsed, recast, relations, names, f"_c{start}")
    _add_relation(parsed, relations, view, block.columns)
    views[start:end] = [*block_views, block]
    shift = len(block_views) + 1 - (end - start)
    for key, (s, e, it) in list(made.items()):  # (the items planned after it moved)
        if s >= end:
            made[key] = (s + shift, e + shift, it)
    made[view.lower()] = (start, start + len(block_views) + 1, recast)


def _keyed_view(spec: KeyedView, known: Schema, base: frozenset[str],
                parsed: ParsedQuery) -> KeyedViewNode:
    """The keyed view ``spec`` of the split with its sides' ON conditions compiled
    over their sources' rows."""
    own = known.lookup(spec.own.source)
    other = known.lookup(spec.pad.source) if spec.pad else None
    assert own is not None and (other is not None or spec.pad is None)

    def compiled(side: JoinSide) -> JoinSide:
        rel = known.lookup(side.source)
        assert rel is not None
        try:
            return compile_condition(side, rel)
        except ExprError as err:
            raise QueryError(describe([(offset_of(err.node), "expression", str(err))],
                                      parsed.text, parsed.source)) from None

    keys = tuple(compiled(k) for k in spec.keys)
    pad = compiled(spec.pad) if spec.pad else None
    return KeyedViewNode(KeyedView(spec.name, keys, spec.preserve, pad), own, other, base)


# -- the stable rendering ------------------------------------------------------------

_BOUND = re.compile(r"_k\d+")
"""A generated name (:func:`plans.exprtypes.fresh_name`): its number differs from one
process (and compile) to the next, so a rendering renumbers it."""
_NAME = re.compile(r"[A-Za-z_]\w*")


class _Canon:
    """Generated source with its bound names renumbered in order of first appearance
    (``$0``, ``$1``, ...), and what each name it reads is bound to."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def src(self, src: str, env: Mapping[str, Any]) -> str:
        # (in order of appearance: the names' numbers differ between processes)
        bound = list(dict.fromkeys(n for n in _NAME.findall(src)
                                   if n in env and env[n] is not HELPERS.get(n)))
        text = self._renamed(src)
        if bound:
            text += " {" + ", ".join(f"{self._renamed(n)}={_stable(env[n])}"
                                     for n in bound) + "}"
        return text

    def _renamed(self, text: str) -> str:
        def one(m: re.Match[str]) -> str:
            return self.names.setdefault(m.group(0), f"${len(self.names)}")

        return _BOUND.sub(one, text)


def _stable(v: Any) -> str:
    """A value bound in generated code's namespace, as text that does not depend on
    the process (no addresses, sets sorted)."""
    if isinstance(v, (frozenset, set)):
        return "{" + ", ".join(sorted(_stable(x) for x in v)) + "}"
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(_stable(x) for x in v) + ")"
    if isinstance(v, partial):
        return f"{_stable(v.func)}({', '.join(_stable(a) for a in v.args)})"
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type)):
        owner = getattr(v, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            return f"{_stable(owner)}.{v.__name__}"
        return f"{v.__module__}.{v.__qualname__}"
    text = repr(v)
    if " at 0x" in text:
        msg = (f"{text}: a value in a compiled expression's namespace with no stable "
               "text (a closure?): bind a module function or a functools.partial")
        raise TypeError(msg)
    return text


def _relation(rel: Relation) -> str:
    cols = ", ".join(f"{c.name} {ddl_type(SqlType.of_column(c))}" for c in rel.columns)
    key = f" key {rel.key}" if rel.key else ""
    return f"{rel.name}({cols}){key}"


def _render_node(node: ViewNode) -> list[str]:
    if isinstance(node, WindowNode):
        w = node.spec
        funcs = ", ".join(f"{n} := {f.func}({'' if f.arg is None else f.arg}) {f.frame}"
                          f"{'' if f.offset == 1 else f' offset {f.offset}'}"
                          f"{'' if f.default is None else f' default {f.default}'}"
                          for f, n in zip(w.funcs, w.names))
        cols = ", ".join(f"{n} {t}" for n, t in node.columns)
        top = f", top {w.limit[1]} by {w.names[w.limit[0]]}" if w.limit else ""
        return [f"view {w.name}: window over {w.source} partition by {list(w.partition_by)} "
                f"order by {list(w.order_by)}: {funcs}{top} ({cols})"]
    if isinstance(node, SetOpNode):
        op = node.spec
        cols = ", ".join(f"{n} {t}" for n, t in node.columns)
        return [f"view {op.name}: {op.sql_name} of {', '.join(op.inputs)} ({cols})"]
    if isinstance(node, KeyedViewNode):
        s = node.spec
        lines = [f"view {s.name}: keyed view of {_relation(node.own)}, "
                 f"{'preserved' if s.preserve else 'matched rows only'}"]
        canon = _Canon()
        for side in s.keys:
            lines.append(f"  key {_side(side, canon)}")
        if s.pad is not None:
            assert node.other is not None
            lines.append(f"  padded from {_relation(node.other)}: {_side(s.pad, canon)}")
        return lines
    if isinstance(node, ThresholdNode):
        t = node.spec
        keys = f" per key ({', '.join(t.keys)})" if t.keys else ""
        return [f"view {t.name}: threshold, rows of {_relation(node.rows)} whose last "
                f"column {t.op} {t.scalar}.{t.value}{keys}, {_relation(node.scalar)}"]
    return _render_block(node)


def _side(side: JoinSide, canon: _Canon) -> str:
    cond = side.condition
    where = f" where {canon.src(cond.src, cond.env)} ({cond.sql})" \
        if isinstance(cond, Condition) else ""
    return (f"{side.source} AS {side.alias} ({', '.join(side.columns)}) tag {side.tag}"
            f"{where}")


def _render_block(block: JoinBlock) -> list[str]:
    cq, canon = block.cq, _Canon()
    lines = [f"{'view ' + block.name if block.name else 'the query'}: join block"]
    lines += [f"  {line}" for a in cq.atoms for line in _atom(a, canon)]
    lines.append(f"  variables {cq.var_order}, joined {sorted(cq.join_vars)}, "
                 f"free {cq.free_vars}")
    lines.append(f"  columns {[(c.name, c.var, c.aggregate, c.expr) for c in cq.columns]}")
    lines.append(f"  output {cq.output_names} {cq.output_types}")
    if cq.aggregates:
        aggs = [(g.func, g.var, g.result_type, g.scale) for g in cq.aggregates]
        lines.append(f"  aggregates {aggs}")
    lines.append(f"  group by {cq.group_by}, distinct {cq.distinct}")
    if cq.post is not None:
        p = cq.post
        lines.append(f"  post {[canon.src(e, p.env) for e in p.exprs]} names {p.names} "
                     f"types {p.types}")
        if p.having is not None:
            lines.append(f"  having {canon.src(p.having, p.env)}")
    if cq.reagg is not None:
        r = cq.reagg
        lines.append(f"  reaggregate keys {r.n_keys}, grouped {r.grouped}, carried "
                     f"{r.carried}")
        if r.condition is not None:
            lines.append(f"    condition {canon.src(r.condition, r.env)}")
        for f in r.aggregates:
            glue = canon.src(f.glue, r.env) if f.glue is not None else None
            lines.append(f"    {f.func}({f.var}, {glue}) {f.result_type} {f.scale}")
    window = block.window
    order = tuple((canon.src(c.src, c.env), d, n) if isinstance(c, ComputedKey)
                  else (c, d, n) for c, d, n in cq.order_by)
    if window is not None:
        lines.append(f"  top-k window: order {order}, limit {window.limit}, "
                     f"offset {window.offset}")
    elif cq.order_by:
        lines.append(f"  order {order}")
    return lines


def _atom(a: Atom, canon: _Canon) -> list[str]:
    lines = [f"{a.alias}: {_relation(a.relation)} columns {a.column_vars} vars {a.vars}"]
    lines += [f"  filter {f.render(a.alias)}" for f in a.filters]
    lines += [f"  where {canon.src(p.src, a.env)} ({p.sql})" for p in a.predicates]
    lines += [f"  {d.var} := {canon.src(d.src, a.env)} ({d.sql}) {d.column}"
              for d in a.derived]
    return lines
