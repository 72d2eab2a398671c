"""TPC-DS data as an update stream: the initial load, then data-maintenance epochs.

The 24 tables come from DuckDB's own ``dsdgen`` (the ``duckdb-extension-tpcds`` wheel,
loaded by its file path: no network), the 99 query texts from its ``tpcds_queries()``.
:func:`write_tpcds` writes into a directory:

- ``schema.sql``: the 24 ``CREATE TABLE`` statements with dsdgen's column types, its
  ``BIGINT`` identifiers and counts as ``INTEGER`` (the spec's identifier and integer
  types; ``DECIMAL(7,2)``, ``DATE`` and ``VARCHAR`` as they are), without keys (what
  DuckDB loads);
- ``updates.csv``: the update stream (``docs/formats.md``), epoch by epoch:

  1. the initial load, every row of the 24 tables as a ``+`` line (dimensions first);
  2. then for each of the ``refresh_rounds`` rounds, three epochs in the spirit of the
     spec's data maintenance (clause 5):
     **INS** inserts, per sales channel (store, catalog, web), ``sales_per_refresh``
     new tickets (orders) with all their lines and the returns of those lines, and the
     dimension rows they need: half of the tickets belong to a new customer, inserted
     with a new ``customer_address`` row in the same epoch;
     **DEL** deletes, per channel, the sales sold in a window of ``delete_days``
     consecutive days with their returns (returns first), and the ``inventory`` rows of
     another such window (the spec's DF_SS, DF_CS, DF_WS and DF_I);
     **UPD** changes dimension rows, each as a delete of the old row and an insert of
     the new one: ``customer`` (``c_current_addr_sk`` moved to another address,
     ``c_preferred_cust_flag`` flipped), ``item`` (``i_current_price``) and
     ``customer_address`` (``ca_state``), ``dimension_updates`` customers and addresses
     and a third as many items per epoch;

- ``queries/q01.sql`` ... ``q99.sql``: the schema with the spec's primary keys
  (:data:`KEYS`), then the query as DuckDB's ``tpcds_queries()`` writes it (an ivmflow
  query file);
- ``manifest.json``: the parameters, the epochs (name, inserts and deletes per table).

A new ticket is a copy of a sampled ticket of the current data (all its lines, and its
returns) under a fresh ticket or order number, every date of the copy shifted by one
offset that puts its first sale date on a day drawn from the generated sales' date
range (dates are Julian day numbers, ``d_date_sk``, so a shifted date is a date of
``date_dim``), and its customer and address columns (not NULL ones) set to the
ticket's customer: a new one (a copy of a sampled customer, new key, new id
``N`` + 15 digits, at a new address copied the same way) or an existing one at its
current address. Every choice is drawn from one ``random.Random(seed)`` over key lists
in key order, so a stream is determined by the spec's fields.

Every line is rendered by one SQL expression per table (:mod:`connectors.tpch`'s:
CSV quoting as the csv module does it, NULL as the empty field, dates ISO, decimals
as plain text ``12.50``), so a delete line is byte for byte the line that inserted the
row; each table's lines are written in key order (:data:`KEYS`).

Example (``duckdb`` and ``duckdb-extension-tpcds``, the ``tpcds`` extra):

    >>> import tempfile
    >>> report = write_tpcds(TpcdsSpec(sf=0.01, refresh_rounds=1), tempfile.mkdtemp())
    >>> [e["name"] for e in report["epochs"]]
    ['load', 'INS 1', 'DEL 1', 'UPD 1']
    >>> report["epochs"][1]["inserts"]["customer"], report["epochs"][3]["deletes"]["item"]
    (11, 1)
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from connectors import tpch
from core.errors import UsageError

__all__ = [
    "CHANNELS",
    "KEYS",
    "TABLES",
    "TpcdsSpec",
    "connect",
    "queries",
    "query_file_text",
    "schema_sql",
    "write_tpcds",
]

EXTRA = "tpcds"
MIN_SF = 0.01
"""DuckDB 1.5.5's dsdgen runs forever at SF 0.005 (0.009 still finishes)."""

TABLES = ("date_dim", "time_dim", "income_band", "household_demographics",
          "customer_demographics", "customer_address", "customer", "item", "promotion",
          "reason", "ship_mode", "store", "warehouse", "call_center", "catalog_page",
          "web_site", "web_page", "inventory", "store_sales", "store_returns",
          "catalog_sales", "catalog_returns", "web_sales", "web_returns")
"""In load order: dimensions, then facts (sales before their returns)."""

KEYS: dict[str, tuple[str, ...]] = {
    "date_dim": ("d_date_sk",), "time_dim": ("t_time_sk",),
    "income_band": ("ib_income_band_sk",), "household_demographics": ("hd_demo_sk",),
    "customer_demographics": ("cd_demo_sk",), "customer_address": ("ca_address_sk",),
    "customer": ("c_customer_sk",), "item": ("i_item_sk",), "promotion": ("p_promo_sk",),
    "reason": ("r_reason_sk",), "ship_mode": ("sm_ship_mode_sk",),
    "store": ("s_store_sk",), "warehouse": ("w_warehouse_sk",),
    "call_center": ("cc_call_center_sk",), "catalog_page": ("cp_catalog_page_sk",),
    "web_site": ("web_site_sk",), "web_page": ("wp_web_page_sk",),
    "inventory": ("inv_date_sk", "inv_item_sk", "inv_warehouse_sk"),
    "store_sales": ("ss_item_sk", "ss_ticket_number"),
    "store_returns": ("sr_item_sk", "sr_ticket_number"),
    "catalog_sales": ("cs_item_sk", "cs_order_number"),
    "catalog_returns": ("cr_item_sk", "cr_order_number"),
    "web_sales": ("ws_item_sk", "ws_order_number"),
    "web_returns": ("wr_item_sk", "wr_order_number"),
}
"""The spec's primary keys (clause 2): each table's lines are written in this order."""


@dataclass(frozen=True)
class Channel:
    """One sales channel's two fact tables and the columns a refresh rewrites."""

    sales: str
    returns: str
    number: tuple[str, str]
    """The ticket (order) number in sales and in returns."""
    item: tuple[str, str]
    sold: str
    """The sale date: new tickets are placed, and deletes chosen, by it."""
    dates: tuple[str, ...]
    """Every date column of sales and returns, shifted together with the sale date."""
    customers: tuple[str, ...]
    addresses: tuple[str, ...]


CHANNELS = (
    Channel("store_sales", "store_returns", ("ss_ticket_number", "sr_ticket_number"),
            ("ss_item_sk", "sr_item_sk"), "ss_sold_date_sk",
            ("ss_sold_date_sk", "sr_returned_date_sk"),
            ("ss_customer_sk", "sr_customer_sk"), ("ss_addr_sk", "sr_addr_sk")),
    Channel("catalog_sales", "catalog_returns", ("cs_order_number", "cr_order_number"),
            ("cs_item_sk", "cr_item_sk"), "cs_sold_date_sk",
            ("cs_sold_date_sk", "cs_ship_date_sk", "cr_returned_date_sk"),
            ("cs_bill_customer_sk", "cs_ship_customer_sk", "cr_refunded_customer_sk",
             "cr_returning_customer_sk"),
            ("cs_bill_addr_sk", "cs_ship_addr_sk", "cr_refunded_addr_sk",
             "cr_returning_addr_sk")),
    Channel("web_sales", "web_returns", ("ws_order_number", "wr_order_number"),
            ("ws_item_sk", "wr_item_sk"), "ws_sold_date_sk",
            ("ws_sold_date_sk", "ws_ship_date_sk", "wr_returned_date_sk"),
            ("ws_bill_customer_sk", "ws_ship_customer_sk", "wr_refunded_customer_sk",
             "wr_returning_customer_sk"),
            ("ws_bill_addr_sk", "ws_ship_addr_sk", "wr_refunded_addr_sk",
             "wr_returning_addr_sk")),
)


@dataclass(frozen=True)
class TpcdsSpec:
    """What :func:`write_tpcds` generates."""

    sf: float = 0.01
    refresh_rounds: int = 2
    seed: int = 0
    sales_per_refresh: int | None = None
    """New tickets (orders) per channel in an INS epoch; default ``max(2, SF * 1000)``."""
    delete_days: int = 7
    """The window of sale dates a DEL epoch deletes, per channel (0: no DEL epochs)."""
    dimension_updates: int | None = None
    """Customers and addresses changed per UPD epoch (a third as many items); default
    ``max(3, SF * 300)``; 0: no UPD epochs."""

    @property
    def tickets(self) -> int:
        if self.sales_per_refresh is not None:
            return self.sales_per_refresh
        return max(2, round(self.sf * 1000))

    @property
    def updates_per_epoch(self) -> int:
        if self.dimension_updates is not None:
            return self.dimension_updates
        return max(3, round(self.sf * 300))

    def epoch_names(self) -> list[str]:
        """The refresh epochs after the load, in order."""
        names = []
        for r in range(1, self.refresh_rounds + 1):
            names += [f"INS {r}"] if self.tickets else []
            names += [f"DEL {r}"] if self.delete_days else []
            names += [f"UPD {r}"] if self.updates_per_epoch else []
        return names

    def check(self) -> None:
        if not MIN_SF <= self.sf <= 100:
            msg = (f"the scale factor must be in [{MIN_SF}, 100], not {self.sf} (dsdgen "
                   "does not finish below)")
            raise UsageError(msg)
        for name in ("refresh_rounds", "sales_per_refresh", "delete_days",
                     "dimension_updates"):
            value = getattr(self, name)
            if value is not None and value < 0:
                msg = f"{name.replace('_', ' ')} must be >= 0, not {value}"
                raise UsageError(msg)


# -- DuckDB and its dsdgen ---------------------------------------------------------------


def connect(sf: float | None = None, threads: int = 2) -> Any:
    """An in-memory DuckDB connection with the TPC-DS extension loaded (by path, without
    network) and, if ``sf`` is given, the tables generated by ``dsdgen``, retyped as
    :func:`schema_of` says."""
    con = tpch.connect(None, threads, ext=EXTRA)
    if sf is not None:
        con.execute(f"CALL dsdgen(sf={float(sf)!r})")
        for table, cols in schema_of(con).items():
            casts = ", ".join(f"CAST({n} AS {t}) AS {n}" for n, t in cols)
            con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT {casts} FROM {table}")
    return con


def schema_of(con: Any) -> dict[str, tuple[tuple[str, str], ...]]:
    """Table -> its columns and types, in :data:`TABLES` order, from the connection's
    tables: ``BIGINT`` as ``INTEGER``, every other type as it is."""
    cols: dict[str, list[tuple[str, str]]] = {t: [] for t in TABLES}
    for table, name, typ in con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position"
    ).fetchall():
        if table in cols:
            cols[table].append((name, "INTEGER" if typ == "BIGINT" else typ))
    return {t: tuple(c) for t, c in cols.items()}


def schema_sql(schema: Mapping[str, Sequence[tuple[str, str]]], keys: bool = False) -> str:
    """The CREATE TABLE statements of ``schema`` (:func:`schema_of`), in its order;
    ``keys``: with the spec's primary keys (:data:`KEYS`) declared, as the query files
    have them (ivmflow's planner reads a key as a functional dependency: a join on it
    adds no factor to a bag's size). DuckDB's load, ``schema.sql``, has none: DuckDB
    checks a key within a transaction, and a dimension update deletes and inserts one.

    >>> print(schema_sql({"reason": (("r_reason_sk", "INTEGER"), ("r_desc", "VARCHAR"))},
    ...                  keys=True))
    CREATE TABLE reason (
        r_reason_sk INTEGER,
        r_desc VARCHAR,
        PRIMARY KEY (r_reason_sk)
    );
    <BLANKLINE>
    """
    out = []
    for table, columns in schema.items():
        lines = [f"    {name} {typ}" for name, typ in columns]
        if keys and table in KEYS:
            lines.append(f"    PRIMARY KEY ({', '.join(KEYS[table])})")
        cols = ",\n".join(lines)
        out.append(f"CREATE TABLE {table} (\n{cols}\n);\n")
    return "\n".join(out)


def queries(con: Any | None = None) -> dict[int, str]:
    """Query number -> the text of DuckDB's ``tpcds_queries()``."""
    return tpch.queries(con, EXTRA)


def query_file_text(nr: int, text: str, schema: str) -> str:
    """An ivmflow query file: the schema (:func:`schema_sql`, with its keys), then
    query ``nr``."""
    head = (f"-- TPC-DS Q{nr}, as DuckDB's tpcds_queries() writes it,\n"
            "-- over dsdgen's schema (identifiers INTEGER) with the spec's primary keys.\n")
    return f"{head}{schema}\n{text.strip()}\n"


# -- refresh epochs ----------------------------------------------------------------------


class _Keys:
    """Fresh keys: one past the largest in use, counting up."""

    def __init__(self, con: Any, sql: str) -> None:
        self.next = int(con.execute(sql).fetchone()[0] or 0) + 1

    def take(self) -> int:
        self.next += 1
        return self.next - 1


def _ints(con: Any, sql: str) -> list[int]:
    return [int(r[0]) for r in con.execute(sql).fetchall()]


def _temp(con: Any, name: str, cols: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
    """A temporary table ``name`` of INTEGER columns ``cols`` holding ``rows``."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} "
                f"({', '.join(f'{c} INTEGER' for c in cols)})")
    if rows:
        tpch._insert(con, name, rows)


def _copy_rows(con: Any, out: tpch._Stream, table: str, select: str) -> None:
    """Insert the rows ``select`` gives into ``table`` and write them as ``+`` lines."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE new_rows AS {select}")
    out.emit(table, "+", "new_rows")
    con.execute(f"INSERT INTO {table} SELECT * FROM new_rows")


@dataclass
class _Refresh:
    """The state the refresh epochs draw from: date range, key counters."""

    con: Any
    rng: random.Random
    first_day: int
    last_day: int

    @classmethod
    def of(cls, con: Any, rng: random.Random) -> _Refresh:
        lo, hi = con.execute("SELECT min(ss_sold_date_sk), max(ss_sold_date_sk) "
                             "FROM store_sales").fetchone()
        return cls(con, rng, int(lo), int(hi))

    def day(self, span: int = 0) -> int:
        """A day of the sales' date range, ``span`` more days still inside it."""
        return self.rng.randint(self.first_day, max(self.first_day, self.last_day - span))


def _new_customers(ref: _Refresh, out: tpch._Stream, k: int) -> list[tuple[int, int]]:
    """``k`` new customers at new addresses (copies of sampled ones): (customer, address)."""
    con, rng = ref.con, ref.rng
    if not k:
        return []
    addresses = _Keys(con, "SELECT max(ca_address_sk) FROM customer_address")
    customers = _Keys(con, "SELECT max(c_customer_sk) FROM customer")
    old_a = rng.choices(_ints(con, "SELECT ca_address_sk FROM customer_address ORDER BY 1"),
                        k=k)
    old_c = rng.choices(_ints(con, "SELECT c_customer_sk FROM customer ORDER BY 1"), k=k)
    pairs = [(customers.take(), addresses.take()) for _ in range(k)]
    _temp(con, "pick", ("old_c", "old_a", "c", "a"),
          [(oc, oa, c, a) for oc, oa, (c, a) in zip(old_c, old_a, pairs)])
    _copy_rows(con, out, "customer_address",
               "SELECT t.* REPLACE (p.a AS ca_address_sk, "
               "printf('N%015d', p.a) AS ca_address_id) "
               "FROM customer_address t JOIN pick p ON t.ca_address_sk = p.old_a")
    _copy_rows(con, out, "customer",
               "SELECT t.* REPLACE (p.c AS c_customer_sk, "
               "printf('N%015d', p.c) AS c_customer_id, p.a AS c_current_addr_sk) "
               "FROM customer t JOIN pick p ON t.c_customer_sk = p.old_c")
    return pairs


def _ins(ref: _Refresh, out: tpch._Stream, n: int) -> None:
    """New tickets per channel with their returns; half of them for new customers."""
    con, rng = ref.con, ref.rng
    new_customer = [rng.random() < 0.5 for _ in range(n * len(CHANNELS))]
    fresh: Iterator[tuple[int, int]] = iter(_new_customers(ref, out, sum(new_customer)))
    existing = con.execute("SELECT c_customer_sk, c_current_addr_sk FROM customer "
                           "WHERE c_current_addr_sk IS NOT NULL ORDER BY 1").fetchall()
    flags = iter(new_customer)
    for ch in CHANNELS:
        sales_no, returns_no = ch.number
        numbers = _Keys(con, f"SELECT greatest((SELECT max({sales_no}) FROM {ch.sales}), "
                             f"(SELECT max({returns_no}) FROM {ch.returns}))")
        firsts = con.execute(f"SELECT {sales_no}, min({ch.sold}) FROM {ch.sales} "
                             f"WHERE {sales_no} IS NOT NULL GROUP BY 1 "
                             f"HAVING min({ch.sold}) IS NOT NULL ORDER BY 1").fetchall()
        picks = []
        for old, first in rng.sample(firsts, min(n, len(firsts))):
            cust, addr = next(fresh) if next(flags) else rng.choice(existing)
            picks.append((int(old), numbers.take(), ref.day() - int(first), cust, addr))
        _temp(con, "pick", ("old", "new", "shift", "c", "a"), picks)
        for table, number in ((ch.sales, sales_no), (ch.returns, returns_no)):
            cols = {c for c, _ in out.schema[table]}
            replace = [f"p.new AS {number}"]
            replace += [f"t.{c} + p.shift AS {c}" for c in ch.dates if c in cols]
            replace += [f"CASE WHEN t.{c} IS NOT NULL THEN p.{v} END AS {c}"
                        for v, group in (("c", ch.customers), ("a", ch.addresses))
                        for c in group if c in cols]
            _copy_rows(con, out, table, f"SELECT t.* REPLACE ({', '.join(replace)}) "
                                        f"FROM {table} t JOIN pick p ON t.{number} = p.old")


def _del(ref: _Refresh, out: tpch._Stream, days: int) -> None:
    """Per channel, the sales of ``days`` consecutive sale dates and their returns
    (returns first); then the inventory of another window."""
    for ch in CHANNELS:
        start = ref.day(days - 1)
        (s_no, r_no), (s_item, r_item) = ch.number, ch.item
        sold = f"{ch.sold} BETWEEN {start} AND {start + days - 1}"
        returns = (f"WHERE EXISTS (SELECT 1 FROM {ch.sales} s WHERE s.{sold} "
                   f"AND s.{s_no} = {ch.returns}.{r_no} "
                   f"AND s.{s_item} = {ch.returns}.{r_item})")
        out.emit(ch.returns, "-", where=returns)
        ref.con.execute(f"DELETE FROM {ch.returns} {returns}")
        out.emit(ch.sales, "-", where=f"WHERE {sold}")
        ref.con.execute(f"DELETE FROM {ch.sales} WHERE {sold}")
    start = ref.day(days - 1)
    where = f"WHERE inv_date_sk BETWEEN {start} AND {start + days - 1}"
    out.emit("inventory", "-", where=where)
    ref.con.execute(f"DELETE FROM inventory {where}")


def _change(ref: _Refresh, out: tpch._Stream, table: str, rows: list[tuple[Any, ...]],
            assign: str, value_type: str) -> None:
    """Rows ``(key, v1, v2)`` of ``table``: delete the old rows, ``SET assign`` (over
    ``u.v1``, ``u.v2``), insert the new ones."""
    key = KEYS[table][0]
    ref.con.execute(f"CREATE OR REPLACE TEMP TABLE u (k INTEGER, v1 {value_type}, "
                    "v2 INTEGER)")
    tpch._insert(ref.con, "u", rows)
    where = f"WHERE EXISTS (SELECT 1 FROM u WHERE u.k = {table}.{key})"
    out.emit(table, "-", where=where)
    ref.con.execute(f"UPDATE {table} SET {assign} FROM u WHERE u.k = {table}.{key}")
    out.emit(table, "+", where=where)


def _upd(ref: _Refresh, out: tpch._Stream, n: int) -> None:
    """Dimension updates as delete + insert: customers move and flip their preferred
    flag, items change price, addresses change state."""
    con, rng = ref.con, ref.rng
    addresses = _ints(con, "SELECT ca_address_sk FROM customer_address ORDER BY 1")
    customers = rng.sample(_ints(con, "SELECT c_customer_sk FROM customer ORDER BY 1"), n)
    _change(ref, out, "customer", [(c, rng.choice(addresses), None) for c in customers],
            "c_current_addr_sk = u.v1, c_preferred_cust_flag = CASE "
            "c_preferred_cust_flag WHEN 'Y' THEN 'N' WHEN 'N' THEN 'Y' END", "INTEGER")
    items = rng.sample(_ints(con, "SELECT i_item_sk FROM item ORDER BY 1"), max(1, n // 3))
    _change(ref, out, "item", [(i, rng.randint(9, 9999) / 100, None) for i in items],
            "i_current_price = u.v1", "DECIMAL(7,2)")
    states = [r[0] for r in con.execute("SELECT DISTINCT ca_state FROM customer_address "
                                        "WHERE ca_state IS NOT NULL ORDER BY 1").fetchall()]
    moved = rng.sample(addresses, min(n, len(addresses)))
    _change(ref, out, "customer_address", [(a, rng.choice(states), None) for a in moved],
            "ca_state = u.v1", "VARCHAR")


# -- the whole directory -----------------------------------------------------------------


def write_tpcds(spec: TpcdsSpec, out_dir: str | Path) -> dict[str, Any]:
    """Generate ``spec``'s data and stream into ``out_dir`` (created if need be);
    returns the manifest (also written as ``manifest.json``)."""
    spec.check()
    t0 = time.perf_counter()
    out = Path(out_dir)
    (out / "queries").mkdir(parents=True, exist_ok=True)
    con = connect(spec.sf)
    t_dsdgen = time.perf_counter() - t0
    schema = schema_of(con)
    ddl = schema_sql(schema)
    (out / "schema.sql").write_text(ddl, encoding="utf-8")
    keyed = schema_sql(schema, keys=True)
    for nr, text in queries(con).items():
        (out / "queries" / f"q{nr:02d}.sql").write_text(query_file_text(nr, text, keyed),
                                                        encoding="utf-8")
    stream = tpch._Stream(con, out / "updates.csv", schema, KEYS)
    try:
        for table in TABLES:
            stream.emit(table, "+")
        ref = _Refresh.of(con, random.Random(spec.seed))
        for name in spec.epoch_names():
            stream.end_epoch(name)
            if name.startswith("INS"):
                _ins(ref, stream, spec.tickets)
            elif name.startswith("DEL"):
                _del(ref, stream, spec.delete_days)
            else:
                _upd(ref, stream, spec.updates_per_epoch)
        stream.end_epoch(None)
    finally:
        stream.close()
        con.close()
    return stream.manifest(out, {"spec": asdict(spec), "tickets_per_channel": spec.tickets,
                                 "updates_per_epoch": spec.updates_per_epoch},
                           {"dsdgen": t_dsdgen, "total": time.perf_counter() - t0})
