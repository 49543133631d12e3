"""The messages of PostgreSQL's ``pgoutput`` logical decoding plugin (protocol version 1), read
from the bytes a replication connection delivers.

Only what a change source needs is kept: transaction boundaries, relation (table) shapes and
row changes. Values stay in PostgreSQL's text form; :mod:`changestream.sources.pg_types`
turns them into Python values once the column types are known.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from changestream.errors import InvalidArgument
from changestream.sources.definition import UNCHANGED

#: Microseconds between the Unix epoch and PostgreSQL's (2000-01-01).
PG_EPOCH_US = 946_684_800_000_000

#: A column's value in a tuple is None for NULL, ``UNCHANGED`` for an unchanged TOASTed value
#: that the message leaves out, else its text form.


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int
    commit_time_us: int
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_time_us: int


@dataclass(frozen=True, slots=True)
class RelationColumn:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(frozen=True, slots=True)
class Relation:
    relation_id: int
    schema: str
    table: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True, slots=True)
class Insert:
    relation_id: int
    new: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class Update:
    relation_id: int
    #: The old row: its key columns only (``K``), all columns (``O``, REPLICA IDENTITY FULL),
    #: or None when the key did not change and the identity is the default.
    old: tuple[object, ...] | None
    old_is_key_only: bool
    new: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class Delete:
    relation_id: int
    old: tuple[object, ...]
    old_is_key_only: bool


@dataclass(frozen=True, slots=True)
class Truncate:
    relation_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    """A message written with ``pg_logical_emit_message`` (the connector's own markers)."""

    prefix: str
    content: bytes


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | LogicalMessage | None


_INT16 = struct.Struct("!h")
_INT32 = struct.Struct("!i")
_UINT32 = struct.Struct("!I")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values

    def int8(self) -> int:
        return self.take("!b")[0]

    def byte(self) -> str:
        value = chr(self.data[self.at])
        self.at += 1
        return value

    def int16(self) -> int:
        return self.take("!h")[0]

    def int32(self) -> int:
        return self.take("!i")[0]

    def uint32(self) -> int:
        return self.take("!I")[0]

    def int64(self) -> int:
        return self.take("!q")[0]

    def string(self) -> str:
        end = self.data.index(b"\0", self.at)
        text = self.data[self.at : end].decode()
        self.at = end + 1
        return text

    def tuple_data(self) -> tuple[object, ...]:
        # The hot path of a busy source: one call per row, so no per-value method calls.
        data, at = self.data, self.at
        (count,) = _INT16.unpack_from(data, at)
        at += 2
        values: list[object] = []
        append = values.append
        for _ in range(count):
            kind = data[at]
            at += 1
            if kind == 116:  # 't': text
                (length,) = _INT32.unpack_from(data, at)
                at += 4
                append(data[at : at + length].decode())
                at += length
            elif kind == 110:  # 'n': NULL
                append(None)
            elif kind == 117:  # 'u': unchanged TOASTed value
                append(UNCHANGED)
            else:
                raise InvalidArgument(
                    f"pgoutput tuple value of kind {chr(kind)!r} is not supported"
                )
        self.at = at
        return tuple(values)


def decode(data: bytes) -> Message:
    """The message ``data`` holds; None for the kinds a source ignores (origin, type, ...)."""
    reader = _Reader(data)
    kind = reader.byte()
    if kind == "B":
        final_lsn, commit_time, xid = reader.take("!qqI")
        return Begin(final_lsn, commit_time + PG_EPOCH_US, xid)
    if kind == "C":
        reader.int8()
        commit_lsn, end_lsn, commit_time = reader.take("!qqq")
        return Commit(commit_lsn, end_lsn, commit_time + PG_EPOCH_US)
    if kind == "R":
        relation_id = reader.uint32()
        schema, table = reader.string(), reader.string()
        identity = reader.byte()
        columns = []
        for _ in range(reader.int16()):
            flags = reader.int8()
            name = reader.string()
            type_oid, modifier = reader.take("!Ii")
            columns.append(RelationColumn(name, type_oid, modifier, bool(flags & 1)))
        return Relation(relation_id, schema, table, identity, tuple(columns))
    if kind == "I":
        (relation_id,) = _UINT32.unpack_from(data, 1)
        reader.at = 6  # after the kind, the relation id and 'N'
        return Insert(relation_id, reader.tuple_data())
    if kind == "U":
        relation_id = reader.uint32()
        marker = reader.byte()
        old = None
        if marker in ("K", "O"):
            old = reader.tuple_data()
            reader.byte()  # 'N'
        return Update(relation_id, old, marker == "K", reader.tuple_data())
    if kind == "D":
        relation_id = reader.uint32()
        marker = reader.byte()
        return Delete(relation_id, reader.tuple_data(), marker == "K")
    if kind == "M":
        reader.int8()
        reader.int64()
        prefix = reader.string()
        length = reader.int32()
        return LogicalMessage(prefix, data[reader.at : reader.at + length])
    if kind == "T":
        count = reader.int32()
        reader.int8()
        return Truncate(tuple(reader.uint32() for _ in range(count)))
    return None


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL writes it (``16/B374D848``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """An LSN written as PostgreSQL writes it, as a number."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)
