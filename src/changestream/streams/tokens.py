"""Partition tokens: opaque to users, tamper-evident, and bound to one change stream."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from dataclasses import dataclass

from changestream.errors import InvalidToken
from changestream.values import shown

_LAYOUT = struct.Struct(">BQQ")
_VERSION = 1
_MAC_BYTES = 8


@dataclass(frozen=True, slots=True)
class PartitionId:
    """What a token names: a change stream and one split of the key space."""

    stream_id: int
    split_id: int


def _mac(secret: str, body: bytes) -> bytes:
    return hmac.new(secret.encode(), body, hashlib.sha256).digest()[:_MAC_BYTES]


def encode_token(secret: str, partition: PartitionId) -> str:
    """The token users pass to the read function for this partition."""
    body = _LAYOUT.pack(_VERSION, partition.stream_id, partition.split_id)
    return base64.urlsafe_b64encode(body + _mac(secret, body)).decode().rstrip("=")


def decode_token(secret: str, token: object) -> PartitionId:
    """Check a token and return what it names; InvalidToken if malformed or forged."""
    if not isinstance(token, str) or not token:
        raise InvalidToken(f"partition_token must be a non-empty string, got {shown(token)}")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError) as exc:
        raise InvalidToken(f"partition_token {token!r} is malformed") from exc
    if len(raw) != _LAYOUT.size + _MAC_BYTES:
        raise InvalidToken(f"partition_token {token!r} is malformed")
    body, mac = raw[: _LAYOUT.size], raw[_LAYOUT.size :]
    version, stream_id, split_id = _LAYOUT.unpack(body)
    if version != _VERSION or not hmac.compare_digest(mac, _mac(secret, body)):
        raise InvalidToken(f"partition_token {token!r} was not issued by this database")
    return PartitionId(stream_id, split_id)
