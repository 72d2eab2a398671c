"""The runners, one package each (``local``, ``spark``, ``flink``), each with its own
sources and Kafka glue beside it. Every runner hosts the same engines and operators and
holds no query logic.

A runner package registers itself when imported (``@register("name")`` on a function
taking a :class:`~dataflow.runners.run.RunContext`); :func:`get` imports the package on first
use, so a runner whose extra is not installed costs nothing until it is asked for, and
then fails with the extra to install. The names are the subpackages found here.

Example:
    >>> names()
    ('flink', 'local', 'spark')
    >>> get("local").__name__
    'run_local'
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.errors import UnavailableError

if TYPE_CHECKING:
    from dataflow.runners.run import RunContext

__all__ = ["Runner", "get", "names", "register"]

Runner = Callable[["RunContext"], Any]
"""Runs a whole run: reads ``ctx.options``' source, writes ``ctx.outputs``, updates
``ctx.progress.stats``; returns when the source ends or a stop is requested."""

_REGISTRY: dict[str, Runner] = {}


def names() -> tuple[str, ...]:
    """The runners of this installation (the subpackages of this package)."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg))


def register(name: str) -> Callable[[Runner], Runner]:
    """Decorator: register a runner function under ``name``."""

    def add(runner: Runner) -> Runner:
        _REGISTRY[name] = runner
        return runner

    return add


def get(name: str) -> Runner:
    """The runner called ``name`` (its package is imported and registers itself)."""
    if name not in _REGISTRY:
        if name not in names():
            msg = (f"the {name} runner is not available in this build "
                   f"(available: {', '.join(names())})")
            raise UnavailableError(msg)
        importlib.import_module(f"{__name__}.{name}")
    return _REGISTRY[name]
