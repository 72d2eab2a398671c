"""The compiled hot path (``maintain(native=True)``, :mod:`core.native`) against the
interpreted one: the same delta epoch by epoch and the same snapshot on seeded-random
queries and streams of every family and shape and on TPC-H queries (DuckDB checks the
interpreted path in test_oracle_property); bad input is still refused with nothing
changed; a missing Cython or compiler is a clear error. Auto mode (the default outside
the tests, which run interpreted: tests/conftest.py): compiled where Cython is
importable, interpreted with the reason where it is not (a subprocess whose ``import
Cython`` fails), and a failed build falls back with one warning line; the run's
summary, its progress line and ``explain`` say which ran. Tests that build are skipped
where Cython or a C compiler is missing (CI installs both: ``.ci/run``)."""

from __future__ import annotations

import io
import os
import random
import re
import subprocess
import sys
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import FAMILIES, SHAPES, Case, random_case

import core.native
from core.errors import InputError
from core.native import NativeBuildError, NativeFallbackWarning, native_available, nativize
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
    assert "column 'src' expects INTEGER, found 'x'" in str(mistyped.value)


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


def test_the_c_sort_is_a_cython_file_in_the_cache_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """core/native_sort.pyx starts every built module: its text is in the module's, so
    a change to it is a new cache key (no stale build is loaded)."""
    from core.codegen import define

    env = define("def f(x):\n    return x", "<plain>", {})
    text = core.native.native_source([env["f"]])
    pyx = core.native.SORT_PYX.read_text(encoding="utf-8")
    assert pyx in text and "def sorted_int_changes(dict net):" in pyx
    changed = tmp_path / "native_sort.pyx"
    changed.write_text(pyx + "\n# changed\n", encoding="utf-8")
    monkeypatch.setattr(core.native, "SORT_PYX", changed)
    other = core.native.native_source([env["f"]])
    assert core.native._module_name(other) != core.native._module_name(text)


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


# -- auto mode ---------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = [str(ROOT / "examples" / "paths.sql"), "--updates",
           str(ROOT / "examples" / "paths_updates.csv")]


def _random_stream(seed: int, n: int = 300) -> list[Update | EpochEnd]:
    rng = random.Random(seed)
    live: list[tuple[int, int]] = []
    out: list[Update | EpochEnd] = []
    for step in range(n):
        if live and rng.random() < 0.3:
            out.append(Update("-", "G", live.pop(rng.randrange(len(live)))))
        else:
            edge = (rng.randint(0, 6), rng.randint(0, 6))
            live.append(edge)
            out.append(Update("+", "G", edge))
        if step % 9 == 8:
            out.append(EpochEnd())
    return out


def _deltas(view: View, stream: list[Update | EpochEnd]) -> list[object]:
    out: list[object] = []
    for rec in stream:
        if isinstance(rec, EpochEnd):
            out.append(view.end_epoch())
        else:
            view.apply(rec)
    out.append(view.end_epoch())
    out.append(view.snapshot())
    return out


@needs_native
def test_auto_compiles_where_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a flag or ``$IVMFLOW_NATIVE`` a view compiles (Cython and a compiler are
    here) and gives the interpreted deltas; ``IVMFLOW_NATIVE=0`` and ``native=False``
    keep it interpreted, saying why; ``IVMFLOW_NATIVE=1`` compiles."""
    monkeypatch.delenv("IVMFLOW_NATIVE", raising=False)
    query = compile_query(SQL)
    auto, plain = query.maintain(), query.maintain(native=False)
    assert auto.native and auto.native_note.startswith("compiled")
    assert not plain.native
    assert plain.native_note == "interpreted: turned off (--no-native / native=False)"
    stream = _random_stream(3)
    assert _deltas(auto, stream) == _deltas(plain, stream)
    monkeypatch.setenv("IVMFLOW_NATIVE", "0")
    off = query.maintain()
    assert not off.native and off.native_note == "interpreted: turned off (IVMFLOW_NATIVE=0)"
    monkeypatch.setenv("IVMFLOW_NATIVE", "1")
    assert query.maintain().native
    several = query.maintain(parallelism=2, native=True)  # (nothing to compile: no error)
    assert not several.native and "2 partitions" in several.native_note
    monkeypatch.setenv("IVMFLOW_NATIVE", "maybe")
    with pytest.raises(core.native.UsageError, match="IVMFLOW_NATIVE='maybe'"):
        query.maintain()


@pytest.mark.parametrize("failure", ["build", "translation"])
def test_auto_falls_back_when_the_build_fails(
    failure: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that fails in auto mode (a compiler error, or generated code the
    translator does not take) leaves the view interpreted, with one warning line and the
    same results; ``native=True`` raises instead. (Runs without Cython too: the build
    itself is replaced.)"""
    monkeypatch.delenv("IVMFLOW_NATIVE", raising=False)
    monkeypatch.setenv("IVMFLOW_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("dataflow.circuit.view.native_available", lambda: None)
    monkeypatch.setattr(core.native, "_LOADED", {})  # (no module built in this process)
    if failure == "build":
        def broken(text: str, name: str, root: Path, target: Path) -> None:
            raise NativeBuildError(f"cython failed on {name}.pyx:\nline 3: bad\nline 4: worse")

        monkeypatch.setattr(core.native, "_compile", broken)
    else:
        def odd(self: object) -> str:
            raise KeyError("a code shape the translator does not know")

        monkeypatch.setattr(core.native._Translator, "module", odd)
    query = compile_query(SQL)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        view = query.maintain()
    assert [w.category for w in caught] == [NativeFallbackWarning]
    message = str(caught[0].message)
    assert "\n" not in message and message.startswith(
        "the native build failed, running interpreted (same results): ")
    assert not view.native and view.native_note.startswith(
        "interpreted: the native build failed (")
    if failure == "build":
        log = re.search(r"full output in (\S+)\)$", message)
        assert log is not None and "line 4: worse" in Path(log[1]).read_text()
    else:
        assert "KeyError" in message
    stream = _random_stream(5)
    assert _deltas(view, stream) == _deltas(query.maintain(native=False), stream)
    with pytest.raises(Exception, match="cython failed|translator"):
        query.maintain(native=True)


def test_auto_without_cython_runs_interpreted(tmp_path: Path) -> None:
    """Where ``import Cython`` fails (simulated in a subprocess: a ``Cython`` package
    on PYTHONPATH that raises ImportError), a run without flags is interpreted and
    says why on its summary line and in ``explain``, with the deltas of an interpreted
    run; ``--native`` fails in one line naming the cause."""
    from dataflow.cli import main

    fake = tmp_path / "no_cython"
    (fake / "Cython").mkdir(parents=True)
    (fake / "Cython" / "__init__.py").write_text(
        "raise ImportError('simulated: no Cython here')\n")
    env = {k: v for k, v in os.environ.items() if k != "IVMFLOW_NATIVE"}
    env["PYTHONPATH"] = os.pathsep.join([str(fake), str(ROOT)])
    env["IVMFLOW_NATIVE_CACHE"] = str(tmp_path / "cache")

    def ivmflow(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dataflow", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300,
                              check=False)

    why = "interpreted: Cython is not installed (pip install 'ivmflow[native]')"
    auto = ivmflow("run", *EXAMPLE, "--deltas", str(tmp_path / "auto.csv"))
    assert auto.returncode == 0, auto.stderr
    assert f"updates/s), {why}, delete check: " in auto.stderr, auto.stderr
    assert "warning" not in auto.stderr
    assert main(["run", *EXAMPLE, "-q", "--no-native", "--deltas",
                 str(tmp_path / "plain.csv")]) == 0
    plain = (tmp_path / "plain.csv").read_text()
    assert (tmp_path / "auto.csv").read_text() == plain and plain.count("\n") > 3
    explain = ivmflow("explain", EXAMPLE[0])
    assert explain.returncode == 0 and f"\nhot path: {why}\ndelete check: " in explain.stdout
    required = ivmflow("run", *EXAMPLE, "--native", "-q")
    assert required.returncode == 1 and required.stdout == ""
    assert required.stderr.count("\n") == 1 and required.stderr.startswith(
        "ivmflow: error: native build requested (--native / native=True), but Cython is "
        "not installed"), required.stderr
    assert not (tmp_path / "cache").exists()


@needs_native
def test_run_shows_the_first_use_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The progress line says that the hot path is compiling (first use of a query
    shape, a fresh cache here), then which hot path runs; the summary says it was built
    and how long that took, and a second run loads the build; ``explain`` says so."""
    from dataflow.cli import main
    from dataflow.runners.run import Progress, RunOptions, run

    monkeypatch.delenv("IVMFLOW_NATIVE", raising=False)
    monkeypatch.setenv("IVMFLOW_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(core.native, "_LOADED", {})  # (none built in this process yet)
    opts = RunOptions(EXAMPLE[0], EXAMPLE[2], deltas=str(tmp_path / "d.csv"))
    notes = []
    for _ in range(2):
        buf = io.StringIO()
        progress = Progress(buf, enabled=True, interval=0.0)
        run(opts, progress)
        notes.append((buf.getvalue(), progress.summary()))
    (first, first_summary), (second, second_summary) = notes
    assert "\rivmflow: compiling the hot path (first use of this query shape)..." in first
    assert re.search(r"updates/s(, [\d:<]+)?, compiled\s*\r", first), first
    assert re.search(r", compiled \(first use of this query shape: built in \d+\.\ds\), "
                     r"delete check: [^,]+$", first_summary), first_summary
    assert "compiling" not in second and ", compiled, delete check: " in second_summary
    capsys.readouterr()
    assert main(["explain", EXAMPLE[0]]) == 0
    assert (f"hot path: compiled (this query shape is built, in {tmp_path / 'cache'})\n"
            "delete check: ") in capsys.readouterr().out


@needs_native
@pytest.mark.parametrize("name", ["q01", "q05", "q06", "q12"])
def test_tpch_queries_compile_and_agree(name: str, tpch_sf001: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """TPC-H queries (generated helpers such as ``_f_mul``, lambdas bound in the
    namespace, Decimal and date constants) compile in auto mode and give the
    interpreted deltas epoch by epoch on the SF 0.01 refresh stream."""
    from connectors.files import read_updates

    monkeypatch.delenv("IVMFLOW_NATIVE", raising=False)
    query = compile_query((tpch_sf001 / "queries" / f"{name}.sql").read_text(),
                          source_name=name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NativeFallbackWarning)
        auto = query.maintain()
    plain = query.maintain(native=False)
    assert auto.native, auto.native_note
    epochs = 0
    for rec in read_updates(str(tpch_sf001 / "updates.csv"), query.schema):
        if isinstance(rec, EpochEnd):
            assert auto.end_epoch() == plain.end_epoch()
            epochs += 1
        else:
            auto.apply(rec)
            plain.apply(rec)
    assert auto.end_epoch() == plain.end_epoch() and epochs >= 5
    assert auto.snapshot() == plain.snapshot()


@needs_native
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["set", "del", "get", "one"]),
                          st.one_of(st.integers(0, 40), st.just(2**64 - 1),
                                    st.integers(0, 2**64 - 1)),
                          st.integers(1, 3)), max_size=400))
def test_native_digest_counts_is_a_dict_of_counts(ops: list[tuple[str, int, int]]) -> None:
    """``DigestCounts`` (core/native_maps.pyx: the delete check's multiset in native
    memory, open addressing with backward-shift deletes) reads back as the dict the
    same operations make, after every step: growth, long probe runs over few keys,
    and deletes that shift entries back across the table's end included."""
    from core.native import native_maps

    counts, want = native_maps().DigestCounts(), {}
    for op, key, n in ops:
        if op == "set":
            counts[key] = want[key] = want.get(key, 0) + n
        elif op == "one":  # (a count above 1 back to 1: the table's slot alone again)
            counts[key] = want[key] = 1
        elif op == "del" and key in want:
            del counts[key], want[key]
        elif op == "del":
            with pytest.raises(KeyError):
                del counts[key]
        assert counts.get(key, 0) == want.get(key, 0) and (key in counts) == (key in want)
        assert len(counts) == len(want)
    assert dict(counts.items()) == want and sorted(counts) == sorted(want)
    assert counts.get(-1) is None and counts.get("x", 0) == 0
    with pytest.raises(ValueError, match="at least 1"):
        counts[5] = 0
    assert counts.nbytes >= 8 * len(want) * 5 // 4


@needs_native
def test_the_compiled_delete_check_keeps_digests_natively() -> None:
    """A compiled view counts digests in ``DigestCounts`` (an interpreted one in dicts),
    with the same refusals and deltas."""
    sql = ("CREATE TABLE R(a INT, b VARCHAR); CREATE TABLE S(b VARCHAR, c INT); "
           "SELECT R.a, S.c FROM R, S WHERE R.b = S.b AND S.c > 1")
    q = compile_query(sql)
    compiled, interpreted = q.maintain(native=True), q.maintain(native=False)
    assert type(compiled.validator.counts["S"]).__name__ == "DigestCounts"
    assert type(interpreted.validator.counts["S"]) is dict
    for view in (compiled, interpreted):
        for i in range(50):
            view.apply(Update("+", "R", (i, f"k{i % 7}")))
            view.apply(Update("+", "S", (f"k{i % 5}", i % 4)))
        view.apply(Update("-", "S", ("k1", 1)))
        with pytest.raises(InputError, match="a delete of at most 0 copies present"):
            view.apply(Update("-", "S", ("k1", 99)))
    assert compiled.end_epoch().rows == interpreted.end_epoch().rows
    assert len(compiled.validator.counts["S"]) == len(interpreted.validator.counts["S"])


_KEY_PARTS = st.one_of(st.integers(0, 30), st.integers(-2**63, 2**63 - 1), st.just(2**70),
                       st.sampled_from(["x", "y", None, 1.5]))
_PAYLOAD_PARTS = st.one_of(st.integers(-5, 5), st.integers(-2**66, 2**66),
                           st.decimals(allow_nan=False, allow_infinity=False, places=2,
                                       min_value=-10**20, max_value=10**20),
                           st.fractions(max_denominator=7), st.sampled_from(["z", None]))


@needs_native
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["set", "set", "del", "pop", "get"]),
                          st.tuples(_KEY_PARTS, _KEY_PARTS),
                          st.tuples(_PAYLOAD_PARTS, _PAYLOAD_PARTS, _PAYLOAD_PARTS)),
                max_size=300))
def test_native_field_map_is_a_dict(
        ops: list[tuple[str, tuple[Any, Any], tuple[Any, Any, Any]]]) -> None:
    """``FieldMap`` (core/native_rows.pyx: a sum leaf's or a top leaf's map in one
    native array) reads back as the dict the same operations make, after every step:
    keys and payloads of ints inline and out of 64 bits, DECIMALs (their exponents
    kept), fractions, texts and NULLs by reference, as tuples and as packed rows;
    growth by half, backward-shift deletes across the table's end."""
    from core.native import native_rows

    m, want = native_rows().FieldMap(2, 3), {}
    pack = native_rows().packer(True)
    for op, key, payload in ops:
        if op == "set":  # (a packed payload, as rpack makes: its fields copied as they are)
            m[pack(key) if key[0] == 0 else key] = pack(payload) if key[1] == 1 else payload
            want[key] = payload
        elif op == "del" and key in want:
            del m[key], want[key]
        elif op == "del":
            with pytest.raises(KeyError):
                del m[key]
        elif op == "pop":
            assert m.pop(key, "none") == want.pop(key, "none")
        got = m.get(key)
        assert got == want.get(key) and (key in m) == (key in want) and len(m) == len(want)
        if got is not None:  # (the same DECIMAL exponents: equal and printed alike)
            assert repr(got) == repr(want[key])
    assert dict(m.items()) == want and sorted(map(repr, m)) == sorted(map(repr, want))
    assert [m[k] for k in want] == list(want.values())
    bucket = {(1, 2, 3): 2}  # (another value: kept as it is, the same object)
    m[(1, 2)] = bucket
    assert m[(1, 2)] is bucket and m.get((1, 2)) is bucket
    m[(1, 2)] = (1, 2)
    assert m.pop((1, 2)) == (1, 2) and (1, 2) not in m


class _SameHash:
    """A key part whose hash is the same for every value (equal by value): every key
    made of it probes one cluster of slots."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SameHash) and other.v == self.v

    def __hash__(self) -> int:
        return 7

    def __repr__(self) -> str:
        return f"_SameHash({self.v})"


@needs_native
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2), st.lists(st.tuples(
    st.sampled_from(["set", "set", "set", "del", "del"]),
    st.one_of(st.integers(-3, 3), st.just(-1), st.just(-2), st.just(2**61 - 1),
              st.just(2**61), st.just(2**62 - 2), st.integers(0, 5).map(_SameHash),
              st.sampled_from([1.0, True, None, Decimal("1.00"), Decimal("-0.5"),
                               Decimal("-1"), Decimal("0.10")]))), max_size=400))
def test_native_field_map_finds_home_slots_again(
        nkey: int, ops: list[tuple[str, Any]]) -> None:
    """A ``FieldMap`` stores no hash: growing, and shifting slots back after a delete,
    hash each key again from its stored fields. Keys whose hashes collide (-1 and -2,
    2**61 - 1 and 0, one hash for every ``_SameHash``), keys equal across types (1,
    1.0, True), long clusters of them deleted in any order: the map reads as the dict
    the same operations make, after every step."""
    from core.native import native_rows

    m, want = native_rows().FieldMap(nkey, 2), {}
    for op, part in ops:
        key = part if nkey == 1 else (part, 3)
        if op == "set":
            m[key] = want[key] = (part, len(want))
        elif key in want:
            del m[key], want[key]
        else:
            assert m.pop(key, None) is None
        assert len(m) == len(want) and (key in m) == (key in want)
        assert all(m[k] == v for k, v in want.items())
    assert sorted(map(repr, m.items())) == sorted(map(repr, want.items()))


_HASHED_PARTS = st.one_of(
    st.integers(-2**63, 2**63 - 1), st.integers(-3, 3), st.sampled_from(
        [2**61 - 2, 2**61 - 1, 2**61, -(2**61) + 1, -(2**61), 2**64, None, "x", 1.5, -0.0]),
    st.decimals(allow_nan=False, allow_infinity=False, places=2, min_value=-10**15,
                max_value=10**15),
    st.builds(lambda c, k: Decimal(c).scaleb(-k),
              st.integers(-10**18 + 1, 10**18 - 1), st.integers(0, 127)))


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.lists(_HASHED_PARTS, min_size=1, max_size=8))
def test_native_stored_key_hash_is_hash(parts: list[Any]) -> None:
    """A field map hashes a stored key from its fields (growing, shifting back after
    a delete) without making its values: Python's numeric hash for inline ints and
    DECIMALs (every exponent a field keeps), the object's hash for a reference,
    combined as CPython's tuple hash. It equals hash() of the key on this CPython."""
    from core.native import native_rows

    rows = native_rows()
    assert rows.stored_hashes_agree()
    assert rows.stored_key_hash(tuple(parts)) == hash(tuple(parts))


_GROUP_KEY_PARTS = st.one_of(st.integers(0, 30), st.just(2**70), st.just(1.0),
                             st.decimals(places=1, min_value=0, max_value=3),
                             st.decimals(places=2, min_value=0, max_value=3),
                             st.sampled_from(["x", None]))


@needs_native
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["group", "group", "other", "del", "get"]),
                          st.tuples(_GROUP_KEY_PARTS, _GROUP_KEY_PARTS),
                          _GROUP_KEY_PARTS, st.tuples(_GROUP_KEY_PARTS, _GROUP_KEY_PARTS),
                          st.booleans()),
                max_size=200))
def test_native_field_map_with_the_key_in_its_values(
        ops: list[tuple[str, tuple[Any, Any], Any, tuple[Any, Any], bool]]) -> None:
    """A ``FieldMap`` with ``key_at`` (a top leaf's groups: the value is a tuple
    holding the key's values at those positions) stores such a value's other fields
    only, and still reads back exactly what was set, after every step: the same
    values, DECIMAL exponents and types (a key of 1 with a value holding 1.0 or
    another DECIMAL exponent is kept whole), as tuples and as packed rows; values
    that do not hold the key, by reference."""
    from core.native import native_rows

    m, want = native_rows().FieldMap(2, 3, key_at=(2, 0)), {}
    pack = native_rows().packer(True)
    for op, key, middle, other, packed in ops:
        if op in ("group", "other"):
            # (the key's own objects, as the generated code projects them from the tuple)
            value = (key[1], middle, key[0]) if op == "group" else (other[0], middle, other[1])
            m[key] = pack(value) if packed else value
            want[key] = value
        elif op == "del" and key in want:
            del m[key], want[key]
        got = m.get(key)
        assert (key in m) == (key in want) and len(m) == len(want)
        assert repr(got) == repr(want.get(key))
    assert sorted(map(repr, m.items())) == sorted(map(repr, want.items()))
    assert m.nbytes < native_rows().FieldMap(2, 3).nbytes or len(m) > 6


@needs_native
def test_a_compiled_view_keeps_sum_leaves_natively() -> None:
    """A compiled view keeps a join tree's sum leaf (key -> payload sums) in a
    ``FieldMap``, an interpreted one in a dict; deltas and snapshots agree, deletes
    included, and a key equal as a Python value (1 and 1.0) finds its entry."""
    sql = ("CREATE TABLE R(a INT, b INT); CREATE TABLE S(b INT, c DECIMAL(10,2)); "
           "SELECT R.a, SUM(S.c) AS s, COUNT(*) AS n FROM R, S WHERE R.b = S.b GROUP BY R.a")
    q = compile_query(sql)
    compiled, interpreted = q.maintain(native=True), q.maintain(native=False)
    # (the projections: a node's indexes are field maps too, buckets by reference)
    sums = [st_map for engine in compiled.engines for st_map in (
        engine.state.map(name) for name in engine.state.names() if name.endswith(".proj"))
        if type(st_map).__name__ == "FieldMap"]
    assert sums, compiled.engines[0].state.names()
    def rows(step: int) -> list[tuple[tuple[int, int], tuple[int, Decimal]]]:
        r = random.Random(step)
        return [((i % 9, r.randrange(12)), (r.randrange(12), Decimal(r.randrange(-999, 999)) / 100))
                for i in range(80)]

    for step in range(6):
        for view in (compiled, interpreted):
            for r_row, s_row in rows(step):
                view.apply(Update("+", "R", r_row))
                view.apply(Update("+", "S", s_row))
        assert compiled.end_epoch().rows == interpreted.end_epoch().rows
        for view in (compiled, interpreted):  # (a third of this step's S rows go)
            for _r_row, s_row in rows(step)[::3]:
                view.apply(Update("-", "S", s_row))
        assert compiled.end_epoch().rows == interpreted.end_epoch().rows
    assert compiled.snapshot() == interpreted.snapshot()
    plain = interpreted.engines[0].state
    name = next(n for n in compiled.engines[0].state.names()
                if compiled.engines[0].state.map(n) is sums[0])
    assert dict(sums[0].items()) == {k: tuple(v) for k, v in plain.map(name).items()}
    assert compiled.native_field_maps and not interpreted.native_field_maps


@needs_native
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 40),
                          st.sampled_from([1, 1, 2, -1])), min_size=1, max_size=250))
def test_delta_join_buckets_grown_into_field_maps(
        ops: list[tuple[int, int, int, int]]) -> None:
    """A delta join (a GHD bag) over a state that makes field maps turns a bucket of
    more than ``BIG_BUCKET`` tuples into a ``FieldMap`` of tuple -> multiplicity (TPC-H
    Q5's lineitems per supplier); its deltas, its multiplicities and its whole join
    stay those of the same join over dicts, through inserts and deletes that empty
    buckets and fill them again."""
    from core.native import native_rows
    from operators.deltajoin import DeltaJoin
    from operators.nodemaps import register_dict_bucket
    from operators.state import DictState

    field_map = native_rows().FieldMap
    register_dict_bucket(field_map)  # (as a view does where it makes field maps)
    grown = DeltaJoin([("a", "b"), ("b", "c")], ("a", "c"), DictState(field_map))
    plain = DeltaJoin([("a", "b"), ("b", "c")], ("a", "c"), DictState())
    for atom, key, other, dm in ops:
        t = (other, Decimal(key) / 4) if atom == 0 else (Decimal(key) / 4, other)
        if dm < 0 and not plain.rel[atom].get(t, 0):
            continue  # (a delete of a tuple not there is refused before the join)
        assert grown.update(atom, t, dm) == plain.update(atom, t, dm)
        assert grown.rel[atom].get(t, 0) == plain.rel[atom].get(t, 0)
    assert grown.full() == plain.full()
    sizes = [len(b) for idx in plain.indexes.values() for b in idx.values()]
    kinds = {type(b) for idx in grown.indexes.values() for b in idx.values()}
    if any(n > 8 for n in sizes):  # (a bucket grows into one past 8; never back)
        assert field_map in kinds


@needs_native
def test_an_index_on_the_whole_tuple_is_read_from_the_first() -> None:
    """A node's child joined on the node's whole tuple (TPC-H Q21's late lineitems
    and their per-(order, supplier) counts) stores no index of its own in the native
    build: the first index, which holds every tuple, answers for it. Deltas and
    snapshots equal the interpreted build's (which keeps the index) through inserts
    and deletes, the children's keys coming and going without the node's tuples
    (other rows of L), a second child on the same key reading the same way (Q21's
    two count views per (order, supplier)), and the compiled view holds fewer
    entries."""
    sql = ("CREATE TABLE L(o INT, s INT, x INT); CREATE TABLE O(o INT, st INT); "
           "SELECT L1.s, COUNT(*) AS n FROM L L1, O, "
           "(SELECT o, s, COUNT(*) AS c FROM L WHERE x > 2 GROUP BY o, s) C, "
           "(SELECT o, s, COUNT(*) AS c FROM L WHERE x <> 2 GROUP BY o, s) D "
           "WHERE L1.o = O.o AND L1.o = C.o AND L1.s = C.s AND L1.o = D.o AND L1.s = D.s "
           "AND O.st = 1 AND L1.x <= 2 GROUP BY L1.s")
    q = compile_query(sql)
    compiled, interpreted = q.maintain(native=True), q.maintain(native=False)
    nodes = [node for engine in compiled.outer.engines for node in engine.nodes]
    assert any(any(node.index_whole) for node in nodes)
    r = random.Random(7)
    live: list[tuple[str, tuple[int, ...]]] = []
    for _step in range(8):
        ups: list[Update] = []
        for _ in range(60):
            if live and r.random() < 0.35:
                rel, row = live.pop(r.randrange(len(live)))
                ups.append(Update("-", rel, row))
            else:
                rel = r.choice(["L", "L", "O"])
                row = ((r.randrange(6), r.randrange(4), r.randrange(5)) if rel == "L"
                       else (r.randrange(6), r.randrange(2)))
                live.append((rel, row))
                ups.append(Update("+", rel, row))
        for view in (compiled, interpreted):
            for u in ups:
                view.apply(u)
        assert compiled.end_epoch().rows == interpreted.end_epoch().rows
        assert compiled.snapshot() == interpreted.snapshot()
    assert compiled.state_entries() < interpreted.state_entries()


@needs_native
def test_a_count_of_every_row_compiles_natively() -> None:
    """A top leaf without variables (``COUNT(*)`` over one table, TPC-H Q16's
    suppliers with complaints) keeps its one group as a dict: a field map holds keys
    of at least one value (68d2079 asked for one of none and failed to build)."""
    q = compile_query("CREATE TABLE S(a INT, b INT); SELECT COUNT(*) AS n FROM S WHERE a > 1")
    compiled, interpreted = q.maintain(native=True), q.maintain(native=False)
    for view in (compiled, interpreted):
        for a in range(6):
            view.apply(Update("+", "S", (a, a)))
        view.apply(Update("-", "S", (3, 3)))
    assert compiled.end_epoch().rows == interpreted.end_epoch().rows
    assert compiled.snapshot() == interpreted.snapshot() == [(1, (3,))]
