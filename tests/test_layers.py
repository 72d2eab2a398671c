"""The layering of the packages and the absence of import cycles (ISSUE 13).

Layers, bottom up: ``core`` imports none of ours; ``plans`` imports ``core``;
``operators`` imports ``core`` and ``plans`` (where an operator reads a plan's atoms);
``connectors`` imports ``core`` only; ``dataflow`` composes them all. Checked on the
import statements of every module (also those inside functions; not those under
``if TYPE_CHECKING:``, which never run), as a networkx graph: no package imports upward
and no module takes part in an import cycle. Inside ``dataflow`` the subpackages are
layered by job the same way (:data:`DATAFLOW_JOBS`: engines, circuit runtime, API,
distributed execution, runners, CLI; issue 44). A fresh interpreter then imports every
module, the most dependent first, which is the order that trips over a cycle at run
time.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "plans", "operators", "connectors", "dataflow")
ALLOWED = {
    "core": set(),
    "plans": {"core"},
    "operators": {"core", "plans"},
    "connectors": {"core"},
    "dataflow": {"core", "plans", "operators", "connectors"},
}
OPTIONAL = ("pyflink", "pyspark", "kafka", "py4j", "pandas", "pyarrow")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Our modules named by the import statements that can run."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            # ``from pkg import sub`` imports the submodule ``pkg.sub`` if there is one.
            found.update(f"{base}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def import_graph() -> nx.DiGraph:
    """Module -> the modules of ours it imports (only modules that exist)."""
    files = {
        _module_name(p): p
        for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for target in _imports(tree, name, path.name == "__init__.py"):
            if target in files and target != name:
                g.add_edge(name, target)
    return g


GRAPH = import_graph()


def package_imports() -> dict[str, set[str]]:
    """Package -> the other packages its modules import."""
    out: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for src, dst in GRAPH.edges:
        a, b = src.split(".")[0], dst.split(".")[0]
        if a != b:
            out[a].add(b)
    return out


def test_every_package_is_in_the_graph() -> None:
    assert {n.split(".")[0] for n in GRAPH} == set(PACKAGES)
    assert GRAPH.number_of_edges() > 100  # the parser found the imports


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_imports_upward(package: str) -> None:
    offending = sorted(
        f"{src} -> {dst}" for src, dst in GRAPH.edges
        if src.split(".")[0] == package and dst.split(".")[0] not in ALLOWED[package] | {package}
    )
    assert not offending, f"{package} may import {sorted(ALLOWED[package])} only:\n" + "\n".join(
        offending
    )


DATAFLOW_JOBS = {
    "engines": ("dataflow.engines",),
    "circuit runtime": ("dataflow.circuit",),
    "API": ("dataflow", "dataflow.api"),
    "distributed execution": ("dataflow.distributed",),
    "runners": ("dataflow.runners",),
    "CLI": ("dataflow.__main__", "dataflow.cli", "dataflow.generate"),
}
"""``dataflow``'s subpackages (and its few top-level modules) by job, bottom up, each
importing only its own job and those below: the engines (one per query kind, a
partition's maintained structures); the circuit runtime (the circuit, the query kinds,
the live views and their generated code, the partitioner, the DAG of views, the nodes
that are not compiled queries, driving a view with a stream); the API
(``compile_query``, the package's exports) compiles into it; the distributed execution
(partition tasks, the worker plan, stages) runs the compiled circuit on workers; the
runners (local, Spark, Flink, the shared Kafka glue, run orchestration) drive all of
it; the command line and data generation sit on top. A module or package named here
is the job of everything under it too."""


def dataflow_job(module: str) -> str | None:
    """The job of a ``dataflow`` module (:data:`DATAFLOW_JOBS`), None for one not placed.

    >>> dataflow_job("dataflow.runners.spark.job"), dataflow_job("dataflow.circuit.view")
    ('runners', 'circuit runtime')
    >>> dataflow_job("dataflow"), dataflow_job("dataflow.something_new")
    ('API', None)
    """
    for job, roots in DATAFLOW_JOBS.items():
        if any(module == r or (r != "dataflow" and module.startswith(r + ".")) for r in roots):
            return job
    return None


def test_every_dataflow_module_has_a_job() -> None:
    """A new module goes into the subpackage of its job (or is placed here)."""
    unplaced = sorted(m for m in GRAPH if m.split(".")[0] == "dataflow"
                      and dataflow_job(m) is None)
    assert not unplaced, "dataflow modules of no job (DATAFLOW_JOBS):\n" + "\n".join(unplaced)


def test_dataflow_imports_only_go_down_its_jobs() -> None:
    """Inside ``dataflow`` too an import goes to a module of the same job or one below
    (imports inside functions included): no lazy import climbs back up."""
    rank = {job: i for i, job in enumerate(DATAFLOW_JOBS)}
    jobs = {m: dataflow_job(m) for m in GRAPH if m.split(".")[0] == "dataflow"}
    offending = sorted(
        f"{src} ({jobs[src]}) -> {dst} ({jobs[dst]})"
        for src, dst in GRAPH.edges
        if src in jobs and dst in jobs and jobs[src] and jobs[dst]
        and rank[jobs[dst]] > rank[jobs[src]])
    assert not offending, "upward imports inside dataflow:\n" + "\n".join(offending)


def test_no_import_cycles() -> None:
    cycles = list(nx.simple_cycles(GRAPH))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c + c[:1]) for c in cycles)


def test_every_module_imports_in_a_fresh_interpreter_most_dependent_first() -> None:
    # Importers before what they import; ``__main__`` modules run the CLI when imported.
    order = [m for m in nx.topological_sort(GRAPH) if not m.endswith("__main__")]
    script = (
        "import importlib, sys\n"
        f"optional = {OPTIONAL!r}\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError as e:\n"
        "        if (e.name or '').split('.')[0] not in optional:\n"
        "            raise\n"
    )
    done = subprocess.run([sys.executable, "-c", script, *order], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
