"""What the Stream Client keeps in a consumer group's lease rows, and how to read them back.

Three kinds of rows (``StatusType``): one ``Stream`` row per group recording where the group
started reading and whether the partitions live then have leases yet, one ``PartitionLease``
row per partition, keyed by its token (``StatusValue``), and one ``Worker`` row per running
worker, keyed by its id and owned by it, whose counter its renewals bump (so the others can
count the workers of the group). A lease's ``Checkpoint`` is empty before anything was
checkpointed, a :class:`Position` in text form while the partition is read, and ``END`` once
it was read to its end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from changestream.store.models import Lease
from changestream.streams.lineage import parents_finished
from changestream.streams.positions import Position

PARTITION_LEASE = "PartitionLease"
STREAM_STATUS = "Stream"
WORKER = "Worker"
#: ``StatusValue`` of the group's ``Stream`` row.
START = "start"
#: ``Checkpoint`` of the ``Stream`` row once the initial partitions have leases.
DISCOVERED = "DISCOVERED"
#: ``Checkpoint`` of a partition read to its end (its children have leases).
END = "END"


def start_position(lease: Lease) -> Position:
    """Where processing of a partition resumes: after its checkpoint, else at its start."""
    if lease.checkpoint in ("", END):
        return Position.before(lease.start_timestamp)
    return Position.from_text(lease.checkpoint)


def checkpoint_of(lease: Lease) -> Position | None:
    """The partition's last checkpoint, or None before the first (and after the end)."""
    if lease.checkpoint in ("", END):
        return None
    return Position.from_text(lease.checkpoint)


def partition_leases(rows: Iterable[Lease]) -> list[Lease]:
    return [r for r in rows if r.status_type == PARTITION_LEASE]


def worker_rows(rows: Iterable[Lease]) -> list[Lease]:
    return [r for r in rows if r.status_type == WORKER]


def ready_leases(leases: list[Lease]) -> list[Lease]:
    """Unfinished leases whose parents are all finished.

    A parent without a row is not finished: a merge child can be reported by one parent
    while the other parent's row does not exist yet (its own parent is still being read).
    Finished rows are only deleted once no unfinished lease names them.
    """
    finished = {r.status_value for r in leases if r.checkpoint == END}
    return [
        r for r in leases if r.checkpoint != END and parents_finished(r.parent_shard_ids, finished)
    ]


def collectable(leases: list[Lease]) -> list[Lease]:
    """Finished leases no unfinished lease waits for: safe to delete.

    A partition's children get rows before it is marked finished, so once it is finished
    every lease that can name it as a parent already exists.
    """
    waited_for = {p for r in leases if r.checkpoint != END for p in r.parent_shard_ids}
    return [r for r in leases if r.checkpoint == END and r.status_value not in waited_for]


@dataclass(frozen=True, slots=True)
class LeaseStatus:
    """A lease as the ``changestream leases`` view shows it."""

    lease: Lease
    #: ``finished``, ``waiting`` (for parents), ``free``, ``owned`` or ``handing over``.
    state: str
    checkpoint: Position | None
    #: Seconds from the checkpoint (or the partition's start) to ``now``; None when finished.
    lag_seconds: float | None


def describe_leases(rows: Iterable[Lease], now_us: int) -> list[LeaseStatus]:
    """The partition leases of a group, oldest partition first, with state and lag at
    ``now_us``."""
    leases = sorted(partition_leases(rows), key=lambda r: (r.start_timestamp, r.status_value))
    ready = {r.status_value for r in ready_leases(leases)}
    described = []
    for lease in leases:
        if lease.checkpoint == END:
            state = "finished"
        elif lease.status_value not in ready:
            state = "waiting"
        elif lease.lease_owner is None:
            state = "free"
        elif lease.lease_stealer is not None:
            state = "handing over"
        else:
            state = "owned"
        lag = None
        if lease.checkpoint != END:
            lag = max(0.0, (now_us - start_position(lease).timestamp) / 1e6)
        described.append(LeaseStatus(lease, state, checkpoint_of(lease), lag))
    return described
