"""One way in for the engine's generated code.

Every operator that specializes itself generates Python source and runs it with
:func:`define`. The source is kept in the namespace it ran in (under ``__source__``) so
that :mod:`core.native` can later translate everything reachable from an entry function
into one compiled module; nothing else reads it.

Example:
    >>> env = define("def double(x):\\n    return 2 * x", "<example>", {})
    >>> env["double"](21)
    42
    >>> env["__source__"].splitlines()[0]
    'def double(x):'
"""

from __future__ import annotations

from typing import Any

SOURCE_KEY = "__source__"
"""Where :func:`define` keeps the source text in the namespace."""


def define(source: str, filename: str, env: dict[str, Any]) -> dict[str, Any]:
    """Run generated ``source`` (function definitions) in ``env``; return ``env``.

    ``filename`` names the code in tracebacks (``<apply sj_G1>``)."""
    exec(compile(source, filename, "exec"), env)  # noqa: S102
    env[SOURCE_KEY] = source
    return env
