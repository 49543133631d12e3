"""The engine's objects as JSON and back: records, partitions, leases, policies and errors.

Both sides of the wire use these, so what the remote database returns is equal, field for
field, to what the embedded one returns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec
import orjson

from changestream import errors
from changestream.clock import format_ts
from changestream.store.models import Action, Lease, SplitPolicy
from changestream.streams.models import Partition
from changestream.streams.mods import seed_form
from changestream.streams.records import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
)
from changestream.streams.roles import WatchSource
from changestream.streams.stored_changes import StoredRecord, stored_change
from changestream.wire.values import decode, encode

# -- change records ---------------------------------------------------------------------------


def record_line(record: ChangeRecord) -> dict[str, Any]:
    """One NDJSON line of the read function: the record's seed JSON, its type, its partition,
    and its timestamp in microseconds (so clients need not parse the RFC 3339 text)."""
    return {
        "type": record.record_type,
        "partition_token": record.partition_token,
        "timestamp_us": record.timestamp,
        "record": record.to_dict(),
    }


@dataclass(frozen=True, slots=True)
class StoredDataChange:
    """A data change record as the change log stores it, not decoded: the server sends the
    stored JSON on as it is (``ChangeStreamReader(..., data_record=StoredDataChange)``)."""

    commit_timestamp: int
    payload: bytes
    partition_token: str

    record_type: ClassVar[str] = "data_change_record"

    @property
    def timestamp(self) -> int:
        """The commit timestamp, as every record's ``timestamp`` is its moment."""
        return self.commit_timestamp

    def line(self, seed_mods: bool = True) -> bytes:
        """The :func:`record_line` of the decoded record, as NDJSON, without building the
        record: the payload holds every field of the seed's JSON but the commit timestamp, in
        order, once its mods are in the seed's form (else as stored: ``seed_mods=False``)."""
        payload = bytes(self.payload)
        return b"".join(
            [
                b'{"type":"data_change_record","partition_token":',
                orjson.dumps(self.partition_token),
                b',"timestamp_us":',
                str(self.commit_timestamp).encode(),
                b',"record":{"commit_timestamp":"',
                format_ts(self.commit_timestamp).encode(),
                b'",',
                (seed_form(payload) if seed_mods else payload)[1:],
                b"}\n",
            ]
        )


class StreamLine(msgspec.Struct, frozen=True):
    """One NDJSON line of a streamed read as the client first decodes it: what says which
    line it is, with its ``record`` and ``error`` left as their JSON (see
    :func:`record_from_stream_line`)."""

    type: str
    partition_token: str | None = None
    timestamp_us: int = 0
    record: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


#: A read's line, decoded; raises ``msgspec.DecodeError`` on a line that is not one.
decode_stream_line = msgspec.json.Decoder(StreamLine).decode


def record_from_stream_line(line: StreamLine) -> ChangeRecord:
    """The record a :func:`record_line` line carries, from its :class:`StreamLine`. A data
    change record's JSON is decoded as the change log's payloads are (it holds their
    fields, and the line gives its commit timestamp in microseconds): one msgspec pass
    instead of a dict per JSON object, and the column types (most of a one-row record's
    bytes) decoded once per table shape. On the server benchmark's 1-mod records: 6.1 µs a
    line, against 7.8 parsed into dicts."""
    if line.type == "data_change_record":
        record = memoryview(line.record)
        return DataChangeRecord.from_payload(line.timestamp_us, record, line.partition_token or "")
    return record_from_line(
        {
            "type": line.type,
            "partition_token": line.partition_token,
            "timestamp_us": line.timestamp_us,
            "record": orjson.loads(memoryview(line.record)),
        }
    )


def stored_record_from_stream_line(line: StreamLine) -> StoredRecord:
    """:func:`record_from_stream_line`, but inserts stored compact come as
    :class:`StoredInserts`, as the embedded ``read_stored_changes`` gives them."""
    if line.type == "data_change_record":
        record = memoryview(line.record)
        return stored_change(line.timestamp_us, record, line.partition_token or "")
    return record_from_stream_line(line)


def record_from_line(line: dict[str, Any]) -> ChangeRecord:
    """The record a :func:`record_line` line carries."""
    kind = line["type"]
    data = line["record"]
    token = line["partition_token"]
    stamp = line["timestamp_us"]
    if kind == "data_change_record":
        return DataChangeRecord.from_dict(stamp, data, token)
    if kind == "heartbeat_record":
        return HeartbeatRecord(stamp, token)
    if kind == "child_partitions_record":
        return ChildPartitionsRecord(
            start_timestamp=stamp,
            record_sequence=data["record_sequence"],
            child_partitions=tuple(
                ChildPartition(c["token"], tuple(c["parent_partition_tokens"]))
                for c in data["child_partitions"]
            ),
            partition_token=token,
        )
    raise ValueError(f"unknown record type {kind!r}")


# -- partitions, leases, split policy, watch ---------------------------------------------------


def partition_to_json(partition: Partition) -> dict[str, Any]:
    """A partition with integer timestamps (``Partition.to_dict`` rounds for display)."""
    return dataclasses.asdict(partition)


def partition_from_json(data: dict[str, Any]) -> Partition:
    return Partition(
        token=data["token"],
        start_timestamp=data["start_timestamp"],
        end_timestamp=data["end_timestamp"],
        start_key=data["start_key"],
        end_key=data["end_key"],
        parent_tokens=tuple(data["parent_tokens"]),
        child_tokens=tuple(data["child_tokens"]),
        write_rate=data["write_rate"],
    )


_LEASE_FIELDS = {f.name for f in dataclasses.fields(Lease)}


def lease_to_json(lease: Lease) -> dict[str, Any]:
    return dataclasses.asdict(lease)


def lease_from_json(data: Any) -> Lease:
    """A lease from its JSON form; InvalidArgument when a field is missing or mistyped."""
    if not isinstance(data, dict) or set(data) - _LEASE_FIELDS:
        raise errors.InvalidArgument(
            f"a lease is an object with fields {', '.join(sorted(_LEASE_FIELDS))}, got {data!r}"
        )
    texts = ("status_type", "status_value", "checkpoint")
    optional = ("lease_owner", "lease_stealer")
    parents = data.get("parent_shard_ids", [])
    counters = (data.get("lease_counter", 0), data.get("start_timestamp", 0))
    if (
        any(not isinstance(data.get(name, ""), str) for name in texts)
        or "status_type" not in data
        or "status_value" not in data
        or any(not isinstance(data.get(name), str | None) for name in optional)
        or not isinstance(parents, list)
        or not all(isinstance(p, str) for p in parents)
        or any(isinstance(n, bool) or not isinstance(n, int) for n in counters)
        or any(not -(2**63) <= n < 2**63 for n in counters)
    ):
        raise errors.InvalidArgument(f"malformed lease {data!r}")
    return Lease(**{**data, "parent_shard_ids": tuple(parents)})


def policy_from_json(data: Any) -> SplitPolicy:
    """A split policy from its JSON form, checked like ``SplitPolicy(...)`` checks it."""
    if not isinstance(data, dict):
        raise errors.InvalidArgument(f"a split policy is an object, got {data!r}")
    return SplitPolicy().replace(**data)


def action_to_json(action: Action) -> dict[str, Any]:
    return {"merge": action.merge, "boundary": encode(action.boundary), "reason": action.reason}


def action_from_json(data: dict[str, Any]) -> Action:
    return Action(data["merge"], decode(data["boundary"]), data["reason"])


def watch_source_to_json(source: WatchSource) -> dict[str, Any]:
    return dataclasses.asdict(source)


# -- errors -----------------------------------------------------------------------------------


def error_to_json(exc: errors.ChangeStreamError) -> dict[str, Any]:
    """An error as the ``error`` member of a response: the name of its class (or of the
    nearest ``changestream.errors`` class it derives from) and its exact message."""
    code = next(c.__name__ for c in type(exc).__mro__ if getattr(errors, c.__name__, None) is c)
    body: dict[str, Any] = {"code": code, "message": str(exc)}
    if isinstance(exc, errors.DDLError):
        body["statement"] = exc.statement
        body["position"] = exc.position
    return body


def error_from_json(body: Any, status: int) -> errors.ChangeStreamError:
    """The ``changestream.errors`` exception an error response stands for."""
    if not isinstance(body, dict):
        return errors.ChangeStreamError(f"the server answered HTTP {status}: {body!r}")
    code = body.get("code")
    message = str(body.get("message", ""))
    cls = getattr(errors, code, None) if isinstance(code, str) else None
    if not (isinstance(cls, type) and issubclass(cls, errors.ChangeStreamError)):
        return errors.ChangeStreamError(f"the server answered HTTP {status}: {message}")
    # The message already carries what the constructor would add (DDLError's position).
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    if isinstance(exc, errors.DDLError):
        exc.statement = str(body.get("statement") or "")
        exc.position = body.get("position")
    return exc
