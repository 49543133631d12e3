"""Change events: records of the internal ``OLD_AND_NEW_ROW`` stream as MongoDB change events.

One event per mod, in the record's mod order. Documents (``fullDocument``, ``documentKey``,
...) hold column values in the change-record JSON encoding, as the records do, so an event is
plain JSON apart from ``clusterTime`` (:class:`ClusterTime`) and ``wallTime`` (an aware UTC
datetime).

``updateDescription`` compares the full old and new rows as MongoDB describes a change it
computed: ``updatedFields`` by dotted path (a changed key inside a JSON document is
``"J.a.b"``, a changed array element ``"A.2"``), ``removedFields`` for keys gone from JSON
documents, and ``truncatedArrays`` (always present, MongoDB 4.7+) for arrays that became shorter,
which are then not in ``updatedFields``. A NULL column is a field holding ``null`` (so setting
one to NULL is an ``updatedFields`` entry); with ``null_as_missing`` it is an absent field
instead, everywhere: left out of documents and listed in ``removedFields``.

``txnNumber`` (the server transaction id) and ``lsid`` (``{"id": <session>}``, the committing
database handle's session) appear, as in MongoDB, only on events of transactions that changed
more than one row. With ``show_expanded_events`` come, as in MongoDB, ``create`` (a table
created), ``modify`` (a column added, dropped or altered), ``createIndexes`` and
``dropIndexes`` events.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from changestream.clock import to_datetime
from changestream.codecs import from_json_value, to_json_value
from changestream.errors import InvalidArgument, NotFound
from changestream.streams.mods import Mod
from changestream.streams.records import DataChangeRecord
from changestream.streams.roles import TableStore
from changestream.streams.stored_changes import StoredInserts
from changestream.types import ColumnType
from changestream.watch._cluster_time import ClusterTime
from changestream.watch.options import WatchOptions
from changestream.watch.tokens import ResumeToken, TokenFields, TokenKind, event_token

Document = dict[str, Any]
Event = tuple[TokenFields, Document]

_OPERATIONS = {
    "INSERT": "insert",
    "UPDATE": "update",
    "REPLACE": "replace",
    "DELETE": "delete",
    "CREATE_TABLE": "create",
    "DROP_TABLE": "drop",
    "RENAME_TABLE": "rename",
    "ALTER_TABLE": "modify",
    "CREATE_INDEX": "createIndexes",
    "DROP_INDEX": "dropIndexes",
}
#: The mod types of records that end a table's history (a table watch is invalidated).
INVALIDATING = frozenset({"DROP_TABLE", "RENAME_TABLE"})
#: Shown only with ``show_expanded_events``, as in MongoDB.
_EXPANDED = frozenset({"CREATE_TABLE", "ALTER_TABLE", "CREATE_INDEX", "DROP_INDEX"})
#: The mod types of records about a table rather than its rows.
TABLE_EVENTS = INVALIDATING | _EXPANDED


class _DroppedColumns:
    """Columns dropped from tables while a cursor watched them. In MongoDB a field leaves each
    document by an update of that document; here the first update event of each row after a
    DROP COLUMN lists the column in ``removedFields`` (as seen by this cursor: one resumed
    after the drop did not see it)."""

    def __init__(self) -> None:
        #: table -> dropped column -> keys of the rows whose update has listed it.
        self._tables: dict[str, dict[str, set[tuple[Any, ...]]]] = {}

    def note(self, record: DataChangeRecord) -> None:
        if record.mod_type in INVALIDATING:
            self._tables.pop(record.table_name, None)
        if record.mod_type != "ALTER_TABLE":
            return
        columns = self._tables.setdefault(record.table_name, {})
        for mod in record.mods:
            action, column = mod.new_values.get("action"), str(mod.new_values.get("column"))
            if action == "DROP COLUMN":
                columns[column] = set()
            elif action == "ADD COLUMN":
                columns.pop(column, None)

    def removed(self, table: str, keys: Mapping[str, Any]) -> list[str]:
        """The dropped columns an update of the row ``keys`` has not yet listed."""
        columns = self._tables.get(table)
        if not columns:
            return []
        key = tuple(sorted(keys.items()))
        fresh = [column for column, listed in columns.items() if key not in listed]
        for column in fresh:
            columns[column].add(key)
        return fresh


_DOCUMENT_MAKERS: dict[tuple[str, ...], Callable[[Sequence[Any]], Document]] = {}
_MOST_MAKERS = 1024


def document_maker(names: tuple[str, ...]) -> Callable[[Sequence[Any]], Document]:
    """A function making the document ``{names[i]: row[i]}`` of a row of ``len(names)``
    values: a dict display compiled for these names (a third of the time of
    ``dict(zip(names, row))``; every event of an insert holds one)."""
    maker = _DOCUMENT_MAKERS.get(names)
    if maker is None:
        if len(_DOCUMENT_MAKERS) >= _MOST_MAKERS:
            _DOCUMENT_MAKERS.clear()
        # repr() of a str is a str literal, whatever the column's name holds.
        items = ", ".join(f"{name!r}: row[{i}]" for i, name in enumerate(names))
        maker = _DOCUMENT_MAKERS[names] = eval(f"lambda row: {{{items}}}")
    return maker


class EventBuilder:
    """Turns records into events for one cursor's options."""

    def __init__(self, db: TableStore, database: str, options: WatchOptions) -> None:
        self._db = db
        self._database = database
        self._full_document = options.full_document
        self._before = options.full_document_before_change != "off"
        self._expanded = options.show_expanded_events
        self._null_as_missing = options.null_as_missing
        self._dropped = _DroppedColumns()
        self._times: tuple[int, ClusterTime, dt.datetime] | None = None
        #: The column names of the last stored inserts and the function making their rows'
        #: documents (the records of one table share one names object, see stored_changes).
        self._shape: object = None
        self._make_document = document_maker(())

    def events(
        self, record: DataChangeRecord | StoredInserts, key: tuple[int, int, int]
    ) -> list[Event]:
        """The record's events with their resume tokens, in order (``key``: its place in
        commit order, see :func:`changestream.watch.merge.record_key`)."""
        if isinstance(record, StoredInserts):
            return self._inserts(record, key)
        self._dropped.note(record)
        if record.mod_type in _EXPANDED and not self._expanded:
            return []
        commit_ts, transaction, sequence = key
        operation = _OPERATIONS[record.mod_type]
        cluster_time, wall_time = self._moment(commit_ts)
        in_transaction = record.number_of_records_in_transaction > 1 or len(record.mods) > 1
        events: list[Event] = []
        for index, mod in enumerate(record.mods):
            token, token_document = event_token(commit_ts, transaction, sequence, index)
            event: Document = {
                "_id": token_document,
                "operationType": operation,
                "clusterTime": cluster_time,
                "wallTime": wall_time,
                "ns": {"db": self._database, "coll": record.table_name},
            }
            if operation == "rename":
                event["to"] = {"db": self._database, "coll": mod.new_values["table_name"]}
            elif operation == "create":
                event["nsType"] = "collection"
                event["operationDescription"] = _table_description(record)
            elif operation == "modify":
                change = {k: mod.new_values[k] for k in ("action", "column")}
                event["operationDescription"] = {**_table_description(record), **change}
            elif operation in ("createIndexes", "dropIndexes"):
                index = (mod.new_values or mod.old_values)["index"]
                event["operationDescription"] = {"indexes": [_index_description(index)]}
            elif record.mod_type not in TABLE_EVENTS:
                self._describe_row(record, mod, operation, event)
                if in_transaction:
                    _in_transaction(event, transaction, record.session_id)
            events.append((token, event))
        return events

    def _inserts(self, record: StoredInserts, key: tuple[int, int, int]) -> list[Event]:
        """The insert events of inserts stored compact: the events of the record they are
        (see :meth:`_describe_row`), built straight from its rows."""
        commit_ts, transaction, sequence = key
        cluster_time, wall_time = self._moment(commit_ts)
        key_names, new_names, _ = record.columns
        if record.columns is not self._shape:
            self._shape = record.columns
            self._make_document = document_maker(key_names + new_names)
        make_document = self._make_document
        # A row starts with its keys; most tables have one.
        single_key = key_names[0] if len(key_names) == 1 else None
        database, table = self._database, record.table_name
        session = record.session_id
        in_transaction = record.number_of_records_in_transaction > 1 or len(record.rows) > 1
        events: list[Event] = []
        for index, row in enumerate(record.rows):
            token, token_document = event_token(commit_ts, transaction, sequence, index)
            document = make_document(row)
            event: Document = {
                "_id": token_document,
                "operationType": "insert",
                "clusterTime": cluster_time,
                "wallTime": wall_time,
                "ns": {"db": database, "coll": table},
                "documentKey": (
                    {single_key: row[0]}
                    if single_key is not None
                    else dict(zip(key_names, row, strict=False))
                ),
                "fullDocument": self._document(document) if self._null_as_missing else document,
            }
            if in_transaction:
                _in_transaction(event, transaction, session)
            events.append((token, event))
        return events

    def _moment(self, commit_ts: int) -> tuple[ClusterTime, dt.datetime]:
        """``clusterTime`` and ``wallTime`` of a commit (the records of a transaction come
        one after another and share them)."""
        if self._times is None or self._times[0] != commit_ts:
            self._times = (commit_ts, ClusterTime.from_us(commit_ts), to_datetime(commit_ts))
        return self._times[1], self._times[2]

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
            description = update_description(mod.old_values, mod.new_values, self._null_as_missing)
            description["removedFields"] += self._dropped.removed(record.table_name, mod.keys)
            event["updateDescription"] = description
            if self._full_document == "updateLookup":
                event["fullDocument"] = self._document(self._lookup(record, mod))
            elif self._full_document != "default":
                event["fullDocument"] = self._document({**mod.keys, **mod.new_values})
        elif operation in ("insert", "replace"):
            event["fullDocument"] = self._document({**mod.keys, **mod.new_values})
        if self._before and operation != "insert":
            event["fullDocumentBeforeChange"] = self._document({**mod.keys, **mod.old_values})

    def _document(self, row: Document | None) -> Document | None:
        if row is None or not self._null_as_missing:
            return row
        return {name: value for name, value in row.items() if value is not None}

    def _lookup(self, record: DataChangeRecord, mod: Mod) -> Document | None:
        """The row as it is now (it may be newer than the change), or None if it is gone."""
        columns = sorted(record.column_types, key=lambda c: c.ordinal_position)
        types = {c.name: ColumnType.from_json(c.type) for c in columns}
        key_names = [c.name for c in columns if c.is_primary_key]
        names = key_names + [c.name for c in columns if not c.is_primary_key]
        key = [from_json_value(types[n], mod.keys[n]) for n in key_names]
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


def _in_transaction(event: Document, transaction: int, session_id: str) -> None:
    """``txnNumber`` and ``lsid``: on the events of transactions that changed several rows."""
    event["txnNumber"] = transaction
    if session_id:
        event["lsid"] = {"id": session_id}


def _table_description(record: DataChangeRecord) -> Document:
    """A created table's shape, as ``operationDescription`` of its ``create`` event."""
    columns = sorted(record.column_types, key=lambda c: c.ordinal_position)
    return {
        "columns": [{"name": c.name, "type": c.type} for c in columns],
        "primaryKey": [c.name for c in columns if c.is_primary_key],
    }


_ABSENT = object()


def update_description(
    old: Mapping[str, Any], new: Mapping[str, Any], null_as_missing: bool = False
) -> Document:
    """``updateDescription`` of a row whose non-key columns went from ``old`` to ``new``."""
    updated: Document = {}
    removed: list[str] = []
    truncated: list[Document] = []
    for name, value in new.items():
        before = old.get(name, _ABSENT)
        if null_as_missing:
            if value is None:
                if before is not None and before is not _ABSENT:
                    removed.append(name)
                continue
            if before is None:
                before = _ABSENT
        if before is _ABSENT:
            updated[name] = value
        else:
            _delta(name, before, value, updated, removed, truncated)
    return {"updatedFields": updated, "removedFields": removed, "truncatedArrays": truncated}


def _delta(
    path: str,
    old: Any,
    new: Any,
    updated: Document,
    removed: list[str],
    truncated: list[Document],
) -> None:
    """Describe ``old`` → ``new`` at ``path``: documents and arrays key by key, element by
    element; anything else (or a change of kind) as a new value."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key, value in new.items():
            if key in old:
                _delta(f"{path}.{key}", old[key], value, updated, removed, truncated)
            else:
                updated[f"{path}.{key}"] = value
        removed.extend(f"{path}.{key}" for key in old if key not in new)
    elif isinstance(old, list) and isinstance(new, list):
        if len(new) < len(old):
            truncated.append({"field": path, "newSize": len(new)})
        for index, value in enumerate(new):
            if index < len(old):
                _delta(f"{path}.{index}", old[index], value, updated, removed, truncated)
            else:
                updated[f"{path}.{index}"] = value
    elif type(old) is not type(new) or old != new:
        updated[path] = new


def _index_description(index: Mapping[str, Any]) -> Document:
    """An index as MongoDB describes one: ``key`` maps each column to 1 or -1 (descending)."""
    return {
        "name": index["name"],
        "key": {name: -1 if descending else 1 for name, descending in index["columns"]},
        "unique": index["unique"],
        "nullFiltered": index["null_filtered"],
        "storing": index["storing"],
    }
