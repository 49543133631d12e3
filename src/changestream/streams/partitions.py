"""A change stream's partitions: the splits its key space had over its life, with tokens."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from changestream.clock import format_ts, parse_ts
from changestream.errors import OutOfRange
from changestream.store.database import Store
from changestream.store.keys import describe_key
from changestream.store.splits import Split, all_splits, splits_live_at
from changestream.streams.models import Partition, Timestamp
from changestream.streams.tokens import PartitionId, encode_token


def live(store: Store, stream: str, at: Timestamp | None = None) -> list[Partition]:
    """The partitions of ``stream`` live now (or at ``at``, inside the stream's life), in key
    order."""
    now = store.last_commit_ts()
    moment = now if at is None else parse_ts(at, "at")
    if at is not None:
        created = store.catalog().stream(stream).created_ts
        if not created <= moment <= max(now, store.now()):
            raise OutOfRange(
                f"at {format_ts(moment)} is outside the life of change stream {stream!r}: "
                f"it was created at {format_ts(created)}, and it is now {format_ts(store.now())}"
            )
    conn = store.connection()
    return _partitions(store, stream, lambda created: splits_live_at(conn, max(moment, created)))


def history(store: Store, stream: str) -> list[Partition]:
    """Every partition of ``stream`` since it was created, oldest first (the lineage)."""
    conn = store.connection()
    return _partitions(
        store,
        stream,
        lambda created: [s for s in all_splits(conn) if s.end_ts is None or s.end_ts > created],
    )


@dataclass(frozen=True, slots=True)
class LineageEntry:
    """A partition in a lineage window, with what a picture of the window needs."""

    partition: Partition
    #: Change records of the stream the partition holds (those still retained).
    record_count: int
    #: Where its key range starts and ends among the window's distinct boundary keys, in
    #: key order (0 is the start of the key space, ``LineageWindow.key_ranks`` its end).
    key_rank_start: int
    key_rank_end: int


@dataclass(frozen=True, slots=True)
class LineageWindow:
    """The partitions of a stream live at some moment of ``[start, end]``, newest first when
    more than a limit were (``total`` says how many)."""

    entries: list[LineageEntry]
    total: int
    key_ranks: int
    start: int
    end: int
    created: int


def lineage(
    store: Store, stream: str, start: int | None, end: int | None, limit: int
) -> LineageWindow:
    """The partitions of ``stream`` live at any moment of ``[start, end]`` (default: from the
    stream's creation to now), at most ``limit`` of them (the newest), with record counts."""
    entry = store.catalog().stream(stream)
    conn = store.connection()
    low = entry.created_ts if start is None else max(start, entry.created_ts)
    high = max(store.now(), store.last_commit_ts()) if end is None else end
    if high < low:
        raise OutOfRange(f"the window ends ({format_ts(high)}) before it starts ({format_ts(low)})")
    found = [
        s
        for s in all_splits(conn)
        if max(s.start_ts, entry.created_ts) <= high and (s.end_ts is None or s.end_ts > low)
    ]
    total = len(found)
    if total > limit:
        found = sorted(found, key=lambda s: (s.start_ts, s.split_id))[total - limit :]
    boundaries = sorted({s.start_key for s in found} | {s.end_key for s in found if s.end_key})
    rank = {key: number for number, key in enumerate(boundaries)}
    top = len(boundaries)
    counts = dict(
        conn.execute(
            "SELECT split_id, count(*) FROM _cs_log WHERE stream_id = ? AND split_id IN "
            f"({','.join('?' * len(found))}) GROUP BY split_id",
            (entry.stream_id, *(s.split_id for s in found)),
        )
    )
    return LineageWindow(
        entries=[
            LineageEntry(
                partition=partition,
                record_count=counts.get(split.split_id, 0),
                key_rank_start=rank[split.start_key],
                key_rank_end=top if split.end_key is None else rank[split.end_key],
            )
            for split, partition in zip(
                found, _partitions(store, stream, lambda _: found), strict=True
            )
        ],
        total=total,
        key_ranks=top,
        start=low,
        end=high,
        created=entry.created_ts,
    )


def _partitions(store: Store, stream: str, pick: Callable[[int], list[Split]]) -> list[Partition]:
    entry = store.catalog().stream(stream)
    tables = store.catalog().tables
    secret = store.secret
    rates = store.write_rates(store.split_policy().window_seconds)

    @functools.cache  # a split's token is also its parents' and children's: make it once
    def token(split_id: int) -> str:
        return encode_token(secret, PartitionId(entry.stream_id, split_id))

    return [
        Partition(
            token=token(split.split_id),
            start_timestamp=max(split.start_ts, entry.created_ts),
            end_timestamp=split.end_ts,
            start_key=describe_key(split.start_key, tables),
            end_key=describe_key(split.end_key, tables),
            parent_tokens=tuple(token(p) for p in split.parents),
            child_tokens=tuple(token(c) for c in split.children),
            write_rate=rates.get(split.split_id, 0.0) if split.end_ts is None else 0.0,
        )
        for split in pick(entry.created_ts)
    ]
