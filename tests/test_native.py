"""The compiled hot path (``maintain(native=True)``, :mod:`core.native`) against the
interpreted one: the same delta epoch by epoch and the same snapshot on seeded-random
queries and streams of every family and shape (DuckDB checks the interpreted path in
test_oracle_property); bad input is still refused with nothing changed; a missing
Cython or compiler is a clear error. Skipped where Cython or a C compiler is missing
(CI installs both: ``.ci/run``)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from strategies import FAMILIES, SHAPES, Case, random_case

from core.errors import InputError
from core.native import NativeBuildError, native_available, nativize
from core.records import EpochEnd, Update
from dataflow.api import View, compile_query

needs_native = pytest.mark.skipif(native_available() is not None,
                                  reason=f"no native build here: {native_available()}")
CASES_PER_FAMILY = 10
"""Each case builds its own module (a few seconds of Cython and gcc)."""


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # One cache for the session's tests, not the user's.
    monkeypatch.setenv("IVMFLOW_NATIVE_CACHE", str(tmp_path_factory.getbasetemp() / "native"))


def _run(view: View, case: Case) -> list[tuple[int, tuple[object, ...]]]:
    out: list[tuple[int, tuple[object, ...]]] = []
    pending = 0
    for rec in case.records:
        if isinstance(rec, EpochEnd):
            d = view.end_epoch()
            out.append((d.epoch, d.rows))
            pending = 0
            continue
        assert isinstance(rec, Update)
        view.apply(rec)
        pending += 1
        if case.epoch_size is not None and pending >= case.epoch_size:
            d = view.end_epoch()
            out.append((d.epoch, d.rows))
            pending = 0
    d = view.end_epoch()
    out.append((d.epoch, d.rows))
    out.append((-1, tuple(view.snapshot())))
    return out


@needs_native
@pytest.mark.parametrize("family", FAMILIES)
def test_native_matches_interpreted(family: str) -> None:
    compiled = 0
    for seed in range(CASES_PER_FAMILY):
        rng = random.Random(f"native-{family}-{seed}")
        case = random_case(rng, family, SHAPES[seed % len(SHAPES)])
        query = compile_query(case.sql)
        native = query.maintain(native=True)
        plain = query.maintain(native=False)
        assert not plain.native
        compiled += native.native
        a, b = _run(native, case), _run(plain, case)
        assert a == b, f"{case.sql}\nnative {a}\ninterpreted {b}"
    assert compiled >= CASES_PER_FAMILY // 2  # (most plans have a compiled path)


SQL = ("CREATE TABLE G(src INT, dst INT);\n"
       "SELECT G1.src, G2.src, G3.dst FROM G G1, G G2, G G3 "
       "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst > 2;")


@needs_native
def test_native_refuses_bad_input_with_nothing_changed() -> None:
    view = compile_query(SQL).maintain(native=True)
    assert view.native
    for u in [(1, 2), (2, 3), (3, 4)]:
        view.apply(Update("+", "G", u))
    with pytest.raises(InputError) as absent:
        view.apply(Update("-", "G", (7, 7)))
    with pytest.raises(InputError) as mistyped:
        view.apply(Update("+", "G", ("x", 1)))
    view.apply(Update("+", "G", (2.0, 3)))  # (the checked path coerces 2.0 to 2)
    assert view.end_epoch().rows == ((2, (1, 2, 4)),)
    assert view.snapshot() == [(2, (1, 2, 4))]
    assert "'-,G,7,7'" in str(absent.value) and "delete of 1" in str(absent.value)
    assert "column 'src' expects INT, found 'x'" in str(mistyped.value)


@needs_native
def test_compiled_epoch_close_makes_the_same_deltas() -> None:
    """The compiled end_epoch builds its EpochDelta in C: equal, frozen, the same
    fields and counters as the interpreted one's, with and without a marker."""
    import dataclasses

    query = compile_query(SQL)
    native, plain = query.maintain(native=True), query.maintain(native=False)
    ups = [(1, 2), (2, 3), (3, 4), (3, 5), (0, 1)]
    for i, view in enumerate((native, plain)):
        got = []
        for j, u in enumerate(ups):
            view.apply(Update("+", "G", u))
            got.append(view.end_epoch(closed_by_marker=j % 2 == 1))
        got.append(view.end_epoch())
        if i == 0:
            first = got
    assert got == first and [repr(d) for d in got] == [repr(d) for d in first]
    assert [vars(d) for d in got] == [vars(d) for d in first]
    assert first[3].rows == ((1, (1, 2, 5)),) and first[3].closed_by_marker
    assert native.epoch == plain.epoch == 6 and native.updates_total == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        first[0].rows = ()  # type: ignore[misc]


@needs_native
def test_second_view_of_a_query_loads_the_built_module() -> None:
    query = compile_query(SQL)
    first = query.maintain(native=True)
    second = query.maintain(native=True)
    f1, f2 = first._direct["G"], second._direct["G"]
    assert type(f1).__module__ == type(f2).__module__ or f1.__module__ == f2.__module__
    # Separate state: the module's globals are rebound per view, so the two views'
    # results differ when their inputs do.
    first.apply(Update("+", "G", (1, 2)))
    first.apply(Update("+", "G", (2, 3)))
    first.apply(Update("+", "G", (3, 4)))
    first.end_epoch()
    assert first.snapshot() == [(1, (1, 2, 4))]
    assert second.snapshot() == []


def test_missing_cython_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "Cython", None)
    assert "Cython is not installed" in (native_available() or "")
    with pytest.raises(NativeBuildError, match="Cython is not installed.*native=False"):
        compile_query(SQL).maintain(native=True)
    assert not compile_query(SQL).maintain(native=False).native


def test_untranslatable_code_is_refused() -> None:
    from core.codegen import define

    env = define("def f(x, *rest):\n    return x", "<odd>", {})
    with pytest.raises(NativeBuildError, match="only plain positional parameters"):
        nativize([env["f"]])


@needs_native
def test_c_sort_matches_the_general_one() -> None:
    """The compiled view's epoch sort (tuples of 64-bit ints in C) gives exactly
    ``sorted_changes``'s pairs, and falls back on rows it does not handle (big ints,
    NULLs, strings, bools)."""
    from core.codegen import define
    from core.consolidate import sorted_changes
    from core.native import native_sorted_changes

    env = define("def f(x):\n    return x", "<sort test>", {})
    module = nativize([env["f"]]).module
    fast = native_sorted_changes(module)
    rng = random.Random(11)
    handled = 0
    for _ in range(1500):
        width = rng.randint(1, 4)
        net: dict[tuple[object, ...], int] = {}
        for _ in range(rng.randint(0, 40)):
            row = tuple(rng.choice([rng.randint(-5, 5), rng.randint(-2**63, 2**63 - 1)])
                        for _ in range(width))
            net[row] = rng.randint(-2, 2)
        odd = rng.random()
        if odd < 0.05:
            net[(2**64,) * width] = 1
        elif odd < 0.1:
            net[(None,) * width] = 1
        elif odd < 0.15:
            net[("s",) * width] = -1
        elif odd < 0.2:
            net[(True,) * width] = 1
        handled += module.sorted_int_changes(net) is not None
        assert fast(net) == sorted_changes(net), net
    assert 1000 < handled < 1500  # (both paths taken)


@needs_native
def test_c_radix_sort_of_packable_rows() -> None:
    """Epochs of 64 rows or more whose columns pack into 64 bits are radix-sorted:
    the same pairs as ``sorted_changes`` for spans from one value to the whole int64
    range (packed widths 0 to 64 bits; over 64 the comparison sort takes them)."""
    from core.codegen import define
    from core.consolidate import sorted_changes
    from core.native import native_sorted_changes

    env = define("def f(x):\n    return x", "<radix test>", {})
    fast = native_sorted_changes(nativize([env["f"]]).module)
    rng = random.Random(5)
    spans = [0, 1, 2, 255, 256, 3000, 2**20, 2**31, 2**63, 2**64 - 1]
    for _ in range(300):
        width = rng.randint(1, 5)
        cols = []  # (lowest value, span) per column: values within int64
        for _ in range(width):
            span = rng.choice(spans)
            cols.append((rng.randint(-2**63, 2**63 - 1 - span), span))
        net: dict[tuple[object, ...], int] = {}
        for _ in range(rng.choice([64, 65, 200, 1000, 3000])):
            row = tuple(lo + rng.choice([0, span, rng.randint(0, span)]) for lo, span in cols)
            net[row] = rng.choice([-2, -1, 0, 1, 3])
        assert fast(net) == sorted_changes(net), cols


@needs_native
def test_cli_native_flag_writes_the_same_deltas(tmp_path: Path) -> None:
    from dataflow.cli import main

    root = Path(__file__).resolve().parents[1] / "examples"
    out = Path(str(tmp_path))
    args = [str(root / "paths.sql"), "--updates", str(root / "paths_updates.csv"), "-q"]
    assert main(["run", *args, "--native", "--deltas", str(out / "native.csv")]) == 0
    assert main(["run", *args, "--deltas", str(out / "plain.csv")]) == 0
    native = (out / "native.csv").read_text()
    assert native == (out / "plain.csv").read_text() and native.count("\n") > 3


@needs_native
@pytest.mark.parametrize("sql", [
    # IVM-epsilon triangles (heavy/light router: its code stays interpreted, called from
    # the compiled input path) and a GHD over two triangle bags.
    "CREATE TABLE G(src INT, dst INT); SELECT G1.src, G2.src, G3.src FROM G G1, G G2, G G3 "
    "WHERE G1.dst = G2.src AND G2.dst = G3.src AND G3.dst = G1.src;",
    "CREATE TABLE G(src INT, dst INT); SELECT COUNT(*) FROM G A1, G A2, G A3, G B1, G B2, "
    "G B3, G C WHERE A1.dst = A2.src AND A2.dst = A3.src AND A3.dst = A1.src AND "
    "B1.dst = B2.src AND B2.dst = B3.src AND B3.dst = B1.src AND C.src = A1.src AND "
    "C.dst = B1.src;",
])
def test_cyclic_kinds_compile_and_agree(sql: str) -> None:
    query = compile_query(sql)
    native, plain = query.maintain(native=True), query.maintain(native=False)
    assert native.native
    rng = random.Random(sql)
    live: list[tuple[int, int]] = []
    for step in range(400):
        if live and rng.random() < 0.3:
            update = Update("-", "G", live.pop(rng.randrange(len(live))))
        else:
            edge = (rng.randint(0, 6), rng.randint(0, 6))
            if edge in live:
                continue
            live.append(edge)
            update = Update("+", "G", edge)
        native.apply(update)
        plain.apply(update)
        if step % 7 == 0:
            assert native.end_epoch() == plain.end_epoch()
    assert native.end_epoch() == plain.end_epoch()
    assert native.snapshot() == plain.snapshot() != []
