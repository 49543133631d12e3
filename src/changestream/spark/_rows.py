"""Data change records as Spark rows: the source's schema and Arrow batches of records."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson
import pyarrow as pa

from changestream.spark.frontier import ReadRange
from changestream.streams.records import DataChangeRecord

_COMMON_HEAD = [
    ("commit_timestamp", pa.timestamp("us", tz="UTC")),
    ("record_sequence", pa.string()),
    ("server_transaction_id", pa.string()),
    ("is_last_record_in_transaction_in_partition", pa.bool_()),
    ("table_name", pa.string()),
    ("value_capture_type", pa.string()),
    ("column_types", pa.string()),
]
_MOD_FIELDS = [("keys", pa.string()), ("new_values", pa.string()), ("old_values", pa.string())]
_COMMON_TAIL = [
    ("mod_type", pa.string()),
    ("number_of_records_in_transaction", pa.int64()),
    ("number_of_partitions_in_transaction", pa.int64()),
    ("transaction_tag", pa.string()),
    ("is_system_transaction", pa.bool_()),
    ("partition_token", pa.string()),
]

#: One row per data change record, mods as an array of structs of JSON strings.
RECORD_SCHEMA = pa.schema(
    [*_COMMON_HEAD, ("mods", pa.list_(pa.struct(_MOD_FIELDS))), *_COMMON_TAIL]
)
#: ``rowPerMod=true``: one row per mod, with its index in the record.
MOD_SCHEMA = pa.schema([*_COMMON_HEAD, ("mod_index", pa.int64()), *_MOD_FIELDS, *_COMMON_TAIL])

#: ``rowPerRange=true``: one row per partition range to read, not the records themselves.
RANGE_SCHEMA = pa.schema(
    [
        ("partition_token", pa.string()),
        ("start_micros", pa.int64()),
        ("end_micros", pa.int64()),
    ]
)

_SPARK_TYPES = {
    pa.timestamp("us", tz="UTC"): "timestamp",
    pa.string(): "string",
    pa.bool_(): "boolean",
    pa.int64(): "bigint",
}


def spark_schema(row_per_mod: bool, row_per_range: bool = False) -> str:
    """The Spark DDL schema string of the source's rows."""
    schema = RANGE_SCHEMA if row_per_range else MOD_SCHEMA if row_per_mod else RECORD_SCHEMA
    mods = "array<struct<keys: string, new_values: string, old_values: string>>"
    return ", ".join(
        f"{f.name} {mods if f.name == 'mods' else _SPARK_TYPES[f.type]}" for f in schema
    )


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


def record_batches(
    records: Iterable[DataChangeRecord], row_per_mod: bool, rows_per_batch: int = 4096
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the source's rows for ``records``, about ``rows_per_batch`` each."""
    schema = MOD_SCHEMA if row_per_mod else RECORD_SCHEMA
    batch = _Columns(schema)
    for record in records:
        batch.add(record, row_per_mod)
        if batch.rows >= rows_per_batch:
            yield batch.to_arrow()
            batch = _Columns(schema)
    if batch.rows:
        yield batch.to_arrow()


def range_batch(reads: Iterable[ReadRange]) -> pa.RecordBatch:
    """The ``rowPerRange`` rows of ``reads``."""
    reads = list(reads)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.token for r in reads], pa.string()),
            pa.array([r.start for r in reads], pa.int64()),
            pa.array([r.end for r in reads], pa.int64()),
        ],
        schema=RANGE_SCHEMA,
    )


class _Columns:
    """Column lists being filled, one value per row (columnar, for speed)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.columns: dict[str, list[object]] = {name: [] for name in schema.names}
        self.rows = 0

    def add(self, record: DataChangeRecord, row_per_mod: bool) -> None:
        count = len(record.mods) if row_per_mod else 1
        shared = {
            "commit_timestamp": record.commit_timestamp,
            "record_sequence": record.record_sequence,
            "server_transaction_id": record.server_transaction_id,
            "is_last_record_in_transaction_in_partition": (
                record.is_last_record_in_transaction_in_partition
            ),
            "table_name": record.table_name,
            "value_capture_type": record.value_capture_type,
            "column_types": _json([c.to_dict() for c in record.column_types]),
            "mod_type": record.mod_type,
            "number_of_records_in_transaction": record.number_of_records_in_transaction,
            "number_of_partitions_in_transaction": record.number_of_partitions_in_transaction,
            "transaction_tag": record.transaction_tag,
            "is_system_transaction": record.is_system_transaction,
            "partition_token": record.partition_token,
        }
        columns = self.columns
        for name, value in shared.items():
            columns[name].extend([value] * count)
        if row_per_mod:
            columns["mod_index"].extend(range(count))
            columns["keys"].extend([_json(m.keys) for m in record.mods])
            columns["new_values"].extend([_json(m.new_values) for m in record.mods])
            columns["old_values"].extend([_json(m.old_values) for m in record.mods])
        else:
            columns["mods"].append(
                [
                    {
                        "keys": _json(m.keys),
                        "new_values": _json(m.new_values),
                        "old_values": _json(m.old_values),
                    }
                    for m in record.mods
                ]
            )
        self.rows += count

    def to_arrow(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(self.columns, schema=self.schema)
