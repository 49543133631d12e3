"""Records read as little as their reader needs: a batch of inserts stored compact (see
:mod:`changestream.streams.mods`) parsed but not built into :class:`DataChangeRecord` and
:class:`Mod` objects.

watch() reads every record of the database, ordered across partitions, and turns each insert
into an event that holds the row anyway: building the record's objects first costs it about
as much again as parsing the record, and keeps more objects alive for the garbage collector
while the merge holds records in its buffers. A :class:`StoredInserts` is one object the
collector does not track, holding what ordering the records and building the events take.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
import orjson

from changestream.streams.mods import COLUMNS_FIELD, VALUES_FIELD
from changestream.streams.records import ChangeRecord, DataChangeRecord


class StoredInserts(msgspec.Struct, frozen=True, gc=False):
    """The INSERT mods of one data change record stored compact: each row holds the values of
    ``key_names`` then of ``new_names``. The other fields are the record's own."""

    commit_timestamp: int
    server_transaction_id: str
    record_sequence: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    number_of_records_in_transaction: int
    session_id: str
    key_names: tuple[str, ...]
    new_names: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    partition_token: str

    mod_type: ClassVar[str] = "INSERT"
    is_data_change: ClassVar[bool] = True
    ends_partition: ClassVar[bool] = False

    @property
    def timestamp(self) -> int:
        """The commit timestamp, in microseconds (every record's moment)."""
        return self.commit_timestamp


#: What a read of stored changes yields.
StoredRecord = ChangeRecord | StoredInserts


def stored_change(
    commit_timestamp: int, payload: bytes, partition_token: str
) -> DataChangeRecord | StoredInserts:
    """A change-log row as :class:`StoredInserts` when it holds inserts stored compact, else
    as the :class:`DataChangeRecord` it holds."""
    data = orjson.loads(payload)
    values = data.get(VALUES_FIELD)
    if values is None or data["mod_type"] != "INSERT":
        return DataChangeRecord.from_dict(commit_timestamp, data, partition_token)
    key_names, new_names, old_names = data[COLUMNS_FIELD]
    if old_names:
        return DataChangeRecord.from_dict(commit_timestamp, data, partition_token)
    return StoredInserts(
        commit_timestamp,
        data["server_transaction_id"],
        data["record_sequence"],
        data["is_last_record_in_transaction_in_partition"],
        data["table_name"],
        data["number_of_records_in_transaction"],
        data.get("session_id", ""),
        tuple(key_names),
        tuple(new_names),
        tuple(map(tuple, values)),
        partition_token,
    )
