"""An append-only replica: every event kept as a row, so the table holds the source's history.

Datastream's BigQuery "append-only" write mode: instead of one row per key equal to the
source (:class:`~changestream.spark.replica.DeltaReplica`), each event is appended with its
change type — ``INSERT`` (a backfilled or inserted row), ``UPDATE-DELETE`` and
``UPDATE-INSERT`` (the row before and after an update) or ``DELETE`` (the row's last image, or
only its key with ``NEW_ROW`` capture) — its ``source_timestamp`` and its ``sort_keys``. The
row before an update comes from the change record's old values, so it is written when the
change stream captures them (``NEW_ROW_AND_OLD_VALUES``); with ``NEW_ROW`` an update has its
``UPDATE-INSERT`` row only.

Appending is idempotent: a MERGE inserts only rows whose (sort key, uuid, change type) is not
there yet, so a replayed batch adds nothing; the sort key, which grows with commit order, lets
it skip the files of older events by their statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from changestream.datastream.events import Event
from changestream.ddl.schema import Table
from changestream.spark.replica import (
    CHANGE_TYPE_COLUMN,
    SORT_KEY_COLUMN,
    SOURCE_TIMESTAMP_COLUMN,
    UUID_COLUMN,
    WRITER_PROPERTIES,
    ApplyStats,
    DeltaReplica,
    delta_rows,
    sort_key_texts,
    source_fields,
)

#: An event's change type in the history, Datastream's names.
UPDATE_INSERT: Final = "UPDATE-INSERT"
UPDATE_DELETE: Final = "UPDATE-DELETE"
_CHANGE_TYPES: Final = {"INSERT": "INSERT", "UPDATE": UPDATE_INSERT, "DELETE": "DELETE"}


class HistoryReplica(DeltaReplica):
    """The append-only Delta table of one source table (see the module docstring)."""

    _holds_current_rows = False

    @staticmethod
    def _schema_for(table: Table) -> pa.Schema:
        return pa.schema(
            [
                *source_fields(table),
                pa.field(SORT_KEY_COLUMN, pa.string(), nullable=False),
                pa.field(UUID_COLUMN, pa.string(), nullable=False),
                pa.field(CHANGE_TYPE_COLUMN, pa.string(), nullable=False),
                pa.field(SOURCE_TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC"), nullable=False),
            ]
        )

    def source_rows(self, events: Sequence[Event]) -> pa.Table:
        """Every event of ``events`` as a row (an update with its old values as two), in
        ``sort_keys`` order."""
        for event in events:
            self._check_belongs(event)
        if not events:
            return self.schema.empty_table()
        rows: list[tuple[Event, dict[str, Any], str]] = []
        for event in sorted(events, key=lambda e: e.sort_keys):
            change = _CHANGE_TYPES.get(event.source_metadata.change_type, "INSERT")
            if event.is_deleted:
                change = "DELETE"
            elif change == UPDATE_INSERT:
                before = event.row_before()
                if before is not None:
                    rows.append((event, before, UPDATE_DELETE))
            rows.append((event, event.payload, change))
        columns = self._payload_columns([payload for _, payload, _ in rows])
        columns += (
            sort_key_texts(tuple(zip(*(event.sort_keys for event, _, _ in rows), strict=True))),
            pa.array([event.uuid for event, _, _ in rows], pa.string()),
        )
        columns.append(pa.array([change for _, _, change in rows], pa.string()))
        columns.append(
            pa.array([event.source_timestamp for event, _, _ in rows], pa.timestamp("us", tz="UTC"))
        )
        return pa.Table.from_arrays(columns, schema=self.schema)

    def staged(self, parts: list[pa.Table]) -> pa.Table:
        """Every row of the parts: the history keeps each event."""
        return pa.concat_tables(parts)

    def apply_arrow(self, source: pa.Table) -> ApplyStats:
        """Append the rows (from several tasks) not appended already."""
        rows = source.num_rows
        if not rows:
            return ApplyStats(0, 0, 0, 0, 0, None)
        source = source.cast(self.schema).sort_by(SORT_KEY_COLUMN)
        delta = self._target()
        metrics = (
            delta.merge(
                source,
                f"t.{SORT_KEY_COLUMN} = s.{SORT_KEY_COLUMN} AND t.{UUID_COLUMN} = s.{UUID_COLUMN}"
                f" AND t.{CHANGE_TYPE_COLUMN} = s.{CHANGE_TYPE_COLUMN}",
                source_alias="s",
                target_alias="t",
                merge_schema=True,
                streamed_exec=False,
                writer_properties=WRITER_PROPERTIES,
            )
            .when_not_matched_insert_all()
            .execute()
        )
        inserted = int(metrics["num_target_rows_inserted"])
        return ApplyStats(rows, rows, inserted, 0, rows - inserted, delta.version())

    def read_rows(self) -> list[tuple[Any, ...]]:
        """The history: each appended event as (source columns..., change type, source
        timestamp), in ``sort_keys`` order (the order of the changes)."""
        try:
            delta = DeltaTable(str(self.path))
        except TableNotFoundError:
            return []
        data = delta_rows(delta)
        # An update's two rows share a sort key: UPDATE-DELETE sorts before UPDATE-INSERT.
        order = [(SORT_KEY_COLUMN, "ascending"), (CHANGE_TYPE_COLUMN, "ascending")]
        data = data.take(pc.sort_indices(data, order))
        columns = self._source_values(data)
        columns.append(data[CHANGE_TYPE_COLUMN].to_pylist())
        columns.append(data[SOURCE_TIMESTAMP_COLUMN].to_pylist())
        return list(zip(*columns, strict=True))
