"""Test helper: read a change stream the way the seed's query workflow says, keeping order."""

from __future__ import annotations

from dataclasses import dataclass, field

import changestream
from changestream import DataChangeRecord, HeartbeatRecord


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
    in the order they were read (with the public walker)."""
    reads: list[PartitionRead] = []
    for partition in changestream.walk_partitions(db, stream, start, end, 1000):
        read = PartitionRead(partition.token, partition.start_timestamp, partition.parent_tokens)
        reads.append(read)
        for record in partition.records():
            if isinstance(record, DataChangeRecord):
                read.records.append(record)
            elif isinstance(record, HeartbeatRecord):
                read.heartbeats.append(record)
            else:
                read.end = record.start_timestamp
    return reads
