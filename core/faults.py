"""Deterministic fault points: stop this run at a named place, for the fault tests.

A test sets ``IVMFLOW_FAULT`` and starts ``ivmflow run``; when the named point is
reached for the N-th time, the run's own process (the ``ivmflow`` command, or the
process that set :data:`TARGET_ENV`) receives the signal, as from a user's Ctrl-C, a
pod stop or ``kill -9``. The fault tests use these instead of sleeping for a random time
before a kill: the point, and so the state that is interrupted, is the same on every run.

Syntax: ``POINT[@N][:SIGNAL]``, several separated by ``,``; ``N`` defaults to 1 and the
signal to ``SIGKILL`` (``KILL``, ``TERM``, ``INT`` and the ``SIG`` forms are accepted).
Points (each a call of :func:`fault_point`):

``read``
    after the N-th update record is read from the source (before it is applied)
``epoch``
    after the N-th epoch is closed, before its delta is written
``sink.write``
    a sink has written the N-th epoch's rows but not yet its commit record
``sink.commit``
    after the N-th epoch's commit record is written

With ``IVMFLOW_FAULT_AWAIT`` set to a glob pattern, a fault whose count is reached
fires at the first later pass once a file matches it (each pass before sleeps
:data:`AWAIT_PAUSE_S`, so a slow checkpoint can complete): a kill after a Flink job's
first retained checkpoint is ``read@N`` with ``IVMFLOW_FAULT_AWAIT=<dir>/*/chk-*/_metadata``.

A SIGKILL goes to the target's whole process group when the target leads one (a JVM
started by the run dies with it, as in a container); SIGTERM and SIGINT go to the target
process only, whose handler then stops the run at the last whole epoch.

Example:
    >>> parse_faults("read@500:TERM,sink.write")
    (Fault(point='read', count=500, signal=15), Fault(point='sink.write', count=1, signal=9))
    >>> fault_point("read")  # no IVMFLOW_FAULT set: nothing happens
"""

from __future__ import annotations

import glob
import os
import signal
import time
from dataclasses import dataclass

__all__ = [
    "AWAIT_ENV", "FAULT_ENV", "POINTS", "TARGET_ENV", "Fault", "arm", "fault_point", "faults_armed",
    "parse_faults",
]

FAULT_ENV = "IVMFLOW_FAULT"
"""The environment variable holding the faults to inject."""

TARGET_ENV = "IVMFLOW_FAULT_TARGET"
"""The pid that receives the signal (set by :func:`arm`; inherited by worker processes,
so a fault reached in a Spark or Flink worker stops the run that started it)."""

POINTS = ("read", "epoch", "sink.write", "sink.commit")

AWAIT_ENV = "IVMFLOW_FAULT_AWAIT"
"""A glob pattern: faults fire only once a file matches it (see the module docstring)."""

AWAIT_PAUSE_S = 0.1
"""The pause of each pass of a due fault's point while :data:`AWAIT_ENV` matches no file."""

_SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "INT": signal.SIGINT}


@dataclass(frozen=True)
class Fault:
    """Send ``signal`` to the run when ``point`` is reached for the ``count``-th time."""

    point: str
    count: int
    signal: int


def parse_faults(text: str) -> tuple[Fault, ...]:
    """The faults of an ``IVMFLOW_FAULT`` value (syntax in the module docstring).

    >>> parse_faults("epoch@2:SIGINT")
    (Fault(point='epoch', count=2, signal=2),)
    >>> parse_faults("nowhere")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: IVMFLOW_FAULT: unknown fault point 'nowhere' (expected one of read, ...)
    """
    faults = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        where, _, sig = item.partition(":")
        point, _, count = where.partition("@")
        if point not in POINTS:
            msg = (f"{FAULT_ENV}: unknown fault point {point!r} "
                   f"(expected one of {', '.join(POINTS)})")
            raise ValueError(msg)
        if count and not (count.isdigit() and int(count) >= 1):
            msg = f"{FAULT_ENV}: expected a count of 1 or more after '@', found {count!r}"
            raise ValueError(msg)
        name = sig.upper().removeprefix("SIG") if sig else "KILL"
        if name not in _SIGNALS:
            msg = f"{FAULT_ENV}: expected KILL, TERM or INT after ':', found {sig!r}"
            raise ValueError(msg)
        faults.append(Fault(point, int(count or 1), int(_SIGNALS[name])))
    return tuple(faults)


_armed: dict[str, list[Fault]] | None = None
_hits: dict[str, int] = {}
_waiting: set[Fault] = set()
"""Faults whose count was reached while :data:`AWAIT_ENV` matched no file."""


def arm() -> None:
    """Read :data:`FAULT_ENV` (called once by the command line; a worker process arms on
    its first :func:`fault_point`), and name this process as the target unless a parent
    already did."""
    global _armed
    _armed = {}
    _hits.clear()
    _waiting.clear()
    text = os.environ.get(FAULT_ENV, "")
    if not text:
        return
    for fault in parse_faults(text):
        _armed.setdefault(fault.point, []).append(fault)
    os.environ.setdefault(TARGET_ENV, str(os.getpid()))


def faults_armed() -> bool:
    """Whether any fault is armed (a hot loop calls :func:`fault_point` only then)."""
    if _armed is None:
        arm()
    return bool(_armed)


def fault_point(point: str) -> None:
    """Count a pass through ``point``; fire the fault armed for this count, if any."""
    if _armed is None:
        arm()
    assert _armed is not None
    faults = _armed.get(point)
    if not faults:
        return
    n = _hits[point] = _hits.get(point, 0) + 1
    for fault in faults:
        if fault.count == n or (fault.count < n and fault in _waiting):
            if _awaited():
                _waiting.discard(fault)
                _fire(fault.signal)
            else:
                _waiting.add(fault)
                time.sleep(AWAIT_PAUSE_S)


def _awaited() -> bool:
    """Whether :data:`AWAIT_ENV` is unset or a file matches it."""
    pattern = os.environ.get(AWAIT_ENV)
    return not pattern or next(iter(glob.iglob(pattern)), None) is not None


def _fire(sig: int) -> None:
    target = int(os.environ.get(TARGET_ENV) or os.getpid())
    if sig == signal.SIGKILL:
        try:
            if os.getpgid(target) == target:
                os.killpg(target, sig)
        except OSError:
            pass
    os.kill(target, sig)
