"""One result schema for every bench script: what was measured, on which commit and
machine, by which command, and the rows.

``result_record`` writes ``{"benchmark", "commit", "dirty", "machine", "command",
"started", "rows", ...extra}`` as JSON and prints the table.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
"""The checkout the bench package lives in."""
RESULTS = ROOT / "bench" / "results"
"""Where result files go by default."""

_STARTED = time.strftime("%Y-%m-%dT%H:%M:%S%z")
"""When the bench started (the harness is imported first thing by every script)."""

SCHEMA_FIELDS = ("benchmark", "commit", "dirty", "machine", "command", "started", "rows")


def git_state(root: Path | str = ROOT) -> tuple[str, bool]:
    """The checkout's short commit ("unknown" outside git) and whether its tracked files
    differ from it."""
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()
    if not head:
        return "unknown", False
    dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--", "."],
                           capture_output=True, check=False).returncode != 0
    return head, dirty


def commit_label(root: Path | str = ROOT) -> str:
    """The commit as one string, ``-dirty`` appended when the tracked files differ."""
    head, dirty = git_state(root)
    return f"{head}-dirty" if dirty else head


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """CPU count and model, Python and platform, and the load average at the call."""
    return {"cpus": os.cpu_count(), "model": _cpu_model(),
            "python": platform.python_version(), "platform": platform.platform(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def command_line(module: str, argv: Sequence[str] | None = None) -> str:
    """The command that reruns this bench: ``python -m MODULE ARGS`` (``argv`` as given
    to ``main``, else this process's arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["python", "-m", module, *args])


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def format_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None
                ) -> str:
    """A plain text table of the rows' scalar fields (or ``columns``)."""
    if not rows:
        return "(no rows)"
    cols = list(columns) if columns is not None else [
        k for k, v in rows[0].items() if isinstance(v, (str, int, float, bool)) or v is None]
    cells = [[_cell(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def result_record(name: str, rows: Sequence[Mapping[str, Any]], *,
                  command: str | None = None, extra: Mapping[str, Any] | None = None,
                  out: Path | str | None = None, table: str | bool = True,
                  quiet: bool = False, root: Path | str = ROOT) -> dict[str, Any]:
    """The result document of benchmark ``name``; written as JSON to ``out`` (when given)
    and its table printed (``table``: True for :func:`format_rows`, a string to print
    that, False for none; ``quiet``: nothing printed, for a record rewritten as a run
    goes). ``extra`` holds the benchmark's other top-level fields (they
    cannot replace the schema's)."""
    head, dirty = git_state(root)
    doc: dict[str, Any] = {
        "benchmark": name, "commit": head, "dirty": dirty, "machine": machine(),
        "command": command if command is not None else shlex.join(["python", *sys.argv]),
        "started": _STARTED, "rows": list(rows)}
    clash = sorted(set(extra or {}) & set(doc))
    if clash:
        msg = f"extra fields {clash} would replace the result schema's"
        raise ValueError(msg)
    doc.update(extra or {})
    text = format_rows(doc["rows"]) if table is True else table or ""
    if text and not quiet:
        print(text)
    if out is not None:
        write_record(doc, out, quiet=quiet)
    return doc


def write_record(doc: Mapping[str, Any], out: Path | str, quiet: bool = False) -> Path:
    """Write a result document as JSON (its folder made); says so unless ``quiet``."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    if not quiet:
        print(f"wrote {path}")
    return path
