"""The PyFlink runner (``pip install -e '.[flink]'``, Java 17): the job in
:mod:`dataflow.runners.flink.job`, its Kafka source in
:mod:`~dataflow.runners.flink.kafka`. Importing this package needs no PyFlink; running
does.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from connectors.files import holds_records
from core.errors import UnavailableError
from dataflow.circuit.drive import DriveStats
from dataflow.runners import register
from dataflow.runners.run import FLINK_CHECKPOINT_S, scheme
from dataflow.runners.spark import change_options, refuse_kafka_skip

if TYPE_CHECKING:
    from dataflow.runners.run import RunContext

__all__ = ["last_written_epoch", "run_flink"]


def last_written_epoch(deltas: str, kafka_options: Sequence[str] = ()) -> int:
    """The last epoch with rows a delta file's commit record (or a delta topic: ivmflow's
    records, or Debezium events by their transaction topic's last END) holds: every epoch
    up to it is whole (0: none, or unknown)."""
    if scheme(deltas) == "kafka":
        from connectors.kafka import parse_kafka_url, read_last_epoch
        from connectors.kafka.debezium_sink import read_last_transaction

        try:
            ep = parse_kafka_url(deltas, kafka_options)
            if ep.format == "debezium-json":
                return read_last_transaction(ep)
            return read_last_epoch(ep)
        except Exception:  # noqa: BLE001 - only for the stop message: unknown
            return 0
    try:
        return int(json.loads(Path(f"{deltas}.commit").read_text(encoding="utf-8"))["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


@register("flink")
def run_flink(ctx: RunContext) -> DriveStats:
    """The PyFlink runner (``pip install -e '.[flink]'``, Java 17): see
    :mod:`dataflow.runners.flink.job`. The job reads the update file, directory or
    topic itself (its position in Flink's checkpoints); its epoch merger writes the
    delta file (exactly once per epoch, also across a restart from the checkpoint)."""
    import tempfile

    opts, out = ctx.options, ctx.outputs
    try:
        from dataflow.runners.flink.job import FlinkJob
    except ImportError as err:  # pragma: no cover - depends on the installation
        msg = f"the flink runner needs PyFlink: pip install -e '.[flink]' ({err})"
        raise UnavailableError(msg) from None
    refuse_kafka_skip(opts)
    change = change_options(ctx)
    scratch = Path(tempfile.mkdtemp(prefix="ivmflow-flink-out-"))
    deltas = opts.deltas or str(scratch / "deltas.csv")
    if opts.deltas:
        out.deltas.close()  # the job's merger owns the file from here on
    if opts.snapshots and out.snapshots is not None:
        out.snapshots.close()
    job = FlinkJob(ctx.query, epoch_size=None if change is not None else opts.epoch,
                   parallelism=opts.parallelism,
                   checkpoint=opts.spark_checkpoint,
                   checkpoint_interval_ms=max(10, round(1000 * (
                       FLINK_CHECKPOINT_S if opts.checkpoint_interval is None
                       else opts.checkpoint_interval))),
                   trust_deletes=opts.trust_deletes)
    if scheme(opts.updates) == "kafka":
        ctx.progress.counted_in_job = (
            "flink job done (the job itself read the updates; Flink metrics"
            " ivmflow.updates_read and ivmflow.epochs_read count them)"
        )
        stopped = job.run_kafka(opts.updates, deltas, opts.snapshots,
                                stop_at_end=opts.stop_at_end, batch_records=opts.batch_lines,
                                should_stop=lambda: ctx.progress.stop_requested,
                                kafka_options=opts.kafka_options, change=change)
        if job.upsert_summary is not None:
            from connectors.kafka.change_epochs import state_note

            ctx.progress.state_note = state_note(job.upsert_summary)
    else:
        dead = None
        if opts.on_error == "skip" and out.dead_letter is not None:
            out.dead_letter.close()  # the job's source appends to it from here on
            dead = str(getattr(out.dead_letter, "path", opts.dead_letter_path))
        ctx.progress.counted_in_job = (
            "flink job done (the job read the updates; Flink metrics ivmflow.updates_read"
            " and ivmflow.epochs_read count them)"
        )
        stopped = job.run_files(opts.updates, deltas, opts.snapshots,
                                stop_at_end=opts.stop_at_end, batch_lines=opts.batch_lines,
                                on_error=opts.on_error, dead_letter=dead,
                                should_stop=lambda: ctx.progress.stop_requested)
    if stopped:
        # The job was cancelled: the sinks hold whole epochs (the open one was dropped;
        # the same command goes on from the newest checkpoint). Stopped before the end
        # of a bounded source (a file; a directory or topic read --stop-at-end): the CLI
        # exits 130 / 143 naming the last epoch the deltas hold.
        bounded = opts.stop_at_end or (scheme(opts.updates) is None
                                       and not Path(opts.updates).is_dir())
        ctx.progress.stats.stopped = bounded
        ctx.progress.stats.epochs = last_written_epoch(deltas, opts.kafka_options)
    if scheme(deltas) == "kafka":
        return ctx.progress.stats
    text = Path(deltas).read_text() if Path(deltas).exists() else ""
    body = "".join(text.splitlines(keepends=True)[1:])
    ctx.progress.stats.delta_rows = body.count("\n")
    if not opts.deltas and (body or (scheme(opts.updates) is None
                                     and holds_records(opts.updates))):
        # The same bytes as the local runner's stdout: the header, then the rows; the
        # header alone when epochs closed without rows; nothing when none closed.
        stream = getattr(out.deltas, "stream", sys.stdout)
        stream.write(text)
        stream.flush()
    return ctx.progress.stats
