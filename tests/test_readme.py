"""The README stays true: its Python example prints what the README says, and the CLI
example prints the README's delta table."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _fenced() -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", README, flags=re.S | re.M)


def test_python_example_output_matches_readme() -> None:
    blocks = _fenced()
    i = next(i for i, (lang, _) in enumerate(blocks) if lang == "python")
    code, expected = blocks[i][1], blocks[i + 1][1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102
    assert out.getvalue() == expected


def test_cli_example_output_matches_readme() -> None:
    expected = next(b for _, b in _fenced() if b.startswith("epoch,mult"))
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow.cli", "run", "examples/paths.sql",
         "--updates", "examples/paths_updates.csv", "--quiet"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    assert proc.stdout == expected


def test_triangle_example_output_matches_readme() -> None:
    sql = next(b for lang, b in _fenced() if lang == "sql" and "triangles" in b)
    assert sql in (ROOT / "examples" / "triangles.sql").read_text()
    expected = next(b for _, b in _fenced() if b.startswith("epoch,mult,user_id,triangles"))
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow.cli", "run", "examples/triangles.sql",
         "--updates", "examples/paths_updates.csv", "--quiet"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    assert proc.stdout == expected


def test_kafka_example_runs_as_written(kafka_bootstrap: str) -> None:
    """The README's Kafka commands, on the test broker and fresh topics, print the
    README's delta table (the broker start line is the fixture's job)."""
    block = next(b for lang, b in _fenced() if lang == "sh" and "ivmflow produce" in b)
    commands = block.replace("\\\n", " ").splitlines()
    assert commands[0].startswith("noida-db start")
    suffix = uuid.uuid4().hex[:8]
    outputs = []
    for line in commands[1:]:
        line = line.replace("127.0.0.1:9092", kafka_bootstrap)
        line = re.sub(r"/(updates|deltas)\b", rf"/\1-{suffix}", line)
        program, *args = shlex.split(line)
        assert program == "ivmflow"
        proc = subprocess.run(
            [sys.executable, "-m", "dataflow.cli", *args],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )
        assert proc.returncode == 0, f"{line}\n{proc.stderr}"
        outputs.append(proc.stdout)
    table = next(b for _, b in _fenced() if b.startswith("epoch,mult,a,b,c"))
    assert outputs[-1] == table


def test_hierarchical_example_output_matches_readme() -> None:
    """The README's view-tree example: its SQL is the example file's, ``explain`` prints
    the README's lines and ``run --eps 0.5`` the README's delta table."""
    sql = next(b for lang, b in _fenced() if lang == "sql" and "DISTINCT f1.src AS a" in b)
    assert sql in (ROOT / "examples" / "reach.sql").read_text()
    explained = next(b for _, b in _fenced() if b.startswith("class: hierarchical"))
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow.cli", "explain", "examples/reach.sql", "--eps", "0.5"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    assert explained in proc.stdout
    expected = next(b for _, b in _fenced() if b.startswith("epoch,mult,a,c\n"))
    for extra in (["--eps", "0.5"], []):
        proc = subprocess.run(
            [sys.executable, "-m", "dataflow.cli", "run", "examples/reach.sql",
             "--updates", "examples/paths_updates.csv", "--quiet", *extra],
            cwd=ROOT, capture_output=True, text=True, check=True,
        )
        assert proc.stdout == expected
