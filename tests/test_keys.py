"""The key encoding preserves key order, so splits are contiguous key ranges."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from changestream.ddl import parse_ddl
from changestream.ddl.schema import CreateTable, Table
from changestream.store.keys import describe_key, encode_key, table_range


def table(ddl: str) -> Table:
    (statement,) = parse_ddl(ddl)
    assert isinstance(statement, CreateTable)
    return statement.table


MIXED = table("CREATE TABLE M (S STRING(MAX), I INT64, F FLOAT64) PRIMARY KEY (S, I, F)")

keys = st.tuples(
    st.one_of(st.none(), st.text(max_size=6)),
    st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    st.one_of(st.none(), st.floats(allow_nan=False)),
)


def sort_key(key: tuple[object, ...]) -> tuple[object, ...]:
    """Spanner's order: NULL first, then values; strings by UTF-8 bytes."""
    out: list[object] = []
    for value in key:
        if value is None:
            out.append((0, 0))
        elif isinstance(value, str):
            out.append((1, value.encode()))
        else:
            out.append((1, value))
    return tuple(out)


@given(st.lists(keys, min_size=2, max_size=20, unique=True))
def test_byte_order_is_key_order(samples: list[tuple[object, ...]]) -> None:
    # -0.0 and 0.0 are equal in Python but distinct keys (-0.0 first), as in IEEE total order.
    samples = [s for s in samples if not any(isinstance(v, float) and v == 0.0 for v in s)]
    by_bytes = sorted(samples, key=lambda k: encode_key(MIXED, k))
    assert [sort_key(k) for k in by_bytes] == sorted(sort_key(k) for k in samples)


@given(keys)
def test_every_key_falls_inside_its_table_range_and_prefixes_sort_first(
    key: tuple[object, ...],
) -> None:
    start, end = table_range("M")
    encoded = encode_key(MIXED, key)
    assert start <= encoded < end
    assert encode_key(MIXED, key[:1]) <= encoded
    assert encode_key(table("CREATE TABLE MM (X INT64) PRIMARY KEY (X)"), (1,)) >= end


@given(keys)
def test_boundaries_are_described_with_decoded_values(key: tuple[object, ...]) -> None:
    text = describe_key(encode_key(MIXED, key), {"M": MIXED})
    assert text == f"M({', '.join(repr(v) for v in key)})"
