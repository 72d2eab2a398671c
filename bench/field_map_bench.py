"""What a native field map costs per operation and per entry, next to the Python dict it
replaces, in the same process (``core/native_rows.pyx``'s ``FieldMap``: a sum leaf's
projection, a top leaf's groups, a delta join's big buckets; docs/architecture.md,
"field maps").

Per map shape, the shapes TPC-H's queries hold at SF 1: N distinct keys set, looked up,
then deleted (each pass the best of ``--repeat``, process CPU), in a ``FieldMap`` and in
a dict of the same keys and values; bytes per entry (the field map's slot array, the
dict's table and its keys' and values' objects, each counted once). Growing and the
backward shift after a delete hash a key again from its stored fields; a shape whose
key has a DECIMAL is where that hash was dearest.

    python -m bench.field_map_bench [--keys 1000000] [--repeat 3]

Prints a table and writes ``bench/results/field_map.json``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from bench.harness import RESULTS, command_line, result_record

SHAPES: dict[str, tuple[int, int, Callable[[int], Any], Callable[[int], Any]]] = {
    # name: (key fields, value fields, key of i, value of i)
    "(nation, order) -> (count, count, revenue)  [Q5's sum leaf]": (
        2, 3, lambda i: (i % 25, i * 7 + 1), lambda i: (1, 1, Decimal(i % 99991) / 100)),
    "(order, supplier) -> count  [Q21's count view]": (
        2, 1, lambda i: (i * 3 + 1, i % 1000), lambda i: (1,)),
    "(order, supplier, price) -> mult  [Q5's bag bucket]": (
        3, 1, lambda i: (i, i % 97, Decimal(i % 100000) / 100), lambda i: (1,)),
    "order -> (order, date)  [Q9's orders, key once]": (
        1, 2, lambda i: i * 4 + 1, lambda i: (i * 4 + 1, 9000 + i % 2400)),
}


def _deep_bytes(m: dict[Any, Any]) -> int:
    seen: set[int] = set()
    total = sys.getsizeof(m)
    for k, v in m.items():
        for o in (k, v, *(k if isinstance(k, tuple) else ()), *v):
            if id(o) not in seen:
                seen.add(id(o))
                total += sys.getsizeof(o)
    return total


def measure(make: Callable[[], Any], keys: list[Any], values: list[Any], repeat: int
            ) -> dict[str, float]:
    """ns per set, get and delete over ``keys`` (best of ``repeat``)."""
    best = {"set_ns": float("inf"), "get_ns": float("inf"), "del_ns": float("inf")}
    n = len(keys)
    for _ in range(repeat):
        m = make()
        t0 = time.process_time()
        for k, v in zip(keys, values):
            m[k] = v
        t1 = time.process_time()
        get = m.get
        for k in keys:
            get(k)
        t2 = time.process_time()
        for k in keys:
            del m[k]
        t3 = time.process_time()
        for name, s in (("set_ns", t1 - t0), ("get_ns", t2 - t1), ("del_ns", t3 - t2)):
            best[name] = min(best[name], s / n * 1e9)
    return best


def main(argv: list[str] | None = None) -> None:
    from core.native import native_rows

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "field_map.json"))
    args = ap.parse_args(argv)
    rows_module = native_rows()
    rows = []
    gc.disable()  # (the dict's tuples would be walked by the cyclic collector's passes)
    for shape, (nkey, nval, key_of, value_of) in SHAPES.items():
        keys = [key_of(i) for i in range(args.keys)]
        values = [value_of(i) for i in range(args.keys)]
        fm = measure(lambda nk=nkey, nv=nval: rows_module.FieldMap(nk, nv), keys, values,
                     args.repeat)
        dc = measure(dict, keys, values, args.repeat)
        full = rows_module.FieldMap(nkey, nval)
        plain: dict[Any, Any] = {}
        for k, v in zip(keys, values):
            full[k] = plain[k] = v
        row = {"shape": shape, "keys": args.keys,
               **{f"field_map_{k}": round(v) for k, v in fm.items()},
               **{f"dict_{k}": round(v) for k, v in dc.items()},
               "field_map_bytes_per_entry": round(full.nbytes / len(full), 1),
               "dict_bytes_per_entry": round(_deep_bytes(plain) / len(plain), 1)}
        for op in ("set_ns", "get_ns", "del_ns"):
            row[f"{op[:3]}_ratio"] = round(row[f"field_map_{op}"] / row[f"dict_{op}"], 2)
        row["bytes_ratio"] = round(row["field_map_bytes_per_entry"]
                                   / row["dict_bytes_per_entry"], 2)
        rows.append(row)
        del full, plain, keys, values
    gc.enable()
    result_record("field_map", rows, command=command_line("bench.field_map_bench", argv),
                  out=args.out, extra={"stored_hashes_agree": rows_module.stored_hashes_agree()})


if __name__ == "__main__":
    main()
