"""The read function: ``READ_<stream>(start_timestamp, end_timestamp, partition_token,
heartbeat_milliseconds)`` over the change log, following the seed's query workflow."""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from changestream.clock import format_ts, parse_ts
from changestream.errors import InvalidArgument, InvalidToken, NotFound, OutOfRange
from changestream.store.catalog import StreamEntry
from changestream.store.change_log import log_sizes, next_log_rows, split_end, stream_exists
from changestream.store.commit_signal import CommitSignal
from changestream.store.database import Store
from changestream.store.splits import Split, load_split, load_splits, splits_live_at
from changestream.streams.mods import VALUES_FIELD
from changestream.streams.records import (
    ChildPartition,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    sequence_text,
)
from changestream.streams.sizes import MAX_SIZES, ChangeSize
from changestream.streams.tokens import PartitionId, decode_token, encode_token
from changestream.values import shown

MIN_HEARTBEAT_MS = 1000
MAX_HEARTBEAT_MS = 300_000
_BATCH = 500
#: Where a stored record keeps its mods: as records (``mods``), or as rows of values when
#: every mod has the same columns (see ``changestream.streams.mods``).
_MOD_ARRAYS = ("$.mods", f"$.{VALUES_FIELD}")
_MAX_POLL_S = 0.05
#: How long a due heartbeat may wait for a writer to release the lock before it goes out
#: with the timestamp already known to be safe.
_LOCK_GRACE_S = 0.2


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Validated read-function arguments (timestamps in microseconds)."""

    stream: StreamEntry
    start: int
    end: int | None
    token: str | None
    heartbeat_us: int


def validate(
    store: Store,
    stream: str,
    start_timestamp: Any,
    end_timestamp: Any,
    partition_token: Any,
    heartbeat_milliseconds: Any,
    read_options: Any,
) -> ReadRequest:
    """Check every argument the way the seed says, with errors that say what is allowed."""
    if read_options is not None:
        raise InvalidArgument(f"read_options must be NULL (reserved), got {shown(read_options)}")
    if isinstance(heartbeat_milliseconds, bool) or not isinstance(heartbeat_milliseconds, int):
        raise InvalidArgument(
            f"heartbeat_milliseconds must be an integer, got {shown(heartbeat_milliseconds)}"
        )
    if not MIN_HEARTBEAT_MS <= heartbeat_milliseconds <= MAX_HEARTBEAT_MS:
        raise InvalidArgument(
            f"heartbeat_milliseconds must be between {MIN_HEARTBEAT_MS} and {MAX_HEARTBEAT_MS}, "
            f"got {heartbeat_milliseconds}"
        )
    if start_timestamp is None:
        raise InvalidArgument("start_timestamp is required")
    entry = store.catalog().stream(stream)
    start = parse_ts(start_timestamp, "start_timestamp")
    end = None if end_timestamp is None else parse_ts(end_timestamp, "end_timestamp")
    now = store.now()
    if start > now:
        raise InvalidArgument(
            f"start_timestamp {format_ts(start)} is in the future (now is {format_ts(now)})"
        )
    if end is not None and end < start:
        raise InvalidArgument(
            f"end_timestamp {format_ts(end)} is before start_timestamp {format_ts(start)}"
        )
    if start < entry.created_ts:
        raise OutOfRange(
            f"start_timestamp {format_ts(start)} is before change stream {stream!r} was created "
            f"({format_ts(entry.created_ts)})"
        )
    horizon = now - entry.definition.retention_seconds * 1_000_000
    if start < horizon:
        raise OutOfRange(
            f"start_timestamp {format_ts(start)} is outside the retention period of change "
            f"stream {stream!r}: the oldest readable timestamp is {format_ts(horizon)}"
        )
    if partition_token is not None and not isinstance(partition_token, str):
        raise InvalidToken(
            f"partition_token must be a string or NULL, got {shown(partition_token)}"
        )
    return ReadRequest(entry, start, end, partition_token, heartbeat_milliseconds * 1000)


#: What a reader yields for each change-log row (see ``ChangeStreamReader``).
D = TypeVar("D")


class ChangeStreamReader(Generic[D]):
    """Yields one query's records: the initial child partitions, or one partition's records.

    ``data_record(commit_ts, payload, partition_token)`` makes what is yielded for each row of
    the change log from its stored JSON; by default a :class:`DataChangeRecord`. The server
    passes the payload on without decoding it.
    """

    @overload
    def __init__(
        self: ChangeStreamReader[DataChangeRecord], store: Store, request: ReadRequest
    ) -> None: ...
    @overload
    def __init__(
        self,
        store: Store,
        request: ReadRequest,
        data_record: Callable[[int, bytes, str], D],
        promptly: bool = False,
    ) -> None: ...
    def __init__(
        self,
        store: Store,
        request: ReadRequest,
        data_record: Callable[[int, bytes, str], Any] = DataChangeRecord.from_payload,
        promptly: bool = False,
    ) -> None:
        self._store = store
        self._request = request
        self._data_record = data_record
        #: A live read also promises at each commit it wakes for that left its partition
        #: unchanged (a heartbeat before the interval): see ``read_stored_changes``.
        self._promptly = promptly
        self._secret = store.secret
        self._split: Split | None = None
        if request.token is not None:
            self._split = self._resolve(request.token)

    def _token(self, split_id: int) -> str:
        return encode_token(self._secret, PartitionId(self._request.stream.stream_id, split_id))

    def _resolve(self, token: str) -> Split:
        request = self._request
        partition = decode_token(self._secret, token)
        if partition.stream_id != request.stream.stream_id:
            raise InvalidToken(
                f"partition_token {token!r} belongs to another change stream than "
                f"{request.stream.definition.name!r}"
            )
        split = load_split(self._store.connection(), partition.split_id)
        if split is None:
            raise OutOfRange(
                f"partition {token!r} ended before the retention window of change stream "
                f"{request.stream.definition.name!r}; start again from a recent timestamp"
            )
        earliest = max(split.start_ts, request.stream.created_ts)
        if request.start < earliest:
            raise OutOfRange(
                f"start_timestamp {format_ts(request.start)} is before partition {token!r} "
                f"starts ({format_ts(earliest)})"
            )
        return split

    def sizes(self, limit: int) -> list[ChangeSize]:
        """Per commit timestamp of the data change records this partition read would return
        that are already safe (none can still commit at or below them), in order, at most
        ``limit`` of them: how many, their mods, and the bytes of their JSON as stored. The
        records themselves are not read."""
        if self._split is None:
            raise InvalidArgument("change sizes are of one partition: give a partition_token")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_SIZES:
            raise InvalidArgument(f"limit must be an integer from 1 to {MAX_SIZES}, got {limit!r}")
        request, split_id = self._request, self._split.split_id
        with self._store.snapshot() as conn:
            upper, _ = self._readable(conn, split_id)
            rows = log_sizes(
                conn, request.stream.stream_id, split_id, request.start, upper, limit, _MOD_ARRAYS
            )
        return [ChangeSize(*row) for row in rows]

    def _readable(self, conn: sqlite3.Connection, split_id: int) -> tuple[int, int | None]:
        """How far this read may return the split's log now (the watermark, the read's end,
        and the split's end, whichever comes first), and when the split ended; NotFound once
        the stream was dropped (its log may be gone already)."""
        stream = self._request.stream
        if not stream_exists(conn, stream.stream_id):
            raise NotFound(f"change stream {stream.definition.name!r} was dropped")
        upper = self._store.watermark(conn)
        if self._request.end is not None:
            upper = min(upper, self._request.end)
        end_ts = split_end(conn, split_id)
        if end_ts is not None:
            upper = min(upper, end_ts - 1)
        return upper, end_ts

    def __iter__(self) -> Iterator[D | HeartbeatRecord | ChildPartitionsRecord]:
        if self._split is None:
            return self._initial()
        return self._partition(self._split)

    def _wait_until_safe(self, ts: int) -> None:
        """Block until no commit at or below ``ts`` can still appear."""
        delay = 0.001
        while self._store.watermark(self._store.connection()) < ts:
            wait = ts - self._store.now()
            if wait > 0:
                time.sleep(min(wait / 1e6, _MAX_POLL_S))
            elif self._store.advance_safe_ts() is None:
                time.sleep(delay)
                delay = min(delay * 2, _MAX_POLL_S)

    def _initial(self) -> Iterator[ChildPartitionsRecord]:
        start = self._request.start
        self._wait_until_safe(start)
        splits = splits_live_at(self._store.connection(), start)
        children = tuple(ChildPartition(self._token(s.split_id), ()) for s in splits)
        yield ChildPartitionsRecord(start, sequence_text(0), children)

    def _children_record(self, split: Split) -> ChildPartitionsRecord:
        assert split.end_ts is not None
        conn = self._store.connection()
        children = tuple(
            ChildPartition(
                self._token(child.split_id), tuple(self._token(p) for p in child.parents)
            )
            for child in load_splits(conn, split.children)
        )
        return ChildPartitionsRecord(
            split.end_ts, sequence_text(0), children, self._token(split.split_id)
        )

    def _snapshot(
        self, split_id: int, after: tuple[int, int]
    ) -> tuple[int, int | None, list[tuple[int, int, bytes]]]:
        """In one consistent read: the watermark, the split's end, and the next log rows."""
        stream = self._request.stream
        with self._store.snapshot() as conn:
            upper, end_ts = self._readable(conn, split_id)
            rows = next_log_rows(conn, stream.stream_id, split_id, after, upper, _BATCH)
        # A full batch may not reach ``upper`` yet: report -1 so the caller reads on first.
        return (upper if len(rows) < _BATCH else -1), end_ts, rows

    def _partition(self, split: Split) -> Iterator[D | HeartbeatRecord | ChildPartitionsRecord]:
        signal = self._store.commit_signal
        end = self._request.end
        if end is not None and end <= self._store.now():
            # A read of the past never waits on the signal (see _follow), so it starts no
            # poller: while another process commits, a poller looks every 0.5 ms, and in a
            # live pipeline's Spark workers it had 5.8 % of their samples (the tasks 42.6 %).
            yield from self._follow(split, signal)
            return
        with signal.listening():
            yield from self._follow(split, signal)

    def _follow(
        self, split: Split, signal: CommitSignal
    ) -> Iterator[D | HeartbeatRecord | ChildPartitionsRecord]:
        """The partition's records, then heartbeats while idle, waking on each commit."""
        request = self._request
        token = self._token(split.split_id)
        heartbeat_s = request.heartbeat_us / 1e6
        cursor = (request.start, -1)
        delivered = request.start - 1
        last_emit = time.monotonic()
        seen = signal.generation
        live = request.end is None
        promised = delivered
        while True:
            if live:
                # Live readers of this partition woken by the same commit read it once.
                generation = signal.generation
                through, end_ts, rows = signal.shared(
                    generation,
                    (request.stream.stream_id, split.split_id),
                    cursor,
                    functools.partial(self._snapshot, split.split_id, cursor),
                )
            else:
                through, end_ts, rows = self._snapshot(split.split_id, cursor)
            for commit_ts, _, payload in rows:
                yield self._data_record(commit_ts, payload, token)
            if rows:
                last_emit = time.monotonic()
                cursor = (rows[-1][0], rows[-1][1])
            if through < 0:
                continue
            delivered = max(delivered, through)
            if (
                end_ts is not None
                and delivered >= end_ts - 1
                and (request.end is None or request.end >= end_ts)
            ):
                split = load_split(self._store.connection(), split.split_id) or split
                yield self._children_record(split)
                return
            if request.end is not None and delivered >= request.end:
                return
            if request.end is not None and request.end <= self._store.now():
                self._wait_until_safe(request.end)
                continue
            if live and self._promptly and delivered > promised:
                promised = delivered
                yield HeartbeatRecord(delivered, token)
            idle = time.monotonic() - last_emit
            if idle >= heartbeat_s:
                if self._store.advance_safe_ts() is None and idle < heartbeat_s + _LOCK_GRACE_S:
                    # A writer holds the lock: its commit will move the watermark soon.
                    seen = signal.wait(seen, 0.005)
                    continue
                through, _, rows = self._snapshot(split.split_id, cursor)
                if rows:
                    continue
                delivered = max(delivered, through)
                yield HeartbeatRecord(delivered, token)
                last_emit = time.monotonic()
                continue
            seen = signal.wait(seen, heartbeat_s - idle)
