"""Every docstring example in the packages runs and prints what it shows.

The standards ask for a runnable example on public API; this keeps them runnable.  The
stdlib doctest runner, one test per module, so a failure names the module.

The packages are discovered, not listed: every top-level directory of the repository
that is a Python package (an ``__init__.py``, or ``.py`` files without one: a PEP 420
namespace package such as ``operators`` and ``plans``), except tests, bench, examples and
deploy; so a new package is covered the day it appears.  Modules are found on disk, so
collecting never imports them.  A module whose import fails only because an optional
third-party package is missing (the runners need the spark/flink/kafka extras) is
skipped with the package and the extra to install; so is an example that imports one
itself, when it is what fails.  Any other import error fails.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOT_PACKAGES = frozenset({"tests", "bench", "examples", "deploy", "build", "dist"})
# Import name of an optional dependency -> the extras of pyproject.toml that bring it.
OPTIONAL_EXTRAS: dict[str, tuple[str, ...]] = {
    "pyflink": ("flink",),
    "pyspark": ("spark",),
    "kafka": ("kafka",),
    "py4j": ("spark", "flink"),
    "pandas": ("spark", "flink"),
    "pyarrow": ("spark", "flink"),
}


def package_dirs(root: Path = ROOT) -> list[Path]:
    """The project's top-level package directories (also used by test_packaging.py)."""
    return sorted(
        path
        for path in root.iterdir()
        if path.is_dir()
        and path.name.isidentifier()
        and path.name not in NOT_PACKAGES
        and any(path.glob("*.py"))  # __init__.py, or the modules of a namespace package
    )


def package_modules(package: Path) -> list[str]:
    """Dotted names of ``package`` and every module below it, from the files on disk."""
    names = {package.name}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if "__pycache__" in parts or parts[-1] == "__main__":  # importing would run it
            continue
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names)


def _modules() -> list[str]:
    return sorted(name for package in package_dirs() for name in package_modules(package))


def _optional_missing(err: BaseException | None) -> str | None:
    """The optional package whose absence ``err`` reports, else None."""
    if not isinstance(err, ModuleNotFoundError):
        return None
    missing = (err.name or "").partition(".")[0]
    return missing if missing in OPTIONAL_EXTRAS else None


def _skip_for(name: str, missing: str) -> NoReturn:
    how = " or ".join(f'pip install -e ".[{extra}]"' for extra in OPTIONAL_EXTRAS[missing])
    pytest.skip(f"{name} needs the optional package {missing!r}: {how}")


def import_or_skip(name: str) -> ModuleType:
    """``import name``; skip when what is missing is one of OPTIONAL_EXTRAS."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        missing = _optional_missing(err)
        if missing is None:
            raise
        _skip_for(name, missing)


class _Runner(doctest.DocTestRunner):
    """Notes which optional packages the examples of the current docstring missed."""

    missing: set[str]

    def report_unexpected_exception(
        self, out: Any, test: doctest.DocTest, example: doctest.Example, exc_info: Any
    ) -> None:
        missing = _optional_missing(exc_info[1])
        if missing is not None:
            self.missing.add(missing)
        super().report_unexpected_exception(out, test, example, exc_info)


def test_the_packages_are_discovered() -> None:
    """The discovery finds (at least) the packages the project has always had."""
    names = {path.name for path in package_dirs()}
    assert {"dataflow", "operators", "plans", "connectors"} <= names, names
    assert "dataflow.runners" in _modules()  # a subpackage


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name: str) -> None:
    module = import_or_skip(name)
    runner = _Runner(optionflags=doctest.ELLIPSIS)
    failed, missing = 0, set()
    for test in doctest.DocTestFinder().find(module, name):
        runner.missing = set()
        result = runner.run(test)
        # A docstring whose example met a missing optional package is excused whole:
        # its later examples fail for want of the first one's result.
        missing |= runner.missing
        failed += 0 if runner.missing else result.failed
    assert failed == 0, f"{failed} docstring example(s) of {name} failed (above)"
    if missing:
        _skip_for(name, min(missing))


def test_the_public_api_has_examples() -> None:
    """Not every module needs one, but the front door does."""
    for name in ("dataflow.api", "connectors.files", "operators.heavylight"):
        assert doctest.DocTestFinder().find(importlib.import_module(name)), name
