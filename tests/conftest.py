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


# --- Kafka: one real broker per test session (see tests/kafka_broker.py) ---------------

from collections.abc import Iterator  # noqa: E402

import kafka_broker as kb  # noqa: E402
import pytest  # noqa: E402

_KAFKA_FIXTURES = {"kafka_broker", "kafka_bootstrap"}
_KAFKA_STARTED: list[kb.KafkaBroker] = []


FULL_MATRIX = os.environ.get("IVMFLOW_FULL_MATRIX") == "1"
"""Run every cell of the runner matrices (``bench/runner_matrix.sh``); by default the
README's test command (and CI) runs a representative slice: each runner, each kind of
stage, P = 1 and 2, but not every query on every runner at every parallelism (each cell
starts a JVM: 20-50 s)."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "matrix: a runner-matrix cell beyond the default slice (runs with "
                   "IVMFLOW_FULL_MATRIX=1, bench/runner_matrix.sh)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the Kafka broker is an ``integration`` test; ``matrix`` cells
    are skipped, saying how to run them, unless ``IVMFLOW_FULL_MATRIX=1``."""
    skip = pytest.mark.skip(reason="runner-matrix cell beyond the default slice: "
                                   "IVMFLOW_FULL_MATRIX=1 (bench/runner_matrix.sh) runs it")
    for item in items:
        if _KAFKA_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which way the Kafka broker ran (container via docker/podman, or process)."""
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
