"""What reading an update file costs per record: the C parser of the common lines
(``core/native_parse.pyx``, the native build's) next to the Python parser, in the same
process, on TPC-H's update stream (docs/architecture.md, "Reading update files").

Per table of the stream (its lines apart, from memory: parsing alone) and for the
whole file (``read_updates``: reading, decoding and parsing, as ``ivmflow run`` and
the benchmarks do): records per second each way, best of ``--repeat`` (process CPU),
and the ratio. Both ways make the same records; the run checks that on every line.

    python -m bench.parse_bench [--sf 0.1] [--repeat 3]

Prints a table and writes ``bench/results/parse.json``.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from bench.harness import RESULTS, command_line, result_record


def _best(run: Callable[[], int], repeat: int) -> tuple[float, int]:
    """(records per second, records) of the best of ``repeat`` runs, process CPU."""
    best, count = float("inf"), 0
    for _ in range(repeat):
        t = time.process_time()
        count = run()
        best = min(best, time.process_time() - t)
    return count / best, count


def _count(records: Iterable[object]) -> int:
    n = 0
    for _ in records:
        n += 1
    return n


def main(argv: list[str] | None = None) -> None:
    from bench.tpch_bench import ensure_data
    from connectors.files import read_updates, read_updates_from_lines
    from dataflow.api import compile_query

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--refresh-pairs", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "parse.json"))
    args = ap.parse_args(argv)
    data = ensure_data(args.sf, args.refresh_pairs)
    path = data / "updates.csv"
    schema = compile_query((data / "queries" / "q01.sql").read_text()).schema
    by_table: dict[str, list[str]] = defaultdict(list)
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line[0] in "+-":
                by_table[line.split(",", 2)[1]].append(line)

    def ways(native: bool) -> None:
        os.environ["IVMFLOW_NATIVE"] = "1" if native else "0"

    rows = []
    gc.disable()  # (the records are dropped as read: nothing for the collector)
    try:
        for table, lines in sorted(by_table.items(), key=lambda kv: -len(kv[1])):
            speeds = {}
            for native in (True, False):
                ways(native)
                speeds[native], n = _best(
                    lambda lines=lines: _count(read_updates_from_lines(lines, schema, "u")),
                    args.repeat)
            ways(True)
            fast = list(read_updates_from_lines(lines, schema, "u"))
            ways(False)
            if fast != list(read_updates_from_lines(lines, schema, "u")):
                raise SystemExit(f"{table}: the C parser's records differ from Python's")
            rows.append({"part": table, "columns": len(schema.relation(table).columns),
                         "records": n, "c_per_s": round(speeds[True]),
                         "python_per_s": round(speeds[False]),
                         "ratio": round(speeds[True] / speeds[False], 2)})
        speeds = {}
        for native in (True, False):
            ways(native)
            speeds[native], n = _best(lambda: _count(read_updates(path, schema)),
                                      args.repeat)
        rows.append({"part": "whole file (read_updates)", "columns": None, "records": n,
                     "c_per_s": round(speeds[True]), "python_per_s": round(speeds[False]),
                     "ratio": round(speeds[True] / speeds[False], 2)})
    finally:
        gc.enable()
        os.environ.pop("IVMFLOW_NATIVE", None)
    result_record("parse", rows, command=command_line("bench.parse_bench", argv),
                  out=args.out, extra={"data": str(Path(data).name)})


if __name__ == "__main__":
    main()
