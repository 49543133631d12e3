"""Handlers of what the web console reads beyond the other endpoints: the caller's scopes, a
database's activity, a lineage window, consumer groups with lag, a stream's errors, and a live
tail of a change stream. Each is an ordinary endpoint, documented in ``/openapi.json``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from changestream.client.lease_table import describe_leases
from changestream.clock import format_ts, now_us, parse_ts
from changestream.datastream.catalog import StreamCatalog
from changestream.embedded.database import EmbeddedDatabase, store_of
from changestream.errors import InvalidArgument
from changestream.server._streaming import LineStream
from changestream.server.app import ServerState
from changestream.server.auth import ANONYMOUS, SCOPES, Principal
from changestream.server.console import INDEX_HTML
from changestream.server.routes.common import on_db, path_part, stream_lines, timestamp_query
from changestream.streams import partitions
from changestream.streams.records import DataChangeRecord
from changestream.watch.merge import PartitionMerge
from changestream.wire import models
from changestream.wire.records import record_line

#: Partitions a lineage window holds at most unless ``?limit=`` says otherwise.
LINEAGE_LIMIT = 2000
#: How long the tail waits for records before it looks whether its client is still there.
_TAIL_POLL_S = 0.5
_TAIL_BATCH = 256
_MOD_TYPES = ("INSERT", "UPDATE", "DELETE")


async def console(request: Request, state: ServerState, principal: Principal, _: None) -> Response:
    return HTMLResponse(INDEX_HTML, headers={"Cache-Control": "no-store"})


async def whoami(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Identity:
    return models.Identity(
        scopes=[s for s in SCOPES if s in principal.scopes],
        authenticated=principal.name != ANONYMOUS,
    )


async def overview(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.DatabaseOverview:
    name = path_part(request, "database")
    reads, lags = state.metrics.open_reads(name)

    def work(db: EmbeddedDatabase) -> models.DatabaseOverview:
        store = store_of(db)
        window = store.split_policy().window_seconds
        now = store.now()
        last = store.last_commit_ts()
        # Every stream has one partition per live split: count them once, build none.
        live = len(store.live_splits())
        return models.DatabaseOverview(
            database=name,
            now=format_ts(now),
            last_commit_timestamp=format_ts(last) if last else None,
            write_rate=round(sum(store.write_rates(window).values()), 3),
            window_seconds=window,
            streams=[
                models.StreamActivity(
                    name=stream,
                    live_partitions=live,
                    open_reads=reads[stream],
                    reader_lag_seconds=lags.get(stream),
                )
                for stream in sorted(store.catalog().streams)
            ],
        )

    result: models.DatabaseOverview = await on_db(request, state, work)
    return result


async def lineage(request: Request, state: ServerState, principal: Principal, _: None) -> Any:
    stream = path_part(request, "stream")
    query = request.query_params
    start, end = (_timestamp(query.get(name), name) for name in ("start", "end"))
    limit = _count(query.get("limit"), "limit", LINEAGE_LIMIT)

    def work(db: EmbeddedDatabase) -> models.Lineage:
        window = partitions.lineage(store_of(db), stream, start, end, limit)
        return models.Lineage(
            stream=stream,
            created=format_ts(window.created),
            start=format_ts(window.start),
            end=format_ts(window.end),
            total=window.total,
            key_ranks=window.key_ranks,
            partitions=[
                models.LineagePartitionBody(
                    **e.partition.to_dict(),
                    record_count=e.record_count,
                    key_rank_start=e.key_rank_start,
                    key_rank_end=e.key_rank_end,
                )
                for e in window.entries
            ],
        )

    return await on_db(request, state, work)


async def consumer_status(
    request: Request, state: ServerState, principal: Principal, _: None
) -> Any:
    stream = path_part(request, "stream")

    def work(db: EmbeddedDatabase) -> models.ConsumerStatuses:
        now = now_us()
        groups = []
        for consumer in db.lease_consumers(stream):
            described = describe_leases(db.leases(stream, consumer).list_leases(), now)
            groups.append(
                models.ConsumerStatus(
                    consumer=consumer,
                    leases=[
                        models.LeaseStatusBody(
                            partition=s.lease.status_value,
                            parents=list(s.lease.parent_shard_ids),
                            owner=s.lease.lease_owner,
                            stealer=s.lease.lease_stealer,
                            checkpoint=None if s.checkpoint is None else str(s.checkpoint),
                            lag_seconds=None if s.lag_seconds is None else round(s.lag_seconds, 3),
                            state=s.state,
                            start_timestamp=format_ts(s.lease.start_timestamp),
                        )
                        for s in described
                    ],
                    workers=dict(
                        Counter(
                            s.lease.lease_owner
                            for s in described
                            if s.lease.lease_owner is not None and s.state != "finished"
                        )
                    ),
                )
            )
        return models.ConsumerStatuses(consumers=groups)

    return await on_db(request, state, work)


async def stream_errors(request: Request, state: ServerState, principal: Principal, _: None) -> Any:
    name = path_part(request, "stream")
    limit = _count(request.query_params.get("limit"), "limit", 20)
    found = await on_db(request, state, lambda db: StreamCatalog(db).errors(name, limit))
    return models.StreamErrors(
        errors=[models.StreamErrorBody(**error.to_dict()) for error in found]
    )


async def tail(request: Request, state: ServerState, principal: Principal, _: None) -> Response:
    stream_name = path_part(request, "stream")
    name = path_part(request, "database")
    query = request.query_params
    start, end = (_timestamp(query.get(name), name) for name in ("start", "end"))
    table, key = query.get("table") or None, query.get("key") or None
    mod_type = (query.get("mod_type") or "").upper() or None
    if mod_type is not None and mod_type not in _MOD_TYPES:
        raise InvalidArgument(f"mod_type must be one of {', '.join(_MOD_TYPES)}, got {mod_type!r}")
    entry = state.metrics.stream_opened(name, stream_name)

    def open_items(line_stream: LineStream) -> Iterator[dict[str, Any]]:
        db = state.databases.get(name)
        store = store_of(db)
        created = store.catalog().stream(stream_name).created_ts  # unknown: an error response
        begin = store.now() if start is None else max(start, created)
        merge = PartitionMerge(db, stream_name, begin, _TAIL_BATCH * 4, now=store.now)
        return _tail_lines(merge, line_stream, state, end, _Filter(table, mod_type, key))

    def render(line: dict[str, Any]) -> bytes:
        entry.records[line["type"]] += 1
        entry.position = line["timestamp_us"]
        return orjson.dumps(line) + b"\n"

    return await stream_lines(request, state, principal, entry, open_items, render)


@dataclass(frozen=True, slots=True)
class _Filter:
    """Which records the tail sends: of ``table``, of ``mod_type``, with only the mods whose
    keys (as JSON) contain ``key``; None matches everything."""

    table: str | None
    mod_type: str | None
    key: str | None

    def line(self, record: DataChangeRecord) -> dict[str, Any] | None:
        if self.table is not None and record.table_name != self.table:
            return None
        if self.mod_type is not None and record.mod_type != self.mod_type:
            return None
        line = record_line(record)
        if self.key is not None:
            key = self.key
            mods = [m for m in line["record"]["mods"] if key in orjson.dumps(m["keys"]).decode()]
            if not mods:
                return None
            line["record"]["mods"] = mods
        return line


def _tail_lines(
    merge: PartitionMerge,
    line_stream: LineStream,
    state: ServerState,
    end: int | None,
    wanted: _Filter,
) -> Iterator[dict[str, Any]]:
    """The tail's lines until ``end`` (every record at or before it sent), the client leaves or
    the server stops."""
    try:
        while not line_stream.stopped and not state.closing:
            for _, record in merge.take(_TAIL_BATCH, _TAIL_POLL_S):
                if end is not None and record.commit_timestamp > end:
                    return
                assert isinstance(record, DataChangeRecord)  # the merge reads records whole
                line = wanted.line(record)
                if line is not None:
                    yield line
            if end is not None and merge.safe_through() >= end:
                return
    finally:
        merge.close()


def _timestamp(text: str | None, name: str) -> int | None:
    value = timestamp_query(text)
    return None if value is None else parse_ts(value, name)


def _count(text: str | None, name: str, default: int) -> int:
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise InvalidArgument(f"{name} must be a positive integer, got {text!r}")
    return int(text)
