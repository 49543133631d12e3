"""Order-preserving byte encoding of (table, primary key), and key ranges over a table's keys."""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from changestream.clock import format_ts, parse_ts
from changestream.codecs import to_sqlite
from changestream.ddl.schema import Table
from changestream.errors import InvalidArgument
from changestream.types import ColumnType, normalize
from changestream.values import shown

_NULL = b"\x01"
_VALUE = b"\x02"
#: Every component starts with 0x01 or 0x02, so this byte after a table prefix ends its range.
_TABLE_END = b"\x03"
_NUMERIC_SCALE = decimal.Decimal(10) ** 9
_NUMERIC_OFFSET = 10**38


def _escape(raw: bytes) -> bytes:
    return raw.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def _encode_value(ctype: ColumnType, value: Any) -> bytes:
    if value is None:
        return _NULL
    code = ctype.code
    if code == "INT64":
        body = struct.pack(">Q", value + 2**63)
    elif code == "BOOL":
        body = b"\x01" if value else b"\x00"
    elif code == "FLOAT64":
        (bits,) = struct.unpack(">Q", struct.pack(">d", value))
        body = struct.pack(">Q", bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | 1 << 63)
    elif code == "STRING":
        body = _escape(value.encode("utf-8"))
    elif code == "BYTES":
        body = _escape(value)
    elif code == "NUMERIC":
        scaled = int((value * _NUMERIC_SCALE).to_integral_value()) + _NUMERIC_OFFSET
        body = scaled.to_bytes(17, "big")
    elif code == "DATE":
        body = struct.pack(">I", value.toordinal())
    elif code == "TIMESTAMP":
        body = struct.pack(">Q", parse_ts(value) + 2**63)
    else:
        raise InvalidArgument(f"a {ctype} column cannot be part of a key")
    return _VALUE + body


def table_prefix(table_name: str) -> bytes:
    """The first key of a table's range in the key space."""
    return _escape(table_name.encode("utf-8"))


def table_range(table_name: str) -> tuple[bytes, bytes]:
    """The half-open byte range ``[start, end)`` holding every key of the table."""
    prefix = table_prefix(table_name)
    return prefix, prefix + _TABLE_END


def encode_key(table: Table, key: Sequence[Any], *, normalized: bool = False) -> bytes:
    """Encode a full key or a key prefix of ``table`` so byte order equals key order."""
    columns = table.key_columns
    if len(key) > len(columns):
        raise InvalidArgument(
            f"table {table.name!r} has {len(columns)} key column(s), got a key of {len(key)}: "
            f"{shown(tuple(key))}"
        )
    parts = [table_prefix(table.name)]
    for column, value in zip(columns, key, strict=False):
        if not normalized:
            value = normalize(column.type, value, column.name)
        parts.append(_encode_value(column.type, value))
    return b"".join(parts)


def _unescape(encoded: bytes, at: int) -> tuple[bytes, int]:
    end = at
    while True:
        end = encoded.index(b"\x00", end)
        if encoded[end + 1 : end + 2] == b"\xff":
            end += 2
            continue
        return encoded[at:end].replace(b"\x00\xff", b"\x00"), end + 2


def _decode_value(ctype: ColumnType, encoded: bytes, at: int) -> tuple[Any, int]:
    if encoded[at : at + 1] == _NULL:
        return None, at + 1
    at += 1
    code = ctype.code
    if code in ("INT64", "TIMESTAMP"):
        (raw,) = struct.unpack(">Q", encoded[at : at + 8])
        value: Any = raw - 2**63
        if code == "TIMESTAMP":
            value = format_ts(value)
        return value, at + 8
    if code == "BOOL":
        return encoded[at] == 1, at + 1
    if code == "FLOAT64":
        (bits,) = struct.unpack(">Q", encoded[at : at + 8])
        bits = bits ^ (1 << 63) if bits >> 63 else bits ^ 0xFFFFFFFFFFFFFFFF
        return struct.unpack(">d", struct.pack(">Q", bits))[0], at + 8
    if code == "NUMERIC":
        scaled = int.from_bytes(encoded[at : at + 17], "big") - _NUMERIC_OFFSET
        return str(decimal.Decimal(scaled) / _NUMERIC_SCALE), at + 17
    if code == "DATE":
        (ordinal,) = struct.unpack(">I", encoded[at : at + 4])
        return dt.date.fromordinal(ordinal).isoformat(), at + 4
    raw_bytes, at = _unescape(encoded, at)
    return (raw_bytes.decode("utf-8") if code == "STRING" else raw_bytes), at


def decode_key(encoded: bytes, tables: Mapping[str, Table]) -> tuple[str, tuple[Any, ...]] | None:
    """The table and key (or key prefix) an encoded boundary stands for, with values in their
    SQLite storage form; None for the ends of the key space or an unknown table."""
    if not encoded:
        return None
    name_bytes, at = _unescape(encoded, 0)
    table = tables.get(name_bytes.decode("utf-8", "replace"))
    if table is None or encoded[at:] == _TABLE_END:
        return None
    values = []
    for column in table.key_columns:
        if at >= len(encoded):
            break
        value, at = _decode_value(column.type, encoded, at)
        values.append(value)
    return table.name, tuple(values)


def describe_key(encoded: bytes | None, tables: Mapping[str, Table] | None = None) -> str:
    """A readable form of a split boundary: ``Table(key, ...)``, decoded when the table is
    known, ``-∞``/``∞`` at the ends of the key space."""
    if encoded is None:
        return "∞"
    if encoded == b"":
        return "-∞"
    name_bytes, at = _unescape(encoded, 0)
    name = name_bytes.decode("utf-8", "replace")
    if at >= len(encoded):
        return name
    if encoded[at:] == _TABLE_END:
        return f"{name}(end)"
    decoded = decode_key(encoded, tables or {})
    if decoded is None:
        return f"{name}/{encoded[at:].hex()}"
    return f"{name}({', '.join(repr(v) for v in decoded[1])})"


@dataclass(frozen=True, slots=True)
class KeyRange:
    """A range of keys, as in the Spanner client: give one start bound and one end bound.

    Bounds are key tuples or key prefixes; ``start_closed=()`` with ``end_closed=()`` covers
    the whole table.
    """

    start_closed: tuple[Any, ...] | None = None
    start_open: tuple[Any, ...] | None = None
    end_closed: tuple[Any, ...] | None = None
    end_open: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if (self.start_closed is None) == (self.start_open is None):
            raise InvalidArgument("KeyRange needs exactly one of start_closed or start_open")
        if (self.end_closed is None) == (self.end_open is None):
            raise InvalidArgument("KeyRange needs exactly one of end_closed or end_open")

    def where(self, table: Table) -> tuple[str, list[Any]]:
        """A SQL condition over the table's key columns and its parameters."""
        clauses: list[str] = []
        params: list[Any] = []
        bounds = (
            (self.start_closed, ">="),
            (self.start_open, ">"),
            (self.end_closed, "<="),
            (self.end_open, "<"),
        )
        for bound, op in bounds:
            if bound is None:
                continue
            bound = tuple(bound)
            if len(bound) > len(table.primary_key):
                raise InvalidArgument(
                    f"KeyRange bound {shown(bound)} is longer than the key of table {table.name!r}"
                )
            if not bound:
                if op in (">", "<"):
                    clauses.append("0")
                continue
            columns = table.key_columns[: len(bound)]
            names = ", ".join(quote(c.name) for c in columns)
            clauses.append(f"({names}) {op} ({', '.join('?' * len(bound))})")
            params.extend(
                to_sqlite(c.type, normalize(c.type, v, c.name))
                for c, v in zip(columns, bound, strict=True)
            )
        return (" AND ".join(clauses) or "1"), params


def quote(identifier: str) -> str:
    """Quote an identifier for SQLite."""
    return '"' + identifier.replace('"', '""') + '"'
