"""Reading a change stream query a chunk at a time, as far as it has records now, and ending
it early."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import TypeVar

from changestream.streams.records import HeartbeatRecord

_R = TypeVar("_R")


def next_chunk(records: Iterator[_R], limit: int) -> list[_R]:
    """Up to ``limit`` records, ending early after a heartbeat: a read only sends one when it
    has waited for commits, so the records up to it are all there is for now."""
    chunk: list[_R] = []
    append = chunk.append
    for record in islice(records, limit):
        append(record)
        if isinstance(record, HeartbeatRecord):
            break
    return chunk


def close_read(records: object) -> None:
    """End a read-function query before its end: a live read holds a connection (or, remote,
    a streaming response) until it is closed; a plain iterable has nothing to close."""
    close = getattr(records, "close", None)
    if close is not None:
        close()
