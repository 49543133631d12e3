"""Reading a change stream query a chunk at a time, as far as it has records now."""

from __future__ import annotations

from collections.abc import Iterator

from changestream.streams.records import ChangeRecord, HeartbeatRecord


def next_chunk(records: Iterator[ChangeRecord], limit: int) -> list[ChangeRecord]:
    """Up to ``limit`` records, ending early after a heartbeat: a read only sends one when it
    has waited for commits, so the records up to it are all there is for now."""
    chunk: list[ChangeRecord] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= limit or isinstance(record, HeartbeatRecord):
            break
    return chunk
