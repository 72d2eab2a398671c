"""``ivmflow generate tpcds`` (connectors/tpcds.py) at SF 0.01 with one small refresh
round: the epochs are consistent (every delete removes a row that is there, byte for
byte), the stream is determined by its seed, and the 99 query files parse and bind in
DuckDB over the written schema."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
import tpch_oracle as to

from core.errors import UsageError

pytest.importorskip("duckdb_extension_tpcds", reason="TPC-DS generation needs the tpcds "
                    'extra: pip install -e ".[tpcds]"')

from connectors import tpcds  # noqa: E402

SPEC = tpcds.TpcdsSpec(sf=0.01, refresh_rounds=1, sales_per_refresh=3, delete_days=5,
                       dimension_updates=2)
FACTS = ("store_sales", "store_returns", "catalog_sales", "catalog_returns", "web_sales",
         "web_returns")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tpcds")
    tpcds.write_tpcds(SPEC, out)
    return out


def test_epochs_are_consistent(data: Path) -> None:
    stats = to.check_stream(data / "updates.csv")  # asserts every delete finds its row
    manifest = json.loads((data / "manifest.json").read_text())
    assert [e["name"] for e in manifest["epochs"]] == ["load", "INS 1", "DEL 1", "UPD 1"]
    load, ins, dele, upd = range(4)
    assert set(stats.inserts[load]) == set(tpcds.TABLES) and not stats.deletes[load]
    assert not stats.deletes[ins] and not stats.inserts[dele]
    assert {"store_sales", "catalog_sales", "web_sales"} <= set(stats.inserts[ins])
    # a new customer comes with its address, in the same epoch
    assert stats.inserts[ins]["customer"] == stats.inserts[ins]["customer_address"]
    assert set(stats.deletes[dele]) <= {*FACTS, "inventory"}
    assert stats.inserts[upd] == stats.deletes[upd] == {
        "customer": 2, "item": 1, "customer_address": 2}
    for k, epoch in enumerate(manifest["epochs"]):
        assert {t: n for t, n in epoch["inserts"].items() if n} == dict(stats.inserts[k])
        assert {t: n for t, n in epoch["deletes"].items() if n} == dict(stats.deletes[k])


def test_returns_reference_live_sales(data: Path) -> None:
    """After every epoch each return's (item, ticket) is a sale of its channel."""
    checks = {
        ch.returns: (f"SELECT count(*) FROM {ch.returns} r WHERE NOT EXISTS (SELECT 1 "
                     f"FROM {ch.sales} s WHERE s.{ch.item[0]} = r.{ch.item[1]} "
                     f"AND s.{ch.number[0]} = r.{ch.number[1]})")
        for ch in tpcds.CHANNELS}
    answers = to.duckdb_answers_many(data / "schema.sql", data / "updates.csv", checks)
    for table, per_epoch in answers.items():
        orphans = [rows[0][0] for rows in per_epoch]
        # dsdgen's own returns may miss their sale; refreshes never add to those
        assert orphans == [orphans[0]] * len(orphans), table


def test_stream_is_determined_by_the_seed(data: Path, tmp_path: Path) -> None:
    tpcds.write_tpcds(SPEC, tmp_path / "again")
    assert (tmp_path / "again" / "updates.csv").read_bytes() == \
        (data / "updates.csv").read_bytes()


def test_queries_parse_in_duckdb(data: Path) -> None:
    files = sorted((data / "queries").glob("q*.sql"))
    assert [f.stem for f in files] == [f"q{i:02d}" for i in range(1, 100)]
    con = duckdb.connect()
    con.execute((data / "schema.sql").read_text())
    for f in files:
        text = f.read_text()
        assert text.count("CREATE TABLE") == len(tpcds.TABLES)
        con.execute("EXPLAIN " + to.query_part(text))


def test_scale_factor_below_dsdgen_minimum_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="dsdgen"):
        tpcds.write_tpcds(tpcds.TpcdsSpec(sf=0.005), tmp_path)
