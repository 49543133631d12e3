"""Delta Lake replica of one source table, kept by one MERGE per micro-batch of events.

The replica of ``<database>.<table>`` is the Delta table ``<root>/<database>_<table>`` with the
source's columns (types from its DDL, see :func:`arrow_type`) and three bookkeeping columns:

- ``_cs_sort_key``: the row's last applied ``sort_keys`` as fixed-width text (each of the four
  numbers zero-padded to 19 digits, joined by ``-``), so text order is ``sort_keys`` order and
  one string comparison in the MERGE tells a newer change from an older one;
- ``_cs_uuid``: the uuid of that last applied event;
- ``_cs_deleted``: true when that event was a DELETE.

Deleted rows stay as tombstones (``_cs_deleted`` true) instead of being removed. A hard delete
would forget the row's sort key, and then an older event arriving later — a replayed batch, or
a backfill row read from a snapshot taken before a CDC delete that was applied first — would
bring the row back. With the tombstone the MERGE sees that the older event is older and skips
it, so applying any set of batches in any order, any number of times, gives the same table.
Readers of the Delta table filter ``NOT _cs_deleted`` (:meth:`DeltaReplica.read_rows` does).

This module does not import pyspark: Spark tasks stage MERGE sources with
:meth:`DeltaReplica.source_rows`; the driver merges them with :meth:`DeltaReplica.apply_arrow`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.table import TableMerger

from changestream.codecs import Codec, identity, text_decoder, text_encoder, to_sqlite
from changestream.datastream.events import (
    SOURCE_METADATA_FIELDS,
    Event,
    object_name,
    schema_key,
    table_plan,
)
from changestream.ddl.schema import Column, Table
from changestream.errors import FailedPrecondition, InvalidArgument, NotFound
from changestream.spark.replica_files import new_table_properties, size_files, writer_properties
from changestream.types import ColumnType

log = logging.getLogger(__name__)

SORT_KEY_COLUMN: Final = "_cs_sort_key"
UUID_COLUMN: Final = "_cs_uuid"
DELETED_COLUMN: Final = "_cs_deleted"
#: An append-only replica's (see :mod:`changestream.spark.history`).
CHANGE_TYPE_COLUMN: Final = "_cs_change_type"
SOURCE_TIMESTAMP_COLUMN: Final = "_cs_source_timestamp"
BOOKKEEPING_COLUMNS: Final = (
    SORT_KEY_COLUMN,
    UUID_COLUMN,
    DELETED_COLUMN,
    CHANGE_TYPE_COLUMN,
    SOURCE_TIMESTAMP_COLUMN,
)
#: How the replica's Parquet files are written (see ``replica_files``): the sort key and the
#: uuid differ on every row.
WRITER_PROPERTIES: Final = writer_properties((SORT_KEY_COLUMN, UUID_COLUMN))


_SCALAR_ARROW_TYPES: Final[dict[str, pa.DataType]] = {
    "BOOL": pa.bool_(),
    "INT64": pa.int64(),
    "FLOAT64": pa.float64(),
    # Plain decimal text: lossless at any precision and scale (decimal128(38, 9) is not), and
    # the replica must equal the source value for value.
    "NUMERIC": pa.string(),
    "STRING": pa.string(),
    "BYTES": pa.binary(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "JSON": pa.string(),
}


def arrow_type(ctype: ColumnType) -> pa.DataType:
    """The Arrow (and so Delta) type of a column type."""
    if ctype.code == "ARRAY":
        assert ctype.element is not None
        return pa.list_(arrow_type(ctype.element))
    return _SCALAR_ARROW_TYPES[ctype.code]


def sort_key_text(sort_keys: Sequence[int]) -> str:
    """``sort_keys`` as fixed-width text whose string order is the keys' order."""
    if min(sort_keys) < 0:
        raise InvalidArgument(f"sort_keys must not be negative, got {list(sort_keys)}")
    return "{:019d}-{:019d}-{:019d}-{:019d}".format(*sort_keys)


def sort_key_texts(columns: Sequence[Sequence[int] | pa.Array]) -> pa.Array:
    """:func:`sort_key_text` of many sort keys given as four columns (one per place in
    them), in Arrow (a Python loop costs more than the MERGE for large batches)."""
    parts = [pa.array(column, pa.int64()) for column in columns]
    if min(pc.min(part).as_py() for part in parts) < 0:
        raise InvalidArgument("sort_keys must not be negative")
    padded = [pc.utf8_lpad(pc.cast(part, pa.string()), 19, "0") for part in parts]
    return pc.binary_join_element_wise(*padded, "-")


#: The position column :func:`latest_per_key` numbers the rows with.
_ROW: Final = "_cs_row"


def latest_per_key(rows: pa.Table, keys: list[str]) -> pa.Table:
    """Per distinct value of the ``keys`` columns, the row with the highest sort key (in no
    particular order)."""
    if rows.select(keys).group_by(keys, use_threads=False).aggregate([]).num_rows == len(rows):
        # Every key once (common: a micro-batch's tasks read disjoint keys): no sort. The
        # check took 12 ms over 116,514 rows, the sort and pick 85 ms.
        return rows
    # The rows' positions in sort-key order (a stable sort: of equal sort keys the later row
    # wins), then each key's last position in that order: one take of the whole table, not
    # two (80-110 ms against 230-260 over 200,000 rows).
    order = pc.array_sort_indices(rows[SORT_KEY_COLUMN])
    numbered = rows.select(keys).take(order).append_column(_ROW, order)
    last = numbered.group_by(keys, use_threads=False).aggregate([(_ROW, "last")])
    return rows.take(last[f"{_ROW}_last"])


def _storage_order(ctype: ColumnType) -> Codec:
    """A sort key giving SQLite's order of the column's stored values (NULL first)."""
    return lambda value: (0,) if value is None else (1, to_sqlite(ctype, value))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class ApplyStats:
    """What one :meth:`DeltaReplica.apply` did.

    ``rows`` is the number of distinct keys in the batch; ``inserted`` and ``updated`` count
    rows the MERGE wrote (a delete of an existing row is an update to a tombstone), and
    ``skipped`` the keys whose event was not newer than the replica's (replays, old events).
    """

    events: int
    rows: int
    inserted: int
    updated: int
    skipped: int
    version: int | None


_CDF_PROPERTY = "delta.enableChangeDataFeed"
_CHANGE_DATA_FEED: Final[dict[str, str]] = {_CDF_PROPERTY: "true"}

#: Field metadata recording a column's type (its catalog JSON) and key position, so a replica
#: can be read knowing only its table's name (NUMERIC and JSON are both text in Arrow).
_TYPE_METADATA = "changestream.type"
_KEY_METADATA = "changestream.key"
#: And when the column was added (see ``Column.added_at``), so a column dropped and added
#: again under the same name is told from the one the replica holds.
_ADDED_METADATA = "changestream.added_at"


def source_fields(table: Table) -> list[pa.Field]:
    """The replica fields of the source's columns, each recording its type and key position."""
    keys = {name: position for position, name in enumerate(table.primary_key)}

    def metadata(column: Column) -> dict[str, str]:
        found = {_TYPE_METADATA: orjson.dumps(column.type.to_catalog()).decode()}
        if column.name in keys:
            found[_KEY_METADATA] = str(keys[column.name])
        if column.added_at is not None:
            found[_ADDED_METADATA] = str(column.added_at)
        return found

    return [pa.field(c.name, arrow_type(c.type), metadata=metadata(c)) for c in table.columns]


@functools.lru_cache(maxsize=256)
def _arrow_schema(table: Table) -> pa.Schema:
    return pa.schema(
        [
            *source_fields(table),
            pa.field(SORT_KEY_COLUMN, pa.string(), nullable=False),
            pa.field(UUID_COLUMN, pa.string(), nullable=False),
            pa.field(DELETED_COLUMN, pa.bool_(), nullable=False),
        ]
    )


def _metadata(field: pa.Field, key: str) -> bytes | None:
    return (field.metadata or {}).get(key.encode())


def delta_rows(delta: DeltaTable, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of the table's current version, read from its Parquet files with pyarrow.

    deltalake's own readers (``to_pyarrow_table``/``_dataset``) leave Rust runtime threads
    that can abort a short-lived process as it exits ("terminate called without an active
    exception", delta-rs issue 2184); reading the files itself does not. Replicas have no
    deletion vectors or column mapping, so the files are the table. Files written before a
    column was added lack it: it reads as null."""
    schema = pa.schema(
        [f for f in pa.schema(delta.schema().to_arrow()) if columns is None or f.name in columns]
    )
    parts = []
    for uri in delta.file_uris():
        # Delta keeps file paths URI-encoded (a space is %20).
        part = pq.read_table(urllib.parse.unquote(uri.removeprefix("file://")))
        parts.append(
            pa.table(
                [
                    part[f.name].cast(f.type)
                    if f.name in part.column_names
                    else pa.nulls(len(part), f.type)
                    for f in schema
                ],
                schema=schema,
            )
        )
    return pa.concat_tables(parts) if parts else schema.empty_table()


def replica_table(path: Path, name: str) -> Table:
    """The source table ``name`` as the replica at ``path`` records it (columns, types and
    key), for reading a replica without the source at hand."""
    try:
        delta = DeltaTable(str(path))
    except TableNotFoundError as exc:
        raise NotFound(f"no replica of table {name!r} at {path}") from exc
    columns: list[Column] = []
    keys: dict[int, str] = {}
    for field in delta.schema().fields:
        if field.name in BOOKKEEPING_COLUMNS:
            continue
        described = field.metadata.get(_TYPE_METADATA)
        if not isinstance(described, str):
            raise FailedPrecondition(
                f"the replica at {path} does not record the type of column {field.name!r} "
                "(it was made by an older version): pass the source's Table instead of its name"
            )
        ctype = ColumnType.from_json(orjson.loads(described))
        added = field.metadata.get(_ADDED_METADATA)
        added_at = int(added) if isinstance(added, str) else None
        columns.append(Column(field.name, ctype, len(columns) + 1, added_at=added_at))
        if _KEY_METADATA in field.metadata:
            keys[int(field.metadata[_KEY_METADATA])] = field.name
    return Table(name, tuple(columns), tuple(keys[position] for position in sorted(keys)))


class DeltaReplica:
    """The Delta Lake replica of one source table (see the module docstring). ``table`` is
    the source's Table, or its name to read a replica made already (its types come from the
    replica's own schema)."""

    #: Whether the rows are the source's rows as they are now (a history's are past images:
    #: they keep what they held, and a column added later is NULL in them).
    _holds_current_rows: ClassVar[bool] = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        database: str,
        table: Table | str,
        *,
        drop_dropped_columns: bool = False,
    ) -> None:
        if isinstance(table, str):
            table = replica_table(Path(root) / object_name(database, table), table)
        self.table = table
        self._drop_dropped_columns = drop_dropped_columns
        self._delta: DeltaTable | None = None
        self._former_rows_gone = False
        self.object = object_name(database, table.name)
        self.path = Path(root) / self.object
        self.schema = self._schema_for(table)
        self._schema_key = schema_key(table)
        # Events of this table's shape, whichever source metadata they carry.
        self._schema_keys = frozenset(
            table_plan(table, flavor).schema_key for flavor in SOURCE_METADATA_FIELDS
        )
        self._to_arrow = [text_encoder(c.type) for c in table.columns]
        # The source columns whose values Arrow takes as they are, converted all at once.
        self._plain = pa.struct(
            [
                self.schema.field(c.name)
                for c, convert in zip(table.columns, self._to_arrow, strict=True)
                if convert is identity
            ]
        )
        self._from_arrow = [text_decoder(c.type) for c in table.columns]
        self._order = [_storage_order(c.type) for c in table.key_columns]
        # Key columns may hold NULL (a key value like any other), so nullable ones compare
        # with IS NOT DISTINCT FROM; each term is parenthesized because the SQL parser binds
        # IS NOT DISTINCT FROM looser than AND.
        self._predicate = " AND ".join(
            f"(t.{_quote(c.name)} = s.{_quote(c.name)})"
            if c.not_null
            else f"(t.{_quote(c.name)} IS NOT DISTINCT FROM s.{_quote(c.name)})"
            for c in table.key_columns
        )

    def __getstate__(self) -> dict[str, Any]:
        # Pickled to Spark's tasks, which open the table themselves if they need it.
        return {**self.__dict__, "_delta": None}

    @staticmethod
    def _schema_for(table: Table) -> pa.Schema:
        return _arrow_schema(table)

    def ensure(self) -> DeltaTable:
        """The Delta table, created empty with the replica schema if it does not exist yet,
        with Delta's change data feed on (so ``readChangeFeed`` / ``load_cdf`` read the
        replica's own changes); a replica made before that gets it turned on. Its target file
        size is made to fit its size (see :mod:`~changestream.spark.replica_files`). The table
        stays open: the next call only reads the commits made since (about 25 ms less per
        micro-batch)."""
        if self._delta is not None:
            try:
                self._delta.update_incremental()
                return self._delta
            except DeltaError:  # the table was removed or replaced meanwhile: open it anew
                self._delta = None
        delta = DeltaTable.create(
            str(self.path),
            self.schema,
            mode="ignore",
            configuration={**_CHANGE_DATA_FEED, **new_table_properties()},
            raise_if_key_not_exists=False,
        )
        configuration = delta.metadata().configuration
        if configuration.get(_CDF_PROPERTY) != "true":
            delta.alter.set_table_properties(_CHANGE_DATA_FEED)
        size_files(delta)
        self._delta = delta
        return delta

    def apply(self, events: Sequence[Event]) -> ApplyStats:
        """Apply a batch of events of this table with one MERGE: per key, the event with the
        highest ``sort_keys`` replaces the replica's row if it is newer than the row's."""
        stats = self.apply_arrow(self.source_rows(events))
        return dataclasses.replace(stats, events=len(events))

    def source_rows(self, events: Sequence[Event]) -> pa.Table:
        """The rows of ``events`` in the replica's schema, one per event (what tasks stage:
        :meth:`staged` and :meth:`apply_arrow` keep each key's newest)."""
        for event in events:
            self._check_belongs(event)
        return self.change_rows(
            [e.payload for e in events],
            tuple(zip(*(e.sort_keys for e in events), strict=True)),
            [e.uuid for e in events],
            [e.is_deleted for e in events],
        )

    def change_rows(
        self,
        rows: Sequence[dict[str, Any]],
        sort_key_columns: Sequence[Sequence[int]],
        uuids: Sequence[str],
        deleted: Sequence[bool],
    ) -> pa.Table:
        """:meth:`source_rows` of changes of this table given as columns: their decoded
        rows, their ``sort_keys`` as four columns (see :func:`sort_key_texts`), uuids and
        whether each deletes."""
        if not rows:
            return self.schema.empty_table()
        columns = self._payload_columns(rows)
        columns += [
            sort_key_texts(sort_key_columns),
            pa.array(uuids, pa.string()),
            pa.array(deleted, pa.bool_()),
        ]
        return pa.Table.from_arrays(columns, schema=self.schema)

    def change_arrays(
        self,
        values: Sequence[pa.Array],
        sort_key_columns: Sequence[pa.Array],
        uuids: pa.Array,
        deleted: pa.Array,
    ) -> pa.Table:
        """:meth:`change_rows` of changes whose rows are given as Arrow columns, one per
        column of the table in its order, each of a type that casts to the replica's."""
        columns = [
            value.cast(field.type) for value, field in zip(values, self.schema, strict=False)
        ]
        columns += [sort_key_texts(sort_key_columns), uuids.cast(pa.string()), deleted]
        return pa.Table.from_arrays(columns, schema=self.schema)

    def staged(self, parts: list[pa.Table]) -> pa.Table:
        """One task's MERGE source from the :meth:`change_rows` of its parts, as it stages
        it: the newest row per key. Keys are picked once for the task's changes, not per
        part: a part seldom holds a key twice, and picking in Python per part cost more
        than Arrow's pick over them all."""
        return latest_per_key(pa.concat_tables(parts), list(self.table.primary_key))

    def _check_belongs(self, event: Event) -> None:
        if event.object != self.object or event.schema_key not in self._schema_keys:
            raise InvalidArgument(
                f"event {event.uuid} is for {event.object} (schema {event.schema_key}), "
                f"this replica holds {self.object} (schema {self._schema_key})"
            )

    def apply_arrow(self, source: pa.Table) -> ApplyStats:
        """MERGE rows in the replica's schema (from several tasks): per key the row with the
        highest sort key wins, and replaces the replica's row if it is newer."""
        rows = source.num_rows
        if not rows:
            return ApplyStats(0, 0, 0, 0, 0, None)
        source = latest_per_key(source.cast(self.schema), list(self.table.primary_key))
        delta = self._target()
        metrics = (
            self._merging(delta, source)
            .when_matched_update_all(predicate=f"s.{SORT_KEY_COLUMN} > t.{SORT_KEY_COLUMN}")
            .when_not_matched_insert_all()
            .execute()
        )
        inserted = int(metrics["num_target_rows_inserted"])
        updated = int(metrics["num_target_rows_updated"])
        return ApplyStats(
            events=rows,
            rows=source.num_rows,
            inserted=inserted,
            updated=updated,
            skipped=source.num_rows - inserted - updated,
            version=delta.version(),
        )

    def follow_schema(self) -> None:
        """Give the replica, if there is one, the source table's columns as they are now (see
        :meth:`_target`). A DDL alone changes what the source's rows read (a column added
        with a DEFAULT, a former column's values gone) without a change of any row to bring
        it here: the pipeline calls this when it first sees a table's shape."""
        if self._delta is None and not DeltaTable.is_deltatable(str(self.path)):
            return
        self._target()

    def _merging(self, delta: DeltaTable, source: pa.Table) -> TableMerger:
        """A MERGE of ``source`` rows into ``delta`` by key (``s`` and ``t``)."""
        return delta.merge(
            source,
            self._predicate,
            source_alias="s",
            target_alias="t",
            # A column added to the source table is added here too; one dropped from it
            # stays, with the values it had (unless drop_dropped_columns).
            merge_schema=True,
            # A materialized source lets the MERGE prune target files by key statistics.
            streamed_exec=False,
            writer_properties=WRITER_PROPERTIES,
        )

    def _target(self) -> DeltaTable:
        """The Delta table to write to, its columns made the source's (see
        :meth:`_reshaped`; columns added since with a DEFAULT filled with it)."""
        delta = self._reshaped(self.ensure())
        if not self._holds_current_rows:
            return delta
        return self._with_added_defaults(self._without_former_rows(delta))

    def _without_former_rows(self, delta: DeltaTable) -> DeltaTable:
        """The Delta table without the rows of a former table of this name, dropped before
        this one was created (``Table.created_at``): the source has none of them. Their
        changes all committed before the creation, so they are the rows whose sort key is
        older; a table created anew with rows of the same keys gets its own. Looked at once
        per replica object (row-group statistics skip the files when there are none)."""
        created = self.table.created_at
        if created is None or self._former_rows_gone:
            return delta
        bound = f"{created:019d}"
        older = pc.field(SORT_KEY_COLUMN) < bound
        former = delta.to_pyarrow_dataset().count_rows(filter=older)
        if former:
            delta.delete(f"{SORT_KEY_COLUMN} < '{bound}'")
            log.info(
                "replica %s: %d rows of a former table %s removed (the table was dropped and "
                "created again)",
                self.object,
                former,
                self.table.name,
            )
        self._former_rows_gone = True
        return delta

    def _reshaped(self, delta: DeltaTable) -> DeltaTable:
        """The Delta table with the source's columns as they are now, rewritten (one
        overwrite) when they changed:

        - a column whose type changed (``ALTER COLUMN`` gave a STRING another length) takes
          the new type, its values kept;
        - a column dropped and added again under the same name is another column: the
          former one's values go (the new one is NULL, or gets its DEFAULT next), except in
          a history, which keeps them when the type allows;
        - a column the source dropped goes too when the stream says so (Delta Lake drops a
          column only with column mapping, which deltalake's MERGE does not support).
        """
        wanted = {f.name: f for f in self.schema if f.name not in BOOKKEEPING_COLUMNS}
        current = pa.schema(delta.schema().to_arrow())
        gone: list[str] = []
        changed: list[str] = []
        for field in current:
            want = wanted.get(field.name)
            if want is None:
                if self._drop_dropped_columns and field.name not in BOOKKEEPING_COLUMNS:
                    gone.append(field.name)
            elif _metadata(field, _ADDED_METADATA) != _metadata(want, _ADDED_METADATA) and (
                self._holds_current_rows or field.type != want.type
            ):
                gone.append(field.name)
            elif field.type != want.type or field.metadata != want.metadata:
                changed.append(field.name)
        if not gone and not changed:
            return delta
        data = delta_rows(delta)
        kept = [f for f in current if f.name not in gone]
        fields = [wanted.get(f.name, f) for f in kept]
        rows = pa.table(
            [data[f.name].cast(new.type) for f, new in zip(kept, fields, strict=True)],
            schema=pa.schema(fields),
        )
        write_deltalake(
            str(self.path),
            rows,
            mode="overwrite",
            schema_mode="overwrite",
            writer_properties=WRITER_PROPERTIES,
        )
        log.info(
            "replica %s: columns %s dropped and %s changed, as its source's were",
            self.object,
            gone,
            changed,
        )
        self._delta = DeltaTable(str(self.path))
        return self._delta

    def _with_added_defaults(self, delta: DeltaTable) -> DeltaTable:
        """The Delta table with each column the source added with a constant DEFAULT since,
        filled with it in every row it has. The source gives its existing rows the default
        without a change per row, and the replica's files from before the column would read
        NULL. One MERGE adds the columns and fills them, so a crash leaves both or neither.
        A default each row computes (``GENERATE_UUID()``) cannot be known here: a warning
        says those rows read NULL until the table is read anew (a backfill)."""
        present = {f.name for f in delta.schema().fields}
        added = [
            (index, c)
            for index, c in enumerate(self.table.columns)
            if c.name not in present and (c.default is not None or c.default_function)
        ]
        if not added:
            return delta
        keys = delta_rows(delta, list(self.table.primary_key))
        if not keys.num_rows:
            return delta
        computed = [c.name for _, c in added if c.default_function is not None]
        if computed:
            log.warning(
                "replica %s: columns %s were added with a DEFAULT computed per row; the rows "
                "the replica had read NULL in them until the table is read anew "
                "(`changestream streams backfill start STREAM %s`)",
                self.object,
                computed,
                self.object,
            )
        fills = [(index, c) for index, c in added if c.default is not None]
        if not fills:
            return delta
        source = keys
        for index, column in fills:
            value = self._to_arrow[index](column.default)
            field = self.schema.field(column.name)
            source = source.append_column(field, pa.array([value] * keys.num_rows, field.type))
        updates = {_quote(c.name): f"s.{_quote(c.name)}" for _, c in fills}
        self._merging(delta, source).when_matched_update(updates).execute()
        log.info(
            "replica %s: columns %s added with their defaults, as its source did",
            self.object,
            [c.name for _, c in fills],
        )
        return delta

    def _payload_columns(self, payloads: Sequence[dict[str, Any]]) -> list[pa.Array]:
        """The source's columns of rows given as payloads, in Arrow: the columns stored as
        they are converted from the dicts all at once (Arrow's own loop: 0.21 µs a row of a
        task's against 0.26 for a Python list per column), the others value by value."""
        plain = iter(pa.array(payloads, type=self._plain).flatten())
        columns: list[pa.Array] = []
        for column, convert, field in zip(
            self.table.columns, self._to_arrow, self.schema, strict=False
        ):
            if convert is identity:
                columns.append(next(plain))
            else:
                name = column.name
                columns.append(pa.array([convert(p[name]) for p in payloads], type=field.type))
        return columns

    def _source_values(self, data: pa.Table) -> list[list[Any]]:
        """The source's columns of ``data`` as Python values (as ``Database.read`` has them)."""
        present = set(data.column_names)
        return [
            [convert(value) for value in data[column.name].to_pylist()]
            if column.name in present
            else [None] * data.num_rows  # added to the source since the last MERGE
            for column, convert in zip(self.table.columns, self._from_arrow, strict=True)
        ]

    def maintain(self, vacuum_retention_hours: float) -> dict[str, int]:
        """Compact the table's small files into larger ones (up to its target file size, made
        to fit its size first: see :mod:`~changestream.spark.replica_files`), then delete the
        files no version newer than ``vacuum_retention_hours`` needs (readers of older
        versions lose them). Returns how many files compaction removed and added and vacuum
        deleted."""
        try:
            delta = DeltaTable(str(self.path))
        except TableNotFoundError:
            return {"removed": 0, "added": 0, "vacuumed": 0}
        size_files(delta)
        metrics = delta.optimize.compact(writer_properties=WRITER_PROPERTIES)
        vacuumed = delta.vacuum(
            retention_hours=int(vacuum_retention_hours),
            dry_run=False,
            enforce_retention_duration=False,
        )
        return {
            "removed": int(metrics.get("numFilesRemoved", 0)),
            "added": int(metrics.get("numFilesAdded", 0)),
            "vacuumed": len(vacuumed),
        }

    def read_rows(self) -> list[tuple[Any, ...]]:
        """The replica's live rows in the source's column order and value representation
        (as ``Database.read`` returns them), in the source's key order."""
        try:
            delta = DeltaTable(str(self.path))
        except TableNotFoundError:
            return []
        data = delta_rows(delta)
        data = data.filter(pc.invert(data[DELETED_COLUMN]))
        rows = list(zip(*self._source_values(data), strict=True))
        positions = [
            [c.name for c in self.table.columns].index(name) for name in self.table.primary_key
        ]
        rows.sort(
            key=lambda row: tuple(
                order(row[at]) for order, at in zip(self._order, positions, strict=True)
            )
        )
        return rows
