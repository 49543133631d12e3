"""Hypothesis strategies for hostile Python values, and equality as a column reads values back."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

from hypothesis import strategies as st

SCALAR_TYPES = (
    "BOOL",
    "INT64",
    "FLOAT64",
    "NUMERIC",
    "STRING(MAX)",
    "BYTES(MAX)",
    "DATE",
    "TIMESTAMP",
    "JSON",
)
#: Every column type as DDL writes it: the scalars and an ARRAY of each.
COLUMN_TYPES = SCALAR_TYPES + tuple(f"ARRAY<{code}>" for code in SCALAR_TYPES)


def column_name(ctype: str) -> str:
    return "C_" + ctype.replace("ARRAY<", "A_").replace("(MAX)", "").rstrip(">")


# Surrogates and other unusual code points are included on purpose.
_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
_zones = st.sampled_from(
    [None, dt.UTC, dt.timezone(dt.timedelta(hours=14)), dt.timezone(dt.timedelta(hours=-12))]
)
_datetimes = st.datetimes(timezones=_zones) | st.sampled_from(
    [dt.datetime.min.replace(tzinfo=dt.UTC), dt.datetime.max.replace(tzinfo=dt.UTC)]
)
_timestamp_text = st.sampled_from(
    [
        "0001-01-01T00:00:00Z",
        "0000-12-31T23:59:59Z",
        "9999-12-31T23:59:59.999999Z",
        "2024-01-01T00:00:00.123456789Z",
        "2024-01-01T00:00:00.123456000Z",
        "2024-02-29T12:00:00.5+05:30",
        "2023-02-29T00:00:00Z",
        "not a time",
        "2024-01-01",
    ]
)
_integers = st.integers() | st.sampled_from(
    [2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**53 + 1, 10**40, -(10**400)]
)
_decimals = st.decimals(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [decimal.Decimal("99999999999999999999999999999.999999999"), decimal.Decimal("1e29")]
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    _integers,
    st.floats(allow_nan=True, allow_infinity=True),
    _decimals,
    _text,
    st.binary(max_size=12),
    st.dates(),
    _datetimes,
    _timestamp_text,
    st.dates().map(dt.date.isoformat),
    st.times(),
)
json_like = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_text | st.integers(), inner, max_size=4)
        | st.tuples(inner)
    ),
    max_leaves=12,
)
#: Any value a careless caller might write to any column.
values = st.one_of(scalars, st.lists(scalars, max_size=5), json_like)


def same(read: Any, written: Any, ctype: str) -> bool:
    """Whether ``read`` is what a column of ``ctype`` should give back for ``written``."""
    if written is None or read is None:
        return read is None and written is None
    if ctype.startswith("ARRAY<"):
        element = ctype[len("ARRAY<") : -1]
        return (
            isinstance(read, list)
            and len(read) == len(written)
            and all(same(r, w, element) for r, w in zip(read, written, strict=True))
        )
    if isinstance(written, str) and ctype == "DATE":
        return bool(read == dt.date.fromisoformat(written))
    if isinstance(written, str) and ctype == "TIMESTAMP":
        return bool(read == dt.datetime.fromisoformat(written.replace("z", "Z")))
    return nan_equal(read, written)


def nan_equal(a: Any, b: Any) -> bool:
    """Deep equality where NaN equals NaN and types must agree up to int/float/Decimal."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(nan_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(nan_equal(a[k], b[k]) for k in a)
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return (type(a) is type(b) and a == b) or (
        isinstance(a, int | float | decimal.Decimal)
        and isinstance(b, int | float | decimal.Decimal)
        and a == b
    )
