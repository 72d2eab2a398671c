"""The ``ivmflow`` command line (docs/architecture.md): ``run``, ``explain``, ``generate``,
``produce``, ``consume``. Argument parsing and messages only: running lives in
:mod:`dataflow.runners.run`, the runners in :mod:`dataflow.runners`, the Kafka tools in
:mod:`dataflow.runners.kafka`, stream generation in :mod:`dataflow.generate`.

``ivmflow ...``, ``python -m dataflow ...`` and ``python -m dataflow.cli ...`` (also
``python dataflow/cli.py``, as the SparkApplication manifest starts it) behave the same.

Exit codes: 0 success (also an unbounded source, Kafka, stopped by SIGINT/SIGTERM: the
run ends at the last whole epoch), 1 bad input (bad update record, missing file, sink
that cannot resume, an input that changed under --resume, unreachable broker, a Spark or
Flink job that failed or could not start: one line naming the cause, the full trace in a
log file or with ``--verbose``), 2 bad query or bad usage (unsupported SQL, unknown
option, runner or connector not in this build), 130 / 143 a bounded source (a file)
stopped by SIGINT / SIGTERM before its end (one line names the last whole epoch; the open
epoch is dropped, never written cut short; ``--resume`` continues after it), 130 also
interrupted twice, 141 stdout closed.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> main(["generate", "graph", "--edges", "4", "--seed", "1", "--quiet",
    ...       "--out", str(d / "u.csv")])
    0
    >>> len((d / "u.csv").read_text().splitlines())
    4
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import signal
import sys
from typing import Any

from core.errors import InputError, IvmflowError, JobError, QueryError, UsageError
from core.faults import arm as arm_faults
from core.memory import parse_size
from core.native import NativeBuildError, one_line
from dataflow import generate, runners
from dataflow.runners.run import (
    PROG,
    Progress,
    RunOptions,
    compile_file,
    plural,
    run,
    stop_on_signals,
)

__all__ = ["build_parser", "main"]


# ---------------------------------------------------------------------------------------
# Commands


def cmd_run(opts: RunOptions) -> int:
    """``ivmflow run``: run (:func:`dataflow.runners.run.run`) and report."""
    show = not opts.quiet
    # The progress line lives on a terminal's stderr, but not when deltas scroll by there.
    tty = sys.stderr.isatty() and not (opts.deltas is None and sys.stdout.isatty())
    progress = Progress(sys.stderr, enabled=show and tty)
    try:
        with stop_on_signals(progress):
            ctx = run(opts, progress)
    except JobError as exc:
        return _job_error(exc, opts.verbose, opts.runner)
    except InputError as exc:
        code = _error(str(exc), 1)
        done = progress.stats.epochs
        if show and done and opts.deltas:
            print(f"{PROG}: the deltas of epochs 1-{done}, completed before the error, "
                  f"are in {opts.deltas}", file=sys.stderr)
        return code
    if show:
        print(progress.summary(), file=sys.stderr)
    dead = ctx.outputs.dead_letter
    skipped = getattr(dead, "count", 0)
    if dead is not None and skipped:
        print(f"{PROG}: skipped {plural(skipped, 'bad record')}; "
              f"see {opts.dead_letter_path}", file=sys.stderr)
    if progress.stats.stopped:
        # A bounded source stopped before its end: always said, and the exit code is the
        # signal's (130, 143), so that a script does not take the output for complete.
        print(_stopped_line(opts, progress), file=sys.stderr)
        return 128 + (progress.stop_signal or signal.SIGINT)
    if show and progress.stop_requested:  # (an unbounded source: a normal end)
        print(f"{PROG}: stopped by signal after epoch {progress.stats.epochs}",
              file=sys.stderr)
    return 0


def _stopped_line(opts: RunOptions, progress: Progress) -> str:
    """The one line of a run stopped before the end of its bounded source."""
    sig = signal.Signals(progress.stop_signal or signal.SIGINT).name
    k = progress.stats.epochs
    where = f" ({opts.deltas})" if opts.deltas else ""
    whole = (f"epoch 1 is whole{where}" if k == 1 else f"epochs 1-{k} are whole{where}"
             if k else "no epoch was completed")
    if opts.runner == "local" and "://" in opts.updates:
        again = "run the same command again to go on from what the output holds"
    elif opts.runner == "local":
        again = "run the same command with --resume to continue after it" if k else \
            "run the same command again"
    else:
        again = "run the same command again to go on from the checkpoint"
    return (f"{PROG}: stopped by {sig} before the end of {opts.updates}: {whole}, the "
            f"open epoch was dropped; {again}")


def _job_error(exc: JobError, verbose: bool, runner: str) -> int:
    """A failed Spark or Flink job: one line naming the cause, exit 1. The full trace
    is printed first with ``--verbose``, else it is in a log file named on that line
    (the job's own log, or one written here)."""
    message = str(exc)
    if verbose:
        if exc.trace:
            print(exc.trace.rstrip("\n"), file=sys.stderr)
        return _error(message, 1)
    log = exc.log
    if log is None and exc.trace:
        import tempfile

        fd, log = tempfile.mkstemp(prefix=f"ivmflow-{runner}-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(exc.trace)
    if log is not None:
        message += f"; full trace in {log} (or run with --verbose)"
    return _error(message, 1)


def cmd_explain(
    query_path: str, eps: float | None = None, parallelism: int = 1, partitioning: str = "single",
    native: bool | None = None, trust_deletes: bool = False, logical: bool = False,
) -> int:
    """``ivmflow explain``: print the plan of a query file, then which hot path a local
    run would use and why (``hot path: compiled ...`` / ``hot path: interpreted: ...``)
    and what its delete check keeps (``delete check: row digests (64-bit) of ...``).
    ``logical``: the logical plan instead, as the distributed runners ship it (its
    views, their join blocks, the edges; what a checkpoint's layout stamp digests)."""
    query = compile_file(query_path, eps, partitioning=partitioning)
    if logical:
        print(query.logical.render())
        return 0
    print(query.explain(parallelism=parallelism, eps=eps))
    print(f"hot path: {query.native_status(parallelism, eps, native)}")
    print(f"delete check: {query.delete_check(parallelism, validate=not trust_deletes)}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    """``ivmflow generate graph|social|tpch|tpcds``."""
    if args.kind == "tpcds":
        report = generate.tpcds(args.out, args.sf, refresh_rounds=args.refresh_rounds,
                                seed=args.seed, sales_per_refresh=args.sales_per_refresh,
                                delete_days=args.delete_days,
                                dimension_updates=args.dimension_updates)
    elif args.kind == "tpch":
        report = generate.tpch(args.out, args.sf, refresh_pairs=args.refresh_pairs,
                               seed=args.seed, other_updates=args.other_updates)
    elif args.kind == "social":
        report = generate.social(args.out, args.persons, args.knows, args.messages,
                                 window=args.window, seed=args.seed,
                                 epoch_every=args.epoch_every)
    else:
        spec = generate.GraphSpec(args.edges, args.nodes, args.alpha, args.model,
                                  args.window, args.seed, args.relation, args.epoch_every)
        report = generate.graph(spec, args.out, engine=args.engine,
                                edge_list=args.edge_list, min_dst=args.min_dst)
    if not args.quiet and args.out != "-":
        print(f"{PROG}: {report}", file=sys.stderr)
    return 0


def cmd_kafka(args: argparse.Namespace) -> int:
    """``ivmflow produce`` / ``ivmflow consume``."""
    from dataflow.runners import kafka as kafka_io

    if args.command == "produce":
        n, url = kafka_io.produce(args.updates, args.topic, partitions=args.partitions,
                                  query=args.query, kafka_options=args.kafka_option or (),
                                  fmt=args.format, before_images=args.before_images)
        if not args.quiet:
            print(f"{PROG}: wrote {n} records to {url}", file=sys.stderr)
        return 0
    kafka_io.consume(args.topic, sys.stdout, snapshots=args.snapshots, query=args.query,
                     kafka_options=args.kafka_option or ())
    return 0


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _window(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        msg = f"not a window size or fraction: {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not 0 < value <= 1:
        msg = f"a fractional window must be in (0, 1], not {text}"
        raise argparse.ArgumentTypeError(msg)
    return value



def _add_kafka_commands(sub: Any) -> None:
    """Add ``produce`` and ``consume`` to the ``ivmflow`` sub-command parsers."""
    prod = sub.add_parser("produce", help="write an update CSV file to a Kafka topic",
                          description="Write UPDATES.csv as JSON update records to a topic: "
                                      "updates keyed by relation and row, every '*' as a "
                                      "marker to every partition.")
    prod.add_argument("updates", metavar="UPDATES.csv", help="update CSV file ('-': stdin)")
    prod.add_argument("topic", metavar="kafka://HOST:PORT/TOPIC")
    prod.add_argument("--partitions", type=int, default=1, metavar="P",
                      help="partitions of a topic created here (default 1)")
    prod.add_argument("--query", metavar="QUERY.sql",
                      help="type the values by the query's CREATE TABLEs (default: text)")
    prod.add_argument("--kafka-option", action="append", metavar="KEY=VALUE")
    prod.add_argument("--format", choices=("json", "debezium-json", "upsert-json"),
                      default="json",
                      help="json: ivmflow's update records (default); debezium-json: "
                           "Debezium change events on TOPIC.<schema>.<R>, one transaction "
                           "per epoch with metadata on TOPIC.transaction; upsert-json: "
                           "each epoch's rows per key on TOPIC.<R>, record timestamps 1 "
                           "ms apart per epoch (both need --query)")
    prod.add_argument("--before-images", choices=("full", "key"), default="full",
                      help="debezium-json: full before-images (REPLICA IDENTITY FULL, "
                           "default) or the key only (Postgres' default)")
    prod.add_argument("--quiet", "-q", action="store_true")
    cons = sub.add_parser("consume", help="print the committed deltas of a Kafka topic",
                          description="Print the committed (read_committed) delta records "
                                      "of a topic as delta CSV, in epoch order.")
    cons.add_argument("topic", metavar="kafka://HOST:PORT/TOPIC")
    cons.add_argument("--query", metavar="QUERY.sql", help="column order of the output")
    cons.add_argument("--snapshots", action="store_true",
                      help="the topic holds snapshots (snapshot,mult,...)")
    cons.add_argument("--kafka-option", action="append", metavar="KEY=VALUE")


# Argument parsing


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"expected a positive integer, found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        msg = f"expected a count (0 or more), found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _scale_factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.0 < value <= 100.0:
        msg = f"expected a scale factor in (0, 100], found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):
        msg = f"expected a number of seconds (0 or more), found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        msg = f"expected a number between 0 and 1, found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def version() -> str:
    """The installed package's version (its metadata), or why there is none."""
    try:
        return importlib.metadata.version("ivmflow")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed: pip install -e . to get a version)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ivmflow``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Incremental view maintenance of SQL join queries over update streams.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}",
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="maintain a query over an update stream",
                         description="Maintain QUERY.sql over an update stream and write "
                                     "the delta of every epoch.")
    run.add_argument("query", metavar="QUERY.sql")
    run.add_argument("--updates", required=True, metavar="SOURCE",
                     help="update CSV file, directory of *.csv, '-' for stdin, "
                          "or kafka://host:port/topic")
    run.add_argument("--runner", choices=runners.names(), default="local",
                     help="local: in this process (default); spark, flink: a Spark or "
                          "Flink job (pip install 'ivmflow[spark]' or '[flink]', Java 17)")
    run.add_argument("--epoch", type=_positive_int, metavar="N",
                     help="end an epoch after every N updates (besides '*' lines)")
    run.add_argument("--deltas", metavar="OUT.csv", help="delta file (default: stdout)")
    run.add_argument("--snapshots", metavar="OUT.csv",
                     help="write the full result after every '*' line to this file")
    run.add_argument("--parallelism", type=_positive_int, default=1, metavar="P",
                     help="partitions of the state, each with its own engine (HyperCube "
                          "routing, every output row from one partition; default 1); "
                          "spark, flink: parallel tasks")
    run.add_argument("--eps", type=_unit_float, metavar="E",
                     help="IVM-epsilon heavy/light threshold exponent, 0 <= E <= 1 "
                          "(default: the engine's choice); for a hierarchical query that "
                          "is not q-hierarchical it also selects view trees, the knob "
                          "between update time N^(delta E) and delay N^(1-E)")
    _add_native_flags(run)
    run.add_argument("--partitioning", choices=("single", "double"), default="single",
                     help="triangle COUNT(*): heavy/light partition each relation on one "
                          "column (default) or on both (lower space)")
    run.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                     help="on a bad record: stop (default) or write it to the dead-letter "
                          "file and go on")
    run.add_argument("--dead-letter", metavar="FILE",
                     help="dead-letter file for --on-error skip: CSV source,reason,record, "
                          "each record the line as it was read (default: "
                          "<deltas>.dead-letter.csv, e.g. out.csv.dead-letter.csv; "
                          "ivmflow.dead-letter.csv when deltas go to stdout)")
    run.add_argument("--stop-at-end", action="store_true",
                     help="stop at the end of what an unbounded source holds at start")
    run.add_argument("--min-epoch-events", type=_positive_int, default=1, metavar="N",
                     help="change streams with transactions=: consecutive source "
                          "transactions share an epoch until it holds N events (default 1: "
                          "one epoch per transaction)")
    run.add_argument("--transaction-timeout", type=float, default=60.0, metavar="S",
                     help="change streams: seconds a transaction's END may wait for its "
                          "events before the run fails (default 60)")
    run.add_argument("--epoch-ms", type=_positive_int, metavar="T",
                     help="change streams without transactions=: epochs of T ms of the "
                          "events' source timestamps (not transactionally consistent)")
    _add_trust_deletes(run)
    run.add_argument("--max-state", type=_size, metavar="SIZE",
                     help="local runner: stop once the process holds more than SIZE "
                          "resident (e.g. 8G): at the end of an epoch, that epoch's "
                          "deltas written and committed, or inside one (checked every "
                          "64k updates), nothing of it written")
    run.add_argument("--resume", action="store_true",
                     help="keep the committed epochs of existing --deltas/--snapshots files "
                          "and write only the later ones")
    run.add_argument("--no-fsync", dest="fsync", action="store_false",
                     help="do not fsync sinks per epoch (faster; still atomic per epoch "
                          "if the process dies, not if the machine does)")
    run.add_argument("--checkpoint", metavar="DIR",
                     help="spark, flink: streaming checkpoint (default: "
                          "<deltas>.checkpoint); local runner over kafka://: state "
                          "checkpoint, so that a restart reads on from it instead of "
                          "replaying the topic (default: none)")
    run.add_argument("--checkpoint-interval", type=_seconds, default=None, metavar="S",
                     help="seconds between state checkpoints; local runner over "
                          "kafka://: taken at epoch boundaries (default 30; 0: every "
                          "boundary); flink: the job's checkpoint interval (default 1, "
                          "at least 0.01)")
    run.add_argument("--batch-lines", type=_positive_int, default=10_000, metavar="N",
                     help="spark: input lines per micro-batch (default 10000)")
    run.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                     help="Kafka client property for kafka:// sources and sinks, e.g. "
                          "security.protocol=SASL_SSL (repeatable)")
    run.add_argument("--quiet", "-q", action="store_true",
                     help="no progress line and no summary")
    run.add_argument("--verbose", "-v", action="store_true",
                     help="spark, flink: show the JVM's output, and a failed job's full "
                          "trace (default: in a log file named by the error)")

    explain = sub.add_parser("explain", help="print the plan of a query")
    explain.add_argument("query", metavar="QUERY.sql")
    explain.add_argument("--eps", type=_unit_float, default=None, metavar="E",
                         help="IVM-epsilon exponent for triangle queries (default 0.5); "
                              "for a hierarchical, not q-hierarchical query: its view trees "
                              "and predicted exponents at E")
    explain.add_argument("--parallelism", type=_positive_int, default=1, metavar="P",
                         help="show the partitioning for P partitions")
    explain.add_argument("--partitioning", choices=("single", "double"), default="single",
                         help="triangle COUNT(*): single or double heavy/light partitioning")
    explain.add_argument("--logical", action="store_true",
                         help="print the logical plan (views, join blocks, edges) as the "
                              "Spark and Flink runners ship it to their workers")
    _add_native_flags(explain)
    _add_trust_deletes(explain)

    _add_kafka_commands(sub)
    gen = sub.add_parser("generate", help="write synthetic update streams")
    gen_sub = gen.add_subparsers(dest="kind", required=True, metavar="KIND")
    graph = gen_sub.add_parser("graph", help="a skewed directed graph, optionally as a "
                                             "FIFO sliding-window stream")
    graph.add_argument("--edges", type=_positive_int, required=True)
    graph.add_argument("--nodes", type=_positive_int, default=None)
    graph.add_argument("--alpha", type=float, default=1.0, help="Zipf exponent (default 1)")
    graph.add_argument("--model", choices=("zipf", "powerlaw_cluster"), default="zipf")
    graph.add_argument("--window", type=_window, default=None,
                       help="live edges: a count, or a fraction of --edges such as 0.2")
    graph.add_argument("--seed", type=int, default=0)
    graph.add_argument("--relation", default="G")
    graph.add_argument("--out", default="-", help="output file (default: stdout)")
    graph.add_argument("--epoch-every", type=_positive_int, default=None, metavar="N",
                       help="write a '*' line after every N updates")
    social = gen_sub.add_parser(
        "social", help="person/knows/message tables under FIFO windows (built with PySpark)"
    )
    social.add_argument("--persons", type=_positive_int, required=True)
    social.add_argument("--knows", type=_positive_int, required=True)
    social.add_argument("--messages", type=_positive_int, required=True)
    social.add_argument("--window", type=float, default=0.2,
                        help="live fraction of each table (default 0.2)")
    social.add_argument("--seed", type=int, default=0)
    social.add_argument("--epoch-every", type=_positive_int, default=None, metavar="N")
    social.add_argument("--out", required=True)
    social.add_argument("--quiet", "-q", action="store_true")
    graph.add_argument("--engine", choices=("python", "spark"), default="python",
                       help="build the stream in-process (default) or with PySpark")
    graph.add_argument("--edge-list", metavar="FILE",
                       help="spark: read src,dst edges from FILE instead of generating")
    graph.add_argument("--min-dst", type=int, default=None, metavar="T",
                       help="spark: keep only edges with dst >= T")
    graph.add_argument("--quiet", "-q", action="store_true")
    tpch = gen_sub.add_parser(
        "tpch", help="TPC-H tables (DuckDB's dbgen), refresh epochs and the 22 queries",
        description="Write DIR/schema.sql, DIR/updates.csv (the initial load, then per "
                    "refresh pair an RF1 epoch inserting SF*1500 orders with their "
                    "lineitems, an RF2 epoch deleting SF*1500 orders with theirs, and an "
                    "UPD epoch changing customer, supplier and partsupp rows), "
                    "DIR/queries/q01.sql ... q22.sql and DIR/manifest.json. Needs the "
                    "tpch extra (duckdb-extension-tpch).")
    tpch.add_argument("--sf", type=_scale_factor, required=True, help="scale factor")
    tpch.add_argument("--out", required=True, metavar="DIR")
    tpch.add_argument("--refresh-pairs", type=_count, default=2, metavar="K",
                      help="RF1/RF2 pairs after the initial load (default 2)")
    tpch.add_argument("--seed", type=int, default=0)
    tpch.add_argument("--other-updates", type=_count, default=None, metavar="N",
                      help="customers (and partsupp rows; a tenth as many suppliers) "
                           "changed per UPD epoch (default max(3, SF*300); 0: no UPD "
                           "epochs)")
    tpch.add_argument("--quiet", "-q", action="store_true")
    tpcds = gen_sub.add_parser(
        "tpcds", help="TPC-DS tables (DuckDB's dsdgen), data-maintenance epochs and the "
                      "99 queries",
        description="Write DIR/schema.sql, DIR/updates.csv (the initial load, then per "
                    "refresh round an INS epoch inserting new tickets per sales channel "
                    "with their returns and new customers, a DEL epoch deleting a "
                    "window of sale dates' sales with their returns and a window of "
                    "inventory, and an UPD epoch changing customer, item and "
                    "customer_address rows), DIR/queries/q01.sql ... q99.sql and "
                    "DIR/manifest.json. Needs the tpcds extra (duckdb-extension-tpcds).")
    tpcds.add_argument("--sf", type=_scale_factor, required=True, help="scale factor")
    tpcds.add_argument("--out", required=True, metavar="DIR")
    tpcds.add_argument("--refresh-rounds", type=_count, default=2, metavar="K",
                       help="INS/DEL/UPD rounds after the initial load (default 2)")
    tpcds.add_argument("--seed", type=int, default=0)
    tpcds.add_argument("--sales-per-refresh", type=_count, default=None, metavar="N",
                       help="new tickets (orders) per channel per INS epoch (default "
                            "max(2, SF*1000); 0: no INS epochs)")
    tpcds.add_argument("--delete-days", type=_count, default=7, metavar="D",
                       help="sale dates deleted per channel per DEL epoch (default 7; "
                            "0: no DEL epochs)")
    tpcds.add_argument("--dimension-updates", type=_count, default=None, metavar="N",
                       help="customers and addresses (a third as many items) changed "
                            "per UPD epoch (default max(3, SF*300); 0: no UPD epochs)")
    tpcds.add_argument("--quiet", "-q", action="store_true")
    return parser


def _add_native_flags(parser: argparse.ArgumentParser) -> None:
    flags = parser.add_mutually_exclusive_group()
    flags.add_argument("--native", dest="native", action="store_const", const=True,
                       default=None,
                       help="local runner: require the compiled hot path (fail with the "
                            "reason if it cannot be built). Default: compiled where Cython "
                            "and a C compiler are present (pip install 'ivmflow[native]'), "
                            "else interpreted; same results either way. Also "
                            "IVMFLOW_NATIVE=1")
    flags.add_argument("--no-native", dest="native", action="store_const", const=False,
                       help="local runner: always interpreted (also IVMFLOW_NATIVE=0)")


def _add_trust_deletes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trust-deletes", action="store_true",
                        help="do not check that a delete removes copies that are there "
                             "(default: checked, locally against a digest of each row of "
                             "the tables the query reads, on Spark and Flink against the "
                             "tuples the joins keep); for sources consistent by "
                             "construction, such as a database's change stream")


def _options(args: argparse.Namespace) -> RunOptions:
    return RunOptions(
        query=args.query, updates=args.updates, runner=args.runner, epoch=args.epoch,
        deltas=args.deltas, snapshots=args.snapshots, parallelism=args.parallelism,
        eps=args.eps, partitioning=args.partitioning, on_error=args.on_error,
        dead_letter=args.dead_letter,
        stop_at_end=args.stop_at_end, quiet=args.quiet, resume=args.resume,
        fsync=args.fsync, checkpoint=args.checkpoint,
        checkpoint_interval=args.checkpoint_interval, batch_lines=args.batch_lines,
        kafka_options=args.kafka_option, native=args.native, verbose=args.verbose,
        min_epoch_events=args.min_epoch_events, transaction_timeout=args.transaction_timeout,
        epoch_ms=args.epoch_ms,
        trust_deletes=args.trust_deletes, max_state=args.max_state,
    )


def _error(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the ``ivmflow`` command line; returns the exit code (never raises on bad
    queries, bad input or missing files).

    >>> main(["run", "q.sql", "--updates", "u.csv", "--runner", "storm"])
    2
    """
    parser = build_parser()
    try:
        arm_faults()  # IVMFLOW_FAULT (the fault tests): this process receives the signal
    except ValueError as exc:
        return _error(str(exc), 2)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, usage errors
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if args.command == "run":
            opts = _options(args)
            if opts.dead_letter and opts.on_error != "skip":
                return _error("--dead-letter needs --on-error skip", 2)
            return cmd_run(opts)
        if args.command in ("produce", "consume"):
            return cmd_kafka(args)
        if args.command == "explain":
            return cmd_explain(args.query, args.eps, args.parallelism, args.partitioning,
                               args.native, args.trust_deletes, args.logical)
        return cmd_generate(args)
    except QueryError as exc:
        return _error(str(exc), 2)
    except UsageError as exc:
        return _error(str(exc), 2)
    except NativeBuildError as exc:  # (--native: the compiler's output in a log file)
        return _error(one_line(exc), 1)
    except IvmflowError as exc:  # InputError, ResumeError
        return _error(str(exc), 1)
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 141
    except FileNotFoundError as exc:
        return _error(f"no such file or directory: {exc.filename}", 1)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return _error(f"{exc.strerror or exc}{where}", 1)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    # Run as a file or with ``python -m dataflow.cli``: use the imported module, so that
    # the error classes and registries are the ones every other module sees.
    from dataflow.cli import main as _main

    sys.exit(_main())
