"""Every encoding of a column value, in one place.

A value the user wrote (validated into its canonical Python form by
:func:`changestream.types.normalize`) meets four other forms on its way through the system:

- **SQLite storage**, the embedded store's table rows (order-preserving):
  :func:`to_sqlite`, :func:`from_sqlite`.
- **change-record JSON**, the ``mods`` of data change records (NUMERIC, BYTES, DATE and
  TIMESTAMP as text, a JSON column as its document, NaN as ``"NaN"``): :func:`record_encoder`,
  :func:`record_decoder`.
- **event JSON**, the payload of Datastream-style events: the change-record form, but a JSON
  column as its text: :func:`event_encoder`, and :func:`record_to_event` straight from the
  change-record form (a change's stored JSON goes to event files without being decoded).
- **columnar**, Avro files and Delta tables (NUMERIC and JSON as text): :func:`text_encoder`,
  :func:`text_decoder`.

Encoders and decoders are compiled once per column type (``record_encoder(ctype)`` returns a
function); a form that needs no conversion returns :func:`identity`, which callers test for
to leave those values untouched. The remote protocol's typed JSON
(:mod:`changestream.wire.values`) is the one other form: it carries any Python value, key
ranges included, rather than a column's.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import functools
import math
from collections.abc import Callable
from typing import Any

import orjson

from changestream.clock import format_ts, parse_ts, second_text, to_datetime
from changestream.types import NAN_TEXT, ColumnType

Codec = Callable[[Any], Any]


def identity(value: Any) -> Any:
    """The value itself (the codec of a form that needs no conversion)."""
    return value


def nullable(codec: Codec) -> Codec:
    """``codec``, with None passed through."""
    return lambda value: None if value is None else codec(value)


def _each(element: Codec) -> Codec:
    return nullable(lambda items: [element(item) for item in items])


# -- timestamps as text ----------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def micros_text(us: int) -> str:
    """Microseconds as RFC 3339 with six fractional digits and ``Z``: :func:`format_ts`,
    cached (an event's commit timestamp is formatted again for each of its mods)."""
    return format_ts(us)


def timestamp_text(value: Any) -> str:
    """A TIMESTAMP value (a datetime, RFC 3339 text or microseconds) as :func:`micros_text`."""
    if type(value) is dt.datetime and value.tzinfo is dt.UTC:
        return value.isoformat(timespec="microseconds")[:-6] + "Z"  # without "+00:00"
    return micros_text(parse_ts(value))


@functools.lru_cache(maxsize=4096)
def millis_text(us: int) -> str:
    """Microseconds as RFC 3339 with milliseconds and ``Z`` (the seed's ``read_timestamp``)."""
    seconds, fraction = divmod(us, 1_000_000)
    return f"{second_text(seconds)}.{fraction // 1000:03d}Z"


# -- change-record JSON ----------------------------------------------------------------------


def _float_json(value: float) -> Any:
    # JSON has no NaN or infinities; the change records spell them as strings.
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _b64text(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _sorted_json_text(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


_RECORD_ENCODERS: dict[str, Codec] = {
    "FLOAT64": _float_json,
    "NUMERIC": lambda value: format(value, "f"),
    "BYTES": _b64text,
    "DATE": dt.date.isoformat,
    "TIMESTAMP": timestamp_text,
}


@functools.lru_cache(maxsize=1024)
def record_encoder(ctype: ColumnType) -> Codec:
    """Python value → change-record JSON value (None stays None)."""
    code = ctype.code
    if code in ("BOOL", "INT64", "STRING", "JSON"):
        return identity
    if code == "ARRAY":
        assert ctype.element is not None
        return _each(record_encoder(ctype.element))
    return nullable(_RECORD_ENCODERS[code])


_RECORD_DECODERS: dict[str, Codec] = {
    "INT64": int,  # records may carry INT64 as a decimal string
    "FLOAT64": float,  # also parses "NaN", "Infinity", "-Infinity"
    "NUMERIC": decimal.Decimal,
    "BYTES": base64.b64decode,
    "DATE": dt.date.fromisoformat,
    "TIMESTAMP": lambda text: to_datetime(parse_ts(text)),
}


@functools.lru_cache(maxsize=1024)
def record_decoder(ctype: ColumnType) -> Codec:
    """Change-record JSON value → Python value (as ``Database.read`` returns it)."""
    code = ctype.code
    if code in ("BOOL", "STRING", "JSON"):
        return identity
    if code == "ARRAY":
        assert ctype.element is not None
        return _each(record_decoder(ctype.element))
    return nullable(_RECORD_DECODERS[code])


def to_json_value(ctype: ColumnType, value: Any) -> Any:
    """A normalized Python value in the change-record JSON form."""
    return record_encoder(ctype)(value)


def from_json_value(ctype: ColumnType, value: Any) -> Any:
    """A change-record JSON value back in Python form."""
    return record_decoder(ctype)(value)


# -- event JSON ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def event_encoder(ctype: ColumnType) -> Codec:
    """Python value → event JSON value: the change-record form, but a JSON column's document
    as its text (keys sorted)."""
    if ctype.code == "JSON":
        return nullable(_sorted_json_text)
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        element = event_encoder(ctype.element)
        return record_encoder(ctype) if element is identity else _each(element)
    return record_encoder(ctype)


@functools.lru_cache(maxsize=1024)
def record_to_event(ctype: ColumnType) -> Codec:
    """Change-record JSON value → event JSON value, without the Python value between: the
    two forms differ only in a JSON column (a document in records, its text in events) and
    an INT64 a record may carry as a decimal string."""
    if ctype.code == "JSON":
        return nullable(_sorted_json_text)
    if ctype.code == "INT64":
        return nullable(int)
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        element = record_to_event(ctype.element)
        return identity if element is identity else _each(element)
    return identity


# -- SQLite storage --------------------------------------------------------------------------


def to_sqlite(ctype: ColumnType, value: Any) -> Any:
    """A normalized Python value in its SQLite storage form (order-preserving where it matters)."""
    if value is None:
        return None
    code = ctype.code
    if code == "BOOL":
        return 1 if value else 0
    if code == "FLOAT64":
        # SQLite stores a NaN REAL as NULL; the text survives a FLOAT64 column's affinity.
        return NAN_TEXT if value != value else value
    if code in ("INT64", "STRING", "BYTES"):
        return value
    if code in ("NUMERIC", "DATE", "TIMESTAMP"):
        return to_json_value(ctype, value)
    if code == "JSON":
        return _sorted_json_text(value)
    return orjson.dumps(to_json_value(ctype, value)).decode()


def from_sqlite(ctype: ColumnType, stored: Any) -> Any:
    """A SQLite-stored value as the Python value the user wrote."""
    if stored is None:
        return None
    code = ctype.code
    if code == "BOOL":
        return bool(stored)
    if code in ("INT64", "STRING", "BYTES"):
        return stored
    if code == "JSON":
        return orjson.loads(stored)
    if code == "ARRAY":
        return record_decoder(ctype)(orjson.loads(stored))
    return record_decoder(ctype)(stored)


# -- columnar (Avro, Delta) ------------------------------------------------------------------


def text_encoder(ctype: ColumnType) -> Codec:
    """Python value → the columnar form (NUMERIC and JSON as text, the rest as they are)."""
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        return _each(text_encoder(ctype.element))
    if ctype.code == "NUMERIC":
        return nullable(lambda value: format(value, "f"))
    if ctype.code == "JSON":
        return nullable(_sorted_json_text)
    return identity


def text_decoder(ctype: ColumnType) -> Codec:
    """The columnar form → Python value as ``Database.read`` returns it."""
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        return _each(text_decoder(ctype.element))
    if ctype.code == "NUMERIC":
        return nullable(decimal.Decimal)
    if ctype.code == "JSON":
        return nullable(orjson.loads)
    if ctype.code == "TIMESTAMP":
        # Readers answer with their own UTC tzinfo (pyarrow: zoneinfo); the store uses dt.UTC.
        return nullable(lambda value: value.astimezone(dt.UTC))
    return identity
