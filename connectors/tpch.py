"""TPC-H data as an update stream: the initial load, then refresh epochs.

The tables come from DuckDB's own ``dbgen`` (the ``duckdb-extension-tpch`` wheel,
loaded by its file path: no network), the 22 query texts from its ``tpch_queries()``
(validation parameters). :func:`write_tpch` writes into a directory:

- ``schema.sql``: the 8 ``CREATE TABLE`` statements with the spec's types (INTEGER
  keys, ``DECIMAL(15,2)``, ``DATE``, ``CHAR``/``VARCHAR``);
- ``updates.csv``: the update stream (``docs/formats.md``), epoch by epoch:

  1. the initial load, every row of the 8 tables as a ``+`` line;
  2. then for each of the ``refresh_pairs`` pairs, three epochs:
     **RF1** inserts ``SF * 1500`` new orders, each with its 1-7 lineitems;
     **RF2** deletes ``SF * 1500`` orders of the initial population with all their
     lineitems; **UPD** changes a few rows of other tables, each as a delete of the
     old row and an insert of the new one (customers' ``c_acctbal``, a quarter of them
     also ``c_mktsegment``; suppliers' ``s_acctbal``; partsupp's ``ps_supplycost`` and
     ``ps_availqty``). ``other_updates=0`` leaves UPD out;

- ``queries/q01.sql`` ... ``q22.sql``: the schema, then the query as DuckDB's
  ``tpch_queries()`` writes it (an ivmflow query file);
- ``manifest.json``: the parameters, the epochs (name, inserts and deletes per table).

RF1's orders are synthesized by the spec's rules (clause 4.2.3), not by dbgen (DuckDB's
dbgen has no update sets): order keys are the unused slots of the sparse key space (the
initial population uses keys with ``key % 32 < 8``; new orders take the others, in
ascending order, as dbgen's update sets do); customers among those with
``c_custkey % 3 != 0``; order dates uniform in [1992-01-01, 1998-08-02]; 1-7
lineitems with a part and one of its 4 suppliers from ``partsupp``, quantity 1-50,
``l_extendedprice = quantity * p_retailprice``, discount 0.00-0.10, tax 0.00-0.08, the
ship/commit/receipt dates, return flag and line status as the spec derives them
(current date 1995-06-17), ``o_totalprice`` and ``o_orderstatus`` from the lineitems as
dbgen computes them; comments drawn from the generated ones. Everything drawn from one
``random.Random(seed)``, so a stream is determined by ``(sf, refresh_pairs, seed,
other_updates)``.

Every line is rendered by one SQL expression per table (CSV quoting as the csv module
does it, NULL as the empty field, dates ISO, decimals as plain text ``1234.50``), so a
delete line is byte for byte the line that inserted the row.

Example (``duckdb`` and ``duckdb-extension-tpch``, the ``tpch`` extra):

    >>> import tempfile
    >>> report = write_tpch(TpchSpec(sf=0.001, refresh_pairs=1), tempfile.mkdtemp())
    >>> [e["name"] for e in report["epochs"]]
    ['load', 'RF1 1', 'RF2 1', 'UPD 1']
    >>> report["epochs"][1]["inserts"]["orders"], report["epochs"][2]["deletes"]["orders"]
    (2, 2)
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from core.errors import UnavailableError, UsageError

__all__ = [
    "SCHEMA",
    "TABLES",
    "TpchSpec",
    "connect",
    "extension_path",
    "install_hint",
    "loaded_tables",
    "queries",
    "schema_sql",
    "write_tpch",
]

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders",
          "lineitem")
"""In load order: a table after the tables its foreign keys name."""

SCHEMA: dict[str, tuple[tuple[str, str], ...]] = {
    "region": (("r_regionkey", "INTEGER"), ("r_name", "CHAR(25)"),
               ("r_comment", "VARCHAR(152)")),
    "nation": (("n_nationkey", "INTEGER"), ("n_name", "CHAR(25)"),
               ("n_regionkey", "INTEGER"), ("n_comment", "VARCHAR(152)")),
    "supplier": (("s_suppkey", "INTEGER"), ("s_name", "CHAR(25)"),
                 ("s_address", "VARCHAR(40)"), ("s_nationkey", "INTEGER"),
                 ("s_phone", "CHAR(15)"), ("s_acctbal", "DECIMAL(15,2)"),
                 ("s_comment", "VARCHAR(101)")),
    "customer": (("c_custkey", "INTEGER"), ("c_name", "VARCHAR(25)"),
                 ("c_address", "VARCHAR(40)"), ("c_nationkey", "INTEGER"),
                 ("c_phone", "CHAR(15)"), ("c_acctbal", "DECIMAL(15,2)"),
                 ("c_mktsegment", "CHAR(10)"), ("c_comment", "VARCHAR(117)")),
    "part": (("p_partkey", "INTEGER"), ("p_name", "VARCHAR(55)"), ("p_mfgr", "CHAR(25)"),
             ("p_brand", "CHAR(10)"), ("p_type", "VARCHAR(25)"), ("p_size", "INTEGER"),
             ("p_container", "CHAR(10)"), ("p_retailprice", "DECIMAL(15,2)"),
             ("p_comment", "VARCHAR(23)")),
    "partsupp": (("ps_partkey", "INTEGER"), ("ps_suppkey", "INTEGER"),
                 ("ps_availqty", "INTEGER"), ("ps_supplycost", "DECIMAL(15,2)"),
                 ("ps_comment", "VARCHAR(199)")),
    "orders": (("o_orderkey", "INTEGER"), ("o_custkey", "INTEGER"),
               ("o_orderstatus", "CHAR(1)"), ("o_totalprice", "DECIMAL(15,2)"),
               ("o_orderdate", "DATE"), ("o_orderpriority", "CHAR(15)"),
               ("o_clerk", "CHAR(15)"), ("o_shippriority", "INTEGER"),
               ("o_comment", "VARCHAR(79)")),
    "lineitem": (("l_orderkey", "INTEGER"), ("l_partkey", "INTEGER"),
                 ("l_suppkey", "INTEGER"), ("l_linenumber", "INTEGER"),
                 ("l_quantity", "DECIMAL(15,2)"), ("l_extendedprice", "DECIMAL(15,2)"),
                 ("l_discount", "DECIMAL(15,2)"), ("l_tax", "DECIMAL(15,2)"),
                 ("l_returnflag", "CHAR(1)"), ("l_linestatus", "CHAR(1)"),
                 ("l_shipdate", "DATE"), ("l_commitdate", "DATE"), ("l_receiptdate", "DATE"),
                 ("l_shipinstruct", "CHAR(25)"), ("l_shipmode", "CHAR(10)"),
                 ("l_comment", "VARCHAR(44)")),
}
"""Columns and types of the spec (clause 1.4.1): identifiers INTEGER, decimals
DECIMAL(15,2)."""

KEYS = {
    "region": ("r_regionkey",), "nation": ("n_nationkey",), "supplier": ("s_suppkey",),
    "customer": ("c_custkey",), "part": ("p_partkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"), "orders": ("o_orderkey",),
    "lineitem": ("l_orderkey", "l_linenumber"),
}

EXTRA = "tpch"

# Clause 4.2.3 of the spec.
START_DATE = dt.date(1992, 1, 1)
END_DATE = dt.date(1998, 12, 31)
CURRENT_DATE = dt.date(1995, 6, 17)
PRIORITIES = ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")
INSTRUCTIONS = ("DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN")
MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")
SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD")


@dataclass(frozen=True)
class TpchSpec:
    """What :func:`write_tpch` generates."""

    sf: float = 0.01
    refresh_pairs: int = 2
    seed: int = 0
    other_updates: int | None = None
    """Customers (and as many partsupp rows, a tenth as many suppliers) changed in each
    UPD epoch; default ``max(3, round(SF * 300))``; 0: no UPD epochs."""

    @property
    def orders_per_refresh(self) -> int:
        """Orders inserted by an RF1 and deleted by an RF2: SF * 1500 (at least 1)."""
        return max(1, round(self.sf * 1500))

    @property
    def updates_per_epoch(self) -> int:
        if self.other_updates is not None:
            return self.other_updates
        return max(3, round(self.sf * 300))

    def check(self) -> None:
        if not 0 < self.sf <= 100:
            msg = f"the scale factor must be in (0, 100], not {self.sf}"
            raise UsageError(msg)
        if self.refresh_pairs < 0:
            msg = f"refresh pairs must be >= 0, not {self.refresh_pairs}"
            raise UsageError(msg)
        if self.other_updates is not None and self.other_updates < 0:
            msg = f"other updates must be >= 0, not {self.other_updates}"
            raise UsageError(msg)


def schema_sql(keys: bool | Collection[str] = False) -> str:
    """The 8 CREATE TABLE statements, in load order; ``keys``: with the spec's primary
    keys (:data:`KEYS`) declared (``True``: every table's; else those of the tables
    named), as a change stream with key-only before-images needs them
    (docs/change-streams.md). Below SF 0.01 dbgen's partsupp repeats some
    ``(ps_partkey, ps_suppkey)`` pairs (100 at SF 0.001 to 0.005: the spec's supplier
    formula repeats with fewer than 100 suppliers): leave its key out there.

    >>> schema_sql(keys=True).splitlines()[3:5]
    ['    r_comment VARCHAR(152),', '    PRIMARY KEY (r_regionkey)']
    """
    out = []
    for table in TABLES:
        lines = [f"    {name} {typ}" for name, typ in SCHEMA[table]]
        if keys is True or (keys and table in keys):
            lines.append(f"    PRIMARY KEY ({', '.join(KEYS[table])})")
        cols = ",\n".join(lines)
        out.append(f"CREATE TABLE {table} (\n{cols}\n);\n")
    return "\n".join(out)


# -- DuckDB and its dbgen -----------------------------------------------------------------


def install_hint(ext: str = EXTRA) -> str:
    """How to install DuckDB's ``ext`` extension (``tpch``, ``tpcds``): its extra."""
    return (f"pip install -e '.[{ext}]' (duckdb==1.5.5 and "
            f"duckdb-extension-{ext}==1.5.5)")


def extension_path(ext: str = EXTRA) -> Path:
    """The ``{ext}.duckdb_extension`` file inside the installed
    ``duckdb-extension-{ext}`` wheel, for the installed duckdb's version."""
    import importlib

    try:
        import duckdb
        wheel = importlib.import_module(f"duckdb_extension_{ext}")
    except ImportError as err:
        msg = f"{ext.upper()} generation needs {install_hint(ext)}: {err}"
        raise UnavailableError(msg) from None
    root = Path(wheel.__file__ or ".").parent
    found = sorted(root.rglob(f"{ext}.duckdb_extension"))
    version = f"v{duckdb.__version__}"
    for path in found:
        if version in path.parts:
            return path
    have = ", ".join(p.parent.name for p in found) or "none"
    msg = (f"duckdb-extension-{ext} has no extension for duckdb {duckdb.__version__} "
           f"(it has: {have}); {install_hint(ext)}")
    raise UnavailableError(msg)


def connect(sf: float | None = None, threads: int = 2, ext: str = EXTRA) -> Any:
    """An in-memory DuckDB connection with DuckDB's ``ext`` extension loaded (by path,
    without network) and, if ``sf`` is given, the tables generated (``dbgen``; for
    ``tpcds`` its ``dsdgen``)."""
    import duckdb

    path = extension_path(ext)
    con = duckdb.connect(config={"threads": threads, "autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    con.execute("SET enable_progress_bar = false")
    try:
        con.execute(f"LOAD '{path}'")
    except duckdb.Error as err:
        msg = (f"cannot load {path} into duckdb {duckdb.__version__}: {err}; "
               f"{install_hint(ext)}")
        raise UnavailableError(msg) from None
    if sf is not None:
        gen = "dsdgen" if ext == "tpcds" else "dbgen"
        con.execute(f"CALL {gen}(sf={float(sf)!r})")
    return con


def queries(con: Any | None = None, ext: str = EXTRA) -> dict[int, str]:
    """Query number -> the official text (validation parameters), from DuckDB's
    ``tpch_queries()`` (``{ext}_queries()``)."""
    con = con if con is not None else connect(ext=ext)
    rows = con.execute(f"SELECT query_nr, query FROM {ext}_queries() ORDER BY query_nr")
    return {int(nr): str(text) for nr, text in rows.fetchall()}


def query_file_text(nr: int, text: str) -> str:
    """An ivmflow query file: the schema, then query ``nr``."""
    head = (f"-- TPC-H Q{nr}, as DuckDB's tpch_queries() writes it (validation "
            "parameters),\n-- over the spec's schema.\n")
    return f"{head}{schema_sql()}\n{text.strip()}\n"


# -- the text of the stream ----------------------------------------------------------------

_NEEDS_QUOTES = "'[,\"\\r\\n]'"


def _field_sql(name: str, typ: str) -> str:
    """One column rendered as the csv module writes its text: NULL is empty; text with
    a comma, quote or line break quoted, quotes doubled."""
    if typ.startswith(("CHAR", "VARCHAR")):
        return (f"coalesce(CASE WHEN regexp_matches({name}, {_NEEDS_QUOTES}) "
                f"THEN '\"' || replace({name}, '\"', '\"\"') || '\"' ELSE {name} END, '')")
    return f"coalesce(CAST({name} AS VARCHAR), '')"


def _lines_sql(table: str, op: str, source: str, where: str = "",
               schema: Mapping[str, Sequence[tuple[str, str]]] = SCHEMA,
               keys_of: Mapping[str, Sequence[str]] = KEYS) -> str:
    """``SELECT line`` of ``source``'s rows (``table``'s columns in ``schema``) as update
    lines, in key order (``keys_of``; connectors.tpcds passes its own)."""
    fields = " || ',' || ".join(_field_sql(n, t) for n, t in schema[table])
    keys = ", ".join(keys_of[table])
    return (f"SELECT '{op},{table},' || {fields} AS line FROM {source} {where} "
            f"ORDER BY {keys}")


class _Stream:
    """The update file being written, with the epochs' counts."""

    def __init__(self, con: Any, path: Path,
                 schema: Mapping[str, Sequence[tuple[str, str]]] = SCHEMA,
                 keys_of: Mapping[str, Sequence[str]] = KEYS) -> None:
        self.con = con
        self.schema, self.keys_of = schema, keys_of
        self.file = path.open("w", encoding="utf-8", newline="\n")
        self.epochs: list[dict[str, Any]] = []
        self.lines = 0
        self._open("load")

    def _open(self, name: str) -> None:
        self.epochs.append({"name": name, "inserts": {}, "deletes": {}})

    def emit(self, table: str, op: str, source: str | None = None, where: str = "") -> int:
        cursor = self.con.execute(_lines_sql(table, op, source or table, where,
                                             self.schema, self.keys_of))
        n = 0
        while rows := cursor.fetchmany(65536):  # bounded memory at any scale
            self.file.write("\n".join([r[0] for r in rows]))
            self.file.write("\n")
            n += len(rows)
        kind = "inserts" if op == "+" else "deletes"
        counts = self.epochs[-1][kind]
        counts[table] = counts.get(table, 0) + n
        self.lines += n
        return n

    def end_epoch(self, next_name: str | None) -> None:
        self.file.write("*\n")
        self.lines += 1
        if next_name is not None:
            self._open(next_name)

    def close(self) -> None:
        self.file.close()

    def manifest(self, out: Path, fields: dict[str, Any], seconds: dict[str, float]
                 ) -> dict[str, Any]:
        """``fields``, the line count, the epochs and ``seconds``, written as
        ``out/manifest.json`` and returned."""
        doc = {**fields, "lines": self.lines, "epochs": self.epochs,
               "seconds": {k: round(v, 3) for k, v in seconds.items()}}
        (out / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n",
                                           encoding="utf-8")
        return doc


# -- refresh functions -------------------------------------------------------------------


def _gap_keys(existing: set[int]) -> Iterator[int]:
    """Order keys of the sparse key space's unused slots, ascending: dbgen's initial
    population holds keys with ``key % 32 < 8`` (1-7, 32-39, 64-71, ...)."""
    key = 8
    while True:
        if key % 32 >= 8 and key not in existing:
            yield key
        key += 1


@dataclass
class _Pools:
    """What RF1 draws from: the generated tables' keys, prices and comments."""

    custkeys: list[int]
    suppliers_of: dict[int, list[int]]
    parts: list[int]
    """The part keys, ascending (what an order's lines draw from)."""
    retailprice: dict[int, Decimal]
    order_comments: list[str]
    line_comments: list[str]
    clerks: int

    @classmethod
    def of(cls, con: Any, sf: float) -> _Pools:
        def col(sql: str) -> list[Any]:
            return [r[0] for r in con.execute(sql).fetchall()]

        suppliers_of: dict[int, list[int]] = {}
        for p, s in con.execute(
            "SELECT ps_partkey, ps_suppkey FROM partsupp ORDER BY 1, 2"
        ).fetchall():
            suppliers_of.setdefault(int(p), []).append(int(s))
        return cls(
            custkeys=col("SELECT c_custkey FROM customer WHERE c_custkey % 3 <> 0 ORDER BY 1"),
            suppliers_of=suppliers_of,
            # (sorted once: per order it was 15000 sorts of 2M keys at SF 10, an hour)
            parts=sorted(suppliers_of),
            retailprice={int(k): v for k, v in con.execute(
                "SELECT p_partkey, p_retailprice FROM part").fetchall()},
            order_comments=col("SELECT o_comment FROM orders ORDER BY o_orderkey LIMIT 5000"),
            line_comments=col("SELECT l_comment FROM lineitem "
                              "ORDER BY l_orderkey, l_linenumber LIMIT 5000"),
            clerks=max(1, round(sf * 1000)),
        )


def _cents(d: Decimal) -> int:
    return int(d * 100)


def _new_order(key: int, pools: _Pools, rng: random.Random
               ) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """One order and its lineitems by the spec's rules (clause 4.2.3)."""
    last = (END_DATE - dt.timedelta(days=151) - START_DATE).days
    orderdate = START_DATE + dt.timedelta(days=rng.randint(0, last))
    lines: list[tuple[Any, ...]] = []
    total = 0
    parts = pools.parts
    for number in range(1, rng.randint(1, 7) + 1):
        part = rng.choice(parts)
        supp = rng.choice(pools.suppliers_of[part])
        qty = rng.randint(1, 50)
        price = pools.retailprice[part] * qty
        disc, tax = rng.randint(0, 10), rng.randint(0, 8)
        ship = orderdate + dt.timedelta(days=rng.randint(1, 121))
        commit = orderdate + dt.timedelta(days=rng.randint(30, 90))
        receipt = ship + dt.timedelta(days=rng.randint(1, 30))
        flag = rng.choice("RA") if receipt <= CURRENT_DATE else "N"
        status = "O" if ship > CURRENT_DATE else "F"
        # dbgen's o_totalprice: integer cents, truncated at each step.
        total += (_cents(price) * (100 - disc) // 100) * (100 + tax) // 100
        lines.append((key, part, supp, number, Decimal(qty).quantize(Decimal("0.01")),
                      price, Decimal(disc) / 100, Decimal(tax) / 100, flag, status, ship,
                      commit, receipt, rng.choice(INSTRUCTIONS), rng.choice(MODES),
                      rng.choice(pools.line_comments)))
    statuses = {line[9] for line in lines}
    ostatus = statuses.pop() if len(statuses) == 1 else "P"
    order = (key, rng.choice(pools.custkeys), ostatus, Decimal(total) / 100, orderdate,
             rng.choice(PRIORITIES), f"Clerk#{rng.randint(1, pools.clerks):09d}", 0,
             rng.choice(pools.order_comments))
    return order, lines


def _insert(con: Any, table: str, rows: Sequence[tuple[Any, ...]], chunk: int = 256) -> None:
    """Insert ``rows`` into ``table``, many rows per statement (executemany runs one
    statement per row, 100x slower)."""
    for i in range(0, len(rows), chunk):
        part = rows[i:i + chunk]
        marks = ", ".join(["(" + ", ".join("?" * len(part[0])) + ")"] * len(part))
        con.execute(f"INSERT INTO {table} VALUES {marks}", [v for r in part for v in r])


def _stage(con: Any, table: str, rows: Sequence[tuple[Any, ...]]) -> str:
    """A temporary table like ``table`` holding ``rows``; returns its name."""
    name = f"new_{table}"
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {table} LIMIT 0")
    _insert(con, name, rows)
    return name


def _keys_table(con: Any, name: str, cols: Sequence[str], rows: Sequence[tuple[Any, ...]]
                ) -> None:
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} "
                f"({', '.join(f'{c} INTEGER' for c in cols)})")
    _insert(con, name, rows)


def _rf1(con: Any, out: _Stream, n: int, keys: Iterator[int], pools: _Pools,
         rng: random.Random) -> None:
    orders, lines = [], []
    for _ in range(n):
        order, its_lines = _new_order(next(keys), pools, rng)
        orders.append(order)
        lines.extend(its_lines)
    for table, rows in (("orders", orders), ("lineitem", lines)):
        staged = _stage(con, table, rows)
        out.emit(table, "+", staged)
        con.execute(f"INSERT INTO {table} SELECT * FROM {staged}")


def _rf2(con: Any, out: _Stream, n: int, original: list[int], deleted: set[int],
         rng: random.Random) -> None:
    live = [k for k in original if k not in deleted]
    victims = sorted(rng.sample(live, min(n, len(live))))
    deleted.update(victims)
    _keys_table(con, "gone", ("k",), [(k,) for k in victims])
    # Lineitems first: every line of the stream keeps the foreign keys intact.
    out.emit("lineitem", "-", where="WHERE l_orderkey IN (SELECT k FROM gone)")
    out.emit("orders", "-", where="WHERE o_orderkey IN (SELECT k FROM gone)")
    con.execute("DELETE FROM lineitem WHERE l_orderkey IN (SELECT k FROM gone)")
    con.execute("DELETE FROM orders WHERE o_orderkey IN (SELECT k FROM gone)")


def _money(rng: random.Random, low_cents: int, high_cents: int) -> Decimal:
    return Decimal(rng.randint(low_cents, high_cents)) / 100


def _updates(con: Any, out: _Stream, n: int, rng: random.Random) -> None:
    """Changes of customer, supplier and partsupp rows: delete old, insert new."""
    def keys(sql: str) -> list[tuple[int, ...]]:
        return [tuple(int(v) for v in r) for r in con.execute(sql).fetchall()]

    def sample(sql: str, k: int) -> list[tuple[int, ...]]:
        population = keys(sql)
        return rng.sample(population, min(k, len(population)))

    customers = sample("SELECT c_custkey FROM customer ORDER BY 1", n)
    suppliers = sample("SELECT s_suppkey FROM supplier ORDER BY 1", max(1, n // 10))
    partsupps = sample("SELECT ps_partkey, ps_suppkey FROM partsupp ORDER BY 1, 2", n)
    # table -> (key columns, rows (keys, new values), SET, match, value types)
    changes: dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]], str, str,
                             tuple[str, str]]] = {
        "customer": (
            ("c_custkey",),
            [(k, _money(rng, -99999, 999999),
              rng.choice(SEGMENTS) if rng.random() < 0.25 else None) for (k,) in customers],
            "c_acctbal = u.v1, c_mktsegment = coalesce(u.v2, c_mktsegment)",
            "c_custkey = u.k1", ("DECIMAL(15,2)", "VARCHAR")),
        "supplier": (
            ("s_suppkey",), [(k, _money(rng, -99999, 999999), None) for (k,) in suppliers],
            "s_acctbal = u.v1", "s_suppkey = u.k1", ("DECIMAL(15,2)", "VARCHAR")),
        "partsupp": (
            ("ps_partkey", "ps_suppkey"),
            [(p, s, _money(rng, 100, 100000), rng.randint(1, 9999)) for p, s in partsupps],
            "ps_supplycost = u.v1, ps_availqty = u.v2",
            "ps_partkey = u.k1 AND ps_suppkey = u.k2", ("DECIMAL(15,2)", "INTEGER")),
    }
    for table, (key_cols, rows, assign, match, value_types) in changes.items():
        if not rows:
            continue
        nk = len(key_cols)
        cols = [f"k{i + 1} INTEGER" for i in range(nk)]
        cols += [f"v{i + 1} {t}" for i, t in enumerate(value_types)]
        con.execute(f"CREATE OR REPLACE TEMP TABLE u ({', '.join(cols)})")
        _insert(con, "u", rows)
        where = f"WHERE EXISTS (SELECT 1 FROM u WHERE {match})"
        out.emit(table, "-", where=where)
        con.execute(f"UPDATE {table} SET {assign} FROM u WHERE {match}")
        out.emit(table, "+", where=where)


# -- the whole directory -----------------------------------------------------------------


def loaded_tables(sf: float, threads: int = 2) -> Any:
    """A DuckDB connection holding dbgen's tables at scale factor ``sf`` in the spec's
    types: the load epoch :func:`write_tpch` writes, row for row (a benchmark's DuckDB
    starts from it where staging the load through Python would not fit: SF 10)."""
    con = connect(sf, threads)
    # DuckDB's dbgen types identifiers BIGINT and text VARCHAR; the spec's types here.
    for table in TABLES:
        casts = ", ".join(f"CAST({n} AS {t}) AS {n}" for n, t in SCHEMA[table])
        con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT {casts} FROM {table}")
    return con


def write_tpch(spec: TpchSpec, out_dir: str | Path) -> dict[str, Any]:
    """Generate ``spec``'s data and stream into ``out_dir`` (created if need be);
    returns the manifest (also written as ``manifest.json``)."""
    spec.check()
    t0 = time.perf_counter()
    out = Path(out_dir)
    (out / "queries").mkdir(parents=True, exist_ok=True)
    con = loaded_tables(spec.sf)
    t_dbgen = time.perf_counter() - t0
    (out / "schema.sql").write_text(schema_sql(), encoding="utf-8")
    for nr, text in queries(con).items():
        (out / "queries" / f"q{nr:02d}.sql").write_text(query_file_text(nr, text),
                                                        encoding="utf-8")

    stream = _Stream(con, out / "updates.csv")
    try:
        for table in TABLES:
            stream.emit(table, "+")
        rng = random.Random(spec.seed)
        original = [int(r[0]) for r in
                    con.execute("SELECT o_orderkey FROM orders ORDER BY 1").fetchall()]
        deleted: set[int] = set()
        keys = _gap_keys(set(original))
        pools = _Pools.of(con, spec.sf) if spec.refresh_pairs else None
        n, m = spec.orders_per_refresh, spec.updates_per_epoch
        names = []
        for pair in range(1, spec.refresh_pairs + 1):
            names += [f"RF1 {pair}", f"RF2 {pair}"] + ([f"UPD {pair}"] if m else [])
        for name in names:
            stream.end_epoch(name)
            if name.startswith("RF1"):
                assert pools is not None
                _rf1(con, stream, n, keys, pools, rng)
            elif name.startswith("RF2"):
                _rf2(con, stream, n, original, deleted, rng)
            else:
                _updates(con, stream, m, rng)
        stream.end_epoch(None)
    finally:
        stream.close()
        con.close()
    return stream.manifest(out, {"spec": asdict(spec),
                                 "orders_per_refresh": spec.orders_per_refresh,
                                 "updates_per_epoch": spec.updates_per_epoch},
                           {"dbgen": t_dbgen, "total": time.perf_counter() - t0})

