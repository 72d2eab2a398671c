"""State keys: ``encode_key``'s fast path for tuples of plain values gives exactly the
text of the general (recursive) encoding, so stores written before it restore."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.writeback import encode_key


def reference(key: Any) -> str:
    """The general encoding, recursive at every level (the format stores hold)."""
    if isinstance(key, tuple):
        return "(" + ",".join(reference(k) for k in key) + ("," if len(key) == 1 else "") + ")"
    if isinstance(key, frozenset):
        return "{" + ",".join(sorted(reference(k) for k in key)) + "}"
    return repr(key)


scalars = st.one_of(st.integers(), st.text(max_size=6), st.none(), st.booleans(),
                    st.floats(allow_nan=False), st.binary(max_size=4))
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
