"""The ``ivmflow`` command line and the local runner's ``drive`` loop.

Every CLI test runs twice: against a tiny naive 2-hop engine injected as
``dataflow.api`` (tests the CLI mechanics on their own) and against the real
``dataflow.api`` (skipped while it does not exist).  Bad-input tests cover every error
class of docs/formats.md: malformed op, unknown relation, wrong arity, unparsable value,
non-positive multiplicity and invalid delete.
"""

from __future__ import annotations

import csv
import io
import os
import re
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.files import CollectingSink, read_updates_from_lines
from connectors.generators import fifo_window_stream, skewed_graph, write_update_csv
from core.errors import InputError
from core.records import EPOCH_END, EpochDelta, EpochEnd, Record, Update, format_update
from core.schema import Column, Relation, Row, Schema
from dataflow.circuit.drive import DriveStats, drive
from dataflow.cli import main
from dataflow.runners.run import Progress

REPO = Path(__file__).resolve().parent.parent
TWO_HOP = (
    "CREATE TABLE G(src INT, dst INT);\n"
    "SELECT G1.src, G2.dst FROM G G1, G G2 WHERE G1.dst = G2.src;\n"
)
UNSUPPORTED = "CREATE TABLE G(src INT, dst INT);\nSELECT src FROM G WHERE src LIKE 'a%';\n"
GSCHEMA = Schema({"G": Relation("G", (Column("src", "INT"), Column("dst", "INT")))})

Bag = Counter  # row -> multiplicity


def two_hop(g: Counter[Row]) -> Counter[Row]:
    """The oracle: SELECT G1.src, G2.dst FROM G G1, G G2 WHERE G1.dst = G2.src (bags)."""
    by_src: dict[object, list[tuple[Row, int]]] = defaultdict(list)
    for (s, d), m in g.items():
        by_src[s].append(((s, d), m))
    out: Counter[Row] = Counter()
    for (a, b), m1 in g.items():
        for (_, d), m2 in by_src.get(b, ()):
            out[(a, d)] += m1 * m2
    return out


# ---------------------------------------------------------------------------------------
# A naive engine with the dataflow.api interface (2-hop query only)


class FakeView:
    def __init__(self) -> None:
        self.g: Counter[Row] = Counter()
        self.prev: Counter[Row] = Counter()
        self.epoch = 0
        self.pending_updates = 0

    def apply(self, u: Update) -> None:
        have = self.g[u.row]
        if u.op == "-" and have < u.mult:
            raise InputError(u.source, format_update(u),
                             f"a delete of at most {have} copies of {u.row} in {u.relation}",
                             f"a delete of {u.mult}")
        self.g[u.row] += u.signed_mult
        if not self.g[u.row]:
            del self.g[u.row]
        self.pending_updates += 1

    def end_epoch(self) -> EpochDelta:
        self.epoch += 1
        now = two_hop(self.g)
        rows = {r: now[r] - self.prev[r] for r in now.keys() | self.prev.keys()}
        self.prev = now
        n, self.pending_updates = self.pending_updates, 0
        return EpochDelta(self.epoch, tuple(sorted((m, r) for r, m in rows.items() if m)), n)

    def snapshot(self) -> list[tuple[int, Row]]:
        return sorted((m, r) for r, m in two_hop(self.g).items())


@pytest.fixture
def engine() -> str:
    """The CLI tests run the real engine (this fixture names it in test ids)."""
    return "real"


# ---------------------------------------------------------------------------------------
# Helpers


class Run:
    def __init__(self, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.tmp = tmp
        self.capsys = capsys
        self.query = tmp / "q.sql"
        self.query.write_text(TWO_HOP)
        self.updates = tmp / "u.csv"
        self.deltas = tmp / "d.csv"
        self.out = self.err = ""

    def __call__(self, *args: str | Path, updates: str | None = None) -> int:
        if updates is not None:
            self.updates.write_text(updates)
        self.capsys.readouterr()
        code = main([str(a) for a in args])
        self.out, self.err = self.capsys.readouterr()
        assert "Traceback" not in self.err
        return code

    def run(self, *extra: str | Path, updates: str | None = None) -> int:
        return self("run", self.query, "--updates", self.updates, *extra, updates=updates)


@pytest.fixture
def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> Run:
    return Run(tmp_path, capsys)


def read_csv_deltas(text: str) -> dict[int, Counter[Row]]:
    lines = text.splitlines()
    assert re.fullmatch(r"(epoch|snapshot),mult,\w+,\w+", lines[0]), lines[0]
    out: dict[int, Counter[Row]] = defaultdict(Counter)
    for line in lines[1:]:
        k, m, a, b = (int(x) for x in line.split(","))
        assert m != 0
        out[k][(a, b)] += m
    return dict(out)


def expected_by_markers(text: str) -> dict[int, Counter[Row]]:
    """Deltas per epoch for a stream cut only at '*' markers (and its end)."""
    g: Counter[Row] = Counter()
    prev: Counter[Row] = Counter()
    out: dict[int, Counter[Row]] = {}
    epoch, pending = 0, 0

    def close() -> None:
        nonlocal epoch, prev, pending
        epoch += 1
        now = two_hop(g)
        d = Counter({r: now[r] - prev[r] for r in now.keys() | prev.keys()})
        d = Counter({r: m for r, m in d.items() if m})
        if d:
            out[epoch] = d
        prev, pending = now, 0

    for rec in read_updates_from_lines(text.splitlines(), GSCHEMA, "x"):
        if isinstance(rec, EpochEnd):
            close()
        else:
            g[rec.row] += rec.signed_mult
            pending += 1
    if pending:
        close()
    return out


STREAM = (
    "+,G,1,2\n"   # 1
    "+,G,2,3\n"   # 2
    "*\n"         # 3  epoch 1: +(1,3)
    "+,G,2,4\n"   # 4
    "-,G,1,2\n"   # 5
    "*\n"         # 6  epoch 2: -(1,3)   ((1,4) appears and goes within the epoch)
    "*\n"         # 7  epoch 3: empty
    "# the last epoch is closed by the end of the file\n"
    "+2,G,3,1\n"  # 9  epoch 4: +2 (2,1)
)
STREAM_DELTAS = {1: Counter({(1, 3): 1}), 2: Counter({(1, 3): -1}), 4: Counter({(2, 1): 2})}


# ---------------------------------------------------------------------------------------
# Running


def test_run_writes_one_block_per_epoch(run: Run) -> None:
    assert run.run("--deltas", run.deltas, updates=STREAM) == 0
    assert read_csv_deltas(run.deltas.read_text()) == STREAM_DELTAS
    assert expected_by_markers(STREAM) == STREAM_DELTAS
    assert run.out == ""
    assert re.fullmatch(
        r"ivmflow: 5 updates, 4 epochs, 3 delta rows in \d+\.\ds \(\d+ updates/s\), "
        r"(compiled[^\n]*|interpreted: turned off \(IVMFLOW_NATIVE=0\)), "
        r"delete check: [^\n]+\n", run.err
    ), run.err  # (which hot path ran: tests/conftest.py sets IVMFLOW_NATIVE=0)
    assert "\r" not in run.err  # no progress line when stderr is not a terminal


def test_run_prints_deltas_to_stdout_without_deltas_option(run: Run) -> None:
    assert run.run("--quiet", updates=STREAM) == 0
    assert read_csv_deltas(run.out) == STREAM_DELTAS
    assert run.err == ""


def test_deltas_to_a_device_or_a_pipe_are_a_stream(run: Run, tmp_path: Path) -> None:
    """``--deltas /dev/null`` (or a FIFO, /dev/stdout) runs as to a file but keeps no
    commit record beside it (none in /dev) and is not fsynced; ``--resume`` to it says
    why it cannot."""
    assert run.run("--deltas", "/dev/null", "--snapshots", "/dev/null", updates=STREAM) == 0
    assert not Path("/dev/null.commit").exists()
    fifo = tmp_path / "deltas.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    assert run.run("--deltas", fifo, "--quiet", updates=STREAM) == 0
    out, _ = reader.communicate(timeout=30)
    assert read_csv_deltas(out) == STREAM_DELTAS
    assert not Path(f"{fifo}.commit").exists()
    assert run.run("--deltas", "/dev/null", "--resume", updates=STREAM) == 1
    assert "cannot resume /dev/null: it is not a regular file" in run.err


def test_epoch_size_and_markers(run: Run) -> None:
    text = "+,G,1,2\n+,G,2,3\n+,G,3,4\n"
    assert run.run("--epoch", "1", "-q", updates=text) == 0
    assert read_csv_deltas(run.out) == {2: Counter({(1, 3): 1}), 3: Counter({(2, 4): 1})}
    # --epoch 2 plus a marker: epoch 1 = 2 updates, '*' closes epoch 2 (1 update),
    # '*' closes empty epoch 3, end of stream closes epoch 4
    text = "+,G,1,2\n+,G,2,3\n+,G,3,4\n*\n*\n+,G,4,5\n"
    assert run.run("--epoch", "2", "--deltas", run.deltas, updates=text) == 0
    assert read_csv_deltas(run.deltas.read_text()) == {
        1: Counter({(1, 3): 1}), 2: Counter({(2, 4): 1}), 4: Counter({(3, 5): 1}),
    }
    assert ", 4 epochs," in run.err


def test_snapshots_after_each_marker(run: Run, tmp_path: Path) -> None:
    snaps = tmp_path / "s.csv"
    text = "+,G,1,2\n+,G,2,3\n*\n+,G,3,4\n*\n-,G,2,3\n-,G,3,4\n*\n+,G,1,1\n"
    assert run.run("--deltas", run.deltas, "--snapshots", snaps, updates=text) == 0
    assert read_csv_deltas(snaps.read_text()) == {
        1: Counter({(1, 3): 1}), 2: Counter({(1, 3): 1, (2, 4): 1}),  # 3: empty result
    }
    assert snaps.read_text().startswith("snapshot,mult,")
    assert ", 3 snapshots in" in run.err


def test_long_stream_deltas_add_up_to_the_result(run: Run) -> None:
    stream = list(fifo_window_stream(skewed_graph(400, n_nodes=60, seed=5), 0.3))
    write_update_csv(run.updates, "G", stream)
    assert run.run("--epoch", "37", "--deltas", run.deltas) == 0
    deltas = read_csv_deltas(run.deltas.read_text())
    g: Counter[Row] = Counter()
    acc: Counter[Row] = Counter()
    for k in range(1, (len(stream) + 36) // 37 + 1):
        for op, e in stream[(k - 1) * 37 : k * 37]:
            g[tuple(e)] += 1 if op == "+" else -1
        acc.update(deltas.get(k, Counter()))
        assert +acc == two_hop(+g), k
        assert not -acc


def test_parallelism_and_eps_reach_the_engine(run: Run, engine: str) -> None:
    """--parallelism P runs P partitions and --eps is accepted on any query; the deltas do
    not depend on either."""
    assert run.run("--deltas", run.deltas, "-q", updates=STREAM) == 0
    one = run.deltas.read_text()
    for extra in (("--parallelism", "3"), ("--eps", "0.25"), ("--parallelism", "2", "--eps", "1")):
        run.deltas.unlink()
        assert run.run("--deltas", run.deltas, "-q", *extra, updates=STREAM) == 0
        assert run.deltas.read_text() == one, extra


# ---------------------------------------------------------------------------------------
# Bad input (docs/formats.md)

GOOD_EPOCH = "+,G,1,2\n+,G,2,3\n*\n+,G,3,4\n"  # the bad record goes on line 5
BAD_RECORDS = {
    "malformed op": ("x,G,1,2", ["expected op '+', '-', '+N', '-N' or '*'", "found op 'x'"]),
    "unknown relation": ("+,H,1,2", ["expected a relation the query declares (G)",
                                     "found relation 'H'"]),
    "wrong arity": ("+,G,1", ["expected 2 values for G(src, dst), found 1 value"]),
    "unparsable value": ("+,G,1,abc", ["expected an INT (integer) for column G.dst",
                                       "found 'abc'"]),
    "zero multiplicity": ("+0,G,1,2", ["expected a positive multiplicity",
                                       "found multiplicity 0"]),
    "invalid delete": ("-,G,7,7", ["expected", "found"]),
}


@pytest.mark.parametrize("kind", sorted(BAD_RECORDS))
def test_bad_record_stops_the_run_keeping_completed_epochs(run: Run, kind: str) -> None:
    line, pieces = BAD_RECORDS[kind]
    code = run.run("--deltas", run.deltas, updates=GOOD_EPOCH + line + "\n+,G,4,5\n")
    assert code == 1
    first = run.err.splitlines()[0]
    assert first.startswith(f"ivmflow: error: {run.updates}:5: bad update record"), first
    for piece in pieces:
        assert piece in first
    assert "--on-error skip" in first
    # epoch 1 was committed; the partial epoch 2 (with +,G,3,4) is not in the sink
    assert read_csv_deltas(run.deltas.read_text()) == {1: Counter({(1, 3): 1})}
    assert f"the deltas of epochs 1-1, completed before the error, are in {run.deltas}" in run.err


def test_skip_sends_bad_records_to_the_dead_letter_file(run: Run) -> None:
    bad = [line for line, _ in BAD_RECORDS.values()]
    good = GOOD_EPOCH + "+,G,4,5\n*\n-,G,3,4\n"
    mixed = GOOD_EPOCH + bad[0] + "\n+,G,4,5\n*\n" + "\n".join(bad[1:]) + "\n-,G,3,4\n"
    assert run.run("--deltas", run.deltas, "--on-error", "skip", updates=mixed) == 0
    dead = run.tmp / "d.csv.dead-letter.csv"  # (<deltas>.dead-letter.csv, as --help says)
    lines = dead.read_text().splitlines()
    assert lines[0] == "source,reason,record"
    assert [ln.split(",")[0] for ln in lines[1:]] == [
        f"{run.updates}:{i}" for i in (5, 8, 9, 10, 11, 12)
    ]
    assert all(",expected " in ln or ',"expected ' in ln for ln in lines[1:])
    assert f"ivmflow: skipped 6 bad records; see {dead}" in run.err
    assert read_csv_deltas(run.deltas.read_text()) == expected_by_markers(good)


DECIMAL_QUERY = "CREATE TABLE P(k INT, price DECIMAL(5,2));\nSELECT k, price FROM P;\n"
DECIMAL_STREAM = (
    "+,P,1,1\n"          # 1
    "-,P, 2 ,1.5\n"      # 2  an invalid delete, refused by the view, not the reader
    "+,P,3,oops\n"       # 3  refused by the reader
    "-2,P,1,1.0\n"       # 4  an invalid delete of two copies
    "+,P,4,7.25\n"       # 5
)


@pytest.mark.parametrize("where", ["file", "directory"])
def test_dead_letters_hold_the_lines_as_read(run: Run, where: str) -> None:
    """Every refused record, whether the reader or the view refuses it, is written as
    the line that was read (``1`` stays ``1`` in a DECIMAL(5,2) column, not ``1.00``),
    into ``<deltas>.dead-letter.csv``."""
    run.query.write_text(DECIMAL_QUERY)
    source: Path = run.updates
    if where == "directory":
        source = run.tmp / "in"
        source.mkdir()
        (source / "a.csv").write_text("+,P,9,9.5\n")
        (source / "b.csv").write_text(DECIMAL_STREAM)
    else:
        run.updates.write_text(DECIMAL_STREAM)
    assert run("run", run.query, "--updates", source, "--deltas", run.deltas,
               "--on-error", "skip") == 0
    name = source / "b.csv" if where == "directory" else source
    rows = list(csv.reader(io.StringIO(
        (run.tmp / "d.csv.dead-letter.csv").read_text())))
    assert rows[0] == ["source", "reason", "record"]
    # (in the order they were found: the reader's during the read-ahead, first)
    assert sorted((r[0], r[2]) for r in rows[1:]) == [
        (f"{name}:2", "-,P, 2 ,1.5"), (f"{name}:3", "+,P,3,oops"), (f"{name}:4", "-2,P,1,1.0"),
    ]
    reasons = {r[2]: r[1] for r in rows[1:]}
    assert "a delete of at most 0 copies" in reasons["-,P, 2 ,1.5"]
    assert "oops" in reasons["+,P,3,oops"]
    assert not (run.tmp / "d.dead-letter.csv").exists()


def test_dead_letters_from_stdin_hold_the_lines_as_read(run: Run, tmp_path: Path) -> None:
    run.query.write_text(DECIMAL_QUERY)
    dead = tmp_path / "dead.csv"
    done = subprocess.run(
        [sys.executable, "-m", "dataflow", "run", str(run.query), "--updates", "-",
         "--on-error", "skip", "--dead-letter", str(dead), "-q"],
        input=DECIMAL_STREAM, capture_output=True, text=True, cwd=REPO, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader(io.StringIO(dead.read_text())))
    assert [(r[0], r[2]) for r in rows[1:]] == [
        ("<stdin>:2", "-,P, 2 ,1.5"), ("<stdin>:3", "+,P,3,oops"), ("<stdin>:4", "-2,P,1,1.0"),
    ]


def test_dead_letter_path_is_the_delta_file_name_and_a_suffix(tmp_path: Path) -> None:
    from dataflow.runners.run import RunOptions

    def path(**kw: str) -> str:
        return RunOptions("q.sql", "u.csv", on_error="skip", **kw).dead_letter_path

    assert path(deltas=str(tmp_path / "out.csv")) == f"{tmp_path / 'out.csv'}.dead-letter.csv"
    assert path(deltas="deltas") == "deltas.dead-letter.csv"
    assert path() == "ivmflow.dead-letter.csv"
    assert path(deltas="out.csv", dead_letter="bad.csv") == "bad.csv"


def test_version_is_the_installed_packages(run: Run) -> None:
    from importlib.metadata import version

    assert run("--version") == 0
    assert run.out == f"ivmflow {version('ivmflow')}\n"


def test_skipped_records_do_not_count_towards_epoch_size(run: Run) -> None:
    text = "+,G,1,2\n-,G,9,9\n+,H,1,1\n+,G,2,3\n+,G,3,4\n"
    dead = run.tmp / "bad.csv"
    assert run.run("--epoch", "2", "--on-error", "skip", "--dead-letter", dead, "-q",
                   updates=text) == 0
    assert read_csv_deltas(run.out) == {1: Counter({(1, 3): 1}), 2: Counter({(2, 4): 1})}
    assert len(dead.read_text().splitlines()) == 3
    assert "skipped 2 bad records; see" in run.err  # shown even with --quiet


def test_default_dead_letter_path_with_deltas_on_stdout(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(run.tmp)
    assert run.run("--on-error", "skip", "-q", updates="+,G,1,2\nbad\n") == 0
    assert (run.tmp / "ivmflow.dead-letter.csv").read_text().count("\n") == 2
    assert "skipped 1 bad record; see ivmflow.dead-letter.csv" in run.err


def test_resume_after_a_failed_run(run: Run) -> None:
    good = "+,G,1,2\n+,G,2,3\n*\n+,G,3,4\n*\n+,G,4,5\n*\n+,G,5,6\n"
    broken = good.replace("+,G,4,5", "+,G,4,five")
    assert run.run("--deltas", run.deltas, updates=broken) == 1
    assert sorted(read_csv_deltas(run.deltas.read_text())) == [1, 2]
    with open(run.deltas, "a") as f:  # as if the process had died while appending
        f.write("3,1,3")
    assert run.run("--deltas", run.deltas, "--resume", updates=good) == 0
    resumed = run.deltas.read_text()
    assert run.run("--deltas", run.deltas, updates=good) == 0
    assert resumed == run.deltas.read_text()
    assert read_csv_deltas(resumed) == expected_by_markers(good)


# ---------------------------------------------------------------------------------------
# Exit codes and messages


def test_unsupported_query_fails_before_reading_input(run: Run) -> None:
    run.query.write_text(UNSUPPORTED)
    assert run.run("--deltas", run.deltas, updates="+,G,1,2\n") == 2
    assert run.err.startswith("ivmflow: error: ")
    assert not run.deltas.exists()
    assert run("explain", run.query) == 2


def test_missing_files(run: Run) -> None:
    run.updates.write_text("+,G,1,2\n")
    assert run("run", run.tmp / "nope.sql", "--updates", run.updates) == 1
    assert run.err == f"ivmflow: error: no such file or directory: {run.tmp / 'nope.sql'}\n"
    assert run("run", run.query, "--updates", run.tmp / "nope.csv",
               "--deltas", run.deltas) == 1
    assert run.err == f"ivmflow: error: no such file or directory: {run.tmp / 'nope.csv'}\n"
    assert not run.deltas.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--deltas", "kafka://127.0.0.1:9092"], "expected kafka://host:port/topic"),
        (["--deltas", "kafka://127.0.0.1:9092/d?no.such.option=1"],
         "unknown Kafka client property 'no.such.option'"),
        (["--dead-letter", "x.csv"], "--dead-letter needs --on-error skip"),
    ],
)
def test_usage_errors_exit_2(run: Run, args: list[str], message: str) -> None:
    assert run.run(*args, updates="+,G,1,2\n") == 2
    assert run.err.startswith("ivmflow: error: ") and message in run.err


def test_kafka_option_must_be_key_value(run: Run) -> None:
    assert run("run", run.query, "--updates", "kafka://127.0.0.1:9092/updates",
               "--kafka-option", "security.protocol") == 2
    assert "Kafka option 'security.protocol': expected KEY=VALUE" in run.err


def test_argparse_errors_and_help(run: Run) -> None:
    assert run.run("--epoch", "0") == 2
    assert "expected a positive integer, found '0'" in run.err
    assert run("--help") == 0
    assert "run" in run.out and "explain" in run.out and "generate" in run.out
    assert run() == 2


def test_explain(run: Run) -> None:
    assert run("explain", run.query) == 0
    assert run.out.strip()


def test_console_script_has_no_traceback(tmp_path: Path) -> None:
    pytest.importorskip("dataflow.api")
    (tmp_path / "q.sql").write_text(TWO_HOP)
    (tmp_path / "u.csv").write_text("+,G,1,2\n+,G,1\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow.cli", "run", "q.sql", "--updates", "u.csv"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("ivmflow: error: u.csv:2: bad update record '+,G,1'")
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------
# Progress and signals


def test_progress_line_is_rewritten_in_place() -> None:
    buf = io.StringIO()
    progress = Progress(buf, enabled=True, interval=0.0)
    records: list[Record] = [Update("+", "G", (i, 1000 + i)) for i in range(600)]
    sink = CollectingSink()
    drive(FakeView(), progress.watch(records), epoch_size=100, on_delta=sink.write_epoch,
          stats=progress.stats)
    text = buf.getvalue()
    assert text.count("\r") == 2 and "\n" not in text
    assert "ivmflow: 512 updates read, 5 epochs, 0 delta rows" in text
    progress.clear()
    assert buf.getvalue().endswith("\r")
    assert progress.summary().startswith("ivmflow: 600 updates, 6 epochs, 0 delta rows in ")


def test_progress_line_of_a_file_of_known_size_shows_percent_and_eta(tmp_path: Path) -> None:
    """Like tqdm's bar: the part of the file read, a bar, elapsed<remaining."""
    from dataflow.runners.run import RunOptions, run

    (tmp_path / "q.sql").write_text(TWO_HOP)
    updates = tmp_path / "u.csv"
    updates.write_text("".join(f"+,G,{i % 50},{(i * 7) % 50}\n" for i in range(3000)))
    buf = io.StringIO()
    progress = Progress(buf, enabled=True, interval=0.0)
    run(RunOptions(query=str(tmp_path / "q.sql"), updates=str(updates),
                   deltas=str(tmp_path / "d.csv"), epoch=500), progress)
    lines = [t for t in buf.getvalue().split("\r") if t.strip()]
    assert lines, buf.getvalue()
    shown = re.compile(r"ivmflow: +(\d+)% \|[# ]{20}\| \d+ updates read, .*, "
                       r"\d+:\d\d<(\d+:\d\d|\?)")
    parts = [shown.match(t) for t in lines]
    assert all(parts), lines
    percents = [int(m.group(1)) for m in parts if m]
    assert percents == sorted(percents) and 0 < percents[-1] <= 100, percents
    assert progress.fraction() == 1.0  # the whole file was read


class FakeClock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_rate_counts_from_the_first_record_taken() -> None:
    """The rate is updates applied per second since the runner took its first record:
    not the time before (the query's compile, the hot path's build, the local runner's
    read-ahead), nor a build during the run."""
    clock = FakeClock()
    buf = io.StringIO()
    progress = Progress(buf, enabled=True, interval=0.0, clock=clock)
    progress.compiling()
    clock.now += 30.0  # the first build of the hot path
    progress.compiled()
    clock.now += 20.0  # reading ahead, re-planning
    records = [Update("+", "G", (i, i)) for i in range(1000)]

    class Timed(FakeView):
        def apply(self, u: Update) -> None:
            clock.now += 0.001  # one millisecond per update
            super().apply(u)

    drive(Timed(), progress.watch(records), epoch_size=500, on_delta=lambda d: None,
          stats=progress.stats)
    assert progress.rate() == pytest.approx(1000.0)
    assert "1000 updates/s" in progress.summary()
    shown = re.findall(r"(\d+) updates/s", buf.getvalue())
    assert shown and all(int(r) in range(999, 1002) for r in shown), shown
    # A build during the run (a view compiled on first use) is not the pace either.
    progress.compiling()
    clock.now += 10.0
    progress.compiled()
    assert progress.rate() == pytest.approx(1000.0)


def test_progress_rate_of_a_real_run_leaves_out_the_read_ahead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local runner reads a prefix of the stream before it applies any record (to
    estimate update rates): that time is not in the rate."""
    from dataflow.runners import local
    from dataflow.runners.run import RunOptions, run

    clock = FakeClock()
    real_buffer = local.buffer_prefix

    def slow_read_ahead(records: Any, n: int) -> Any:
        got = real_buffer(records, n)
        clock.now += 1000.0  # reading ahead took long
        return got

    monkeypatch.setattr(local, "buffer_prefix", slow_read_ahead)
    (tmp_path / "q.sql").write_text(TWO_HOP)
    updates = tmp_path / "u.csv"
    updates.write_text("".join(f"+,G,{i},{i + 1}\n" for i in range(300)))
    progress = Progress(io.StringIO(), enabled=False, clock=clock)
    run(RunOptions(query=str(tmp_path / "q.sql"), updates=str(updates),
                   deltas=str(tmp_path / "d.csv")), progress)
    assert progress.began is not None and progress.began >= clock.now - 1e-9
    clock.now += 3.0
    assert progress.rate() == pytest.approx(100.0)


def test_progress_line_of_stdin_has_no_percent() -> None:
    progress = Progress(io.StringIO(), enabled=True)
    assert progress.fraction() is None


def test_run_help_explains_every_option(run: Run) -> None:
    assert run("run", "--help") == 0
    text = " ".join(run.out.split())
    assert "--parallelism P partitions of the state" in text, run.out
    assert "--verbose, -v" in text
    options = re.findall(r"^  (-[-\w]+(?:, -\w)?(?: \S+)?)(.*)$", run.out, re.M)
    bare = [o for o, rest in options if not rest.strip()]
    # An option whose help text went onto the next line is fine; none may have none.
    helped = {o for o in bare if re.search(re.escape(o) + r"\n {10,}\S", run.out)}
    assert set(bare) <= helped | {"-h, --help"}, set(bare) - helped


def test_java_found_and_needed_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Java, or one older than the runner runs on: one line saying which Java was
    found and what is needed (a real ``java -version`` run, of a stand-in JDK)."""
    from core.errors import JobStartError
    from dataflow.runners.jvm import java_major, python_error, require_java

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nojdk"))
    with pytest.raises(JobStartError) as err:
        require_java("spark", (17, 21))
    assert str(err.value) == (
        f"the spark job could not start: it needs Java 17 or 21; found no Java (JAVA_HOME="
        f"{tmp_path / 'nojdk'} holds no bin/java) (install e.g. openjdk-17-jre-headless, "
        f"or set JAVA_HOME)")
    jdk = tmp_path / "jdk11"
    (jdk / "bin").mkdir(parents=True)
    java = jdk / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(jdk))
    with pytest.raises(JobStartError) as err:
        require_java("spark", (17, 21))
    assert "it needs Java 17 or 21; found Java 11.0.2 (" + str(java) in str(err.value)
    assert "\n" not in str(err.value)
    assert require_java("flink", (11, 17, 21)).major == 11
    assert java_major('java version "1.8.0_392"') == 8
    trace = ("org.apache.spark.SparkException: crashed\nCaused by: x.RunnerException: "
             "failed. Cause: Traceback (most recent call last):\n  File \"w.py\", line 1\n"
             "    import google.protobuf\nModuleNotFoundError: No module named 'x'\n"
             " SQLSTATE: XXKST\n\tat org.apache.Foo(Foo.scala:1)\n")
    assert python_error(trace) == "ModuleNotFoundError: No module named 'x'"
    assert python_error("java.lang.OutOfMemoryError: heap") is None


def test_sigterm_drops_the_open_epoch_and_exits_143(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataflow.runners.local as local

    real = local.read_updates

    def killing(*args: Any, **kwargs: Any) -> Iterator[Record]:
        for i, rec in enumerate(real(*args, **kwargs)):
            if i == 4:  # the second epoch's second update: mid-epoch
                os.kill(os.getpid(), signal.SIGTERM)
            yield rec

    monkeypatch.setattr(local, "read_updates", killing)
    # No rate-estimation prefix: the signal must arrive between applied records.
    monkeypatch.setattr(local, "PREFIX_RECORDS", 0)
    before = signal.getsignal(signal.SIGTERM)
    text = "+,G,1,2\n+,G,2,3\n*\n+,G,3,4\n+,G,4,5\n"
    assert run.run("--deltas", run.deltas, updates=text) == 143
    assert signal.getsignal(signal.SIGTERM) == before
    assert "stopped by SIGTERM before the end of" in run.err
    assert "epoch 1 is whole" in run.err and "--resume" in run.err
    assert read_csv_deltas(run.deltas.read_text()) == {1: Counter({(1, 3): 1})}


# ---------------------------------------------------------------------------------------
# generate


def test_generate_graph_window_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "u.csv"
    args = ["generate", "graph", "--edges", "200", "--window", "0.2", "--seed", "1",
            "--relation", "G", "--out", str(out), "--epoch-every", "50"]
    assert main(args) == 0
    assert "wrote 360 updates (200 edges of G)" in capsys.readouterr().err
    recs = list(read_updates_from_lines(out.read_text().splitlines(), GSCHEMA, "u"))
    assert sum(isinstance(r, EpochEnd) for r in recs) == 7
    assert [getattr(r, "op", "*") for r in recs].count("-") == 160
    first = out.read_bytes()
    assert main([*args, "--quiet"]) == 0 and out.read_bytes() == first
    assert main(["generate", "graph", "--edges", "5", "--seed", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5


def test_generate_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "graph", "--edges", "100", "--nodes", "5"]) == 2
    assert "do not fit on 5 nodes" in capsys.readouterr().err
    assert main(["generate", "graph", "--edges", "10", "--window", "1.5"]) == 2


# ---------------------------------------------------------------------------------------
# drive (the local runner) on its own


def test_drive_epoch_rules() -> None:
    sink = CollectingSink()
    snaps: list[tuple[int, list[tuple[int, Row]]]] = []
    recs: list[Record] = [
        EPOCH_END,  # epoch 1: empty, snapshot 1
        Update("+", "G", (1, 2)), Update("+", "G", (2, 3)), Update("+", "G", (3, 4)),
        # epoch 2 closed by size after 3 updates
        EPOCH_END,  # epoch 3: empty, snapshot 2
        Update("+", "G", (4, 5)),  # epoch 4 closed by the end of the stream
    ]
    stats = drive(FakeView(), recs, epoch_size=3, on_delta=sink.write_epoch,
                  on_snapshot=lambda k, rows: snaps.append((k, list(rows))))
    assert [d.epoch for d in sink.deltas] == [1, 2, 3, 4]
    assert [d.closed_by_marker for d in sink.deltas] == [True, False, True, False]
    assert [len(d) for d in sink.deltas] == [0, 2, 0, 1]
    assert snaps == [(1, []), (2, [(1, (1, 3)), (1, (2, 4))])]
    assert stats == DriveStats(updates=4, epochs=4, delta_rows=3, snapshots=2, skipped=0)


def test_drive_end_of_stream_without_updates_closes_nothing() -> None:
    sink = CollectingSink()
    assert drive(FakeView(), [Update("+", "G", (1, 1)), EPOCH_END],
                 on_delta=sink.write_epoch).epochs == 1
    assert drive(FakeView(), [], on_delta=sink.write_epoch).epochs == 0


def test_drive_invalid_delete_fail_and_skip() -> None:
    recs: list[Record] = [Update("+", "G", (1, 2), source="u:1"),
                          Update("-", "G", (1, 2), 2, source="u:2"),
                          Update("+", "G", (2, 3), source="u:3")]
    sink = CollectingSink()
    with pytest.raises(InputError) as info:
        drive(FakeView(), recs, on_delta=sink.write_epoch)
    assert info.value.source == "u:2" and sink.deltas == []

    dead = CollectingSink()
    stats = drive(FakeView(), recs, on_delta=sink.write_epoch, on_error="skip",
                  dead_letter=dead)
    assert stats.skipped == 1 and stats.updates == 2
    assert [e.source for e in dead.dead_letters] == ["u:2"]
    assert sink.rows() == [(1, 1, (1, 3))]


def test_drive_fills_in_where_a_view_error_came_from() -> None:
    class Picky(FakeView):
        def apply(self, u: Update) -> None:
            raise InputError("", "", "an absent tuple", "a present one")

    with pytest.raises(InputError) as info:
        drive(Picky(), [Update("-", "G", (1, None), 3, source="f.csv:9")], on_delta=print)
    err = info.value
    assert (err.source, err.record) == ("f.csv:9", "-3,G,1,")
    assert str(err).startswith("f.csv:9: bad update record '-3,G,1,': expected an absent")
    assert "--on-error skip" in err.hint


def test_drive_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="epoch_size"):
        drive(FakeView(), [], epoch_size=0, on_delta=print)
    with pytest.raises(ValueError, match="on_error"):
        drive(FakeView(), [], on_delta=print, on_error="ignore")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# Every way of starting the command line behaves the same


def test_console_script_and_module_forms_behave_the_same(tmp_path: Path) -> None:
    """``ivmflow``, ``python -m dataflow``, ``python -m dataflow.cli`` and ``python
    dataflow/cli.py`` (how the SparkApplication manifest starts it) give the same exit
    code and message, also for an error raised deep in the Kafka glue."""
    root = Path(__file__).resolve().parent.parent
    q = tmp_path / "q.sql"
    q.write_text(TWO_HOP)
    script = Path(sys.executable).with_name("ivmflow")
    forms = [[sys.executable, "-m", "dataflow"], [sys.executable, "-m", "dataflow.cli"],
             [sys.executable, str(root / "dataflow" / "cli.py")]]
    if script.exists():
        forms.append([str(script)])
    for args, code in ((["--updates", "kafka://h:1/"], 2), (["--updates", "missing.csv"], 1)):
        seen = set()
        for form in forms:
            done = subprocess.run([*form, "run", str(q), "-q", *args], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=120)
            assert "Traceback" not in done.stderr, (form, done.stderr)
            seen.add((done.returncode, done.stderr))
        assert len(seen) == 1, seen
        ((rc, err),) = seen
        assert rc == code and err.startswith("ivmflow: error: "), (rc, err)
