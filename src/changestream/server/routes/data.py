"""Handlers of tables: transactions, DDL, reads, SQL, system documents and the read function."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import msgspec
import orjson
from starlette.requests import Request
from starlette.responses import Response

from changestream.clock import parse_ts
from changestream.embedded.database import store_of
from changestream.errors import (
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
)
from changestream.server._streaming import LineStream
from changestream.server.app import ServerState
from changestream.server.auth import Principal
from changestream.server.routes.common import (
    StreamItem,
    decode_keys,
    decode_params,
    on_db,
    path_part,
    stream_lines,
    typed,
)
from changestream.store.transaction import Transaction
from changestream.streams.read import ChangeStreamReader, validate
from changestream.streams.sandbox import SqlSandbox
from changestream.wire import api, models
from changestream.wire.records import (
    StoredDataChange,
    record_line,
)
from changestream.wire.values import decode, encode

# -- transactions -------------------------------------------------------------------------


def _buffer(tx: Transaction, mutations: list[models.Mutation]) -> int:
    """Hand the wire mutations to the transaction; returns the rows they write."""
    rows = 0
    for index, mutation in enumerate(mutations):
        if mutation.op == "delete":
            keys = decode_keys(mutation.keys, f"mutation {index} keys")
            tx.delete(mutation.table, keys)
            rows += len(keys) if isinstance(keys, list) else 0
            continue
        if mutation.columns is None:
            raise InvalidArgument(f"mutation {index} ({mutation.op}) needs columns")
        values = decode(mutation.values)
        if not isinstance(values, list):
            raise InvalidArgument(f"values must be a list of rows, got {values!r}")
        getattr(tx, mutation.op)(mutation.table, mutation.columns, values)
        rows += len(values)
    return rows


def _commit(tx: Transaction, mutations: list[models.Mutation]) -> tuple[int, int]:
    """Buffer the mutations and commit; (commit timestamp, rows written). Nothing is applied
    unless everything is: a bad mutation rolls the whole transaction back."""
    try:
        rows = _buffer(tx, mutations)
        stamp = tx.commit()
    except BaseException:
        tx.rollback()
        raise
    return parse_ts(stamp), rows


async def commit(
    request: Request, state: ServerState, principal: Principal, body: models.CommitRequest
) -> models.CommitTimestamp:
    tag, mutations, key = body.tag, body.mutations, body.session
    database = path_part(request, "database")
    if key is None:
        stamp, rows = await on_db(
            request,
            state,
            lambda db: _commit(
                db.transaction(tag, body.client_session, body.exclude_txn_from_change_streams),
                mutations,
            ),
        )
    else:
        session = state.sessions.get(key, principal.name, database)
        stamp, rows = await session.call(lambda tx: _commit(tx, mutations), final=True)
        rows += session.dml_rows
    state.metrics.committed(database, rows)
    return models.CommitTimestamp(commit_timestamp=stamp)


async def execute_update(
    request: Request, state: ServerState, principal: Principal, body: models.ExecuteUpdateRequest
) -> models.ExecuteUpdateResponse:
    dml, params, key = body.dml, decode_params(body.params), body.session
    database = path_part(request, "database")
    if key is None:
        db = await on_db(request, state, lambda db: db)
        session = state.sessions.begin(
            db,
            body.tag,
            principal.name,
            database,
            body.client_session,
            body.exclude_txn_from_change_streams,
        )
        try:
            count = await session.call(lambda tx: tx.execute_update(dml, params))
        except BaseException:
            # The client has no handle on this transaction yet: nothing may stay open.
            session.abort()
            raise
    else:
        session = state.sessions.get(key, principal.name, database)
        count = await session.call(lambda tx: tx.execute_update(dml, params))
    session.dml_rows += count
    return models.ExecuteUpdateResponse(session=session.key, row_count=count)


async def rollback(
    request: Request, state: ServerState, principal: Principal, body: models.RollbackRequest
) -> models.Empty:
    try:
        session = state.sessions.get(body.session, principal.name, path_part(request, "database"))
    except FailedPrecondition:
        return models.Empty()  # already gone, so already rolled back
    await session.call(lambda tx: tx.rollback(), final=True)
    return models.Empty()


# -- DDL, reads, SQL ------------------------------------------------------------------------


async def ddl(
    request: Request, state: ServerState, principal: Principal, body: models.DdlRequest
) -> models.CommitTimestamp:
    statements = body.statements
    stamp = await on_db(request, state, lambda db: db.execute_ddl(statements), initialise=True)
    return models.CommitTimestamp(commit_timestamp=stamp)


async def read(
    request: Request, state: ServerState, principal: Principal, body: models.ReadRequest
) -> models.Rows:
    keys = None if body.keys is None else decode_keys(body.keys, "keys")
    rows = await on_db(request, state, lambda db: db.read(body.table, keys, body.columns))
    return models.Rows(rows=encode(rows))


async def read_snapshot(
    request: Request, state: ServerState, principal: Principal, body: models.ReadSnapshotRequest
) -> models.SnapshotRows:
    keys = decode(body.keys)
    found = await on_db(
        request, state, lambda db: db.read_snapshot(body.table, keys, body.columns, body.limit)
    )
    return models.SnapshotRows(rows=encode(found.rows), read_timestamp=found.read_timestamp)


async def tables(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Tables:
    found = await on_db(request, state, lambda db: db.tables())
    return models.Tables(tables=typed([t.to_catalog() for t in found], models.TableBody))


async def current_timestamp(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Timestamp:
    return models.Timestamp(
        timestamp=await on_db(request, state, lambda db: db.current_timestamp())
    )


async def change_streams(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.ChangeStreams:
    found = await on_db(request, state, lambda db: db.change_streams())
    streams = typed([s.to_catalog() for s in found], models.ChangeStreamBody)
    return models.ChangeStreams(change_streams=streams)


# -- system documents ---------------------------------------------------------------------


async def documents_list(
    request: Request, state: ServerState, principal: Principal, body: models.KindRequest
) -> models.Documents:
    found = await on_db(request, state, lambda db: db.system_documents(body.kind).values())
    return models.Documents(
        documents=[
            models.Document(name=d.name, version=d.version, body=encode(d.body)) for d in found
        ]
    )


async def documents_put(
    request: Request, state: ServerState, principal: Principal, body: models.PutDocumentRequest
) -> models.Version:
    value = decode(body.body)
    version = await on_db(
        request,
        state,
        lambda db: db.put_system_document(body.kind, body.name, value, body.expected_version),
    )
    return models.Version(version=version)


async def documents_delete(
    request: Request, state: ServerState, principal: Principal, body: models.DeleteDocumentRequest
) -> models.Deleted:
    deleted = await on_db(
        request,
        state,
        lambda db: db.delete_system_document(body.kind, body.name, body.expected_version),
    )
    return models.Deleted(deleted=deleted)


async def log_append(
    request: Request, state: ServerState, principal: Principal, body: models.AppendLogRequest
) -> models.Empty:
    entry = decode(body.entry)
    await on_db(request, state, lambda db: db.append_system_log(body.kind, body.name, entry))
    return models.Empty()


async def log_list(
    request: Request, state: ServerState, principal: Principal, body: models.ListLogRequest
) -> models.Entries:
    found = await on_db(request, state, lambda db: db.system_log(body.kind, body.name, body.limit))
    return models.Entries(entries=encode(found))


async def sql(
    request: Request, state: ServerState, principal: Principal, body: models.SqlRequest
) -> Response:
    text, params = body.sql, decode_params(body.params)
    name = path_part(request, "database")
    entry = state.metrics.stream_opened(name)
    config = state.config
    sent = 0

    def open_items(stream: LineStream) -> Iterator[tuple[str, Any]]:
        sandbox = SqlSandbox(
            max_steps=config.sql_max_steps,
            max_seconds=config.sql_max_seconds,
            max_rows=config.sql_max_rows,
            cancelled=lambda: stream.stopped or state.closing,
        )
        result = state.databases.get(name).execute_sql(text, params, sandbox=sandbox)
        return itertools.chain([("fields", result.fields)], (("row", row) for row in result))

    def render(item: tuple[str, Any]) -> bytes:
        nonlocal sent
        kind, value = item
        if kind == "row":
            entry.records["row"] += 1
            model: models.Line = models.RowLine(row=encode(value))
        else:
            model = models.FieldsLine(fields=value)
        line = msgspec.json.encode(model) + b"\n"
        sent += len(line)
        if sent > config.sql_max_bytes:
            raise ResourceExhausted(
                f"the rows come to more than {config.sql_max_bytes} bytes, the most one "
                "response may carry; add a LIMIT or page by key"
            )
        return line

    return await stream_lines(request, state, principal, entry, open_items, render)


async def read_change_stream(
    request: Request, state: ServerState, principal: Principal, body: models.ReadChangeStreamRequest
) -> Response:
    stream_name = body.stream
    args = (
        decode(body.start_timestamp),
        decode(body.end_timestamp),
        decode(body.partition_token),
        decode(body.heartbeat_milliseconds),
        decode(body.read_options),
    )
    name = path_part(request, "database")
    entry = state.metrics.stream_opened(name, stream_name)
    stored_mods = body.stored_mods or request.headers.get(api.MODS_HEADER) == api.STORED_MODS

    def open_items(stream: LineStream) -> Iterator[StreamItem]:
        # EmbeddedDatabase.read_change_stream, but with data records left as stored JSON:
        # decoding and encoding them again would cost the server most of its time.
        store = store_of(state.databases.get(name))
        return iter(
            ChangeStreamReader(store, validate(store, stream_name, *args), StoredDataChange)
        )

    def render(record: StreamItem) -> bytes:
        entry.records[record.record_type] += 1
        entry.position = record.timestamp
        if isinstance(record, StoredDataChange):
            return record.line(seed_mods=not stored_mods)
        return orjson.dumps(record_line(record)) + b"\n"

    return await stream_lines(request, state, principal, entry, open_items, render)
