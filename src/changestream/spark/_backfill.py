"""Backfill: every existing row of a table, read in key-range chunks in parallel on Spark.

Each chunk is read in one consistent snapshot whose timestamp the chunk records; the rows are
the chunk's state at that timestamp and are emitted once each as backfill events. Every change
committed after ``streams start`` is still a CDC event of its own (Datastream's semantics): the
replica applies both by ``sort_keys``, so a CDC change older than a chunk's snapshot loses to
the backfill row and a newer one wins, and the replica equals the source with no gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from changestream.codecs import event_encoder, record_decoder
from changestream.ddl.schema import Table
from changestream.store.keys import KeyRange
from changestream.streams.roles import TableStore

Key = tuple[Any, ...]

#: ``ObjectBackfill.detail`` keys: the chunk plan, and each finished chunk's read timestamp.
PLAN = "boundaries"
DONE_PREFIX = "chunk-"


@dataclass(frozen=True, slots=True)
class Chunk:
    """Keys in ``(low, high]`` of one table (``None``: no bound on that side)."""

    index: int
    low: Key | None
    high: Key | None

    def key_range(self) -> KeyRange:
        if self.low is None:
            return KeyRange(start_closed=(), end_closed=self.high or ())
        return KeyRange(start_open=self.low, end_closed=self.high or ())


def plan_boundaries(db: TableStore, table: Table, chunk_rows: int) -> list[Key]:
    """Keys cutting ``table`` into chunks of about ``chunk_rows`` rows (read as keys only)."""
    boundaries: list[Key] = []
    key_range = KeyRange(start_closed=(), end_closed=())
    while True:
        page = db.read_snapshot(table.name, key_range, table.primary_key, chunk_rows).rows
        if len(page) < chunk_rows:
            return boundaries
        boundaries.append(tuple(page[-1]))
        key_range = KeyRange(start_open=boundaries[-1], end_closed=())


def chunks(boundaries: Sequence[Key]) -> list[Chunk]:
    """The chunks between ``boundaries`` (one more than there are boundaries)."""
    edges: list[Key | None] = [None, *boundaries, None]
    return [Chunk(i, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


class KeyCodec:
    """Key tuples to and from JSON (the change records' encoding), for stored chunk plans."""

    def __init__(self, table: Table) -> None:
        self._encode = [event_encoder(c.type) for c in table.key_columns]
        self._decode = [record_decoder(c.type) for c in table.key_columns]

    def dump(self, key: Key) -> list[Any]:
        return [encode(v) for encode, v in zip(self._encode, key, strict=True)]

    def load(self, data: Sequence[Any]) -> Key:
        return tuple(decode(v) for decode, v in zip(self._decode, data, strict=True))
