"""Schema objects: tables, columns, change streams, and the DDL statements that create them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from changestream.codecs import from_json_value, to_json_value
from changestream.types import ColumnType

VALUE_CAPTURE_TYPES = ("OLD_AND_NEW_VALUES", "NEW_VALUES", "NEW_ROW", "NEW_ROW_AND_OLD_VALUES")
#: The full new row and the full old row of every change, for the engine's own streams (watch()
#: needs whole pre- and post-images). Not in VALUE_CAPTURE_TYPES, so user DDL cannot select it.
SYSTEM_VALUE_CAPTURE_TYPE = "OLD_AND_NEW_ROW"
DEFAULT_VALUE_CAPTURE_TYPE = "OLD_AND_NEW_VALUES"
DEFAULT_RETENTION_SECONDS = 24 * 3600
MIN_RETENTION_SECONDS = 3600
MAX_RETENTION_SECONDS = 30 * 24 * 3600
#: The change stream options that are booleans (Spanner's names), all false by default.
BOOLEAN_STREAM_OPTIONS = (
    "exclude_insert",
    "exclude_update",
    "exclude_delete",
    "allow_txn_exclusion",
    "exclude_ttl_deletes",
)


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table; ``ordinal`` is its 1-based position in the schema."""

    name: str
    type: ColumnType
    ordinal: int
    not_null: bool = False
    allow_commit_timestamp: bool = False
    #: The value a new row gets when a write leaves the column out (``DEFAULT (literal)``),
    #: normalized to the column's Python form.
    default: Any = None
    #: A function a new row's value comes from instead (``DEFAULT (CURRENT_TIMESTAMP())``,
    #: see :mod:`changestream.ddl.defaults`); None for a constant default.
    default_function: str | None = None
    #: The commit timestamp of the ``ALTER TABLE ... ADD COLUMN`` that added the column (None
    #: for a column the table was created with). A column dropped and added again under the
    #: same name is another column: what was recorded before its addition is not its value.
    added_at: int | None = None

    def to_catalog(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "type": self.type.to_catalog(),
            "ordinal": self.ordinal,
            "not_null": self.not_null,
            "allow_commit_timestamp": self.allow_commit_timestamp,
        }
        if self.default is not None:
            out["default"] = to_json_value(self.type, self.default)
        if self.default_function is not None:
            out["default_function"] = self.default_function
        if self.added_at is not None:
            out["added_at"] = self.added_at
        return out

    @staticmethod
    def from_catalog(data: dict[str, Any]) -> Column:
        return Column(
            name=data["name"],
            type=ColumnType.from_json(data["type"]),
            ordinal=data["ordinal"],
            not_null=data["not_null"],
            allow_commit_timestamp=data["allow_commit_timestamp"],
            default=from_json_value(ColumnType.from_json(data["type"]), data.get("default")),
            default_function=data.get("default_function"),
            added_at=data.get("added_at"),
        )


@dataclass(frozen=True, slots=True)
class RowDeletionPolicy:
    """``OLDER_THAN(column, INTERVAL days DAY)``: rows whose TIMESTAMP ``column`` is more than
    ``days`` days old are deleted in the background (NULL never expires)."""

    column: str
    days: int

    def to_catalog(self) -> dict[str, Any]:
        return {"column": self.column, "days": self.days}


@dataclass(frozen=True, slots=True)
class Index:
    """A secondary index: ``columns`` are (name, descending) pairs; ``null_filtered`` leaves
    out rows with a NULL in any of them; ``storing`` is kept for Spanner parity (SQLite reads
    the row itself)."""

    name: str
    table: str
    columns: tuple[tuple[str, bool], ...]
    unique: bool = False
    null_filtered: bool = False
    storing: tuple[str, ...] = ()

    def to_catalog(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "table": self.table,
            "columns": [[name, desc] for name, desc in self.columns],
            "unique": self.unique,
            "null_filtered": self.null_filtered,
            "storing": list(self.storing),
        }

    @staticmethod
    def from_catalog(data: dict[str, Any]) -> Index:
        return Index(
            name=data["name"],
            table=data["table"],
            columns=tuple((name, bool(desc)) for name, desc in data["columns"]),
            unique=data["unique"],
            null_filtered=data["null_filtered"],
            storing=tuple(data["storing"]),
        )

    def names(self) -> tuple[str, ...]:
        """Every column the index uses (keys and STORING)."""
        return tuple(name for name, _ in self.columns) + self.storing


@dataclass(frozen=True, slots=True)
class Table:
    """A user table: its columns in schema order and its primary key column names."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    indexes: tuple[Index, ...] = ()
    row_deletion_policy: RowDeletionPolicy | None = None
    #: The commit timestamp of the ``CREATE TABLE`` that made the table (None in catalogs
    #: written before it was recorded). A table dropped and created again under the same name
    #: is another table: a change committed before this was a former table's. Not part of
    #: equality, which compares shapes.
    created_at: int | None = field(default=None, compare=False)
    _by_name: dict[str, Column] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {c.name: c for c in self.columns})

    def column(self, name: str) -> Column | None:
        """The column called ``name`` (case-sensitive), or None."""
        return self._by_name.get(name)

    @property
    def key_columns(self) -> tuple[Column, ...]:
        return tuple(self._by_name[name] for name in self.primary_key)

    @property
    def non_key_columns(self) -> tuple[Column, ...]:
        keys = set(self.primary_key)
        return tuple(c for c in self.columns if c.name not in keys)

    def to_catalog(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "columns": [c.to_catalog() for c in self.columns],
            "primary_key": list(self.primary_key),
        }
        if self.indexes:
            out["indexes"] = [i.to_catalog() for i in self.indexes]
        if self.row_deletion_policy is not None:
            out["row_deletion_policy"] = self.row_deletion_policy.to_catalog()
        if self.created_at is not None:
            out["created_at"] = self.created_at
        return out

    @staticmethod
    def from_catalog(data: dict[str, Any]) -> Table:
        return Table(
            name=data["name"],
            columns=tuple(Column.from_catalog(c) for c in data["columns"]),
            primary_key=tuple(data["primary_key"]),
            indexes=tuple(Index.from_catalog(i) for i in data.get("indexes", ())),
            row_deletion_policy=(
                RowDeletionPolicy(**data["row_deletion_policy"])
                if data.get("row_deletion_policy")
                else None
            ),
            created_at=data.get("created_at"),
        )


@dataclass(frozen=True, slots=True)
class StreamTarget:
    """A table a change stream tracks; ``columns`` None means every column, () only the keys."""

    table: str
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ChangeStream:
    """A change stream definition as stored in the catalog."""

    name: str
    for_all: bool = False
    targets: tuple[StreamTarget, ...] = ()
    retention_seconds: int = DEFAULT_RETENTION_SECONDS
    value_capture_type: str = DEFAULT_VALUE_CAPTURE_TYPE
    #: Spanner's ``exclude_insert`` / ``exclude_update`` / ``exclude_delete``: that mod type
    #: is not recorded.
    exclude_insert: bool = False
    exclude_update: bool = False
    exclude_delete: bool = False
    #: Spanner's ``allow_txn_exclusion``: transactions opened with
    #: ``exclude_txn_from_change_streams=True`` are not recorded.
    allow_txn_exclusion: bool = False
    #: Spanner's ``exclude_ttl_deletes``: deletes of the row deletion policy are not recorded.
    exclude_ttl_deletes: bool = False

    @property
    def excluded_mod_types(self) -> frozenset[str]:
        """The mod types this stream leaves out."""
        flags = {
            "INSERT": self.exclude_insert,
            "UPDATE": self.exclude_update,
            "DELETE": self.exclude_delete,
        }
        return frozenset(mod_type for mod_type, excluded in flags.items() if excluded)

    def options(self) -> dict[str, Any]:
        """The stream's options as ``OPTIONS (...)`` names them (booleans only when set)."""
        out: dict[str, Any] = {
            "retention_seconds": self.retention_seconds,
            "value_capture_type": self.value_capture_type,
        }
        out.update({name: True for name in BOOLEAN_STREAM_OPTIONS if getattr(self, name)})
        return out

    def options_text(self) -> str:
        """The options for people: ``NEW_ROW, retention 24h, exclude_insert``."""
        return options_text(self.options())

    def target_for(self, table: str) -> StreamTarget | None:
        """What this stream tracks of ``table``, or None when it does not track it."""
        if self.for_all:
            return StreamTarget(table)
        for target in self.targets:
            if target.table == table:
                return target
        return None

    def to_catalog(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "for_all": self.for_all,
            "targets": [
                {"table": t.table, "columns": None if t.columns is None else list(t.columns)}
                for t in self.targets
            ],
            "retention_seconds": self.retention_seconds,
            "value_capture_type": self.value_capture_type,
            **{name: True for name in BOOLEAN_STREAM_OPTIONS if getattr(self, name)},
        }

    @staticmethod
    def from_catalog(data: dict[str, Any]) -> ChangeStream:
        return ChangeStream(
            name=data["name"],
            for_all=data["for_all"],
            targets=tuple(
                StreamTarget(t["table"], None if t["columns"] is None else tuple(t["columns"]))
                for t in data["targets"]
            ),
            retention_seconds=data["retention_seconds"],
            value_capture_type=data["value_capture_type"],
            **{name: bool(data.get(name, False)) for name in BOOLEAN_STREAM_OPTIONS},
        )


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """Options given in a CREATE or ALTER CHANGE STREAM; None means "not given"."""

    retention_seconds: int | None = None
    value_capture_type: str | None = None
    #: The boolean options given, by name (NULL resets one to false).
    flags: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True, slots=True)
class CreateTable:
    table: Table


@dataclass(frozen=True, slots=True)
class DropTable:
    name: str


@dataclass(frozen=True, slots=True)
class RenameTable:
    """``ALTER TABLE name RENAME TO new_name``."""

    name: str
    new_name: str


@dataclass(frozen=True, slots=True)
class AddColumn:
    """``ALTER TABLE table ADD COLUMN [IF NOT EXISTS] column``."""

    table: str
    column: Column
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True)
class DropColumn:
    """``ALTER TABLE table DROP COLUMN name``."""

    table: str
    name: str


@dataclass(frozen=True, slots=True)
class AlterColumn:
    """``ALTER TABLE table ALTER COLUMN name TYPE [NOT NULL]``: ``column`` is the new definition
    (its ordinal is filled in from the table's)."""

    table: str
    column: Column


@dataclass(frozen=True, slots=True)
class CreateIndex:
    index: Index
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True)
class DropIndex:
    name: str
    if_exists: bool = False


@dataclass(frozen=True, slots=True)
class SetRowDeletionPolicy:
    """``ALTER TABLE table ADD | REPLACE | DROP ROW DELETION POLICY``: ``policy`` None drops."""

    table: str
    action: str
    policy: RowDeletionPolicy | None


@dataclass(frozen=True, slots=True)
class CreateChangeStream:
    name: str
    for_all: bool
    targets: tuple[StreamTarget, ...]
    options: StreamOptions


@dataclass(frozen=True, slots=True)
class AlterChangeStream:
    """``SET FOR`` (for_all/targets given), ``SET OPTIONS`` (options given), or ``DROP FOR ALL``."""

    name: str
    set_for: tuple[bool, tuple[StreamTarget, ...]] | None = None
    options: StreamOptions | None = None
    drop_for_all: bool = False


@dataclass(frozen=True, slots=True)
class DropChangeStream:
    name: str


Statement = (
    CreateTable
    | DropTable
    | RenameTable
    | AddColumn
    | DropColumn
    | AlterColumn
    | CreateIndex
    | DropIndex
    | SetRowDeletionPolicy
    | CreateChangeStream
    | AlterChangeStream
    | DropChangeStream
)


def options_text(options: Mapping[str, Any]) -> str:
    """:meth:`ChangeStream.options` for people: ``NEW_ROW, retention 24h, exclude_insert``."""
    retention = int(options["retention_seconds"])
    hours, seconds = divmod(retention, 3600)
    flags = [name for name in BOOLEAN_STREAM_OPTIONS if options.get(name)]
    text = f"retention {hours}h" if not seconds else f"retention {retention}s"
    return ", ".join([str(options["value_capture_type"]), text, *flags])
