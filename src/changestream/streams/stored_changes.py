"""Records read as little as their reader needs: a batch of inserts stored compact (see
:mod:`changestream.streams.mods`) parsed but not built into :class:`DataChangeRecord` and
:class:`Mod` objects.

watch() reads every record of the database, ordered across partitions, and turns each insert
into an event that holds the row anyway: building the record's objects first costs it about
as much again as parsing the record, and keeps more objects alive for the garbage collector
while the merge holds records in its buffers. A :class:`StoredInserts` is one object the
collector does not track, holding what ordering the records and building the events take.
The stored payload is decoded straight into it (msgspec skips the fields it does not hold):
1.0 µs for a one-row record, against 2.4 µs to parse the payload into a dict and copy the
fields over.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from changestream.streams.mods import COLUMNS_FIELD, VALUES_FIELD
from changestream.streams.records import ChangeRecord, DataChangeRecord

_ColumnNames = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


class StoredInserts(msgspec.Struct, frozen=True, gc=False):
    """The INSERT mods of one data change record stored compact: each row holds the values of
    :attr:`key_names` then of :attr:`new_names`. The other fields are the record's own."""

    server_transaction_id: str
    record_sequence: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    number_of_records_in_transaction: int
    mod_type: str
    #: (key, new value, old value) column names, as stored.
    columns: _ColumnNames = msgspec.field(default=((), (), ()), name=COLUMNS_FIELD)
    rows: tuple[tuple[Any, ...], ...] = msgspec.field(default=(), name=VALUES_FIELD)
    session_id: str = ""
    #: Not in the payload: set from the log row when it is read. (Under JSON names no record
    #: has: a record's JSON on the wire holds its commit timestamp as text.)
    commit_timestamp: int = msgspec.field(default=0, name="_commit_timestamp_us")
    partition_token: str = msgspec.field(default="", name="_partition_token")

    is_data_change: ClassVar[bool] = True
    ends_partition: ClassVar[bool] = False

    @property
    def key_names(self) -> tuple[str, ...]:
        """The primary key's columns: the first values of every row."""
        return self.columns[0]

    @property
    def new_names(self) -> tuple[str, ...]:
        """The inserted non-key columns: the rest of every row."""
        return self.columns[1]

    @property
    def timestamp(self) -> int:
        """The commit timestamp, in microseconds (every record's moment)."""
        return self.commit_timestamp


#: What a read of stored changes yields.
StoredRecord = ChangeRecord | StoredInserts

_decode_inserts = msgspec.json.Decoder(StoredInserts).decode
_set = msgspec.structs.force_setattr
#: One copy of each table's column names. Every record decodes its own; events whose
#: documents share one set of key strings are built faster (each string keeps its hash) and
#: looked into faster (a lookup matches a key by identity before comparing text).
_COLUMN_NAMES: dict[_ColumnNames, _ColumnNames] = {}
_MOST_SHAPES = 1024


def stored_change(
    commit_timestamp: int, payload: bytes | memoryview, partition_token: str
) -> DataChangeRecord | StoredInserts:
    """A change-log row as :class:`StoredInserts` when it holds inserts stored compact, else
    as the :class:`DataChangeRecord` it holds."""
    try:
        inserts = _decode_inserts(payload)
    except msgspec.MsgspecError:
        inserts = None  # not a record this shape holds: the record decoder says what it is
    if inserts is None or not inserts.rows or inserts.mod_type != "INSERT" or inserts.columns[2]:
        return DataChangeRecord.from_payload(commit_timestamp, payload, partition_token)
    _set(inserts, "commit_timestamp", commit_timestamp)
    _set(inserts, "partition_token", partition_token)
    columns = _COLUMN_NAMES.get(inserts.columns)
    if columns is None:
        if len(_COLUMN_NAMES) >= _MOST_SHAPES:
            _COLUMN_NAMES.clear()
        columns = _COLUMN_NAMES[inserts.columns] = inserts.columns
    _set(inserts, "columns", columns)
    return inserts
