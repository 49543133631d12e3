"""Order-preserving byte encoding of (table, primary key), and key ranges over a table's keys."""

from __future__ import annotations

import decimal
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from changestream.clock import parse_ts
from changestream.ddl.schema import Table
from changestream.errors import InvalidArgument
from changestream.types import ColumnType, normalize, to_sqlite

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
            f"{tuple(key)!r}"
        )
    parts = [table_prefix(table.name)]
    for column, value in zip(columns, key, strict=False):
        if not normalized:
            value = normalize(column.type, value, column.name)
        parts.append(_encode_value(column.type, value))
    return b"".join(parts)


def describe_key(encoded: bytes | None) -> str:
    """A short human-readable form of an encoded boundary (for listings)."""
    if encoded is None:
        return "∞"
    if encoded == b"":
        return "-∞"
    table_end = encoded.find(b"\x00\x00")
    table = encoded[:table_end].replace(b"\x00\xff", b"\x00").decode("utf-8", "replace")
    rest = encoded[table_end + 2 :]
    return table if not rest else f"{table}/{rest.hex()}"


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
                    f"KeyRange bound {bound!r} is longer than the key of table {table.name!r}"
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
