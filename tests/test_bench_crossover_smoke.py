"""The crossover benchmark on a tiny stream: every system agrees with ivmflow (the script
exits non-zero otherwise), the JSON has the expected shape, the plot is written."""

from __future__ import annotations

import json
from pathlib import Path

from bench import crossover_bench
from bench.baseline_delta import DeltaIVM
from bench.baseline_scp import oracle_deltas
from bench.harness.streams import zipf_stream
from core.native import native_available


def test_stream_is_a_fifo_window() -> None:
    st = zipf_stream(50, 60, seed=3)
    assert len(st.warm) == 50 and len(st.timed) == 60
    live = {u.row for u in st.warm}
    for u in st.timed:
        if u.op == "+":
            assert u.row not in live
            live.add(u.row)
        else:
            live.remove(u.row)
        assert len(live) in (50, 51)


def test_delta_ivm_matches_the_oracle() -> None:
    st = zipf_stream(30, 120, seed=5)
    stream = st.warm + st.timed
    epochs = [stream[i:i + 7] for i in range(0, len(stream), 7)]
    for q in crossover_bench.QUERIES:
        cq = crossover_bench.query_cq(q, st.threshold)
        ivm = DeltaIVM(cq)
        got = []
        for ep in epochs:
            for u in ep:
                ivm.apply(u)
            got.append(ivm.end_epoch())
        assert got == oracle_deltas(cq, epochs), q


def test_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "crossover.json"
    assert crossover_bench.main(["--quick", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert {"rows", "commit", "machine", "skipped", "winners", "latency_epoch1_hop3_filter",
            "duckdb_note"} <= set(doc)
    keys = {(r["query"], r["window"], r["epoch"], r["system"])
            for r in doc["rows"] + doc["skipped"]}
    assert len(keys) == 3 * 2 * 4 * len(crossover_bench.SYSTEMS)
    assert all(r["system"] != "ivmflow" for r in doc["skipped"])
    # The compiled view runs where it can be built, else every point says why not.
    expected = set(crossover_bench.SYSTEMS)
    if native_available() is not None:
        expected.discard("ivmflow_native")
    assert {r["system"] for r in doc["rows"]} == expected
    by_point: dict[tuple[str, int, int], set[int]] = {}
    for r in doc["rows"]:
        if not r["extrapolated"]:
            by_point.setdefault((r["query"], r["window"], r["epoch"]), set()).add(
                r["delta_rows"])
    assert all(len(v) == 1 for v in by_point.values())  # same rows where all ran fully
    assert all(set(v) >= {"p50_us", "p99_us"}
               for v in doc["latency_epoch1_hop3_filter"].values())
    assert out.with_suffix(".png").stat().st_size > 0
