"""The plot of issue 40's state measurements: bytes per base tuple of each TPC-H query
on the local runner (native build, the delete check on), before and after, at SF 0.1,
and where measured at SF 1, against the 150-byte target.

    python -m bench.state_bytes_plot [--sf01 FILE] [--sf1 FILE] [--sf1-latest FILE ...]
        [--out PNG]

It reads what ``python -m bench.delete_check_bench`` wrote (``bench/results/
state_bytes_tpch.json``: the two checkouts ``before`` and ``now`` at SF 0.1;
``bench/results/state_bytes_tpch_sf1.json``: SF 1; ``--sf1-latest``: SF 1 since), prints
the table it plots and writes ``bench/results/state_bytes_tpch.png``. Nothing is
measured here.

Example (the table alone, from two made-up rows):
    >>> rows = [{"query": "q01", "checkout": "before", "bytes_per_tuple": 537.0},
    ...         {"query": "q01", "checkout": "now", "bytes_per_tuple": 45.0}]
    >>> by_query(rows, "checkout")
    {'q01': {'before': 537.0, 'now': 45.0}}
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bench.harness import RESULTS
from bench.harness.plots import save, subplots
from bench.harness.record import format_rows

TARGET = 150.0
"""Issue 40's target: bytes per base tuple at SF 1, every query."""


def by_query(rows: Iterable[Mapping[str, Any]], series: str) -> dict[str, dict[str, float]]:
    """``{query: {series value: bytes per base tuple}}`` (the last row of each wins)."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        out.setdefault(r["query"], {})[str(r.get(series, ""))] = float(r["bytes_per_tuple"])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf01", default=str(RESULTS / "state_bytes_tpch.json"))
    ap.add_argument("--sf1", default=str(RESULTS / "state_bytes_tpch_sf1.json"))
    ap.add_argument("--sf1-latest", nargs="*", default=[
        str(RESULTS / "state_bytes_tpch_sf1_packed.json"),
        str(RESULTS / "state_bytes_sf1_760c454.json"),
        str(RESULTS / "state_bytes_sf1_f8ce50d.json"),
        str(RESULTS / "state_bytes_sf1_80e2f5c.json"),
        str(RESULTS / "state_bytes_sf1_8ca4a8f.json"),
        str(RESULTS / "state_bytes_sf1_654e88f.json")],
        help="later SF 1 measurements, a later file's row of a query winning")
    ap.add_argument("--out", default=str(RESULTS / "state_bytes_tpch.png"))
    args = ap.parse_args(argv)
    sf01 = by_query(json.loads(Path(args.sf01).read_text())["rows"], "checkout")
    sf1_path = Path(args.sf1)
    sf1 = by_query(json.loads(sf1_path.read_text())["rows"], "sf") if sf1_path.exists() else {}
    latest = by_query([r for f in args.sf1_latest if Path(f).exists()
                       for r in json.loads(Path(f).read_text())["rows"]], "sf")
    queries = sorted(set(sf01) | set(sf1) | set(latest))
    series = [("SF 0.1 before (4e413a5)", lambda q: sf01.get(q, {}).get("before")),
              ("SF 0.1 after (92e40ab)", lambda q: sf01.get(q, {}).get("now")),
              ("SF 1 (92e40ab, 74b1385)", lambda q: next(iter(sf1.get(q, {}).values()), None)),
              ("SF 1 latest (a6c950d to 654e88f)",
               lambda q: next(iter(latest.get(q, {}).values()), None))]
    table = [{"query": q, **{name: get(q) for name, get in series}} for q in queries]
    print(format_rows(table))
    made = subplots(figsize=(11, 4.2))
    if made is None:
        return
    fig, ax = made
    width = 0.8 / len(series)
    for i, (name, get) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j, q in enumerate(queries)
              if get(q) is not None]
        ys = [get(q) for q in queries if get(q) is not None]
        ax.bar(xs, ys, width=width, label=name)
    ax.axhline(TARGET, color="black", linestyle="--", linewidth=1, label="target (150 B)")
    ax.set_yscale("log")
    ax.set_xticks(range(len(queries)), [q.upper() for q in queries], fontsize=8)
    ax.set_ylabel("bytes per base tuple (RSS the load adds)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, args.out, title="TPC-H state on the local runner, native build, delete check on")


if __name__ == "__main__":
    main()
