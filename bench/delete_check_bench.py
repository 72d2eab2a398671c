"""What the delete check costs (issue 40, deliverable 1): bytes per base tuple and time
per update of TPC-H queries on the local runner, for this checkout and others (``--root
OLD_CHECKOUT``: the same script measures a checkout from before the row digests).

Per (checkout, query, build), in its own subprocess: the load epoch applied (the RSS it
adds over the base tuples loaded: bytes per base tuple; process CPU per update), then
the refresh stream in epochs of 1000 (process CPU per update), and the state entries.
With ``--callgrind``, instead, the instructions per update of the load and of the
refresh epochs (valgrind callgrind, three runs per point: parse only, load, load and
refresh; differences), which stay the same however busy the machine is.

    python -m bench.delete_check_bench --data DIR [--root OLD] [--queries q01,q06]
        [--builds interpreted,native] [--trust] [--callgrind] [--out FILE]

``DIR`` is ``ivmflow generate tpch --sf 0.1 --refresh-pairs 8 --out DIR``'s. The table
is printed as it is measured and written with the commit, machine and command to
``--out`` (default ``bench/results/delete_check.json``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, ROOT, command_line, commit_label, result_record
from bench.harness.checkout import child_setup
from bench.harness.timing import apply_load


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(root: str, data: str, name: str, native: bool, trust: bool,
           stage: int | None) -> dict[str, Any]:
    """One point in this process, over the engine of checkout ``root`` (the child's
    import path: :func:`~bench.harness.checkout.child_setup`; ``stage``: callgrind's 0
    parse only, 1 load, 2 load and refresh, with the records parsed before anything is
    applied)."""
    from connectors.files import read_updates
    from core.records import Update
    from dataflow.api import compile_query

    q = compile_query(Path(data, "queries", f"{name}.sql").read_text(), source_name=name)
    kwargs: dict[str, Any] = {"native": native}
    if trust:
        kwargs["validate"] = False
    view = q.maintain(**kwargs)
    records = iter(read_updates(str(Path(data, "updates.csv")), q.schema))
    if stage is not None:
        records = iter(list(records))  # (parsed before anything is applied)
    gc.collect()
    rss0 = _rss()
    # The load parsed in batches as it is applied (as bench/tpch_bench.py does): the RSS
    # it adds is what the view keeps of it, the rows it holds on to included.
    load_cpu, n_load = apply_load(records, view.apply if stage is None or stage >= 1
                                  else None, time.process_time)
    cpu = time.process_time()
    if stage is None or stage >= 1:
        view.end_epoch()
    load_cpu += time.process_time() - cpu
    added = _rss() - rss0
    refresh = [r for r in records if isinstance(r, Update)]
    gc.collect()
    gc.freeze()
    cpu = time.process_time()
    if stage is None or stage >= 2:
        for i in range(0, len(refresh), 1000):
            for u in refresh[i:i + 1000]:
                view.apply(u)
            view.end_epoch()
    refresh_cpu = time.process_time() - cpu
    return {"query": name, "build": getattr(view, "native_note", ""),
            "check": getattr(view, "delete_check", "-"), "load": n_load,
            "refresh": len(refresh), "bytes_per_tuple": added / n_load,
            "load_cpu_us": 1e6 * load_cpu / n_load,
            "refresh_cpu_us": 1e6 * refresh_cpu / max(1, len(refresh)),
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "entries": view.state_entries() if stage is None else None}


def _child(root: str, data: str, name: str, build: str, trust: bool,
           stage: int | None = None) -> list[str]:
    return [sys.executable, "-m", "bench.delete_check_bench", "--worker", root, data, name,
            build, "trust" if trust else "check", str(-1 if stage is None else stage)]


def _env(root: str, build: str) -> dict[str, str]:
    tag = "".join(c if c.isalnum() else "_" for c in root)
    return {**child_setup(root)[1], "PYTHONHASHSEED": "0",
            "IVMFLOW_NATIVE": "1" if build == "native" else "0",
            "IVMFLOW_NATIVE_CACHE": str(Path.home() / ".cache" / "ivmflow" / f"bench{tag}")}


def run_point(root: str, data: str, name: str, build: str, trust: bool) -> dict[str, Any]:
    p = subprocess.run(_child(root, data, name, build, trust), capture_output=True,
                       text=True, env=_env(root, build), cwd=child_setup(root)[0],
                       check=False)
    if p.returncode:
        raise SystemExit(p.stderr)
    res: dict[str, Any] = json.loads(p.stdout.splitlines()[-1])
    return res


def instructions(root: str, data: str, name: str, build: str, trust: bool) -> dict[str, Any]:
    """Instructions per update of the load and of the refresh (callgrind)."""
    if build == "native":  # (built outside valgrind: every run below loads it)
        subprocess.run(_child(root, data, name, build, trust, 0), env=_env(root, build),
                       cwd=child_setup(root)[0], capture_output=True, check=True)
    counts = []
    info: dict[str, Any] = {}
    for stage in (0, 1, 2):
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               *_child(root, data, name, build, trust, stage)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=_env(root, build),
                           cwd=child_setup(root)[0], check=False)
        found = re.findall(r"Collected : (\d+)", p.stderr)
        if p.returncode or not found:
            raise SystemExit(p.stderr[-2000:])
        counts.append(int(found[-1]))
        info = json.loads(p.stdout.splitlines()[-1])
    return {"query": name, "build": info["build"], "check": info["check"],
            "load_instr": (counts[1] - counts[0]) / info["load"],
            "refresh_instr": (counts[2] - counts[1]) / max(1, info["refresh"])}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="ivmflow generate tpch's directory")
    ap.add_argument("--root", action="append", default=[],
                    help="another checkout to measure (repeatable; this one always)")
    ap.add_argument("--queries", default="q01,q03,q06,q09")
    ap.add_argument("--builds", default="interpreted,native")
    ap.add_argument("--trust", action="store_true",
                    help="also this checkout with validate=False (--trust-deletes)")
    ap.add_argument("--callgrind", action="store_true", help="instructions per update")
    ap.add_argument("--out", default=str(RESULTS / "delete_check.json"))
    ap.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        root, data, name, build, trust, stage = args.worker
        res = worker(root, data, name, build == "native", trust == "trust",
                     None if stage == "-1" else int(stage))
        print(json.dumps(res))
        return
    if not args.data:
        ap.error("--data DIR is needed")
    roots = [*args.root, str(ROOT)]
    modes = [False, True] if args.trust else [False]
    rows: list[dict[str, Any]] = []
    for name in args.queries.split(","):
        for build in args.builds.split(","):
            for trust in modes:
                for root in roots if not trust else [str(ROOT)]:
                    if args.callgrind:
                        r = instructions(root, args.data, name, build, trust)
                        rows.append({**r, "root": root, "commit": commit_label(root)})
                        print(f"{name} {build:11} {Path(root).name:12} {r['check'][:22]:22} "
                              f"load {r['load_instr']:8.0f} instr/update  refresh "
                              f"{r['refresh_instr']:8.0f}", flush=True)
                        continue
                    r = run_point(root, args.data, name, build, trust)
                    rows.append({**r, "root": root, "commit": commit_label(root)})
                    print(f"{name} {build:11} {Path(root).name:12} {r['check'][:22]:22} "
                          f"{r['bytes_per_tuple']:6.0f} B/tuple  load "
                          f"{r['load_cpu_us']:6.2f} us/update  refresh "
                          f"{r['refresh_cpu_us']:6.2f} us/update  peak {r['peak_mib']:5.0f} MiB"
                          f"  entries {r['entries']}", flush=True)
    manifest = json.loads(Path(args.data, "manifest.json").read_text())
    result_record("delete_check", rows, command=command_line("bench.delete_check_bench", argv),
                  extra={"data": manifest}, out=args.out, table=False)


if __name__ == "__main__":
    main()
