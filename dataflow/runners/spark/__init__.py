"""The Spark runner (``pip install -e '.[spark]'``, Java 17): PySpark Structured
Streaming in micro-batches (:mod:`dataflow.runners.spark.job`), with its file source
(:mod:`~dataflow.runners.spark.source`), its Kafka source
(:mod:`~dataflow.runners.spark.kafka`) and the Spark data generator
(:mod:`~dataflow.runners.spark.datagen`). Importing this package needs no pyspark;
running does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.files import CsvStreamSink, holds_records
from core.errors import UnavailableError, UsageError
from dataflow.circuit.drive import DriveStats
from dataflow.runners import register
from dataflow.runners.run import scheme

if TYPE_CHECKING:
    from dataflow.runners.run import RunContext, RunOptions

__all__ = ["change_options", "refuse_kafka_skip", "run_spark"]


def refuse_kafka_skip(opts: RunOptions) -> None:
    """The Spark and Flink Kafka sources stop at a bad record (no dead-letter topic
    there yet): say so before the job starts."""
    if opts.on_error == "skip" and scheme(opts.updates) == "kafka":
        msg = (f"--on-error skip with a kafka:// source runs on the local runner only; "
               f"the {opts.runner} runner stops at a bad record (run without --on-error "
               f"skip, or with --runner local)")
        raise UsageError(msg)


def change_options(ctx: RunContext) -> dict[str, Any] | None:
    """The cut options of a change-stream source (``format=debezium-json`` or
    ``upsert-json``: :class:`connectors.kafka.change_epochs.ChangeReader`), checked as
    the local runner checks them; None for any other source."""
    opts = ctx.options
    if scheme(opts.updates) != "kafka":
        return None
    from connectors.kafka import KafkaConfigError
    from connectors.kafka.changes import change_source_kwargs, check_change_options
    from dataflow.runners.kafka import endpoint

    ep = endpoint(opts.updates, opts)
    if ep.format == "json":
        return None
    kwargs = change_source_kwargs(opts)
    try:
        check_change_options(ep, ctx.query.schema, kwargs["epoch_size"], kwargs["epoch_ms"])
    except KafkaConfigError as exc:
        raise UsageError(str(exc)) from None
    return kwargs


@register("spark")
def run_spark(ctx: RunContext) -> DriveStats:
    """The Spark runner (``pip install -e '.[spark]'``, Java 17): see
    :mod:`dataflow.runners.spark.job`. The delta file is always resumed: after a crash, the
    same command with the same checkpoint writes exactly the epochs still missing."""
    opts, out = ctx.options, ctx.outputs
    try:
        from dataflow.runners.spark.job import SparkJob
    except ImportError as err:  # pragma: no cover - depends on the installation
        msg = f"the spark runner needs pyspark: pip install -e '.[spark]' ({err})"
        raise UnavailableError(msg) from None
    refuse_kafka_skip(opts)
    change = change_options(ctx)
    checkpoint = opts.spark_checkpoint
    job = SparkJob(
        ctx.query,
        opts.updates,
        epoch_size=None if change is not None else opts.epoch,
        parallelism=opts.parallelism,
        checkpoint=checkpoint,
        batch_lines=opts.batch_lines,
        bounded=opts.stop_at_end or not (
            scheme(opts.updates) == "kafka" or Path(opts.updates).is_dir()
        ),
        kafka_options=opts.kafka_options,
        verbose=opts.verbose,
        change=change,
        trust_deletes=opts.trust_deletes,
    )
    job.run(out, ctx.progress.stats, should_stop=lambda: ctx.progress.stop_requested)
    if change is not None:
        from connectors.kafka.change_epochs import state_note

        ctx.progress.state_note = state_note(job.upsert_dir / "summary.json")
    if isinstance(out.deltas, CsvStreamSink) and scheme(opts.updates) is None \
            and holds_records(opts.updates):
        # Epochs closed (the job reports only those with rows): the header is due on
        # stdout even without rows, as the local runner prints it.
        out.deltas.write_header()
    return ctx.progress.stats
