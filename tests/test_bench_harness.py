"""bench/harness: one result schema (commit, machine, command, rows) written as JSON, the
shared statistics, and no bench module that edits ``sys.path`` (bench/ is a package run
from the repository root: ``python -m bench.NAME``)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import (
    SCHEMA_FIELDS,
    command_line,
    dir_bytes,
    loglog_slope,
    percentile,
    result_record,
)

ROOT = Path(__file__).resolve().parents[1]


def test_result_record_writes_commit_machine_command_and_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub" / "x.json"
    rows = [{"n": 1, "us": 2.5}, {"n": 2, "us": 3.25}]
    doc = result_record("demo", rows, command=command_line("bench.demo", ["--quick"]),
                        extra={"note": "a test"}, out=out)
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(doc))
    assert set(SCHEMA_FIELDS) <= set(saved) and saved["note"] == "a test"
    assert saved["benchmark"] == "demo" and saved["rows"] == rows
    assert saved["command"] == "python -m bench.demo --quick"
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()
    assert saved["commit"] == (head or "unknown") and isinstance(saved["dirty"], bool)
    machine = saved["machine"]
    assert machine["cpus"] >= 1 and machine["model"] and machine["platform"]
    assert machine["python"] == ".".join(map(str, sys.version_info[:3]))
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", saved["started"])
    printed = capsys.readouterr().out
    assert "3.25" in printed and f"wrote {out}" in printed  # the table, then the file
    with pytest.raises(ValueError, match="commit"):
        result_record("demo", rows, extra={"commit": "abc"})


def test_percentile_rules_slope_and_dir_bytes(tmp_path: Path) -> None:
    xs = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(xs, 0.5) == 3.0 and percentile(xs, 0.99) == 5.0
    assert percentile(xs, 0.2, "nearest") == 1.0 and percentile(xs, 0.2) == 2.0
    assert percentile(xs, 0.6, "round") == 3.0
    assert math.isnan(percentile([], 0.5)) and percentile([], 0.5, empty=0.0) == 0.0
    assert loglog_slope([(10, 100), (100, 10_000), (1000, 1_000_000)]) == pytest.approx(2.0)
    assert math.isnan(loglog_slope([(10, 1.0)])) and math.isnan(loglog_slope([(0, 1), (0, 2)]))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 10)
    (tmp_path / "g").write_bytes(b"y" * 5)
    assert dir_bytes(tmp_path) == 15 and dir_bytes(tmp_path / "missing") == 0


def test_no_bench_module_edits_sys_path() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "bench").rglob("*.py"))
                 if re.search(r"sys\.path\.(insert|append)|sys\.path\s*=", p.read_text())]
    assert offenders == []


def test_the_readme_lists_every_script_with_a_result_file_that_exists() -> None:
    readme = (ROOT / "bench" / "README.md").read_text()
    scripts = {p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "__init__"}
    listed = set(re.findall(r"`python -m bench\.(\w+)", readme)) | set(
        re.findall(r"^\| `(\w+)\.py` \|", readme, flags=re.M))
    assert scripts <= listed, scripts - listed
    cited = set(re.findall(r"`(?:bench/)?results/([\w.*{},-]+\.(?:json|png))`", readme))
    missing = [c for c in cited if not list((ROOT / "bench" / "results").glob(c))]
    assert cited and missing == []
