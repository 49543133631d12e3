"""The rows of a binlog rows event, decoded in bulk.

python-mysql-replication reads the event's header and the table map; its own row decoding
(a dict per row, several method calls per value) is where a MySQL connector spends most of
its time. Here each event's row bytes are read by one function per column type, built once per
event from the table map, into tuples in column order. Values have the Python types the
library gives (``int``, ``Decimal``, ``str``/``bytes``, ``date``, naive UTC ``datetime``,
``timedelta``, member sets), with three differences: a zero date comes back as its text (so the
mirror refuses it instead of storing NULL), an empty SET is an empty set (not NULL), and a
negative TIME with a fraction is right. Events this module does not read (partial JSON
updates, images without every column, MySQL's binary JSON, spatial types) give None, and the
caller falls back on the library.

Formats: MySQL's ``sql/log_event.cc`` row images and ``my_time.cc`` / ``decimal.c`` packings.
"""

from __future__ import annotations

import codecs
import datetime as dt
import decimal
import functools
import struct
from collections.abc import Callable
from typing import Any

Reader = Callable[[bytes, int], tuple[Any, int]]
Row = tuple[Any, ...]

_PARTIAL_UPDATE_ROWS_EVENT = 39
_EPOCH = dt.datetime(1970, 1, 1)
_DIGITS_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
#: Wide enough for MySQL's 65 digits, so moving the point never rounds.
_EXACT = decimal.Context(prec=65)


def decode(event: Any, images: int) -> list[tuple[Row, ...]] | None:
    """Each row of ``event`` as ``images`` tuples (2 for an update: before, after); None when
    this module does not read the event."""
    columns = list(event.columns)
    whole = (1 << len(columns)) - 1
    bitmaps = [event.columns_present_bitmap]
    if images == 2:
        bitmaps.append(event.columns_present_bitmap2)
    if event.event_type == _PARTIAL_UPDATE_ROWS_EVENT or any(
        int.from_bytes(bytes(b), "little") & whole != whole for b in bitmaps
    ):
        return None
    readers = [_reader(c) for c in columns]
    if any(r is None for r in readers):
        return None
    read_row = _row_reader([r for r in readers if r is not None])
    data = bytes(event.packet.read(event.event_size - event.packet.read_bytes))
    rows: list[tuple[Row, ...]] = []
    at = 0
    while at < len(data):
        if images == 2:
            before, at = read_row(data, at)
            after, at = read_row(data, at)
            rows.append((before, after))
        else:
            row, at = read_row(data, at)
            rows.append((row,))
    return rows


def _row_reader(readers: list[Reader]) -> Callable[[bytes, int], tuple[Row, int]]:
    null_bytes = (len(readers) + 7) // 8

    def read(data: bytes, at: int) -> tuple[Row, int]:
        nulls = int.from_bytes(data[at : at + null_bytes], "little")
        at += null_bytes
        values: list[Any] = []
        append = values.append
        for index, reader in enumerate(readers):
            if nulls >> index & 1:
                append(None)
            else:
                value, at = reader(data, at)
                append(value)
        return tuple(values), at

    return read


def _reader(column: Any) -> Reader | None:
    code = int(column.type)
    unsigned = bool(column.unsigned)
    fixed = _FIXED.get((code, unsigned))
    if fixed is not None:
        return _unpacker(fixed)
    if code == 9:  # INT24
        return _int24(unsigned)
    if code == 13:  # YEAR
        return _year
    if code == 246:  # NEWDECIMAL
        return _decimal(int(column.precision), int(column.decimals))
    if code in (15, 253, 254):  # VARCHAR, VAR_STRING, STRING (CHAR)
        return _text(2 if column.max_length > 255 else 1, column.character_set_name)
    if code == 252:  # BLOB and TEXT
        return _text(int(column.length_size), column.character_set_name)
    if code == 247:  # ENUM
        return _enum(int(column.size), column.enum_values)
    if code == 248:  # SET
        return _set(int(column.size), column.set_values)
    if code == 16:  # BIT
        return _bit(int(column.bytes))
    if code == 10:  # DATE
        return _date
    if code == 18:  # DATETIME2
        return _datetime2(int(column.fsp))
    if code == 17:  # TIMESTAMP2
        return _timestamp2(int(column.fsp))
    if code == 19:  # TIME2
        return _time2(int(column.fsp))
    return None


_FIXED: dict[tuple[int, bool], struct.Struct] = {
    (1, False): struct.Struct("<b"),
    (1, True): struct.Struct("<B"),
    (2, False): struct.Struct("<h"),
    (2, True): struct.Struct("<H"),
    (3, False): struct.Struct("<i"),
    (3, True): struct.Struct("<I"),
    (8, False): struct.Struct("<q"),
    (8, True): struct.Struct("<Q"),
    (4, False): struct.Struct("<f"),
    (4, True): struct.Struct("<f"),
    (5, False): struct.Struct("<d"),
    (5, True): struct.Struct("<d"),
}


def _unpacker(layout: struct.Struct) -> Reader:
    unpack, size = layout.unpack_from, layout.size

    def read(data: bytes, at: int) -> tuple[Any, int]:
        return unpack(data, at)[0], at + size

    return read


def _int24(unsigned: bool) -> Reader:
    def read(data: bytes, at: int) -> tuple[Any, int]:
        return int.from_bytes(data[at : at + 3], "little", signed=not unsigned), at + 3

    return read


def _year(data: bytes, at: int) -> tuple[Any, int]:
    value = data[at]
    return (value + 1900 if value else 0), at + 1


@functools.lru_cache(maxsize=64)
def _encoding(charset: str | None) -> str | None:
    """The Python codec of a column's character set as the table map names it (the library
    gives a Python codec name, or a MySQL one it does not know); None for binary data."""
    if charset is None:
        return "utf-8"
    if charset == "binary":
        return None
    try:
        return codecs.lookup(charset).name
    except LookupError:
        from pymysql.charset import charset_by_name  # type: ignore[import-untyped]

        found = charset_by_name(charset)
        return str(found.encoding) if found is not None else "utf-8"


def _text(length_size: int, charset: str | None) -> Reader:
    encoding = _encoding(charset)

    def read(data: bytes, at: int) -> tuple[Any, int]:
        length = int.from_bytes(data[at : at + length_size], "little")
        at += length_size
        raw = data[at : at + length]
        return (raw if encoding is None else raw.decode(encoding)), at + length

    return read


def _enum(size: int, members: list[str] | None) -> Reader:
    def read(data: bytes, at: int) -> tuple[Any, int]:
        index = int.from_bytes(data[at : at + size], "little")
        return (members[index] if members else None), at + size

    return read


def _set(size: int, members: list[str] | None) -> Reader:
    listed = list(members or ())

    def read(data: bytes, at: int) -> tuple[Any, int]:
        mask = int.from_bytes(data[at : at + size], "little")
        return {m for i, m in enumerate(listed) if mask >> i & 1}, at + size

    return read


def _bit(size: int) -> Reader:
    def read(data: bytes, at: int) -> tuple[Any, int]:
        return data[at : at + size], at + size

    return read


def _decimal(precision: int, scale: int) -> Reader:
    """DECIMAL(precision, scale): big-endian groups of nine digits in four bytes (fewer digits
    in fewer bytes at both ends), the sign in the top bit, a negative number's bits inverted."""
    whole_groups, lead_digits = divmod(precision - scale, 9)
    fraction_groups, tail_digits = divmod(scale, 9)
    # (bytes, digits) of each part, most significant first.
    parts = [(_DIGITS_BYTES[lead_digits], lead_digits)] if lead_digits else []
    parts += [(4, 9)] * (whole_groups + fraction_groups)
    parts += [(_DIGITS_BYTES[tail_digits], tail_digits)] if tail_digits else []
    size = sum(width for width, _ in parts)
    top, everything = 1 << (8 * size - 1), (1 << (8 * size)) - 1
    plan: list[tuple[int, int, int]] = []  # (shift, mask, 10 ** digits)
    shift = 8 * size
    for width, digits in parts:
        shift -= 8 * width
        plan.append((shift, (1 << (8 * width)) - 1, 10**digits))
    exponent = -scale

    def read(data: bytes, at: int) -> tuple[Any, int]:
        raw = int.from_bytes(data[at : at + size], "big")
        negative = not raw & top
        raw = (raw ^ everything ^ top) if negative else (raw ^ top)
        number = 0
        for part_shift, mask, scale_up in plan:
            number = number * scale_up + (raw >> part_shift & mask)
        value = decimal.Decimal(-number if negative else number).scaleb(exponent, _EXACT)
        return value, at + size

    return read


def _fraction(fsp: int) -> tuple[int, int]:
    """(bytes, multiplier to microseconds) of a fractional-seconds part of precision fsp."""
    count = (fsp + 1) // 2
    return count, 10 ** (6 - 2 * count)


def _date(data: bytes, at: int) -> tuple[Any, int]:
    value = int.from_bytes(data[at : at + 3], "little")
    year, month, day = value >> 9, value >> 5 & 15, value & 31
    if not (year and month and day):
        return f"{year:04d}-{month:02d}-{day:02d}", at + 3
    return dt.date(year, month, day), at + 3


def _datetime2(fsp: int) -> Reader:
    count, scale = _fraction(fsp)

    def read(data: bytes, at: int) -> tuple[Any, int]:
        packed = int.from_bytes(data[at : at + 5], "big") - 0x8000000000
        micro = int.from_bytes(data[at + 5 : at + 5 + count], "big") * scale if count else 0
        year_month = packed >> 22
        year, month = divmod(year_month, 13)
        day, hour = packed >> 17 & 31, packed >> 12 & 31
        minute, second = packed >> 6 & 63, packed & 63
        if not (year and month and day):
            return f"{year:04d}-{month:02d}-{day:02d} 00:00:00", at + 5 + count
        return dt.datetime(year, month, day, hour, minute, second, micro), at + 5 + count

    return read


def _timestamp2(fsp: int) -> Reader:
    count, scale = _fraction(fsp)

    def read(data: bytes, at: int) -> tuple[Any, int]:
        seconds = int.from_bytes(data[at : at + 4], "big")
        micro = int.from_bytes(data[at + 4 : at + 4 + count], "big") * scale if count else 0
        if not seconds and not micro:  # MySQL's zero TIMESTAMP
            return "0000-00-00 00:00:00", at + 4 + count
        return _EPOCH + dt.timedelta(seconds=seconds, microseconds=micro), at + 4 + count

    return read


def _time2(fsp: int) -> Reader:
    """TIME(fsp): MySQL's packed form (``my_time_packed_from_binary``), then hours, minutes,
    seconds and microseconds, negative as a whole."""
    count = (fsp + 1) // 2

    def read(data: bytes, at: int) -> tuple[Any, int]:
        if count == 3:
            packed = int.from_bytes(data[at : at + 6], "big") - 0x800000000000
        else:
            whole = int.from_bytes(data[at : at + 3], "big") - 0x800000
            fraction = int.from_bytes(data[at + 3 : at + 3 + count], "big")
            if whole < 0 and fraction:
                whole += 1
                fraction -= 1 << (8 * count)
            packed = (whole << 24) + fraction * (10_000 if count == 1 else 100)
        sign = -1 if packed < 0 else 1
        packed = abs(packed)
        hms, micro = packed >> 24, packed % (1 << 24)
        hours, minutes, seconds = hms >> 12 & 1023, hms >> 6 & 63, hms & 63
        moment = dt.timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=micro)
        return sign * moment, at + 3 + count

    return read
