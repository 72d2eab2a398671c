"""What the Spark and Flink runners share about their JVM: finding Java and its version
before a job starts (:func:`require_java`), sending the JVM's own output to a log file
(:func:`output_to`), and taking the worker's Python error out of a JVM trace
(:func:`python_error`), so that a failed job ends in one line naming its cause
(:class:`~core.errors.JobError`).

Example:
    >>> python_error('''Caused by: org.apache.spark.SparkException: worker crashed
    ... Traceback (most recent call last):
    ...   File "worker.py", line 3, in main
    ...     import x
    ... ImportError: cannot import name 'descriptor' from 'google.protobuf'
    ...  SQLSTATE: XXKST
    ... ''')
    "ImportError: cannot import name 'descriptor' from 'google.protobuf'"
    >>> java_major('openjdk version "17.0.15" 2025-04-15'), java_major('java version "1.8.0_392"')
    (17, 8)
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from core.errors import JobStartError

__all__ = ["FoundJava", "find_java", "java_major", "new_log", "output_to", "python_error",
           "require_java"]

_VERSION = re.compile(r'version "([^"]+)"')
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))(?::|$)")


@dataclass(frozen=True)
class FoundJava:
    """The ``java`` a runner's JVM would run: its path, where it was found and its
    version text (``None``: it would not run)."""

    path: str | None
    where: str
    version: str | None

    @property
    def major(self) -> int | None:
        return java_major(f'version "{self.version}"') if self.version else None

    def describe(self) -> str:
        if self.path is None:
            return f"found no Java ({self.where})"
        if self.version is None:
            return f"found {self.path} ({self.where}), which does not run"
        return f"found Java {self.version} ({self.path}, {self.where})"


def java_major(text: str) -> int | None:
    """The major version in ``java -version`` output (``1.8`` -> 8), or ``None``."""
    m = _VERSION.search(text)
    if not m:
        return None
    parts = re.split(r"[._+-]", m.group(1))
    try:
        major = int(parts[0])
        return int(parts[1]) if major == 1 and len(parts) > 1 else major
    except ValueError:
        return None


def find_java() -> FoundJava:
    """The ``java`` Spark's and PyFlink's launchers pick: ``$JAVA_HOME/bin/java`` when
    ``JAVA_HOME`` is set, else the first on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home:
        path: str | None = os.path.join(home, "bin", "java")
        where = f"JAVA_HOME={home}"
        if not (path and os.access(path, os.X_OK)):
            return FoundJava(None, f"JAVA_HOME={home} holds no bin/java", None)
    else:
        path = shutil.which("java")
        where = "on PATH"
        if path is None:
            return FoundJava(None, "JAVA_HOME is not set and no java is on PATH", None)
    try:
        done = subprocess.run([path, "-version"], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return FoundJava(path, where, None)
    m = _VERSION.search(done.stderr + done.stdout)
    return FoundJava(path, where, m.group(1) if m else None)


def require_java(runner: str, supported: tuple[int, ...]) -> FoundJava:
    """Fail before a JVM starts if it cannot: no Java, or a major version older than
    the runner's oldest ``supported`` one (:class:`~core.errors.JobStartError` saying
    which Java was found and what is needed)."""
    java = find_java()
    major = java.major
    if major is None or major < min(supported):
        msg = (f"the {runner} job could not start: it needs Java {needs(supported)}; "
               f"{java.describe()} (install e.g. openjdk-17-jre-headless, or set JAVA_HOME)")
        raise JobStartError(msg)
    return java


def needs(supported: tuple[int, ...]) -> str:
    """``(17, 21)`` -> ``"17 or 21"``."""
    names = [str(v) for v in supported]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def new_log(runner: str) -> str:
    """A fresh log file for a job's JVM output (kept when the job fails)."""
    fd, path = tempfile.mkstemp(prefix=f"ivmflow-{runner}-", suffix=".log")
    os.close(fd)
    return path


@contextlib.contextmanager
def output_to(log: str | None) -> Iterator[None]:
    """Inside: file descriptors 1 and 2 point at ``log`` (appended), so that a JVM
    started here, and the Python workers it starts later, write their console output
    and traces there instead of over the user's terminal and the delta stream. Python
    code keeps writing to the real stdout and stderr afterwards. ``None``: no change."""
    if log is None:
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = (os.dup(1), os.dup(2))
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def python_error(text: str) -> str | None:
    """The exception line of the last Python traceback in ``text`` (a JVM exception's
    message or log that carries a worker's traceback), e.g. ``ImportError: ...``."""
    lines = text.splitlines()
    found: str | None = None
    for i, line in enumerate(lines):
        if "Traceback (most recent call last):" not in line:
            continue
        for nxt in lines[i + 1:]:
            if not nxt.strip() or nxt[:1].isspace():
                continue
            if _EXCEPTION.match(nxt):
                found = nxt.strip()
            break
    return found


def append(log: str | None, text: str) -> None:
    """Append ``text`` to the log file (if any)."""
    if log is None or not text:
        return
    with contextlib.suppress(OSError), open(log, "a", encoding="utf-8") as f:
        f.write("\n" + text.rstrip("\n") + "\n")
