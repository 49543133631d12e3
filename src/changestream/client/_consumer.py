"""The partition consumer: reads one leased partition and feeds its processor in order.

What is already committed is caught up first, in full batches, with bounded reads made on the
worker's one catch-up thread (one batch at a time per worker) and processed by the consumer
thread. Then a reader thread tails the partition
with the read function into a bounded mailbox; the consumer thread takes whatever has arrived
(up to ``max_records``) as one batch, so a batch goes out as soon as records are there instead
of waiting for a full one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import tenacity

from changestream.client._checkpointer import Checkpointer, LeaseLost
from changestream.client._coordinator import ClientConfig, HeldLease, LeaseCoordinator
from changestream.client._database_clock import DatabaseClock
from changestream.client._processor import (
    InitializationContext,
    ProcessorFactory,
    RecordBatch,
    RecordProcessor,
    ShutdownReason,
)
from changestream.client.lease_table import checkpoint_of
from changestream.errors import DatabaseBusy, DatabaseClosed, FailedPrecondition
from changestream.retry import retrying
from changestream.streams.chunks import close_read, next_chunk
from changestream.streams.positions import Position
from changestream.streams.records import (
    ChangeRecord,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
)
from changestream.streams.roles import StreamClientDatabase

log = logging.getLogger("changestream.client")

_POLL_S = 0.1
_FIRST_BACKOFF_S = 0.1


class _Interrupted(Exception):
    """The lease was lost or the worker is stopping: stop retrying."""


@dataclass(frozen=True, slots=True)
class _ReadFailed:
    error: BaseException


_Item = ChangeRecord | _ReadFailed


def _replayed(record: ChangeRecord, start: Position) -> bool:
    """A record at or before ``start``: delivered before the read resumed there."""
    return (
        isinstance(record, DataChangeRecord)
        and record.commit_timestamp <= start.timestamp
        and Position.of(record) <= start
    )


class _Mailbox:
    """A bounded hand-off from a reader thread to a consumer thread.

    Cheaper per record than ``queue.Queue`` (which takes a lock and notifies on every put):
    a deque, with a wake-up only when it turns non-empty or gains room.
    """

    def __init__(self, capacity: int) -> None:
        self._items: deque[_Item] = deque()
        self._capacity = capacity
        self._ready = threading.Event()
        self._room = threading.Event()
        #: Set when the consumer wants no more items; the reader then stops.
        self.closed = threading.Event()

    def put(self, item: _Item) -> bool:
        """Append ``item``, waiting for room; False once the mailbox is closed."""
        while len(self._items) >= self._capacity and not self.closed.is_set():
            self._room.clear()
            if len(self._items) >= self._capacity:
                self._room.wait(_POLL_S)
        if self.closed.is_set():
            return False
        self._items.append(item)
        if not self._ready.is_set():
            self._ready.set()
        return True

    def take(self, limit: int, timeout: float) -> list[_Item]:
        """Up to ``limit`` items, waiting up to ``timeout`` seconds for the first."""
        self._ready.clear()
        if not self._items:
            self._ready.wait(timeout)
        items = self._items
        taken = [items.popleft() for _ in range(min(limit, len(items)))]
        self._room.set()
        return taken


class PartitionConsumer:
    """Processes one held lease from its checkpoint until the partition ends, the lease is
    lost, or the worker stops or hands the partition over."""

    def __init__(
        self,
        db: StreamClientDatabase,
        coordinator: LeaseCoordinator,
        held: HeldLease,
        config: ClientConfig,
        factory: ProcessorFactory,
        stopping: threading.Event,
        executor: Executor,
        on_fatal: Callable[[BaseException], None],
        catch_up: Executor,
        clock: DatabaseClock,
    ) -> None:
        self._db = db
        self._coordinator = coordinator
        self._held = held
        self._config = config
        self._factory = factory
        self._stopping = stopping
        self._executor = executor
        self._on_fatal = on_fatal
        self._catch_up_thread = catch_up
        self._clock = clock
        self._checkpointer = Checkpointer(
            coordinator, held, config.checkpoint_every_records, config.checkpoint_every_seconds
        )
        self._mailbox: _Mailbox | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def run(self) -> None:
        """Process the partition until it ends, the lease is lost, or the worker stops or
        hands it over. An unexpected error stops the whole worker, which then releases the
        lease without a new checkpoint."""
        try:
            self._run()
        except DatabaseClosed as exc:
            self._on_fatal(exc)  # the worker says it once, not each of its partitions
        except Exception as exc:
            log.exception("processing partition %s failed", self._held.token)
            self._on_fatal(exc)
        finally:
            if self._mailbox is not None:
                self._mailbox.closed.set()  # stops the reader
            self._coordinator.drop(self._held)

    def _interruption(self) -> ShutdownReason | None:
        if self._held.lost.is_set():
            return ShutdownReason.LEASE_LOST
        if self._stopping.is_set() or self._held.stealer is not None:
            return ShutdownReason.REQUESTED
        return None

    def _sleep(self, seconds: float) -> bool:
        """Wait, waking early on an interruption; True when interrupted."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            if self._interruption() is not None:
                return True
            time.sleep(min(remaining, _POLL_S))
        return self._interruption() is not None

    def _retry(self, what: str, call: Callable[[], None]) -> bool:
        """Call until it succeeds, backing off (with jitter); False when interrupted first."""

        def attempt() -> None:
            if not self._wait_until_valid():
                raise _Interrupted
            call()

        def sleep(seconds: float) -> None:
            if self._sleep(seconds):
                raise _Interrupted

        def report(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            log.error(
                "%s failed on partition %s (attempt %d); retrying in %.1f s",
                what,
                self._held.token,
                state.attempt_number,
                state.upcoming_sleep,
                exc_info=error,
            )

        try:
            retrying(
                lambda exc: not isinstance(exc, LeaseLost | _Interrupted),
                first=_FIRST_BACKOFF_S,
                most=self._config.max_retry_backoff,
                sleep=sleep,
                before_sleep=report,
            )(attempt)
        except (LeaseLost, _Interrupted):
            return False
        return True

    def _wait_until_valid(self) -> bool:
        """Hold delivery while renewals lag, so no other worker can have taken the lease
        while this one still delivers; False when interrupted."""
        while not self._held.valid(self._config.lease_timeout):
            if self._interruption() is not None:
                return False
            time.sleep(0.05)
        return self._interruption() is None

    def _run(self) -> None:
        held = self._held
        processor = self._factory()
        context = InitializationContext(
            stream=self._config.stream,
            consumer=self._config.consumer,
            worker_id=self._config.worker_id,
            partition_token=held.token,
            parent_tokens=held.row.parent_shard_ids,
            start=held.processed,
            checkpoint=checkpoint_of(held.row),
        )
        if not self._retry("initialize", lambda: processor.initialize(context)):
            self._end(processor, self._interruption())
            return
        stop: ChildPartitionsRecord | _ReadFailed | None = self._catch_up(processor)
        if stop is None and self._interruption() is None:
            mailbox = self._start_reader(held.processed)
            while stop is None and self._interruption() is None:
                stop = self._process(processor, mailbox.take(self._config.max_records, _POLL_S))
                if isinstance(stop, _ReadFailed):
                    mailbox.closed.set()
                    if self._may_read_again(stop.error):
                        mailbox = self._start_reader(held.processed)
                    stop = None
        if isinstance(stop, ChildPartitionsRecord):
            self._end_partition(processor, stop)
            return
        self._end(processor, self._interruption())

    def _process(
        self, processor: RecordProcessor, items: Sequence[_Item]
    ) -> ChildPartitionsRecord | _ReadFailed | None:
        """Deliver the data records of ``items`` in batches and apply their heartbeats.

        Returns the item that ends this read (the child partitions, or a failed read), if
        any; returns None early when a delivery was interrupted.
        """
        batch = RecordBatch()
        # A trailing None flushes the last batch of data records.
        for item in [*items, None]:
            if isinstance(item, DataChangeRecord):
                batch.append(item)
                continue
            if batch and not self._deliver(processor, batch):
                return None
            batch = RecordBatch()
            if isinstance(item, HeartbeatRecord):
                self._advance(Position.through(item.timestamp))
            elif isinstance(item, ChildPartitionsRecord | _ReadFailed):
                return item
        return None

    def _may_read_again(self, error: BaseException) -> bool:
        """After a failed read: True to read again (the database was busy), False when the
        error stops the worker or the consumer was interrupted while waiting."""
        if not isinstance(error, DatabaseBusy):
            if not isinstance(error, DatabaseClosed):  # which the worker reports once
                log.error("reading partition %s failed: %s", self._held.token, error)
            self._on_fatal(error)
            return False
        log.warning("reading partition %s: %s; retrying", self._held.token, error)
        return not self._sleep(1.0)

    # -- reading --------------------------------------------------------------------------

    def _catch_up(self, processor: RecordProcessor) -> ChildPartitionsRecord | None:
        """Deliver what is already committed, in full batches, before tailing live.

        Bounded reads up to now (by the database's clock), each batch read on the worker's
        catch-up thread (see :meth:`_read_committed`) and processed in this one. Ends
        when a read finds less than a batch or idles until a heartbeat (the end is ahead of
        the database's clock, by less than the offset's error: the partition is at its
        head), on an interruption or a fatal read error; returns the child partitions when
        the partition ended.
        """
        while self._interruption() is None:
            start = self._held.processed
            end = max(self._clock.now(), start.timestamp)
            read = 0
            with contextlib.closing(self._read_committed(start, end)) as chunks:
                stop: ChildPartitionsRecord | _ReadFailed | None = None
                for items in chunks:
                    read += len(items)
                    idle = bool(items) and isinstance(items[-1], HeartbeatRecord)
                    stop = self._process(processor, items)
                    # Let go of the batch before waiting for the next: records kept alive
                    # by threads waiting their turn make every garbage collection slower.
                    del items
                    if stop is not None or idle or self._interruption() is not None:
                        break
                else:
                    # The read function delivered everything committed up to ``end``.
                    self._advance(Position.through(end))
                    if read < self._config.max_records:
                        return None
                    continue
            if isinstance(stop, _ReadFailed):
                if not self._may_read_again(stop.error):
                    return None
                continue
            return stop
        return None

    def _read_committed(self, start: Position, end: int) -> Generator[Sequence[_Item]]:
        """The partition's records after ``start`` and committed up to ``end``, a batch at a
        time; a failure comes as a last ``_ReadFailed``.

        The read runs on the worker's one catch-up thread, whatever partition it is of: a
        worker catching up on many partitions reads one batch at a time, because threads
        decoding records at once only slow each other down (the GIL), and on one thread
        (so one SQLite connection) the batches of 16 partitions taken in turns cost what
        one partition's do, where 16 threads taking turns cost a third more CPU a record.
        """
        catch_up = self._catch_up_thread
        records = None
        try:
            records = catch_up.submit(
                self._db.read_change_stream,
                self._config.stream,
                start.timestamp,
                end,
                self._held.token,
                self._config.heartbeat_milliseconds,
            ).result()
            iterator = iter(records)
            while True:
                chunk = catch_up.submit(next_chunk, iterator, self._config.max_records).result()
                if not chunk:
                    return
                if chunk[0].timestamp <= start.timestamp:
                    chunk = [record for record in chunk if not _replayed(record, start)]
                yield chunk
                del chunk
        except Exception as exc:
            yield [_ReadFailed(exc)]
        finally:
            if records is not None:
                catch_up.submit(close_read, records).result()

    def _start_reader(self, start: Position) -> _Mailbox:
        """Start tailing the partition after ``start``; records arrive in the mailbox."""
        self._mailbox = mailbox = _Mailbox(max(100, 2 * self._config.max_records))
        self._executor.submit(self._read, start, mailbox)
        return mailbox

    def _read(self, start: Position, mailbox: _Mailbox) -> None:
        records = None
        try:
            records = self._db.read_change_stream(
                self._config.stream,
                start.timestamp,
                None,
                self._held.token,
                self._config.heartbeat_milliseconds,
            )
            resuming = True
            for record in records:
                if resuming:
                    if _replayed(record, start):
                        continue
                    resuming = record.timestamp <= start.timestamp
                if not mailbox.put(record) or record.ends_partition:
                    return
            # A live read ends only with child partitions; anything else would lose the rest.
            raise FailedPrecondition(
                f"the read of partition {self._held.token!r} ended without a child "
                "partitions record"
            )
        except Exception as exc:
            mailbox.put(_ReadFailed(exc))
        finally:
            close_read(records)

    # -- processing -----------------------------------------------------------------------

    def _deliver(self, processor: RecordProcessor, batch: RecordBatch) -> bool:
        """Process one batch, retrying until it succeeds; False when interrupted first."""
        held = self._held
        end = Position.of(batch[-1])
        lag_us = self._clock.now() - batch[-1].commit_timestamp
        batch.millis_behind_latest = max(0, lag_us // 1000)
        with held.lock:
            held.permitted = end
        if not self._retry(
            "process_records", lambda: processor.process_records(batch, self._checkpointer)
        ):
            return False
        with held.lock:
            held.processed = held.last_data = end
        self._note_processed(len(batch))
        return True

    def _advance(self, position: Position) -> None:
        """A heartbeat: everything up to ``position`` was delivered and processed."""
        held = self._held
        with held.lock:
            if position <= held.processed:
                return
            held.processed = position
            held.permitted = max(held.permitted, position)
        self._note_processed(0)

    def _note_processed(self, records: int) -> None:
        # On a lost lease the loop sees it next and shuts the processor down.
        with contextlib.suppress(LeaseLost):
            self._checkpointer.note_processed(records)

    # -- endings --------------------------------------------------------------------------

    def _shutdown(self, processor: RecordProcessor, reason: ShutdownReason) -> bool:
        try:
            processor.shutdown(reason, self._checkpointer)
            return True
        except Exception:
            log.exception("shutdown(%s) failed on partition %s", reason.value, self._held.token)
            return False

    def _end(self, processor: RecordProcessor, reason: ShutdownReason | None) -> None:
        """Stop processing: on a lost lease write nothing; otherwise checkpoint what was
        processed (unless the processor's shutdown failed) and give the lease up."""
        if reason is None or reason is ShutdownReason.LEASE_LOST:
            self._shutdown(processor, ShutdownReason.LEASE_LOST)
            return
        flushed = self._shutdown(processor, ShutdownReason.REQUESTED)
        try:
            self._coordinator.release(self._held, self._held.processed if flushed else None)
        except DatabaseBusy as exc:
            log.warning(
                "could not release partition %s (it expires instead): %s", self._held.token, exc
            )

    def _end_partition(self, processor: RecordProcessor, record: ChildPartitionsRecord) -> None:
        """Every record was processed: shut the processor down, give the children leases,
        then mark this partition finished, in that order, so no child is ever missed."""
        if not self._retry(
            "shutdown(partition_end)",
            lambda: processor.shutdown(ShutdownReason.PARTITION_END, self._checkpointer),
        ):
            self._end(processor, self._interruption())
            return
        self._coordinator.insert_children(record.start_timestamp, record.child_partitions)
        self._coordinator.finish(self._held)
