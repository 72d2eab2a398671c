"""State checkpoints of the local runner over Kafka (``--checkpoint DIR``).

Against the real broker of the ``kafka_bootstrap`` fixture.  The proof that a restart
reads on from the checkpoint instead of replaying the topic: the records before the
checkpoint's offsets are deleted from the topic (DeleteRecords) before the restart; the
run without a checkpoint then refuses to start (it would compute from a partial
history), the run with it ends with the same deltas, epoch by epoch, as the local runner
over the whole stream as a file.  Also: kill -9 with checkpoints, and the checkpoints that
must be refused (another query, newer than the output, damaged).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from test_kafka_local import (
    ROOT,
    TWO_HOP,
    _cli,
    _kafka_epochs,
    _long_stream,
    _reference,
    _run,
    _start,
    _topic,
    _wait,
)

from connectors.kafka import parse_kafka_url, read_last_epoch
from dataflow.runners.local.checkpoint import CHECKPOINT_FILE

TRIANGLES = (ROOT / "examples" / "triangles.sql").read_text().replace("follows", "G")


def _split_at_marker(u: Path, fraction: float) -> tuple[Path, Path]:
    lines = u.read_text().splitlines(keepends=True)
    markers = [i for i, line in enumerate(lines) if line == "*\n"]
    cut = markers[int(len(markers) * fraction)]
    first, second = u.with_name("first.csv"), u.with_name("second.csv")
    first.write_text("".join(lines[: cut + 1]))
    second.write_text("".join(lines[cut + 1:]))
    return first, second


def _delete_before(bootstrap: str, positions: list[list[object]]) -> None:
    """DeleteRecords up to the checkpoint's offsets: what retention does to old data."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_records({TopicPartition(str(t), int(str(p))): int(str(o))
                              for t, p, o in positions})
    finally:
        admin.close()


def _header(ckpt: Path) -> dict[str, object]:
    with open(ckpt / CHECKPOINT_FILE, encoding="utf-8") as f:
        header: dict[str, object] = json.loads(f.readline())
    return header


DAG = ("CREATE TABLE G(src INT, dst INT);\n"
       "SELECT G1.src, COUNT(G2.dst) FROM G G1 LEFT JOIN G G2 ON G1.dst = G2.src "
       "WHERE NOT EXISTS (SELECT 1 FROM G G3 WHERE G3.dst = G1.src AND G3.src < 3) "
       "GROUP BY G1.src;\n")
"""A DAG of views (an outer join's keyed views, NOT EXISTS's grouped view): its
checkpoint holds the base tables, and a restore rebuilds every view from them."""


@pytest.mark.parametrize(("sql", "eps"), [(TWO_HOP, None), (TRIANGLES, "0.5"), (DAG, None)],
                         ids=["two-hop", "triangles-eps-0.5", "dag-of-views"])
def test_restart_reads_on_from_the_checkpoint_without_the_old_records(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    sql: str, eps: str | None,
) -> None:
    q, u = _long_stream(tmp_path, 1200, 15, seed=21)
    q.write_text(sql)
    first, second = _split_at_marker(u, 0.5)
    up = f"kafka://{kafka_bootstrap}/{_topic('up')}"
    out = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    ckpt = tmp_path / "ckpt"
    cmd = ["run", q, "--updates", up, "--deltas", out, "--stop-at-end",
           "--checkpoint", ckpt, "--checkpoint-interval", 0, *(["--eps", eps] if eps else [])]
    assert _run("produce", first, up, "--partitions", 3, "-q") == 0
    assert _run(*cmd, "-q") == 0
    header = _header(ckpt)
    assert header["epoch"] == first.read_text().count("*\n")  # the run's last boundary
    assert header["last_rows_epoch"] == max(_reference(sql, first, None)) == read_last_epoch(
        parse_kafka_url(out))
    positions = header["positions"]
    assert isinstance(positions, list) and sum(o for _, _, o in positions) > 0

    assert _run("produce", second, up, "-q") == 0
    _delete_before(kafka_bootstrap, positions)
    capsys.readouterr()
    # Without the checkpoint the run would rebuild its state from what is left: refused.
    no_ckpt = [a for a in cmd if a not in ("--checkpoint", ckpt, "--checkpoint-interval", 0)]
    assert _run(*no_ckpt) == 1
    err = capsys.readouterr().err
    assert "expected the records from offset 0" in err and "--checkpoint DIR" in err
    assert _run(*cmd) == 0
    err = capsys.readouterr().err
    assert f"resumed from checkpoint {ckpt} at epoch {header['epoch']}" in err
    want = _reference(sql, u, None)
    assert want and _kafka_epochs(out) == want
    assert _header(ckpt)["epoch"] == u.read_text().count("*\n")


def test_kill_9_with_checkpoints_writes_every_epoch_exactly_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    q, u = _long_stream(tmp_path, 3000, 15, seed=22)
    want = _reference(TWO_HOP, u, None)
    up = f"kafka://{kafka_bootstrap}/{_topic('up')}"
    out = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    ckpt = tmp_path / "ckpt"
    assert _run("produce", u, up, "--partitions", 2, "-q") == 0
    cmd = _cli("run", q, "--updates", up, "--deltas", out, "--stop-at-end", "-q",
               "--checkpoint", ckpt, "--checkpoint-interval", 0.05)
    proc = _start(cmd)
    _wait(lambda: (ckpt / CHECKPOINT_FILE).exists()
          and read_last_epoch(parse_kafka_url(out)) >= 20, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = _header(ckpt)["epoch"]
    assert isinstance(killed_at, int) and 0 < killed_at < max(want)
    partial = _kafka_epochs(out)
    assert partial == {e: want[e] for e in partial}  # whole epochs only
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=120, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert _kafka_epochs(out) == want  # Counter equality: a duplicated epoch would differ


def test_checkpoints_that_would_give_a_wrong_result_are_refused(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    q, u = _long_stream(tmp_path, 300, 15, seed=23)
    up = f"kafka://{kafka_bootstrap}/{_topic('up')}"
    out = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    ckpt = tmp_path / "ckpt"
    assert _run("produce", u, up, "-q") == 0
    base = ["--updates", up, "--stop-at-end", "--checkpoint", ckpt,
            "--checkpoint-interval", 0]
    assert _run("run", q, *base, "--deltas", out, "-q") == 0
    capsys.readouterr()

    # Newer than the output: a fresh delta topic would miss every epoch up to it.
    fresh = f"kafka://{kafka_bootstrap}/{_topic('deltas')}"
    assert _run("run", q, *base, "--deltas", fresh, "-q") == 1
    err = capsys.readouterr().err
    assert "expected a checkpoint no newer than the delta output" in err
    assert "holds epochs up to 0" in err and str(ckpt) in err
    assert read_last_epoch(parse_kafka_url(fresh)) == 0

    # Another query.
    other = tmp_path / "other.sql"
    other.write_text(TWO_HOP.replace("COUNT(*)", "COUNT(*) AS n"))
    assert _run("run", other, *base, "--deltas", out, "-q") == 1
    err = capsys.readouterr().err
    assert "expected a checkpoint of this query and update source" in err

    # Damaged by hand: the line is named.
    path = ckpt / CHECKPOINT_FILE
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([*lines[:2], "[\"G\", [1, 2]]\n", *lines[3:]]))
    assert _run("run", q, *base, "--deltas", out, "-q") == 1
    err = capsys.readouterr().err
    assert f"{path}:3: expected [relation, [values...], multiplicity]" in err

    # A file source has no offsets to checkpoint.
    assert _run("run", q, "--updates", u, "--checkpoint", ckpt, "-q") == 2
    assert "kafka:// update source only" in capsys.readouterr().err
