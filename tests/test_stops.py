"""Stops at whole epochs and exact resumes of file runs (local runner), with the
deterministic fault points of :mod:`core.faults`: SIGINT, SIGTERM and SIGKILL at a
named point (mid-epoch, while the sink writes, between the commit steps), then the same
command with ``--resume``: the delta file must equal an uninterrupted run's byte for
byte. A file that grows after a run, and one that changed, are resumed exactly or
refused. The Spark and Flink rows of the fault matrix are in bench/fault_matrix.py.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from dataflow.runners.run import RunOptions, run

QUERY = """CREATE TABLE follows(src INT, dst INT);
SELECT f1.src AS a, f1.dst AS b, f2.dst AS c
FROM follows f1 JOIN follows f2 ON f1.dst = f2.src;
"""


def _stream(n: int, seed: int, epoch_every: int = 37, end_marker: bool = True) -> str:
    """A random edge stream with deletes of live edges, a ``*`` every ``epoch_every``
    updates."""
    rng = random.Random(seed)
    live: list[tuple[int, int]] = []
    lines = []
    for i in range(1, n + 1):
        if live and rng.random() < 0.3:
            edge = live.pop(rng.randrange(len(live)))
            lines.append(f"-,follows,{edge[0]},{edge[1]}")
        else:
            edge = (rng.randrange(25), rng.randrange(25))
            live.append(edge)
            lines.append(f"+,follows,{edge[0]},{edge[1]}")
        if i % epoch_every == 0 and (end_marker or i < n):
            lines.append("*")
    return "\n".join(lines) + "\n"


def _cli(*args: object, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IVMFLOW_NATIVE": "0"}
    env.pop("IVMFLOW_FAULT_TARGET", None)
    if fault is not None:
        env["IVMFLOW_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-m", "dataflow.cli", "run", *map(str, args), "-q"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )


def _reference(query: Path, updates: Path, out: Path) -> bytes:
    run(RunOptions(str(query), str(updates), deltas=str(out), native=False, fsync=False))
    return out.read_bytes()


def _committed(path: Path) -> bytes:
    """The part of a delta file its commit record vouches for."""
    record = json.loads(Path(f"{path}.commit").read_text())
    return path.read_bytes()[: record["bytes"]]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, bytes]:
    q = tmp_path / "q.sql"
    q.write_text(QUERY)
    u = tmp_path / "u.csv"
    u.write_text(_stream(1200, seed=3))
    return q, u, _reference(q, u, tmp_path / "want.csv")


STOPS = [
    ("read@300:INT", 130), ("read@700:TERM", 143), ("read@500:KILL", -9),
    ("epoch@9:KILL", -9), ("sink.write@5:KILL", -9), ("sink.commit@12:KILL", -9),
    ("sink.write@7:TERM", 143), ("epoch@4:INT", 130),
]


@pytest.mark.parametrize(("fault", "code"), STOPS, ids=[f for f, _ in STOPS])
def test_a_stopped_file_run_resumes_to_the_uninterrupted_output(
    files: tuple[Path, Path, bytes], tmp_path: Path, fault: str, code: int
) -> None:
    q, u, want = files
    out = tmp_path / "out.csv"
    stopped = _cli(q, "--updates", u, "--deltas", out, fault=fault)
    assert stopped.returncode == code, stopped.stderr
    if code > 0:  # a polite stop: one line naming the last whole epoch, nothing cut short
        assert "before the end of" in stopped.stderr and "--resume" in stopped.stderr
        assert out.read_bytes() == _committed(out)
    got = _committed(out)
    assert want.startswith(got)  # whole epochs only, the same as the uninterrupted run
    assert len(got) < len(want), "the fault should land before the end"
    resumed = _cli(q, "--updates", u, "--deltas", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == want


def test_three_stops_then_resume_lose_and_double_nothing(
    files: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    q, u, want = files
    out = tmp_path / "out.csv"
    first = _cli(q, "--updates", u, "--deltas", out, fault="read@250:INT")
    assert first.returncode == 130, first.stderr
    for fault in ("read@500:INT", "read@650:TERM"):  # counted from each run's start
        again = _cli(q, "--updates", u, "--deltas", out, "--resume", fault=fault)
        assert again.returncode in (130, 143), again.stderr
        assert want.startswith(out.read_bytes())
    last = _cli(q, "--updates", u, "--deltas", out, "--resume")
    assert last.returncode == 0, last.stderr
    assert out.read_bytes() == want


def test_a_grown_file_resumes_after_the_epoch_that_ended_at_its_old_end(
    tmp_path: Path,
) -> None:
    """The first run ends an epoch at the end of the file (no closing ``*``); the file
    then grows: that epoch stays as committed, the new records follow it, exactly as
    if a ``*`` stood at the old end."""
    q = tmp_path / "q.sql"
    q.write_text(QUERY)
    text = _stream(900, seed=5, end_marker=False)
    lines = text.splitlines(keepends=True)
    old, new = "".join(lines[:400]), "".join(lines[400:])
    assert not old.rstrip().endswith("*")
    u = tmp_path / "u.csv"
    u.write_text(old)
    out = tmp_path / "out.csv"
    assert _cli(q, "--updates", u, "--deltas", out).returncode == 0
    with u.open("a") as f:
        f.write(new)
    resumed = _cli(q, "--updates", u, "--deltas", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    marked = tmp_path / "marked.csv"
    marked.write_text(old + "*\n" + new)
    assert out.read_bytes() == _reference(q, marked, tmp_path / "want.csv")
    # ...and an uninterrupted run over the grown file does differ there: the test bites.
    assert out.read_bytes() != _reference(q, u, tmp_path / "plain.csv")


@pytest.mark.parametrize("change", ["edit", "truncate", "epoch-size"])
def test_a_resume_over_another_input_is_refused_with_one_line(
    files: tuple[Path, Path, bytes], tmp_path: Path, change: str
) -> None:
    q, u, want = files
    out = tmp_path / "out.csv"
    assert _cli(q, "--updates", u, "--deltas", out, fault="read@900:INT").returncode == 130
    before = out.read_bytes()
    extra: tuple[str, ...] = ()
    text = u.read_text()
    if change == "edit":  # same length, one value changed early on
        first = text.index("follows,") + len("follows,")
        digit = "1" if text[first] != "1" else "2"
        u.write_text(text[:first] + digit + text[first + 1:])
    elif change == "truncate":
        u.write_text(text[: len(text) // 4])
    else:
        extra = ("--epoch", "50")
    refused = _cli(q, "--updates", u, "--deltas", out, "--resume", *extra)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ivmflow: error: cannot resume"), lines
    assert "Traceback" not in refused.stderr
    assert out.read_bytes() == before  # nothing written


def test_a_stop_request_drops_the_open_epoch_in_drive() -> None:
    from core.records import EPOCH_END, Update
    from dataflow.circuit.drive import drive

    class Counting:
        pending_updates = 0

        def __init__(self) -> None:
            self.n = 0
            self.open = 0

        def apply(self, u: Update) -> None:
            self.open += 1

        def end_epoch(self):  # type: ignore[no-untyped-def]
            from core.records import EpochDelta

            self.n += 1
            rows, self.open = ((self.open, (self.n,)),), 0
            return EpochDelta(self.n, rows)

        def snapshot(self) -> list:  # type: ignore[type-arg]
            return []

    records = [Update("+", "R", (1,)), EPOCH_END, Update("+", "R", (2,)),
               Update("+", "R", (3,))]
    seen: list[int] = []
    asked = iter([False, False, False, True])
    got: list = []  # type: ignore[type-arg]
    stats = drive(Counting(), records, on_delta=got.append,
                  should_stop=lambda: seen.append(1) or next(asked))
    assert stats.stopped and stats.epochs == 1 and [d.epoch for d in got] == [1]


def test_max_state_stops_after_a_whole_epoch_and_resume_finishes(
    files: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    """``--max-state`` below what the process holds stops the run at the end of its
    first epoch (every later epoch would pass it too), exit 1, with the size, the epoch
    and what to do; that epoch is committed, nothing after it; ``--resume`` without the
    limit writes the rest: the uninterrupted run's bytes."""
    q, u, want = files
    out = tmp_path / "out.csv"
    stopped = _cli(q, "--updates", u, "--deltas", out, "--max-state", "1M")
    assert stopped.returncode == 1
    line = stopped.stderr.strip().splitlines()[-1]
    assert "passed --max-state 1.0 MiB at the end of epoch 1: the process holds" in line
    assert "--trust-deletes" in line and "--resume" in line and "state entries" in line
    assert out.read_bytes() == _committed(out) and want.startswith(_committed(out))
    assert 0 < len(_committed(out)) < len(want)
    resumed = _cli(q, "--updates", u, "--deltas", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == want


def test_max_state_stops_inside_a_big_epoch_before_it_is_written(tmp_path: Path) -> None:
    """A load is one epoch of millions of updates: ``--max-state`` is checked inside it
    too (every ``CHECK_EVERY`` updates), so the run stops there, exit 1, with where
    and what to do, before the kernel's out-of-memory killer would; nothing of that
    epoch is written, and ``--resume`` writes it all: the uninterrupted run's bytes."""
    from core.memory import CHECK_EVERY

    q = tmp_path / "q.sql"
    q.write_text(QUERY)
    u = tmp_path / "u.csv"
    big = _stream(CHECK_EVERY + 500, seed=6, epoch_every=CHECK_EVERY + 500)
    u.write_text(big + _stream(200, seed=7))
    want = _reference(q, u, tmp_path / "want.csv")
    out = tmp_path / "out.csv"
    stopped = _cli(q, "--updates", u, "--deltas", out, "--max-state", "1M")
    assert stopped.returncode == 1, stopped.stderr
    line = stopped.stderr.strip().splitlines()[-1]
    assert (f"passed --max-state 1.0 MiB inside epoch 1, after {CHECK_EVERY:,} of its "
            "updates: the process holds") in line
    assert "No epoch is written, nothing of epoch 1; --resume" in line
    assert out.read_text().splitlines() == ["epoch,mult,a,b,c"]  # (its header only)
    resumed = _cli(q, "--updates", u, "--deltas", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == want


def test_state_limit_inside_a_later_epoch_names_the_committed_ones() -> None:
    """The message of a stop inside epoch 5: epochs 1-4 are committed, nothing of 5."""
    from core.memory import StateLimit, StateLimitError

    limit = StateLimit(100, entries=lambda: 12345, measure=lambda: 200)
    with pytest.raises(StateLimitError) as err:
        limit.check_open(5, 131072)
    assert ("inside epoch 5, after 131,072 of its updates: the process holds 200 B "
            "resident, 12,345 state entries. Epochs 1-4 are written and committed, "
            "nothing of epoch 5; --resume goes on from there") in str(err.value)
    StateLimit(300, measure=lambda: 200).check_open(5, 1)  # under it: nothing


@pytest.mark.parametrize(("args", "error"), [
    (["--max-state", "lots"], "a size such as 2G, 512M"),
    (["--max-state", "2G", "--runner", "flink"], "--max-state is for the local runner"),
])
def test_max_state_refuses_what_it_cannot_do(
    files: tuple[Path, Path, bytes], args: list[str], error: str
) -> None:
    q, u, _want = files
    done = _cli(q, "--updates", u, *args)
    assert done.returncode == 2 and error in done.stderr
