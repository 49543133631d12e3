"""The lease table ``_cs_leases``: consumer-group state kept in the database itself.

Rows are keyed by change stream, consumer (application) name and the seed's ``StatusType`` /
``StatusValue``, so any number of consumer groups share one stream without seeing each
other. Every change to a row is conditional on its ``LeaseCounter`` and bumps it: the
counter is the optimistic lock, so two writers can never both succeed from the same view.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from changestream.store.models import MAX_CONSUMER_LENGTH as MAX_CONSUMER_LENGTH
from changestream.store.models import Lease as Lease
from changestream.store.models import check_consumer as check_consumer

if TYPE_CHECKING:
    from changestream.store.database import Store


_COLUMNS = (
    "StatusType, StatusValue, Checkpoint, LeaseCounter, LeaseOwner, LeaseStealer,"
    " ParentShardIds, StartTimestamp"
)


def _row_to_lease(row: tuple[Any, ...]) -> Lease:
    status_type, status_value, checkpoint, counter, owner, stealer, parents, start = row
    return Lease(
        status_type=status_type,
        status_value=status_value,
        checkpoint=checkpoint,
        lease_counter=counter,
        lease_owner=owner,
        lease_stealer=stealer,
        parent_shard_ids=tuple(orjson.loads(parents)),
        start_timestamp=start,
    )


class LeaseTable:
    """The lease rows of one consumer group on one change stream (see :class:`Lease`)."""

    def __init__(self, store: Store, stream_id: int, consumer: str) -> None:
        self._store = store
        self._key = (stream_id, check_consumer(consumer))

    def list_leases(self) -> list[Lease]:
        """Every row of this consumer group, in key order."""
        with self._store.bookkeeping() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM _cs_leases WHERE StreamId = ? AND Consumer = ?"
                " ORDER BY StatusType, StatusValue",
                self._key,
            ).fetchall()
        return [_row_to_lease(r) for r in rows]

    def get(self, status_type: str, status_value: str) -> Lease | None:
        """The row with this key, or None."""
        with self._store.bookkeeping() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM _cs_leases WHERE StreamId = ? AND Consumer = ?"
                " AND StatusType = ? AND StatusValue = ?",
                (*self._key, status_type, status_value),
            ).fetchone()
        return None if row is None else _row_to_lease(row)

    def insert_if_absent(self, lease: Lease) -> bool:
        """Add ``lease`` unless a row with its key exists; True when this call added it."""
        with self._store.locked_bookkeeping() as conn:
            cursor = conn.execute(
                f"INSERT OR IGNORE INTO _cs_leases (StreamId, Consumer, {_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *self._key,
                    lease.status_type,
                    lease.status_value,
                    lease.checkpoint,
                    lease.lease_counter,
                    lease.lease_owner,
                    lease.lease_stealer,
                    orjson.dumps(list(lease.parent_shard_ids)).decode(),
                    lease.start_timestamp,
                ),
            )
            return cursor.rowcount == 1

    def update(self, lease: Lease) -> Lease | None:
        """Write ``checkpoint``, ``lease_owner`` and ``lease_stealer`` of ``lease`` if the row's
        counter still equals ``lease.lease_counter``, bumping it by one.

        Returns the row as written (with the new counter), or None when another writer
        changed the row first or it is gone; the key, parents and start never change.
        """
        with self._store.locked_bookkeeping() as conn:
            cursor = conn.execute(
                "UPDATE _cs_leases SET Checkpoint = ?, LeaseOwner = ?, LeaseStealer = ?,"
                " LeaseCounter = LeaseCounter + 1"
                " WHERE StreamId = ? AND Consumer = ? AND StatusType = ? AND StatusValue = ?"
                " AND LeaseCounter = ?",
                (
                    lease.checkpoint,
                    lease.lease_owner,
                    lease.lease_stealer,
                    *self._key,
                    lease.status_type,
                    lease.status_value,
                    lease.lease_counter,
                ),
            )
            if cursor.rowcount != 1:
                return None
        return replace(lease, lease_counter=lease.lease_counter + 1)

    def delete(self, lease: Lease) -> bool:
        """Remove the row if its counter still equals ``lease.lease_counter``."""
        with self._store.locked_bookkeeping() as conn:
            cursor = conn.execute(
                "DELETE FROM _cs_leases WHERE StreamId = ? AND Consumer = ? AND StatusType = ?"
                " AND StatusValue = ? AND LeaseCounter = ?",
                (*self._key, lease.status_type, lease.status_value, lease.lease_counter),
            )
            return cursor.rowcount == 1


def lease_consumers(conn: sqlite3.Connection, stream_id: int) -> list[str]:
    """The consumer groups with lease rows on a stream, sorted."""
    rows = conn.execute(
        "SELECT DISTINCT Consumer FROM _cs_leases WHERE StreamId = ? ORDER BY Consumer",
        (stream_id,),
    )
    return [r[0] for r in rows]
