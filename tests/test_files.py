"""File connectors: the update CSV reader (every bad-input class of docs/formats.md), the
atomic CSV sinks (commit records, resume), the dead-letter sink and the generators."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.base import DeadLetterSink, DeltaSink, SnapshotSink
from connectors.files import (
    SKIP_HINT,
    CollectingSink,
    CsvStreamSink,
    DeadLetterCsvSink,
    DeltaCsvSink,
    ResumeError,
    SnapshotCsvSink,
    read_updates,
    read_updates_from_lines,
)
from connectors.generators import fifo_window_stream, skewed_graph, write_update_csv
from core.errors import InputError
from core.records import EpochDelta, EpochEnd, Update, format_update, format_value
from core.schema import Column, Relation, Schema

G = Relation("G", (Column("src", "INT"), Column("dst", "INT")))
R = Relation(
    "Person",
    (Column("name", "TEXT"), Column("score", "FLOAT"), Column("active", "BOOL")),
)
SCHEMA = Schema({"G": G, "Person": R})


def parse(text: str, **kw: object) -> list[object]:
    lines = [line + "\n" for line in text.split("\n")]  # as a file iterates: on \n only
    return list(read_updates_from_lines(lines, SCHEMA, "u.csv", **kw))  # type: ignore[arg-type]


def parse_error(text: str) -> InputError:
    with pytest.raises(InputError) as info:
        parse(text)
    return info.value


# ---------------------------------------------------------------------------------------
# Reading valid input


def test_ops_multiplicities_markers_and_sources() -> None:
    recs = parse("# header\n\n+,G,1,2\n-,G,1,2\n+3,G,2,3\n-2,g,2,3\n*\n  \n+,G,,5\n")
    assert recs == [
        Update("+", "G", (1, 2)),
        Update("-", "G", (1, 2)),
        Update("+", "G", (2, 3), 3),
        Update("-", "G", (2, 3), 2),
        EpochEnd(),
        Update("+", "G", (None, 5)),
    ]
    assert [r.source for r in recs] == [  # type: ignore[attr-defined]
        "u.csv:3", "u.csv:4", "u.csv:5", "u.csv:6", "u.csv:7", "u.csv:9",
    ]


def test_relation_names_are_case_insensitive_and_canonical() -> None:
    recs = parse("+,person,ann,1.5,true\n+, PERSON ,bob,,f\n")
    assert [r.relation for r in recs] == ["Person", "Person"]  # type: ignore[attr-defined]
    assert [r.row for r in recs] == [("ann", 1.5, True), ("bob", None, False)]  # type: ignore[attr-defined]


def test_quoted_fields_crlf_and_bom() -> None:
    recs = parse('\ufeff+,Person,"Smith, J.",2,yes\r\n+,Person,"say ""hi""",-1e3,0\r\n')
    assert [r.row for r in recs] == [  # type: ignore[attr-defined]
        ("Smith, J.", 2.0, True), ('say "hi"', -1000.0, False),
    ]


def test_star_with_empty_trailing_fields_is_a_marker() -> None:
    assert parse("*,,\n") == [EpochEnd()]


def test_read_updates_file_directory_and_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / "b.csv").write_text("+,G,2,2\n")
    (d / "a.csv").write_text("+,G,1,1\n*\n")
    (d / "notes.txt").write_text("not an update file\n")
    recs = list(read_updates(d, SCHEMA))
    assert [getattr(r, "row", None) for r in recs] == [(1, 1), None, (2, 2)]
    assert [r.source for r in recs] == [f"{d}/a.csv:1", f"{d}/a.csv:2", f"{d}/b.csv:1"]

    monkeypatch.setattr("sys.stdin", io.StringIO("+,G,7,8\n"))
    assert [r.source for r in read_updates("-", SCHEMA)] == ["<stdin>:1"]


def test_missing_file_fails_at_call_time(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        read_updates(tmp_path / "nope.csv", SCHEMA)
    assert info.value.filename == str(tmp_path / "nope.csv")


# ---------------------------------------------------------------------------------------
# Bad input: every class names source:line, record, expected and found


def test_malformed_op() -> None:
    err = parse_error("+,G,1,2\nx,G,1,2\n")
    assert err.source == "u.csv:2"
    assert err.record == "x,G,1,2"
    assert err.expected == "op '+', '-', '+N', '-N' or '*'"
    assert err.found == "op 'x'"
    assert err.hint == SKIP_HINT
    assert str(err).startswith("u.csv:2: bad update record 'x,G,1,2': expected op '+', '-'")
    for bad in ("++,G,1,2", "+ 1,G,1,2", "+a,G,1,2", ",G,1,2", "insert,G,1,2"):
        assert parse_error(bad).expected.startswith("op '+'"), bad


@pytest.mark.parametrize("op", ["+0", "-0", "-00"])
def test_multiplicity_must_be_positive(op: str) -> None:
    err = parse_error(f"{op},G,1,2")
    assert err.expected == "a positive multiplicity after the op"
    assert err.found == f"multiplicity 0 in {op!r}"


def test_unknown_relation_lists_declared_ones() -> None:
    err = parse_error("+,H,1,2")
    assert err.expected == "a relation the query declares (G, Person)"
    assert err.found == "relation 'H'"
    assert parse_error("+").found == "end of line"


def test_wrong_arity() -> None:
    err = parse_error("+,G,1")
    assert err.expected == "2 values for G(src, dst)"
    assert err.found == "1 value"
    assert parse_error("+,G,1,2,").found == "3 values"
    assert parse_error("+,G").found == "0 values"


@pytest.mark.parametrize(
    ("line", "expected", "found"),
    [
        ("+,G,1,x2", "an INT (integer) for column G.dst", "'x2'"),
        ("+,G,1.5x,2", "an INT (integer) for column G.src", "'1.5x'"),
        ("+,Person,a,high,true", "a FLOAT (number) for column Person.score", "'high'"),
        ("+,Person,a,1,maybe", "a BOOL (true/false) for column Person.active", "'maybe'"),
    ],
)
def test_unparsable_value_names_column_type_and_text(
    line: str, expected: str, found: str
) -> None:
    err = parse_error(line)
    assert (err.source, err.record, err.expected, err.found) == ("u.csv:1", line, expected, found)


def test_marker_with_fields_and_broken_quotes_and_bad_bytes(tmp_path: Path) -> None:
    assert parse_error("*,G").found == "1 more field after '*'"
    assert "malformed CSV" in parse_error('+,Person,"open,1,true').found
    p = tmp_path / "u.csv"
    p.write_bytes(b"+,G,1,2\n+,Person,\xff\xfe,1,true\n")
    with pytest.raises(InputError) as info:
        list(read_updates(p, SCHEMA))
    assert info.value.source == f"{p}:2"
    assert info.value.found == "bytes that are not valid UTF-8"


def test_skip_sends_bad_records_to_dead_letter_and_goes_on(tmp_path: Path) -> None:
    text = "+,G,1,2\nx,G,1,2\n+,H,1\n+,G,1\n+,G,a,1\n+0,G,1,1\n*\n+,G,3,4\n"
    dead = CollectingSink()
    recs = parse(text, on_error="skip", dead_letter=dead)
    assert recs == [Update("+", "G", (1, 2)), EpochEnd(), Update("+", "G", (3, 4))]
    assert [e.source for e in dead.dead_letters] == [f"u.csv:{i}" for i in range(2, 7)]

    path = tmp_path / "dead.csv"
    with DeadLetterCsvSink(path) as sink:
        parse(text, on_error="skip", dead_letter=sink)
        assert sink.count == 5
    lines = path.read_text().splitlines()
    assert lines[0] == "source,reason,record"
    assert lines[1] == (
        "u.csv:2,\"expected op '+', '-', '+N', '-N' or '*', found op 'x'\",\"x,G,1,2\""
    )
    assert len(lines) == 6


def test_on_error_is_checked() -> None:
    with pytest.raises(ValueError, match="on_error"):
        parse("+,G,1,2", on_error="ignore")


# ---------------------------------------------------------------------------------------
# Formatting round trip


def test_format_value() -> None:
    assert [format_value(v) for v in (None, True, False, 0.1, 1e16, -3, "x")] == [
        "", "true", "false", "0.1", "1e+16", "-3", "x",
    ]


text_values = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\r\n\x85\u2028\u2029"),
    min_size=1,
)


@settings(max_examples=200, deadline=None)
@given(
    op=st.sampled_from(["+", "-"]),
    mult=st.integers(1, 5),
    name=st.none() | text_values,
    score=st.none() | st.floats(allow_nan=False),
    active=st.none() | st.booleans(),
)
def test_format_update_round_trips(
    op: str, mult: int, name: str | None, score: float | None, active: bool | None
) -> None:
    u = Update("+" if op == "+" else "-", "Person", (name, score, active), mult)
    (back,) = parse(format_update(u) + "\n")
    assert back == u


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(
    st.integers(-3, 3).filter(bool),
    st.tuples(st.none() | st.text(), st.none() | st.integers() | st.floats(), st.booleans()),
)))
def test_sink_blocks_are_csv(rows: list[tuple[int, tuple[object, ...]]]) -> None:
    buf = io.StringIO()
    CsvStreamSink(buf, ["a", "b", "c"]).write_epoch(delta(4, *rows))
    back = list(csv.reader(io.StringIO(buf.getvalue(), newline="")))
    assert back[0] == ["epoch", "mult", "a", "b", "c"]
    assert back[1:] == [["4", str(m), *(format_value(v) for v in r)] for m, r in rows]  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# Sinks


def delta(epoch: int, *rows: tuple[int, tuple[object, ...]]) -> EpochDelta:
    return EpochDelta(epoch, tuple(rows))  # type: ignore[arg-type]


def commit(path: Path) -> dict[str, int]:
    state: dict[str, int] = json.loads(Path(f"{path}.commit").read_text())
    return state


def test_delta_sink_format_and_commit_records(tmp_path: Path) -> None:
    path = tmp_path / "out" / "deltas.csv"  # parent directories are created
    sink = DeltaCsvSink(path, ["name", "score", "ok"])
    assert isinstance(sink, DeltaSink)
    assert commit(path) == {"epoch": 0, "bytes": len("epoch,mult,name,score,ok\n")}
    sink.write_epoch(delta(1, (1, ("a,b", 0.1, True)), (-2, (None, 1e300, False))))
    sink.write_epoch(delta(2))  # empty: writes nothing, commits nothing
    sink.write_epoch(delta(3, (1, ('q"', -0.0, None))))
    sink.close()
    sink.close()
    text = path.read_text()
    assert text == (
        "epoch,mult,name,score,ok\n"
        '1,1,"a,b",0.1,true\n'
        "1,-2,,1e+300,false\n"
        '3,1,"q""",-0.0,\n'
    )
    assert commit(path) == {"epoch": 3, "bytes": len(text.encode())}
    assert not Path(f"{path}.commit.tmp").exists()


def test_delta_sink_rejects_out_of_order_epochs(tmp_path: Path) -> None:
    with DeltaCsvSink(tmp_path / "d.csv", ["x"], fsync=False) as sink:
        sink.write_epoch(delta(2, (1, (1,))))
        with pytest.raises(ValueError, match="not after"):
            sink.write_epoch(delta(2, (1, (1,))))


def test_delta_sink_resume_cuts_uncommitted_tail(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    with DeltaCsvSink(path, ["x"]) as sink:
        sink.write_epoch(delta(1, (1, (10,))))
        sink.write_epoch(delta(4, (-1, (10,)), (1, (11,))))
    committed = path.read_text()
    with open(path, "a") as f:  # a crash in the middle of epoch 5
        f.write("5,1,12\n5,-1,1")
    resumed = DeltaCsvSink(path, ["x"], resume=True)
    assert resumed.last_committed_epoch == 4
    assert path.read_text() == committed
    with pytest.raises(ValueError, match="not after"):
        resumed.write_epoch(delta(4, (1, (1,))))
    resumed.write_epoch(delta(5, (1, (12,))))
    resumed.close()
    assert path.read_text() == committed + "5,1,12\n"


def test_delta_sink_resume_edge_cases(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    # nothing to resume: a fresh file
    assert DeltaCsvSink(path, ["x"], resume=True).last_committed_epoch == 0
    with DeltaCsvSink(path, ["x"]) as sink:
        sink.write_epoch(delta(1, (1, (1,))))
    with pytest.raises(ResumeError, match="header"):
        DeltaCsvSink(path, ["y"], resume=True)
    Path(f"{path}.commit").write_text('{"epoch": 1, "bytes": 9999}')
    with pytest.raises(ResumeError, match="9999"):
        DeltaCsvSink(path, ["x"], resume=True)
    Path(f"{path}.commit").write_text("garbage")
    with pytest.raises(ResumeError, match="not a commit record"):
        DeltaCsvSink(path, ["x"], resume=True)
    # without resume the old file is replaced
    DeltaCsvSink(path, ["x"]).close()
    assert path.read_text() == "epoch,mult,x\n"
    assert commit(path)["epoch"] == 0


def test_snapshot_sink(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    sink = SnapshotCsvSink(path, ["a", "b"])
    assert isinstance(sink, SnapshotSink)
    sink.write_snapshot(1, [(1, (1, 2)), (3, (2, 2))])
    sink.write_snapshot(2, [])
    sink.close()
    assert path.read_text() == "snapshot,mult,a,b\n1,1,1,2\n1,3,2,2\n"
    assert commit(path) == {"snapshot": 1, "bytes": len(path.read_bytes())}
    again = SnapshotCsvSink(path, ["a", "b"], resume=True)
    assert again.last_committed_snapshot == 1
    again.close()


def test_stream_and_collecting_sinks() -> None:
    buf = io.StringIO()
    sink = CsvStreamSink(buf, ["x"])
    sink.write_epoch(delta(1, (1, (None,))))
    sink.write_epoch(delta(2))
    sink.write_snapshot(1, [(2, (0.5,))])
    sink.close()
    assert buf.getvalue() == "epoch,mult,x\n1,1,\n1,2,0.5\n"

    coll = CollectingSink()
    assert isinstance(coll, DeltaSink) and isinstance(coll, SnapshotSink)
    assert isinstance(coll, DeadLetterSink)
    coll.write_epoch(delta(1, (1, (1,))))
    coll.write_snapshot(1, [(1, (1,))])
    coll.close()
    assert coll.rows() == [(1, 1, (1,))] and coll.snapshots == [(1, [(1, (1,))])]
    assert coll.closed


# ---------------------------------------------------------------------------------------
# Generators


def test_skewed_graph_is_exact_distinct_reproducible_and_skewed() -> None:
    edges = skewed_graph(4000, seed=7)
    assert len(edges) == 4000 == len(set(edges))
    assert all(s != d for s, d in edges)
    assert edges == skewed_graph(4000, seed=7) != skewed_graph(4000, seed=8)
    out_deg = Counter(s for s, _ in edges)
    in_deg = Counter(d for _, d in edges)
    mean = len(edges) / 1000
    assert max(out_deg.values()) > 20 * mean and max(in_deg.values()) > 20 * mean
    # dense and very skewed: still exact
    dense = skewed_graph(80, n_nodes=10, seed=1, alpha=3.0)
    assert len(set(dense)) == 80
    with pytest.raises(ValueError, match="do not fit"):
        skewed_graph(91, n_nodes=10)
    pl = skewed_graph(300, seed=2, model="powerlaw_cluster")
    assert len(set(pl)) == 300 and all(s != d for s, d in pl)


def test_fifo_window_stream() -> None:
    items = [(i, i + 1) for i in range(10)]
    stream = list(fifo_window_stream(items, 3))
    live: Counter[tuple[object, ...]] = Counter()
    for op, e in stream:
        live[tuple(e)] += 1 if op == "+" else -1
        # an edge is deleted right after the 3rd later insertion
        assert sum(live.values()) <= (3 if op == "-" else 4)
    assert [op for op, _ in stream].count("-") == 7
    assert [e for op, e in stream if op == "-"] == items[:7]
    assert len(list(fifo_window_stream(items, 0.2))) == 10 + 8
    with pytest.raises(ValueError):
        list(fifo_window_stream(items, 1.5))


def test_write_update_csv_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "u.csv"
    stream = list(fifo_window_stream(skewed_graph(50, seed=1), 10))
    n = write_update_csv(path, "G", stream, epoch_every=7)
    assert n == len(stream) == 90
    recs = list(read_updates(path, SCHEMA))
    assert sum(isinstance(r, EpochEnd) for r in recs) == 90 // 7
    assert [(r.op, r.row) for r in recs if isinstance(r, Update)] == [
        (op, tuple(e)) for op, e in stream
    ]
    weird = tmp_path / "w.csv"
    write_update_csv(weird, "Person", [("+", ("a,\"b\"", math.pi, None))])
    assert list(read_updates(weird, SCHEMA)) == [Update("+", "Person", ("a,\"b\"", math.pi, None))]
