"""A change stream's lineage, parent first: a child partition is read only after every one of
its parents has finished, which keeps each key's changes in commit order across splits and
merges. :func:`parents_finished` is the rule; :class:`PartitionWalk` follows it for you::

    for partition in changestream.walk_partitions(db, "Orders", start, end):
        for record in partition.records():
            ...

Read the partitions one after the other (as above), or hand each one's ``records()`` to a
thread of its own to follow a live stream (``end`` None): the walk gives a child once its
parents' reads have finished.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Container, Iterable, Iterator

from changestream.clock import parse_ts
from changestream.errors import FailedPrecondition
from changestream.streams.models import DEFAULT_HEARTBEAT_MS, Timestamp
from changestream.streams.records import ChangeRecord
from changestream.streams.roles import ChangeStreamSource

#: How long a walk waits at a time for a partition being read elsewhere to finish.
_WAIT_S = 1.0


def parents_finished(parent_tokens: Iterable[str], finished: Container[str]) -> bool:
    """Whether a child partition may be read: every one of its parents has finished. A parent
    the reader has not heard of is not finished (a merge child is announced by each parent)."""
    return all(parent in finished for parent in parent_tokens)


class WalkedPartition:
    """A partition handed out by a :class:`PartitionWalk`: its token, where it starts, and
    its parents (all finished). Read it once with :meth:`records`."""

    def __init__(
        self, walk: PartitionWalk, token: str, start_timestamp: int, parent_tokens: tuple[str, ...]
    ) -> None:
        self._walk = walk
        self.token = token
        self.start_timestamp = start_timestamp
        self.parent_tokens = parent_tokens
        self.state = "new"  # reading, finished, or stopped (its reader stopped early)

    def __repr__(self) -> str:
        return f"WalkedPartition({self.token[:12]}…, start={self.start_timestamp}, {self.state})"

    def records(self) -> Iterator[ChangeRecord]:
        """The partition's records from its start: data changes and heartbeats in commit
        order, then its child partitions record when it ends before the walk's end.

        The partition counts as being read from this call on (call it before handing the
        iterator to a thread). Read it to the end, or close it to stop early: a partition
        stopped early ends its branch of the walk (its children are not given)."""
        with self._walk._lock:
            if self.state != "new":
                raise FailedPrecondition(f"partition {self.token} is already {self.state}")
            self.state = "reading"
        return _Records(self, self._walk._read(self))


class _Records(Iterator[ChangeRecord]):
    """One partition's read; tells the walk what children it announced and how it ended."""

    def __init__(self, partition: WalkedPartition, source: Iterator[ChangeRecord]) -> None:
        self._partition = partition
        self._source = source
        self._open = True

    def __next__(self) -> ChangeRecord:
        if not self._open:
            raise StopIteration
        try:
            record = next(self._source)
        except StopIteration:
            self._end(completed=True)
            raise
        except BaseException:
            self._end(completed=False)
            raise
        if record.ends_partition:
            self._partition._walk._announce(record)
        return record

    def close(self) -> None:
        """Stop reading: the partition's branch of the walk ends here."""
        if self._open:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()
            self._end(completed=False)

    def __del__(self) -> None:
        self.close()

    def _end(self, completed: bool) -> None:
        self._open = False
        self._partition._walk._done_reading(self._partition, completed)


class PartitionWalk:
    """The partitions of a change stream from ``start`` (to ``end``, or live when None), each
    given only after all of its parents have finished; iteration ends when every partition
    given has been read to ``end`` (or stopped). A partition given but not read when the next
    one is asked for is read by the walk itself, its records dropped, to learn its children."""

    def __init__(
        self,
        db: ChangeStreamSource,
        stream: str,
        start: Timestamp,
        end: Timestamp | None = None,
        heartbeat_milliseconds: int = DEFAULT_HEARTBEAT_MS,
    ) -> None:
        self._db = db
        self._stream = stream
        self._end = None if end is None else parse_ts(end, "end")
        self._heartbeat_ms = heartbeat_milliseconds
        self._lock = threading.Condition()
        # Children announced but not ready yet: their parents and where they start.
        self._waiting: dict[str, tuple[tuple[str, ...], int]] = {}
        self._finished: set[str] = set()
        self._known: set[str] = set()  # given out or queued
        self._ready: deque[tuple[str, tuple[str, ...], int]] = deque()
        self._given: list[WalkedPartition] = []
        (first,) = db.read_change_stream(stream, start, end)
        self._announce(first)
        self._queue_ready()

    def __iter__(self) -> PartitionWalk:
        return self

    def __next__(self) -> WalkedPartition:
        while True:
            with self._lock:
                if self._ready:
                    token, parents, start = self._ready.popleft()
                    given = WalkedPartition(self, token, start, parents)
                    self._given.append(given)
                    return given
                self._given = [p for p in self._given if p.state in ("new", "reading")]
                unread = next((p for p in self._given if p.state == "new"), None)
                if unread is None:
                    if not self._given:
                        raise StopIteration
                    self._lock.wait(_WAIT_S)
                    continue
            for _ in unread.records():  # only its children matter to the walk
                pass

    @property
    def finished(self) -> frozenset[str]:
        """The tokens of the partitions read to their end so far."""
        with self._lock:
            return frozenset(self._finished)

    def _read(self, partition: WalkedPartition) -> Iterator[ChangeRecord]:
        return self._db.read_change_stream(
            self._stream,
            partition.start_timestamp,
            self._end,
            partition.token,
            self._heartbeat_ms,
        )

    def _announce(self, record: ChangeRecord) -> None:
        with self._lock:
            for child in record.children:
                if child.token not in self._known:  # a merge child is announced by each parent
                    entry = (child.parent_partition_tokens, record.timestamp)
                    self._waiting.setdefault(child.token, entry)

    def _done_reading(self, partition: WalkedPartition, completed: bool) -> None:
        with self._lock:
            if completed:
                partition.state = "finished"
                self._finished.add(partition.token)
                self._queue_ready()
            else:
                partition.state = "stopped"
            self._lock.notify_all()

    def _queue_ready(self) -> None:
        ready = [
            child
            for child, (parents, _) in self._waiting.items()
            if parents_finished(parents, self._finished)
        ]
        for child in ready:
            parents, start = self._waiting.pop(child)
            self._known.add(child)
            self._ready.append((child, parents, start))


def walk_partitions(
    db: ChangeStreamSource,
    stream: str,
    start: Timestamp,
    end: Timestamp | None = None,
    heartbeat_milliseconds: int = DEFAULT_HEARTBEAT_MS,
) -> PartitionWalk:
    """The partitions of ``stream`` from ``start`` to ``end`` (live when None), parents
    first: see :class:`PartitionWalk`."""
    return PartitionWalk(db, stream, start, end, heartbeat_milliseconds)
