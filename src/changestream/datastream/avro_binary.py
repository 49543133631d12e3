"""Avro's binary encoding, compiled once per schema into plain functions.

fastavro interprets the schema at every record: about 12 µs for an event of a four-column
table, which was two fifths of a CDC task writing Avro. An encoder compiled here from the
same schema costs a few µs, and the large longs every event repeats (its timestamps) are
encoded once. fastavro still writes the file around the records (header, blocks, sync
markers), reads them back, and is what the tests check these bytes against.

Supported: the primitive types but ``null`` on its own, ``date``, ``timestamp-micros`` and
``timestamp-millis``, records (from mappings), arrays, and the unions events use: ``["null",
T]`` and ``["string", "long"]``.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from changestream.clock import parse_ts

#: Encodes one value of a schema.
Encoder = Callable[[Any], bytes]

_EPOCH_DAY: Final = dt.date(1970, 1, 1).toordinal()


def _varint(zigzag: int) -> bytes:
    if zigzag < 0x4000:
        return bytes((zigzag & 0x7F | 0x80, zigzag >> 7)) if zigzag > 0x7F else bytes((zigzag,))
    if zigzag < 0x200000:
        return bytes((zigzag & 0x7F | 0x80, zigzag >> 7 & 0x7F | 0x80, zigzag >> 14))
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


_SMALLEST: Final = -64
_SMALL_END: Final = 1024
_SMALL: Final = tuple(_varint(_zigzag(n)) for n in range(_SMALLEST, _SMALL_END))
#: Longs of 2**35 and more (timestamps, which repeat across the mods of a record and the
#: fields of an event) seen lately; cleared when full, so it stays small whatever the values.
_LARGE: dict[int, bytes] = {}
_LARGE_FROM: Final = 1 << 35
_LARGE_ENTRIES: Final = 4096


def long_bytes(value: int) -> bytes:
    """An Avro ``long`` (or ``int``): zigzag, then a base-128 varint."""
    if _SMALLEST <= value < _SMALL_END:
        return _SMALL[value - _SMALLEST]
    if -_LARGE_FROM < value < _LARGE_FROM:
        return _varint(_zigzag(value))
    found = _LARGE.get(value)
    if found is None:
        if len(_LARGE) >= _LARGE_ENTRIES:
            _LARGE.clear()
        found = _LARGE[value] = _varint(_zigzag(value))
    return found


#: Strings of the envelope that take few values (stream, object, table names and the like).
_NAMES: dict[str, bytes] = {}


def name_bytes(value: str) -> bytes:
    """:func:`string_bytes` of a string that takes few values, encoded once."""
    found = _NAMES.get(value)
    if found is None:
        if len(_NAMES) >= _LARGE_ENTRIES:
            _NAMES.clear()
        found = _NAMES[value] = string_bytes(value)
    return found


def string_bytes(value: str) -> bytes:
    """An Avro ``string``: its UTF-8 length, then the bytes."""
    data = value.encode()
    return long_bytes(len(data)) + data


def _bytes(value: bytes) -> bytes:
    return long_bytes(len(value)) + bytes(value)


def _boolean(value: bool) -> bytes:
    return b"\x01" if value else b"\x00"


def _date(value: dt.date | int) -> bytes:
    return long_bytes(value if isinstance(value, int) else value.toordinal() - _EPOCH_DAY)


def _timestamp_micros(value: dt.datetime | int) -> bytes:
    return long_bytes(value if isinstance(value, int) else parse_ts(value))


def _timestamp_millis(value: dt.datetime | int) -> bytes:
    return long_bytes(value if isinstance(value, int) else parse_ts(value) // 1000)


_PRIMITIVES: Final[Mapping[str, Encoder]] = {
    "boolean": _boolean,
    "int": long_bytes,
    "long": long_bytes,
    "float": struct.Struct("<f").pack,
    "double": struct.Struct("<d").pack,
    "string": string_bytes,
    "bytes": _bytes,
}
_LOGICAL: Final[Mapping[tuple[str, str], Encoder]] = {
    ("int", "date"): _date,
    ("long", "timestamp-micros"): _timestamp_micros,
    ("long", "timestamp-millis"): _timestamp_millis,
}


def compile_encoder(schema: Any) -> Encoder:
    """The encoder of values of ``schema`` (a parsed or plain Avro schema; records named by
    a reference are not supported). Values are as fastavro takes them, but for unions,
    whose branch is chosen by the value: None is ``null``."""
    if isinstance(schema, str):
        if schema not in _PRIMITIVES:
            raise ValueError(f"Avro type {schema!r} is not supported here")
        return _PRIMITIVES[schema]
    if isinstance(schema, list):
        return _union(schema)
    kind = schema["type"]
    logical = _LOGICAL.get((kind, schema.get("logicalType", "")))
    if logical is not None:
        return logical
    if kind == "record":
        return _record([(f["name"], compile_encoder(f["type"])) for f in schema["fields"]])
    if kind == "array":
        return _array(compile_encoder(schema["items"]))
    return compile_encoder(kind)


def _record(fields: Sequence[tuple[str, Encoder]]) -> Encoder:
    """The encoder of a record (a mapping) with ``fields`` (name, encoder) in schema order."""
    plan = tuple(fields)

    def encode(record: Mapping[str, Any]) -> bytes:
        return b"".join([encode_field(record[name]) for name, encode_field in plan])

    return encode


def _array(item: Encoder) -> Encoder:
    def encode(items: Sequence[Any]) -> bytes:
        if not items:
            return b"\x00"
        return long_bytes(len(items)) + b"".join([item(value) for value in items]) + b"\x00"

    return encode


def _union(branches: list[Any]) -> Encoder:
    if len(branches) == 2 and branches[0] == "null":
        inner = compile_encoder(branches[1])
        return lambda value: b"\x00" if value is None else b"\x02" + inner(value)
    if branches == ["string", "long"]:
        return lambda value: (
            b"\x00" + string_bytes(value) if isinstance(value, str) else b"\x02" + long_bytes(value)
        )
    raise ValueError(f"Avro union {branches!r} is not supported here")
