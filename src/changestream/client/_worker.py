"""The Stream Client worker: one per process, sharing a stream's partitions with its group."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from changestream.client._consumer import PartitionConsumer
from changestream.client._coordinator import ClientConfig, HeldLease, LeaseCoordinator
from changestream.client._database_clock import DatabaseClock
from changestream.client._processor import ProcessorFactory
from changestream.clock import parse_ts
from changestream.errors import (
    ChangeStreamError,
    DatabaseBusy,
    FailedPrecondition,
    InvalidArgument,
)
from changestream.store.models import MAX_CONSUMER_LENGTH
from changestream.streams.roles import StreamClientDatabase

log = logging.getLogger("changestream.client")

#: Threads are reused across partitions (two per held lease: reader and processor), which
#: also bounds the SQLite connections a long-running worker opens.
_MAX_THREADS = 1024


def _positive(name: str, value: Any, integer: bool = False, optional: bool = False) -> Any:
    if optional and value is None:
        return None
    kinds = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        kind = "integer" if integer else "number"
        none = " or None" if optional else ""
        raise InvalidArgument(f"{name} must be a positive {kind}{none}, got {value!r}")
    return value


class StreamClient:
    """A worker consuming change stream ``stream`` together with the other workers of
    consumer group ``consumer`` (on this or other processes, on the same database).

    Each partition is leased by one worker at a time and its records go, in order, to a
    processor made by ``processor_factory``; a partition's children start only after all
    of its parents are finished. Leases whose owner stops renewing move to other workers
    after ``lease_timeout`` seconds, and leases are rebalanced as workers come and go.

    ``worker_id`` names this worker (unique within the group; a restarted worker with the
    same id resumes its leases at once). ``start_timestamp`` is where a new group starts
    reading (default: now); a group with state resumes from its checkpoints. Batches hold
    up to ``max_records`` records. ``checkpoint_every_records`` / ``checkpoint_every_seconds``
    make the client checkpoint on its own. A processor that raises gets the same batch
    again after a backoff growing to ``max_retry_backoff`` seconds. ``max_steals_per_round``
    bounds how many leases a worker asks for per round when balancing.
    """

    def __init__(
        self,
        db: StreamClientDatabase,
        stream: str,
        worker_id: str,
        processor_factory: ProcessorFactory,
        lease_timeout: float = 10.0,
        *,
        consumer: str = "default",
        start_timestamp: Any = None,
        max_records: int = 1000,
        heartbeat_milliseconds: int = 1000,
        checkpoint_every_records: int | None = None,
        checkpoint_every_seconds: float | None = None,
        max_steals_per_round: int = 2,
        max_retry_backoff: float = 30.0,
    ) -> None:
        if (
            not isinstance(worker_id, str)
            or not 0 < len(worker_id) <= MAX_CONSUMER_LENGTH
            or not worker_id.isprintable()
        ):
            raise InvalidArgument(
                f"worker_id must be 1 to {MAX_CONSUMER_LENGTH} printable characters, "
                f"got {worker_id!r}"
            )
        if not callable(processor_factory):
            raise InvalidArgument(
                "processor_factory must be a callable returning a RecordProcessor, "
                f"got {processor_factory!r}"
            )
        if (
            isinstance(max_steals_per_round, bool)
            or not isinstance(max_steals_per_round, int)
            or max_steals_per_round < 0
        ):
            raise InvalidArgument(
                f"max_steals_per_round must be an integer >= 0, got {max_steals_per_round!r}"
            )
        self._config = ClientConfig(
            stream=stream,
            consumer=consumer,
            worker_id=worker_id,
            lease_timeout=float(_positive("lease_timeout", lease_timeout)),
            start_timestamp=(
                None if start_timestamp is None else parse_ts(start_timestamp, "start_timestamp")
            ),
            max_records=_positive("max_records", max_records, integer=True),
            heartbeat_milliseconds=_positive(
                "heartbeat_milliseconds", heartbeat_milliseconds, integer=True
            ),
            checkpoint_every_records=_positive(
                "checkpoint_every_records", checkpoint_every_records, integer=True, optional=True
            ),
            checkpoint_every_seconds=_positive(
                "checkpoint_every_seconds", checkpoint_every_seconds, optional=True
            ),
            max_steals_per_round=max_steals_per_round,
            max_retry_backoff=float(_positive("max_retry_backoff", max_retry_backoff)),
        )
        self._db = db
        self._clock = DatabaseClock(db)
        self._factory = processor_factory
        # Raises NotFound for an unknown stream, InvalidArgument for a bad consumer name.
        table = db.leases(stream, consumer)
        self._coordinator = LeaseCoordinator(db, table, self._config, self._start_consumer)
        self._thread_prefix = f"changestream-{worker_id}"
        self._executor = ThreadPoolExecutor(_MAX_THREADS, self._thread_prefix)
        #: Where partitions catching up read, one batch at a time (see
        #: PartitionConsumer._read_committed).
        self._catch_up = ThreadPoolExecutor(1, f"{self._thread_prefix}-catch-up")
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self._error: BaseException | None = None
        self._taker: threading.Thread | None = None

    @property
    def worker_id(self) -> str:
        return self._config.worker_id

    @property
    def partitions(self) -> list[str]:
        """Tokens of the partitions this worker holds leases on now."""
        return sorted(held.token for held in self._coordinator.held())

    @property
    def error(self) -> BaseException | None:
        """The error that stopped this worker, if one did."""
        return self._error

    def start(self) -> None:
        """Start working in background threads; returns at once."""
        with self._lock:
            if self._started:
                raise FailedPrecondition(
                    f"worker {self.worker_id!r} was already started; a StreamClient runs once"
                )
            self._started = True
        name = self._thread_prefix
        self._taker = threading.Thread(target=self._take_loop, name=f"{name}-taker", daemon=True)
        self._taker.start()
        threading.Thread(target=self._renew_loop, name=f"{name}-renewer", daemon=True).start()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop cleanly: each processor finishes its batch and is shut down, what it processed
        is checkpointed, and the leases are released (to a waiting worker when there is one).
        Returns False when ``timeout`` seconds passed first. Called from a processor (one
        of this worker's own threads) it only requests the stop and returns False."""
        self._stopping.set()
        with self._lock:
            if not self._started:
                self._done.set()
        if self._is_own_thread():
            return self._done.is_set()
        return self._done.wait(timeout)

    def run(self) -> None:
        """Work until :meth:`stop` is called from another thread or Ctrl-C; then stop cleanly.
        Raises the error that stopped the worker, if one did."""
        self.start()
        try:
            while not self._done.wait(0.5):
                pass
        except KeyboardInterrupt:
            self.stop()
        if self._error is not None:
            raise self._error

    # -- internals ------------------------------------------------------------------------

    def _is_own_thread(self) -> bool:
        name, prefix = threading.current_thread().name, self._thread_prefix
        # Pool threads are named <prefix>_<n>, the coordinator's <prefix>-taker / -renewer.
        return name.startswith(prefix + "_") or name in (f"{prefix}-taker", f"{prefix}-renewer")

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = error
                log.error("worker %s stops: %s", self.worker_id, error)
        self._stopping.set()

    def _start_consumer(self, held: HeldLease) -> None:
        consumer = PartitionConsumer(
            self._db,
            self._coordinator,
            held,
            self._config,
            self._factory,
            self._stopping,
            self._executor,
            self._fail,
            self._catch_up,
            self._clock,
        )
        self._executor.submit(consumer.run)

    def _take_loop(self) -> None:
        while not self._stopping.is_set():
            pause = self._config.take_interval
            try:
                # Before the first leases are taken, so their first batches have it.
                self._clock.sync()
                pause = self._coordinator.take_round()
            except DatabaseBusy as exc:
                log.warning("worker %s could not look for leases: %s", self.worker_id, exc)
            except Exception as exc:
                self._fail(exc)
                return
            self._stopping.wait(pause)

    def _renew_loop(self) -> None:
        """Renew until stopping and every consumer has given its lease up, then clean up."""
        interval = self._config.renew_interval
        next_renewal = time.monotonic()
        leaving = False
        while True:
            if time.monotonic() >= next_renewal:
                next_renewal = time.monotonic() + interval
                try:
                    self._coordinator.renew_all()
                except DatabaseBusy as exc:
                    log.warning("worker %s could not renew its leases: %s", self.worker_id, exc)
                except Exception as exc:
                    self._fail(exc)
            if self._stopping.is_set():
                if not leaving:
                    leaving = True
                    try:
                        self._coordinator.leave()
                    except ChangeStreamError as exc:
                        log.warning("worker %s could not sign off: %s", self.worker_id, exc)
                if not self._coordinator.held():
                    break
                time.sleep(0.05)
            else:
                self._stopping.wait(max(0.0, next_renewal - time.monotonic()))
        if self._taker is not None:
            self._taker.join()
        try:
            self._coordinator.release_leftovers()
        except ChangeStreamError as exc:
            log.warning("worker %s could not tidy its leases up: %s", self.worker_id, exc)
        self._executor.shutdown(wait=True)
        self._catch_up.shutdown(wait=True)
        self._done.set()
