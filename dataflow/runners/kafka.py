"""Kafka glue shared by the runners and the command line: ``kafka://`` endpoints with
the run's options, kafka-python's errors turned into clear ones, the sinks of a run whose
source or sinks are Kafka topics, and ``ivmflow produce`` / ``ivmflow consume``.

See :mod:`connectors.kafka` for the record formats, the epoch order and the delivery
guarantee, and :mod:`dataflow.runners.local.kafka` for the local runner over a topic.

Example (with a broker on 127.0.0.1:9092)::

    ivmflow produce updates.csv kafka://127.0.0.1:9092/updates --partitions 3
    ivmflow run q.sql --updates kafka://127.0.0.1:9092/updates \\
        --deltas kafka://127.0.0.1:9092/deltas --stop-at-end
    ivmflow consume kafka://127.0.0.1:9092/deltas
"""

from __future__ import annotations

import contextlib
import csv
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from connectors.base import DeadLetterSink, DeltaSink, Outputs, SkipCommitted, SnapshotSink
from connectors.files import (
    CsvStreamSink,
    DeadLetterCsvSink,
    DeltaCsvSink,
    SnapshotCsvSink,
    read_updates,
)
from connectors.kafka import (
    BOOTSTRAP_TIMEOUT_MS,
    KafkaConfigError,
    KafkaDeadLetterSink,
    KafkaDeltaSink,
    KafkaEndpoint,
    default_id,
    parse_kafka_url,
    produce_updates,
    read_deltas,
    unique_columns,
)
from core.errors import InputError, IvmflowError, UsageError
from core.records import EpochEnd, Op, Record, Update, csv_value
from core.schema import Schema

if TYPE_CHECKING:
    from dataflow.runners.run import RunOptions

__all__ = [
    "KafkaUnreachableError",
    "consume",
    "dead_letter_target",
    "endpoint",
    "is_kafka",
    "kafka_errors",
    "open_outputs",
    "produce",
    "query_text",
]


class KafkaUnreachableError(IvmflowError):
    """kafka-python could not talk to the broker (exit code 1)."""


def is_kafka(target: str | None) -> bool:
    """True for a ``kafka://`` URL.

    >>> is_kafka("kafka://h:1/t"), is_kafka("out.csv"), is_kafka(None)
    (True, False, False)
    """
    return bool(target) and str(target).lower().startswith("kafka://")


def endpoint(url: str, opts: RunOptions | None = None) -> KafkaEndpoint:
    """The endpoint of a ``kafka://`` URL with the run's ``--kafka-option``s."""
    try:
        return parse_kafka_url(url, opts.kafka_options if opts is not None else ())
    except KafkaConfigError as exc:
        raise UsageError(str(exc)) from None


def query_text(opts: RunOptions) -> str:
    """The query file's text (the SQL itself when ``opts.query`` is not a file)."""
    try:
        return Path(opts.query).read_text(encoding="utf-8")
    except OSError:
        return opts.query


def kafka_errors(what: str, bootstrap: str) -> Any:
    """Turn kafka-python's errors into a clear :class:`KafkaUnreachableError`."""
    from kafka.errors import KafkaError

    @contextlib.contextmanager
    def guard() -> Iterator[None]:
        try:
            yield
        except KafkaError as exc:
            name, text = type(exc).__name__, str(exc)
            detail = text if text.startswith(name) else f"{name}: {text}"
            msg = (f"{what}: Kafka at {bootstrap} failed: {detail}; check that the broker "
                   f"runs and the connection options are right (an unreachable broker "
                   f"is given up after bootstrap.timeout.ms, default "
                   f"{BOOTSTRAP_TIMEOUT_MS // 1000} s)")
            raise KafkaUnreachableError(msg) from None

    return guard()


# ---------------------------------------------------------------------------------------
# ivmflow run


def open_outputs(opts: RunOptions, columns: Sequence[str]) -> Outputs:
    """The sinks of a run where some source or sink is ``kafka://`` (files otherwise,
    as :func:`dataflow.runners.run.open_outputs`).  Kafka sinks always resume: epochs already in
    the topic are not written again."""
    text = query_text(opts)
    opened: list[Any] = []
    try:
        deltas: DeltaSink
        resume_epoch = 0
        if is_kafka(opts.deltas):
            ep = endpoint(str(opts.deltas), opts)
            with kafka_errors(f"--deltas {ep.url}", ep.bootstrap):
                if ep.format == "debezium-json":  # change events (connectors.kafka.debezium_sink)
                    ksink = _debezium_sink(ep, columns, text, opts)
                else:
                    ksink = KafkaDeltaSink(ep, columns,
                                           transactional_id=default_id("txn", text, ep.url))
            deltas, resume_epoch = ksink, ksink.last_committed_epoch
        elif opts.deltas:
            dsink = DeltaCsvSink(opts.deltas, columns, resume=opts.resume_outputs,
                                 fsync=opts.fsync)
            resume_epoch = dsink.last_committed_epoch
            deltas = SkipCommitted(dsink, epoch=resume_epoch)
        else:
            deltas = CsvStreamSink(sys.stdout, columns)
        opened.append(deltas)
        snapshots: SnapshotSink | None = None
        resume_snapshot = 0
        if is_kafka(opts.snapshots):
            ep = endpoint(str(opts.snapshots), opts)
            with kafka_errors(f"--snapshots {ep.url}", ep.bootstrap):
                snap = KafkaDeltaSink(ep, columns, kind="snapshot",
                                      transactional_id=default_id("snap", text, ep.url))
            snapshots, resume_snapshot = snap, snap.last_committed_snapshot
        elif opts.snapshots:
            ssink = SnapshotCsvSink(opts.snapshots, columns, resume=opts.resume_outputs,
                                    fsync=opts.fsync)
            resume_snapshot = ssink.last_committed_snapshot
            snapshots = SkipCommitted(ssink, snapshot=resume_snapshot)
        if snapshots is not None:
            opened.append(snapshots)
        dead = _open_dead_letter(opts, deltas) if opts.on_error == "skip" else None
        return Outputs(deltas, snapshots, dead, resume_epoch, resume_snapshot)
    except BaseException:
        for sink in opened:
            sink.close()
        raise


def _debezium_sink(ep: KafkaEndpoint, columns: Sequence[str], text: str,
                   opts: RunOptions) -> KafkaDeltaSink:
    """The Debezium delta sink, ``u`` events keyed by the query's GROUP BY columns."""
    from connectors.kafka.debezium_sink import DebeziumDeltaSink, output_key
    from dataflow.api import compile_query

    key = output_key(compile_query(text, source_name=opts.query).cq)
    return DebeziumDeltaSink(ep, columns, key=key,
                             transactional_id=default_id("txn", text, ep.url))


def dead_letter_target(opts: RunOptions) -> str:
    """Where ``--on-error skip`` sends bad records: ``--dead-letter``, else for a Kafka
    source its topic's ``dead-letter=`` or ``<topic>.dead-letter`` on the same broker,
    else the file default of the command line."""
    if opts.dead_letter:
        return opts.dead_letter
    if is_kafka(opts.updates):
        ep = endpoint(opts.updates, opts)
        topic = ep.dead_letter_topic or f"{ep.topic}.dead-letter"
        query = opts.updates.split("?", 1)[1] if "?" in opts.updates else ""
        return f"kafka://{ep.bootstrap}/{topic}" + (f"?{query}" if query else "")
    return opts.dead_letter_path


def _open_dead_letter(opts: RunOptions, deltas: DeltaSink) -> DeadLetterSink:
    target = dead_letter_target(opts)
    if not is_kafka(target):
        return DeadLetterCsvSink(target)
    opts.dead_letter = target  # so that the run's summary names the topic
    ep = endpoint(target, opts)
    with kafka_errors(f"dead-letter topic {ep.url}", ep.bootstrap):
        if isinstance(deltas, KafkaDeltaSink) and deltas.endpoint.bootstrap == ep.bootstrap:
            return deltas.dead_letter_sink(ep.topic)
        return KafkaDeadLetterSink(ep, ep.topic)


# ---------------------------------------------------------------------------------------
# ivmflow produce / consume

_OP_RE = re.compile(r"([+-])([0-9]*)")


def _untyped_updates(path: str) -> Iterator[Record]:
    """Update-CSV records without a query: values stay text (the reader parses them by
    the column types, as for CSV files); empty fields are NULL."""
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8", newline="")  # noqa: SIM115
    try:
        for lineno, line in enumerate(stream, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            if text == "*":
                yield EpochEnd(f"{path}:{lineno}")
                continue
            fields = next(csv.reader([text]))
            m = _OP_RE.fullmatch(fields[0].strip())
            if m is None or len(fields) < 2 or (m.group(2) and int(m.group(2)) < 1):
                where = f"{path}:{lineno}"
                raise InputError(where, text, "op,relation,v1,...,vn with op +, -, +N or -N",
                                 f"{fields[0]!r}" if m is None else "no relation")
            op: Op = "+" if m.group(1) == "+" else "-"
            row = tuple(None if f == "" else f for f in fields[2:])
            yield Update(op, fields[1].strip(), row, int(m.group(2) or 1), f"{path}:{lineno}")
    finally:
        if stream is not sys.stdin:
            stream.close()


def _schema(query: str | None) -> tuple[Schema | None, tuple[str, ...]]:
    if not query:
        return None, ()
    from dataflow.api import compile_query

    q = compile_query(Path(query).read_text(encoding="utf-8"), source_name=query)
    return q.schema, tuple(q.output_columns)


def _topic_endpoint(url: str, kafka_options: Sequence[str]) -> KafkaEndpoint:
    if not is_kafka(url):
        msg = f"expected a kafka://host:port/topic URL, found {url!r}"
        raise UsageError(msg)
    try:
        return parse_kafka_url(url, kafka_options)
    except KafkaConfigError as exc:
        raise UsageError(str(exc)) from None


def produce(updates: str, topic: str, *, partitions: int = 1, query: str | None = None,
            kafka_options: Sequence[str] = (), fmt: str = "json",
            before_images: str = "full") -> tuple[int, str]:
    """Write the update CSV file ``updates`` (``-``: stdin) as JSON update records to
    ``topic`` (``kafka://host:port/topic``), values typed by the ``query`` file's
    tables (text without one); returns (records written, the topic's URL). With
    ``fmt="debezium-json"`` as Debezium change events, one source transaction per
    epoch, with ``fmt="upsert-json"`` as upsert topics (each epoch's net change per
    key: :mod:`connectors.kafka.debezium_io`; both need the query)."""
    ep = _topic_endpoint(topic, kafka_options)
    if partitions < 1:
        msg = f"--partitions: expected a positive integer, found {partitions}"
        raise UsageError(msg)
    schema, _ = _schema(query)
    if updates != "-" and not Path(updates).exists():
        raise FileNotFoundError(2, "update file not found", updates)
    if fmt in ("debezium-json", "upsert-json"):
        from connectors.kafka.debezium_io import produce_changes, produce_upserts

        if schema is None:
            msg = f"produce --format {fmt}: expected --query QUERY.sql (the tables)"
            raise UsageError(msg)
        if ep.format != fmt:
            ep = replace(ep, format=fmt, per_relation=True)
        with kafka_errors(f"produce to {ep.url}", ep.bootstrap):
            try:
                if fmt == "upsert-json":
                    n, _epochs = produce_upserts(ep, read_updates(updates, schema), schema,
                                                 partitions=partitions)
                else:
                    n, _txns = produce_changes(ep, read_updates(updates, schema), schema,
                                               partitions=partitions,
                                               before_images="key" if before_images == "key"
                                               else "full")
            except KafkaConfigError as exc:
                raise UsageError(str(exc)) from None
        return n, ep.url
    records = (read_updates(updates, schema) if schema is not None
               else _untyped_updates(updates))
    with kafka_errors(f"produce to {ep.url}", ep.bootstrap):
        n = produce_updates(ep, records, schema, partitions=partitions)
    return n, ep.url


def consume(topic: str, out: TextIO, *, snapshots: bool = False, query: str | None = None,
            kafka_options: Sequence[str] = ()) -> None:
    """Write the committed delta (or snapshot) records of ``topic`` to ``out`` as delta
    CSV (``epoch,mult,<columns>``, columns in the ``query``'s order), in epoch order."""
    ep = _topic_endpoint(topic, kafka_options)
    key = "snapshot" if snapshots else "epoch"
    _, columns = _schema(query)
    with kafka_errors(f"consume {ep.url}", ep.bootstrap):
        rows = read_deltas(ep, key=key)
    names = list(unique_columns(columns)) if columns else (list(rows[0][2]) if rows else [])
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([key, "mult", *names])
    for epoch, mult, row in rows:
        # (csv_value: the empty string as "", apart from NULL, as the delta CSV writes it)
        out.write(",".join([str(epoch), str(mult), *(csv_value(row.get(c)) for c in names)])
                  + "\n")
    out.flush()
