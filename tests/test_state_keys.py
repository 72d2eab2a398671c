"""State keys: ``encode_key``'s fast path for tuples of plain values gives exactly the
text of the general (recursive) encoding, so stores written before it restore; an entry
stored without its key (``encode_entry``) reads back as the same key and value."""

from __future__ import annotations

import datetime
import pickle
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.writeback import ITEM, decode_entry, encode_entry, encode_key


def reference(key: Any) -> str:
    """The general encoding, recursive at every level (the format stores hold)."""
    if isinstance(key, tuple):
        return "(" + ",".join(reference(k) for k in key) + ("," if len(key) == 1 else "") + ")"
    if isinstance(key, frozenset):
        return "{" + ",".join(sorted(reference(k) for k in key)) + "}"
    return repr(key)


scalars = st.one_of(st.integers(), st.text(max_size=6), st.none(), st.booleans(),
                    st.floats(allow_nan=False), st.binary(max_size=4),
                    st.decimals(allow_nan=False, places=2), st.dates(),
                    st.datetimes())
keys = st.recursive(
    scalars,
    lambda inner: st.one_of(st.tuples(inner), st.tuples(inner, inner),
                            st.lists(inner, max_size=4).map(tuple),
                            st.frozensets(scalars, max_size=3)),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(keys)
def test_fast_path_gives_the_reference_text(key: Any) -> None:
    assert encode_key(key) == reference(key)


@settings(max_examples=300, deadline=None)
@given(keys, keys)
def test_equal_encodings_are_equal_keys(a: Any, b: Any) -> None:
    if encode_key(a) == encode_key(b):
        assert a == b and type(a) is type(b)


@settings(max_examples=400, deadline=None)
@given(st.one_of(keys, st.tuples(st.just(ITEM), keys, keys)), st.one_of(scalars, keys))
def test_an_entry_reads_back_as_its_key_and_value(key: Any, value: Any) -> None:
    got = decode_entry(encode_key(key), pickle.loads(encode_entry(key, value)))
    assert got == (key, value)
    assert type(got[0]) is type(key)
    assert [type(k) for k in _flat(got[0])] == [type(k) for k in _flat(key)]


def _flat(key: Any) -> list[Any]:
    return [k for part in key for k in _flat(part)] if isinstance(key, tuple) else [key]


def test_a_tpch_row_is_stored_without_its_key() -> None:
    row = (1, Decimal("17.00"), "N", datetime.date(1996, 3, 13), None, 0.5)
    blob = encode_entry(row, 1)
    assert pickle.loads(blob) == (1,) and len(blob) < 10
    assert decode_entry(encode_key(row), pickle.loads(blob)) == (row, 1)
