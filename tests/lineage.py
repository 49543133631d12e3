"""Test helper: read a change stream the way the seed's query workflow says, keeping order."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import changestream
from changestream import ChildPartitionsRecord, DataChangeRecord, HeartbeatRecord


@dataclass
class PartitionRead:
    """What one partition's query returned, and when the partition started and ended."""

    token: str
    start: int
    parents: tuple[str, ...]
    records: list[DataChangeRecord] = field(default_factory=list)
    heartbeats: list[HeartbeatRecord] = field(default_factory=list)
    end: int | None = None


def read_lineage(
    db: changestream.EmbeddedDatabase, stream: str, start: int, end: int
) -> list[PartitionRead]:
    """Every partition from ``start`` to ``end``, each read only after all its parents ended,
    in the order they were read."""
    (first,) = db.read_change_stream(stream, start, end)
    assert isinstance(first, ChildPartitionsRecord)
    parents_of = {c.token: c.parent_partition_tokens for c in first.child_partitions}
    starts = {c.token: first.start_timestamp for c in first.child_partitions}
    ready = deque(c.token for c in first.child_partitions)
    finished: set[str] = set()
    reads: list[PartitionRead] = []
    while ready:
        token = ready.popleft()
        read = PartitionRead(token, starts[token], parents_of[token])
        reads.append(read)
        for record in db.read_change_stream(stream, starts[token], end, token, 1000):
            if isinstance(record, DataChangeRecord):
                read.records.append(record)
            elif isinstance(record, HeartbeatRecord):
                read.heartbeats.append(record)
            else:
                read.end = record.start_timestamp
                for child in record.child_partitions:
                    parents_of[child.token] = child.parent_partition_tokens
                    starts[child.token] = record.start_timestamp
        finished.add(token)
        # The seed: a child is queried once, after all of its parents have finished.
        queued = {r.token for r in reads} | set(ready)
        for child, parents in parents_of.items():
            if child not in queued and all(p in finished for p in parents):
                ready.append(child)
    return reads
