"""The CDC events of stored change records as columns, built by DuckDB from the records' JSON.

:func:`~changestream.datastream.event_columns.record_columns` turns decoded records into
events in Python: a mod's row decoded, its uuid hashed, its JSON line joined, one mod at a
time. Here the same is done over a chunk of records at once, from the JSON the change log
stores them as: Python reads each record's header (not its mods) and cuts its event's JSON
template (see :mod:`~changestream.datastream.event_columns`); DuckDB unnests the mods (of
either stored form: see :mod:`changestream.streams.mods`), writes each payload's JSON,
hashes the uuids, joins the lines and casts the rows for the replica, in a few vectorized
passes, about half the CPU a change of the Python path.

Only what comes out byte for byte as the Python path writes it is built here (see
:meth:`StoredColumns.accepts`): records of the table as it is now with the shape it has,
whole rows, columns of the types whose JSON DuckDB writes as ``orjson`` does (``BOOL``,
``INT64`` and those stored as text: ``STRING`` without control characters, ``NUMERIC``,
``DATE``, ``TIMESTAMP``, ``BYTES``). Their mods are taken to hold what capture writes for
such records (every column, of its type); a value DuckDB cannot convert (a change log
edited by hand) leaves the chunk to the Python path, which says what is wrong. Anything
else is built by the Python path too. ``tests/test_stored_columns.py`` checks both paths
alike, line for line and row for row.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from changestream.datastream.event_columns import template_of
from changestream.datastream.events import (
    CDC_RANK,
    CHANGE_TYPES,
    UUID_NAMESPACE_BYTES,
    WHOLE_ROWS,
    CdcBuilder,
    Change,
    Event,
)
from changestream.ddl.schema import Table
from changestream.streams.origins import TableOrigin

#: Column types built here: the DuckDB type a value ``v`` is read as from the change record's
#: JSON, and the SQL of its event JSON and of its replica value. The types stored as text
#: are that text in events (see ``changestream.codecs.record_to_event``).
_TYPES: Final = {
    "BOOL": ("BOOLEAN", "{v}::VARCHAR", "{v}"),
    "INT64": ("BIGINT", "{v}::VARCHAR", "{v}"),
    "STRING": ("VARCHAR", "to_json({v})::VARCHAR", "{v}"),
    "NUMERIC": ("VARCHAR", "to_json({v})::VARCHAR", "{v}"),
    "DATE": ("VARCHAR", "to_json({v})::VARCHAR", "CAST({v} AS DATE)"),
    "TIMESTAMP": ("VARCHAR", "to_json({v})::VARCHAR", "CAST({v} AS TIMESTAMPTZ)"),
    "BYTES": ("VARCHAR", "to_json({v})::VARCHAR", "from_base64({v})"),
}
#: How ``orjson`` writes a control character but \b, \t, \n, \f and \r.
_ESCAPED_CONTROL: Final = b"\\u00"
#: Column names that need no quoting in a JSON path or an SQL identifier.
_PLAIN_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class StoredHeader(msgspec.Struct, frozen=True, gc=False):
    """What a stored data change record says besides its mods, which are left as JSON."""

    record_sequence: str
    server_transaction_id: str
    table_name: str
    column_types: msgspec.Raw
    mod_type: str
    value_capture_type: str
    transaction_tag: str = ""
    #: The mods in the seed's form, or in the compact one (see changestream.streams.mods).
    mods: msgspec.Raw = msgspec.Raw()
    mod_columns: msgspec.Raw = msgspec.Raw()
    mod_values: msgspec.Raw = msgspec.Raw()

    @property
    def compact(self) -> bool:
        """Whether the mods are stored in the compact form."""
        return len(self.mod_columns) > 0


_decode_header = msgspec.json.Decoder(StoredHeader).decode


def stored_header(payload: bytes) -> StoredHeader | None:
    """The header of a stored record holding its mods in one of the two forms (None for any
    other payload, or one holding a control character, which DuckDB escapes in other digits
    than ``orjson``)."""
    if _ESCAPED_CONTROL in payload:
        return None
    try:
        header = _decode_header(payload)
    except msgspec.MsgspecError:
        return None
    seed, compact = len(header.mods) > 0, header.compact
    return header if seed != compact and compact == (len(header.mod_values) > 0) else None


@dataclass(slots=True)
class ArrowEventColumns:
    """Events of one table, in order: ``lines`` their JSON lines; ``values`` the replica's
    columns of their rows, in the table's column order; ``sort_key_columns`` their sort keys
    as four columns; ``uuids`` and ``deleted`` theirs."""

    first: Event
    lines: pa.Array
    values: list[pa.Array]
    sort_key_columns: tuple[pa.Array, pa.Array, pa.Array, pa.Array]
    uuids: pa.Array
    deleted: pa.Array

    def __len__(self) -> int:
        return len(self.lines)


def connect() -> Any:
    """A DuckDB connection in memory for :class:`StoredColumns`: on one thread (a task has
    one core), TIMESTAMP values in UTC."""
    import duckdb

    connection = duckdb.connect()
    connection.execute("SET threads = 1")
    connection.execute("SET TimeZone = 'UTC'")
    return connection


def accepts_table(table: Table) -> bool:
    """Whether the events of ``table`` can be built here (its columns' types and names)."""
    return all(
        c.type.code in _TYPES and _PLAIN_NAME.fullmatch(c.name) is not None for c in table.columns
    )


class StoredColumns:
    """Builds the CDC events of one table's stored records read at one time, a chunk of
    records at a time (what they share, computed once)."""

    def __init__(
        self,
        connection: Any,
        stream_name: str,
        database: str,
        table: Table,
        read_us: int,
        origin: TableOrigin | None = None,
    ) -> None:
        self._connection = connection
        self._build = CdcBuilder(stream_name, database, table, read_us, origin)
        self._table = table
        self._names = frozenset(c.name for c in table.columns)
        self._newest_added = max(
            (c.added_at for c in table.columns if c.added_at is not None), default=-1
        )
        self._keys = frozenset(table.primary_key)
        self._sql = _query(table)
        self._stored_nulls = dict.fromkeys(self._build.plan.names)
        self._shapes: dict[bytes, frozenset[str]] = {}
        self._positions: dict[tuple[bytes, bool], list[int | None] | None] = {}

    def accepts(self, commit_ts: int, header: StoredHeader) -> bool:
        """Whether the record is built here: whole rows of the table as it is now, with the
        table's columns (no column added since or dropped)."""
        if header.mod_type not in CHANGE_TYPES or header.value_capture_type not in WHOLE_ROWS:
            return False
        if commit_ts < self._newest_added:
            return False
        shape = bytes(header.column_types)
        names = self._shapes.get(shape)
        if names is None:
            names = self._shapes[shape] = frozenset(c["name"] for c in orjson.loads(shape))
        # A DELETE of a row written before a column was added lacks it, and needs none.
        deleted = header.mod_type == "DELETE"
        if names != self._names and not (deleted and names <= self._names):
            return False
        return not header.compact or self._compact_positions(header) is not None

    def _compact_positions(self, header: StoredHeader) -> list[int | None] | None:
        """Where each of the table's columns is in a compact record's rows of values (from
        1; None: not there, a DELETE's column without an old value), or None when its mods
        are not whole rows of the table (the Python path then says what is wrong)."""
        deleted = header.mod_type == "DELETE"
        shape = (bytes(header.mod_columns), deleted)
        if shape in self._positions:
            return self._positions[shape]
        keys, new, old = orjson.loads(shape[0])
        values = old if deleted else new
        fits = set(keys) == self._keys and len(set(keys)) == len(keys)
        fits = fits and len(set(values)) == len(values)
        non_key = self._names - self._keys
        fits = fits and (set(values) <= non_key if deleted else set(values) == non_key)
        positions: list[int | None] | None = None
        if fits:
            at = {name: i for i, name in enumerate(keys, 1)}
            skip = len(keys) + (len(new) if deleted else 0)
            at.update({name: skip + i for i, name in enumerate(values, 1)})
            positions = [at.get(c.name) for c in self._table.columns]
        self._positions[shape] = positions
        return positions

    def build(self, records: Sequence[tuple[int, StoredHeader]]) -> ArrowEventColumns | None:
        """The events of ``records`` (each :meth:`accepts`), or None when a name holds a
        template's stand-in (see :func:`~changestream.datastream.event_columns.template_of`)
        or a value does not convert (a malformed DATE, TIMESTAMP or BYTES text)."""
        if not records:
            return None
        first: Event | None = None
        columns: dict[str, list[Any]] = {
            name: []
            for name in ("mods", "mod_values", "uuid_head", "head", "p0", "p1", "p2", "tail")
        }
        deleted: list[bool] = []
        positions: list[list[int | None]] = [[] for _ in self._table.columns]
        timestamps: list[int] = []
        sequences: list[int] = []
        build = self._build
        nulls = self._stored_nulls
        stream, obj = build.stream_name, build.object
        for ts, header in records:
            tx_id, sequence, mod_type = (
                header.server_transaction_id,
                header.record_sequence,
                header.mod_type,
            )
            change = Change(0, "", nulls, nulls, {})
            (event,) = build.events(ts, tx_id, sequence, mod_type, header.transaction_tag, [change])
            template = template_of(event)
            if template is None:
                return None
            if first is None:
                first = event
            head, parts, tail = template
            uuid_head = orjson.dumps(("cdc", stream, obj, ts, tx_id, sequence))[:-1] + b","
            if header.compact:
                columns["mods"].append(None)
                columns["mod_values"].append(bytes(header.mod_values))
                found = self._compact_positions(header)
                assert found is not None
            else:
                columns["mods"].append(bytes(header.mods))
                columns["mod_values"].append(None)
                found = [None] * len(positions)
            for column, at in zip(positions, found, strict=True):
                column.append(at)
            deleted.append(mod_type == "DELETE")
            columns["uuid_head"].append(UUID_NAMESPACE_BYTES + uuid_head)
            columns["head"].append(head)
            columns["p0"].append(parts[0])
            columns["p1"].append(parts[1])
            columns["p2"].append(parts[2] if len(parts) > 2 else None)
            columns["tail"].append(tail)
            timestamps.append(ts)
            sequences.append(event.sort_keys[2])
        assert first is not None
        source = pa.table(
            {
                "rec": pa.array(range(len(records)), pa.int64()),
                "deleted": pa.array(deleted, pa.bool_()),
                "uuid_head": pa.array(columns.pop("uuid_head"), pa.binary()),
                **{
                    name: pa.array(values, pa.binary()).cast(pa.string())
                    for name, values in columns.items()
                },
                **{f"pos{i}": pa.array(column, pa.int32()) for i, column in enumerate(positions)},
            }
        )
        import duckdb

        self._connection.register("stored_records", source)
        try:
            out = self._connection.sql(self._sql).to_arrow_table()
        except duckdb.ConversionException:
            return None  # a value DuckDB does not read: Python's path says what is wrong
        finally:
            self._connection.unregister("stored_records")
        recs, indexes = out["rec"].combine_chunks(), out["idx"].combine_chunks()
        if not _in_order(recs, indexes):
            # The records of the other form follow: the events back in their records' order.
            out = out.take(pc.sort_indices(out, [("rec", "ascending"), ("idx", "ascending")]))
            recs, indexes = out["rec"].combine_chunks(), out["idx"].combine_chunks()
            if not _in_order(recs, indexes):
                raise RuntimeError("DuckDB returned a stored record's mods twice or not at all")
        return ArrowEventColumns(
            first=first,
            lines=out["line"].combine_chunks().cast(pa.binary()),
            values=[out[f"r{i}"].combine_chunks() for i in range(len(self._table.columns))],
            sort_key_columns=(
                pa.array(timestamps, pa.int64()).take(recs),
                pa.repeat(CDC_RANK, out.num_rows).cast(pa.int64()),
                pa.array(sequences, pa.int64()).take(recs),
                indexes,
            ),
            uuids=out["event_uuid"].combine_chunks(),
            deleted=out["deleted"].combine_chunks(),
        )


def _in_order(recs: pa.Array, indexes: pa.Array) -> bool:
    """Whether (record, mod index) pairs rise strictly: each record's mods in order, then
    the next record's."""
    if len(recs) < 2:
        return True
    rec, idx = recs.to_numpy(), indexes.to_numpy()
    step = rec[1:] - rec[:-1]
    return bool(((step == 1) & (idx[1:] == 0) | (step == 0) & (idx[1:] == idx[:-1] + 1)).all())


@functools.lru_cache(maxsize=256)
def _query(table: Table) -> str:
    """The SQL that builds the events of ``table``'s records registered as
    ``stored_records`` (see :meth:`StoredColumns.build`): those of each form in their order
    (no ORDER BY: one thread keeps the order of its input, which ``build`` checks), the
    seed's form first."""
    keys = set(table.primary_key)
    fields = {c.name: _TYPES[c.type.code][0] for c in table.columns}
    key_fields = {name: kind for name, kind in fields.items() if name in keys}
    value_fields = {name: kind for name, kind in fields.items() if name not in keys}
    mod_type = orjson.dumps(
        [{"keys": key_fields, "new_values": value_fields, "old_values": value_fields}]
    ).decode()
    seed: list[str] = []
    compact: list[str] = []
    payload: list[str] = []
    replica: list[str] = []
    for i, column in enumerate(table.columns):
        name, kind = column.name, fields[column.name]
        if name in keys:
            seed.append(f"m.keys.{name} AS c{i}")
        else:
            seed.append(
                f"CASE WHEN deleted THEN m.old_values.{name} ELSE m.new_values.{name} END AS c{i}"
            )
        compact.append(f"CAST(v[pos{i}] AS {kind}) AS c{i}")
        separator = "{" if i == 0 else ","
        payload.append(_sql_text(separator + orjson.dumps(name).decode() + ":"))
        _, event_json, replica_value = _TYPES[column.type.code]
        payload.append(f"coalesce({event_json.format(v=f'c{i}')}, 'null')")
        replica.append(f"{replica_value.format(v=f'c{i}')} AS r{i}")
    shared = "rec, deleted, uuid_head, head, p0, p1, p2, tail"
    positions = ", ".join(f"pos{i}" for i in range(len(table.columns)))
    return f"""
WITH seed AS (
    SELECT {shared}, from_json(mods, {_sql_text(mod_type)}) AS ms
    FROM stored_records WHERE mods IS NOT NULL
), seed_mods AS (
    SELECT * EXCLUDE (ms), unnest(ms) AS m, generate_subscripts(ms, 1) - 1 AS idx FROM seed
), compact AS (
    SELECT {shared}, {positions}, from_json(mod_values, '[["VARCHAR"]]') AS vs
    FROM stored_records WHERE mod_values IS NOT NULL
), compact_mods AS (
    SELECT * EXCLUDE (vs), unnest(vs) AS v, generate_subscripts(vs, 1) - 1 AS idx FROM compact
), mods AS (
    SELECT {shared}, idx, {", ".join(seed)} FROM seed_mods
    UNION ALL
    SELECT {shared}, idx, {", ".join(compact)} FROM compact_mods
), hashed AS (
    SELECT *, idx::VARCHAR AS idx_text,
        sha1(uuid_head || (idx::VARCHAR || ']')::BLOB) AS h
    FROM mods
)
SELECT rec, idx, deleted, {", ".join(replica)},
    -- concat() in one call, not ||: each || makes a string (a line cost 1.2 µs more).
    concat(
        substr(h, 1, 8), '-', substr(h, 9, 4), '-5', substr(h, 14, 3), '-',
        substr('89ab89ab89ab89ab', ('0x' || substr(h, 17, 1))::INTEGER + 1, 1),
        substr(h, 18, 3), '-', substr(h, 21, 12)
    ) AS event_uuid,
    concat(
        head, event_uuid, p0, idx_text, p1, idx_text || p2, {", ".join(payload)}, '}}', tail
    ) AS line
FROM hashed
"""


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
