"""One way in for the engine's generated code.

Every operator that specializes itself generates Python source and runs it with
:func:`define`. The source is kept in the namespace it ran in (under ``__source__``) so
that :mod:`core.native` can later translate everything reachable from an entry function
into one compiled module, and registered with :mod:`linecache` under a filename unique
to the definition (``<ivmflow-gen:apply G#3>``), so a traceback through generated code
shows the generated line (the entry goes when the definition's functions are collected).

Example:
    >>> env = define("def double(x):\\n    return 2 * x", "<example>", {})
    >>> env["double"](21)
    42
    >>> env["__source__"].splitlines()[0]
    'def double(x):'
    >>> import linecache
    >>> code = env["double"].__code__
    >>> code.co_filename.startswith("<ivmflow-gen:example#")
    True
    >>> linecache.getline(code.co_filename, 2).strip()
    'return 2 * x'
"""

from __future__ import annotations

import itertools
import linecache
import weakref
from types import FunctionType
from typing import Any

SOURCE_KEY = "__source__"
"""Where :func:`define` keeps the source text in the namespace."""

_SERIAL = itertools.count(1)


def define(source: str, filename: str, env: dict[str, Any]) -> dict[str, Any]:
    """Run generated ``source`` (function definitions) in ``env``; return ``env``.

    ``filename`` names the code (``<apply sj_G1>``); tracebacks show it with a serial
    number (``<ivmflow-gen:apply sj_G1#7>``) and the generated line."""
    unique = f"<ivmflow-gen:{filename.strip('<>')}#{next(_SERIAL)}>"
    code = compile(source, unique, "exec")
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    # (mtime None: linecache.checkcache keeps the entry, as it does a loader's)
    linecache.cache[unique] = (len(source), None, lines, unique)
    exec(code, env)  # noqa: S102
    env[SOURCE_KEY] = source
    for value in env.values():
        if isinstance(value, FunctionType) and value.__code__.co_filename == unique:
            weakref.finalize(value, linecache.cache.pop, unique, None)
            break
    return env
