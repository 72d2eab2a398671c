"""Sizes on disk."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def dir_bytes(path: Path | str) -> int:
    """Bytes of the files under ``path``; files and folders removed meanwhile (a running
    job's checkpoints) are skipped."""
    total = 0
    for root, _dirs, files in os.walk(path):  # os.walk ignores vanished folders
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total
