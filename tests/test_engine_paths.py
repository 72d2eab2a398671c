"""The CROWN engine's two ways of passing a node's changes to the enumeration: its
generated delta walks bound into the node code (``bind_emit``, ``bind_keyhook``:
integer payloads) against the nodes' ``on_tuple``/``on_key`` hooks
(``generated_hooks=False``, what ring payloads take): the same row changes epoch by
epoch and the same full result, on the property tests' seeded-random queries and
streams of every family (DuckDB checks the results in test_oracle_property). The node
operations themselves exist once, as generated code (operators/nodecode.py), so both
run them."""

from __future__ import annotations

import random
from typing import Any

import pytest
from strategies import FAMILIES, Case, random_case

from core.records import EpochEnd, Update
from dataflow.api import compile_query
from dataflow.circuit.kinds import CrownKind
from dataflow.engines.crown import Engine
from operators.input import RelationInput

CASES_PER_FAMILY = 150


def _nonzero(engine: Engine, changes: dict[Any, Any]) -> dict[Any, Any]:
    is_zero = engine.ring.is_zero
    return {row: v for row, v in changes.items() if not is_zero(v)}


def _run_both(case: Case) -> int:
    """Feed ``case`` to both engines; assert equal changes per epoch. Returns the
    number of epochs compared (0: not a CROWN query)."""
    query = compile_query(case.sql)
    if not isinstance(query.kind, CrownKind):
        return 0
    plan, dataflow = query.plan, query.dataflow
    generated = Engine(plan, dataflow)
    hooked = Engine(plan, dataflow, generated_hooks=False)
    inputs: dict[str, list[tuple[int, RelationInput]]] = {}
    for atom in plan.cq.atoms:
        inputs.setdefault(atom.relation.name.lower(), []).append(
            (atom.index, RelationInput(atom, plan.cq.join_vars)))
    epochs = 0
    pending = 0

    def close(where: int) -> None:
        nonlocal epochs, pending
        epochs += 1
        pending = 0
        a = _nonzero(generated, generated.take_delta())
        b = _nonzero(hooked, hooked.take_delta())
        assert a == b, f"{case!r}\nepoch {epochs} (record {where}): direct {a}, hooks {b}"

    for i, rec in enumerate(case.records, start=1):
        if isinstance(rec, EpochEnd):
            close(i)
            continue
        assert isinstance(rec, Update)
        row = query.schema.relation(rec.relation).coerce_row(list(rec.row))
        for atom, project in inputs.get(rec.relation.lower(), []):
            t = project(row)
            if t is not None:
                generated.apply_atom(atom, t, rec.signed_mult)
                hooked.apply_atom(atom, t, rec.signed_mult)
        pending += 1
        if case.epoch_size is not None and pending >= case.epoch_size:
            close(i)
    close(len(case.records))
    assert _nonzero(generated, generated.full()) == _nonzero(hooked, hooked.full())
    return epochs


@pytest.mark.parametrize("family", FAMILIES)
def test_direct_walks_match_hooks(family: str) -> None:
    compared = sum(_run_both(random_case(random.Random(f"paths-{family}-{seed}"), family))
                   for seed in range(CASES_PER_FAMILY))
    assert compared >= CASES_PER_FAMILY  # (at least one epoch per case on average)
