"""DuckDB as the reference answer for property tests (docs/contributing.md).

The oracle keeps the database as a Python bag per relation (the truth, so deletes of
``m`` copies of an exact row are exact, NULLs included), mirrors the changed tables into
an in-memory DuckDB before each query, runs the query's SELECT and counts the rows.

Example:
    >>> from core.records import Update
    >>> o = DuckDBOracle("CREATE TABLE G(src INT, dst INT);"
    ...                  "SELECT G1.src, G2.dst FROM G G1, G G2 WHERE G1.dst = G2.src")
    >>> o.apply(Update("+", "G", (1, 2), 2))
    >>> o.apply(Update("+", "G", (2, 3)))
    >>> o.result()
    Counter({(1, 3): 2})
    >>> o.apply(Update("-", "G", (1, 2)))
    >>> o.result()
    Counter({(1, 3): 1})
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import duckdb
import sqlglot
from sqlglot import exp

from core.records import EPOCH_END, EpochDelta, EpochEnd, Record, Update

if TYPE_CHECKING:
    from dataflow.api import View

Row = tuple[Any, ...]

SIGNIFICANT_DIGITS = 9
"""Floats are compared after rounding to this many significant digits (AVG, float SUM)."""

DISABLED_OPTIMIZERS = "common_subplan"
"""DuckDB 2.0.0's common-subplan optimizer merges self-join subtrees whose columns differ
and returns wrong rows (duckdb/duckdb#25819 family): e.g. on G = {(0,1,0), (0,0,0)},
``SELECT G2.w, G4.dst FROM G G1, G G2, G G3, G G4 WHERE G1.dst = G2.src AND
G1.src = G3.src AND G3.dst = G4.src`` gives (0,0) x 4 instead of (0,0) x 2, (0,1) x 2."""

_DUCK_TYPES = {
    "INT": "BIGINT", "INTEGER": "BIGINT", "BIGINT": "BIGINT", "SMALLINT": "BIGINT",
    "TINYINT": "BIGINT", "UBIGINT": "HUGEINT", "HUGEINT": "HUGEINT",
    "FLOAT": "DOUBLE", "DOUBLE": "DOUBLE", "REAL": "DOUBLE", "DECIMAL": "DOUBLE",
    "NUMERIC": "DOUBLE",
    "TEXT": "VARCHAR", "VARCHAR": "VARCHAR", "CHAR": "VARCHAR", "STRING": "VARCHAR",
    "NCHAR": "VARCHAR", "NVARCHAR": "VARCHAR",
    "BOOL": "BOOLEAN", "BOOLEAN": "BOOLEAN",
}
"""SQL type names -> DuckDB types. FLOAT becomes DOUBLE (DuckDB's FLOAT is 4 bytes,
ivmflow's FLOAT is a Python float) and every integer type 64-bit or wider."""


# -- normalisation -----------------------------------------------------------------------
_NAN = float("nan")
"""Every NaN normalises to this one object (a dict finds a key by identity first)."""


def normalise_value(value: Any) -> Any:
    """Make a value comparable across DuckDB and ivmflow.

    >>> normalise_value(Decimal("2.50")), normalise_value(1 / 3), normalise_value(-0.0)
    (2.5, 0.333333333, 0.0)
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, Decimal):
        if value == value.to_integral_value():
            return int(value)
        value = float(value)
    if isinstance(value, float):
        if math.isnan(value):
            return _NAN  # (one object: NaN equals only itself, so rows with it compare)
        if value == 0.0 or math.isinf(value):
            return 0.0 if value == 0.0 else value
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if hasattr(value, "item"):  # numpy scalars
        return normalise_value(value.item())
    return value


def normalise_row(row: Iterable[Any]) -> Row:
    return tuple(normalise_value(v) for v in row)


def normalise_rows(rows: Iterable[tuple[int, Iterable[Any]]]) -> Counter[Row]:
    """``(mult, row)`` pairs -> a Counter of normalised rows (zero entries dropped)."""
    out: Counter[Row] = Counter()
    for mult, row in rows:
        key = normalise_row(row)
        out[key] += mult
        if out[key] == 0:
            del out[key]
    return out


def accumulate(
    counter: Counter[Row], epoch_delta: EpochDelta | Iterable[tuple[int, Iterable[Any]]]
) -> Counter[Row]:
    """Add one epoch delta (normalised) to ``counter`` in place; returns ``counter``.

    Entries that cancel to zero are removed, so the result can be compared with ``==``
    to :meth:`DuckDBOracle.result`. Negative entries stay (they are a bug to report).
    """
    rows = epoch_delta.rows if isinstance(epoch_delta, EpochDelta) else epoch_delta
    for mult, row in rows:
        key = normalise_row(row)
        counter[key] += mult
        if counter[key] == 0:
            del counter[key]
    return counter


def _kind(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return type(value).__name__


def diff_counters(actual: Counter[Row], expected: Counter[Row], limit: int = 12) -> str:
    """A readable difference of two bags ('' when they are equal, value types included:
    an INT SUM must be an int, AVG a float)."""
    lines: list[str] = []
    keys = sorted(set(actual) | set(expected), key=repr)
    for key in keys:
        a, e = actual.get(key, 0), expected.get(key, 0)
        if a != e:
            lines.append(f"  row {key!r}: got mult {a}, expected {e}")
    if not lines:
        actual_keys = {k: k for k in actual}
        for key in expected:
            got = actual_keys[key]
            for g, w in zip(got, key):
                if None not in (_kind(g), _kind(w)) and _kind(g) != _kind(w):
                    lines.append(f"  row {got!r}: value types differ from expected {key!r}")
                    break
    if len(lines) > limit:
        lines = [*lines[:limit], f"  ... and {len(lines) - limit} more"]
    return "\n".join(lines)


# -- the oracle --------------------------------------------------------------------------
def split_query(sql_text: str) -> tuple[list[tuple[str, list[tuple[str, str]]]], str]:
    """``(tables, select_sql)``: each table as ``(name, [(column, SQL type), ...])`` and the
    one SELECT rendered for DuckDB."""
    tables: list[tuple[str, list[tuple[str, str]]]] = []
    selects: list[str] = []
    for stmt in sqlglot.parse(sql_text, read="duckdb"):
        if stmt is None:
            continue
        if isinstance(stmt, exp.Create) and isinstance(stmt.this, exp.Schema):
            cols = []
            for coldef in stmt.this.expressions:
                kind = coldef.args.get("kind")
                cols.append((coldef.name, kind.this.name if kind is not None else "TEXT"))
            tables.append((stmt.this.this.name, cols))
        elif isinstance(stmt, (exp.Select, exp.SetOperation)):
            selects.append(stmt.sql(dialect="duckdb"))
        else:
            raise ValueError(f"oracle: unexpected statement {stmt.sql()!r}")
    if len(selects) != 1:
        raise ValueError(f"oracle: expected one SELECT, found {len(selects)}")
    return tables, selects[0]


class DuckDBOracle:
    """The query's answer on the current database, computed by DuckDB (bag semantics)."""

    def __init__(self, sql_text: str) -> None:
        tables, self.select_sql = split_query(sql_text)
        self.con = duckdb.connect(":memory:")
        self.con.execute(f"SET disabled_optimizers = '{DISABLED_OPTIMIZERS}'")
        self.bags: dict[str, Counter[Row]] = {}
        self.arity: dict[str, int] = {}
        self._types: dict[str, list[str]] = {}
        self._names: dict[str, str] = {}
        self._dirty: set[str] = set()
        for name, cols in tables:
            duck = [_DUCK_TYPES.get(t.upper(), t.upper()) for _, t in cols]
            defs = ", ".join(f'"{c}" {t}' for (c, _), t in zip(cols, duck))
            self.con.execute(f'CREATE TABLE "{name}" ({defs})')
            self.bags[name] = Counter()
            self.arity[name] = len(cols)
            self._types[name] = duck
            self._names[name.lower()] = name

    def close(self) -> None:
        self.con.close()

    def relation(self, name: str) -> str:
        try:
            return self._names[name.lower()]
        except KeyError:
            raise KeyError(f"oracle: unknown relation {name!r}") from None

    def apply(self, update: Update) -> None:
        """Insert or delete ``update.mult`` copies; deleting absent copies is an error."""
        rel = self.relation(update.relation)
        row = tuple(update.row)
        if len(row) != self.arity[rel]:
            raise ValueError(f"oracle: {rel} has arity {self.arity[rel]}, got row {row!r}")
        if update.mult < 1:
            raise ValueError(f"oracle: multiplicity must be positive, got {update.mult}")
        bag = self.bags[rel]
        if update.op == "+":
            bag[row] += update.mult
        else:
            if bag.get(row, 0) < update.mult:
                raise ValueError(
                    f"oracle: delete of {update.mult} copies of {row!r} from {rel}, "
                    f"{bag.get(row, 0)} present"
                )
            bag[row] -= update.mult
            if bag[row] == 0:
                del bag[row]
        self._dirty.add(rel)

    def apply_all(self, updates: Iterable[Update]) -> None:
        for u in updates:
            self.apply(u)

    def _sync(self) -> None:
        for rel in sorted(self._dirty):
            self.con.execute(f'DELETE FROM "{rel}"')
            rows = [r for r, m in self.bags[rel].items() for _ in range(m)]
            if rows:
                one = "(" + ", ".join(f"?::{t}" for t in self._types[rel]) + ")"
                params = [v for r in rows for v in r]
                self.con.execute(
                    f'INSERT INTO "{rel}" SELECT * FROM (VALUES {", ".join([one] * len(rows))})',
                    params,
                )
        self._dirty.clear()

    def raw_result(self) -> list[Row]:
        """The SELECT's rows as DuckDB returns them (not normalised)."""
        self._sync()
        return [tuple(r) for r in self.con.execute(self.select_sql).fetchall()]

    def result(self) -> Counter[Row]:
        """The query result as a bag of normalised rows (rows are counted inside DuckDB,
        so results with huge multiplicities stay cheap)."""
        self._sync()
        counted = self.con.execute(
            f"SELECT *, COUNT(*) AS __mult FROM ({self.select_sql}) AS __q GROUP BY ALL"
        ).fetchall()
        out: Counter[Row] = Counter()
        for *row, mult in counted:
            out[normalise_row(row)] += mult
        return out

    def database_size(self) -> int:
        return sum(sum(b.values()) for b in self.bags.values())


# -- checking a maintained view ---------------------------------------------------------
def check_stream(
    view: View,
    sql_text: str,
    records: Iterable[Record],
    *,
    check: Callable[[View], None] | None = None,
    check_updates: bool = False,
    label: Any = None,
) -> View:
    """Apply ``records`` to ``view`` (maintaining the query ``sql_text``) and to a
    :class:`DuckDBOracle`: after every epoch the accumulated deltas equal the oracle's
    answer, and at the end so does the snapshot. ``check(view)`` (invariants) runs at
    every epoch close, and after every update too with ``check_updates``; ``label``
    names the case in failures. Returns the view."""
    oracle = DuckDBOracle(sql_text)
    acc: Counter[Row] = Counter()

    def close() -> None:
        accumulate(acc, view.end_epoch())
        expected = oracle.result()
        assert acc == expected, (label, diff_counters(acc, expected))
        if check is not None:
            check(view)

    for rec in records:
        if isinstance(rec, EpochEnd):
            close()
            continue
        assert isinstance(rec, Update)
        view.apply(rec)
        oracle.apply(rec)
        if check is not None and check_updates:
            check(view)
    close()
    assert normalise_rows(view.snapshot()) == oracle.result(), label
    # (an aggregate's snapshot reads its maintained groups: the join's enumeration too)
    assert normalise_rows(view.snapshot(enumerate_join=True)) == oracle.result(), label
    oracle.close()
    return view


def bag_stream(draw: Any, tables: str, value: Callable[[str, Any], Row],
               epochs: int = 5, per_epoch: int = 12) -> list[Record]:
    """A hypothesis stream (``draw`` is a composite strategy's): up to ``epochs``
    epochs of up to ``per_epoch`` updates of ``tables`` (one letter a table, a letter
    twice is drawn twice as often): inserts of ``value(table, draw)`` rows, 1 or 2
    copies, and deletes of some copies of rows present."""
    from hypothesis import strategies as st

    held: dict[str, Counter[Row]] = {t: Counter() for t in tables}
    out: list[Record] = []
    for _ in range(draw(st.integers(1, epochs))):
        for _ in range(draw(st.integers(0, per_epoch))):
            table = draw(st.sampled_from(tables))
            present = [r for r, m in held[table].items() if m > 0]
            delete: bool = draw(st.booleans())
            if present and delete:
                row = draw(st.sampled_from(sorted(present, key=repr)))
                mult = draw(st.integers(1, held[table][row]))
                held[table][row] -= mult
                out.append(Update("-", table, row, mult))
            else:
                row = value(table, draw)
                mult = draw(st.integers(1, 2))
                held[table][row] += mult
                out.append(Update("+", table, row, mult))
        out.append(EPOCH_END)
    return out


def local_deltas(view: Any, records: Iterable[Record]) -> dict[tuple[str, int], list[Any]]:
    """The local runner's deltas of ``records`` through ``view`` (a maintained query),
    keyed as :func:`dataflow.distributed.stages.run_stages` keys a staged run's: ``("delta",
    epoch)`` -> its changes, sorted (what a staged run is compared with)."""
    out: dict[tuple[str, int], list[Any]] = {}
    for u in records:
        if isinstance(u, Update):
            view.apply(u)
        else:
            d = view.end_epoch()
            if d.rows:
                out[("delta", d.epoch)] = sorted(d.rows, key=repr)
    return out
