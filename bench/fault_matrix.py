"""The fault matrix (issue 41, item 2): every runner stopped at a named point by SIGKILL,
SIGTERM or SIGINT, then the same command run again; the output must equal an
uninterrupted run's, record for record.

Cells: {SIGKILL, SIGTERM, SIGINT} x {spark, flink, local} x {file, kafka} x fault points
(:mod:`core.faults`; the run signals itself when the point is reached the N-th time):

- ``read@N`` (mid-epoch): after the N-th update record is read, N in the middle of an
  epoch;
- ``sink.write@K`` (mid-output): the sink has written the K-th epoch's rows but not its
  commit (the delta file's commit record, the topic's transaction);
- ``sink.commit@K`` (between commit steps): the K-th epoch is committed in the sink, the
  input position and the engine's state are not yet (the local runner's Kafka offsets
  ride in the epoch's transaction; Spark commits its batch after the sink, Flink
  checkpoints apart);
- ``epoch@K`` (on request): the K-th epoch closed, its delta not written yet.

Each cell runs the command (``ivmflow run ... --deltas OUT``; Spark and Flink at
``--parallelism 2`` with ``--checkpoint``, the local runner over Kafka with
``--checkpoint``) with ``IVMFLOW_FAULT=POINT@N:SIGNAL`` in its own process group (a
SIGKILL goes to the whole group, JVM and all, as a container is killed; SIGTERM and
SIGINT to the ``ivmflow`` process only, as Kubernetes and a terminal's Ctrl-C to the
command do), then the same command again, without the fault (``--resume`` for the local
runner over a file). A file source is bounded: both runs end by themselves (the first
with 137 (-9), 143 or 130, the second with 0). A Kafka source is read unbounded (no
``--stop-at-end``): the first run ends on the fault (exit 0 on SIGTERM / SIGINT), the
second is stopped with SIGTERM by this script once the delta topic holds the last
epoch (exit 0). The output (the delta file, or the delta topic read committed) is then
compared with the local runner's uninterrupted in-process run, epoch by epoch: a row
missing from an epoch is *lost*, one beyond it *duplicated*.

Run (starts a Kafka broker from the ``dev`` extra unless ``--bootstrap`` is given)::

    python -m bench.fault_matrix                        # the whole matrix
    python -m bench.fault_matrix --runners flink --sources file --signals TERM

prints a table (runner, source, signal, point, kills, epochs, rows lost, rows
duplicated, exit codes) and writes ``bench/results/fault_matrix.json``. The local
runner's rows run last. ``tests/test_fault_matrix.py`` runs a slice with the same
functions.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, ROOT, command_line, result_record
from connectors.files import read_updates
from core.records import EPOCH_END, Record, Update, format_update, format_value
from dataflow.api import compile_query

Epochs = dict[int, Counter[tuple[Any, ...]]]
RUNNERS = ("spark", "flink", "local")
"""In the order they run (the local runner's rows last)."""
SOURCES = ("file", "kafka")
SIGNALS = ("KILL", "TERM", "INT")
POINTS = ("read", "sink.write", "sink.commit")
"""The default points (``epoch`` may be asked for too)."""
QUERY = ("CREATE TABLE G(src INT, dst INT);\n"
         "SELECT G1.src, COUNT(*) AS n FROM G G1, G G2 WHERE G1.dst = G2.src "
         "GROUP BY G1.src;\n")
"""A two-hop count per source node: every epoch retracts and inserts counts."""
EXIT_KILLED = -signal.SIGKILL
RUN_TIMEOUT_S = 1200.0


# ---------------------------------------------------------------------------------------
# The workload and its uninterrupted output


def edge_stream(seed: int, n: int, nodes: int = 30, marker: float = 0.03) -> list[Record]:
    """``n`` updates of G: inserts, and deletes of live edges (some duplicates); a ``*``
    after an update with probability ``marker``, and one at the end."""
    rng = random.Random(seed)
    live: list[tuple[int, int]] = []
    out: list[Record] = []
    for _ in range(n):
        if live and rng.random() < 0.35:
            out.append(Update("-", "G", live.pop(rng.randrange(len(live)))))
        else:
            edge = (rng.randrange(nodes), rng.randrange(nodes))
            live.append(edge)
            out.append(Update("+", "G", edge))
        if rng.random() < marker:
            out.append(EPOCH_END)
    if isinstance(out[-1], Update):
        out.append(EPOCH_END)
    return out


def _text(mult: int, row: Sequence[Any]) -> tuple[Any, ...]:
    """A delta row as text (files hold text, topics JSON values): one form for both."""
    return (int(mult), *(format_value(v) for v in row))


@dataclass
class Workload:
    """The query and update files, the update topic (when Kafka runs), and the
    uninterrupted run's deltas."""

    dir: Path
    sql: Path
    updates: Path
    records: list[Record]
    expected: Epochs
    topic_url: str | None = None
    bootstrap: str | None = None

    @classmethod
    def make(cls, work: Path, n: int = 6000, seed: int = 41,
             bootstrap: str | None = None) -> Workload:
        work.mkdir(parents=True, exist_ok=True)
        sql = work / "q.sql"
        sql.write_text(QUERY)
        records = edge_stream(seed, n)
        updates = work / "updates.csv"
        updates.write_text("".join(format_update(r) + "\n" for r in records))
        q = compile_query(QUERY)
        expected: Epochs = {d.epoch: Counter(_text(m, r) for m, r in d.rows)
                            for d in q.run(read_updates(str(updates), q.schema)) if d.rows}
        wl = cls(work, sql, updates, records, expected, bootstrap=bootstrap)
        if bootstrap is not None:
            from dataflow.runners.kafka import produce

            wl.topic_url = f"kafka://{bootstrap}/fm-updates-{os.urandom(4).hex()}"
            produce(str(updates), wl.topic_url, partitions=2, query=str(sql))
        return wl

    @property
    def updates_n(self) -> int:
        return sum(1 for r in self.records if isinstance(r, Update))

    @property
    def epochs(self) -> int:
        """Epochs closed (with rows or not)."""
        return sum(1 for r in self.records if not isinstance(r, Update))

    @property
    def last_epoch(self) -> int:
        """The last epoch with rows."""
        return max(self.expected)

    def fault(self, point: str, fraction: float = 0.25) -> str:
        """``POINT@N`` a ``fraction`` of the way into the run: for ``read`` an update in
        the middle of its epoch (updates before and after it in the same epoch), for
        the sink points the K-th epoch with rows, for ``epoch`` the K-th epoch."""
        if point == "read":
            n = 0
            epoch: list[int] = []  # update numbers of the current epoch
            target = int(self.updates_n * fraction)
            for r in self.records:
                if not isinstance(r, Update):
                    if len(epoch) >= 3 and epoch[-1] >= target:
                        return f"read@{epoch[len(epoch) // 2]}"
                    epoch = []
                    continue
                n += 1
                epoch.append(n)
            return f"read@{target}"
        if point == "epoch":
            return f"epoch@{max(1, int(self.epochs * fraction))}"
        return f"{point}@{max(1, int(len(self.expected) * fraction))}"


# ---------------------------------------------------------------------------------------
# Running a cell


@dataclass(frozen=True)
class Cell:
    runner: str
    source: str
    signal: str
    point: str
    """``POINT@N``."""

    @property
    def name(self) -> str:
        return f"{self.runner}-{self.source}-{self.signal}-{self.point}".replace("@", "-")

    @property
    def exit_code(self) -> int:
        """The first run's exit code when the fault stopped it: killed (-9), or
        stopped before the end of a bounded source (130, 143), or an unbounded source
        stopped on request (0)."""
        if self.signal == "KILL":
            return EXIT_KILLED
        if self.source == "kafka":
            return 0
        return 128 + int(getattr(signal, f"SIG{self.signal}"))


def command(wl: Workload, cell: Cell, out: str, ckpt: Path, batch_lines: int) -> list[str]:
    """The ``ivmflow run`` command of a cell (the same for both runs)."""
    updates = wl.topic_url if cell.source == "kafka" else str(wl.updates)
    assert updates is not None, "a kafka cell needs the workload's topic"
    cmd = [sys.executable, "-m", "dataflow.cli", "run", str(wl.sql), "--updates", updates,
           "--deltas", out, "--quiet"]
    if cell.runner == "local":
        return [*cmd, "--checkpoint", str(ckpt)] if cell.source == "kafka" else cmd
    return [*cmd, "--runner", cell.runner, "--parallelism", "2", "--batch-lines",
            str(batch_lines), "--checkpoint", str(ckpt)]


def spark_batch_lines(wl: Workload, cell: Cell, batches: int) -> int:
    """Spark's ``--batch-lines`` for about ``batches`` micro-batches over the stream (a
    Kafka source reads that many records per topic partition: 2 here)."""
    per_batch = -(-len(wl.records) // batches)
    return -(-per_batch // 2) if cell.source == "kafka" else per_batch


def file_epochs(path: Path) -> Epochs:
    """Per-epoch deltas of a delta file."""
    out: Epochs = {}
    if not path.exists():
        return out
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        next(rows, None)
        for epoch, mult, *values in rows:
            out.setdefault(int(epoch), Counter())[(int(mult), *values)] += 1
    return out


def topic_epochs(url: str) -> Epochs:
    """Per-epoch deltas of a delta topic, read committed."""
    from connectors.kafka import parse_kafka_url, read_deltas

    out: Epochs = {}
    for epoch, mult, row in read_deltas(parse_kafka_url(url)):
        out.setdefault(epoch, Counter())[_text(mult, tuple(row.values()))] += 1
    return out


def last_epoch_in(out: str) -> int:
    """The last epoch the output holds committed."""
    if out.startswith("kafka://"):
        from connectors.kafka import parse_kafka_url, read_last_epoch

        return read_last_epoch(parse_kafka_url(out))
    with contextlib.suppress(OSError, ValueError, KeyError):
        return int(json.loads(Path(f"{out}.commit").read_text())["epoch"])
    return 0


def compare(expected: Epochs, got: Epochs) -> tuple[int, int]:
    """Rows lost (in an epoch of the uninterrupted run, missing from the output) and
    rows duplicated (in the output beyond it)."""
    lost = dup = 0
    for e in set(expected) | set(got):
        want, have = expected.get(e, Counter()), got.get(e, Counter())
        lost += sum((want - have).values())
        dup += sum((have - want).values())
    return lost, dup


def run(cmd: list[str], env: dict[str, str], log: Path,
        done: Callable[[], bool] | None = None, timeout: float = RUN_TIMEOUT_S
        ) -> tuple[int, bool]:
    """Run ``cmd`` in its own process group, stderr to ``log``, until it ends; with
    ``done`` (an unbounded run), SIGTERM it once ``done()`` holds. Returns the exit
    code and whether this function sent that SIGTERM. Whatever is left of the process
    group afterwards (a worker of a killed run) is killed."""
    t0 = time.monotonic()
    stopped = False
    with open(log, "ab") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=err)
        try:
            while proc.poll() is None:
                if done is not None and not stopped and done():
                    proc.send_signal(signal.SIGTERM)
                    stopped = True
                if time.monotonic() - t0 > timeout:
                    msg = f"no end within {timeout:.0f} s: {' '.join(cmd)} (log {log})"
                    raise TimeoutError(msg)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(1.0 if done is not None else 0.2)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, stopped


def run_cell(wl: Workload, cell: Cell, work: Path, batch_lines: int = 250) -> dict[str, Any]:
    """Run a cell (module docstring): the command with the fault, then again; the
    output compared with the uninterrupted run's."""
    t0 = time.monotonic()
    cdir = work / cell.name
    cdir.mkdir(parents=True, exist_ok=True)
    if cell.source == "kafka":
        assert wl.bootstrap is not None
        out = f"kafka://{wl.bootstrap}/fm-deltas-{os.urandom(4).hex()}-{cell.name}"
    else:
        out = str(cdir / "deltas.csv")
    cmd = command(wl, cell, out, cdir / "ckpt", batch_lines)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("IVMFLOW_FAULT", None)
    env.pop("IVMFLOW_FAULT_TARGET", None)
    last = wl.last_epoch

    def complete() -> bool:
        return last_epoch_in(out) >= last

    unbounded = complete if cell.source == "kafka" else None
    log = cdir / "first.log"
    first, we_stopped = run(cmd, {**env, "IVMFLOW_FAULT": f"{cell.point}:{cell.signal}"}, log,
                            done=unbounded)
    at = last_epoch_in(out)
    again = [*cmd, "--resume"] if cell.runner == "local" and cell.source == "file" else cmd
    second, _ = run(again, env, cdir / "again.log", done=unbounded)
    got = topic_epochs(out) if cell.source == "kafka" else file_epochs(Path(out))
    lost, dup = compare(wl.expected, got)
    # Delivered: the first run ended on the fault (a Kafka run ends only so, or by this
    # script's SIGTERM once the topic is complete), with the exit code that says so.
    signalled = first == cell.exit_code and (cell.source == "file" or not we_stopped)
    # A bounded source stopped by SIGTERM / SIGINT says so in one line (quiet or not).
    stop_line = (f"stopped by SIG{cell.signal} before the end" in log.read_text(errors="replace")
                 if signalled and cell.source == "file" and cell.signal != "KILL" else None)
    return {"runner": cell.runner, "source": cell.source, "signal": cell.signal,
            "point": cell.point, "kills": int(signalled), "epochs": len(wl.expected),
            "at_epoch": at, "lost": lost, "duplicated": dup, "exit": first,
            "exit_again": second, "stop_line": stop_line,
            "seconds": round(time.monotonic() - t0, 1)}


def passed(row: dict[str, Any]) -> bool:
    """The fault was delivered, the stop said so, the restart ended well, and nothing
    was lost or duplicated."""
    return (row["kills"] == 1 and row["stop_line"] is not False and row["exit_again"] == 0
            and row["lost"] == 0 and row["duplicated"] == 0)


# ---------------------------------------------------------------------------------------
# The table


HEADER_LINE = (f"{'runner':6} {'source':6} {'signal':6} {'point':16} {'kills':>5} "
               f"{'epochs':>6} {'at':>5} {'lost':>5} {'duplicated':>10} {'exit':>5} "
               f"{'again':>5} {'seconds':>8}")


def line(r: dict[str, Any]) -> str:
    return (f"{r['runner']:6} {r['source']:6} {r['signal']:6} {r['point']:16} "
            f"{r['kills']:5} {r['epochs']:6} {r['at_epoch']:5} {r['lost']:5} "
            f"{r['duplicated']:10} {r['exit']:5} {r['exit_again']:5} {r['seconds']:8.1f}")


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The table for docs/ (exit codes as the shell shows them: 137 for SIGKILL)."""
    def code(c: int) -> str:
        return str(128 - c if c < 0 else c)

    head = ("| runner | source | signal | point | kills | epochs | at epoch | rows lost "
            "| rows duplicated | exit | exit again |")
    sep = "|" + "---|" * 11
    body = [f"| {r['runner']} | {r['source']} | SIG{r['signal']} | `{r['point']}` | "
            f"{r['kills']} | {r['epochs']} | {r['at_epoch']} | {r['lost']} | "
            f"{r['duplicated']} | {code(r['exit'])} | {code(r['exit_again'])} |"
            for r in rows]
    return "\n".join([head, sep, *body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--runners", default=",".join(RUNNERS))
    ap.add_argument("--sources", default=",".join(SOURCES))
    ap.add_argument("--signals", default=",".join(SIGNALS))
    ap.add_argument("--points", default=",".join(POINTS),
                    help="fault points (read, epoch, sink.write, sink.commit)")
    ap.add_argument("--updates", type=int, default=6000, help="updates in the stream")
    ap.add_argument("--batches", type=int, default=8,
                    help="Spark: micro-batches over the stream (--batch-lines)")
    ap.add_argument("--batch-lines", type=int, default=250,
                    help="Flink: lines (records) per read")
    ap.add_argument("--fraction", type=float, default=0.25,
                    help="where the fault points are, as a fraction of the run")
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--bootstrap", help="a Kafka broker (default: start one)")
    ap.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=RESULTS / "fault_matrix.json")
    args = ap.parse_args(argv)
    import tempfile

    # Stopped with SIGTERM: end through the finally clauses (the broker is stopped).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    work = args.work or Path(tempfile.mkdtemp(prefix="ivmflow-fault-matrix-"))
    sources = args.sources.split(",")
    stop_broker: Callable[[], None] = lambda: None  # noqa: E731
    bootstrap = args.bootstrap
    if bootstrap is None and "kafka" in sources:
        from tests import kafka_broker

        broker, stop_broker = kafka_broker.launch_broker()
        bootstrap = broker.bootstrap
    try:
        wl = Workload.make(work / "workload", args.updates, args.seed,
                           bootstrap if "kafka" in sources else None)
        cells = [Cell(runner, source, sig, wl.fault(point, args.fraction))
                 for runner in args.runners.split(",") for source in sources
                 for sig in args.signals.split(",") for point in args.points.split(",")]
        print(f"{wl.updates_n} updates, {wl.epochs} epochs ({len(wl.expected)} with rows); "
              f"{len(cells)} cells; work directory {work}", flush=True)
        print(HEADER_LINE, flush=True)
        rows = []
        for cell in cells:
            lines = spark_batch_lines(wl, cell, args.batches) if cell.runner == "spark" \
                else args.batch_lines
            rows.append(run_cell(wl, cell, work, lines))
            print(line(rows[-1]), flush=True)
    finally:
        stop_broker()
    print()
    result_record("fault_matrix", rows, command=command_line("bench.fault_matrix", argv),
                  out=args.out, table=markdown(rows), extra={
                      "query": QUERY, "updates": wl.updates_n, "epochs": wl.epochs,
                      "epochs_with_rows": len(wl.expected), "seed": args.seed,
                      "spark_batches": args.batches, "flink_batch_lines": args.batch_lines,
                      "fraction": args.fraction,
                      "parallelism": {"spark": 2, "flink": 2, "local": 1}})
    failed = [r for r in rows if not passed(r)]
    for r in failed:
        print(f"FAILED: {r}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
