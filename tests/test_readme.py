"""The README stays true: its Python example prints what the README says, and the CLI
example prints the README's delta table."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
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
