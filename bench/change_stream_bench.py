"""Change streams in (issue 43, item 8): events per second of ``format=debezium-json``
and ``format=upsert-json`` against ivmflow's own JSON update records on each runner
(local, Spark, Flink), over a TPC-H stream; and the upsert state's bytes per key.

    python -m bench.change_stream_bench [--sf 0.01] [--refresh-pairs 2] [--repeat 3]
                                        [--parts decode run state] [--bootstrap H:P]
                                        [--runners local spark flink] [--parallelism 1]
                                        [--variants json upsert ...]

One stream, ``ivmflow generate tpch`` (the load, then RF1, RF2 and UPD per refresh
pair; one epoch each), written four ways by ``ivmflow produce`` (one partition per
topic):

* ``json``: ivmflow's update records, one topic, a ``*`` marker per epoch;
* ``debezium full``: Debezium events with full before-images (REPLICA IDENTITY FULL) over
  the spec's schema: one ``c`` or ``d`` per update; one source transaction per epoch,
  with its BEGIN and END on the transaction topic (``transactions=``);
* ``debezium key``: key-only before-images (Postgres' default) over the schema with the
  spec's primary keys, so ivmflow keeps the current row per key (the upsert state); an
  UPD change is one ``u`` event, ``before = null``;
* ``upsert``: upsert topics over the keyed schema (the new row, or a tombstone, per
  changed key), epochs by the records' timestamps (``--epoch-ms 1``).

Parts (``--parts``):

* ``decode``: the format alone, in memory (no broker, no query): each topic's record
  values through the source's decoding and epoch cutting (json: ``decode_update``;
  change streams: ``ChangeCutter.feed`` and ``release`` with the upsert state), records
  fed in batches of 5000 as the consumer fetches them;
* ``run``: ``ivmflow run QUERY --updates kafka://... --stop-at-end --no-native`` over
  the produced topics, minus the same run over empty topics of that format (compile,
  connect, join the consumer group; on Spark and Flink the JVM's start and the job's
  set-up): the reading and maintaining alone. ``QUERY`` is ``SELECT COUNT(*) FROM
  lineitem`` over the 8 tables (``count``: every table's events are read and applied,
  the view is cheap) or a TPC-H query (``q09``). The local runner runs in this process
  (its process CPU seconds); Spark and Flink (``--runners``) as ``ivmflow run --runner
  R --parallelism P --checkpoint DIR`` in a child process, their CPU seconds those of
  the child's process tree (the driver, the JVM, the Python workers; sampled from /proc,
  :class:`bench.harness.timing.TreeCpu`), and for a keyed variant the upsert state's
  keys and bytes from the run's summary line (the reader's own count on that runner);
* ``state``: the upsert state after the stream (keyed schema): keys and bytes, shallow
  (``ChangeApplier.state_bytes``: the dicts, key and row tuples) and deep (the values
  too, each object once), per table.

Times are process CPU seconds (the machine is shared: wall time counts the other
work too; it is reported beside them), the best of ``--repeat``. Without
``--bootstrap`` a ``noida-db`` broker process is started (tests/kafka_broker.py).
Writes ``bench/results/change_streams.json`` (``--out``; the commit, the machine, the
command), rewritten after every run, and prints the table of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, ROOT, command_line, result_record
from bench.harness.brokers import kafka_bootstrap
from bench.harness.timing import TreeCpu
from connectors import tpch
from connectors.files import read_updates
from connectors.kafka import parse_kafka_url
from connectors.kafka.changes import ChangeCutter
from connectors.kafka.codec import decode_update, encode_update
from connectors.kafka.debezium_io import ChangeEncoder, Encoded
from connectors.kafka.upsert import ChangeApplier
from core.errors import InputError
from core.records import EpochEnd, Record, Update
from core.schema import Schema
from dataflow.api import compile_query
from dataflow.cli import main as ivmflow

FETCH = 5000  # records per poll, as ChangeStreamSource and KafkaUpdateSource fetch
MAX_FRAME = 2_000_000_000
"""The largest fetch response the runs' consumers accept (``receive.message.max.bytes``;
kafka-python's default is 100 MB, a frame's length is an int32). The tests' broker,
noida-db 0.2.3, answers a fetch from a topic past about 64 MB (measured: one partition of
50 MB served in chunks, of 70 MB not, nor three of 50 MB) with every unread record of
the fetched partitions, ignoring the fetch's ``fetch.max.bytes`` and
``max.partition.fetch.bytes`` (more partitions do not help): past 100 MB kafka-python drops the
response as an invalid frame and fetches again, getting nothing, forever (a real Kafka
answers in chunks of at most those limits)."""


@dataclass(frozen=True)
class Variant:
    name: str
    fmt: str  # json | debezium-json | upsert-json
    keyed: bool
    before_images: str = "full"

    def produce_args(self) -> list[str]:
        if self.fmt == "json":
            return []
        out = ["--format", self.fmt]
        return out + (["--before-images", self.before_images] if self.fmt == "debezium-json"
                      else [])

    def url(self, bootstrap: str, prefix: str) -> str:
        frame = f"receive.message.max.bytes={MAX_FRAME}"
        if self.fmt == "json":
            return f"kafka://{bootstrap}/{prefix}?{frame}"
        if self.fmt == "upsert-json":
            return f"kafka://{bootstrap}/{prefix}?format=upsert-json&{frame}"
        return (f"kafka://{bootstrap}/{prefix}?format=debezium-json"
                f"&transactions={prefix}.transaction&{frame}")

    def run_args(self) -> list[str]:
        return ["--epoch-ms", "1"] if self.fmt == "upsert-json" else []


VARIANTS = (
    Variant("json", "json", keyed=False),
    Variant("debezium full", "debezium-json", keyed=False),
    Variant("debezium key", "debezium-json", keyed=True, before_images="key"),
    Variant("upsert", "upsert-json", keyed=True),
)


@dataclass
class Stream:
    """The generated stream and the query files per schema."""

    dir: Path
    updates: Path
    queries: dict[tuple[str, bool], Path] = field(default_factory=dict)
    """(query name, keyed schema) -> query file."""


def _query_text(name: str, data: Path, keyed: bool) -> str:
    schema = tpch.schema_sql(keys=keyed)
    if name == "count":
        return f"{schema}\nSELECT COUNT(*) AS n FROM lineitem;\n"
    from tests import tpch_oracle

    text = (data / "queries" / f"{name}.sql").read_text()
    return f"{schema}\n{tpch_oracle.query_part(text)};\n"


def prepare(args: argparse.Namespace, tmp: Path) -> Stream:
    data = Path(args.data) if args.data else tmp / f"tpch-sf{args.sf}"
    if not (data / "updates.csv").exists():
        t = time.perf_counter()
        tpch.write_tpch(tpch.TpchSpec(args.sf, args.refresh_pairs, seed=0), data)
        print(f"generated {data} in {time.perf_counter() - t:.0f} s", flush=True)
    stream = Stream(data, data / "updates.csv")
    for q in args.queries:
        for keyed in (False, True):
            path = tmp / f"{q}{'-keyed' if keyed else ''}.sql"
            path.write_text(_query_text(q, data, keyed))
            stream.queries[q, keyed] = path
    return stream


# -- decode: the format alone ---------------------------------------------------------


def _records(stream: Stream, schema: Schema) -> list[Record]:
    return list(read_updates(stream.updates, schema))


def encoded(variant: Variant, records: list[Record], schema: Schema) -> list[Encoded]:
    """The records the variant's topics hold, in write order."""
    if variant.fmt == "json":
        return [Encoded("", None, encode_update(r)) for r in records]
    enc = ChangeEncoder(schema, variant.fmt, before_images=variant.before_images,  # type: ignore[arg-type]
                        base_ms=1_000_000)
    return list(enc.records(records))


def decode_json(recs: list[Encoded], schema: Schema) -> tuple[int, int]:
    updates = epochs = 0
    for i, e in enumerate(recs):
        rec = decode_update(e.value, schema, topic="t", partition=0, offset=i)
        if isinstance(rec, EpochEnd):
            epochs += 1
        else:
            updates += 1
    return updates, epochs


def cutter_for(variant: Variant, schema: Schema) -> tuple[ChangeCutter, dict[str | None, int]]:
    url = variant.url("h:1", "pfx")
    ep = parse_kafka_url(url)
    rels = sorted(schema.relations)
    streams: list[tuple[str, int, str | None]] = [(ep.topic_for(r), 0, r) for r in rels]
    if ep.transactions_topic is not None:
        streams.append((ep.transactions_topic, 0, None))
    cutter = ChangeCutter(ep, schema, streams, epoch_ms=1 if variant.fmt == "upsert-json"
                          else None)
    index: dict[str | None, int] = {r: i for i, r in enumerate(rels)}
    index[None] = len(rels)
    for i in range(len(streams)):
        cutter.start(i, 0)
    return cutter, index


def decode_changes(variant: Variant, recs: list[Encoded], schema: Schema
                   ) -> tuple[int, int, ChangeCutter]:
    cutter, index = cutter_for(variant, schema)
    offsets = [0] * len(index)
    updates = epochs = 0

    def take(final: bool) -> None:
        nonlocal updates, epochs
        for out in cutter.release(idle=final, final=final):
            if isinstance(out, Update):
                updates += 1
            elif isinstance(out, EpochEnd):
                epochs += 1
            elif isinstance(out, InputError):
                raise out

    for i, e in enumerate(recs, 1):
        s = index[e.relation]
        cutter.feed(s, offsets[s], e.key, e.value, e.timestamp)
        offsets[s] += 1
        if i % FETCH == 0:
            take(False)
    take(True)
    return updates, epochs, cutter


def best(repeat: int, fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(CPU seconds, wall seconds, result) of the fastest (by CPU) of ``repeat`` calls."""
    runs = []
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        res = fn()
        runs.append((time.process_time() - c, time.perf_counter() - w, res))
    return min(runs, key=lambda r: r[0])


def part_decode(stream: Stream, repeat: int, names: tuple[str, ...] | None = None
                ) -> tuple[dict[str, Any], dict[str, Any]]:
    rows: dict[str, Any] = {}
    state: dict[str, Any] = {}
    for v in VARIANTS:
        if names is not None and v.name not in names:
            continue
        schema = compile_query(_query_text("count", stream.dir, v.keyed)).schema
        records = _records(stream, schema)
        recs = encoded(v, records, schema)
        events = sum(1 for e in recs if e.relation is not None) if v.fmt != "json" else \
            sum(1 for r in records if isinstance(r, Update))
        if v.fmt == "json":
            cpu, wall, (updates, epochs) = best(repeat, partial(decode_json, recs, schema))
        else:
            cpu, wall, (updates, epochs, cutter) = best(
                repeat, partial(decode_changes, v, recs, schema))
            if v.name == "debezium key":
                state = state_of(cutter.applier)
        rows[v.name] = {"records": len(recs), "events": events, "updates": updates,
                        "epochs": epochs, "cpu_s": cpu, "wall_s": wall,
                        "events_per_cpu_s": events / cpu,
                        "bytes": sum(len(e.value or b"") + len(e.key or b"") for e in recs)}
        print(f"decode {v.name}: {events} events in {cpu:.2f} s CPU", flush=True)
    base = rows["json"]["events_per_cpu_s"] if "json" in rows else None
    for r in rows.values():
        if base is not None:
            r["vs_json"] = r["events_per_cpu_s"] / base
    return rows, state


# -- state: the upsert state ------------------------------------------------------------


def _deep(rows: Iterator[tuple[Any, ...]], seen: set[int]) -> int:
    total = 0
    for row in rows:
        for v in row:
            if id(v) not in seen:
                seen.add(id(v))
                total += sys.getsizeof(v)
    return total


def state_of(applier: ChangeApplier) -> dict[str, Any]:
    out: dict[str, Any] = {}
    seen: set[int] = set()
    for rel, s in sorted(applier.state.items()):
        if not s:
            continue
        shallow = sys.getsizeof(s) + sum(sys.getsizeof(k) + sys.getsizeof(r)
                                         for k, r in s.items())
        deep = shallow + _deep(iter(s.values()), seen)
        out[rel] = {"keys": len(s), "bytes": shallow, "deep_bytes": deep,
                    "bytes_per_key": shallow / len(s), "deep_bytes_per_key": deep / len(s)}
    keys = sum(r["keys"] for r in out.values())
    total = {"keys": keys, "bytes": applier.state_bytes(),
             "deep_bytes": sum(r["deep_bytes"] for r in out.values())}
    total["bytes_per_key"] = total["bytes"] / keys
    total["deep_bytes_per_key"] = total["deep_bytes"] / keys
    out["total"] = total
    return out


# -- run: through the broker and the local runner ----------------------------------------


Timed = tuple[float, float, str]
"""CPU seconds, wall seconds and the run's standard error (its summary line)."""


def _ivmflow(argv: list[str]) -> Timed:
    """``ivmflow ARGV`` in this process."""
    c, w = time.process_time(), time.perf_counter()
    code = ivmflow(argv)
    if code != 0:
        msg = f"ivmflow {' '.join(argv)} exited {code}"
        raise RuntimeError(msg)
    return time.process_time() - c, time.perf_counter() - w, ""


def _child(argv: list[str], timeout: float = 4 * 3600) -> Timed:
    """``ivmflow ARGV`` in a child process; its process tree's CPU seconds."""
    w = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "dataflow.cli", *argv], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with TreeCpu(proc.pid) as cpu:
        _out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        msg = f"ivmflow {' '.join(argv)} exited {proc.returncode}: {err[-2000:]}"
        raise RuntimeError(msg)
    return cpu.seconds(), time.perf_counter() - w, err


_STATE = re.compile(r"upsert state ([\d,]+) keys, ([\d.]+) MB")


def _upsert_state(summary: str) -> dict[str, Any]:
    """The upsert state's keys and bytes per key from a run's summary line."""
    m = _STATE.search(summary)
    if m is None:
        return {}
    keys, mb = int(m.group(1).replace(",", "")), float(m.group(2))
    return {"state_keys": keys, "state_mb": mb, "state_bytes_per_key": mb * 1e6 / keys}


def _run_once(runner: str, argv: list[str], tmp: Path, parallelism: int) -> Timed:
    if runner == "local":
        return _ivmflow(argv)
    ckpt = Path(tempfile.mkdtemp(prefix=f"{runner}-ckpt-", dir=tmp))
    return _child([*argv, "--runner", runner, "--parallelism", str(parallelism),
                   "--checkpoint", str(ckpt)])


class CountError(RuntimeError):
    """Fewer records or updates than were written: the benchmark stops (exit code 1)."""


def read_back(bootstrap: str, prefix: str, stall_s: float = 60.0) -> dict[str, int]:
    """The records (not offsets: transaction markers take some) in every topic named
    ``prefix`` or ``prefix.*``, read from the beginning, read_committed, as the runs'
    consumers read them (same frame limit)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level="read_committed", check_crcs=False,
                             receive_message_max_bytes=MAX_FRAME)
    try:
        names = sorted(t for t in consumer.topics() if t == prefix or
                       t.startswith(f"{prefix}."))
        tps = [TopicPartition(t, p) for t in names
               for p in sorted(consumer.partitions_for_topic(t) or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        counts = dict.fromkeys(names, 0)
        last = time.monotonic()
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            got = consumer.poll(timeout_ms=500, max_records=FETCH)
            for tp, recs in got.items():
                counts[tp.topic] += len(recs)
            if got:
                last = time.monotonic()
            elif time.monotonic() - last > stall_s:
                behind = {f"{tp.topic}:{tp.partition}": (consumer.position(tp), ends[tp])
                          for tp in tps if consumer.position(tp) < ends[tp]}
                msg = f"reading back {prefix!r}: nothing for {stall_s:.0f} s, at {behind}"
                raise CountError(msg)
        return counts
    finally:
        consumer.close()


def final_count(deltas: Path) -> tuple[int, int]:
    """(data lines, the COUNT(*) after the last epoch) of a delta CSV of the count
    query (``epoch,mult,n``)."""
    lines = deltas.read_text().splitlines()[1:]
    return len(lines), sum(int(m) * int(n) for _e, m, n in (x.split(",") for x in lines))


def part_run(stream: Stream, args: argparse.Namespace, bootstrap: str,
             events: dict[str, int], tmp: Path, records: dict[str, int],
             done: Callable[[dict[str, Any]], None] = lambda rows: None) -> dict[str, Any]:
    """Each variant's topics produced once and read back (every record written is
    served, else :class:`CountError`), then run on each runner for each query (``done``
    is called with the rows after every run). A count run whose final COUNT(*) is not
    lineitem's rows after the stream (``args.expect``) raises :class:`CountError`."""
    empty = tmp / "empty.csv"
    empty.write_text("")
    rows: dict[str, Any] = {}
    topics: dict[str, tuple[str, str, Timed]] = {}
    variants = [v for v in VARIANTS if v.name in args.variants]
    given = dict(t.replace("_", " ").split("=", 1) for t in args.topics or ())
    for v in variants:
        if v.name in given:  # written and read back by another run on this broker
            topics[v.name] = given[v.name], f"{given[v.name]}-empty", (0.0, 0.0, "")
            print(f"{v.name}: the topics of {given[v.name]!r}, as given", flush=True)
            continue
        tag = uuid.uuid4().hex[:8]
        prefix, none = f"cs-{tag}", f"cs-{tag}-empty"
        qfile = stream.queries[args.queries[0], v.keyed]
        produce = _ivmflow(["produce", str(stream.updates), f"kafka://{bootstrap}/{prefix}",
                            "--query", str(qfile), "-q", *v.produce_args()])
        _ivmflow(["produce", str(empty), f"kafka://{bootstrap}/{none}", "--query",
                  str(qfile), "-q", *v.produce_args()])
        topics[v.name] = prefix, none, produce
        print(f"produced {v.name} in {produce[1]:.0f} s", flush=True)
        back = read_back(bootstrap, prefix)
        if sum(back.values()) != records[v.name]:
            msg = (f"{v.name}: wrote {records[v.name]} records to the topics of {prefix!r}, "
                   f"read back {sum(back.values())} ({back}): the broker lost or does not "
                   f"serve some; no benchmark over a short stream")
            raise CountError(msg)
        print(f"read back {sum(back.values())} records of {v.name}: all", flush=True)
    for runner in args.runners:
        for v in variants:
            prefix, none, produce = topics[v.name]
            for q in args.queries:
                name = f"{runner} {v.name} {q}"
                try:
                    rows[name] = _run_cell(runner, v, stream.queries[q, v.keyed], prefix,
                                           none, bootstrap, args, tmp)
                except RuntimeError as err:  # (recorded; the other cells still run)
                    rows[name] = {"runner": runner, "variant": v.name, "query": q,
                                  "error": str(err)[-1500:]}
                    print(f"run {name}: failed: {str(err)[-300:]}", flush=True)
                    continue
                n = events[v.name]
                row = rows[name]
                if q == "count" and row["final_count"] != args.expect:
                    rows[name]["error"] = msg = (
                        f"run {name}: COUNT(*) after the stream is {row['final_count']}, "
                        f"expected {args.expect} (lineitem's rows): updates were lost")
                    done(rows)
                    raise CountError(msg)
                row.update(query=q, events=n, events_per_cpu_s=n / row["cpu_s"],
                           events_per_wall_s=n / row["wall_s"], produce_cpu_s=produce[0],
                           produce_wall_s=produce[1])
                print(f"run {name}: {row['cpu_s']:.2f} s CPU ({row['wall_s']:.1f} s wall) "
                      f"after {row['startup_cpu_s']:.2f} s CPU of startup", flush=True)
                _relative(rows)
                done(rows)
    return rows


def _run_cell(runner: str, v: Variant, qfile: Path, prefix: str, none: str, bootstrap: str,
              args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One runner over one variant's topics: the best of ``--repeat`` (local) or one
    run (Spark, Flink), each minus a run over the empty topics."""
    repeat = args.repeat if runner == "local" else 1
    runs = []
    for rep in range(repeat):
        out = tmp / f"{runner}-{prefix}-{qfile.stem}-{rep}.csv"
        base = ["run", str(qfile), "--no-native", "--stop-at-end",
                *(["-q"] if runner == "local" else []), *v.run_args(), "--updates"]
        start = _run_once(runner, [*base, v.url(bootstrap, none), "--deltas", f"{out}.e"],
                          tmp, args.parallelism)
        full = _run_once(runner, [*base, v.url(bootstrap, prefix), "--deltas", str(out)],
                         tmp, args.parallelism)
        runs.append((full[0] - start[0], full[1] - start[1], full, start, out))
    cpu, wall, full, start, out = min(runs, key=lambda r: r[0])
    return {"runner": runner, "variant": v.name,
            "parallelism": 1 if runner == "local" else args.parallelism, "repeat": repeat,
            "cpu_s": cpu, "wall_s": wall, "run_cpu_s": full[0], "run_wall_s": full[1],
            "startup_cpu_s": start[0], "startup_wall_s": start[1], **_upsert_state(full[2]),
            **dict(zip(("delta_lines", "final_count"), final_count(out)))}


def _relative(rows: dict[str, Any]) -> None:
    """Each run's events per CPU second over json's on the same runner and query."""
    for r in rows.values():
        base = rows.get(f"{r['runner']} json {r['query']}", {})
        if "events_per_cpu_s" in r and "events_per_cpu_s" in base:
            r["vs_json"] = r["events_per_cpu_s"] / base["events_per_cpu_s"]


# -- the report ----------------------------------------------------------------------------


_COLUMNS: dict[str, tuple[str, int, list[tuple[str, str, str]]]] = {
    # part -> (title, its width, [(heading, field or "bytes_mb"/"deep_mb", format)])
    "decode": ("decode (no broker)", 20, [
        ("events", "events", ">9"), ("updates", "updates", ">9"), ("CPU s", "cpu_s", ">8.2f"),
        ("events/s", "events_per_cpu_s", ">10.0f"), ("x json", "vs_json", ">8.2f")]),
    "run": ("run (broker)", 30, [
        ("events", "events", ">9"), ("CPU s", "cpu_s", ">8.2f"),
        ("events/s", "events_per_cpu_s", ">10.0f"), ("x json", "vs_json", ">8.2f"),
        ("wall s", "wall_s", ">8.1f"), ("startup", "startup_cpu_s", ">9.2f"),
        ("state B/key", "state_bytes_per_key", ">12.0f")]),
    "state": ("upsert state", 12, [
        ("keys", "keys", ">9"), ("bytes/key", "bytes_per_key", ">11.0f"),
        ("deep/key", "deep_bytes_per_key", ">10.0f"), ("MB", "bytes_mb", ">8.2f"),
        ("deep MB", "deep_mb", ">9.2f")]),
}


def format_table(res: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The rows (``part``: decode, run, state; ``name``: the format or run) as tables."""
    lines = [f"\nTPC-H SF {res['sf']}, {res['refresh_pairs']} refresh pairs: "
             f"{res['updates']} updates, {res['epochs']} epochs"]
    for part, (title, width, cols) in _COLUMNS.items():
        mine = [{**r, "bytes_mb": r.get("bytes", 0) / 1e6,
                 "deep_mb": r.get("deep_bytes", 0) / 1e6} for r in rows if r["part"] == part]
        if not mine:
            continue
        lines.append(f"\n{title:<{width}}" + "".join(
            f"{head:>{fmt[1:].split('.')[0]}}" for head, _f, fmt in cols))
        lines += [f"{r['name']:<{width}}" + "".join(
            f"{r[f]:{fmt}}" if f in r else f"{'':{fmt.split('.')[0]}}" for _h, f, fmt in cols)
            for r in mine]
    return "\n".join(lines)


def lineitem_rows(manifest: dict[str, Any]) -> int:
    """lineitem's rows after the whole stream (what the count query ends at)."""
    return sum(e["inserts"].get("lineitem", 0) - e["deletes"].get("lineitem", 0)
               for e in manifest["epochs"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--refresh-pairs", type=int, default=2)
    ap.add_argument("--data", help="an `ivmflow generate tpch` directory to reuse")
    ap.add_argument("--queries", nargs="+", default=["count"],
                    help="count, or TPC-H query files' names (q09)")
    ap.add_argument("--parts", nargs="+", choices=("decode", "run", "state"),
                    default=["decode", "run", "state"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--runners", nargs="+", choices=("local", "spark", "flink"),
                    default=["local"], help="the runners of the run part (Spark and Flink: "
                    "one run each, not --repeat)")
    ap.add_argument("--parallelism", type=int, default=1, help="Spark's and Flink's")
    ap.add_argument("--variants", nargs="+", choices=[v.name for v in VARIANTS],
                    default=[v.name for v in VARIANTS], help="the formats of the run part")
    ap.add_argument("--bootstrap", default=None, help="use this broker (default: start one)")
    ap.add_argument("--topics", nargs="+", metavar="VARIANT=PREFIX",
                    help="with --bootstrap: run over the topics another run of the bench "
                    "wrote (and read back) there, e.g. debezium_full=cs-1a2b3c4d (its "
                    "empty topics are PREFIX-empty); produce times are then 0")
    ap.add_argument("--out", type=Path, default=RESULTS / "change_streams.json")
    args = ap.parse_args(argv)
    os.environ.setdefault("IVMFLOW_NATIVE", "0")
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="ivmflow-csbench-"))
    stream = prepare(args, tmp)
    manifest = json.loads((stream.dir / "manifest.json").read_text())
    res: dict[str, Any] = {
        "load_average_before": load_before,
        "note": "2 cores shared with other work: times are process CPU seconds",
        "sf": args.sf, "refresh_pairs": args.refresh_pairs,
        "updates": sum(sum(e["inserts"].values()) + sum(e["deletes"].values())
                       for e in manifest["epochs"]),
        "epochs": len(manifest["epochs"]), "repeat": args.repeat,
        "lineitem_rows_after": lineitem_rows(manifest),
        "native": "interpreted (IVMFLOW_NATIVE=0, --no-native)",
    }
    args.expect = res["lineitem_rows_after"]
    # (the run part needs each format's event count: without the decode or state
    # part, only its variants are encoded)
    decode_rows, state = part_decode(stream, args.repeat, None if {"decode", "state"} &
                                     set(args.parts) else tuple(args.variants))
    parts: dict[str, dict[str, dict[str, Any]]] = {}
    if "decode" in args.parts:
        parts["decode"] = decode_rows
    if "state" in args.parts:
        parts["state"] = state
    res["runners"], res["parallelism"] = args.runners, args.parallelism

    def record(quiet: bool) -> None:
        rows = [{"part": part, "name": name, **r}
                for part, got in parts.items() for name, r in got.items()]
        result_record("change_streams", rows,
                      command=command_line("bench.change_stream_bench", argv), extra=res,
                      out=args.out, table=format_table(res, rows), quiet=quiet)

    if "run" in args.parts:
        with kafka_bootstrap(args.bootstrap) as bootstrap:
            def done(rows: dict[str, Any]) -> None:
                parts["run"] = rows
                record(quiet=True)

            try:
                part_run(stream, args, bootstrap,
                         {k: r["events"] for k, r in decode_rows.items()}, tmp,
                         {k: r["records"] for k, r in decode_rows.items()}, done)
            except CountError as err:
                record(quiet=False)
                print(f"change_stream_bench: FAILED: {err}", file=sys.stderr)
                return 1
    record(quiet=False)
    failed = [n for n, r in parts.get("run", {}).items() if "error" in r]
    if failed:
        print(f"change_stream_bench: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
