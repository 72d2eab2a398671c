"""The epoch alignment the Spark and Flink Kafka sources share (pure, no broker):
reading a multi-partition topic in pieces - each read from the previous read's offsets,
fetching an arbitrary amount per partition - releases exactly the stream that one read
of everything releases, which is connectors.kafka.EpochAligner's order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from connectors.kafka import EpochAligner
from connectors.kafka.epochs import ReadPosition, _Fetched, align
from core.epochs import EpochCursor
from core.records import EPOCH_END, EpochEnd, Record, Update

# A partition's log: updates (by value) and markers (None).
logs = st.lists(st.lists(st.one_of(st.none(), st.integers(0, 99)), max_size=12),
                min_size=1, max_size=3)


def as_records(log: list[int | None]) -> list[Record]:
    return [EPOCH_END if v is None else Update("+", "G", (v,)) for v in log]


def shown(recs: list[Record]) -> list[object]:
    return ["*" if isinstance(r, EpochEnd) else r.row[0] for r in recs]  # type: ignore[union-attr]


@given(logs, st.lists(st.integers(0, 5), max_size=30))
def test_reading_in_pieces_equals_one_read(parts: list[list[int | None]],
                                           steps: list[int]) -> None:
    records = [as_records(log) for log in parts]
    whole, ends = align([_Fetched(list(enumerate(r)), len(r)) for r in records], final=True)
    assert ends == [len(r) for r in records]

    offsets = [0] * len(records)
    pieces: list[Record] = []
    for i, step in enumerate(steps):
        p = i % len(records)
        fetched = []
        for q, r in enumerate(records):
            end = min(len(r), offsets[q] + (step if q == p else len(r)))
            fetched.append(_Fetched([(o, r[o]) for o in range(offsets[q], end)], end))
        out, offsets = align(fetched, final=False)
        pieces += out
    rest = [_Fetched([(o, r[o]) for o in range(offsets[q], len(r))], len(r))
            for q, r in enumerate(records)]
    out, _ = align(rest, final=True)
    assert shown(pieces + out) == shown(whole)

    aligner: EpochAligner[int, Record] = EpochAligner(list(range(len(records))))
    for q, r in enumerate(records):
        for rec in r:
            (aligner.mark if isinstance(rec, EpochEnd) else aligner.push)(q, rec)
    expected: list[Record] = []
    for epoch in aligner.pop_epochs():
        expected += [*epoch.items, EPOCH_END]
    expected += aligner.tail()
    assert shown(whole) == shown(expected)


def test_read_position_round_trips_through_json() -> None:
    import json

    pos = ReadPosition({"u:0": 4, "u:1": 0}, None, EpochCursor(9, 3, 2, 1), False)
    assert ReadPosition.from_dict(json.loads(json.dumps(pos.to_dict()))) == pos
