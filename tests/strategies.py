"""Random acyclic queries and valid update streams for the property tests.

Every random decision goes through a :class:`Chooser`, so the same generators serve
hypothesis (``cases(...)``, shrinkable) and plain seeded ``random`` (reproducible streams
for the named queries). Query families (docs/contributing.md):

- ``path``: ``k`` = 2..5 binary atoms chained end to end, either self-joins of one edge
  table ``G(src, dst)`` or distinct tables ``R1(a, b), R2(b, c), ...``;
- ``star``: ``k`` = 2..5 binary atoms sharing one variable;
- ``comb``: a path of length 1..3 with unary tables ``V(v)`` hanging off its ends (and
  sometimes its inner nodes);
- ``snowflake``: a star whose arms are paths of length 2.

All are acyclic (checked with GYO). Output shapes: full, projections (free-connex or not,
with or without DISTINCT), ``GROUP BY`` one variable with COUNT/SUM/AVG, aggregates
without ``GROUP BY``. Optional filters per atom; small value domains so joins hit; NULLs
in non-join columns, sometimes in join columns.

Example:
    >>> import random
    >>> case = random_case(random.Random(3), "path")
    >>> case.sql.startswith("CREATE TABLE")
    True
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, NamedTuple, TypeVar

from hypothesis import strategies as st
from oracle import split_query

from core.records import EPOCH_END, EpochEnd, Record, Update

T = TypeVar("T")
Row = tuple[Any, ...]

FAMILIES = ("path", "star", "comb", "snowflake")
SHAPES = ("full", "proj", "nfc", "groupby", "agg")


# -- choosers -------------------------------------------------------------------------
class Chooser:
    """The source of random decisions (hypothesis draws or a seeded ``random``)."""

    def integer(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def choice(self, items: Sequence[T]) -> T:
        return items[self.integer(0, len(items) - 1)]

    def boolean(self, p: float = 0.5) -> bool:
        """True with probability ``p`` (shrinks to False)."""
        return self.integer(0, 99) >= 100 - round(p * 100)


class HypothesisChooser(Chooser):
    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return int(self.draw(st.integers(lo, hi)))

    def choice(self, items: Sequence[T]) -> T:
        return self.draw(st.sampled_from(list(items)))  # type: ignore[no-any-return]


class RandomChooser(Chooser):
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


# -- hypergraph helpers ----------------------------------------------------------------
def is_acyclic(edges: Sequence[frozenset[str]]) -> bool:
    """GYO reduction: alpha-acyclic iff it reduces to at most one edge.

    >>> is_acyclic([frozenset("ab"), frozenset("bc"), frozenset("ca")])
    False
    """
    work = [set(e) for e in edges]
    changed = True
    while changed:
        changed = False
        counts = Counter(v for e in work for v in e)
        for e in work:
            lonely = {v for v in e if counts[v] == 1}
            if lonely:
                e -= lonely
                changed = True
        for i, e in enumerate(work):
            if not e or any(j != i and e <= f for j, f in enumerate(work)):
                del work[i]
                changed = True
                break
    return len(work) <= 1


def is_free_connex(edges: Sequence[frozenset[str]], free: frozenset[str]) -> bool:
    """Acyclic, and still acyclic with the head (the free variables) as an extra edge."""
    if not is_acyclic(edges):
        return False
    return not free or is_acyclic([*edges, free])


@functools.lru_cache(maxsize=256)
def _subsets_by_class(edges: tuple[frozenset[str], ...]) -> dict[str, list[tuple[str, ...]]]:
    allv = sorted(set().union(*edges))
    out: dict[str, list[tuple[str, ...]]] = {"fc": [], "nfc": []}
    for n in range(1, len(allv) + 1):
        for sub in combinations(allv, n):
            out["fc" if is_free_connex(edges, frozenset(sub)) else "nfc"].append(sub)
    return out


# -- query specs -----------------------------------------------------------------------
@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]  # (column name, SQL type)

    def ddl(self) -> str:
        cols = ", ".join(f"{c} {t}" for c, t in self.columns)
        return f"CREATE TABLE {self.name}({cols});"


@dataclass(frozen=True)
class Atom:
    alias: str
    table: Table
    vars: tuple[str, ...]  # the variable of each column

    def from_item(self) -> str:
        if self.alias == self.table.name:
            return self.alias
        return f"{self.table.name} AS {self.alias}"


@dataclass(frozen=True)
class Cond:
    """A filter ``alias.column op values`` (``flip``: write the constant first)."""

    alias: str
    column: str
    op: str
    values: tuple[Any, ...] = ()
    flip: bool = False

    def sql(self) -> str:
        col = f"{self.alias}.{self.column}"
        if self.op in ("IS NULL", "IS NOT NULL"):
            return f"{col} {self.op}"
        if self.op == "IN":
            return f"{col} IN ({', '.join(_literal(v) for v in self.values)})"
        if self.flip:
            flipped = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(self.op, self.op)
            return f"{_literal(self.values[0])} {flipped} {col}"
        return f"{col} {self.op} {_literal(self.values[0])}"

    def test(self, value: Any) -> bool:
        if self.op == "IS NULL":
            return value is None
        if value is None:
            return False
        if self.op == "IS NOT NULL":
            return True
        if self.op == "IN":
            return value in self.values
        c = self.values[0]
        return {
            "=": value == c, "<>": value != c, "<": value < c, "<=": value <= c,
            ">": value > c, ">=": value >= c,
        }[self.op]


def _literal(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


@dataclass(frozen=True)
class Agg:
    func: str  # COUNT(*) = "count_star", "count", "sum", "avg"
    var: str | None = None


@dataclass(frozen=True)
class Ref:
    """A SELECT item naming ``var`` through an explicit column (e.g. a second column of
    the same join variable: ``SELECT G1.dst, G2.src`` with ``G1.dst = G2.src``)."""

    var: str
    alias: str
    column: str


def _var_of(item: str | Ref | Agg) -> str | None:
    if isinstance(item, Ref):
        return item.var
    return item if isinstance(item, str) else None


@dataclass(frozen=True)
class QuerySpec:
    """A generated query: atoms over variables, filters, output; renders to SQL and has
    a brute-force evaluator (used to validate the DuckDB oracle itself)."""

    family: str
    atoms: tuple[Atom, ...]
    select: tuple[str | Ref | Agg, ...]
    refs: tuple[tuple[str, str, str], ...]  # (var, alias, column) used in SELECT/GROUP BY
    filters: tuple[Cond, ...] = ()
    distinct: bool = False
    group_by: str | None = None
    select_star: bool = False
    join_syntax: bool = False
    chain: bool = True
    flip_equalities: tuple[int, ...] = ()  # indexes of equalities written right = left
    redundant: bool = False  # add an equality implied by the others
    on_filters: bool = False  # with join_syntax: filters of later atoms go into ON
    out_aliases: bool = False
    domain: int = 6
    sql: str = field(default="", compare=False)

    # structure
    @property
    def tables(self) -> tuple[Table, ...]:
        seen: dict[str, Table] = {}
        for a in self.atoms:
            seen.setdefault(a.table.name, a.table)
        return tuple(seen.values())

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v for a in self.atoms for v in a.vars))

    def occurrences(self, var: str) -> list[tuple[str, str]]:
        return [
            (a.alias, a.table.columns[i][0])
            for a in self.atoms
            for i, v in enumerate(a.vars)
            if v == var
        ]

    @property
    def join_vars(self) -> frozenset[str]:
        return frozenset(v for v in self.variables if len(self.occurrences(v)) > 1)

    def var_type(self, var: str) -> str:
        for a in self.atoms:
            for i, v in enumerate(a.vars):
                if v == var:
                    return a.table.columns[i][1]
        raise KeyError(var)

    def join_columns(self) -> set[tuple[str, str]]:
        jv = self.join_vars
        return {
            (a.table.name, a.table.columns[i][0])
            for a in self.atoms
            for i, v in enumerate(a.vars)
            if v in jv
        }

    def edges(self) -> tuple[frozenset[str], ...]:
        return tuple(frozenset(a.vars) for a in self.atoms)

    @property
    def is_aggregate(self) -> bool:
        return any(isinstance(s, Agg) for s in self.select)

    @property
    def shape(self) -> str:
        """full / proj-fc / proj-nfc (prefixed distinct-), groupby, agg."""
        if self.is_aggregate:
            return "groupby" if self.group_by else "agg"
        free = frozenset(v for v in map(_var_of, self.select) if v is not None)
        if free == frozenset(self.variables):
            kind = "full"
        elif is_free_connex(self.edges(), free):
            kind = "proj-fc"
        else:
            kind = "proj-nfc"
        return ("distinct-" if self.distinct else "") + kind

    # rendering
    def ref(self, var: str) -> str:
        for v, alias, col in self.refs:
            if v == var:
                return f"{alias}.{col}"
        raise KeyError(var)

    def render(self) -> str:
        ddl = "\n".join(t.ddl() for t in self.tables)
        items: list[str] = []
        if self.select_star:
            items = ["*"]
        else:
            for i, s in enumerate(self.select):
                if isinstance(s, Agg):
                    arg = "*" if s.func == "count_star" else self.ref(s.var or "")
                    fn = "COUNT" if s.func == "count_star" else s.func.upper()
                    text = f"{fn}({arg})"
                elif isinstance(s, Ref):
                    text = f"{s.alias}.{s.column}"
                else:
                    text = self.ref(s)
                items.append(f"{text} AS c{i}" if self.out_aliases else text)
        equalities: dict[int, list[str]] = {}
        index = {a.alias: i for i, a in enumerate(self.atoms)}
        pairs: list[tuple[tuple[str, str], tuple[str, str]]] = []
        for var in self.variables:
            occ = self.occurrences(var)
            for i in range(1, len(occ)):
                pairs.append((occ[i - 1] if self.chain else occ[0], occ[i]))
            if self.redundant and len(occ) >= 2:
                pairs.append((occ[0], occ[-1]))
        for n, (left, right) in enumerate(pairs):
            at = max(index[left[0]], index[right[0]])
            if n in self.flip_equalities:
                left, right = right, left
            equalities.setdefault(at, []).append(
                f"{left[0]}.{left[1]} = {right[0]}.{right[1]}"
            )
        where: list[str] = []
        filters = list(self.filters)
        if self.join_syntax:
            parts = [self.atoms[0].from_item()]
            for j, a in enumerate(self.atoms[1:], start=1):
                conds = equalities.get(j)
                assert conds, f"atom {a.alias} is not connected to an earlier atom"
                if self.on_filters:
                    conds = conds + [f.sql() for f in filters if f.alias == a.alias]
                    filters = [f for f in filters if f.alias != a.alias]
                parts.append(f"JOIN {a.from_item()} ON {' AND '.join(conds)}")
            from_sql = "\n  ".join(parts)
        else:
            from_sql = ", ".join(a.from_item() for a in self.atoms)
            where = [c for j in sorted(equalities) for c in equalities[j]]
        where += [f.sql() for f in filters]
        sql = "SELECT " + ("DISTINCT " if self.distinct else "") + ", ".join(items)
        sql += "\nFROM " + from_sql
        if where:
            sql += "\nWHERE " + "\n  AND ".join(where)
        if self.group_by:
            sql += f"\nGROUP BY {self.ref(self.group_by)}"
        return f"{ddl}\n{sql};\n"

    # brute-force evaluation
    def evaluate(self, db: dict[str, Counter[Row]]) -> Counter[Row]:
        """The query result by nested hash joins in Python (SQL NULL semantics)."""
        bindings: Counter[tuple[tuple[str, Any], ...]] = Counter({(): 1})
        for atom in self.atoms:
            flt = [f for f in self.filters if f.alias == atom.alias]
            cols = [c for c, _ in atom.table.columns]
            rows = [
                (r, m)
                for r, m in db.get(atom.table.name, Counter()).items()
                if all(f.test(r[cols.index(f.column)]) for f in flt)
            ]
            nxt: Counter[tuple[tuple[str, Any], ...]] = Counter()
            for b, bm in bindings.items():
                env = dict(b)
                for r, m in rows:
                    new = dict(env)
                    ok = True
                    for v, val in zip(atom.vars, r):
                        if v in new:
                            if val is None or new[v] is None or new[v] != val:
                                ok = False
                                break
                        else:
                            new[v] = val
                    if ok:
                        nxt[tuple(sorted(new.items()))] += bm * m
            bindings = nxt
        envs = [(dict(b), m) for b, m in bindings.items()]
        if self.select_star:
            out_vars = [v for a in self.atoms for v in a.vars]
        else:
            out_vars = None
        if not self.is_aggregate:
            sel = out_vars or [v for v in map(_var_of, self.select) if v is not None]
            res: Counter[Row] = Counter()
            for env, m in envs:
                res[tuple(env[v] for v in sel)] += m
            if self.distinct:
                res = Counter(dict.fromkeys(res, 1))
            return res
        groups: dict[Any, list[tuple[dict[str, Any], int]]] = {}
        for env, m in envs:
            key = env[self.group_by] if self.group_by else None
            groups.setdefault(key, []).append((env, m))
        if not self.group_by and not groups:
            groups[None] = []
        res = Counter()
        for key, members in groups.items():
            row = []
            for s in self.select:
                if not isinstance(s, Agg):
                    row.append(key)
                    continue
                if s.func == "count_star":
                    row.append(sum(m for _, m in members))
                    continue
                vals = [(e[s.var], m) for e, m in members if e[s.var] is not None]
                if s.func == "count":
                    row.append(sum(m for _, m in vals))
                elif not vals:
                    row.append(None)
                elif s.func == "sum":
                    row.append(sum(v * m for v, m in vals))
                else:
                    row.append(sum(v * m for v, m in vals) / sum(m for _, m in vals))
            res[tuple(row)] += 1
        return res


def _finish(spec: QuerySpec) -> QuerySpec:
    assert is_acyclic(spec.edges()), spec
    return QuerySpec(**{**spec.__dict__, "sql": spec.render()})


# -- query generation ------------------------------------------------------------------
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class _Builder:
    """Collects atoms for one structure in one naming mode."""

    def __init__(self, c: Chooser, mode: str, payload: str | None) -> None:
        self.c = c
        self.mode = mode  # "self": one table G(src, dst[, w]); "rel": one table per atom
        self.payload = payload  # None or a SQL type of an extra non-join column
        self.atoms: list[Atom] = []
        self.unary_shared = c.boolean(0.5)
        self._g: Table | None = None

    def binary(self, prefix: str, u: str, v: str) -> None:
        if self.c.boolean(0.3):
            u, v = v, u
        n = len(self.atoms) + 1
        if self.mode == "self":
            if self._g is None:
                cols = [("src", "INT"), ("dst", "INT")]
                if self.payload:
                    cols.append(("w", self.payload))
                self._g = Table("G", tuple(cols))
            alias = f"G{n}"
            vs = (u, v, f"{alias}.w") if self.payload else (u, v)
            self.atoms.append(Atom(alias, self._g, vs))
            return
        name = f"{prefix}{sum(a.alias.startswith(prefix) for a in self.atoms) + 1}"
        cols = [(u, "INT"), (v, "INT")]
        vs = (u, v)
        if self.payload and self.c.boolean(0.6):
            cols.append(("w", self.payload))
            vs = (u, v, f"{name}.w")
        self.atoms.append(Atom(name, Table(name, tuple(cols)), vs))

    def unary(self, var: str) -> None:
        k = sum(a.alias.startswith("V") for a in self.atoms) + 1
        if self.unary_shared:
            self.atoms.append(Atom(f"V{k}", Table("V", (("v", "INT"),)), (var,)))
        else:
            self.atoms.append(Atom(f"V{k}", Table(f"V{k}", (("v", "INT"),)), (var,)))


def _structure(c: Chooser, family: str) -> list[Atom]:
    mode = c.choice(["self", "rel"])
    payload = c.choice([None, None, "INT", "FLOAT", "TEXT"])
    b = _Builder(c, mode, payload)
    letters = iter(_LETTERS)
    if family == "path":
        k = c.integer(2, 5)
        vs = [next(letters) for _ in range(k + 1)]
        for i in range(k):
            b.binary("R", vs[i], vs[i + 1])
    elif family == "star":
        k = c.integer(2, 5)
        center = next(letters)
        for _ in range(k):
            b.binary("S", center, next(letters))
    elif family == "comb":
        k = c.integer(1, 3)
        vs = [next(letters) for _ in range(k + 1)]
        for i in range(k):
            b.binary("R", vs[i], vs[i + 1])
        hang = [vs[0], vs[-1]] + [v for v in vs[1:-1] if c.boolean(0.4)]
        for v in hang:
            b.unary(v)
    elif family == "snowflake":
        k = c.integer(2, 3)
        center = next(letters)
        for _ in range(k):
            inner, outer = next(letters), next(letters)
            b.binary("A", center, inner)
            b.binary("B", inner, outer)
    else:
        raise ValueError(f"unknown family {family!r}")
    return b.atoms


def _value_domain(typ: str, domain: int) -> list[Any]:
    if typ == "FLOAT":
        return [i * 0.5 - 1.0 for i in range(domain)]
    if typ == "TEXT":
        return list(_LETTERS[:domain])
    if typ == "BOOL":
        return [i % 2 == 1 for i in range(domain)]
    return list(range(domain))


def _filter(c: Chooser, atom: Atom, join_vars: frozenset[str], domain: int) -> Cond:
    i = c.integer(0, len(atom.vars) - 1)
    col, typ = atom.table.columns[i]
    vals = _value_domain(typ, domain)
    ops = ["<>", ">", "<", ">=", "<=", "=", "IN", "IS NOT NULL"]
    if typ == "TEXT":
        ops = ["<>", "=", "IN", "IS NOT NULL"]
    if atom.vars[i] not in join_vars:
        ops.append("IS NULL")
    op = c.choice(ops)
    if op in ("IS NULL", "IS NOT NULL"):
        return Cond(atom.alias, col, op)
    if op == "IN":
        picked = sorted({c.choice(vals) for _ in range(c.integer(1, 3))})
        return Cond(atom.alias, col, op, tuple(picked))
    return Cond(atom.alias, col, op, (c.choice(vals),), flip=c.boolean(0.15))


def _order(c: Chooser, items: list[T]) -> list[T]:
    rest = list(items)
    out = []
    while rest:
        out.append(rest.pop(c.integer(0, len(rest) - 1)))
    return out


def build_query(c: Chooser, family: str, shape: str | None = None) -> QuerySpec:
    """One random query of ``family``; ``shape`` in :data:`SHAPES` or random."""
    atoms = _structure(c, family)
    probe = QuerySpec(family, tuple(atoms), (), ())
    variables = list(probe.variables)
    join_vars = probe.join_vars
    domain = c.integer(2, 5)
    filters = tuple(
        _filter(c, a, join_vars, domain)
        for a in atoms
        for _ in range(c.choice([0, 0, 0, 0, 0, 1, 1, 2]))
    )
    refs = []
    for v in variables:
        alias, col = c.choice(probe.occurrences(v))
        refs.append((v, alias, col))
    shape = shape or c.choice(["full", "proj", "proj", "nfc", "groupby", "groupby", "agg"])
    distinct = False
    group_by = None
    star = False
    select: list[str | Ref | Agg] = []
    numeric = [v for v in variables if probe.var_type(v) in ("INT", "FLOAT")]

    def aggs() -> list[str | Ref | Agg]:
        out: list[str | Ref | Agg] = []
        for _ in range(c.integer(1, 3)):
            func = c.choice(["count_star", "count", "sum", "avg"])
            if func == "count_star":
                out.append(Agg(func))
            elif func == "count":
                out.append(Agg(func, c.choice(variables)))
            else:
                out.append(Agg(func, c.choice(numeric)))
        return out

    if shape == "full":
        star = c.boolean(0.2)
        select = list(variables) if star else _order(c, variables)
        distinct = c.boolean(0.3)
    elif shape in ("proj", "nfc"):
        chosen: list[str] = []
        if shape == "nfc":
            structural = [v for v in variables if "." not in v]
            edges = tuple(frozenset(x for x in e if x in structural) for e in probe.edges())
            options = _subsets_by_class(edges)["nfc"]
            if options:
                chosen = list(c.choice(options))
        if not chosen:
            chosen = [v for v in variables if c.boolean(0.5)] or [c.choice(variables)]
        chosen += [v for v in variables if "." in v and v not in chosen and c.boolean(0.2)]
        select = list(_order(c, chosen))
        twice = [v for v in chosen if v in join_vars]
        if twice and c.boolean(0.15):
            v = c.choice(twice)
            alias, col = c.choice(probe.occurrences(v))
            select.insert(c.integer(0, len(select)), Ref(v, alias, col))
        distinct = c.boolean(0.5)
    elif shape == "groupby":
        group_by = c.choice(variables)
        select = aggs()
        if not c.boolean(0.1):
            select.insert(c.integer(0, len(select)), group_by)
    elif shape == "agg":
        select = aggs()
    else:
        raise ValueError(f"unknown shape {shape!r}")
    spec = QuerySpec(
        family=family,
        atoms=tuple(atoms),
        select=tuple(select),
        refs=tuple(refs),
        filters=filters,
        distinct=distinct,
        group_by=group_by,
        select_star=star,
        join_syntax=c.boolean(0.3),
        chain=c.boolean(0.7),
        flip_equalities=tuple(i for i in range(len(atoms) * 2) if c.boolean(0.2)),
        redundant=c.boolean(0.1),
        on_filters=c.boolean(0.5),
        out_aliases=c.boolean(0.15),
        domain=domain,
    )
    return _finish(spec)


# -- update streams --------------------------------------------------------------------
def random_stream(
    rng: random.Random,
    relations: Mapping[str, int] | Sequence[str],
    n: int,
    dom: int,
    epoch: int | float,
    *,
    hot: float = 0.35,
    deletes: float = 0.3,
    mults: Sequence[int] = (1, 1, 1, 2),
) -> list[Record]:
    """``n`` random inserts and valid deletes (of present copies) of integer rows over
    ``range(dom)``, each column the hot value 0 with probability ``hot`` (so degrees
    cross the heavy/light thresholds). ``relations``: name -> arity, or names of binary
    relations. Epoch markers after every ``epoch`` updates (an int), or after an update
    with probability ``epoch`` (a float: epochs of random length, empty ones too).

    >>> stream = random_stream(random.Random(1), ["G"], 3, 4, 2)
    >>> [type(r).__name__ for r in stream]
    ['Update', 'Update', 'EpochEnd', 'Update']
    """
    arities = relations if isinstance(relations, Mapping) else dict.fromkeys(relations, 2)
    live: dict[str, Counter[tuple[int, ...]]] = {r: Counter() for r in arities}
    names = sorted(arities)
    out: list[Record] = []
    for k in range(n):
        rel = rng.choice(names)
        cur = live[rel]
        if cur and rng.random() < deletes:
            t = rng.choice(sorted(cur))
            m = rng.randint(1, cur[t])
            cur[t] -= m
            if not cur[t]:
                del cur[t]
            out.append(Update("-", rel, t, m))
        else:
            t = tuple(0 if rng.random() < hot else rng.randrange(dom)
                      for _ in range(arities[rel]))
            m = rng.choice(mults)
            cur[t] += m
            out.append(Update("+", rel, t, m))
        if isinstance(epoch, int):
            if (k + 1) % epoch == 0:
                out.append(EPOCH_END)
        else:
            while rng.random() < epoch:
                out.append(EPOCH_END)
    return out


def flip_rounds(
    rng: random.Random,
    background: Iterable[tuple[str, Row]],
    rounds: Iterable[tuple[str, list[Row]]],
) -> Iterator[Record]:
    """Inserts of the ``background`` rows (relation, row), an epoch; then per round
    (relation, hot rows) the hot rows inserted in shuffled order, an epoch, deleted
    again, an epoch: a hot value's degree crosses the heavy/light thresholds both ways
    while the background keeps N put."""
    for rel, t in background:
        yield Update("+", rel, t, 1)
    yield EPOCH_END
    for rel, hot in rounds:
        rng.shuffle(hot)
        for t in hot:
            yield Update("+", rel, t, 1)
        yield EPOCH_END
        for t in hot:
            yield Update("-", rel, t, 1)
        yield EPOCH_END


TableCols = Sequence[tuple[str, Sequence[tuple[str, str]]]]


def build_stream(
    c: Chooser,
    tables: TableCols,
    *,
    domain: int = 5,
    join_columns: set[tuple[str, str]] | None = None,
    max_updates: int = 60,
    allow_markers: bool | None = None,
) -> tuple[list[Record], int | None]:
    """A valid update stream (deletes only of present copies) and an epoch size.

    Ops: inserts (multiplicity 1..3), deletes of some present copies, re-inserts of
    deleted rows, deletes of a whole relation or of everything, and ``EpochEnd`` markers
    when the epoch mode has them. ``join_columns`` (``(table, column)``; ``None``: all
    INT columns) get NULLs only when the stream draws "NULLs in join columns".
    Returns ``(records, epoch_size)``; ``epoch_size`` ``None`` means markers only.
    """
    names = [t for t, _ in tables]
    cols = {t: list(cs) for t, cs in tables}
    if join_columns is None:
        join_columns = {(t, col) for t, cs in tables for col, typ in cs if typ == "INT"}
    null_payload = c.boolean(0.5)
    null_join = c.boolean(0.2)
    markers = c.boolean(0.4) if allow_markers is None else allow_markers
    epoch_size: int | None
    if markers and c.boolean(0.5):
        epoch_size = None
    elif c.boolean(0.5):
        epoch_size = c.integer(1, 5)
    else:
        epoch_size = c.integer(1, 50)
    long_stream = c.boolean(0.8)  # shrinks to False: short streams
    half = max_updates // 2
    n_updates = half + c.integer(0, max_updates - half) if long_stream else c.integer(
        0, max_updates
    )

    def value(table: str, col: str, typ: str) -> Any:
        nullable = null_join if (table, col) in join_columns else null_payload
        i = c.integer(0, domain - 1 + (1 if nullable else 0))
        if i >= domain:
            return None
        return _value_domain(typ, domain)[i]

    def new_row(table: str) -> Row:
        return tuple(value(table, col, typ) for col, typ in cols[table])

    bags: dict[str, Counter[Row]] = {t: Counter() for t in names}
    deleted: dict[str, set[Row]] = {t: set() for t in names}
    out: list[Record] = []
    count = 0
    kinds = ["insert"] * 14 + ["delete"] * 5 + ["reinsert"] * 2 + ["delete_rel"]
    if markers:
        kinds += ["marker"] * 3
    kinds.append("delete_all")

    def delete(table: str, row: Row, m: int) -> None:
        nonlocal count
        bags[table][row] -= m
        if not bags[table][row]:
            del bags[table][row]
        deleted[table].add(row)
        out.append(Update("-", table, row, m))
        count += 1

    while count < n_updates:
        kind = c.choice(kinds)
        present = [t for t in names if bags[t]]
        if kind == "marker":
            out.append(EPOCH_END)
            continue
        if kind in ("delete", "delete_rel", "delete_all") and not present:
            kind = "insert"
        if kind == "reinsert" and not any(deleted[t] for t in names):
            kind = "insert"
        if kind == "insert":
            table = c.choice(names)
            row = new_row(table)
            m = c.integer(1, 3)
            bags[table][row] += m
            out.append(Update("+", table, row, m))
            count += 1
        elif kind == "reinsert":
            table = c.choice([t for t in names if deleted[t]])
            row = c.choice(sorted(deleted[table], key=repr))
            m = c.integer(1, 3)
            bags[table][row] += m
            out.append(Update("+", table, row, m))
            count += 1
        elif kind == "delete":
            table = c.choice(present)
            row = c.choice(sorted(bags[table], key=repr))
            delete(table, row, c.integer(1, bags[table][row]))
        elif kind == "delete_rel":
            table = c.choice(present)
            for row in sorted(bags[table], key=repr):
                delete(table, row, bags[table][row])
        else:
            for table in present:
                for row in sorted(bags[table], key=repr):
                    delete(table, row, bags[table][row])
    return out, epoch_size


def spec_tables(spec: QuerySpec) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    return [(t.name, t.columns) for t in spec.tables]


# -- cases -----------------------------------------------------------------------------
class Case(NamedTuple):
    """A query, an update stream and the epoch size (``None``: markers only)."""

    sql: str
    records: list[Record]
    epoch_size: int | None
    spec: QuerySpec | None = None
    rates: tuple[float, ...] | None = None
    """Update rates per FROM item for ``compile_query(rates=...)`` (steer the join tree)."""

    def __repr__(self) -> str:
        return format_case(self)


def format_case(case: Case) -> str:
    """The case as Python source for a regression test."""
    family = f"  # family={case.spec.family} shape={case.spec.shape}\n" if case.spec else ""
    ups = ",\n".join(f"        {_update_src(r)}" for r in case.records)
    rates = f"    rates={case.rates!r},\n" if case.rates else ""
    return (
        f"Case(\n{family}    sql={case.sql!r},\n    records=[\n{ups}\n    ],\n"
        f"    epoch_size={case.epoch_size!r},\n{rates})"
    )


def _update_src(r: Record) -> str:
    if isinstance(r, EpochEnd):
        return "EPOCH_END"
    m = "" if r.mult == 1 else f", {r.mult}"
    return f"Update({r.op!r}, {r.relation!r}, {r.row!r}{m})"


def make_case(c: Chooser, family: str, shape: str | None = None, max_updates: int = 60) -> Case:
    spec = build_query(c, family, shape)
    rates = None
    if c.boolean(0.4):
        rates = tuple(c.choice([1.0, 10.0, 100.0]) for _ in spec.atoms)
    records, epoch_size = build_stream(
        c, spec_tables(spec), domain=spec.domain, join_columns=spec.join_columns(),
        max_updates=max_updates,
    )
    return Case(spec.sql, records, epoch_size, spec, rates)


def random_case(
    rng: random.Random, family: str, shape: str | None = None, max_updates: int = 60
) -> Case:
    """A seeded-random case (reproducible from the seed, no hypothesis)."""
    return make_case(RandomChooser(rng), family, shape, max_updates)


@st.composite
def queries(draw: Callable[..., Any], family: str, shape: str | None = None) -> QuerySpec:
    """Random acyclic queries of one family."""
    return build_query(HypothesisChooser(draw), family, shape)


@st.composite
def cases(
    draw: Callable[..., Any],
    family: str | None = None,
    shape: str | None = None,
    max_updates: int = 60,
) -> Case:
    """(query, valid update stream, epoch size) for one family (or any family)."""
    c = HypothesisChooser(draw)
    fam = family or c.choice(FAMILIES)
    return make_case(c, fam, shape, max_updates)


def stream_case(c: Chooser, sql: str, domain: int = 4, max_updates: int = 60) -> Case:
    """A random stream for a fixed SQL text (tables read from its CREATE TABLEs)."""
    tables, _ = split_query(sql)
    typed = [(n, [(col, _norm_type(t)) for col, t in cs]) for n, cs in tables]
    records, epoch_size = build_stream(c, typed, domain=domain, max_updates=max_updates)
    return Case(sql, records, epoch_size)


def seeded_case(sql: str, seed: str | int, domain: int = 4, max_updates: int = 60) -> Case:
    """A reproducible pseudo-random stream for ``sql`` (no hypothesis)."""
    return stream_case(RandomChooser(random.Random(seed)), sql, domain, max_updates)


@st.composite
def streams_for(
    draw: Callable[..., Any], sql: str, domain: int = 4, max_updates: int = 60
) -> Case:
    """Hypothesis version of :func:`stream_case`."""
    return stream_case(HypothesisChooser(draw), sql, domain, max_updates)


def _norm_type(t: str) -> str:
    t = t.upper()
    if t in ("FLOAT", "DOUBLE", "REAL", "DECIMAL", "NUMERIC"):
        return "FLOAT"
    if t in ("TEXT", "VARCHAR", "STRING", "CHAR"):
        return "TEXT"
    if t in ("BOOL", "BOOLEAN"):
        return "BOOL"
    return "INT"


# -- named queries (reproducible families) ---------------------------------------------
_G = "CREATE TABLE G(src INT, dst INT);\n"
_GW = "CREATE TABLE G(src INT, dst INT, w INT);\n"
_R = (
    "CREATE TABLE R1(a INT, b INT);\nCREATE TABLE R2(b INT, c INT);\n"
    "CREATE TABLE R3(c INT, d INT, w FLOAT);\nCREATE TABLE R4(d INT, e INT);\n"
)
_V = "CREATE TABLE V1(v INT);\nCREATE TABLE V2(v INT);\n"
_S = (
    "CREATE TABLE A1(x INT, y INT);\nCREATE TABLE B1(y INT, z INT, t TEXT);\n"
    "CREATE TABLE A2(x INT, u INT);\nCREATE TABLE B2(u INT, s INT);\n"
)
_P3 = "FROM G G1, G G2, G G3 WHERE G1.dst = G2.src AND G2.dst = G3.src"

NAMED_QUERIES: dict[str, str] = {
    # paths over one edge table
    "path2_full": _G + "SELECT G1.src, G1.dst, G2.dst FROM G G1, G G2 WHERE G1.dst = G2.src;",
    "path3_full_star": _G + f"SELECT * {_P3};",
    "path3_fc_middle_distinct": _G + f"SELECT DISTINCT G2.src, G2.dst {_P3};",
    "path3_fc_prefix": _G + f"SELECT G2.src, G3.src {_P3};",
    "path3_nfc_endpoints": _G + f"SELECT G1.src, G3.dst {_P3};",
    "path3_nfc_endpoints_distinct": _G + f"SELECT DISTINCT G1.src, G3.dst {_P3};",
    "path3_filters": _G + f"SELECT G1.src, G2.src, G3.dst {_P3} AND G3.dst > 2 AND "
    "G1.src IN (1, 2, 3) AND G2.src <> 1;",
    "path4_boolean_count": _G + "SELECT COUNT(*) FROM G G1, G G2, G G3, G G4 WHERE "
    "G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G4.src;",
    "path5_endpoints_group": _G + "SELECT G1.src, COUNT(*), SUM(G5.dst) FROM G G1 JOIN G G2 "
    "ON G1.dst = G2.src JOIN G G3 ON G2.dst = G3.src JOIN G G4 ON G3.dst = G4.src "
    "JOIN G G5 ON G4.dst = G5.src GROUP BY G1.src;",
    "path3_endpoints_group_sum": _G + "SELECT G1.src, G3.dst, SUM(G2.dst) FROM G G1, G G2, "
    "G G3 WHERE G1.dst = G2.src AND G2.dst = G3.src GROUP BY G1.src, G3.dst;",
    "path3_payload_avg": _GW + "SELECT G2.dst, AVG(G1.w), COUNT(G3.w), SUM(G3.w) FROM G G1, "
    "G G2, G G3 WHERE G1.dst = G2.src AND G2.dst = G3.src GROUP BY G2.dst;",
    # paths over distinct tables
    "rel_path4_full": _R + "SELECT R1.a, R1.b, R2.c, R3.d, R4.e, R3.w FROM R1, R2, R3, R4 "
    "WHERE R1.b = R2.b AND R2.c = R3.c AND R3.d = R4.d;",
    "rel_path4_nfc": _R + "SELECT R1.a, R4.e FROM R1, R2, R3, R4 "
    "WHERE R1.b = R2.b AND R2.c = R3.c AND R3.d = R4.d AND R3.w IS NOT NULL;",
    "rel_path4_agg": _R + "SELECT COUNT(*), SUM(R3.w), AVG(R3.w), COUNT(R3.w) FROM R1, R2, R3, "
    "R4 WHERE R1.b = R2.b AND R2.c = R3.c AND R3.d = R4.d;",
    # stars
    "star3_full": _G + "SELECT G1.src, G1.dst, G2.dst, G3.dst FROM G G1, G G2, G G3 "
    "WHERE G1.src = G2.src AND G1.src = G3.src;",
    "star3_leaves_nfc": _G + "SELECT G1.dst, G2.dst FROM G G1, G G2, G G3 "
    "WHERE G1.src = G2.src AND G2.src = G3.dst;",
    "star3_center_count": _G + "SELECT G1.src, COUNT(*), AVG(G2.dst) FROM G G1, G G2, G G3 "
    "WHERE G1.src = G2.src AND G1.src = G3.src GROUP BY G1.src;",
    "star4_distinct_center": _G + "SELECT DISTINCT G1.src FROM G G1, G G2, G G3, G G4 "
    "WHERE G1.src = G2.src AND G1.src = G3.src AND G1.src = G4.src AND G4.dst >= 2;",
    # combs
    "comb_path2": _G + _V + "SELECT V1.v, G1.dst, V2.v FROM V1, G G1, G G2, V2 "
    "WHERE V1.v = G1.src AND G1.dst = G2.src AND G2.dst = V2.v;",
    "comb_path2_count": _G + _V + "SELECT COUNT(*) FROM V1, G G1, G G2, V2 "
    "WHERE V1.v = G1.src AND G1.dst = G2.src AND G2.dst = V2.v;",
    "comb_path3_ends_nfc": _G + _V + "SELECT DISTINCT V1.v, V2.v FROM V1, G G1, G G2, G G3, "
    "V2 WHERE V1.v = G1.src AND G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = V2.v;",
    # snowflakes
    "snowflake2_full": _S + "SELECT A1.x, A1.y, B1.z, A2.u, B2.s, B1.t FROM A1, B1, A2, B2 "
    "WHERE A1.y = B1.y AND A1.x = A2.x AND A2.u = B2.u;",
    "snowflake2_tips": _S + "SELECT B1.z, B2.s FROM A1, B1, A2, B2 "
    "WHERE A1.y = B1.y AND A1.x = A2.x AND A2.u = B2.u;",
    "snowflake2_group_text": _S + "SELECT A1.x, COUNT(B1.t), COUNT(*) FROM A1, B1, A2, B2 "
    "WHERE A1.y = B1.y AND A1.x = A2.x AND A2.u = B2.u AND B1.t IN ('a', 'b') GROUP BY A1.x;",
    # single atoms
    "single_group": _G + "SELECT src, COUNT(*), SUM(dst), AVG(dst) FROM G GROUP BY src;",
    "single_distinct_filter": _G + "SELECT DISTINCT dst FROM G WHERE src IN (1, 2);",
    # grouping by a non-join column (NULL groups)
    "group_by_nulls": _GW + "SELECT G1.w, COUNT(*), SUM(G2.w) FROM G G1, G G2 "
    "WHERE G1.dst = G2.src GROUP BY G1.w;",
}
"""Hand-written queries per family and output shape (reproducible by name)."""
