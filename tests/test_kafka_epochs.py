"""The epoch alignment the Spark and Flink Kafka sources share (pure, no broker):
reading a multi-partition topic in pieces - each read from the previous read's offsets,
fetching an arbitrary amount per partition - releases exactly the stream that one read
of everything releases, which is connectors.kafka.EpochAligner's order."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.kafka import EpochAligner
from connectors.kafka.epochs import EpochReader, ReadPosition, _Fetched, align, parse_kafka_url
from core.epochs import EpochCursor, NumberedRecord
from core.records import EPOCH_END, EpochEnd, Record, Update
from core.schema import Schema

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


class _SlowReader(EpochReader):
    """An EpochReader over in-memory partition logs whose fetch delivers only
    ``per_second * timeout_s`` records per partition before its timeout: a broker (or a
    loaded machine) slower than the runners' 1 s tick."""

    def __init__(self, logs: list[list[Record]], per_second: int) -> None:
        super().__init__(parse_kafka_url("kafka://127.0.0.1:1/u"), Schema({}))
        self.logs = {f"u:{i}": log for i, log in enumerate(logs)}
        self.per_second = per_second
        self.timeouts: list[float] = []

    def end_offsets(self) -> dict[str, int]:
        return {k: len(log) for k, log in self.logs.items()}

    def _fetch(self, starts: dict[str, int], targets: dict[str, int],
               timeout_s: float, keep_from: dict[str, int] | None = None) -> list[_Fetched]:
        self.timeouts.append(timeout_s)
        out = []
        for k, log in self.logs.items():
            end = min(targets[k], starts[k] + int(self.per_second * timeout_s))
            out.append(_Fetched(list(enumerate(log))[starts[k]:end], end))
        return out


def test_an_epoch_slower_to_fetch_than_the_timeout_is_read_not_retried_forever() -> None:
    """Before: a fetch that timed out before an epoch's marker returned nothing and the
    same position, so every 1 s tick of the Flink and Spark Kafka sources started over
    (TPC-H's 8000-update epochs never arrived on a loaded machine: the job ran for
    minutes writing nothing). Now the fetch gets more time until the epoch is whole."""
    epoch = [*as_records(list(range(40))), EPOCH_END]
    reader = _SlowReader([epoch, epoch], per_second=5)
    pos = ReadPosition({"u:0": 0, "u:1": 0}, {"u:0": 41, "u:1": 41}, EpochCursor(), False)
    numbered, nxt = reader.read(pos, max_records=100, timeout_s=1.0)
    assert len(numbered) == 81 and nxt.done
    # Records that never arrive (a broker gone) end the read with an error, not a hang:
    # after fetches of 1, 2, 4 and 8 s that got nothing.
    stuck = _SlowReader([epoch], per_second=0)
    with pytest.raises(TimeoutError, match="kafka topic 'u' partition 0: expected the records "
                       "from offset 0 up to 41, fetched none in 8 s"):
        stuck.read(ReadPosition({"u:0": 0}, None, EpochCursor(), False), timeout_s=1.0)
    assert stuck.timeouts == [1.0, 2.0, 4.0, 8.0]


@pytest.mark.parametrize("partitions", [1, 3])
def test_reads_from_a_broker_in_small_pieces_equal_one_read_and_replay(
        kafka_bootstrap: str, tmp_path: Path, partitions: int) -> None:
    """A reader keeps the messages it fetched past what a read needed (a seek drops the
    consumer's fetched-ahead records; the tests' broker answers every fetch of a large
    partition with all of it): reads in pieces of a few records, going on from there
    without a seek, give what one read of everything gives, and every piece read again
    from its start (a replayed Spark batch, after other reads moved the consumer on)
    gives the same records."""
    from dataflow.api import compile_query
    from dataflow.cli import main

    q, u = tmp_path / "q.sql", tmp_path / "u.csv"
    q.write_text("CREATE TABLE G(src INT, dst INT);\nSELECT COUNT(*) AS n FROM G;\n")
    lines = [f"+,G,{i},{i * 7 % 13}" for i in range(60)]
    u.write_text("\n".join(line if i % 9 else f"*\n{line}" for i, line in enumerate(lines))
                 + "\n")
    topic = f"pieces-{partitions}-{tmp_path.name}"
    url = f"kafka://{kafka_bootstrap}/{topic}"
    assert main(["produce", str(u), url, "--query", str(q), "--partitions", str(partitions),
                 "--quiet"]) == 0
    schema = compile_query(q.read_text()).schema

    def numbered_shown(numbered: list[NumberedRecord]) -> list[object]:
        return [n.update.row[0] if n.update is not None else "*" for n in numbered]

    def shown_all(reader: EpochReader, step: int) -> tuple[list[object], list[tuple[
            ReadPosition, ReadPosition, list[object]]]]:
        pos, out, pieces = reader.initial(stop_at_end=True), [], []
        while not pos.done:
            numbered, end = reader.read(pos, max_records=step)
            got = numbered_shown(numbered)
            pieces.append((pos, end, got))
            out.extend(got)
            pos = end
        return out, pieces

    one = EpochReader(parse_kafka_url(url), schema)
    whole, _ = shown_all(one, 10_000)
    one.close()
    assert whole.count("*") >= 6 and sum(1 for v in whole if v != "*") == 60
    reader = EpochReader(parse_kafka_url(url), schema)
    consumer = reader.consumer()
    seeks: list[object] = []
    seek = consumer.seek
    consumer.seek = lambda tp, offset: (seeks.append((tp, offset)), seek(tp, offset))[1]
    try:
        small, pieces = shown_all(reader, 2)
        assert small == whole and len(pieces) > 5
        assert len(seeks) == partitions, seeks  # once each, then on from where it is
        for start, end, got in reversed(pieces):
            assert numbered_shown(reader.read_between(start, end)) == got
    finally:
        reader.close()
