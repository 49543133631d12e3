"""The events of one table's change records or backfill rows as columns, without an
:class:`Event` per change.

A pipeline task needs two things of each change: its event as its file holds it and what the
replica stages (the decoded row, ``sort_keys``, ``uuid``, whether it deletes). Building an
:class:`Event` and then its JSON object per change cost about a third of a task's CPU; here
one event per change record (or backfill chunk) is built, and what its changes share is
encoded once. A JSON line is the record's *template* — that event written as JSON with
stand-ins for what differs between its changes (the uuid, the mod index, the payload) — with
each one's own parts put in; the template comes from :meth:`Event.to_json_dict`, so a line is
byte for byte what :class:`~changestream.datastream.files.EventFile` writes for the same
event. An Avro record is laid out the same way by :meth:`AvroPlan.encode_record
<changestream.datastream._avro.AvroPlan>`. ``tests/test_event_columns.py`` checks both
against the event path over generated records and every metadata flavor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from changestream.datastream._avro import avro_plan_of
from changestream.datastream.events import (
    CDC_RANK,
    BackfillBuilder,
    CdcBuilder,
    Change,
    Event,
    TablePlan,
    encoded_values,
    fitted_mods,
    plan_of,
)
from changestream.datastream.layout import EXTENSIONS
from changestream.ddl.schema import Table
from changestream.errors import InvalidArgument
from changestream.streams.origins import TableOrigin
from changestream.streams.records import DataChangeRecord

# Stand-ins no event holds: a string with a NUL (JSON writes it escaped) and an index past
# any record's mods; a template that holds them anywhere else is not used (see template_of).
_UUID: Final = "\x00changestream-uuid\x00"
_PAYLOAD: Final = "\x00changestream-payload\x00"
_INDEX: Final = 7_346_019_582_113_904_771
_UUID_JSON: Final = orjson.dumps(_UUID)[1:-1]
_PAYLOAD_JSON: Final = orjson.dumps(_PAYLOAD)
_INDEX_JSON: Final = b"%d" % _INDEX


@dataclass(slots=True)
class EventColumns:
    """Events of one table, in order, as columns.

    ``first`` is the first of them as an :class:`Event` (what files need to know of their
    lane: object, schema key, table, read time); ``encoded`` each in the encoding of a file
    format (see :func:`record_columns`; empty when none was asked for).
    """

    first: Event
    encoded: list[bytes] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: The events' ``sort_keys`` as four columns (one list per place in them).
    sort_key_columns: tuple[list[int], list[int], list[int], list[int]] = field(
        default_factory=lambda: ([], [], [], [])
    )
    uuids: list[str] = field(default_factory=list)
    deleted: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.uuids)

    def add(
        self,
        first: Event,
        changes: Sequence[Change],
        encoding: str | None,
        payloads: Callable[[], Iterable[dict[str, Any]]],
        events: Callable[[], list[Event]],
    ) -> None:
        """Add the events of ``changes``, ``first`` being the event of the first of them and
        all of them alike but for their :class:`Change`; ``payloads`` gives their payloads
        in event JSON form and ``events`` them all, should a JSON template not serve."""
        if encoding == "avro":
            self.encoded += avro_plan_of(first).encode_record(first, changes)
        elif encoding in EXTENSIONS:
            template = template_of(first)
            if template is None:
                self.encoded += [_line(event) for event in events()]
            else:
                self.encoded += _lines(template, changes, payloads())
        count = len(changes)
        # The events differ in their mod index only.
        timestamps, ranks, sequences, indexes = self.sort_key_columns
        timestamp, rank, sequence, _ = first.sort_keys
        timestamps += [timestamp] * count
        ranks += [rank] * count
        sequences += [sequence] * count
        indexes += [change.mod_index for change in changes]
        self.rows += [change.row for change in changes]
        self.uuids += [change.uuid for change in changes]
        self.deleted += [first.is_deleted] * len(changes)


def record_columns(
    stream_name: str,
    database: str,
    table: Table,
    records: Iterable[DataChangeRecord],
    read_timestamp_us: int,
    origin: TableOrigin | None = None,
    *,
    encoding: str | None = "json",
) -> EventColumns | None:
    """:func:`~changestream.datastream.events.record_events` of ``records`` as
    :class:`EventColumns` (None when they hold no mod), each event encoded as a file of
    ``encoding`` holds it: ``json`` (or ``json.gz``) its JSON line, ``avro`` its Avro record
    (None: not encoded)."""
    _check_encoding(encoding)
    build = CdcBuilder(stream_name, database, table, read_timestamp_us, origin)
    out: EventColumns | None = None
    for record, mods in fitted_mods(table, records):
        ts, tx_id, sequence, mod_type, tag = (
            record.commit_timestamp,
            record.server_transaction_id,
            record.record_sequence,
            record.mod_type,
            record.transaction_tag,
        )
        changes = list(build.changes(ts, tx_id, sequence, mod_type, mods))
        if not changes:
            continue
        (first,) = build.events(ts, tx_id, sequence, mod_type, tag, changes[:1])
        if out is None:
            out = EventColumns(first)
        out.add(
            first,
            changes,
            encoding,
            functools.partial(_cdc_payloads, plan_of(first), changes),
            functools.partial(build.events, ts, tx_id, sequence, mod_type, tag, changes),
        )
    return out


def backfill_columns(
    stream_name: str,
    database: str,
    table: Table,
    rows: Iterable[tuple[Any, ...]],
    snapshot_timestamp_us: int,
    read_timestamp_us: int,
    origin: TableOrigin | None = None,
    *,
    encoding: str | None = "json",
) -> EventColumns | None:
    """:func:`~changestream.datastream.events.backfill_events` of ``rows`` as
    :class:`EventColumns` (None when there is none), encoded as :func:`record_columns`
    says."""
    _check_encoding(encoding)
    build = BackfillBuilder(
        stream_name, database, table, snapshot_timestamp_us, read_timestamp_us, origin
    )
    changes = list(build.changes(rows))
    if not changes:
        return None
    (first,) = build.events(changes[:1])
    out = EventColumns(first)
    # A backfill change's ``stored`` is its payload's event JSON form already.
    out.add(
        first,
        changes,
        encoding,
        lambda: (change.stored for change in changes),
        functools.partial(build.events, changes),
    )
    return out


def _check_encoding(encoding: str | None) -> None:
    if encoding is not None and encoding not in EXTENSIONS:
        raise InvalidArgument(
            f"encoding must be one of {', '.join(sorted(EXTENSIONS))} or None, got {encoding!r}"
        )


def _cdc_payloads(plan: TablePlan, changes: Sequence[Change]) -> Iterator[dict[str, Any]]:
    """The event JSON payloads of CDC ``changes`` of a table with ``plan``."""
    if not plan.json_encoders:
        # Every value of the decoded row is its own event JSON (no encoder would change it).
        return (change.row for change in changes)
    encoders = plan.record_to_event
    if encoders:
        return (encoded_values(change.stored, encoders) for change in changes)
    return (change.stored for change in changes)


def _lines(
    template: tuple[bytes, list[bytes], bytes],
    changes: Sequence[Change],
    payloads: Iterable[dict[str, Any]],
) -> list[bytes]:
    """The JSON lines of events alike but for their :class:`Change` (whose payloads, in
    event JSON form, are ``payloads``), from the :func:`template_of` of one of them."""
    head, index_parts, tail = template
    return [
        b"".join(
            (
                head,
                change.uuid.encode(),
                (b"%d" % change.mod_index).join(index_parts),
                orjson.dumps(payload),
                tail,
            )
        )
        for change, payload in zip(changes, payloads, strict=True)
    ]


def template_of(event: Event) -> tuple[bytes, list[bytes], bytes] | None:
    """``event``'s JSON line cut where events alike differ: the part before the uuid, the
    parts between which the mod index goes (a CDC event's, in its sort keys and metadata),
    the part after the payload. None when a stand-in shows up where it was not put (a name
    or value that holds one)."""
    data = event.to_json_dict()
    data["uuid"] = _UUID
    data["payload"] = _PAYLOAD
    metadata = data["source_metadata"]
    indexes = 0
    if event.sort_keys[1] == CDC_RANK:
        data["sort_keys"][3] = _INDEX
        indexes += 1
        if "mod_index" in metadata:
            metadata["mod_index"] = _INDEX
            indexes += 1
    line = orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
    if (
        line.count(_UUID_JSON) != 1
        or line.count(_PAYLOAD_JSON) != 1
        or line.count(_INDEX_JSON) != indexes
    ):
        return None
    head, rest = line.split(_UUID_JSON)
    middle, tail = rest.split(_PAYLOAD_JSON)
    return head, middle.split(_INDEX_JSON), tail


def _line(event: Event) -> bytes:
    return orjson.dumps(event.to_json_dict(), option=orjson.OPT_APPEND_NEWLINE)
