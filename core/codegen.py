"""One way in for the engine's generated code.

Every operator that specializes itself generates Python source and runs it with
:func:`define`. The source is kept in the namespace it ran in (under ``__source__``) so
that :mod:`core.native` can later translate everything reachable from an entry function
into one compiled module, and registered with :mod:`linecache` under a filename unique
to the definition (``<ivmflow-gen:apply G#3>``), so a traceback through generated code
shows the generated line (the entry goes when the definition's functions are collected).

What a compiled build may later replace (an entry point, a value made from the built
module, a global of a generated namespace) is registered once in a :class:`Bindings`
with a name and a setter; :meth:`Bindings.rebind` is the only way a build swaps it in.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FunctionType
from typing import Any, Protocol

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


# -- emitter: source fragments the generators repeat ------------------------------------
SMALL_BUCKET = 64
"""A set bucket of 2 to this many elements is a list: a list of 4 costs 96 bytes in
CPython, a set of 4 216, and a list of 30 some 300 where a set of 30 takes 1,240 (a
part's 30 lineitems in TPC-H Q9's index by part, a third of which had more than 32,
a dict of 1,100 bytes or more each at the bound of 32 before). Beyond it a set: an
element test in a list is a scan, at most this many comparisons of packed rows (a few
hundred nanoseconds). A set that shrinks to half of it is a list again. A list grows
by a copy one longer, not by ``append``: an appended list keeps room for more (a list
of 3 to 8 elements has room for 8), an exact one none (a list of 4 rows 96 bytes, not
128)."""


def set_add(indent: str, table: str, key: str, var: str, elem: str = "t",
            on_new: Sequence[str] = (), stored_key: str | None = None) -> list[str]:
    """Lines (at ``indent``) adding ``elem`` to the compact set bucket ``table[key]``
    through local ``var``: absent, the element is stored bare (a set of one costs 216
    bytes, the element a pointer; None, which reads as absent, goes in a set); a bare
    element and a second one make a list, a list past :data:`SMALL_BUCKET` elements a
    set. Adding an element already there changes nothing, as a set's ``add``.
    ``on_new`` (relative to the new-bucket branch) runs only when the key was absent.
    ``stored_key``: the expression a new bucket is stored under (a compact object equal
    to ``key``; later stores keep it, as a dict keeps the key it first took).
    Readers: ``operators.nodemaps.members``.

    >>> print("\\n".join(set_add("", "index", "k", "b", on_new=["seen(k)"])))
    b = index.get(k)
    if b is None:
        index[k] = t if t is not None else {t}
        seen(k)
    elif isinstance(b, list):
        if t not in b:
            if len(b) < 64:
                index[k] = b + [t]
            else:
                index[k] = {*b, t}
    elif isinstance(b, set):
        b.add(t)
    elif b != t:
        index[k] = [b, t]
    """
    inner = indent + "    "
    return [f"{indent}{var} = {table}.get({key})", f"{indent}if {var} is None:",
            f"{inner}{table}[{stored_key or key}] = {elem} if {elem} is not None "
            f"else {{{elem}}}",
            *(inner + ln for ln in on_new),
            f"{indent}elif isinstance({var}, list):", f"{inner}if {elem} not in {var}:",
            f"{inner}    if len({var}) < {SMALL_BUCKET}:",
            f"{inner}        {table}[{key}] = {var} + [{elem}]",
            f"{inner}    else:", f"{inner}        {table}[{key}] = {{*{var}, {elem}}}",
            f"{indent}elif isinstance({var}, set):", f"{inner}{var}.add({elem})",
            f"{indent}elif {var} != {elem}:", f"{inner}{table}[{key}] = [{var}, {elem}]"]


def set_discard(indent: str, table: str, key: str, var: str, elem: str = "t",
                on_empty: Sequence[str] = ()) -> list[str]:
    """Lines (at ``indent``) removing ``elem`` (present) from the compact set bucket
    ``table[key]`` through local ``var``: a list or set of two or more loses it (one
    left, not None, is stored bare again; a set down to half of :data:`SMALL_BUCKET` is
    a list again), anything else was the last element, and the key is deleted;
    ``on_empty`` (relative to that branch) runs only then: the reverse of
    :func:`set_add`.

    >>> print("\\n".join(set_discard("", "index", "k", "b")))
    b = index[k]
    if isinstance(b, list):
        if t in b:
            b.remove(t)
            if len(b) == 1:
                b_one = b[0]
                index[k] = b_one if b_one is not None else {b_one}
    elif isinstance(b, set) and len(b) > 1:
        b.discard(t)
        if len(b) == 1:
            b_one = next(iter(b))
            if b_one is not None:
                index[k] = b_one
        elif len(b) <= 32:
            index[k] = list(b)
    else:
        del index[k]
    """
    inner = indent + "    "
    one = f"{var}_one"
    return [f"{indent}{var} = {table}[{key}]",
            f"{indent}if isinstance({var}, list):", f"{inner}if {elem} in {var}:",
            f"{inner}    {var}.remove({elem})", f"{inner}    if len({var}) == 1:",
            f"{inner}        {one} = {var}[0]",
            f"{inner}        {table}[{key}] = {one} if {one} is not None else {{{one}}}",
            f"{indent}elif isinstance({var}, set) and len({var}) > 1:",
            f"{inner}{var}.discard({elem})", f"{inner}if len({var}) == 1:",
            f"{inner}    {one} = next(iter({var}))", f"{inner}    if {one} is not None:",
            f"{inner}        {table}[{key}] = {one}",
            f"{inner}elif len({var}) <= {SMALL_BUCKET // 2}:",
            f"{inner}    {table}[{key}] = list({var})",
            f"{indent}else:", f"{inner}del {table}[{key}]",
            *(inner + ln for ln in on_empty)]


class Build(Protocol):
    """What :meth:`Bindings.rebind` reads of a compiled build
    (:class:`core.native.NativeBuild`)."""

    @property
    def entries(self) -> Sequence[Callable[..., Any]]:
        """The compiled entries, in the order :meth:`Bindings.entries` gave them."""
        ...

    def namespace(self, env: object) -> Any:
        """The compiled stand-in of namespace ``env`` (item assignment), or None."""
        ...


@dataclass
class _Binding:
    setter: Callable[[Any], None]
    make: Callable[[Any], Any] | None  # build -> the value (None: a compiled entry)
    entry: Callable[..., Any] | None = None


class Bindings:
    """The one interface through which generated code is (re)bound: each entry point a
    compiled build may replace, and each value or namespace global it patches, is
    registered once with a name and a setter; :meth:`rebind` calls every setter, in
    the order registered, with its replacement from the build.

    >>> calls = []
    >>> b = Bindings()
    >>> env = define("def f(x):\\n    return x", "<example>", {})
    >>> b.entry("f", env["f"], calls.append)
    >>> b.value("sort", calls.append, lambda build: "C sort")
    >>> class FakeBuild:
    ...     entries = ["compiled f"]
    ...     def namespace(self, env): return None
    >>> b.rebind(FakeBuild()); calls[1:]
    ['compiled f', 'C sort']
    """

    def __init__(self) -> None:
        self._bindings: dict[str, _Binding] = {}

    def _add(self, name: str, binding: _Binding) -> None:
        if name in self._bindings:
            msg = f"generated binding {name!r} registered twice"
            raise ValueError(msg)
        self._bindings[name] = binding

    def entry(self, name: str, fn: Callable[..., Any],
              setter: Callable[[Callable[..., Any]], None]) -> None:
        """Bind generated entry point ``fn`` now (``setter(fn)``); a build starts from it
        (:meth:`entries`) and :meth:`rebind` sets its compiled form."""
        self._add(name, _Binding(setter, None, fn))
        setter(fn)

    def value(self, name: str, setter: Callable[[Any], None],
              make: Callable[[Any], Any]) -> None:
        """On :meth:`rebind`, ``setter(make(build))`` (a value made from the build)."""
        self._add(name, _Binding(setter, make))

    def global_(self, name: str, env: dict[str, Any], key: str,
                make: Callable[[Any], Any]) -> None:
        """On :meth:`rebind`, global ``key`` of generated namespace ``env`` becomes
        ``make(build)``, in the build's stand-in of ``env`` (where it compiled ``env``)."""

        def setter(pair: tuple[Any, Any]) -> None:
            namespace, value = pair
            if namespace is not None:
                namespace[key] = value

        self._add(name, _Binding(setter, lambda build: (build.namespace(env), make(build))))

    def entries(self) -> list[Callable[..., Any]]:
        """The registered entry points, in the order registered."""
        return [b.entry for b in self._bindings.values() if b.entry is not None]

    def rebind(self, build: Build) -> None:
        """Swap in ``build`` (made from :meth:`entries`): every setter, in order."""
        entries = list(build.entries)
        if len(entries) != len(self.entries()):
            msg = f"a build of {len(entries)} entries for {len(self.entries())} registered"
            raise ValueError(msg)
        compiled = iter(entries)
        for binding in self._bindings.values():
            if binding.entry is not None:
                binding.setter(next(compiled))
            else:
                assert binding.make is not None
                binding.setter(binding.make(build))
