"""The k-way merge: every partition of a change stream as one feed in commit order.

This is the seed's mongos merge. Each partition is caught up by the merge itself, then followed
by a reader thread (see :mod:`changestream.watch._readers`) running the read function live and
feeding one inbox. The merge keeps a buffer per partition and, for each, a *floor*: a sort key
every record the partition has yet to deliver sorts above. A record's own key is its
partition's floor; after the last record of a transaction in a partition, or a heartbeat at T,
the floor is "above everything at T" (the seed's minimum promised sort key). Every buffered
record at or below the lowest floor of all partitions can be handed out: the merge takes them
from the buffers at once and sorts them (the buffers are sorted runs, which one C sort merges
for less than a heap's Python work per record).

Lineage: the initial query (no partition token) names the first partitions; a partition's child
partitions record ends it and names its children, and a child is read only once every one of
its parents has ended, starting at the child's start timestamp. Until then its floor is just
below that start.

Idle partitions: an embedded database's stored reads promise at each commit that leaves their
partition unchanged (see ``read_stored_changes``), so an idle partition's floor follows the
commits. Otherwise heartbeats come at most once a second (the read function's minimum
interval). Either way, when the smallest record has waited :data:`PROBE_AFTER_S` on
partitions with empty buffers whose readers have been quiet as long, the merge asks each of
them directly with a bounded query of the read function, from its floor to the newest buffered
commit timestamp. That query returns every record of the partition up to its end timestamp and
then stops, so afterwards the floor is that timestamp: one idle partition holds the others back
for milliseconds, not a heartbeat interval, using only the read function's contract. The live
reader later returns the same records again; the floor drops them. A probe takes at most
``PROBE_RECORDS`` records: a partition with more is behind (its reader has just started), not
idle, and the probe leaves its floor at the last record taken rather than read its backlog
twice.

Catching up: what a partition has already committed is read by the merge's own thread, with
bounded reads up to the database's clock (one reading of it for the partitions that catch up
together), a chunk (up to ``read_ahead`` records) whenever the partition's buffer is empty.
Each bounded read ends with a heartbeat at its end (its promise), and the merge does not probe
a partition that is catching up. A read that found less than a chunk, or that waited for
commits until a heartbeat, ends the catch-up: the live query starts there, in the partition's
reader thread.

Why the backlog is not read by the reader threads: a thread reading beside another thread that
runs Python pays for it on every row, because the database driver gives up the GIL for each row
it steps to and the busy thread takes it each time. On the watch benchmark (16 partitions, 2
cores) merging the backlog cost 5.5 to 8.8 µs a record read by reader threads, 4.5 to 5.1
read by the merge. A bounded read may wait for a commit in flight (the read function's
promise), which the merge then waits for too.

Why threads for the live part rather than polling every partition from the merge: a live query
is the read function's own way to tail a partition (it sleeps on the commit signal and promises
with heartbeats), and it maps onto one long streaming request per partition against a remote
database. Only the idle case needs polling, and there the probe asks just the partitions that
block the next record.
"""

from __future__ import annotations

import functools
import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from operator import itemgetter

from changestream.clock import now_us
from changestream.errors import FailedPrecondition
from changestream.streams.chunks import close_read, next_chunk
from changestream.streams.lineage import parents_finished
from changestream.streams.records import (
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
)
from changestream.streams.roles import ChangeStreamSource
from changestream.streams.stored_changes import StoredInserts, StoredRecord
from changestream.watch._readers import READERS

#: The heartbeat interval readers ask for: the read function's minimum.
HEARTBEAT_MS = 1000
#: How long the smallest record waits on partitions with empty buffers before they are asked.
PROBE_AFTER_S = 0.0005
#: Records a probe takes at most: a partition that has more is behind, not idle, and its live
#: reader (which reads them again) should not have its work done twice.
PROBE_RECORDS = 64
#: How long a reader that is too far ahead waits before checking it should stop.
_STOP_CHECK_S = 0.1
_TOP = 2**63

SortKey = tuple[int, int, int]


#: A data change as the merge hands it out: a record, or inserts stored compact (``stored``).
DataChange = DataChangeRecord | StoredInserts
_DATA_CHANGES = (DataChangeRecord, StoredInserts)


def record_key(record: DataChange) -> SortKey:
    """A record's place in commit order: (commit timestamp, transaction, record sequence)."""
    return (
        record.commit_timestamp,
        int(record.server_transaction_id),
        int(record.record_sequence),
    )


def _above(ts: int) -> SortKey:
    """A floor above every record committed at or before ``ts``."""
    return (ts, _TOP, _TOP)


class _Partition:
    """One partition's state in the merge. The merging thread owns it, except ``sent`` (the
    reader's count of records put in the inbox) and ``done`` (read by the reader)."""

    __slots__ = (
        "backlog",
        "buffer",
        "catching_up",
        "done",
        "floor",
        "heard",
        "parents",
        "probed",
        "reading",
        "room",
        "sent",
        "start",
        "taken",
        "token",
    )

    def __init__(self, token: str, start: int, parents: tuple[str, ...]) -> None:
        self.token = token
        self.start = start
        #: Its parents: it is read once every one of them has ended.
        self.parents = parents
        #: (sort key, record), in key order.
        self.buffer: deque[tuple[SortKey, DataChange]] = deque()
        #: The keys of buffered records a probe found (its reader did not count them in
        #: ``sent``).
        self.probed: set[SortKey] = set()
        self.floor = _above(start - 1)
        #: When the merge last got something from the reader (monotonic seconds).
        self.heard = 0.0
        self.reading = False
        #: True while the merge reads its committed backlog (it is behind, not idle: the merge
        #: does not probe it, each bounded read ends with a heartbeat).
        self.catching_up = False
        #: The chunks of its backlog, read as the merge asks for them.
        self.backlog: Iterator[_Chunk] | None = None
        #: Set once the partition has ended (or the merge closed): its reader stops.
        self.done = False
        # sent - taken is how far the reader is ahead; each count has a single writer.
        self.sent = 0
        self.taken = 0
        self.room = threading.Event()


class _Chunk:
    """Records of a catching-up partition, in its order."""

    __slots__ = ("final", "records")

    def __init__(self, records: list[StoredRecord], final: bool) -> None:
        self.records = records
        #: The partition is caught up (its live query follows) or has ended.
        self.final = final


#: What a reader hands the merge: a record, or the error that stopped it.
Item = StoredRecord | BaseException | None


class PartitionMerge:
    """Data change records of every partition of ``stream`` from ``start``, in commit order.

    ``read_ahead`` bounds the records of each partition read but not yet handed out (a chunk of
    backlog, or what its live reader handed over), so a slow consumer holds memory steady
    rather than the readers running away.
    ``now`` is the database's clock (microseconds): readers catch up to it before they follow
    their partitions live. With ``stored``, partitions are read with ``read_stored_changes``:
    inserts stored compact come as :class:`StoredInserts`.
    """

    def __init__(
        self,
        db: ChangeStreamSource,
        stream: str,
        start: int,
        read_ahead: int,
        now: Callable[[], int] = now_us,
        stored: bool = False,
    ) -> None:
        self._db = db
        self._stored = stored
        self._now = now
        self._stream = stream
        self._read_ahead = read_ahead
        self._inbox: queue.SimpleQueue[tuple[_Partition | None, Item]] = queue.SimpleQueue()
        self._stop = threading.Event()
        #: Held while the merge reads backlogs: close() closes them only when it is not.
        self._reading = threading.Lock()
        self._partitions: dict[str, _Partition] = {}
        self._finished: set[str] = set()
        #: Records taken from the buffers, in commit order, not yet handed out.
        self._released: list[tuple[SortKey, DataChange]] = []
        self._blocked_since: float | None = None
        #: Where bounded catch-up reads end: the database's clock, read once for all the
        #: partitions whose reads start before it (see :meth:`_catch_up_end`).
        self._horizon = start
        (initial,) = list(db.read_change_stream(stream, start, None, None, HEARTBEAT_MS))
        for child in initial.children:
            self._start(self._add(child.token, start, ()))

    # -- the merge ---------------------------------------------------------------------------

    def take(self, limit: int, timeout: float) -> list[tuple[SortKey, DataChange]]:
        """The next records in commit order with their sort keys: as many as can be handed out
        now, up to ``limit``, waiting up to ``timeout`` seconds for the first (else none)."""
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            self._drain()
            if not self._released:
                self._release()
            if self._released:
                self._blocked_since = None
                ready = self._released[:limit]
                del self._released[:limit]
                return ready
            if self._catch_up():
                continue
            now = time.monotonic()
            wait = deadline - now
            lowest = min(
                (p.buffer[0][0] for p in self._partitions.values() if p.buffer), default=None
            )
            if lowest is not None:
                if self._blocked_since is None:
                    self._blocked_since = now
                # Ask a blocking partition once the head has waited PROBE_AFTER_S and its reader
                # has been quiet as long: one that delivered lately is catching up, and asking
                # it would read its backlog twice. Partitions not read yet wait for parents.
                ask_at = [
                    (max(self._blocked_since, p.heard) + PROBE_AFTER_S, p)
                    for p in self._blockers(lowest)
                    if p.reading and not p.catching_up
                ]
                due = [p for at, p in ask_at if at <= now]
                if due:
                    self._probe(due)
                    self._blocked_since = None
                    continue
                if ask_at:
                    wait = min(wait, min(at for at, _ in ask_at) - now)
            if now >= deadline:
                return []
            with suppress(queue.Empty):
                self._apply(*self._inbox.get(timeout=max(wait, 0.0)))
        self._close_backlogs()
        return []

    def safe_through(self) -> int:
        """Every record committed at or before this timestamp has been handed out."""
        bound = self._released[0][0][0] - 1 if self._released else _TOP
        for part in self._partitions.values():
            if part.buffer:
                ts = part.buffer[0][0][0] - 1
            else:
                ts = part.floor[0] if part.floor[1] == _TOP else part.floor[0] - 1
            bound = min(bound, ts)
        return bound

    def close(self) -> None:
        """Stop every reader (each notices within a heartbeat interval) and wake ``take``."""
        self._stop.set()
        for part in list(self._partitions.values()):
            part.done = True
            part.room.set()
        self._inbox.put((None, None))
        self._close_backlogs()

    def _close_backlogs(self) -> None:
        """End the reads of backlogs (a read being iterated now is ended by ``take``)."""
        if not self._reading.acquire(blocking=False):
            return
        try:
            for part in list(self._partitions.values()):
                if part.backlog is not None:
                    backlog, part.backlog = part.backlog, None
                    close_read(backlog)
        finally:
            self._reading.release()

    def _release(self) -> None:
        """Move every buffered record at or below the lowest floor to ``_released``, in
        commit order (nothing any partition may still deliver sorts below them)."""
        lowest = min((p.floor for p in self._partitions.values()), default=_above(_TOP))
        runs: list[list[tuple[SortKey, DataChange]]] = []
        for part in list(self._partitions.values()):
            buffer = part.buffer
            if not buffer or buffer[0][0] > lowest:
                continue
            if buffer[-1][0] <= lowest:
                run = list(buffer)
                buffer.clear()
            else:
                run = []
                while buffer[0][0] <= lowest:
                    run.append(buffer.popleft())
            runs.append(run)
            self._taken(part, run)
            if part.done and not buffer:
                del self._partitions[part.token]
        if len(runs) == 1:
            self._released = runs[0]
        elif runs:
            # Stable: records with equal keys keep the partitions' order, as they are added.
            self._released = sorted(itertools.chain.from_iterable(runs), key=itemgetter(0))

    def _blockers(self, head_key: SortKey) -> list[_Partition]:
        """The partitions that may still deliver something sorting below ``head_key``."""
        return [p for p in self._partitions.values() if not p.buffer and p.floor < head_key]

    def _taken(self, part: _Partition, records: list[tuple[SortKey, DataChange]]) -> None:
        """Count ``records`` of the partition as taken: its reader may hand over as many more."""
        count = len(records)
        if part.probed:
            found = [key for key, _ in records if key in part.probed]
            part.probed.difference_update(found)
            count -= len(found)
        if count:
            self._room_for(part, count)

    def _room_for(self, part: _Partition, count: int) -> None:
        full = part.sent - part.taken >= self._read_ahead
        part.taken += count
        if full:
            part.room.set()  # its reader may be waiting for this

    def _probe(self, parts: list[_Partition]) -> None:
        """Bring the floors of ``parts`` up to the newest buffered commit timestamp."""
        target = max(p.buffer[-1][0][0] for p in self._partitions.values() if p.buffer)
        for part in parts:
            ts, transaction, _ = part.floor
            # A floor inside a transaction means that transaction may have more records here.
            start = ts + 1 if transaction == _TOP else ts
            if part.done or start > target:
                continue
            records = self._query(start, target, part.token)
            complete = True
            try:
                found = 0
                for record in records:
                    self._accept(part, record, counted=False)
                    found += record.is_data_change
                    if found >= PROBE_RECORDS:
                        complete = False  # not idle, only behind: its reader carries on
                        break
            finally:
                close_read(records)
            if complete and not part.done:
                part.floor = max(part.floor, _above(target))

    # -- partitions and their readers -------------------------------------------------------

    def _query(self, start: int, end: int | None, token: str) -> Iterable[StoredRecord]:
        """A read of one partition, bounded by ``end`` or live (None)."""
        if self._stored:
            return self._db.read_stored_changes(self._stream, start, end, token, HEARTBEAT_MS)
        return self._db.read_change_stream(self._stream, start, end, token, HEARTBEAT_MS)

    def _add(self, token: str, start: int, parents: tuple[str, ...]) -> _Partition:
        part = _Partition(token, start, parents)
        self._partitions[token] = part
        return part

    def _start(self, part: _Partition) -> None:
        part.reading = part.catching_up = True
        part.backlog = self._backlog(part)

    def _catch_up(self) -> bool:
        """Read the next chunk of every catching-up partition whose buffer is empty; whether
        any was read."""
        behind = [p for p in self._partitions.values() if p.backlog is not None and not p.buffer]
        if not behind:
            return False
        with self._reading:
            for part in behind:
                if part.backlog is None or self._stop.is_set():
                    continue
                chunk = next(part.backlog)
                part.heard = time.monotonic()
                if chunk.final:
                    part.backlog = None
                    part.catching_up = False
                self._accept_chunk(part, chunk.records)
        return True

    def _backlog(self, part: _Partition) -> Iterator[_Chunk]:
        """What the partition has already committed, in chunks, with bounded reads up to now;
        the last chunk starts its live reader (unless the partition ended).

        The chunk that ends a bounded read carries a heartbeat at its end, which is the
        partition's promise that nothing more is at or below it. Catching up ends with a read
        that found less than a chunk, or that waited for commits until a heartbeat: the
        partition is at its head.
        """
        limit = self._read_ahead
        start = part.start
        while True:
            end = self._catch_up_end(start)
            records = self._query(start, end, part.token)
            found = 0
            try:
                iterator = iter(records)
                exhausted = False
                while not exhausted:
                    chunk = next_chunk(iterator, limit)
                    found += len(chunk)
                    at_head = bool(chunk) and isinstance(chunk[-1], HeartbeatRecord)
                    ended = bool(chunk) and chunk[-1].ends_partition
                    exhausted = at_head or ended or len(chunk) < limit
                    if exhausted and not (at_head or ended):
                        chunk.append(HeartbeatRecord(end, part.token))
                    part.sent += sum(record.is_data_change for record in chunk)
                    if at_head or ended or (exhausted and found < limit):
                        if not ended:
                            READERS.submit(
                                functools.partial(self._follow, part, chunk[-1].timestamp)
                            )
                        yield _Chunk(chunk, final=True)
                        return
                    yield _Chunk(chunk, final=False)
            finally:
                close_read(records)
            # Reads start at a timestamp, not after it: what comes again at ``end`` sorts
            # below the floor and is dropped.
            start = end

    def _catch_up_end(self, start: int) -> int:
        """Where a bounded read of a backlog from ``start`` ends: the database's clock as last
        read, read again only once a read starts at or after it. A bounded read first makes
        sure nothing can still commit at or below its end, which at the clock's newest reading
        is a write to the database: reads sharing an end pay for it once (a watch() over 16
        partitions wrote 16 times before its first event), and any end the clock has passed
        is as good a place to go live from."""
        if self._horizon <= start:
            self._horizon = self._now()
        return max(self._horizon, start)

    def _follow(self, part: _Partition, start: int) -> None:
        """A reader thread: the partition's live query from ``start``, into the inbox."""
        try:
            records = self._query(start, None, part.token)
            for record in records:
                if record.is_data_change:
                    if not self._room(part):
                        return
                    part.sent += 1
                if part.done:
                    return
                self._inbox.put((part, record))
                if record.ends_partition:
                    return
            raise FailedPrecondition(
                f"partition {part.token!r} of the watch stream ended without naming its child "
                "partitions; its changes after that point cannot be followed"
            )
        except Exception as exc:
            if not part.done:
                self._inbox.put((part, exc))

    def _room(self, part: _Partition) -> int:
        """How many records the partition's reader may hand over now, waiting for room; 0
        once the partition ended or the merge stopped."""
        limit = self._read_ahead
        while part.sent - part.taken >= limit and not part.done:
            part.room.clear()
            if part.sent - part.taken >= limit:
                part.room.wait(_STOP_CHECK_S)
        return 0 if part.done else limit - (part.sent - part.taken)

    def _drain(self) -> None:
        while True:
            try:
                part, item = self._inbox.get_nowait()
            except queue.Empty:
                return
            self._apply(part, item)

    def _apply(self, part: _Partition | None, item: Item) -> None:
        if part is None or item is None:
            return  # close() waking take()
        if isinstance(item, BaseException):
            raise item
        part.heard = time.monotonic()
        self._accept(part, item, counted=item.is_data_change)

    def _accept_chunk(self, part: _Partition, chunk: list[StoredRecord]) -> None:
        """A chunk of backlog, in its partition's order: what :meth:`_accept` does to each
        record, with the data changes handled in one loop (catching up, nearly every record
        of the merge comes this way)."""
        buffer, floor = part.buffer, part.floor
        for record in chunk:
            if isinstance(record, _DATA_CHANGES) and not part.done:
                key = (
                    record.commit_timestamp,
                    int(record.server_transaction_id),
                    int(record.record_sequence),
                )
                if key <= floor:
                    self._room_for(part, 1)  # a probe buffered it first
                    continue
                buffer.append((key, record))
                last = record.is_last_record_in_transaction_in_partition
                floor = (key[0], _TOP, _TOP) if last else key
            else:
                part.floor = floor
                self._accept(part, record, counted=record.is_data_change)
                floor = part.floor
        part.floor = floor

    def _accept(self, part: _Partition, record: StoredRecord, counted: bool) -> None:
        if isinstance(record, _DATA_CHANGES):
            key = record_key(record)
            if part.done or key <= part.floor:
                # Already buffered (a probe returned it first) or the partition has ended.
                if counted:
                    self._room_for(part, 1)
                return
            part.buffer.append((key, record))
            if not counted:
                part.probed.add(key)
            last = record.is_last_record_in_transaction_in_partition
            part.floor = _above(key[0]) if last else key
        elif isinstance(record, HeartbeatRecord):
            if not part.done:
                part.floor = max(part.floor, _above(record.timestamp))
        else:
            self._end(part, record)

    def _end(self, part: _Partition, record: ChildPartitionsRecord) -> None:
        """The partition ended: start each child whose parents have all ended."""
        if part.done:
            return
        part.done = True
        part.floor = _above(_TOP)
        self._finished.add(part.token)
        if not part.buffer:
            del self._partitions[part.token]
        for child in record.child_partitions:
            if child.token in self._finished:
                continue
            found = self._partitions.get(child.token)
            if found is None:
                found = self._add(
                    child.token, record.start_timestamp, child.parent_partition_tokens
                )
            if parents_finished(found.parents, self._finished) and not found.reading:
                self._start(found)
