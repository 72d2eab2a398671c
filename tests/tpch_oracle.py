"""TPC-H streams for tests: generation (cached per session by the ``tpch_sf001`` fixture
of conftest.py), the stream's invariants, DuckDB's answer after every epoch, and
ivmflow's answers accumulated from its deltas for comparison.

- :func:`generate` writes ``ivmflow generate tpch``'s directory (skips the test when
  the ``tpch`` extra is not installed).
- :func:`check_stream` replays the update file as text bags: every delete removes a
  present row (byte for byte the line that inserted it), and counts per table/epoch.
- :class:`DuckReplay` / :func:`duckdb_answers_per_epoch` replay the stream into an
  in-memory DuckDB database epoch by epoch, with bag semantics (a delete removes exactly
  as many copies as it says, chosen by ``rowid``), bulk-loading each epoch through
  DuckDB's CSV reader, and return the query's rows after every epoch.
- :func:`accumulate_deltas` turns ivmflow's deltas ``(epoch, mult, row)`` (or
  :class:`core.records.EpochDelta`) into the result after every epoch;
  :func:`ivmflow_answers_per_epoch` runs a query file over an update file in process.
- :func:`compare_answers` compares per-epoch results as bags, numbers numerically
  (exact when both sides are exact, int or Decimal; else relative tolerance 1e-9), dates
  as their ISO text.

Example (DuckDB only):
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "u.csv").write_text("+2,R,1,1.50\\n*\\n-,R,1,1.50\\n+,R,2,\\n*\\n")
    >>> duckdb_answers_per_epoch("CREATE TABLE R(a INT, b DECIMAL(15,2));", d / "u.csv",
    ...                          "SELECT a, b FROM R ORDER BY a")
    [[(1, Decimal('1.50')), (1, Decimal('1.50'))], [(1, Decimal('1.50')), (2, None)]]
    >>> compare_answers([[(1, 1.5000000000001)]], [[(1, Decimal("1.50"))]])
    []
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

Row = tuple[Any, ...]
Epoch = list[tuple[str, int, str, tuple[str, ...]]]
"""One epoch's updates in file order: (op, multiplicity, relation as written, fields)."""

REL_TOL = 1e-9
ABS_TOL = 1e-9
DISABLED_OPTIMIZERS = "common_subplan"  # as tests/oracle.py (DuckDB 2.0's self-join bug)


# -- generation --------------------------------------------------------------------------


def generate(out_dir: str | Path, sf: float = 0.01, refresh_pairs: int = 2,
             seed: int = 0) -> Path:
    """``ivmflow generate tpch`` into ``out_dir``; skips when the extra's package is not
    installed (any other failure, e.g. an extension that does not load, fails)."""
    from connectors import tpch

    pytest.importorskip("duckdb_extension_tpch", reason="TPC-H generation needs the tpch "
                        'extra: pip install -e ".[tpch]"')
    tpch.write_tpch(tpch.TpchSpec(sf, refresh_pairs, seed), out_dir)
    return Path(out_dir)


# -- reading the stream ------------------------------------------------------------------


def read_epochs(path: str | Path) -> list[Epoch]:
    """The update file's epochs (``*`` ends one; trailing updates form a last one)."""
    epochs: list[Epoch] = []
    current: Epoch = []
    with open(path, encoding="utf-8", newline="") as f:
        for fields in csv.reader(f, strict=True):
            if not fields or fields[0].startswith("#"):
                continue
            op = fields[0]
            if op == "*":
                epochs.append(current)
                current = []
                continue
            mult = int(op[1:]) if len(op) > 1 else 1
            if op[0] not in "+-" or mult < 1:
                raise ValueError(f"bad op {op!r}")
            current.append((op[0], mult, fields[1], tuple(fields[2:])))
    if current:
        epochs.append(current)
    return epochs


@dataclass
class StreamStats:
    """What :func:`check_stream` found: per epoch, inserts and deletes per table; the
    live rows per table at the end."""

    inserts: list[Counter[str]] = field(default_factory=list)
    deletes: list[Counter[str]] = field(default_factory=list)
    live: Counter[str] = field(default_factory=Counter)


def check_stream(path: str | Path) -> StreamStats:
    """Replay the stream as bags of field tuples; a delete of a row that is not there
    (sequentially, in file order) raises AssertionError."""
    bags: dict[str, Counter[tuple[str, ...]]] = defaultdict(Counter)
    stats = StreamStats()
    for k, epoch in enumerate(read_epochs(path), 1):
        ins: Counter[str] = Counter()
        dels: Counter[str] = Counter()
        for op, mult, rel, fields in epoch:
            bag = bags[rel.lower()]
            if op == "+":
                bag[fields] += mult
                ins[rel.lower()] += mult
            else:
                have = bag.get(fields, 0)
                assert have >= mult, f"epoch {k}: delete of {mult} x {rel}{fields}, {have} there"
                bag[fields] = have - mult
                if not bag[fields]:
                    del bag[fields]
                dels[rel.lower()] += mult
        stats.inserts.append(ins)
        stats.deletes.append(dels)
    stats.live = Counter({rel: sum(bag.values()) for rel, bag in bags.items()})
    return stats


# -- DuckDB replay -----------------------------------------------------------------------


def split_statements(sql: str) -> list[str]:
    """SQL text -> statements (split at ``;`` outside quotes and comments), each
    without its comments-only lines at the start."""
    out, buf, i, n = [], [], 0, len(sql)
    quote: str | None = None
    while i < n:
        c = sql[i]
        if quote:
            buf.append(c)
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
            buf.append(c)
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
            continue
        elif c == ";":
            out.append("".join(buf).strip())
            buf = []
        else:
            buf.append(c)
        i += 1
    out.append("".join(buf).strip())
    return [s for s in out if s]


def _is_create(stmt: str) -> bool:
    return stmt.lstrip().upper().startswith("CREATE")


def query_part(query_sql: str) -> str:
    """The one statement of an ivmflow query file that is not a CREATE TABLE."""
    rest = [s for s in split_statements(query_sql) if not _is_create(s)]
    if len(rest) != 1:
        raise ValueError(f"expected one query besides the CREATE TABLEs, found {len(rest)}")
    return rest[0]


def _read_text(sql_or_path: str | Path) -> str:
    return Path(sql_or_path).read_text(encoding="utf-8") if isinstance(sql_or_path, Path) \
        else sql_or_path


class DuckReplay:
    """An in-memory DuckDB database fed epoch by epoch (bag semantics)."""

    def __init__(self, schema_sql: str | Path, threads: int = 2) -> None:
        self.con = duckdb.connect(":memory:", config={"threads": threads})
        self.con.execute(f"SET disabled_optimizers = '{DISABLED_OPTIMIZERS}'")
        self.con.execute("SET enable_progress_bar = false")
        for stmt in split_statements(_read_text(schema_sql)):
            if _is_create(stmt):
                self.con.execute(stmt)
        self.tables: dict[str, str] = {}
        self.columns: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for table, col, typ in self.con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position"
        ).fetchall():
            self.tables[table.lower()] = table
            self.columns[table].append((col, typ))
        self._tmp = tempfile.TemporaryDirectory(prefix="tpch-replay-")
        self.epochs = 0

    def close(self) -> None:
        self.con.close()
        self._tmp.cleanup()

    def __enter__(self) -> DuckReplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stage(self, table: str, rows: Iterable[tuple[tuple[str, ...], int]]) -> str:
        """``rows`` (fields, copies) as a typed temp table ``stage`` via DuckDB's CSV
        reader (empty field: NULL); returns the column list."""
        path = Path(self._tmp.name) / "stage.csv"
        with path.open("w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            for fields, m in rows:
                for _ in range(m):
                    w.writerow(fields)
        cols = self.columns[table]
        spec = ", ".join(f"'{c}': '{t}'" for c, t in cols)
        self.con.execute(
            "CREATE OR REPLACE TEMP TABLE stage AS SELECT * FROM read_csv("
            f"'{path}', columns = {{{spec}}}, header = false, delim = ',', quote = '\"', "
            "escape = '\"', nullstr = '', auto_detect = false)"
        )
        return ", ".join(f'"{c}"' for c, _ in cols)

    def apply_epoch(self, epoch: Epoch) -> None:
        """The epoch's net change per row: deletes first, then inserts."""
        net: dict[str, Counter[tuple[str, ...]]] = defaultdict(Counter)
        for op, mult, rel, fields in epoch:
            try:
                table = self.tables[rel.lower()]
            except KeyError:
                raise ValueError(f"unknown relation {rel!r}") from None
            if len(fields) != len(self.columns[table]):
                raise ValueError(f"{table}: {len(fields)} values, expected "
                                 f"{len(self.columns[table])}: {fields}")
            net[table][fields] += mult if op == "+" else -mult
        self.epochs += 1
        for table, changes in net.items():
            gone = [(f, -m) for f, m in changes.items() if m < 0]
            if gone:
                self._delete(table, gone)
        for table, changes in net.items():
            new = [(f, m) for f, m in changes.items() if m > 0]
            if new:
                cols = self._stage(table, new)
                self.con.execute(f'INSERT INTO "{table}" ({cols}) SELECT {cols} FROM stage')

    def _delete(self, table: str, rows: list[tuple[tuple[str, ...], int]]) -> None:
        """Delete exactly the given copies: the first ``m`` rowids of each value."""
        cols = self._stage(table, rows)
        match = " AND ".join(f't."{c}" IS NOT DISTINCT FROM d."{c}"'
                             for c, _ in self.columns[table])
        self.con.execute(
            "CREATE OR REPLACE TEMP TABLE gone AS SELECT *, row_number() OVER () AS __g "
            f"FROM (SELECT {cols}, count(*) AS __m FROM stage GROUP BY ALL)")
        short = self.con.execute(
            f'SELECT d.*, count(t.rowid) FROM gone d LEFT JOIN "{table}" t ON {match} '
            "GROUP BY ALL HAVING count(t.rowid) < d.__m LIMIT 3").fetchall()
        if short:
            raise ValueError(f"epoch {self.epochs}: delete from {table} of rows not there "
                             f"(values, copies asked, group, copies present): {short}")
        self.con.execute(
            f'DELETE FROM "{table}" WHERE rowid IN (SELECT rid FROM ('
            "SELECT t.rowid AS rid, d.__m AS m, "
            "row_number() OVER (PARTITION BY d.__g ORDER BY t.rowid) AS rn "
            f'FROM "{table}" t JOIN gone d ON {match}) WHERE rn <= m)')

    def query(self, sql: str) -> list[Row]:
        return [tuple(r) for r in self.con.execute(sql).fetchall()]

    def count(self, table: str) -> int:
        return int(self.con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])


def duckdb_answers_many(schema_sql: str | Path, updates_csv: str | Path,
                        queries: Mapping[str, str | Path]) -> dict[str, list[list[Row]]]:
    """Several queries' answers after every epoch, from one replay."""
    selects = {name: query_part(_read_text(q)) for name, q in queries.items()}
    out: dict[str, list[list[Row]]] = {name: [] for name in selects}
    with DuckReplay(schema_sql) as db:
        for epoch in read_epochs(updates_csv):
            db.apply_epoch(epoch)
            for name, sql in selects.items():
                out[name].append(db.query(sql))
    return out


def duckdb_answers_per_epoch(schema_sql: str | Path, updates_csv: str | Path,
                             query_sql: str | Path) -> list[list[Row]]:
    """The query's rows (DuckDB's types and order) after every epoch of the stream.
    ``schema_sql`` and ``query_sql`` are SQL text or a Path; ``query_sql`` may be an
    ivmflow query file (its CREATE TABLEs are skipped)."""
    return duckdb_answers_many(schema_sql, updates_csv, {"q": query_sql})["q"]


# -- ivmflow's side ----------------------------------------------------------------------


def accumulate_deltas(deltas: Iterable[Any], n_epochs: int | None = None) -> list[list[Row]]:
    """The result after every epoch, from deltas: ``EpochDelta`` objects or
    ``(epoch, mult, row)`` triples (epochs numbered from 1, as ivmflow numbers them;
    an epoch without changes may be absent). A row whose count goes negative raises."""
    by_epoch: dict[int, list[tuple[int, Row]]] = defaultdict(list)
    for d in deltas:
        if hasattr(d, "rows"):
            by_epoch[d.epoch].extend((m, tuple(r)) for m, r in d.rows)
        else:
            epoch, mult, row = d
            by_epoch[int(epoch)].append((int(mult), tuple(row)))
    last = max(by_epoch, default=0) if n_epochs is None else n_epochs
    bag: Counter[Row] = Counter()
    out: list[list[Row]] = []
    for k in range(1, last + 1):
        for m, row in by_epoch.get(k, ()):
            bag[row] += m
            if bag[row] < 0:
                raise ValueError(f"epoch {k}: {row} has count {bag[row]}")
            if not bag[row]:
                del bag[row]
        out.append([r for r, m in sorted(bag.items(), key=lambda e: _sort_key(e[0]))
                    for _ in range(m)])
    return out


def ivmflow_answers_per_epoch(query_sql: str | Path, updates_csv: str | Path
                              ) -> list[list[Row]]:
    """Compile the query file and run the stream through the local view in process."""
    from connectors.files import read_updates
    from dataflow.api import compile_query

    q = compile_query(_read_text(query_sql))
    return accumulate_deltas(q.run(read_updates(updates_csv, q.schema)),
                             len(read_epochs(updates_csv)))


# -- comparison --------------------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, Decimal)) and not isinstance(v, bool)


def _canon(v: Any) -> Any:
    """Dates and timestamps as the text DuckDB's CSV writer gives them."""
    if isinstance(v, (dt.date, dt.datetime)):
        return str(v)
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # numpy scalars
        return v.item()
    return v


def _sort_key(row: Row) -> tuple[Any, ...]:
    out: list[tuple[int, Any]] = []
    for v in map(_canon, row):
        if v is None:
            out.append((0, 0))
        elif _is_number(v):
            f = float(v)
            out.append((1, 0.0 if math.isnan(f) else f))
        else:
            out.append((2, str(v)))
    return tuple(out)


def values_equal(a: Any, b: Any, rel_tol: float = REL_TOL) -> bool:
    """Exact for exact numbers (int, Decimal) on both sides, else ``math.isclose``; a
    numeric string is read as a Decimal; dates as ISO text."""
    a, b = _canon(a), _canon(b)
    if a is None or b is None:
        return a is None and b is None
    if _is_number(a) != _is_number(b):
        try:  # one side read from a CSV file
            a, b = (Decimal(a) if isinstance(a, str) else a, Decimal(b) if isinstance(b, str)
                    else b)
        except ArithmeticError:
            return False
    if _is_number(a) and _is_number(b):
        if not isinstance(a, float) and not isinstance(b, float):
            return bool(a == b)
        return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=ABS_TOL)
    return bool(a == b)


def rows_equal(a: Row, b: Row, rel_tol: float = REL_TOL) -> bool:
    return len(a) == len(b) and all(values_equal(x, y, rel_tol) for x, y in zip(a, b))


def _bag_diff(got: list[Row], want: list[Row], rel_tol: float) -> tuple[list[Row], list[Row]]:
    """Rows of ``got`` and of ``want`` left unmatched (sorted pairing, then a greedy
    pass over what is left)."""
    g = sorted(got, key=_sort_key)
    w = sorted(want, key=_sort_key)
    if len(g) == len(w) and all(rows_equal(x, y, rel_tol) for x, y in zip(g, w)):
        return [], []
    if max(len(g), len(w)) > 20_000:  # too many for the greedy pass: the first mismatch
        pairs = [(x, y) for x, y in zip(g, w) if not rows_equal(x, y, rel_tol)]
        return [p[0] for p in pairs[:1]] + g[len(w):], [p[1] for p in pairs[:1]] + w[len(g):]
    left = list(w)
    extra = []
    for row in g:
        for i, cand in enumerate(left):
            if rows_equal(row, cand, rel_tol):
                del left[i]
                break
        else:
            extra.append(row)
    return extra, left


def compare_answers(got: Sequence[Sequence[Row]], want: Sequence[Sequence[Row]],
                    rel_tol: float = REL_TOL, limit: int = 5) -> list[str]:
    """Differences between per-epoch results, as bags (empty list: equal)."""
    problems = []
    if len(got) != len(want):
        problems.append(f"{len(got)} epochs, expected {len(want)}")
    for k, (g, w) in enumerate(zip(got, want), 1):
        extra, missing = _bag_diff(list(g), list(w), rel_tol)
        if extra or missing:
            problems.append(f"epoch {k}: {len(g)} rows, expected {len(w)}; unexpected "
                            f"{extra[:limit]}, missing {missing[:limit]}")
    return problems


def assert_answers_equal(got: Sequence[Sequence[Row]], want: Sequence[Sequence[Row]],
                         rel_tol: float = REL_TOL) -> None:
    problems = compare_answers(got, want, rel_tol)
    assert not problems, "\n".join(problems[:10])
