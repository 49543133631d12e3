"""Change events: records of the internal ``OLD_AND_NEW_ROW`` stream as MongoDB change events.

One event per mod, in the record's mod order. Documents (``fullDocument``, ``documentKey``,
...) hold column values in the change-record JSON encoding, as the records do, so an event is
plain JSON apart from ``clusterTime`` (:class:`ClusterTime`) and ``wallTime`` (an aware UTC
datetime). ``updateDescription`` compares the full old and new rows: a column that became NULL
is in ``removedFields``, any other column whose value changed is in ``updatedFields``.
``txnNumber`` is the server transaction id; ``lsid`` is ``{"id": <transaction tag>}``, the
closest thing the engine has to a client session.
"""

from __future__ import annotations

from typing import Any

from changestream.clock import to_datetime
from changestream.errors import InvalidArgument, NotFound
from changestream.streams.interface import Database
from changestream.streams.records import DataChangeRecord, Mod
from changestream.types import ColumnType, from_sqlite, json_to_sqlite, to_json_value
from changestream.watch.cluster_time import ClusterTime
from changestream.watch.tokens import ResumeToken, TokenKind

Document = dict[str, Any]
Event = tuple[ResumeToken, Document]

_OPERATIONS = {
    "INSERT": "insert",
    "UPDATE": "update",
    "REPLACE": "replace",
    "DELETE": "delete",
    "DROP_TABLE": "drop",
    "RENAME_TABLE": "rename",
}
#: The mod types of records about a table rather than its rows.
TABLE_EVENTS = frozenset({"DROP_TABLE", "RENAME_TABLE"})


class EventBuilder:
    """Turns records into events for one cursor's ``full_document`` settings."""

    def __init__(
        self, db: Database, database: str, full_document: str, full_document_before_change: str
    ) -> None:
        self._db = db
        self._database = database
        self._full_document = full_document
        self._before = full_document_before_change != "off"

    def events(self, record: DataChangeRecord, key: tuple[int, int, int]) -> list[Event]:
        """The record's events with their resume tokens, in order (``key``: its place in
        commit order, see :func:`changestream.watch.merge.record_key`)."""
        commit_ts, transaction, sequence = key
        operation = _OPERATIONS[record.mod_type]
        cluster_time = ClusterTime.from_us(commit_ts)
        wall_time = to_datetime(commit_ts)
        events: list[Event] = []
        for index, mod in enumerate(record.mods):
            token = ResumeToken(commit_ts, transaction, sequence, index, 0, TokenKind.EVENT)
            event: Document = {
                "_id": token.document(),
                "operationType": operation,
                "clusterTime": cluster_time,
                "wallTime": wall_time,
                "ns": {"db": self._database, "coll": record.table_name},
            }
            if record.mod_type in TABLE_EVENTS:
                if operation == "rename":
                    event["to"] = {"db": self._database, "coll": mod.new_values["table_name"]}
            else:
                self._describe_row(record, mod, operation, event)
                event["txnNumber"] = transaction
                event["lsid"] = {"id": record.transaction_tag}
            events.append((token, event))
        return events

    def invalidate(self, key: tuple[int, int, int]) -> Event:
        """The invalidate event that follows a drop or rename of the watched table."""
        commit_ts, transaction, sequence = key
        token = ResumeToken(commit_ts, transaction, sequence, 0, 1, TokenKind.INVALIDATE)
        event: Document = {
            "_id": token.document(),
            "operationType": "invalidate",
            "clusterTime": ClusterTime.from_us(commit_ts),
            "wallTime": to_datetime(commit_ts),
        }
        return token, event

    def _describe_row(
        self, record: DataChangeRecord, mod: Mod, operation: str, event: Document
    ) -> None:
        event["documentKey"] = dict(mod.keys)
        if operation == "update":
            new, old = mod.new_values, mod.old_values
            event["updateDescription"] = {
                "updatedFields": {
                    name: value
                    for name, value in new.items()
                    if value is not None and (name not in old or old[name] != value)
                },
                "removedFields": [
                    name
                    for name, value in new.items()
                    if value is None and old.get(name) is not None
                ],
            }
            if self._full_document == "updateLookup":
                event["fullDocument"] = self._lookup(record, mod)
            elif self._full_document != "default":
                event["fullDocument"] = {**mod.keys, **mod.new_values}
        elif operation in ("insert", "replace"):
            event["fullDocument"] = {**mod.keys, **mod.new_values}
        if self._before and operation != "insert":
            event["fullDocumentBeforeChange"] = {**mod.keys, **mod.old_values}

    def _lookup(self, record: DataChangeRecord, mod: Mod) -> Document | None:
        """The row as it is now (it may be newer than the change), or None if it is gone."""
        columns = sorted(record.column_types, key=lambda c: c.ordinal_position)
        types = {c.name: ColumnType.from_json(c.type) for c in columns}
        key_names = [c.name for c in columns if c.is_primary_key]
        names = key_names + [c.name for c in columns if not c.is_primary_key]
        key = [from_sqlite(types[n], json_to_sqlite(types[n], mod.keys[n])) for n in key_names]
        try:
            rows = self._db.read(record.table_name, [key], names)
        except (NotFound, InvalidArgument):
            return None  # the table was dropped, renamed or recreated since the change
        if not rows:
            return None
        return {
            name: to_json_value(types[name], value)
            for name, value in zip(names, rows[0], strict=True)
        }
