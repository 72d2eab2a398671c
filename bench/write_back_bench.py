"""What a distributed runner writes back: state entries changed per update, per map.

The Flink and Spark runners keep a partition's engine state per entry and write back,
per epoch or micro-batch, only the entries the epoch changed (docs/runners.md); each
write is a call through PyFlink's or PySpark's state API, so the number of changed
entries per update is the runners' main per-update cost. It is deterministic (it does
not depend on the machine), so two commits can be compared exactly.

The stream is the one of ``bench.runner_state_bench`` (uniform graph at W / 2 nodes, a FIFO
window of W edges, then ``--steady-edges`` inserts each followed by the delete of the
oldest edge), run through one :class:`~dataflow.distributed.partitions.PartitionTask` over a
:class:`~operators.writeback.WriteBackState` with epochs of 1000 updates; the steady epochs'
changed entries are counted per map.

    python -m bench.write_back_bench [--queries hop2_count hop4_bag ...] [--window 80000]

Prints a table per query and writes bench/results/write_back.json.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, command_line, result_record
from bench.harness.streams import window_files
from bench.runner_state_bench import EPOCH, SQL
from connectors.files import read_updates
from core.epochs import CLOSE, EpochCursor
from dataflow.api import compile_query
from dataflow.distributed.partitions import PartitionTask, WorkerPlan, tag_records
from operators.writeback import WriteBackState, encode_entry, encode_key

DDL = "CREATE TABLE G(src INT, dst INT);\n"
QUERIES = {
    "hop2_count": "SELECT G1.src AS a, COUNT(*) AS n FROM G G1, G G2 "
                  "WHERE G1.dst = G2.src GROUP BY G1.src",
    "hop3_filter": "SELECT G1.src, G2.src, G3.src, G3.dst FROM G G1, G G2, G G3 "
                   "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst > 100",
    "hop4_bag": "SELECT G2.src, G3.src, G3.dst FROM G G1, G G2, G G3, G G4 "
                "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G4.src",
    "star_count": "SELECT G1.src, COUNT(*) FROM G G1, G G2, G G3 "
                  "WHERE G1.src = G2.src AND G1.src = G3.src GROUP BY G1.src",
}


def count(name: str, window: int, steady_edges: int) -> dict[str, Any]:
    """Changed entries per steady update, in total and per map, for query ``name``."""
    q = compile_query(DDL + QUERIES[name] + ";\n")
    with tempfile.TemporaryDirectory() as tmp:
        path, _query, warm_epochs = window_files(window, steady_edges, Path(tmp), SQL, EPOCH)
        records = list(read_updates(str(path), q.schema))
    compiled, layout = WorkerPlan.of(q, 1).compiled()
    state = WriteBackState()
    task = PartitionTask(compiled, layout, state=state)
    numbered = EpochCursor().number(records, epoch_size=EPOCH, final=True)
    per_map: collections.Counter[str] = collections.Counter()
    written_bytes = 0
    steady = 0
    batch: list[Any] = []
    for row in tag_records(layout, numbered):
        batch.append(row)
        if row.kind != CLOSE:
            continue
        task.process(batch)
        changes = state.changes()
        if row.epoch > warm_epochs:
            for map_name, puts, gone in changes:
                per_map[map_name] += len(puts) + len(gone)
                # What a runner hands its store: encoded keys and entries, removed keys.
                written_bytes += sum(len(encode_key(k)) + len(encode_entry(k, v))
                                     for k, v in puts.items())
                written_bytes += sum(len(encode_key(k)) for k in gone)
            steady += len({r.seq for r in batch if r.kind != CLOSE})
        batch = []
    return {
        "query": name, "window": window, "steady_updates": steady,
        "entries_per_update": sum(per_map.values()) / steady,
        "bytes_per_update": written_bytes / steady,
        "state_entries": state.entries(),
        "per_map": {m: c / steady for m, c in per_map.most_common()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", nargs="+", default=list(QUERIES), choices=QUERIES)
    ap.add_argument("--window", type=int, default=80_000)
    ap.add_argument("--steady-edges", type=int, default=10_000)
    ap.add_argument("--out", default=str(RESULTS / "write_back.json"))
    args = ap.parse_args(argv)
    rows = [count(name, args.window, args.steady_edges) for name in args.queries]
    for r in rows:
        print(f"\n{r['query']} (W={r['window']}): {r['entries_per_update']:.2f} changed "
              f"entries ({r['bytes_per_update']:.0f} bytes) per update, "
              f"{r['state_entries']:,} entries in state")
        print("| map | entries per update |\n|---|---|")
        for m, v in r["per_map"].items():
            print(f"| {m} | {v:.2f} |")
    result_record("write_back", rows, command=command_line("bench.write_back_bench", argv),
                  extra={"epoch": EPOCH}, out=args.out, table=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
