"""A change stream's partitions: the splits its key space had over its life, with tokens."""

from __future__ import annotations

from collections.abc import Callable

from changestream.clock import format_ts, parse_ts
from changestream.errors import OutOfRange
from changestream.store.database import Store
from changestream.store.keys import describe_key
from changestream.store.load import write_rates
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


def _partitions(store: Store, stream: str, pick: Callable[[int], list[Split]]) -> list[Partition]:
    entry = store.catalog().stream(stream)
    tables = store.catalog().tables
    secret = store.secret
    rates = write_rates(store.connection(), store.now(), store.split_policy().window_seconds)

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
