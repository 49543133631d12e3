"""An append-only replica: every event kept as a row, so the table holds the source's history.

Datastream's BigQuery "append-only" write mode: instead of one row per key equal to the
source (:class:`~changestream.spark.replica.DeltaReplica`), each event is appended with its
change type — ``INSERT`` (a backfilled or inserted row), ``UPDATE-INSERT`` (the row after an
update) or ``DELETE`` (the row's last image, or only its key with ``NEW_ROW`` capture) — its
``source_timestamp`` and its ``sort_keys``. Events carry the row after the change, so the
``UPDATE-DELETE`` image of the row before an update is not written.

Appending is idempotent: a MERGE inserts only events whose (sort key, uuid) is not there yet,
so a replayed batch adds nothing; the sort key, which grows with commit order, lets it skip
the files of older events by their statistics.
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
    ApplyStats,
    DeltaReplica,
    delta_rows,
    source_fields,
)

#: An event's change type in the history, Datastream's names.
_CHANGE_TYPES: Final = {"INSERT": "INSERT", "UPDATE": "UPDATE-INSERT", "DELETE": "DELETE"}


class HistoryReplica(DeltaReplica):
    """The append-only Delta table of one source table (see the module docstring)."""

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
        """Every event of ``events`` as a row, in ``sort_keys`` order."""
        for event in events:
            self._check_belongs(event)
        if not events:
            return self.schema.empty_table()
        return self._source(sorted(events, key=lambda e: e.sort_keys))

    def staged(self, parts: list[pa.Table]) -> pa.Table:
        """Every row of the parts: the history keeps each event."""
        return pa.concat_tables(parts)

    def _bookkeeping(self, events: list[Event]) -> list[pa.Array]:
        sort_keys, uuids = super()._bookkeeping(events)[:2]
        change_types = [
            "DELETE" if e.is_deleted else _CHANGE_TYPES.get(e.source_metadata.change_type, "INSERT")
            for e in events
        ]
        return [
            sort_keys,
            uuids,
            pa.array(change_types, pa.string()),
            pa.array([e.source_timestamp for e in events], pa.timestamp("us", tz="UTC")),
        ]

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
                f"t.{SORT_KEY_COLUMN} = s.{SORT_KEY_COLUMN} AND t.{UUID_COLUMN} = s.{UUID_COLUMN}",
                source_alias="s",
                target_alias="t",
                merge_schema=True,
                streamed_exec=False,
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
        data = data.take(pc.sort_indices(data, [(SORT_KEY_COLUMN, "ascending")]))
        columns = self._source_values(data)
        columns.append(data[CHANGE_TYPE_COLUMN].to_pylist())
        columns.append(data[SOURCE_TIMESTAMP_COLUMN].to_pylist())
        return list(zip(*columns, strict=True))
