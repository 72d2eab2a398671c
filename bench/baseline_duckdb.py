"""Recomputation baseline on DuckDB: per epoch, apply the epoch's updates to DuckDB
tables and re-run the query; the delta is ``new result - old result`` as multisets.

Bag tables: Python keeps the authoritative multiplicity of every tuple (a dict per
relation). At the end of an epoch every tuple whose count changed is rewritten in bulk:
all its copies are deleted (``DELETE ... USING`` a temp table of changed tuples,
NULL-safe) and ``count`` copies are inserted again (``INSERT ... SELECT unnest($k)``).
That is correct for any multiplicities and costs O(changed tuples) statements-wise.

Example:
    >>> sql = "CREATE TABLE R(a INT, b INT);\\nSELECT a, COUNT(*) FROM R GROUP BY a;"
    >>> db = DuckDBRecompute(sql)
    >>> db.apply(Update("+", "R", (1, 2))); db.apply(Update("+", "R", (1, 3)))
    >>> db.end_epoch()
    {(1, 2): 1}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import duckdb

from bench.baseline_scp import Bag, Row, diff
from core.records import Update


def split_sql(sql: str) -> tuple[list[str], str]:
    """``CREATE TABLE`` statements and the final ``SELECT`` of a query file."""
    stmts = [s.strip() for s in sql.split(";") if s.strip()]
    if not stmts:
        raise ValueError("empty query text")
    return stmts[:-1], stmts[-1]


class DuckDBRecompute:
    """Full re-evaluation per epoch on an in-memory DuckDB database."""

    def __init__(self, sql: str, threads: int = 1) -> None:
        ddl, self.select = split_sql(sql)
        self.con = duckdb.connect(":memory:")
        self.con.execute(f"SET threads = {int(threads)}")
        self.columns: dict[str, list[str]] = {}
        for stmt in ddl:
            self.con.execute(stmt)
        for (name,) in self.con.execute(
                "SELECT table_name FROM information_schema.tables").fetchall():
            cols = self.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position", [name]).fetchall()
            self.columns[name.upper()] = [c for (c,) in cols]
        self.counts: dict[str, dict[Row, int]] = {r: {} for r in self.columns}
        self._pending: dict[str, dict[Row, int]] = {}
        self._old: Bag = {}
        self.updates = 0

    def _table(self, relation: str) -> str:
        rel = relation.upper()
        if rel not in self.columns:
            raise ValueError(f"unknown relation {relation!r}")
        return rel

    def load(self, updates: Iterable[Update]) -> None:
        """Apply updates and compute the result without producing a delta (untimed
        warm start: the state before the first measured epoch)."""
        for u in updates:
            self.apply(u)
        self._flush()
        self._old = self._query()
        self.updates = 0

    def apply(self, u: Update) -> None:
        """Buffer one update (written to DuckDB at the end of the epoch)."""
        rel = self._table(u.relation)
        counts = self.counts[rel]
        c = counts.get(u.row, 0) + u.signed_mult
        if c < 0:
            raise ValueError(f"delete of {u.row} from {u.relation}: only {c - u.signed_mult}"
                             " copies present")
        if c:
            counts[u.row] = c
        else:
            counts.pop(u.row, None)
        self._pending.setdefault(rel, {})[u.row] = c
        self.updates += 1

    def _flush(self) -> None:
        con = self.con
        for rel, changed in self._pending.items():
            if not changed:
                continue
            cols = self.columns[rel]
            keys = list(changed)
            params: list[Any] = [[k[i] for k in keys] for i in range(len(cols))]
            sel = ", ".join(f"unnest(${i + 1}) AS {c}" for i, c in enumerate(cols))
            con.execute(f"CREATE OR REPLACE TEMP TABLE _chg AS SELECT {sel}", params)
            cond = " AND ".join(f"{rel}.{c} IS NOT DISTINCT FROM _chg.{c}" for c in cols)
            con.execute(f"DELETE FROM {rel} USING _chg WHERE {cond}")
            copies = [k for k, c in changed.items() for _ in range(c)]
            if copies:
                params = [[k[i] for k in copies] for i in range(len(cols))]
                sel = ", ".join(f"unnest(${i + 1})" for i in range(len(cols)))
                con.execute(f"INSERT INTO {rel} SELECT {sel}", params)
        self._pending = {}

    def _query(self) -> Bag:
        out: Bag = {}
        for row in self.con.execute(self.select).fetchall():
            r = tuple(row)
            out[r] = out.get(r, 0) + 1
        return out

    def end_epoch(self) -> Bag:
        """Write the epoch's changes, re-run the query, return ``new - old``."""
        self._flush()
        new = self._query()
        delta = diff(new, self._old)
        self._old = new
        return delta

    def state_entries(self) -> int:
        """Stored rows: base-table rows (with duplicates) plus the kept old result."""
        total = sum(sum(c.values()) for c in self.counts.values())
        return total + len(self._old)

    def memory_bytes(self) -> int:
        """DuckDB's own accounting of its memory (``duckdb_memory()``)."""
        row = self.con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()
        return int(row[0] or 0) if row else 0

    def close(self) -> None:
        self.con.close()
