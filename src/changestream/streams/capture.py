"""Change capture: a committing transaction's row changes become data change records.

The engine's own streams (value capture type ``OLD_AND_NEW_ROW``, see
:data:`~changestream.ddl.schema.SYSTEM_VALUE_CAPTURE_TYPE`) differ from user streams in three
ways, so watch() can build whole pre- and post-images and drop/rename events:

- every UPDATE and DELETE carries the full old row and every UPDATE the full new row;
- a ``replace`` of an existing row is recorded with mod type ``REPLACE`` instead of ``UPDATE``;
- a dropped or renamed table becomes a system record (``is_system_transaction: true``, empty
  ``transaction_tag`` and ``column_types``) in the split holding the start of the table's key
  range, committed in the DDL's SQLite transaction: ``mod_type`` is ``DROP_TABLE`` or
  ``RENAME_TABLE``, and its one mod is ``{"keys": {}, "old_values": {"table_name": <old>},
  "new_values": {"table_name": <new>}}`` (``new_values`` empty for a drop).

User streams never see any of this: their records keep the seed's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from changestream.codecs import identity, record_encoder
from changestream.ddl.schema import SYSTEM_VALUE_CAPTURE_TYPE, ChangeStream, Table
from changestream.store.catalog import Catalog, StreamEntry
from changestream.store.changes import (
    CommitContext,
    InsertBatch,
    LogRow,
    RowChange,
    SchemaChange,
)
from changestream.streams.mods import COLUMNS_FIELD, VALUES_FIELD, compact_columns
from changestream.streams.records import sequence_text

_OLD_FOR_UPDATE = {"OLD_AND_NEW_VALUES", "NEW_ROW_AND_OLD_VALUES"}
_FULL_NEW_ROW = {"NEW_ROW", "NEW_ROW_AND_OLD_VALUES", SYSTEM_VALUE_CAPTURE_TYPE}
_OLD_FOR_DELETE = {"OLD_AND_NEW_VALUES", "NEW_ROW_AND_OLD_VALUES", SYSTEM_VALUE_CAPTURE_TYPE}


#: Turns rows as an insert wrote them into compact mods (see :mod:`changestream.streams.mods`).
RowBuilder = Callable[[list[tuple[Any, ...]]], list[tuple[Any, ...]]]
#: A mod as capture collects it: the seed's dict, or a compact row of the plan's layout.
CollectedMod = dict[str, Any] | tuple[Any, ...]
#: (stream, table, mod_type, split): the mods of one record.
GroupKey = tuple[int, str, str, int]


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one change stream captures one table: tracked columns and their encoders."""

    stream_id: int
    capture_type: str
    key_names: tuple[str, ...]
    key_encoders: tuple[Callable[[Any], Any], ...]
    tracked: tuple[str, ...]
    encoders: dict[str, Callable[[Any], Any]]
    plain: frozenset[str]
    plain_keys: bool
    tracked_plain: bool
    column_types: dict[str, dict[str, Any]]
    ordinals: dict[str, int]
    #: An INSERT record's ``column_types`` and compact ``mod_columns``: keys, tracked columns.
    insert_column_types: list[dict[str, Any]]
    compact_columns: list[list[str]]
    #: What a new row holds in each tracked column a write leaves out (its DEFAULT or NULL).
    defaults: dict[str, Any]
    #: The mod types the stream leaves out (``exclude_insert`` and the like).
    excluded: frozenset[str]
    allow_txn_exclusion: bool
    exclude_ttl_deletes: bool
    row_builders: dict[tuple[str, ...], RowBuilder] = field(default_factory=dict)


def _plan(entry: StreamEntry, table: Table) -> _Plan | None:
    stream: ChangeStream = entry.definition
    target = stream.target_for(table.name)
    if target is None:
        return None
    non_key = [c.name for c in table.non_key_columns]
    tracked = tuple(
        non_key if target.columns is None else [c for c in non_key if c in target.columns]
    )
    column_types = _column_types(table)
    inserted = sorted(
        [*table.primary_key, *tracked], key=lambda name: column_types[name]["ordinal_position"]
    )
    return _Plan(
        stream_id=entry.stream_id,
        capture_type=stream.value_capture_type,
        key_names=table.primary_key,
        key_encoders=tuple(record_encoder(c.type) for c in table.key_columns),
        tracked=tracked,
        encoders={c.name: record_encoder(c.type) for c in table.columns},
        plain=frozenset(c.name for c in table.columns if record_encoder(c.type) is identity),
        plain_keys=all(record_encoder(c.type) is identity for c in table.key_columns),
        tracked_plain=all(record_encoder(table.column(n).type) is identity for n in tracked),  # type: ignore[union-attr]
        column_types=column_types,
        ordinals={c.name: c.ordinal for c in table.columns},
        insert_column_types=[column_types[name] for name in inserted],
        compact_columns=compact_columns(table.primary_key, tracked, ()),
        defaults={c.name: c.default for c in table.columns if c.name in tracked},
        excluded=stream.excluded_mod_types,
        allow_txn_exclusion=stream.allow_txn_exclusion,
        exclude_ttl_deletes=stream.exclude_ttl_deletes,
    )


def _values(plan: _Plan, row: dict[str, Any], names: tuple[str, ...] | list[str]) -> dict[str, Any]:
    values = {name: row[name] for name in names}
    if names is not plan.tracked or not plan.tracked_plain:
        for name in names:
            if name not in plan.plain:
                values[name] = plan.encoders[name](values[name])
    return values


def _mod(plan: _Plan, change: RowChange) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """The mod type and the new and old values one stream records for one row change."""
    before, after, capture = change.before, change.after, plan.capture_type
    if before is None and after is not None:
        return "INSERT", _values(plan, after, plan.tracked), {}
    if before is not None and after is not None:
        changed = [name for name in plan.tracked if name in change.written]
        if not changed:
            return None
        if capture == SYSTEM_VALUE_CAPTURE_TYPE:
            old = _values(plan, before, plan.tracked)
            mod_type = "REPLACE" if change.replaced else "UPDATE"
            return mod_type, _values(plan, after, plan.tracked), old
        new = _values(plan, after, plan.tracked if capture in _FULL_NEW_ROW else changed)
        old = _values(plan, before, changed) if capture in _OLD_FOR_UPDATE else {}
        return "UPDATE", new, old
    if before is not None:
        old = _values(plan, before, plan.tracked) if capture in _OLD_FOR_DELETE else {}
        return "DELETE", {}, old
    return None


class ChangeCapture:
    """The capture function the store calls inside every committing transaction."""

    def __init__(self) -> None:
        self._plans: dict[tuple[int, str], list[_Plan]] = {}
        self._plans_for: Catalog | None = None

    def _plans_of(self, catalog: Catalog, table: Table) -> list[_Plan]:
        if self._plans_for is not catalog:
            self._plans = {}
            self._plans_for = catalog
        key = (id(table), table.name)
        plans = self._plans.get(key)
        if plans is None:
            found = (_plan(entry, table) for entry in catalog.streams.values())
            plans = self._plans[key] = [p for p in found if p is not None]
        return plans

    def __call__(self, context: CommitContext) -> list[LogRow]:
        # (stream, table, mod_type, split) → mods, in first-seen order: one record each.
        groups: dict[GroupKey, list[CollectedMod]] = {}
        # The groups whose mods are all compact rows (they came from insert batches only).
        compact: set[GroupKey] = set()
        plans_by_table: dict[str, list[_Plan]] = {}
        plan_of: dict[tuple[int, str], _Plan] = {}
        for change in context.changes:
            table = change.codec.table if isinstance(change, InsertBatch) else change.table
            name = table.name
            plans = plans_by_table.get(name)
            if plans is None:
                plans = self._plans_of(context.catalog, table)
                if context.excluded_from_streams:
                    plans = [p for p in plans if not p.allow_txn_exclusion]
                if context.row_deletion:
                    plans = [p for p in plans if not p.exclude_ttl_deletes]
                plans_by_table[name] = plans
                for plan in plans:
                    plan_of[(plan.stream_id, name)] = plan
            if isinstance(change, InsertBatch):
                for plan in plans:
                    if "INSERT" not in plan.excluded:
                        _capture_batch(plan, change, groups, compact)
                continue
            before, after = change.before, change.after
            keys: dict[str, Any] | None = None
            mod: tuple[str, dict[str, Any], dict[str, Any]]
            for plan in plans:
                if before is None and after is not None and plan.tracked_plain:
                    mod = ("INSERT", {column: after[column] for column in plan.tracked}, {})
                else:
                    found = _mod(plan, change)
                    if found is None:
                        continue
                    mod = found
                if mod[0] in plan.excluded:
                    continue
                if keys is None:
                    keys = _keys(plan, change.key)
                group_key = (plan.stream_id, name, mod[0], change.split_id)
                group = groups.get(group_key)
                if group is None:
                    group = groups[group_key] = []
                else:
                    compact.discard(group_key)
                group.append({"keys": keys, "new_values": mod[1], "old_values": mod[2]})
        by_stream: dict[int, list[tuple[str, str, int, list[CollectedMod], bool]]] = {}
        for group_key, mods in groups.items():
            stream_id, name, mod_type, split_id = group_key
            by_stream.setdefault(stream_id, []).append(
                (name, mod_type, split_id, mods, group_key in compact)
            )
        rows: list[LogRow] = []
        for stream_id, records in by_stream.items():
            rows.extend(_records(context, stream_id, records, plan_of))
        if context.schema_changes:
            rows.extend(_schema_records(context))
        return rows


def _schema_records(context: CommitContext) -> list[LogRow]:
    """The system records of dropped and renamed tables, for the engine's own streams."""
    rows: list[LogRow] = []
    changes = context.schema_changes
    for entry in context.catalog.streams.values():
        stream = entry.definition
        if stream.value_capture_type != SYSTEM_VALUE_CAPTURE_TYPE:
            continue
        mine = [c for c in changes if stream.target_for(c.table) is not None]
        last_in_split = {change.split_id: sequence for sequence, change in enumerate(mine)}
        for sequence, change in enumerate(mine):
            payload = orjson.dumps(
                {
                    "record_sequence": sequence_text(sequence),
                    "server_transaction_id": context.server_transaction_id,
                    "is_last_record_in_transaction_in_partition": (
                        last_in_split[change.split_id] == sequence
                    ),
                    "table_name": change.table,
                    "column_types": _schema_columns(context, change),
                    "mods": [_schema_mod(change)],
                    "mod_type": change.kind,
                    "value_capture_type": stream.value_capture_type,
                    "number_of_records_in_transaction": len(mine),
                    "number_of_partitions_in_transaction": len(last_in_split),
                    "transaction_tag": context.transaction_tag,
                    "is_system_transaction": context.is_system_transaction,
                    "session_id": context.session_id,
                }
            )
            row = (entry.stream_id, change.split_id, context.commit_ts, sequence, payload, 1)
            rows.append(row)
    return rows


def _schema_mod(change: SchemaChange) -> dict[str, Any]:
    """The one mod of a schema record: the table's name (new and old as the change has them),
    with the change's detail on the side it adds or removes."""
    name = {"table_name": change.table}
    new: dict[str, Any] = {}
    old: dict[str, Any] = {}
    if change.kind in ("CREATE_TABLE", "ALTER_TABLE", "CREATE_INDEX"):
        new = {**name, **change.detail}
        old = name if change.kind == "ALTER_TABLE" else {}
    elif change.kind == "RENAME_TABLE":
        new, old = {"table_name": change.new_name}, name
    else:
        old = {**name, **change.detail}
    return {"keys": {}, "new_values": new, "old_values": old}


def _schema_columns(context: CommitContext, change: SchemaChange) -> list[dict[str, Any]]:
    """The columns of a created or altered table as it now is (else none)."""
    shaped = change.kind in ("CREATE_TABLE", "ALTER_TABLE")
    table = context.catalog.tables.get(change.table) if shaped else None
    return [] if table is None else list(_column_types(table).values())


def _column_types(table: Table) -> dict[str, dict[str, Any]]:
    """Each column's entry in a record's ``column_types``, by name."""
    return {
        c.name: {
            "name": c.name,
            "type": c.type.to_json(),
            "is_primary_key": c.name in table.primary_key,
            "ordinal_position": c.ordinal,
        }
        for c in table.columns
    }


def _as_written(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return rows


def _row_builder(plan: _Plan, columns: tuple[str, ...]) -> RowBuilder:
    """A function turning rows written to ``columns`` into compact INSERT mods for ``plan``:
    its keys then its tracked columns, each through its record encoder.

    Rows written in exactly that layout, with no value to encode, are stored as they are;
    otherwise a tuple display is compiled for this exact column list, with each encoder
    called in place: this is the write path's hottest loop. The generated source only holds
    integers and generated names for encoders and defaults.
    """
    if columns == plan.key_names + plan.tracked and plan.plain_keys and plan.tracked_plain:
        return _as_written
    position = {name: index for index, name in enumerate(columns)}
    namespace: dict[str, Any] = {}

    def item(name: str, encode: Callable[[Any], Any]) -> str:
        if name not in position:
            # A column the write leaves out holds its DEFAULT (or NULL), encoded once here.
            default = f"d{len(namespace)}"
            namespace[default] = encode(plan.defaults.get(name))
            return default
        if encode is identity:
            return f"r[{position[name]}]"
        encoder = f"e{len(namespace)}"
        namespace[encoder] = encode
        return f"{encoder}(r[{position[name]}])"

    items = [
        *(
            item(name, encode)
            for name, encode in zip(plan.key_names, plan.key_encoders, strict=True)
        ),
        *(item(name, plan.encoders[name]) for name in plan.tracked),
    ]
    source = (
        "def build(rows):\n    return [(" + "".join(f"{i}, " for i in items) + ") for r in rows]\n"
    )
    exec(compile(source, f"<changestream insert mods for {plan.stream_id}>", "exec"), namespace)
    built: RowBuilder = namespace["build"]
    return built


def _batch_group(
    groups: dict[GroupKey, list[CollectedMod]], compact: set[GroupKey], key: GroupKey
) -> list[CollectedMod]:
    group = groups.get(key)
    if group is None:
        group = groups[key] = []
        compact.add(key)
    return group


def _capture_batch(
    plan: _Plan,
    batch: InsertBatch,
    groups: dict[GroupKey, list[CollectedMod]],
    compact: set[GroupKey],
) -> None:
    """INSERT mods for a batch of new rows, built straight from the rows as written."""
    builder = plan.row_builders.get(batch.codec.columns)
    if builder is None:
        builder = plan.row_builders[batch.codec.columns] = _row_builder(plan, batch.codec.columns)
    mods = builder(batch.rows)
    table_name = batch.codec.table.name
    if batch.split_ids is None:
        assert batch.split_id is not None
        key = (plan.stream_id, table_name, "INSERT", batch.split_id)
        _batch_group(groups, compact, key).extend(mods)
        return
    for mod, split_id in zip(mods, batch.split_ids, strict=True):
        _batch_group(groups, compact, (plan.stream_id, table_name, "INSERT", split_id)).append(mod)


def _seed_mod(plan: _Plan, mod: CollectedMod) -> dict[str, Any]:
    """A collected mod in the seed's form (compact rows expanded)."""
    if isinstance(mod, dict):
        return mod
    keys = len(plan.key_names)
    return {
        "keys": dict(zip(plan.key_names, mod[:keys], strict=True)),
        "new_values": dict(zip(plan.tracked, mod[keys:], strict=True)),
        "old_values": {},
    }


def _keys(plan: _Plan, key: tuple[Any, ...]) -> dict[str, Any]:
    if plan.plain_keys:
        return dict(zip(plan.key_names, key, strict=True))
    return {
        name: encode(value)
        for name, encode, value in zip(plan.key_names, plan.key_encoders, key, strict=True)
    }


def _columns_of(plan: _Plan, mod_type: str, mods: list[dict[str, Any]]) -> list[str]:
    """Key columns plus every column the record's mods carry, in schema order."""
    names = set(plan.key_names)
    for mod in mods if mod_type == "UPDATE" else mods[:1]:
        names.update(mod["new_values"])
        names.update(mod["old_values"])
    return sorted(names, key=plan.ordinals.__getitem__)


def _records(
    context: CommitContext,
    stream_id: int,
    records: list[tuple[str, str, int, list[CollectedMod], bool]],
    plan_of: dict[tuple[int, str], _Plan],
) -> list[LogRow]:
    last_in_split = {split_id: sequence for sequence, (_, _, split_id, *_) in enumerate(records)}
    partitions = len(last_in_split)
    count = len(records)
    rows: list[LogRow] = []
    for sequence, (table_name, mod_type, split_id, collected, is_compact) in enumerate(records):
        plan = plan_of[(stream_id, table_name)]
        mods: dict[str, Any]
        if is_compact:
            column_types = plan.insert_column_types
            mods = {COLUMNS_FIELD: plan.compact_columns, VALUES_FIELD: collected}
        else:
            seed = [_seed_mod(plan, mod) for mod in collected]
            column_types = [plan.column_types[n] for n in _columns_of(plan, mod_type, seed)]
            mods = {"mods": seed}
        payload = orjson.dumps(
            {
                "record_sequence": sequence_text(sequence),
                "server_transaction_id": context.server_transaction_id,
                "is_last_record_in_transaction_in_partition": last_in_split[split_id] == sequence,
                "table_name": table_name,
                "column_types": column_types,
                **mods,
                "mod_type": mod_type,
                "value_capture_type": plan.capture_type,
                "number_of_records_in_transaction": count,
                "number_of_partitions_in_transaction": partitions,
                "transaction_tag": context.transaction_tag,
                "is_system_transaction": context.is_system_transaction,
                **(
                    {"session_id": context.session_id}
                    if plan.capture_type == SYSTEM_VALUE_CAPTURE_TYPE
                    else {}
                ),
            }
        )
        rows.append((stream_id, split_id, context.commit_ts, sequence, payload, len(collected)))
    return rows
