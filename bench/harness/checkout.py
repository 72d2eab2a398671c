"""Measuring another checkout: a child process that runs this checkout's bench code over
another checkout's engine (``--root DIR`` of ``bench.delete_check_bench`` and
``bench.instructions``), with no change to ``sys.path`` in either process."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from bench.harness.record import ROOT


def child_setup(root: Path | str) -> tuple[Path, dict[str, str]]:
    """The working directory and environment of a ``python -m bench.NAME`` child that
    imports ``bench`` from this checkout and everything else (``core``, ``dataflow``,
    ...) from checkout ``root``. For this checkout: its root and ``PYTHONPATH`` of it.
    Otherwise: a folder holding only a link to this checkout's ``bench/`` (``-m`` puts
    the working directory first on the child's path), then ``root`` on ``PYTHONPATH``."""
    root = Path(root).resolve()
    env = {**os.environ, "PYTHONPATH": str(root)}
    if root == ROOT:
        return ROOT, env
    tag = hashlib.sha1(str(ROOT).encode()).hexdigest()[:10]
    shim = Path(tempfile.gettempdir()) / f"ivmflow-bench-{tag}"
    shim.mkdir(exist_ok=True)
    link = shim / "bench"
    if not link.is_symlink():
        link.symlink_to(ROOT / "bench", target_is_directory=True)
    return shim, env
