"""One consumer group's lease table on a remote database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from changestream.store.models import Lease
from changestream.wire import models
from changestream.wire.records import (
    lease_to_json,
)

if TYPE_CHECKING:
    from changestream.remote._database import RemoteDatabase


class RemoteLeaseTable:
    """One consumer group's lease rows on a remote database (see ``LeaseTableLike``)."""

    def __init__(self, db: RemoteDatabase, stream: str, consumer: str) -> None:
        self._db = db
        self._stream = stream
        self._consumer = consumer

    def _change(self, name: str, lease: Lease) -> Any:
        body = models.LeaseChangeRequest(consumer=self._consumer, lease=lease_to_json(lease))
        return self._db._invoke(name, body, stream=self._stream, idempotent=False)

    def list_leases(self) -> list[Lease]:
        """Every row of this consumer group, in key order."""
        body = models.ConsumerRequest(consumer=self._consumer)
        reply = self._db._invoke("leases_list", body, stream=self._stream)
        return list(reply.leases)

    def get(self, status_type: str, status_value: str) -> Lease | None:
        """The row with this key, or None."""
        body = models.LeaseGetRequest(
            consumer=self._consumer, status_type=status_type, status_value=status_value
        )
        reply = self._db._invoke("leases_get", body, stream=self._stream)
        lease: Lease | None = reply.lease
        return lease

    def insert_if_absent(self, lease: Lease) -> bool:
        """Add ``lease`` unless a row with its key exists; True when this call added it."""
        return bool(self._change("leases_insert_if_absent", lease).inserted)

    def update(self, lease: Lease) -> Lease | None:
        """Write the lease if the row's counter still equals ``lease.lease_counter``."""
        written: Lease | None = self._change("leases_update", lease).lease
        return written

    def delete(self, lease: Lease) -> bool:
        """Remove the row if its counter still equals ``lease.lease_counter``."""
        return bool(self._change("leases_delete", lease).deleted)
