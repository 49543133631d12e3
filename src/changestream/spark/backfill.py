"""Backfill: every existing row of a table, read in key-range chunks in parallel on Spark.

Each chunk is read in one consistent snapshot whose timestamp the chunk records; the rows are
the chunk's state at that timestamp. CDC then keeps, for a row of that chunk, only changes
committed after it (see :class:`Coverage`), so every row is emitted once as backfill and every
later change once as CDC, with no gap, while writers go on committing.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

import changestream
from changestream import KeyRange
from changestream.datastream.catalog import ObjectBackfill
from changestream.datastream.codecs import json_encoder, record_decoder
from changestream.ddl.schema import Table
from changestream.streams.interface import Database

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


@dataclass(frozen=True, slots=True)
class ChunkRead:
    """A chunk's rows, read in one snapshot at ``read_timestamp``."""

    chunk: Chunk
    read_timestamp: int
    rows: list[tuple[Any, ...]]


def plan_boundaries(db: Database, table: Table, chunk_rows: int) -> list[Key]:
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


def read_chunks(
    spark: SparkSession, database: str, token: str | None, table: str, todo: Sequence[Chunk]
) -> Iterator[ChunkRead]:
    """Read ``todo`` in parallel Spark tasks; chunks reach the driver one at a time."""

    def read(chunk: Chunk) -> ChunkRead:
        db = changestream.open_path_or_url(database, token)
        try:
            snapshot = db.read_snapshot(table, chunk.key_range())
        finally:
            db.close()
        return ChunkRead(chunk, snapshot.read_timestamp, snapshot.rows)

    rdd = spark.sparkContext.parallelize(list(todo), max(1, len(todo))).map(read)
    return rdd.toLocalIterator()


class KeyCodec:
    """Key tuples to and from JSON (the change records' encoding), for stored chunk plans."""

    def __init__(self, table: Table) -> None:
        self._encode = [json_encoder(c.type) for c in table.key_columns]
        self._decode = [record_decoder(c.type) for c in table.key_columns]

    def dump(self, key: Key) -> list[Any]:
        return [encode(v) for encode, v in zip(self._encode, key, strict=True)]

    def load(self, data: Sequence[Any]) -> Key:
        return tuple(decode(v) for decode, v in zip(self._decode, data, strict=True))


def _ordered(key: Key) -> tuple[tuple[int, Any], ...]:
    """A key made comparable in SQLite's order, where NULL sorts before every value."""
    return tuple((0, 0) if value is None else (1, value) for value in key)


class Coverage:
    """Which CDC changes of one table a finished backfill already holds: a change of a row in
    chunk *i* is covered when committed at or before chunk *i*'s snapshot."""

    def __init__(self, table: Table, backfill: ObjectBackfill) -> None:
        codec = KeyCodec(table)
        self._boundaries = [_ordered(codec.load(k)) for k in backfill.detail.get(PLAN, [])]
        self._read_at = [
            int(backfill.detail[f"{DONE_PREFIX}{i}"]) for i in range(len(self._boundaries) + 1)
        ]
        self._key = table.primary_key

    def covers(self, payload: Mapping[str, Any], commit_timestamp: int) -> bool:
        key = _ordered(tuple(payload[name] for name in self._key))
        return commit_timestamp <= self._read_at[bisect.bisect_left(self._boundaries, key)]
