"""Which leases a worker takes or steals in a round (the Kinesis Client Library's rules).

A lease has expired when its ``LeaseCounter`` has not moved for ``lease_timeout`` seconds of
this worker's own clock; comparing counters instead of timestamps keeps clock skew between
machines out of it. Each worker aims at ``ceil(leases / workers)`` leases: it takes free or
expired ones first (the longest expired first), and steals only when none is free, only from
the most loaded worker, and only enough to reach the target.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass

from changestream.client.lease_table import ready_leases
from changestream.store.models import Lease


@dataclass(frozen=True, slots=True)
class Plan:
    """Leases to take (owned by nobody, expired, or ours already) and leases to mark."""

    take: list[Lease]
    steal: list[Lease]


class LeaseTaker:
    """Watches the counters of the leases and plans each round for one worker."""

    def __init__(self, worker_id: str, lease_timeout: float, max_steals_per_round: int) -> None:
        self._me = worker_id
        self._timeout = lease_timeout
        self._max_steals = max_steals_per_round
        #: token -> (counter, monotonic time this worker first saw that counter)
        self._seen: dict[str, tuple[int, float]] = {}

    def _expired_ages(self, leases: list[Lease], now: float) -> dict[str, float]:
        """Owned leases whose counter stood still for the timeout, with how long it stood."""
        seen: dict[str, tuple[int, float]] = {}
        ages = {}
        for lease in leases:
            token = lease.status_value
            counter, since = self._seen.get(token, (lease.lease_counter, now))
            if counter != lease.lease_counter:
                counter, since = lease.lease_counter, now
            seen[token] = (counter, since)
            if lease.lease_owner is not None and now - since >= self._timeout:
                ages[token] = now - since
        self._seen = seen
        return ages

    def plan(self, leases: list[Lease], running: set[str], now: float) -> Plan:
        """The round's plan given every partition lease and the tokens this worker runs."""
        me = self._me
        ages = self._expired_ages(leases, now)
        ready = ready_leases(leases)
        # Ours but not running: handed over to us, or held by an earlier life of this worker.
        take = [r for r in ready if r.lease_owner == me and r.status_value not in running]
        live = [r for r in ready if r.lease_owner not in (None, me) and r.status_value not in ages]
        expired = [r for r in ready if r.lease_owner not in (None, me) and r.status_value in ages]
        expired.sort(key=lambda r: -ages[r.status_value])
        unowned = [r for r in ready if r.lease_owner is None]
        # Workers starting together then mostly try different leases instead of racing.
        random.shuffle(unowned)
        free = unowned + expired
        workers = {me} | {r.lease_owner for r in live} | {r.lease_stealer for r in live}
        workers.discard(None)
        target = math.ceil(len(ready) / len(workers))
        mine = sum(r.lease_owner == me for r in ready) + sum(r.lease_stealer == me for r in live)
        need = target - mine
        if need <= 0:
            return Plan(take, [])
        if free:
            return Plan(take + free[:need], [])
        # A lease being handed over already counts for the worker receiving it.
        loads = Counter(r.lease_stealer or r.lease_owner for r in live)
        loads.pop(me, None)
        if not loads:
            return Plan(take, [])
        victim, load = max(loads.items(), key=lambda item: (item[1], item[0] or ""))
        if load > target:
            count = min(need, load - target, self._max_steals)
        elif load == target and mine < target - 1:
            count = 1
        else:
            count = 0
        candidates = [r for r in live if r.lease_owner == victim and r.lease_stealer is None]
        return Plan(take, candidates[:count])
