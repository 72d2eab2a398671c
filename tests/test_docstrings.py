"""Every docstring example in the packages runs and prints what it shows.

The standards ask for a runnable example on public API; this keeps them runnable.  The
stdlib doctest runner, one test per module, so a failure names the module.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ("dataflow", "operators", "plans", "connectors")


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        pkg = importlib.import_module(package)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, f"{package}.")]
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (above)"


def test_the_public_api_has_examples() -> None:
    """Not every module needs one, but the front door does."""
    for name in ("dataflow.api", "connectors.kafka", "connectors.files", "operators.heavylight"):
        assert doctest.DocTestFinder().find(importlib.import_module(name)), name
