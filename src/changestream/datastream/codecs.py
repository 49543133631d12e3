"""Conversions of column values between the representations the pipeline meets: Python (as
``Database.read`` returns it), change-record JSON, event JSON, and the columnar form Avro
files and Delta tables store (NUMERIC and JSON as text)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import functools
import math
from collections.abc import Callable
from typing import Any

import orjson

from changestream.clock import parse_ts, to_datetime
from changestream.types import ColumnType

Codec = Callable[[Any], Any]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@functools.lru_cache(maxsize=4096)
def _second_text(seconds: int) -> str:
    # Cached because events of a batch share few distinct seconds, and strftime is slow (and
    # does not zero-pad years below 1000).
    m = _EPOCH + dt.timedelta(seconds=seconds)
    return f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}"


@functools.lru_cache(maxsize=4096)
def micros_text(us: int) -> str:
    """Microseconds as RFC 3339 with six fractional digits and ``Z``."""
    seconds, fraction = divmod(us, 1_000_000)
    return f"{_second_text(seconds)}.{fraction:06d}Z"


@functools.lru_cache(maxsize=4096)
def millis_text(us: int) -> str:
    """Microseconds as RFC 3339 with milliseconds and ``Z`` (the seed's ``read_timestamp``)."""
    seconds, fraction = divmod(us, 1_000_000)
    return f"{_second_text(seconds)}.{fraction // 1000:03d}Z"


def nullable(codec: Codec) -> Codec:
    """``codec``, with None passed through."""
    return lambda value: None if value is None else codec(value)


def identity(value: Any) -> Any:
    """The value itself (a codec that changes nothing)."""
    return value


def _b64encode(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _float_json(value: float) -> Any:
    # JSON has no NaN or infinities; the change records spell them as strings.
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _timestamp_json(value: dt.datetime) -> str:
    return micros_text(parse_ts(value))


def _json_text(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def json_encoder(ctype: ColumnType) -> Codec:
    """Python value (as ``Database.read`` returns it) → event JSON value; None stays None."""
    code = ctype.code
    if code in ("BOOL", "INT64", "STRING"):
        return identity
    if code == "ARRAY":
        assert ctype.element is not None
        element = json_encoder(ctype.element)
        return nullable(lambda items: [element(item) for item in items])
    scalar: dict[str, Codec] = {
        "FLOAT64": _float_json,
        "NUMERIC": lambda value: format(value, "f"),
        "BYTES": _b64encode,
        "DATE": dt.date.isoformat,
        "TIMESTAMP": _timestamp_json,
        "JSON": _json_text,
    }
    return nullable(scalar[code])


def record_decoder(ctype: ColumnType) -> Codec:
    """Change-record JSON value → Python value (as ``Database.read`` returns it)."""
    code = ctype.code
    if code in ("BOOL", "STRING", "JSON"):
        return identity
    if code == "ARRAY":
        assert ctype.element is not None
        element = record_decoder(ctype.element)
        return nullable(lambda items: [element(item) for item in items])
    scalar: dict[str, Codec] = {
        "INT64": int,  # records may carry INT64 as a decimal string
        "FLOAT64": float,  # also parses "NaN", "Infinity", "-Infinity"
        "NUMERIC": decimal.Decimal,
        "BYTES": base64.b64decode,
        "DATE": dt.date.fromisoformat,
        "TIMESTAMP": lambda text: to_datetime(parse_ts(text)),
    }
    return nullable(scalar[code])


def text_encoder(ctype: ColumnType) -> Codec:
    """Python value → the columnar form (NUMERIC and JSON as text, the rest as they are)."""
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        element = text_encoder(ctype.element)
        return nullable(lambda items: [element(item) for item in items])
    if ctype.code == "NUMERIC":
        return nullable(lambda value: format(value, "f"))
    if ctype.code == "JSON":
        return nullable(_json_text)
    return identity


def text_decoder(ctype: ColumnType) -> Codec:
    """The columnar form → Python value as ``Database.read`` returns it."""
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        element = text_decoder(ctype.element)
        return nullable(lambda items: [element(item) for item in items])
    if ctype.code == "NUMERIC":
        return nullable(decimal.Decimal)
    if ctype.code == "JSON":
        return nullable(orjson.loads)
    if ctype.code == "TIMESTAMP":
        # Readers answer with their own UTC tzinfo (pyarrow: zoneinfo); the store uses dt.UTC.
        return nullable(lambda value: value.astimezone(dt.UTC))
    return identity
