"""Shared pytest setup: import paths, hypothesis profiles, interpreted views
(``IVMFLOW_NATIVE=0`` unless set).

Profiles (select with ``HYPOTHESIS_PROFILE``; default ``ci``):

- ``dev``: few examples, for quick local runs;
- ``ci``: the README/CI setting (derandomized, so CI runs are reproducible);
- ``thorough``: long exploratory runs (``HYPOTHESIS_PROFILE=thorough pytest -m slow``).

The property tests scale their example counts from the loaded profile's
``max_examples`` (see ``tests/test_oracle_property.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

_TESTS = Path(__file__).resolve().parent
for _p in (_TESTS.parent, _TESTS):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

_COMMON = {
    "deadline": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("dev", max_examples=10, **_COMMON)
settings.register_profile("ci", max_examples=100, derandomize=True, **_COMMON)
settings.register_profile("thorough", max_examples=1000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Views run interpreted in tests (their subprocesses too): compiling every query shape
# the suite makes would cost seconds each. tests/test_native.py compares the compiled
# build with the interpreted one and tests auto mode (it asks with native=True or sets
# the variable itself); IVMFLOW_NATIVE=1 (or auto) in the environment runs the whole
# suite compiled.
os.environ.setdefault("IVMFLOW_NATIVE", "0")

# The JVMs the tests start (Spark's driver through pyspark, Flink's mini-cluster through
# PyFlink's gateway; in this process or a runner's subprocess) each run a few seconds of
# work on small streams: the client compiler alone (and for Spark's driver the serial
# GC) starts them about a quarter faster on 2 cores, and changes no result. Either
# variable set outside wins. (No collector in JVM_ARGS: Flink's taskmanager.sh may add
# G1 to it for a standalone cluster's task manager, and a JVM given two refuses to start.)
os.environ.setdefault("JVM_ARGS", "-XX:TieredStopAtLevel=1")  # pyflink_gateway_server.py
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options "
                      "'-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell")


# --- Kafka: one real broker per test session (see tests/kafka_broker.py) ---------------

from collections.abc import Iterator  # noqa: E402

import kafka_broker as kb  # noqa: E402
import pytest  # noqa: E402

_KAFKA_FIXTURES = {"kafka_broker", "kafka_bootstrap"}
_KAFKA_STARTED: list[kb.KafkaBroker] = []


FULL_MATRIX = os.environ.get("IVMFLOW_FULL_MATRIX") == "1"
"""Run every test (``bench/runner_matrix.sh``, or ``IVMFLOW_FULL_MATRIX=1 python -m
pytest``). By default the README's test command, and CI with it, runs a representative
slice: each runner (Spark, Flink, local) over files and Kafka, each kind of stage, P = 1
and 2, every property test against DuckDB; not every query on every runner at every
parallelism, nor a second runner's copy of a slow test (each JVM start costs 20-50 s
on 2 cores). What is left out, and what covers it in the slice, is listed below."""

BEYOND_THE_SLICE: dict[str, str] = {
    # test id (a test function stands for all its parameters) -> what covers it by default
    "tests/test_bench_instructions_smoke.py::test_instructions_counts_the_timed_part":
        "valgrind over a bench run (107 s); the bench's arithmetic has unit tests",
    "tests/test_bench_spark_smoke.py::test_spark_bench_quick_state":
        "a Spark bench's smoke run (116 s); Spark runs in test_spark_runner.py",
    "tests/test_bench_tpch_flink_sql.py::test_flink_sql_final_result_equals_duckdb":
        "the Flink SQL peer end to end (31 s); its translations are tested apart",
    "tests/test_bench_tpch_smoke.py::test_tpch_bench_smoke":
        "the TPC-H bench's smoke run (28 s); TPC-H agrees with DuckDB in test_sql_layer.py",
    "tests/test_bench_tpcds_latency_smoke.py::test_tpcds_latency_smoke":
        "the TPC-DS latency bench's smoke run (17 s); its workers run in the TPC-H "
        "bench's smoke run, TPC-DS equal to DuckDB by bench/tpcds_accept.py",
    "tests/test_bench_crossover_smoke.py::test_quick_run":
        "the crossover bench (20 s); the same engines in test_bench_smoke.py",
    "tests/test_bench_tpch_runners_smoke.py::test_tpch_runners_all_smoke":
        "every query on every runner, small (14 s); test_sql_runners.py's slice",
    "tests/test_kafka_runners.py::test_kill_and_restart_writes_every_epoch_once[spark]":
        "three kills of a Spark job over Kafka (169 s); Flink's cell, test_tpch_faults.py",
    "tests/test_kafka_runners.py::test_runner_on_kafka_matches_local_file_run[spark]":
        "Spark over Kafka (82 s); the executor-writes cell at P = 2 runs Spark over Kafka",
    "tests/test_kafka_runners.py::test_unbounded_run_stops_cleanly_on_sigterm":
        "a stop of an unbounded Kafka job (30-71 s each); test_fault_matrix.py's Flink "
        "stop, test_kafka_local.py's stops",
    "tests/test_kafka_runners.py::"
    "test_spark_writes_kafka_deltas_from_an_executor_not_through_the_driver[1]":
        "P = 1 (33 s); the P = 2 cell",
    "tests/test_flink_runner.py::test_a_job_runs_on_a_standalone_cluster":
        "a standalone Flink cluster (56 s); the mini-cluster runs the same job",
    "tests/test_flink_runner.py::test_venv_script_run_by_path_without_the_venv_on_path":
        "the venv's script by path (21 s); .ci/extras_check.sh runs each extra's script",
    "tests/test_flink_runner.py::test_the_phase_log_has_a_line_per_epoch_with_its_rows":
        "the phase log (19 s), a bench aid",
    "tests/test_flink_runner.py::test_a_growing_directory_is_followed_until_sigterm":
        "a followed directory on Flink (20 s); the local runner's in test_cli.py",
    "tests/test_native.py::test_native_matches_interpreted[path]":
        "compiled against interpreted on random streams (70-110 s each); the star family "
        "and the TPC-H queries below",
    "tests/test_native.py::test_native_matches_interpreted[comb]": "as [path]",
    "tests/test_native.py::test_native_matches_interpreted[snowflake]": "as [path]",
    "tests/test_native.py::test_tpch_queries_compile_and_agree[q05]":
        "a TPC-H query compiled (15-18 s each); q01 and q12",
    "tests/test_native.py::test_tpch_queries_compile_and_agree[q06]": "as [q05]",
    # Each runner runs each kind of plan (CROWN, IVM-eps, view trees) in the slice:
    # Spark hop3_filter, triangle_count, view_trees_hop2; Flink hop4_distinct, star_count,
    # triangle_listing (25-85 s a cell).
    **{f"tests/test_runners.py::test_runner_matches_local_reference[{name}-{runner}]":
       "another query of the same kind on this runner (the slice: one per kind per runner)"
       for name, runner in [("endpoints_sum", "spark"), ("endpoints_sum", "flink"),
                            ("hop3_filter", "flink"), ("hop4_distinct", "spark"),
                            ("star_count", "spark"), ("triangle_count", "flink"),
                            ("triangle_listing", "spark"), ("triangle_pairs", "spark"),
                            ("triangle_pairs", "flink"), ("view_trees_hop2", "flink")]},
    "tests/test_runner_snapshots.py::test_snapshots_and_deltas_equal_the_local_runners"
    "[spark-1]": "Spark at P = 2 and Flink at P = 1 (90-100 s a Spark cell)",
    "tests/test_runner_snapshots.py::test_snapshots_and_deltas_equal_the_local_runners"
    "[flink-2]": "as [spark-1]",
    "tests/test_spark_datagen.py::test_edge_list_filter_and_fifo_window":
        "a second `generate` mode on Spark (60 s: a JVM each); the slice: the Spark "
        "stream equal to the Python one",
    "tests/test_spark_datagen.py::test_social_tables_stream_is_valid_and_windowed":
        "as test_edge_list_filter_and_fifo_window",
    # Spark's JVM is the slowest to start (30-60 s a job on 2 cores): the slice keeps P = 2,
    # a SIGKILL mid-output and a restart, a worker's failure in one line, stdout's bytes.
    "tests/test_spark_runner.py::test_spark_deltas_equal_local_at_every_parallelism[1]":
        "P = 2 (and P = 1 in test_runners.py's Spark cells)",
    "tests/test_spark_runner.py::test_spark_deltas_equal_local_at_every_parallelism[4]":
        "P = 2",
    "tests/test_spark_runner.py::test_spark_job_on_a_standalone_cluster_equals_local":
        "a standalone Spark cluster (a master and a worker: 100-220 s); local mode runs "
        "the same job",
    "tests/test_spark_runner.py::test_spark_stdout_without_rows_is_the_local_runners_bytes":
        "stdout with rows, test_spark_stdout_is_the_local_runners_bytes",
    "tests/test_spark_runner.py::test_verbose_shows_the_trace_and_still_ends_in_the_one_line":
        "the one line without --verbose, test_a_worker_that_cannot_import_fails_in_one_line_"
        "naming_the_cause",
    "tests/test_runners.py::test_spark_restart_from_checkpoint_gives_uninterrupted_output":
        "Spark killed mid-output and restarted, test_spark_runner.py (120-250 s a run)",
    "tests/test_tpch_faults.py::test_tpch_killed_once_and_restarted_writes_every_epoch_once"
    "[spark]": "TPC-H over Kafka killed on Spark (minutes); the local cell, the Spark "
               "restart in test_spark_runner.py, Flink's Kafka kill in test_kafka_runners.py",
    "tests/test_tpch_faults.py::test_tpch_killed_once_and_restarted_writes_every_epoch_once"
    "[flink]": "as [spark]",
    "tests/test_spark_runner.py::test_spark_kill_mid_output_of_a_40k_window_run_then_restart":
        "a Spark job killed mid-output (120-230 s); the fault matrix's Spark rows "
        "(bench/fault_matrix.py, docs/faults.md), the Spark source's restart of its "
        "batch in test_spark_runner.py's partition store tests",
    "tests/test_spark_runner.py::test_spark_stdout_is_the_local_runners_bytes":
        ".ci/extras_check.sh: the [spark] extra alone, its runner's stdout equal to the "
        "local runner's",
    "tests/test_runner_snapshots.py::test_snapshots_and_deltas_equal_the_local_runners"
    "[spark-2]": "Spark's snapshots in test_sql_runners.py's Q18 cell; Flink at P = 1 here",
    "tests/test_sql_runners.py::test_min_max_and_distinct_aggregates_on_runners[spark]":
        "the Flink cell; MIN/MAX and DISTINCT are the shared operators' on both",
    "tests/test_runners.py::test_flink_restart_from_checkpoint_gives_uninterrupted_output":
        "Flink restarted from its checkpoint after SIGTERM (test_fault_matrix.py) and after "
        "SIGKILL over Kafka (test_kafka_runners.py)",
    # Change streams on Spark and Flink: the slice runs each runner over Debezium topics
    # (key-only and full before-images, transactions; Spark writing Debezium events) and
    # Flink killed mid-stream and restarted (15-40 s each).
    "tests/test_change_stream_runners.py::test_runner_gives_the_local_runners_deltas"
    "[spark-upsert-json]": "upsert topics (36 s): the same reader and upsert state as the "
                           "Debezium cells; upsert topics through the reader without a JVM, "
                           "test_reader_gives_the_local_epochs_and_replays_any_batch",
    "tests/test_change_stream_runners.py::test_runner_gives_the_local_runners_deltas"
    "[flink-upsert-json]": "as [spark-upsert-json] (15 s)",
    "tests/test_change_stream_runners.py::"
    "test_killed_mid_stream_and_run_again_loses_and_repeats_nothing[spark]":
        "Spark killed mid-stream (95 s); the Flink cell, and the Spark source's restore "
        "and replay of a batch without a JVM (test_reader_gives_the_local_epochs_and_"
        "replays_any_batch)",
    "tests/test_change_stream_parts.py::"
    "test_runner_killed_inside_a_long_transaction_loses_and_repeats_nothing[flink]":
        "Flink killed inside a transaction longer than its reads (30 s); the Spark cell, "
        "the reader's restarts inside an epoch without a JVM (test_an_epoch_longer_than_a_"
        "read_goes_in_parts: Flink's reader is Spark's), Flink over Debezium topics in "
        "test_change_stream_runners.py",
    "tests/test_change_streams_tpch.py::test_tpch_debezium_stream_on_spark_and_flink"
    "[flink-key]": "TPC-H Q9 as Debezium events, key-only before-images, on Flink (30 s); "
                   "the [flink-full] cell (Flink reading TPC-H's events and writing "
                   "Debezium events), the local runner's key-only TPC-H cell and "
                   "test_change_stream_runners.py's key-only Spark and Flink cells",
    "tests/test_change_streams_tpch.py::test_tpch_debezium_stream_on_spark_and_flink"
    "[spark-full]": "the [flink-full] cell on Spark (90-100 s); that cell, and Spark "
                    "writing Debezium events in test_change_stream_runners.py's "
                    "[spark-debezium-json] cell",
    "tests/test_change_streams_tpch.py::test_tpch_debezium_stream_on_spark_and_flink"
    "[spark-key]": "as [spark-full]",
    "tests/test_change_stream_runners.py::"
    "test_flink_stopped_names_the_last_epoch_of_its_debezium_output":
        "Flink's stop line over Debezium output (10 s); the last epoch it reads from a "
        "Debezium topic in test_change_streams.py's read-back test, Flink's SIGTERM stop "
        "in test_fault_matrix.py",
    "tests/test_validator.py::test_delete_check_compiled[comb]":
        "the compiled delete check on the star and snowflake families (25-55 s a family)",
    "tests/test_validator.py::test_delete_check_compiled[path]": "as [comb]",
}


def _beyond_the_slice(nodeid: str) -> str | None:
    """Why ``nodeid`` is left out of the default slice, or None when it runs."""
    why = BEYOND_THE_SLICE.get(nodeid)
    if why is None and "[" in nodeid:
        why = BEYOND_THE_SLICE.get(nodeid.split("[", 1)[0])
    return why


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "matrix: a cell beyond the default slice (a runner-matrix cell, a "
                   "slow test's second runner, a bench's smoke run): runs with "
                   "IVMFLOW_FULL_MATRIX=1, bench/runner_matrix.sh")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the Kafka broker is an ``integration`` test; the tests in
    :data:`BEYOND_THE_SLICE` are ``matrix`` tests; ``matrix`` tests are skipped, saying
    how to run them, unless ``IVMFLOW_FULL_MATRIX=1``. (First, so that ``-m matrix``
    selects them.)"""
    skip = pytest.mark.skip(reason="beyond the default slice (tests/conftest.py): "
                                   "IVMFLOW_FULL_MATRIX=1 (bench/runner_matrix.sh) runs it")
    # (a test renamed must be renamed here: a name in a collected module that matches
    # nothing is an error, not a test silently back in, or out of, the slice)
    modules = {item.nodeid.split("::", 1)[0]: getattr(item, "module", None)
               for item in items}
    stale = sorted(name for name in BEYOND_THE_SLICE
                   if modules.get(path := name.split("::", 1)[0]) is not None
                   and not hasattr(modules[path], name[len(path) + 2:].split("[", 1)[0]))
    if stale:
        msg = f"tests/conftest.py BEYOND_THE_SLICE names tests that do not exist: {stale}"
        raise pytest.UsageError(msg)
    for item in items:
        if _KAFKA_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        if _beyond_the_slice(item.nodeid) is not None:
            item.add_marker(pytest.mark.matrix)
        if not FULL_MATRIX and item.get_closest_marker("matrix") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[kb.KafkaBroker]:
    """The session's broker (``.bootstrap``, ``.mode``: container:docker|podman, process).

    Skips only when ``noida-db`` or ``kafka-python`` is not installed at all; any other
    failure to start a broker fails the tests with the reasons for each path.
    """
    pytest.importorskip("kafka", reason="kafka-python is not installed")
    if kb.noida_version() is None:
        pytest.skip("noida-db is not installed (pip install -e .[dev])")
    try:
        broker, stop = kb.launch_broker()
    except Exception as e:
        pytest.fail(f"no Kafka broker could be started: {e}", pytrace=False)
    _KAFKA_STARTED.append(broker)
    try:
        yield broker
    finally:
        stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: kb.KafkaBroker) -> str:
    """``"127.0.0.1:PORT"`` of the session's Kafka broker."""
    return kafka_broker.bootstrap


# --- Workers (pytest-xdist, pyproject's addopts: -n auto) -------------------------------
# Each worker is a process of its own: its own broker (a free port, a temporary data
# directory), its own JVMs (Spark binds no fixed port here, its UI is off; Flink's
# mini-cluster picks free ports), its own base temporary directory (and so the native
# build cache under it). Brokers started in workers are reported by the controller.


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most 4 (each may hold a broker and a JVM)."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a worker: hand the brokers it started to the controller's summary."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["kafka_brokers"] = [(b.bootstrap, b.mode, list(b.notes), b.start_seconds)
                                for b in _KAFKA_STARTED]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """In the controller: the brokers a worker started (:func:`pytest_sessionfinish`)."""
    for bootstrap, mode, notes, seconds in getattr(node, "workeroutput", {}).get(
            "kafka_brokers", ()):
        _KAFKA_STARTED.append(kb.KafkaBroker(bootstrap, mode, notes, seconds))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which way each Kafka broker ran (container via docker/podman, or process)."""
    for b in _KAFKA_STARTED:
        terminalreporter.write_line(
            f"kafka broker: {b.mode} at {b.bootstrap}, started in {b.start_seconds:.2f} s"
        )
        for note in b.notes:
            terminalreporter.write_line(f"  kafka broker note: {note}")


# --- TPC-H: one generated SF 0.01 stream per test session (see tests/tpch_oracle.py) ----


@pytest.fixture(scope="session")
def tpch_sf001(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``ivmflow generate tpch --sf 0.01 --refresh-pairs 2 --seed 0``'s directory
    (schema.sql, updates.csv, queries/qNN.sql, manifest.json), made once a session;
    skips when the ``tpch`` extra is not installed."""
    import tpch_oracle

    return tpch_oracle.generate(tmp_path_factory.mktemp("tpch_sf001"), sf=0.01,
                                refresh_pairs=2, seed=0)
