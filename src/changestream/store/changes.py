"""What a committed transaction changed, as handed to change capture in the same transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from changestream.ddl.schema import Table
from changestream.store.catalog import Catalog
from changestream.store.written_rows import RowCodec


@dataclass(slots=True)
class RowChange:
    """The net change of one row in one transaction: its image before and after, and which
    columns the transaction wrote. ``before``/``after`` are full rows (None: row absent)."""

    table: Table
    key: tuple[Any, ...]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    written: set[str] = field(default_factory=set)
    split_id: int = 0
    #: The row existed and a ``replace`` mutation rewrote it whole (an UPDATE to user streams).
    replaced: bool = False


@dataclass(slots=True)
class InsertBatch:
    """Rows one insert mutation added to keys no other write in the transaction touched, kept
    as written so capture can turn them into mods without per-row bookkeeping."""

    codec: RowCodec
    rows: list[tuple[Any, ...]]
    #: The split of every row when one split holds the whole table, else None.
    split_id: int | None = None
    #: The split of each row, when the table spans several splits.
    split_ids: list[int] | None = None


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """What one DDL statement did to a table, for the engine's own streams (watch()).

    ``kind`` is the record's mod type: ``CREATE_TABLE``, ``DROP_TABLE``, ``RENAME_TABLE``
    (``new_name`` set), ``ALTER_TABLE`` (``detail``: ``action`` and ``column``),
    ``CREATE_INDEX`` or ``DROP_INDEX`` (``detail``: ``index``, its catalog definition).
    ``split_id`` is the split holding the start of the table's key range at the DDL's commit.
    """

    table: str
    new_name: str | None
    split_id: int
    kind: str = "DROP_TABLE"
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CommitContext:
    """Everything capture needs to know about one committing transaction."""

    commit_ts: int
    server_transaction_id: str
    transaction_tag: str
    is_system_transaction: bool
    changes: list[RowChange | InsertBatch]
    catalog: Catalog
    schema_changes: tuple[SchemaChange, ...] = ()
    #: The committing database handle's session (see ``Store.session_id``).
    session_id: str = ""
    #: Opened with ``exclude_txn_from_change_streams``: streams that allow it skip it.
    excluded_from_streams: bool = False
    #: The deletes of a row deletion policy: streams with ``exclude_ttl_deletes`` skip them.
    row_deletion: bool = False


#: (stream_id, split_id, commit_ts, record_sequence, payload, mods) — one row of ``_cs_log``.
LogRow = tuple[int, int, int, int, bytes, int]

#: Turns a transaction's row changes into change-log rows, inside the committing transaction.
CaptureFn = Callable[[CommitContext], list[LogRow]]
