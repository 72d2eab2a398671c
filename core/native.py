"""Optional native build of the engine's generated code (Cython + a C compiler).

The engine generates small Python functions per query (node applies, semi-join
updates, liveness walks, delta walks, the typed input path); they call each other
through their namespaces' globals and read and write the state maps held there.
:func:`nativize` translates everything reachable from entry functions into one Cython
extension class, ``Compiled``, whose instance holds one engine's globals:

* the namespaces' dicts are typed attributes (``cdef dict``), so ``get``, item
  assignment, ``del`` and ``in`` are direct C-API calls, and a global bound to a dict's
  ``get`` becomes a ``get`` call on that dict;
* a generated function calling another one is a C method call, not a Python call
  (each also has a Python-callable ``py...`` wrapper: the entries, and any function
  the code passes around as a value);
* locals used only as sets (``add``/``discard``) or dicts are typed so.

The instance works on the very same state objects (nothing is copied), so compiled and
interpreted code can run side by side. A global that the engine rebinds later (``acc``,
the epoch's accumulator) is rebound in the instance through :class:`NativeNamespace`.
Generated code outside the subset (``*args``, defaults, lambdas, nested functions,
``global``) is refused with :class:`NativeBuildError`, never compiled half-way.

Every built module starts with the hand-written Cython of ``core/native_sort.pyx``
(the C sort of an epoch's changes, the delta made in C; package data, read here).

The built module is cached under ``$IVMFLOW_NATIVE_CACHE`` (default
``~/.cache/ivmflow/native``) by the hash of its text, which names no instance data:
every view of the same query shape after the first loads it (and gets its own
instance). :func:`native_available` says why a build cannot run here (no Cython, no C
compiler, no Python headers).

Whether a view compiles (:func:`native_mode`): ``auto`` by default, compiled where a build
can run and interpreted otherwise, a build that fails there falling back to the
interpreter with a :class:`NativeFallbackWarning` (one line); ``on``
(``native=True``, ``--native``, ``IVMFLOW_NATIVE=1``) fails with the reason instead;
``off`` (``native=False``, ``--no-native``, ``IVMFLOW_NATIVE=0``) never compiles.

Example (skipped where Cython or a compiler is missing):
    >>> from core.codegen import define
    >>> counts = {}
    >>> env = define("def bump(k):\\n    counts[k] = counts_get(k, 0) + 1",
    ...              "<example>", {"counts": counts, "counts_get": counts.get})
    >>> if native_available() is None:
    ...     built = nativize([env["bump"]])
    ...     built.entries[0]("a"); built.entries[0]("a")
    ... else:
    ...     env["bump"]("a"); env["bump"]("a")
    >>> counts
    {'a': 2}
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import BuiltinFunctionType, FunctionType, ModuleType
from typing import Any

from core.codegen import SOURCE_KEY
from core.errors import IvmflowError, UsageError

NATIVE_ENV = "IVMFLOW_NATIVE"
"""Environment variable read when a view is given no ``native`` flag (see
:func:`native_mode`): ``1`` requires the compiled build, ``0`` never compiles, unset
(or ``auto``) compiles where it can."""

_BUILTIN_NAMES = frozenset(dir(builtins))
_SELF = "_ivs"
"""The instance parameter of the compiled methods."""
_LOCK = threading.Lock()
_LOADED: dict[str, ModuleType] = {}
SORT_PYX = Path(__file__).with_name("native_sort.pyx")
"""The hand-written part of every built module (the C sort, the delta made in C), a
Cython file shipped with the package; its text is part of the module's, so of its
cache key."""


class NativeBuildError(IvmflowError, RuntimeError):
    """The generated code could not be translated or compiled (the message says which
    step and shows the compiler's output), or a required build cannot run here."""


class NativeFallbackWarning(RuntimeWarning):
    """A view in ``auto`` mode whose native build failed runs interpreted (same
    results); the message is one line (the compiler's output goes to a log file it
    names)."""


_MODES = {"1": "on", "true": "on", "yes": "on", "on": "on",
          "0": "off", "false": "off", "no": "off", "off": "off", "": "auto", "auto": "auto"}


def native_mode(flag: bool | None) -> str:
    """``"on"`` (``flag`` True: compiled or an error), ``"off"`` (False: interpreted) or,
    without a flag, what ``$IVMFLOW_NATIVE`` says: ``1`` on, ``0`` off, unset or
    ``auto``: ``"auto"`` (compiled where a build can run, else interpreted).

    >>> native_mode(True), native_mode(False)
    ('on', 'off')
    """
    if flag is not None:
        return "on" if flag else "off"
    value = os.environ.get(NATIVE_ENV, "")
    mode = _MODES.get(value.strip().lower())
    if mode is None:
        msg = f"{NATIVE_ENV}={value!r}: expected 1 (compiled), 0 (interpreted) or auto"
        raise UsageError(msg)
    return mode


def first_line(err: BaseException) -> str:
    """``err``'s first line (an unexpected error's type first).

    >>> first_line(NativeBuildError("cython failed on m.pyx:\\n...")), first_line(KeyError(1))
    ('cython failed on m.pyx', 'KeyError: 1')
    """
    text = str(err) if isinstance(err, IvmflowError) else f"{type(err).__name__}: {err}"
    return text.partition("\n")[0].rstrip(":")


def one_line(err: BaseException) -> str:
    """:func:`first_line`; when ``err`` has more lines (a compiler's output), they go
    to a log file that the line names."""
    text = str(err)
    if not text.partition("\n")[2].strip():
        return first_line(err)
    fd, log = tempfile.mkstemp(prefix="ivmflow-native-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return f"{first_line(err)} (full output in {log})"


def native_available() -> str | None:
    """``None`` when a native build can run here, else why not (what to install)."""
    try:
        import Cython  # noqa: F401
    except ImportError:
        return "Cython is not installed (pip install 'ivmflow[native]')"
    if _compiler() is None:
        return "no C compiler found (set CC or install gcc)"
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        return "the Python headers are missing (Debian: python3-dev)"
    return None


def _compiler() -> str | None:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    exe = cc.split()[0]
    return cc if shutil.which(exe) else None


def cache_dir() -> Path:
    """Where built modules are kept (``$IVMFLOW_NATIVE_CACHE`` or the user cache)."""
    root = os.environ.get("IVMFLOW_NATIVE_CACHE")
    if root:
        return Path(root)
    return Path.home() / ".cache" / "ivmflow" / "native"


# -- discovery ---------------------------------------------------------------------------
@dataclass
class _Record:
    """One generated namespace: its source, its env and its index in the module."""

    index: int
    env: dict[str, Any]
    tree: ast.Module
    functions: dict[str, FunctionType]


def _generated(value: Any) -> bool:
    return (isinstance(value, FunctionType) and SOURCE_KEY in value.__globals__
            and value.__globals__.get(value.__name__) is value)


def _collect(entries: Sequence[Callable[..., Any]]) -> list[_Record]:
    """The namespaces reachable from ``entries`` through generated functions."""
    records: dict[int, _Record] = {}
    stack: list[Any] = list(entries)
    while stack:
        fn = stack.pop()
        if not _generated(fn):
            continue
        env = fn.__globals__
        if id(env) in records:
            continue
        tree = ast.parse(env[SOURCE_KEY])
        functions: dict[str, FunctionType] = {}
        for stmt in tree.body:
            if not isinstance(stmt, ast.FunctionDef):
                msg = (
                    f"generated code holds a {type(stmt).__name__} "
                                       "outside a function"
                )
                raise NativeBuildError(msg)
            functions[stmt.name] = env[stmt.name]
        records[id(env)] = _Record(len(records), env, tree, functions)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in env:
                stack.append(env[node.id])
    return list(records.values())


# -- translation -------------------------------------------------------------------------
def _self_attr(name: str) -> ast.expr:
    return ast.Attribute(ast.Name(_SELF, ast.Load()), name, ast.Load())


def _dict_get_of(value: Any) -> dict[Any, Any] | None:
    """The dict whose bound ``get`` ``value`` is, else None."""
    if isinstance(value, BuiltinFunctionType) and value.__name__ == "get" \
            and type(getattr(value, "__self__", None)) is dict:
        owner: dict[Any, Any] = getattr(value, "__self__")  # noqa: B009
        return owner
    return None


@dataclass
class _Global:
    cname: str
    ctype: str  # "dict" or "object"
    value: Any


class _Translator:
    def __init__(self, records: list[_Record], typed_rows: bool = True) -> None:
        self.records = records
        self.typed_rows = typed_rows
        """Whether rows indexed by constants are typed ``tuple`` (not where a join
        node's tuples may be packed rows, :mod:`core.native_rows`)."""
        self.by_fn: dict[int, str] = {}
        for r in records:
            for name, fn in r.functions.items():
                self.by_fn[id(fn)] = f"_ivf{r.index}_{name}"
        self.globals: list[_Global] = []
        self.slots: dict[tuple[int, str], int] = {}  # (record, env name) -> global

    def global_of(self, r: _Record, name: str) -> ast.expr:
        """The expression standing for global ``name`` of record ``r`` (an attribute of
        the instance; a generated function as a value is its Python-callable wrapper)."""
        value = r.env[name]
        cfn = self.by_fn.get(id(value))
        if cfn is not None:
            return _self_attr("py" + cfn)
        owner = _dict_get_of(value)
        if owner is not None:
            slot = self._slot(r, name, "dict", owner)
            return ast.Attribute(_self_attr(slot), "get", ast.Load())
        ctype = "dict" if type(value) is dict else "object"
        return _self_attr(self._slot(r, name, ctype, value))

    def callee_of(self, r: _Record, name: str) -> ast.expr | None:
        """The C method a call of global ``name`` goes to, if it is generated code."""
        if name not in r.env:
            return None
        cfn = self.by_fn.get(id(r.env[name]))
        return None if cfn is None else _self_attr(cfn)

    def _slot(self, r: _Record, name: str, ctype: str, value: Any) -> str:
        key = (r.index, name)
        if key not in self.slots:
            self.slots[key] = len(self.globals)
            self.globals.append(_Global(f"_ivg{r.index}_{name}", ctype, value))
        return self.globals[self.slots[key]].cname

    def function(self, r: _Record, fdef: ast.FunctionDef) -> list[str]:
        args = fdef.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs \
                or not all(isinstance(d, ast.Constant) for d in args.defaults):
            msg = f"{fdef.name}: only plain positional parameters (constant defaults)"
            raise NativeBuildError(msg)
        params = [a.arg for a in args.args]
        defaults = {p: f"={ast.unparse(d)}"
                    for p, d in zip(params[len(params) - len(args.defaults):], args.defaults)}
        if _SELF in params:
            msg = f"{fdef.name}: a parameter is named {_SELF}"
            raise NativeBuildError(msg)
        local = set(params)
        for node in ast.walk(fdef):
            if isinstance(node, (ast.Global, ast.Nonlocal, ast.Lambda, ast.FunctionDef,
                                 ast.Yield, ast.YieldFrom, ast.AsyncFunctionDef)) \
                    and node is not fdef:
                msg = f"{fdef.name}: unsupported {type(node).__name__}"
                raise NativeBuildError(msg)
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                local.add(node.id)
        # ``get = acc.get``: a local alias of a global dict's get is that dict's get.
        aliases: dict[str, ast.expr] = {}
        body = []
        for stmt in fdef.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                    and isinstance(stmt.targets[0], ast.Name) \
                    and isinstance(stmt.value, ast.Attribute) and stmt.value.attr == "get" \
                    and isinstance(stmt.value.value, ast.Name) \
                    and stmt.value.value.id not in local \
                    and type(r.env.get(stmt.value.value.id)) is dict \
                    and self._assigned_once(fdef, stmt.targets[0].id):
                owner = self.global_of(r, stmt.value.value.id)
                aliases[stmt.targets[0].id] = ast.Attribute(owner, "get", ast.Load())
                continue
            body.append(stmt)
        local -= set(aliases)
        kinds = self._local_kinds(fdef, local - set(params))
        translator = self

        class Rename(ast.NodeTransformer):
            def visit_Call(self, node: ast.Call) -> ast.expr:
                func = node.func
                if isinstance(func, ast.Name) and func.id not in local \
                        and func.id not in aliases:
                    callee = translator.callee_of(r, func.id)
                    if callee is not None:
                        node.func = callee
                        node.args = [self.visit(a) for a in node.args]
                        node.keywords = [self.visit(k) for k in node.keywords]
                        return node
                return self.generic_visit(node)  # type: ignore[return-value]

            def visit_Name(self, node: ast.Name) -> ast.expr:
                if node.id in aliases:
                    return aliases[node.id]
                if node.id in local or node.id not in r.env:
                    if node.id not in local and node.id not in _BUILTIN_NAMES:
                        msg = f"{fdef.name}: unbound name {node.id!r}"
                        raise NativeBuildError(msg)
                    return node
                return translator.global_of(r, node.id)

        cname = f"_ivf{r.index}_{fdef.name}"
        rows = self._tuple_vars(fdef, params) if self.typed_rows else set()
        sig = ", ".join([_SELF, *(("tuple " if p in rows else "object ") + p
                                  + defaults.get(p, "") for p in params)])
        lines = [f"    cdef object {cname}({sig}):"]
        for name in sorted(kinds):
            lines.append(f"        cdef {kinds[name]} {name}")
        for name in sorted(rows - set(params) - set(kinds)):
            lines.append(f"        cdef tuple {name}")
        for stmt in body:
            new = ast.fix_missing_locations(Rename().visit(stmt))
            lines += ["        " + line for line in ast.unparse(new).splitlines()]
        if not body:
            lines.append("        pass")
        plain = ", ".join(params)
        wrapper = ", ".join([_SELF, *(p + defaults.get(p, "") for p in params)])
        lines += ["", f"    def py{cname}({wrapper}):",
                  f"        return {_SELF}.{cname}({plain})"]
        return lines

    @staticmethod
    def _assigned_once(fdef: ast.FunctionDef, name: str) -> bool:
        stores = [n for n in ast.walk(fdef) if isinstance(n, ast.Name) and n.id == name
                  and not isinstance(n.ctx, ast.Load)]
        return len(stores) == 1

    @staticmethod
    def _tuple_vars(fdef: ast.FunctionDef, params: list[str]) -> set[str]:
        """Parameters never rebound, and locals bound only as ``for`` targets, that are
        indexed by integer constants (``t[1]``): rows and composite keys, always tuples
        in the engine, typed so (indexing is then a direct slot read; a non-tuple fails
        loudly at the call or the loop)."""
        indexed = {n.value.id for n in ast.walk(fdef)
                   if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
                   and isinstance(n.slice, ast.Constant) and type(n.slice.value) is int}
        stores: dict[str, int] = {}
        loops: dict[str, int] = {}
        for n in ast.walk(fdef):
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                stores[n.id] = stores.get(n.id, 0) + 1
            elif isinstance(n, ast.For):
                # (``for t, m in group.items()``: each name of a flat tuple target)
                targets = n.target.elts if isinstance(n.target, ast.Tuple) else [n.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        loops[target.id] = loops.get(target.id, 0) + 1
        typed = {p for p in params if p in indexed and p not in stores}
        typed |= {v for v in loops.keys() & indexed
                  if v not in params and stores[v] == loops[v]}
        return typed

    @staticmethod
    def _local_kinds(fdef: ast.FunctionDef, names: set[str]) -> dict[str, str]:
        """Locals used only as mutable sets or only as dicts, typed so (their other
        uses, tests and iteration, work on any type); not a local whose type the code
        tests (``isinstance(b, set)``: a compact bucket, a set or one bare tuple)."""
        methods: dict[str, set[str]] = {}
        tested: set[str] = set()
        for node in ast.walk(fdef):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in names:
                methods.setdefault(node.value.id, set()).add(node.attr)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "isinstance" and node.args \
                    and isinstance(node.args[0], ast.Name):
                tested.add(node.args[0].id)
        kinds: dict[str, str] = {}
        for name, used in methods.items():
            if name in tested:
                continue
            if used <= {"add", "discard"}:
                kinds[name] = "set"
            elif used <= {"get"}:
                kinds[name] = "dict"
        return kinds

    def module(self) -> str:
        """The Cython source: one final extension class whose instance holds one engine's
        globals (two views of a query share the module, never the state)."""
        bodies: list[str] = []
        for r in self.records:
            for stmt in r.tree.body:
                assert isinstance(stmt, ast.FunctionDef)
                bodies += self.function(r, stmt)
                bodies.append("")
        out = ["# cython: language_level=3",
               "# cython: infer_types=False, binding=False",
               "# generated by ivmflow core.native; do not edit",
               "cimport cython", SORT_PYX.read_text(encoding="utf-8"), "", "@cython.final",
               "cdef class Compiled:"]
        out += [f"    cdef {g.ctype} {g.cname}" for g in self.globals]
        out += ["", f"    def bind({_SELF}, list values):"]
        out += [f"        {_SELF}.{g.cname} = values[{i}]" for i, g in enumerate(self.globals)]
        out.append("        pass")
        out += ["", f"    def rebind({_SELF}, int slot, object value):"]
        for i, g in enumerate(self.globals):
            out += [f"        if slot == {i}:", f"            {_SELF}.{g.cname} = value",
                    "            return"]
        out += ["        raise KeyError(slot)", ""]
        return "\n".join(out + bodies)



MAPS_PYX = Path(__file__).with_name("native_maps.pyx")
"""Maps whose entries live in native memory (``DigestCounts``: the delete check's digest
multiset), a Cython file shipped with the package and built alone by
:func:`native_maps`."""


def native_maps(on_compile: Callable[[], None] | None = None) -> ModuleType:
    """The built module of ``core/native_maps.pyx`` (compiled on first use, then cached
    as the generated modules are). Raises :class:`NativeBuildError` where no build can
    run (:func:`native_available`).

    >>> if native_available() is None:
    ...     counts = native_maps().DigestCounts()
    ...     counts[2**63] = 2
    ...     print(counts.get(2**63, 0), counts.nbytes)
    ... else:
    ...     print(2, 64)
    2 64
    """
    module, _seconds = _build(MAPS_PYX.read_text(), on_compile)
    return module


ROWS_PYX = Path(__file__).with_name("native_rows.pyx")
"""Join-node tuples packed in native fields (``PackedRow1`` ... ``PackedRow8``,
``packer``), a Cython file shipped with the package and built alone by
:func:`native_rows`, its row class once per size of :data:`ROW_SIZES`."""
ROW_SIZES = (1, 3, 5, 7, 8)
"""The numbers of fields of the packed row classes (32, 48, 64, 80 and 96 bytes a row:
the most values each allocator size class holds)."""


def native_rows(on_compile: Callable[[], None] | None = None) -> ModuleType:
    """The built module of ``core/native_rows.pyx``, as :func:`native_maps` builds its.

    >>> if native_available() is None:
    ...     from decimal import Decimal
    ...     row = native_rows().packer(True)((600000, Decimal("23721.9360"), "x"))
    ...     print(type(row).__name__, row[1], row == (600000, Decimal("23721.9360"), "x"))
    ... else:
    ...     print("PackedRow3 23721.9360 True")
    PackedRow3 23721.9360 True
    """
    module, _seconds = _build(rows_source(ROWS_PYX.read_text()), on_compile)
    return module


def rows_source(template: str, sizes: tuple[int, ...] = ROW_SIZES) -> str:
    """``native_rows.pyx``'s text with each section between ``# --- per size ---`` and
    ``# --- end per size ---`` written once per size (smallest first), ``ROW_CLASS`` and
    ``ROW_FIELDS`` replaced, and ``ROW_CLASSES`` (the classes) and ``ROW_MAX`` (the
    largest size) replaced everywhere.

    >>> print(rows_source("# --- per size ---\\nif n <= ROW_FIELDS: return ROW_CLASS\\n"
    ...                   "# --- end per size ---\\nkinds = (ROW_CLASSES,)  # ROW_MAX\\n",
    ...                   (1, 3)), end="")
    if n <= 1: return PackedRow1
    if n <= 3: return PackedRow3
    kinds = (PackedRow1, PackedRow3,)  # 3
    """
    text = (template.replace("ROW_CLASSES", ", ".join(f"PackedRow{n}" for n in sizes))
            .replace("ROW_MAX", str(max(sizes))))
    if text.count("# --- per size ---") != text.count("# --- end per size ---"):
        msg = f"{ROWS_PYX.name}: a '# --- per size ---' section without its end marker"
        raise ValueError(msg)
    return _PER_SIZE.sub(lambda m: "".join(
        m[1].replace("ROW_CLASS", f"PackedRow{n}").replace("ROW_FIELDS", str(n))
        for n in sizes), text)


_PER_SIZE = re.compile(r"^[ \t]*# --- per size ---\n(.*?)^[ \t]*# --- end per size ---\n",
                       re.MULTILINE | re.DOTALL)


PARSE_PYX = Path(__file__).with_name("native_parse.pyx")
"""The update file's common lines parsed in C (``LineParser``), built alone by
:func:`native_parse`."""


def native_parse(on_compile: Callable[[], None] | None = None) -> ModuleType:
    """The built module of ``core/native_parse.pyx``, as :func:`native_maps` builds its.

    >>> if native_available() is None:
    ...     from core.records import EpochEnd, Update
    ...     parser = native_parse().LineParser({"G": [(0, 0, 9, 0, 0, int, None, 0)] * 2},
    ...                                        Update, EpochEnd)
    ...     print(parser.record("+,G,1,2\\n", "u.csv", 7))
    ... else:
    ...     print("Update(op='+', relation='G', row=(1, 2), mult=1, source='u.csv:7')")
    Update(op='+', relation='G', row=(1, 2), mult=1, source='u.csv:7')
    """
    module, _seconds = _build(PARSE_PYX.read_text(), on_compile)
    return module


def native_sorted_changes(module: ModuleType) -> Callable[[dict[Any, Any]], Any]:
    """:func:`core.consolidate.sorted_changes` done by ``module``'s C sort where the
    rows allow (tuples of one length of 64-bit ints), else by the general one."""
    from core.consolidate import sorted_changes

    fast = module.sorted_int_changes

    def sorted_changes_native(net: dict[Any, Any]) -> Any:
        out = fast(net)
        return sorted_changes(net) if out is None else out

    return sorted_changes_native


# -- building ----------------------------------------------------------------------------
def _module_name(text: str) -> str:
    key = hashlib.sha256((text + sys.version + _cython_version()).encode()).hexdigest()[:20]
    return f"ivmflow_native_{key}"


def _target(name: str) -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return cache_dir() / f"{name}{suffix}"


def is_built(text: str) -> bool:
    """Whether the module of Cython source ``text`` is loaded or in the cache (a view
    of that shape starts without compiling)."""
    name = _module_name(text)
    return name in _LOADED or _target(name).exists()


def _build(text: str, on_compile: Callable[[], None] | None = None
           ) -> tuple[ModuleType, float | None]:
    """The module of ``text`` and, if it had to be compiled here, the seconds that took
    (``on_compile`` is called first); ``None`` when it was loaded or cached."""
    name = _module_name(text)
    seconds: float | None = None
    with _LOCK:
        if name in _LOADED:
            return _LOADED[name], None
        root = cache_dir()
        root.mkdir(parents=True, exist_ok=True)
        target = _target(name)
        if not target.exists():
            if on_compile is not None:
                on_compile()
            start = time.monotonic()
            _compile(text, name, root, target)
            seconds = time.monotonic() - start
        spec = importlib.util.spec_from_file_location(name, target)
        if spec is None or spec.loader is None:
            msg = f"cannot load {target}"
            raise NativeBuildError(msg)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _LOADED[name] = module
        return module, seconds


def _cython_version() -> str:
    try:
        import Cython
    except ImportError:
        return "none"
    return str(getattr(Cython, "__version__", "unknown"))


def _compile(text: str, name: str, root: Path, target: Path) -> None:
    why = native_available()
    if why is not None:
        raise NativeBuildError(why)
    cc = _compiler()
    assert cc is not None
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        pyx = Path(tmp, f"{name}.pyx")
        pyx.write_text(text)
        csrc = Path(tmp, f"{name}.c")
        run = subprocess.run([sys.executable, "-m", "cython", "-3", str(pyx), "-o",
                              str(csrc)], capture_output=True, text=True, check=False)
        if run.returncode != 0:
            msg = f"cython failed on {pyx.name}:\n{run.stderr[-4000:]}"
            raise NativeBuildError(msg)
        obj = Path(tmp, f"{name}.so")
        cmd = [*cc.split(), "-shared", "-fPIC", "-O2", "-w",
               f"-I{sysconfig.get_paths()['include']}", str(csrc), "-o", str(obj)]
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            msg = f"{' '.join(cmd[:2])} failed:\n{run.stderr[-4000:]}"
            raise NativeBuildError(msg)
        # (rename is atomic: a concurrent builder of the same module wins or loses whole)
        os.replace(obj, target)


# -- binding -----------------------------------------------------------------------------
class NativeNamespace:
    """Stands for one generated namespace of a built module: assigning a global sets it
    in the module and in the interpreted namespace alike."""

    def __init__(self, instance: Any, env: dict[str, Any],
                 slots: dict[str, int]) -> None:
        self._instance = instance
        self._env = env
        self._slots = slots

    def __setitem__(self, name: str, value: Any) -> None:
        self._env[name] = value
        slot = self._slots.get(name)
        if slot is not None:
            owner = _dict_get_of(value)
            self._instance.rebind(slot, value if owner is None else owner)


@dataclass
class NativeBuild:
    """A built module, the ``instance`` holding this engine's globals, the compiled
    ``entries`` (in the order given) and, per interpreted namespace (by ``id``), the
    namespace to assign rebound globals to."""

    module: ModuleType
    instance: Any
    entries: list[Callable[..., Any]]
    namespaces: dict[int, NativeNamespace]
    built_seconds: float | None = None
    """Seconds the C build took here (first use of the query shape); None: cached."""

    def namespace(self, env: object) -> NativeNamespace | None:
        """The compiled stand-in of ``env``, if it was compiled."""
        return self.namespaces.get(id(env))


def native_source(entries: Sequence[Callable[..., Any]], typed_rows: bool = True) -> str:
    """The Cython source that :func:`nativize` builds for ``entries`` (raises
    :class:`NativeBuildError` when the code cannot be translated)."""
    return _Translator(_collect(entries), typed_rows).module()


def nativize(entries: Sequence[Callable[..., Any]],
             on_compile: Callable[[], None] | None = None,
             typed_rows: bool = True) -> NativeBuild:
    """Compile the generated code reachable from ``entries`` (see the module doc);
    ``on_compile()`` is called before a C build starts (the module of this shape is not
    cached yet: a few seconds). ``typed_rows=False`` where rows may be packed
    (:mod:`core.native_rows`): a row indexed by a constant is then any object, not a
    ``tuple``.

    Raises :class:`NativeBuildError` when the code cannot be translated or built."""
    records = _collect(entries)
    translator = _Translator(records, typed_rows)
    text = translator.module()
    module, seconds = _build(text, on_compile)
    instance = module.Compiled()
    instance.bind([g.value for g in translator.globals])
    compiled: list[Callable[..., Any]] = []
    for fn in entries:
        cname = translator.by_fn.get(id(fn))
        compiled.append(fn if cname is None else getattr(instance, "py" + cname))
    namespaces: dict[int, NativeNamespace] = {}
    for r in records:
        slots = {name: slot for (index, name), slot in translator.slots.items()
                 if index == r.index}
        namespaces[id(r.env)] = NativeNamespace(instance, r.env, slots)
    return NativeBuild(module, instance, compiled, namespaces, seconds)
