"""``ivmflow generate tpch`` (connectors/tpch.py) and the TPC-H test oracle
(tests/tpch_oracle.py): the stream's invariants at SF 0.01 with 2 refresh pairs, the
DuckDB replay against DuckDB's own tables, and the comparison helpers."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
import tpch_oracle as to

SF = 0.01
ORDERS = 15_000  # SF * 1,500,000
PER_REFRESH = 15  # SF * 1500
BASE = {"region": 5, "nation": 25, "supplier": 100, "customer": 1500, "part": 2000,
        "partsupp": 8000, "orders": ORDERS, "lineitem": 60_175}


@pytest.fixture(scope="module")
def stats(tpch_sf001: Path) -> to.StreamStats:
    return to.check_stream(tpch_sf001 / "updates.csv")


def test_directory_layout(tpch_sf001: Path) -> None:
    names = sorted(p.name for p in (tpch_sf001 / "queries").iterdir())
    assert names == [f"q{i:02d}.sql" for i in range(1, 23)]
    schema = (tpch_sf001 / "schema.sql").read_text()
    assert schema.count("CREATE TABLE") == 8
    for typ in ("DECIMAL(15,2)", "DATE", "CHAR(25)", "VARCHAR(44)", "o_orderkey INTEGER"):
        assert typ in schema
    q1 = (tpch_sf001 / "queries" / "q01.sql").read_text()
    assert q1.count("CREATE TABLE") == 8 and "l_returnflag" in to.query_part(q1)
    manifest = json.loads((tpch_sf001 / "manifest.json").read_text())
    assert [e["name"] for e in manifest["epochs"]] == [
        "load", "RF1 1", "RF2 1", "UPD 1", "RF1 2", "RF2 2", "UPD 2"]


def test_stream_invariants(stats: to.StreamStats, tpch_sf001: Path) -> None:
    # check_stream asserted that every delete removes a row that is there, byte for byte.
    assert stats.inserts[0] == BASE and not stats.deletes[0]
    assert len(stats.inserts) == 7
    for pair in range(2):
        rf1, rf2, upd = (3 * pair + 1, 3 * pair + 2, 3 * pair + 3)
        assert stats.inserts[rf1]["orders"] == PER_REFRESH and not stats.deletes[rf1]
        assert PER_REFRESH <= stats.inserts[rf1]["lineitem"] <= 7 * PER_REFRESH
        assert stats.deletes[rf2]["orders"] == PER_REFRESH and not stats.inserts[rf2]
        assert PER_REFRESH <= stats.deletes[rf2]["lineitem"] <= 7 * PER_REFRESH
        assert stats.inserts[upd] == stats.deletes[upd]  # each change: delete + insert
        assert set(stats.inserts[upd]) == {"customer", "supplier", "partsupp"}
    live = dict(stats.live)
    assert live["orders"] == ORDERS  # RF1 and RF2 balance
    assert {k: v for k, v in live.items() if k not in ("orders", "lineitem")} == {
        k: v for k, v in BASE.items() if k not in ("orders", "lineitem")}
    inserted = sum(stats.inserts[k]["lineitem"] for k in (1, 4))
    deleted = sum(stats.deletes[k]["lineitem"] for k in (2, 5))
    assert live["lineitem"] == BASE["lineitem"] + inserted - deleted


def test_generation_is_deterministic(tpch_sf001: Path, tmp_path: Path) -> None:
    again = to.generate(tmp_path / "a", sf=SF, refresh_pairs=2, seed=0)
    assert (again / "updates.csv").read_bytes() == (tpch_sf001 / "updates.csv").read_bytes()
    other = to.generate(tmp_path / "b", sf=SF, refresh_pairs=1, seed=1)
    a, b = to.read_epochs(tpch_sf001 / "updates.csv"), to.read_epochs(other / "updates.csv")
    assert a[0] == b[0] and a[1] != b[1]  # same load (dbgen), other refreshes


def test_replay_keeps_keys_and_matches_dbgen(tpch_sf001: Path, stats: to.StreamStats) -> None:
    from connectors import tpch

    epochs = to.read_epochs(tpch_sf001 / "updates.csv")
    with to.DuckReplay(tpch_sf001 / "schema.sql") as db:
        # After the load: exactly DuckDB's dbgen tables (typed by the spec's schema).
        db.apply_epoch(epochs[0])
        ref = tpch.connect(SF)
        for table in tpch.TABLES:
            cols = ", ".join(n for n, _ in tpch.SCHEMA[table])
            mine = db.query(f"SELECT {cols} FROM {table} ORDER BY ALL")
            theirs = [tuple(r) for r in ref.execute(
                f"SELECT {cols} FROM {table} ORDER BY ALL").fetchall()]
            assert mine == theirs, table
        ref.close()
        orphans = ("SELECT count(*) FROM lineitem WHERE l_orderkey NOT IN "
                   "(SELECT o_orderkey FROM orders)")
        for k, epoch in enumerate(epochs[1:], 2):
            db.apply_epoch(epoch)
            assert db.query(orphans) == [(0,)], f"epoch {k}"
        for table, n in stats.live.items():
            assert db.count(table) == n
        checks = {
            # every lineitem's part/supplier pair exists; orders keep their lineitems
            "SELECT count(*) FROM lineitem WHERE (l_partkey, l_suppkey) NOT IN "
            "(SELECT (ps_partkey, ps_suppkey) FROM partsupp)": 0,
            "SELECT count(*) FROM orders WHERE o_orderkey NOT IN "
            "(SELECT l_orderkey FROM lineitem)": 0,
            "SELECT count(*) FROM orders WHERE o_custkey NOT IN "
            "(SELECT c_custkey FROM customer WHERE c_custkey % 3 <> 0)": 0,
            "SELECT count(*) FROM lineitem WHERE l_shipdate <= CAST('1995-06-17' AS DATE) "
            "AND l_linestatus <> 'F' OR l_shipdate > CAST('1995-06-17' AS DATE) "
            "AND l_linestatus <> 'O'": 0,
            "SELECT count(DISTINCT o_orderkey) - count(*) FROM orders": 0,
        }
        for sql, want in checks.items():
            assert db.query(sql) == [(want,)], sql


def test_answers_per_epoch_first_epoch_is_the_official_data(tpch_sf001: Path) -> None:
    from connectors import tpch

    q1 = tpch_sf001 / "queries" / "q01.sql"
    q6 = tpch_sf001 / "queries" / "q06.sql"
    got = to.duckdb_answers_many(tpch_sf001 / "schema.sql", tpch_sf001 / "updates.csv",
                                 {"q1": q1, "q6": q6})
    assert len(got["q1"]) == len(got["q6"]) == 7
    ref = tpch.connect(SF)
    for name, path in (("q1", q1), ("q6", q6)):
        want = [tuple(r) for r in ref.execute(to.query_part(path.read_text())).fetchall()]
        assert got[name][0] == want
    ref.close()
    # Refreshes change Q1's sums; an UPD epoch (no lineitem) does not.
    assert got["q1"][1] != got["q1"][0]
    assert got["q1"][3] == got["q1"][2]


def test_bag_semantics_of_the_replay(tmp_path: Path) -> None:
    u = tmp_path / "u.csv"
    u.write_text("+3,R,1,x\n+,R,2,\n*\n-2,R,1,x\n-,R,2,\n+,R,2,\n*\n-,R,1,x\n+,R,1,x\n*\n"
                 '+,R,3,"a,""b"""\n*\n')
    got = to.duckdb_answers_per_epoch("CREATE TABLE R(a INT, b VARCHAR);", u,
                                      "SELECT a, b FROM R ORDER BY a")
    assert got == [[(1, "x")] * 3 + [(2, None)], [(1, "x"), (2, None)],
                   [(1, "x"), (2, None)], [(1, "x"), (2, None), (3, 'a,"b"')]]
    u.write_text("+,R,1,x\n*\n-2,R,1,x\n*\n")
    with pytest.raises(ValueError, match="not there"):
        to.duckdb_answers_per_epoch("CREATE TABLE R(a INT, b VARCHAR);", u, "SELECT * FROM R")


def test_accumulate_and_compare() -> None:
    deltas = [(1, 1, ("a", Decimal("1.50"))), (1, 2, ("b", 2)), (3, -1, ("b", 2)),
              (3, 1, ("c", None))]
    got = to.accumulate_deltas(deltas, n_epochs=3)
    assert got == [[("a", Decimal("1.50")), ("b", 2), ("b", 2)]] * 2 + [
        [("a", Decimal("1.50")), ("b", 2), ("c", None)]]
    want = [[("b", 2.0), ("a", 1.5000000000001), ("b", 2)]] * 2 + [
        [("c", None), ("b", 2), ("a", 1.5)]]
    assert to.compare_answers(got, want) == []
    off = [[("a", 1.5001), ("b", 2), ("b", 2)], *want[1:]]
    assert len(to.compare_answers(got, off)) == 1
    # exact numbers compare exactly; dates as ISO text
    assert not to.values_equal(Decimal("0.10"), Decimal("0.1000000001"))
    import datetime as dt
    assert to.values_equal(dt.date(1995, 3, 15), "1995-03-15")
    with pytest.raises(ValueError, match="count -1"):
        to.accumulate_deltas([(1, -1, ("a",))])


def test_ivmflow_answers_agree_where_the_compiler_accepts(tpch_sf001: Path) -> None:
    """A join and aggregate over the TPC-H stream, per epoch, against DuckDB (the
    compiler accepts the spec's schema: a refusal fails)."""
    sql = (tpch_sf001 / "schema.sql").read_text() + (
        "SELECT o_orderstatus, COUNT(*) AS n FROM orders, lineitem "
        "WHERE o_orderkey = l_orderkey GROUP BY o_orderstatus;")
    got = to.ivmflow_answers_per_epoch(sql, tpch_sf001 / "updates.csv")
    want = to.duckdb_answers_per_epoch(tpch_sf001 / "schema.sql",
                                       tpch_sf001 / "updates.csv", sql)
    to.assert_answers_equal(got, want)


def test_cli(tmp_path: Path) -> None:
    pytest.importorskip("duckdb_extension_tpch")
    from dataflow.cli import main

    out = tmp_path / "t"
    assert main(["generate", "tpch", "--sf", "0.001", "--refresh-pairs", "1", "--seed", "3",
                 "--other-updates", "0", "--out", str(out), "--quiet"]) == 0
    assert [e["name"] for e in json.loads((out / "manifest.json").read_text())["epochs"]] == [
        "load", "RF1 1", "RF2 1"]
    assert len(to.read_epochs(out / "updates.csv")) == 3
    assert main(["generate", "tpch", "--sf", "0", "--out", str(out)]) == 2
