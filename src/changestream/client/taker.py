"""Which leases a worker takes or steals in a round (the Kinesis Client Library's rules).

A lease has expired when its ``LeaseCounter`` has not moved for ``lease_timeout`` seconds of
this worker's own clock; comparing counters instead of timestamps keeps clock skew between
machines out of it. Each worker aims at ``ceil(leases / workers)`` leases: it takes free or
expired ones first (the longest expired first), and steals only when none is free, only from
the most loaded worker, and only enough to reach the target.

Workers are counted from the group's ``Worker`` rows, which each worker writes when it starts
and bumps with every renewal, as well as from the owners of live leases. Counting only owners,
a worker that starts first sees itself alone and takes every lease, and the others then steal
them back a few per round: the slow rebalancing KCL's users complain about. With the rows, a
worker that starts alongside others sees them and takes only its share. A worker above its
share (one that started first, or after a worker joined) hands its surplus to the workers
below theirs in its next round; they steal from a registered worker only when it is still
above its share two take intervals later.
"""

from __future__ import annotations

import math
import random
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from changestream.client.lease_table import WORKER, ready_leases
from changestream.store.models import Lease

#: The share of the lease timeout within which a worker's row must have moved for it to be
#: handed leases: renewals move it every third of the timeout.
_FRESH = 2 / 3


@dataclass(frozen=True, slots=True)
class Plan:
    """Leases to take (owned by nobody, expired, or ours already), leases to mark, the
    ``Worker`` rows of workers gone silent (to delete), and leases of ours to hand over, each
    with the worker to hand it to."""

    take: list[Lease]
    steal: list[Lease]
    gone: list[Lease] = field(default_factory=list)
    give: list[tuple[Lease, str]] = field(default_factory=list)
    #: Below its share while another worker is above it: leases should come to this worker
    #: (handed over by their owner, or stolen).
    expecting: bool = False


class LeaseTaker:
    """Watches the counters of the leases and plans each round for one worker."""

    def __init__(self, worker_id: str, lease_timeout: float, max_steals_per_round: int) -> None:
        self._me = worker_id
        self._timeout = lease_timeout
        self._max_steals = max_steals_per_round
        #: (status type, value) -> (counter, monotonic time this worker first saw that counter)
        self._seen: dict[tuple[str, str], tuple[int, float]] = {}
        #: Workers above their share -> since when (monotonic seconds), seen in a row.
        self._over: dict[str, float] = {}

    def _expired_ages(self, rows: list[Lease], now: float) -> dict[tuple[str, str], float]:
        """Owned rows whose counter stood still for the timeout, with how long it stood."""
        seen: dict[tuple[str, str], tuple[int, float]] = {}
        ages = {}
        for row in rows:
            key = (row.status_type, row.status_value)
            counter, since = self._seen.get(key, (row.lease_counter, now))
            if counter != row.lease_counter:
                counter, since = row.lease_counter, now
            seen[key] = (counter, since)
            if row.lease_owner is not None and now - since >= self._timeout:
                ages[key] = now - since
        self._seen = seen
        return ages

    def wrote(self, row: Lease) -> None:
        """This worker moved ``row``'s counter itself (a request to steal it): that says
        nothing of its owner being alive, so the owner's silence keeps counting."""
        key = (row.status_type, row.status_value)
        if key in self._seen:
            self._seen[key] = (row.lease_counter, self._seen[key][1])

    def plan(
        self,
        leases: list[Lease],
        running: set[str],
        now: float,
        workers: Sequence[Lease] = (),
    ) -> Plan:
        """The round's plan given every partition lease, the tokens this worker runs and the
        group's ``Worker`` rows."""
        me = self._me
        expired_ages = self._expired_ages([*leases, *workers], now)
        ages = {value: age for (kind, value), age in expired_ages.items() if kind != WORKER}
        gone = [
            w for w in workers if w.status_value != me and (WORKER, w.status_value) in expired_ages
        ]
        ready = ready_leases(leases)
        # Ours but not running: handed over to us, or held by an earlier life of this worker.
        take = [r for r in ready if r.lease_owner == me and r.status_value not in running]
        live = [r for r in ready if r.lease_owner not in (None, me) and r.status_value not in ages]
        expired = [r for r in ready if r.lease_owner not in (None, me) and r.status_value in ages]
        expired.sort(key=lambda r: -ages[r.status_value])
        registered = {w.status_value for w in workers if w not in gone}
        alive = {me} | registered
        alive |= {r.lease_owner for r in live if r.lease_owner} | {
            r.lease_stealer for r in live if r.lease_stealer
        }
        free = _by_preference([r for r in ready if r.lease_owner is None], me, alive) + expired
        target = math.ceil(len(ready) / len(alive))
        mine = sum(r.lease_owner == me for r in ready) + sum(r.lease_stealer == me for r in live)
        need = target - mine
        if need < 0:
            # A registered worker gets leases only while its row moves: one that died lately
            # still counts as a worker for a while, and a lease handed to it would wait out
            # a lease timeout.
            stale = {
                w for w in registered if now - self._seen[(WORKER, w)][1] > _FRESH * self._timeout
            }
            return Plan(take, [], gone, self._gifts(ready, running, alive - stale, target))
        if need == 0:
            return Plan(take, [], gone)
        if free:
            return Plan(take + free[:need], [], gone)
        # A lease being handed over already counts for the worker receiving it.
        loads = Counter(r.lease_stealer or r.lease_owner for r in live)
        loads.pop(me, None)
        if not loads:
            return Plan(take, [], gone)
        victim, load = max(loads.items(), key=lambda item: (item[1], item[0] or ""))
        self._over = {
            w: self._over.get(w, now) for w, n in loads.items() if w is not None and n > target
        }
        if load > target:
            # A registered worker hands its surplus over itself in its next round (see
            # ``_gifts``): stealing too would move more than the surplus, so steal only from
            # one still above its share once that round surely came (its rounds and this
            # worker's are not in step: two take intervals).
            patient = victim in registered and now - self._over[victim] < 2 * self._timeout / 3
            count = 0 if patient else min(need, load - target, self._max_steals)
        elif load == target and mine < target - 1:
            count = 1
        else:
            count = 0
        candidates = [r for r in live if r.lease_owner == victim and r.lease_stealer is None]
        return Plan(take, candidates[:count], gone, expecting=load > target)

    def _gifts(
        self, ready: list[Lease], running: set[str], alive: set[str], target: int
    ) -> list[tuple[Lease, str]]:
        """Leases this worker runs beyond its share, each for a live worker below its share.
        They move at their next batch, all in this round, instead of a few steals a round."""
        me = self._me
        # A lease being handed over already counts for the worker receiving it.
        loads = Counter(r.lease_stealer or r.lease_owner for r in ready if r.lease_owner)
        spare = sorted(
            (
                r
                for r in ready
                if r.lease_owner == me and r.lease_stealer is None and r.status_value in running
            ),
            key=lambda r: r.status_value,
        )
        surplus = loads[me] - target
        gifts: list[tuple[Lease, str]] = []
        for worker in sorted(alive - {me}):
            for _ in range(target - loads[worker]):
                if surplus <= 0 or not spare:
                    return gifts
                gifts.append((spare.pop(), worker))
                surplus -= 1
        return gifts


def _by_preference(leases: list[Lease], me: str, workers: set[str]) -> list[Lease]:
    """Free leases in the order this worker tries them: first those it ranks above every
    other worker (rendezvous hashing: workers that see the same workers rank alike, so
    workers starting together try different leases instead of racing for the same ones),
    then the rest in random order."""

    def rank(worker: str, lease: Lease) -> int:
        return zlib.crc32(f"{worker}\0{lease.status_value}".encode())

    others = workers - {me}
    preferred: list[Lease] = []
    rest: list[Lease] = []
    for lease in leases:
        mine = rank(me, lease)
        (preferred if all(mine > rank(w, lease) for w in others) else rest).append(lease)
    random.shuffle(rest)
    return preferred + rest
