"""The run loop keeps the cyclic garbage collector off the view's state
(core.memory.HeapSettler): after enough updates it collects once and freezes what
survived. That is safe only because the state holds no reference cycles: anything the
state drops is freed by its reference count, so nothing frozen needs the collector.
These tests check both: the loop settles when due (and not when turned off), and
queries of every operator family leave no cyclic garbage behind a freeze after each
epoch (TPC-H's joins, views, GHD bags, top-k; a window function; set operations).
"""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dataflow.circuit.drive as drive_module
from connectors.files import read_updates
from core.memory import HeapSettler
from core.records import EPOCH_END, Record, Update
from dataflow.api import compile_query


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """(a test that freezes hands the objects back to the collector after it)"""
    gc.collect()
    yield
    gc.unfreeze()
    gc.collect()


def _cyclic_garbage_behind_freezes(make_view: Any, records: list[Record],
                                   epoch_size: int) -> tuple[int, int]:
    """(objects the collector finds unreachable once the freezes after every epoch
    are undone: what settling after each epoch would have kept forever; epochs). A
    first run, not counted, makes what is made once (compiled code, caches)."""
    for _delta in drive_module.run_view(make_view(), records, epoch_size):
        pass
    gc.collect()
    settle = HeapSettler(after_updates=1, enabled=True)
    epochs = 0
    view = make_view()  # (held: a view dropped is cyclic garbage itself, see HeapSettler)
    for _delta in drive_module.run_view(view, records, epoch_size):
        settle.epoch_closed(1)
        epochs += 1
    gc.unfreeze()
    garbage = gc.collect()
    del view
    return garbage, epochs


@pytest.mark.parametrize("name", ["q02", "q05", "q09", "q13", "q15", "q18", "q21"])
def test_tpch_state_leaves_no_cyclic_garbage(tpch_sf001: Path, name: str,
                                             unfrozen: None) -> None:
    q = compile_query((tpch_sf001 / "queries" / f"{name}.sql").read_text())
    records = list(read_updates(str(tpch_sf001 / "updates.csv"), q.schema))
    garbage, epochs = _cyclic_garbage_behind_freezes(q.maintain, records, 50)
    assert epochs > 100 and garbage < epochs // 10, (garbage, epochs)  # (not one an epoch)


_SQL = {
    "window": ("CREATE TABLE R(a INT, b INT, c INT);\n"
               "SELECT a, b, RANK() OVER (PARTITION BY a ORDER BY b DESC) AS r, "
               "SUM(c) OVER (PARTITION BY a ORDER BY b) AS s, "
               "LAG(c) OVER (PARTITION BY a ORDER BY b, c) AS p FROM R "
               "ORDER BY a, b, r LIMIT 7"),
    "setops": ("CREATE TABLE R(a INT, b INT, c INT);\n"
               "SELECT a FROM R WHERE b > 1 EXCEPT SELECT a FROM R WHERE c > 1 "
               "UNION ALL SELECT b FROM R"),
}


def _random_stream(seed: int) -> list[Record]:
    rng = random.Random(seed)
    live: list[tuple[int, int, int]] = []
    out: list[Record] = []
    for _ in range(600):
        if live and rng.random() < 0.35:
            out.append(Update("-", "R", live.pop(rng.randrange(len(live)))))
        else:
            row = (rng.randrange(5), rng.randrange(6), rng.randrange(4))
            live.append(row)
            out.append(Update("+", "R", row))
        if rng.random() < 0.02:
            out.append(EPOCH_END)
    return out


@pytest.mark.parametrize("shape", sorted(_SQL))
def test_window_and_set_operation_state_leaves_no_cyclic_garbage(shape: str,
                                                                unfrozen: None) -> None:
    garbage, epochs = _cyclic_garbage_behind_freezes(compile_query(_SQL[shape]).maintain,
                                                     _random_stream(7), 5)
    assert epochs > 100 and garbage < epochs // 10, (garbage, epochs)


def test_the_loop_settles_after_a_big_epoch(unfrozen: None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """(the drive loop of ``ivmflow run``: a freeze after an epoch of at least the
    mark, none after smaller ones; none at all when turned off)"""
    monkeypatch.setattr(drive_module, "HeapSettler",
                        lambda: HeapSettler(after_updates=90, enabled=True))
    q = compile_query(_SQL["setops"])
    updates = [r for r in _random_stream(3) if isinstance(r, Update)]
    drive_module.drive(q.maintain(), updates[:100], on_delta=lambda d: None)
    assert gc.get_freeze_count() > 0  # (one epoch of 100 updates: past the mark)
    gc.unfreeze()
    drive_module.drive(q.maintain(), updates, epoch_size=50, on_delta=lambda d: None)
    assert gc.get_freeze_count() == 0  # (epochs of at most 50 updates)
    monkeypatch.setattr(drive_module, "HeapSettler",
                        lambda: HeapSettler(after_updates=1, enabled=False))
    drive_module.drive(q.maintain(), _random_stream(3), epoch_size=100,
                       on_delta=lambda d: None)
    assert gc.get_freeze_count() == 0
