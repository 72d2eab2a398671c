"""The wheel ships every module of the project's packages, and their py.typed markers.

pyproject.toml decides what goes into the wheel; a module or subpackage it does not
cover (a hand-kept package list missing ``dataflow.runners``, package discovery that
skips PEP 420 namespace packages such as ``operators``, ``plans`` and ``core``) still
imports in a checkout or an editable install and in every other test, and is missing
only for whoever installs the wheel. So this test builds the wheel and compares its file
list with the ``.py`` files on disk under the package directories, discovered as in
tests/test_docstrings.py (top-level packages but tests, bench, examples and deploy).

The build runs on a copy of the source tree in a temporary directory, so it leaves no
build/ or *.egg-info behind in the repository, and offline (``--no-build-isolation``)
when the running interpreter has what [build-system] requires (pip checks); otherwise
pip builds in an isolated environment, with the backend from its index or cache.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_docstrings import ROOT, package_dirs

# (.cache: the benches' generated data, bench/.cache, gigabytes in a working copy; a
# clean clone has none)
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".cache",
    ".hypothesis"
)


def _pip_wheel(src: Path, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", *options, "-w", str(out), str(src)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The file list of a wheel built from a copy of the repository."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, out = tmp / "src", tmp / "out"
    shutil.copytree(ROOT, src, ignore=COPY_IGNORE)
    proc = _pip_wheel(src, out, "--no-build-isolation", "--check-build-dependencies")
    if proc.returncode != 0 and "Some build dependencies" in proc.stderr:
        # e.g. an older setuptools than [build-system] requires: let pip fetch the backend
        proc = _pip_wheel(src, out)
    assert proc.returncode == 0, f"{proc.args} failed:\n{proc.stdout}\n{proc.stderr}"
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def _on_disk(pattern: str) -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for package in package_dirs()
        for path in package.rglob(pattern)
        if "__pycache__" not in path.parts
    }


def test_the_wheel_has_every_module(wheel_files: set[str]) -> None:
    missing = sorted(_on_disk("*.py") - wheel_files)
    assert not missing, f"modules missing from the wheel (see pyproject.toml): {missing}"


def test_the_wheel_has_the_py_typed_markers(wheel_files: set[str]) -> None:
    markers = _on_disk("py.typed")
    assert markers, "no py.typed marker in the packages"
    missing = sorted(markers - wheel_files)
    assert not missing, f"py.typed markers missing from the wheel: {missing}"


def test_the_wheel_has_the_cython_sources(wheel_files: set[str]) -> None:
    """core/native_sort.pyx is read by the native build at run time."""
    sources = _on_disk("*.pyx")
    assert "core/native_sort.pyx" in sources
    missing = sorted(sources - wheel_files)
    assert not missing, f"Cython sources missing from the wheel (package-data): {missing}"


def test_the_wheel_ships_nothing_but_the_packages(wheel_files: set[str]) -> None:
    """No tests/, bench/ or deploy/ at the top level of site-packages."""
    packages = {path.name for path in package_dirs()}
    tops = {name.split("/")[0] for name in wheel_files}
    strays = sorted(t for t in tops if t not in packages and not t.endswith(".dist-info"))
    assert not strays, f"the wheel installs more than the packages {sorted(packages)}: {strays}"
