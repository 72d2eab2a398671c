"""Sizes on disk, and generated data cached on disk."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def dir_bytes(path: Path | str) -> int:
    """Bytes of the files under ``path``; files and folders removed meanwhile (a running
    job's checkpoints) are skipped."""
    total = 0
    for root, _dirs, files in os.walk(path):  # os.walk ignores vanished folders
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def cached_data(folder: Path, what: str, write: Callable[[Path], Any]) -> Path:
    """``folder``, written by ``write(folder)`` first unless a finished earlier write is
    there (its ``manifest.json``, which the generators write last); ``what`` names the
    data in the line said while it is generated."""
    if not (folder / "manifest.json").exists():
        print(f"generating {what} into {folder} ...", flush=True)
        write(folder)
    return folder
