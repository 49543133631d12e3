"""Resume tokens: where an event sits in the merged order, as MongoDB's ``{"_data": hex}``.

Layout (big-endian, then hex): format version (1 byte), commit timestamp in microseconds (8),
server transaction id (8), record sequence (4), mod index within the record (4), event index
within the mod (1: a drop or rename is event 0 and its invalidate event 1), kind (1), and a CRC32
of the rest (4). Fixed widths make the hex strings sort like the events they name.

A ``START`` token names a timestamp rather than an event: resuming from it delivers every event
committed at or after it. ``EVENT`` and ``INVALIDATE`` tokens resume just after their event.
Resuming reads the log from the token's commit timestamp, whatever the partitions are by then,
and skips events at or before the token, so a token survives restarts, splits and merges.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from enum import IntEnum
from typing import NamedTuple

from changestream.errors import InvalidToken

_LAYOUT = struct.Struct(">BQQIIBB")
_CRC = struct.Struct(">I")
_VERSION = 1

#: (commit timestamp, transaction, record sequence, mod index, event index): the merged order.
EventKey = tuple[int, int, int, int, int]
#: A token's fields, in :class:`ResumeToken`'s order: a ResumeToken, or the plain tuple an
#: event comes with (see :func:`event_token`).
TokenFields = tuple[int, int, int, int, int, "TokenKind"]


class TokenKind(IntEnum):
    """What a token names: a start time, an event, or an invalidate event."""

    START = 0
    EVENT = 1
    INVALIDATE = 2


class ResumeToken(NamedTuple):
    """A decoded resume token (see the module docstring); a tuple, as every event has one."""

    commit_ts: int
    transaction: int = 0
    sequence: int = 0
    mod: int = 0
    event: int = 0
    kind: TokenKind = TokenKind.START

    @property
    def key(self) -> EventKey:
        """Where the token sits in the merged order."""
        return (self.commit_ts, self.transaction, self.sequence, self.mod, self.event)

    def encode(self) -> str:
        """The opaque ``_data`` string."""
        body = _LAYOUT.pack(
            _VERSION,
            self.commit_ts,
            self.transaction,
            self.sequence,
            self.mod,
            self.event,
            self.kind,
        )
        return (body + _CRC.pack(zlib.crc32(body))).hex()

    def document(self) -> dict[str, str]:
        """The token as events carry it in ``_id``: ``{"_data": "..."}``."""
        return {"_data": self.encode()}

    def skips(self, key: EventKey) -> bool:
        """Whether a stream resumed from this token must leave out the event at ``key``."""
        if self.kind is TokenKind.START:
            return key[0] < self.commit_ts
        return key <= self.key

    @staticmethod
    def decode(value: object, name: str) -> ResumeToken:
        """Check a token given as ``resume_after``/``start_after`` and decode it."""
        data = value.get("_data") if isinstance(value, Mapping) else None
        if not isinstance(data, str):
            raise InvalidToken(
                f"{name} must be a resume token: the _id of an event or a cursor's "
                f'resume_token, shaped {{"_data": "..."}}; got {value!r}'
            )
        try:
            raw = bytes.fromhex(data)
        except ValueError:
            raw = b""
        if len(raw) != _LAYOUT.size + _CRC.size:
            raise InvalidToken(f"{name} {data!r} is not a resume token issued by watch()")
        body, (crc,) = raw[: _LAYOUT.size], _CRC.unpack(raw[_LAYOUT.size :])
        version, commit_ts, transaction, sequence, mod, event, kind = _LAYOUT.unpack(body)
        if version != _VERSION or crc != zlib.crc32(body) or kind > max(TokenKind):
            raise InvalidToken(f"{name} {data!r} is not a resume token issued by watch()")
        return ResumeToken(commit_ts, transaction, sequence, mod, event, TokenKind(kind))


_pack = _LAYOUT.pack
_EVENT = TokenKind.EVENT
_pack_crc = _CRC.pack
_crc32 = zlib.crc32


def event_token(
    commit_ts: int, transaction: int, sequence: int, mod: int
) -> tuple[TokenFields, dict[str, str]]:
    """The fields of the ``EVENT`` token of a mod's event, and its ``_id`` document: what
    ``ResumeToken(..., TokenKind.EVENT)`` and :meth:`ResumeToken.document` give, without their
    calls and as a plain tuple (every event has one: 0.46 µs against 0.75; a ResumeToken is
    made of the fields only when one is asked for)."""
    body = _pack(_VERSION, commit_ts, transaction, sequence, mod, 0, _EVENT)
    return (commit_ts, transaction, sequence, mod, 0, _EVENT), {
        "_data": (body + _pack_crc(_crc32(body))).hex()
    }
