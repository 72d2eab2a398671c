"""Property tests: ivmflow's local engine against DuckDB (docs/contributing.md).

For random acyclic queries of every family (paths, stars, combs, snowflakes; full,
free-connex and non-free-connex projections, DISTINCT, GROUP BY, aggregates), random
valid update streams with deletes and random epoch sizes, after every epoch:

(a) the sum of the epoch deltas so far equals DuckDB's answer on the same database,
(b) ``view.snapshot()`` (full enumeration) equals DuckDB's answer,
(c) each epoch delta is consolidated (no zero multiplicities, no repeated row) and, for
    DISTINCT queries, the accumulated result has multiplicity 1 everywhere.

Partitioned runs (``parallelism`` 2 and 4) must give the same per-epoch deltas as 1.
Example counts scale with the hypothesis profile (``HYPOTHESIS_PROFILE``: dev, ci,
thorough; see ``tests/conftest.py``).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from oracle import DuckDBOracle, Row, accumulate, diff_counters, normalise_rows
from strategies import (
    FAMILIES,
    NAMED_QUERIES,
    Case,
    cases,
    format_case,
    is_acyclic,
    random_case,
    seeded_case,
    streams_for,
)

from core.records import EpochEnd, Update


def examples(weight: float) -> int:
    """Examples for one test: ``weight`` x the profile's ``max_examples``."""
    return max(2, int(settings.default.max_examples * weight))


def _api() -> Any:
    return pytest.importorskip("dataflow.api", reason="the engine (dataflow.api) is absent")


def _fail(case: Case, upto: int, what: str) -> None:
    shown = case._replace(records=case.records[:upto])
    pytest.fail(f"{what}\n-- case, up to the failing epoch --\n{format_case(shown)}")


def run_case(case: Case, parallelism: int = 1, snapshots: bool = True) -> list[Counter[Row]]:
    """Run ``case`` on the engine, checking every epoch against DuckDB; returns the
    normalised per-epoch deltas."""
    api = _api()
    try:
        if case.rates is not None:
            query = api.compile_query(case.sql, rates=list(case.rates))
        else:
            query = api.compile_query(case.sql)
    except Exception as err:  # a generated query must compile (all are acyclic)
        _fail(case, 0, f"compile_query rejected a supported query: {err!r}")
        raise
    view = query.maintain(parallelism=parallelism)
    oracle = DuckDBOracle(case.sql)
    distinct = bool(case.spec.distinct) if case.spec else "DISTINCT" in case.sql.upper()
    acc: Counter[Row] = Counter()
    deltas: list[Counter[Row]] = []
    pending = 0
    epoch = 0

    if snapshots:
        snap = normalise_rows(view.snapshot())
        diff = diff_counters(snap, oracle.result())
        if diff:
            _fail(case, 0, f"snapshot of the empty database differs from DuckDB:\n{diff}")

    def close(upto: int) -> None:
        nonlocal pending, epoch
        epoch += 1
        delta = view.end_epoch()
        where = f"epoch {epoch} (after record {upto})"
        if delta.epoch != epoch:
            _fail(case, upto, f"{where}: EpochDelta.epoch is {delta.epoch}")
        rows = [(m, tuple(r)) for m, r in delta.rows]
        if any(m == 0 for m, _ in rows):
            _fail(case, upto, f"{where}: delta has zero multiplicities: {rows}")
        if len({r for _, r in rows}) != len(rows):
            _fail(case, upto, f"{where}: delta is not consolidated: {rows}")
        if pending == 0 and rows and epoch > 1:  # epoch 1 may bring Q(empty db)
            _fail(case, upto, f"{where}: an epoch without updates has a delta: {rows}")
        deltas.append(normalise_rows(rows))
        accumulate(acc, rows)
        expected = oracle.result()
        diff = diff_counters(acc, expected)
        if diff:
            _fail(case, upto, f"{where}: accumulated deltas differ from DuckDB:\n{diff}")
        if distinct and any(m != 1 for m in acc.values()):
            _fail(case, upto, f"{where}: DISTINCT result has multiplicities {acc}")
        if snapshots:
            raw = view.snapshot()
            if any(m <= 0 for m, _ in raw):
                _fail(case, upto, f"{where}: snapshot has non-positive multiplicities: {raw}")
            snap = normalise_rows(raw)
            diff = diff_counters(snap, expected)
            if diff:
                _fail(case, upto, f"{where}: snapshot differs from DuckDB:\n{diff}")
        pending = 0

    for i, rec in enumerate(case.records, start=1):
        if isinstance(rec, EpochEnd):
            close(i)
            continue
        assert isinstance(rec, Update)
        view.apply(rec)
        oracle.apply(rec)
        pending += 1
        if case.epoch_size is not None and pending >= case.epoch_size:
            close(i)
    if pending:
        close(len(case.records))
    oracle.close()
    return deltas


def _event(case: Case) -> None:
    if case.spec is not None:
        event(f"shape={case.spec.shape}")


# -- the oracle itself -----------------------------------------------------------------
@settings(max_examples=examples(0.6))
@given(cases(max_updates=30))
def test_oracle_matches_bruteforce(case: Case) -> None:
    """DuckDB (through the oracle) agrees with a Python nested-loop evaluation."""
    assert case.spec is not None and is_acyclic(case.spec.edges())
    _event(case)
    oracle = DuckDBOracle(case.sql)
    db: dict[str, Counter[Row]] = {}
    for i, rec in enumerate(case.records):
        if isinstance(rec, Update):
            oracle.apply(rec)
            bag = db.setdefault(rec.relation, Counter())
            bag[rec.row] += rec.signed_mult
            if not bag[rec.row]:
                del bag[rec.row]
        if i % 5 == 4 or i == len(case.records) - 1:
            expected = normalise_rows((m, r) for r, m in case.spec.evaluate(db).items())
            assert not diff_counters(oracle.result(), expected), format_case(case)


def test_oracle_deletes_exact_copies_with_nulls() -> None:
    oracle = DuckDBOracle("CREATE TABLE R(a INT, b INT); SELECT a, b FROM R;")
    oracle.apply(Update("+", "R", (1, None), 3))
    oracle.apply(Update("+", "R", (None, None), 2))
    oracle.apply(Update("-", "R", (1, None), 2))
    oracle.apply(Update("-", "R", (None, None)))
    assert oracle.result() == Counter({(1, None): 1, (None, None): 1})
    with pytest.raises(ValueError, match="delete of 2 copies"):
        oracle.apply(Update("-", "R", (1, None), 2))


def test_oracle_self_join_projection_known_answer() -> None:
    """DuckDB 2.0.0 answers this wrongly unless common_subplan is disabled (oracle.py)."""
    oracle = DuckDBOracle(
        "CREATE TABLE G(src INT, dst INT, w INT); SELECT G2.w, G4.dst FROM G G1, G G2, G G3, "
        "G G4 WHERE G1.dst = G2.src AND G1.src = G3.src AND G3.dst = G4.src;"
    )
    oracle.apply(Update("+", "G", (0, 1, 0)))
    oracle.apply(Update("+", "G", (0, 0, 0)))
    assert oracle.result() == Counter({(0, 0): 2, (0, 1): 2})


def test_oracle_aggregates_on_empty_database() -> None:
    oracle = DuckDBOracle(
        "CREATE TABLE R(a INT, b FLOAT); SELECT COUNT(*), COUNT(b), SUM(a), AVG(b) FROM R;"
    )
    assert oracle.result() == Counter({(0, 0, None, None): 1})
    oracle.apply(Update("+", "R", (2, 0.5), 2))
    assert oracle.result() == Counter({(2, 2, 4, 0.5): 1})
    got = next(iter(oracle.result()))
    assert isinstance(got[2], int) and isinstance(got[3], float)


# -- the engine against DuckDB ---------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=examples(2.0))
@given(data=st.data())
def test_family_against_duckdb(family: str, data: st.DataObject) -> None:
    case = data.draw(cases(family), label="case")
    _event(case)
    run_case(case)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_random_sweep(family: str) -> None:
    """Plain seeded-random cases: more distinct queries per second than hypothesis
    (which mutates nearby examples); a failure names its seed."""
    for seed in range(examples(1.0)):
        run_case(random_case(random.Random(f"{family}-{seed}"), family))


@pytest.mark.parametrize("name", sorted(NAMED_QUERIES))
@settings(max_examples=examples(0.2))
@given(data=st.data())
def test_named_query_against_duckdb(name: str, data: st.DataObject) -> None:
    case = data.draw(streams_for(NAMED_QUERIES[name]), label="case")
    run_case(case)


@pytest.mark.parametrize("name", sorted(NAMED_QUERIES))
def test_named_query_seeded_stream(name: str) -> None:
    """A fixed pseudo-random stream per named query (no hypothesis: reproducible as is)."""
    run_case(seeded_case(NAMED_QUERIES[name], name))


@pytest.mark.parametrize("parallelism", [2, 4])
@settings(max_examples=examples(0.5))
@given(data=st.data())
def test_partitioned_runs_match_parallelism_one(parallelism: int, data: st.DataObject) -> None:
    case = data.draw(cases(max_updates=40), label="case")
    _event(case)
    one = run_case(case, parallelism=1, snapshots=False)
    many = run_case(case, parallelism=parallelism)
    for k, (a, b) in enumerate(zip(one, many), start=1):
        diff = diff_counters(b, a)
        if diff:
            _fail(case, len(case.records), f"epoch {k}: P={parallelism} differs from P=1:\n{diff}")
    assert len(one) == len(many)
