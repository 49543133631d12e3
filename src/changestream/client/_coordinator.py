"""The lease coordinator: discovery, taking and stealing, renewing, and every lease write.

Every write is a conditional update on ``LeaseCounter``. When one fails, the row is read
back: if another worker owns it now the lease is lost; if it is still ours, someone marked
it (a stealer) and the write is retried on the fresh row, keeping the mark.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from changestream.client.lease_table import (
    DISCOVERED,
    END,
    PARTITION_LEASE,
    START,
    STREAM_STATUS,
    WORKER,
    collectable,
    partition_leases,
    start_position,
    worker_rows,
)
from changestream.client.taker import LeaseTaker, Plan
from changestream.store.models import Lease
from changestream.streams.positions import Position
from changestream.streams.records import ChildPartition
from changestream.streams.roles import LeaseTableLike, StreamClientDatabase

log = logging.getLogger("changestream.client")

_START_KEY = (STREAM_STATUS, START)
#: How often a worker looks for leases while its group forms, or while leases should come to
#: it (being handed over, or held by a worker above its share).
_SETTLING_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """A worker's settings (validated by :class:`changestream.client.StreamClient`)."""

    stream: str
    consumer: str
    worker_id: str
    lease_timeout: float
    start_timestamp: int | None
    max_records: int
    heartbeat_milliseconds: int
    checkpoint_every_records: int | None
    checkpoint_every_seconds: float | None
    max_steals_per_round: int
    max_retry_backoff: float

    @property
    def renew_interval(self) -> float:
        """Renew three times per timeout, so one slow renewal does not lose the lease."""
        return self.lease_timeout / 3

    @property
    def take_interval(self) -> float:
        """Look for work as often as leases are renewed: a dead worker's leases move
        within about ``lease_timeout`` plus two rounds."""
        return self.lease_timeout / 3


class HeldLease:
    """A lease this worker holds, shared by its partition consumer and the renewer.

    Progress fields are positions: ``permitted`` is the end of the latest delivered batch,
    ``processed`` what processors finished (heartbeats move it too), ``last_data`` the last
    data record processed, and ``checkpointed`` what the lease row records.
    """

    def __init__(self, row: Lease, renewed_at: float) -> None:
        self.token = row.status_value
        self.row = row
        self.lock = threading.Lock()
        self.renewed_at = renewed_at
        self.lost = threading.Event()
        #: False once the lease was released or finished; it is no longer renewed.
        self.active = True
        start = start_position(row)
        self.checkpointed = start
        self.processed = start
        self.permitted = start
        self.last_data = start

    @property
    def stealer(self) -> str | None:
        return self.row.lease_stealer

    def valid(self, lease_timeout: float) -> bool:
        """Renewed recently enough that no other worker can have taken it yet."""
        return not self.lost.is_set() and time.monotonic() - self.renewed_at < lease_timeout


class LeaseCoordinator:
    """Keeps one worker's leases: discovers partitions, takes, steals, renews, hands over."""

    def __init__(
        self,
        db: StreamClientDatabase,
        table: LeaseTableLike,
        config: ClientConfig,
        on_take: Callable[[HeldLease], None],
    ) -> None:
        self._db = db
        self._table = table
        self._config = config
        self._me = config.worker_id
        self._on_take = on_take
        self._taker = LeaseTaker(
            config.worker_id, config.lease_timeout, config.max_steals_per_round
        )
        self._held: dict[str, HeldLease] = {}
        self._lock = threading.Lock()
        #: This worker's ``Worker`` row as last written (None until registered).
        self._worker: Lease | None = None
        self._worker_lock = threading.Lock()
        self._leaving = False
        #: The group's workers at the last round, and until when it is forming.
        self._workers_seen: frozenset[str] | None = None
        self._settling_until = 0.0

    def held(self) -> list[HeldLease]:
        with self._lock:
            return list(self._held.values())

    def drop(self, held: HeldLease) -> None:
        """Forget a lease whose consumer has ended."""
        with self._lock:
            if self._held.get(held.token) is held:
                del self._held[held.token]

    # -- discovery, taking and stealing ---------------------------------------------------

    def take_round(self) -> float:
        """One round: discover the initial partitions if needed, collect finished leases,
        then take and steal per :class:`LeaseTaker`. Returns the seconds until the next
        round (see :meth:`_pause`)."""
        if self._worker is None and not self._leaving:
            self.beat()
        rows = self._table.list_leases()
        status = next((r for r in rows if (r.status_type, r.status_value) == _START_KEY), None)
        if status is None or status.checkpoint != DISCOVERED:
            self._discover(status)
            rows = self._table.list_leases()
        leases = partition_leases(rows)
        for lease in collectable(leases):
            self._table.delete(lease)
        with self._lock:
            running = set(self._held)
        workers = worker_rows(rows)
        plan = self._taker.plan(leases, running, time.monotonic(), workers)
        for row in plan.gone:
            if self._table.delete(row):
                log.info(
                    "%s removed worker %s, silent for the lease timeout", self._me, row.status_value
                )
        raced = False
        for lease in plan.take:
            started = time.monotonic()
            taken = self._table.update(replace(lease, lease_owner=self._me, lease_stealer=None))
            if taken is None:
                raced = True
                continue
            previous = lease.lease_owner
            if previous is None:
                log.info("%s took free partition %s", self._me, taken.status_value)
            elif previous == self._me:
                log.info("%s took back its partition %s", self._me, taken.status_value)
            else:
                log.info("%s took partition %s from %s", self._me, taken.status_value, previous)
            held = HeldLease(taken, started)
            with self._lock:
                self._held[held.token] = held
            self._on_take(held)
        for lease, receiver in plan.give:
            self._give(lease.status_value, receiver)
        for lease in plan.steal:
            marked = self._table.update(replace(lease, lease_stealer=self._me))
            if marked is not None:
                self._taker.wrote(marked)
                log.info(
                    "%s asks %s for partition %s", self._me, lease.lease_owner, lease.status_value
                )
        return self._pause(plan, leases, workers, raced)

    def _pause(self, plan: Plan, leases: list[Lease], workers: list[Lease], raced: bool) -> float:
        """Seconds to the next round: short while the group forms (its workers changed
        within the lease timeout: leases are taken in races and handed around), while this
        worker lost a race, or while leases should come to it; else the take interval. A
        worker alone in its group has nobody to trade with: it keeps the interval."""
        now = time.monotonic()
        ids = frozenset(w.status_value for w in workers)
        if ids != self._workers_seen:
            self._workers_seen = ids
            if ids - {self._me}:
                self._settling_until = now + self._config.lease_timeout
        incoming = plan.expecting or any(r.lease_stealer == self._me for r in leases)
        if raced or incoming or now < self._settling_until:
            return min(_SETTLING_POLL_S, self._config.take_interval)
        return self._config.take_interval

    def _give(self, token: str, receiver: str) -> None:
        """Mark a lease this worker runs for ``receiver``: its consumer hands it over after
        its current batch, as it does for a worker that asked to steal it."""
        with self._lock:
            held = self._held.get(token)
        if held is None:
            return
        with held.lock:
            if not held.active or held.stealer is not None:
                return
            if self._change(
                held, lambda row: replace(row, lease_stealer=row.lease_stealer or receiver)
            ):
                log.info("%s offers %s partition %s", self._me, receiver, token)

    def leave(self) -> None:
        """The worker is stopping: remove its ``Worker`` row, so the others stop counting it
        (and handing it leases) while it hands its own leases over."""
        with self._worker_lock:
            row, self._worker = self._worker, None
            self._leaving = True
        if row is not None:
            current = self._table.get(WORKER, self._me)
            if current is not None:
                self._table.delete(current)

    def beat(self) -> None:
        """Write this worker's ``Worker`` row, bumping its counter: the other workers of the
        group count it while the counter moves. Inserted again when it is gone (removed by
        another worker after a long stall)."""
        with self._worker_lock:
            if self._leaving:
                return
            row = self._worker
            if row is not None:
                self._worker = self._table.update(row)
                if self._worker is not None:
                    return
            current = self._table.get(WORKER, self._me)
            if current is None:
                self._table.insert_if_absent(Lease(WORKER, self._me, lease_owner=self._me))
                current = self._table.get(WORKER, self._me)
            # Another process with this id, or one before a restart: the row is this one's now.
            self._worker = None if current is None else self._table.update(current)

    def _discover(self, status: Lease | None) -> None:
        """Give the partitions live at the group's start a lease each, once per group.

        The start is fixed by the first worker of the group, so every worker asks the
        initial query the same question and the leases it inserts agree.
        """
        if status is None:
            start = self._config.start_timestamp
            if start is None:
                start = self._db.current_timestamp()  # the database's now, not this machine's
            self._table.insert_if_absent(Lease(STREAM_STATUS, START, start_timestamp=start))
            status = self._table.get(STREAM_STATUS, START)
            assert status is not None, "the group's start row vanished right after its insert"
        records = self._db.read_change_stream(
            self._config.stream,
            status.start_timestamp,
            None,
            None,
            self._config.heartbeat_milliseconds,
        )
        for record in records:
            if record.ends_partition:
                self.insert_children(record.timestamp, record.children)
        self._table.update(replace(status, checkpoint=DISCOVERED))

    def insert_children(self, start: int, children: tuple[ChildPartition, ...]) -> None:
        """Give partitions a lease each unless they have one (a merge child is reported by
        every parent)."""
        for child in children:
            self._table.insert_if_absent(
                Lease(
                    PARTITION_LEASE,
                    child.token,
                    parent_shard_ids=child.parent_partition_tokens,
                    start_timestamp=start,
                )
            )

    def release_leftovers(self) -> None:
        """When stopping, after every consumer ended: give up the leases this worker owns
        but does not run (handed to it, or left by a consumer that failed), and withdraw its
        requests to steal."""
        with self._lock:
            running = set(self._held)
        for row in partition_leases(self._table.list_leases()):
            if row.lease_owner == self._me and row.status_value not in running:
                self._table.update(replace(row, lease_owner=row.lease_stealer, lease_stealer=None))
            elif row.lease_stealer == self._me:
                self._table.update(replace(row, lease_stealer=None))

    # -- writes on held leases ------------------------------------------------------------

    def _change(self, held: HeldLease, edit: Callable[[Lease], Lease]) -> bool:
        """Write ``edit(row)`` conditionally; the caller holds ``held.lock``."""
        row = held.row
        while not held.lost.is_set():
            started = time.monotonic()
            written = self._table.update(edit(row))
            if written is not None:
                held.row = written
                held.renewed_at = started
                return True
            current = self._table.get(PARTITION_LEASE, held.token)
            if current is None or current.lease_owner != self._me:
                owner = None if current is None else current.lease_owner
                log.warning("%s lost partition %s to %s", self._me, held.token, owner)
                held.lost.set()
                return False
            row = held.row = current
        return False

    def renew_all(self) -> None:
        """Renew every held lease and this worker's ``Worker`` row; an idle partition's
        heartbeat progress rides along when every processed record is already checkpointed
        (so lag stays visible)."""
        for held in self.held():
            with held.lock:
                if not held.active:
                    continue
                if held.last_data <= held.checkpointed < held.processed:
                    self._checkpoint(held, held.processed)
                else:
                    self._change(held, lambda row: row)
        self.beat()

    def checkpoint(self, held: HeldLease, position: Position) -> bool:
        """Record ``position`` in the lease; False when the lease was lost."""
        with held.lock:
            return self._checkpoint(held, position)

    def _checkpoint(self, held: HeldLease, position: Position) -> bool:
        if not self._change(held, lambda row: replace(row, checkpoint=position.to_text())):
            return False
        held.checkpointed = position
        return True

    def release(self, held: HeldLease, position: Position | None) -> None:
        """Give the lease up in one write: to the worker waiting for it, else to nobody,
        recording ``position`` first when it is ahead of the checkpoint."""

        def edit(row: Lease) -> Lease:
            checkpoint = row.checkpoint
            if position is not None and position > held.checkpointed:
                checkpoint = position.to_text()
            return replace(
                row, lease_owner=row.lease_stealer, lease_stealer=None, checkpoint=checkpoint
            )

        with held.lock:
            held.active = False
            if self._change(held, edit):
                receiver = held.row.lease_owner
                log.info(
                    "%s %s partition %s",
                    self._me,
                    "released" if receiver is None else f"handed {receiver}",
                    held.token,
                )

    def finish(self, held: HeldLease) -> None:
        """Mark the partition read to its end; its children (already inserted) may start."""
        with held.lock:
            held.active = False
            self._change(
                held, lambda row: replace(row, checkpoint=END, lease_owner=None, lease_stealer=None)
            )
