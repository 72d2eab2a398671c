"""A slice of the fault matrix (``bench/fault_matrix.py``, issue 41 item 2): a run
stopped at a fault point (:mod:`core.faults`) by SIGKILL, SIGTERM or SIGINT, then the
same command again, writes exactly the uninterrupted run's deltas, record for record.

* The local runner over a file, once per signal, each at another point: SIGKILL while
  an epoch's rows are in the delta file but not its commit record, SIGTERM in the middle
  of an epoch's input, SIGINT between the sink's commit and the next epoch. The stopped
  run exits 137 / 143 / 130, and ``--resume`` completes the file.
* Flink over a file, SIGTERM while an epoch's rows are being written (one JVM runner
  and one signal: the whole matrix is the script's): that epoch is committed whole, the
  job is cancelled, the run exits 143, and the same command goes on from the
  checkpoint.

Each row of the matrix is checked the same way: the fault was delivered (``kills``), no
row lost, none duplicated.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import bench.fault_matrix as fm  # noqa: E402 - (bench/ from the checkout)


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> fm.Workload:
    """6000 updates in some 180 epochs, no topic."""
    return fm.Workload.make(tmp_path_factory.mktemp("fault_matrix"))


def _check(row: dict[str, object], first_exit: int) -> None:
    assert row["exit"] == first_exit, row
    assert fm.passed(row), row
    assert (row["lost"], row["duplicated"]) == (0, 0), row


def test_the_workload_and_its_fault_points(workload: fm.Workload) -> None:
    updates = [r for r in workload.records if isinstance(r, fm.Update)]
    assert len(updates) == workload.updates_n == 6000
    assert len(workload.expected) >= 100, "many epochs with rows"
    point, n = workload.fault("read").split("@")
    assert point == "read" and 1500 <= int(n) <= 1800, n
    # read@N stops inside an epoch: updates before and after the N-th in its epoch.
    k, epoch = 0, []
    for r in workload.records:
        if not isinstance(r, fm.Update):
            if int(n) in epoch:
                break
            epoch = []
            continue
        k += 1
        epoch.append(k)
    assert epoch[0] < int(n) < epoch[-1], epoch
    assert fm.compare({1: fm.Counter({(1, "a"): 2})}, {1: fm.Counter({(1, "a"): 1}),
                                                       2: fm.Counter({(-1, "b"): 1})}) == (1, 1)


@pytest.mark.parametrize(("signal", "point", "exit_code"), [
    ("KILL", "sink.write", -9), ("TERM", "read", 143), ("INT", "sink.commit", 130)])
def test_local_file_run_stopped_then_resumed(workload: fm.Workload, tmp_path: Path,
                                             signal: str, point: str, exit_code: int) -> None:
    cell = fm.Cell("local", "file", signal, workload.fault(point))
    _check(fm.run_cell(workload, cell, tmp_path), exit_code)


@pytest.mark.integration
def test_flink_file_run_stopped_by_sigterm_mid_output(workload: fm.Workload,
                                                     tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    point = workload.fault("sink.write")
    cell = fm.Cell("flink", "file", "TERM", point)
    row = fm.run_cell(workload, cell, tmp_path, batch_lines=250)
    _check(row, 143)
    # The epoch being written when the signal came was committed whole; the job was
    # cancelled before the end; the restart went on from the checkpoint.
    k = int(point.split("@")[1])
    assert k <= row["at_epoch"] < workload.last_epoch, row
