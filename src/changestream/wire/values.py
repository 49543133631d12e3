"""Typed JSON: Python values that plain JSON would lose, carried exactly over the wire.

JSON has no bytes, timestamps, dates, decimals, non-finite floats, 64-bit-overflowing integers
or the commit-timestamp sentinel. Each of those travels as an object with a single ``$`` key:

======================  ===========================================================
``{"$bytes": b64}``     bytes (standard base64)
``{"$datetime": iso}``  datetime, ``datetime.isoformat()`` (aware or naive, microseconds)
``{"$date": iso}``      date
``{"$numeric": text}``  Decimal, ``str(value)`` (keeps precision and exponent)
``{"$float": text}``    ``NaN``, ``Infinity`` or ``-Infinity``
``{"$int": text}``      an integer outside the signed 64-bit range
``{"$untyped": text}``  text given without a type (:class:`changestream.sql.params.UntypedText`)
``{"$commit_timestamp": true}``  :data:`changestream.COMMIT_TIMESTAMP`
``{"$key_range": {...}}``        a :class:`changestream.KeyRange` (bounds as lists)
``{"$object": {...}}``  a dict one of whose keys starts with ``$`` (so it is not read as a tag)
======================  ===========================================================

Everything else is plain JSON; tuples travel as lists.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import math
from collections.abc import Callable
from typing import Any

from changestream.errors import InvalidArgument
from changestream.sql.params import UntypedText
from changestream.store.keys import KeyRange
from changestream.types import COMMIT_TIMESTAMP

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
#: Deepest nesting of arrays and objects a value may have (deeper ones would exhaust the
#: stack of the code that walks them).
MAX_NESTING = 64
_BOUNDS = ("start_closed", "start_open", "end_closed", "end_open")


def encode(value: Any) -> Any:
    """``value`` as typed JSON (a structure orjson can dump)."""
    try:
        return _encode(value)
    except RecursionError as exc:
        raise InvalidArgument("a value is nested too deeply to send as JSON") from exc


def _encode(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        return value if _INT_MIN <= value <= _INT_MAX else {"$int": str(value)}
    if kind is float:
        return value if math.isfinite(value) else {"$float": _float_text(value)}
    if kind is list or kind is tuple:
        return [_encode(item) for item in value]
    if kind is dict:
        encoded = {}
        tagged = False
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument(f"object keys must be strings, got {key!r}")
            tagged = tagged or key.startswith("$")
            encoded[key] = _encode(item)
        return {"$object": encoded} if tagged else encoded
    return _encode_other(value)


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _encode_other(value: Any) -> Any:
    # Subclasses (enums, named tuples, OrderedDict) travel as their base type.
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _encode(int(value))
    if isinstance(value, float):
        return _encode(float(value))
    if isinstance(value, UntypedText):
        return {"$untyped": str(value)}
    if isinstance(value, str):
        return str(value)
    if isinstance(value, list | tuple):
        return [_encode(item) for item in value]
    if isinstance(value, dict):
        return _encode(dict(value))
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$numeric": str(value)}
    if value is COMMIT_TIMESTAMP:
        return {"$commit_timestamp": True}
    if isinstance(value, KeyRange):
        bounds = {name: getattr(value, name) for name in _BOUNDS}
        return {
            "$key_range": {k: None if v is None else _encode(list(v)) for k, v in bounds.items()}
        }
    raise InvalidArgument(f"cannot send a value of type {type(value).__name__}: {value!r}")


def decode(value: Any, depth: int = 0) -> Any:
    """The Python value that typed JSON ``value`` stands for (``depth``: how deep ``value``
    already is; values nested more than :data:`MAX_NESTING` deep are refused)."""
    kind = type(value)
    if kind is not list and kind is not dict:
        return value
    if depth >= MAX_NESTING:
        raise InvalidArgument(
            f"a value nests arrays and objects more than {MAX_NESTING} levels deep"
        )
    depth += 1
    if kind is list:
        return [decode(item, depth) for item in value]
    if len(value) == 1:
        ((key, body),) = value.items()
        if key.startswith("$"):
            return _decode_tag(key, body, depth)
    return {key: decode(item, depth) for key, item in value.items()}


def _decode_tag(tag: str, body: Any, depth: int) -> Any:
    if tag == "$object":
        if not isinstance(body, dict):
            raise InvalidArgument(f"$object must hold an object, got {body!r}")
        return {key: decode(item, depth) for key, item in body.items()}
    if tag == "$commit_timestamp":
        return COMMIT_TIMESTAMP
    if tag == "$key_range":
        return _decode_key_range(body)
    parse = _TEXT_TAGS.get(tag)
    if parse is None:
        known = ", ".join(sorted([*_TEXT_TAGS, "$object", "$commit_timestamp", "$key_range"]))
        raise InvalidArgument(f"unknown typed value {tag!r} (known: {known})")
    if not isinstance(body, str):
        raise InvalidArgument(f"{tag} must hold a string, got {body!r}")
    try:
        return parse(body)
    except (ValueError, ArithmeticError, binascii.Error) as exc:
        raise InvalidArgument(f"{tag} value {body!r} is malformed: {exc}") from exc


def _parse_float(text: str) -> float:
    if text not in ("NaN", "Infinity", "-Infinity"):
        raise ValueError("expected NaN, Infinity or -Infinity")
    return float(text.replace("Infinity", "inf"))


def _parse_numeric(text: str) -> decimal.Decimal:
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation as exc:
        raise ValueError("not a decimal number") from exc


_TEXT_TAGS: dict[str, Callable[[str], Any]] = {
    "$bytes": lambda text: base64.b64decode(text, validate=True),
    "$datetime": dt.datetime.fromisoformat,
    "$date": dt.date.fromisoformat,
    "$numeric": _parse_numeric,
    "$float": _parse_float,
    "$int": int,
    "$untyped": UntypedText,
}


def _decode_key_range(body: Any) -> KeyRange:
    if not isinstance(body, dict) or not set(body) <= set(_BOUNDS):
        raise InvalidArgument(f"$key_range must be an object with keys among {_BOUNDS}")
    bounds: dict[str, tuple[Any, ...] | None] = {}
    for name in _BOUNDS:
        bound = body.get(name)
        if bound is not None and not isinstance(bound, list):
            raise InvalidArgument(f"$key_range {name} must be a list or null, got {bound!r}")
        bounds[name] = None if bound is None else tuple(decode(bound, 1))
    return KeyRange(**bounds)
