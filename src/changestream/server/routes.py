"""The handlers of the endpoints declared in :mod:`.api`: each a thin layer over the embedded
database.

A handler gets the request body already validated into its declared model; values in the
typed encoding of :mod:`changestream.wire.values` are decoded here, and the engine checks
them exactly as it does for embedded callers (same errors, same messages). Every engine call
runs on a worker thread.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import anyio
import msgspec
import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse

from changestream.clock import parse_ts
from changestream.datastream.catalog import StreamCatalog, StreamInfo
from changestream.datastream.definition import StreamDefinition
from changestream.embedded.database import WATCH_STREAM, EmbeddedDatabase, store_of
from changestream.errors import (
    ChangeStreamError,
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from changestream.server.app import Handler, JSONResponse, ServerState
from changestream.server.auth import ANONYMOUS, Principal
from changestream.server.metrics import CONTENT_TYPE, OpenStream
from changestream.server.openapi import DOCS_HTML, openapi_document
from changestream.server.streaming import LineStream, start_stream
from changestream.store.keys import KeyRange
from changestream.store.leases import Lease
from changestream.store.policy import SplitPolicy
from changestream.store.transaction import Transaction
from changestream.streams.interface import WatchSource
from changestream.streams.models import Partition
from changestream.streams.read import ChangeStreamReader, validate
from changestream.streams.records import ChildPartitionsRecord, HeartbeatRecord
from changestream.streams.sandbox import SqlSandbox
from changestream.wire import api, models
from changestream.wire.records import (
    StoredDataChange,
    action_to_json,
    lease_from_json,
    partition_to_json,
    policy_from_json,
    record_line,
    watch_source_to_json,
)
from changestream.wire.values import decode, encode

NDJSON = "application/x-ndjson"
_StreamItem = StoredDataChange | HeartbeatRecord | ChildPartitionsRecord

# -- request bodies ------------------------------------------------------------------------


def _params(given: Any) -> Any:
    params = decode(given)
    if params is not None and not isinstance(params, dict | list):
        raise InvalidArgument(f"params must be an object, a list or null, got {params!r}")
    return params


def _keys(value: Any, name: str) -> list[Any] | KeyRange:
    keys = decode(value)
    if isinstance(keys, KeyRange):
        return keys
    if not isinstance(keys, list) or not all(isinstance(k, list) for k in keys):
        raise InvalidArgument(f"{name} must be a list of key lists or a $key_range, got {keys!r}")
    return keys


def _timestamp_query(text: str | None) -> Any:
    """A timestamp from a query string: integer microseconds or RFC 3339."""
    if text is None:
        return None
    return int(text) if text.lstrip("-").isdigit() and len(text) < 20 else text


def _path(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    return value


async def _on_db(
    request: Request,
    state: ServerState,
    work: Callable[[EmbeddedDatabase], Any],
    initialise: bool = False,
) -> Any:
    """Run ``work`` on the database named in the path, on a worker thread; ``initialise``
    (admin requests only) makes a file that is not a changestream database yet one."""
    name = _path(request, "database")
    return await state.call(lambda: work(state.databases.get(name, initialise)))


# -- transactions -------------------------------------------------------------------------


def _buffer(tx: Transaction, mutations: list[models.Mutation]) -> int:
    """Hand the wire mutations to the transaction; returns the rows they write."""
    rows = 0
    for index, mutation in enumerate(mutations):
        if mutation.op == "delete":
            keys = _keys(mutation.keys, f"mutation {index} keys")
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
    database = _path(request, "database")
    if key is None:
        stamp, rows = await _on_db(
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
    dml, params, key = body.dml, _params(body.params), body.session
    database = _path(request, "database")
    if key is None:
        db = await _on_db(request, state, lambda db: db)
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
        session = state.sessions.get(body.session, principal.name, _path(request, "database"))
    except FailedPrecondition:
        return models.Empty()  # already gone, so already rolled back
    await session.call(lambda tx: tx.rollback(), final=True)
    return models.Empty()


# -- DDL, reads, SQL ------------------------------------------------------------------------


async def ddl(
    request: Request, state: ServerState, principal: Principal, body: models.DdlRequest
) -> models.CommitTimestamp:
    statements = body.statements
    stamp = await _on_db(request, state, lambda db: db.execute_ddl(statements), initialise=True)
    return models.CommitTimestamp(commit_timestamp=stamp)


async def read(
    request: Request, state: ServerState, principal: Principal, body: models.ReadRequest
) -> models.Rows:
    keys = None if body.keys is None else _keys(body.keys, "keys")
    rows = await _on_db(request, state, lambda db: db.read(body.table, keys, body.columns))
    return models.Rows(rows=encode(rows))


async def read_snapshot(
    request: Request, state: ServerState, principal: Principal, body: models.ReadSnapshotRequest
) -> models.SnapshotRows:
    keys = decode(body.keys)
    found = await _on_db(
        request, state, lambda db: db.read_snapshot(body.table, keys, body.columns, body.limit)
    )
    return models.SnapshotRows(rows=encode(found.rows), read_timestamp=found.read_timestamp)


async def tables(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Tables:
    found = await _on_db(request, state, lambda db: db.tables())
    return models.Tables(tables=_typed([t.to_catalog() for t in found], models.TableBody))


async def change_streams(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.ChangeStreams:
    found = await _on_db(request, state, lambda db: db.change_streams())
    streams = _typed([s.to_catalog() for s in found], models.ChangeStreamBody)
    return models.ChangeStreams(change_streams=streams)


# -- system documents ---------------------------------------------------------------------


async def documents_list(
    request: Request, state: ServerState, principal: Principal, body: models.KindRequest
) -> models.Documents:
    found = await _on_db(request, state, lambda db: db.system_documents(body.kind).values())
    return models.Documents(
        documents=[
            models.Document(name=d.name, version=d.version, body=encode(d.body)) for d in found
        ]
    )


async def documents_put(
    request: Request, state: ServerState, principal: Principal, body: models.PutDocumentRequest
) -> models.Version:
    value = decode(body.body)
    version = await _on_db(
        request,
        state,
        lambda db: db.put_system_document(body.kind, body.name, value, body.expected_version),
    )
    return models.Version(version=version)


async def documents_delete(
    request: Request, state: ServerState, principal: Principal, body: models.DeleteDocumentRequest
) -> models.Deleted:
    deleted = await _on_db(
        request,
        state,
        lambda db: db.delete_system_document(body.kind, body.name, body.expected_version),
    )
    return models.Deleted(deleted=deleted)


async def log_append(
    request: Request, state: ServerState, principal: Principal, body: models.AppendLogRequest
) -> models.Empty:
    entry = decode(body.entry)
    await _on_db(request, state, lambda db: db.append_system_log(body.kind, body.name, entry))
    return models.Empty()


async def log_list(
    request: Request, state: ServerState, principal: Principal, body: models.ListLogRequest
) -> models.Entries:
    found = await _on_db(request, state, lambda db: db.system_log(body.kind, body.name, body.limit))
    return models.Entries(entries=encode(found))


async def _stop_on_disconnect(request: Request, stream: LineStream) -> None:
    """Stop ``stream`` when the client disconnects (its body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    stream.stop()


async def _stream(
    request: Request,
    state: ServerState,
    principal: Principal,
    entry: OpenStream,
    open_items: Callable[[LineStream], Iterator[Any]],
    render: Callable[[Any], bytes],
) -> Response:
    """A streaming NDJSON response of the items ``open_items`` returns (see ``streaming``)."""
    config = state.config
    refusal: ChangeStreamError | None = None
    if len(state.streams) >= config.max_streams:
        refusal = Unavailable(f"{config.max_streams} streams are open on this server")
    elif (
        principal.name != ANONYMOUS
        and state.streams_of[principal.name] >= config.max_streams_per_token
    ):
        refusal = ResourceExhausted(
            f"this token has {config.max_streams_per_token} streams open, the most it may; "
            "close one first"
        )
    elif state.closing:
        refusal = Unavailable("the server is shutting down")
    if refusal is not None:
        state.metrics.stream_closed(entry)
        raise refusal
    stream = LineStream(config.keepalive_seconds, lambda: state.closing)
    state.streams.add(stream)
    state.streams_of[principal.name] += 1

    def forget() -> None:
        if stream in state.streams:
            state.streams.discard(stream)
            state.streams_of[principal.name] -= 1

    async def body() -> Any:
        try:
            async for chunk in stream.chunks():
                yield chunk
        finally:
            forget()

    # Opening may take long (a query's first row): a client that leaves meanwhile stops it.
    gone = asyncio.create_task(_stop_on_disconnect(request, stream))
    try:
        await start_stream(
            state.threads,
            stream,
            lambda: open_items(stream),
            render,
            lambda: state.metrics.stream_closed(entry),
        )
    except BaseException:
        forget()
        raise
    finally:
        gone.cancel()
    return StreamingResponse(body(), media_type=NDJSON, headers={"Cache-Control": "no-store"})


async def sql(
    request: Request, state: ServerState, principal: Principal, body: models.SqlRequest
) -> Response:
    text, params = body.sql, _params(body.params)
    name = _path(request, "database")
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

    return await _stream(request, state, principal, entry, open_items, render)


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
    name = _path(request, "database")
    entry = state.metrics.stream_opened(name, stream_name)

    def open_items(stream: LineStream) -> Iterator[_StreamItem]:
        # EmbeddedDatabase.read_change_stream, but with data records left as stored JSON:
        # decoding and encoding them again would cost the server most of its time.
        store = store_of(state.databases.get(name))
        return iter(
            ChangeStreamReader(store, validate(store, stream_name, *args), StoredDataChange)
        )

    def render(record: _StreamItem) -> bytes:
        entry.records[record.record_type] += 1
        entry.position = record.timestamp
        if isinstance(record, StoredDataChange):
            return record.line()
        return orjson.dumps(record_line(record)) + b"\n"

    return await _stream(request, state, principal, entry, open_items, render)


# -- partitions, splits, policy --------------------------------------------------------------


def _partitions(found: list[Partition]) -> models.Partitions:
    return models.Partitions(partitions=[models.Partition(**partition_to_json(p)) for p in found])


async def partitions(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Partitions:
    stream = _path(request, "stream")
    at = _timestamp_query(request.query_params.get("at"))
    return _partitions(await _on_db(request, state, lambda db: db.partitions(stream, at)))


async def partition_history(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Partitions:
    stream = _path(request, "stream")
    return _partitions(await _on_db(request, state, lambda db: db.partition_history(stream)))


async def split(
    request: Request, state: ServerState, principal: Principal, body: models.KeyRequest
) -> models.Timestamp:
    key = _key(body.key)
    return models.Timestamp(
        timestamp=await _on_db(request, state, lambda db: db.split_at(body.table, key))
    )


async def merge(
    request: Request, state: ServerState, principal: Principal, body: models.KeyRequest
) -> models.Timestamp:
    key = _key(body.key)
    return models.Timestamp(
        timestamp=await _on_db(request, state, lambda db: db.merge_at(body.table, key))
    )


def _key(given: Any) -> list[Any]:
    key = decode(given)
    if not isinstance(key, list):
        raise InvalidArgument(f"key must be a list of key values, got {key!r}")
    return key


async def get_split_policy(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.SplitPolicyBody:
    policy: SplitPolicy = await _on_db(request, state, lambda db: db.split_policy())
    return msgspec.convert(policy.to_dict(), models.SplitPolicyBody)


async def set_split_policy(
    request: Request, state: ServerState, principal: Principal, body: models.SetSplitPolicyRequest
) -> models.SplitPolicyBody:
    policy = None if body.policy is None else policy_from_json(body.policy)
    changes = body.changes or {}
    updated: SplitPolicy = await _on_db(
        request, state, lambda db: db.set_split_policy(policy, **changes)
    )
    return msgspec.convert(updated.to_dict(), models.SplitPolicyBody)


async def rebalance(
    request: Request, state: ServerState, principal: Principal, _: models.NoBody
) -> models.Actions:
    actions = await _on_db(request, state, lambda db: db.rebalance())
    return models.Actions(actions=_typed([action_to_json(a) for a in actions], models.ActionBody))


# -- leases and watch -----------------------------------------------------------------------


async def _leases(request: Request, state: ServerState, consumer: str, work: Any) -> Any:
    """Run ``work`` on the lease table of ``consumer`` on the stream in the path."""
    stream = _path(request, "stream")
    return await _on_db(request, state, lambda db: work(db.leases(stream, consumer)))


def _lease(found: Lease | None) -> models.MaybeLease:
    return models.MaybeLease(lease=found)


async def leases_list(
    request: Request, state: ServerState, principal: Principal, body: models.ConsumerRequest
) -> models.Leases:
    found = await _leases(request, state, body.consumer, lambda t: t.list_leases())
    return models.Leases(leases=found)


async def leases_get(
    request: Request, state: ServerState, principal: Principal, body: models.LeaseGetRequest
) -> models.MaybeLease:
    status = (body.status_type, body.status_value)
    return _lease(await _leases(request, state, body.consumer, lambda t: t.get(*status)))


async def leases_insert_if_absent(
    request: Request, state: ServerState, principal: Principal, body: models.LeaseChangeRequest
) -> models.Inserted:
    lease = lease_from_json(body.lease)
    inserted = await _leases(request, state, body.consumer, lambda t: t.insert_if_absent(lease))
    return models.Inserted(inserted=inserted)


async def leases_update(
    request: Request, state: ServerState, principal: Principal, body: models.LeaseChangeRequest
) -> models.MaybeLease:
    lease = lease_from_json(body.lease)
    return _lease(await _leases(request, state, body.consumer, lambda t: t.update(lease)))


async def leases_delete(
    request: Request, state: ServerState, principal: Principal, body: models.LeaseChangeRequest
) -> models.Deleted:
    lease = lease_from_json(body.lease)
    deleted = await _leases(request, state, body.consumer, lambda t: t.delete(lease))
    return models.Deleted(deleted=deleted)


async def consumers(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Consumers:
    stream = _path(request, "stream")
    names = await _on_db(request, state, lambda db: db.lease_consumers(stream))
    return models.Consumers(consumers=names)


async def watch_source(
    request: Request, state: ServerState, principal: Principal, _: models.NoBody
) -> models.WatchSourceResponse:
    """The stream watch() reads. Creating it makes every later commit write its records, so
    a read token only gets it once it exists: an admin token creates it (once)."""

    def work(db: EmbeddedDatabase) -> WatchSource:
        if WATCH_STREAM not in store_of(db).catalog().streams and "admin" not in principal.scopes:
            raise PermissionDenied(
                f"watch() on {db.name!r} needs its change stream {WATCH_STREAM}, which does not "
                "exist yet; a token with the admin scope creates it by calling watch() once"
            )
        return db.ensure_watch_stream()

    source = await _on_db(request, state, work)
    return models.WatchSourceResponse(**watch_source_to_json(source))


# -- Datastream-style streams ----------------------------------------------------------------


def _summary(info: StreamInfo) -> models.StreamSummary:
    definition = msgspec.convert(info.definition.to_dict(), models.StreamDefinitionBody)
    return models.StreamSummary(name=info.name, state=info.state.value, definition=definition)


async def list_streams(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.StreamList:
    found = await _on_db(request, state, lambda db: StreamCatalog(db).list())
    return models.StreamList(streams=[_summary(info) for info in found])


async def create_stream(
    request: Request, state: ServerState, principal: Principal, body: models.CreateStreamRequest
) -> models.StreamSummary:
    try:
        definition = StreamDefinition.from_dict(body.definition)
    except TypeError as exc:  # unknown or missing fields
        raise InvalidArgument(f"invalid stream definition: {exc}") from exc
    info = await _on_db(request, state, lambda db: StreamCatalog(db).create(definition))
    return _summary(info)


async def describe_stream(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.StreamDescription:
    name = _path(request, "stream")
    described: dict[str, Any] = await _on_db(
        request, state, lambda db: StreamCatalog(db).describe(name)
    )
    return msgspec.convert(described, models.StreamDescription)


async def delete_stream(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Empty:
    name = _path(request, "stream")
    await _on_db(request, state, lambda db: StreamCatalog(db).delete(name))
    return models.Empty()


async def change_stream_state(
    request: Request, state: ServerState, principal: Principal, body: models.StreamStateRequest
) -> models.StreamState:
    name = _path(request, "stream")
    moved = await _on_db(request, state, lambda db: StreamCatalog(db).transition(name, body.verb))
    return models.StreamState(name=name, state=moved.value)


# -- the server itself ------------------------------------------------------------------------


async def list_databases(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.DatabaseList:
    entries = await state.call(state.databases.entries)
    return models.DatabaseList(
        databases=[e.name for e in entries if e.problem is None],
        not_databases=[
            models.NotDatabase(name=e.name, problem=e.problem)
            for e in entries
            if e.problem is not None
        ],
    )


async def healthz(request: Request, state: ServerState, principal: Principal, _: None) -> Response:
    if state.closing:
        return JSONResponse({"status": "shutting down"}, status_code=503)
    return JSONResponse({"status": "ok"})


async def readyz(request: Request, state: ServerState, principal: Principal, _: None) -> Response:
    """Ready to serve: not shutting down, and its worker threads answer and can list the
    databases (``/healthz`` only says the process is up)."""
    if state.closing:
        return JSONResponse({"status": "shutting down"}, status_code=503)
    try:
        with anyio.fail_after(5):
            names = await state.call(state.databases.names)
    except (TimeoutError, OSError) as exc:
        return JSONResponse({"status": f"not ready: {exc!r}"}, status_code=503)
    return JSONResponse({"status": "ready", "databases": len(names)})


async def metrics(request: Request, state: ServerState, principal: Principal, _: None) -> Response:
    def partitions() -> list[tuple[str, str, int]]:
        counts = []
        for name in state.databases.names():
            try:
                db = state.databases.get(name)
            except ChangeStreamError:  # changed under us since it was listed: leave it out
                continue
            for stream in store_of(db).catalog().streams:
                counts.append((name, stream, len(db.partitions(stream))))
        return counts

    text = await state.call(lambda: state.metrics.render(partitions()))
    return Response(text, media_type=CONTENT_TYPE)


async def openapi(request: Request, state: ServerState, principal: Principal, _: None) -> Response:
    return JSONResponse(openapi_document())


async def docs(request: Request, state: ServerState, principal: Principal, _: None) -> Response:
    return HTMLResponse(DOCS_HTML)


#: Each declared endpoint's handler, by the endpoint's name (see ``api.ENDPOINTS``).
HANDLERS: dict[str, Handler] = {
    "healthz": healthz,
    "readyz": readyz,
    "metrics": metrics,
    "openapi": openapi,
    "docs": docs,
    "list_databases": list_databases,
    "ddl": ddl,
    "commit": commit,
    "execute_update": execute_update,
    "rollback": rollback,
    "read": read,
    "read_snapshot": read_snapshot,
    "tables": tables,
    "change_streams": change_streams,
    "documents_list": documents_list,
    "documents_put": documents_put,
    "documents_delete": documents_delete,
    "log_append": log_append,
    "log_list": log_list,
    "sql": sql,
    "read_change_stream": read_change_stream,
    "split": split,
    "merge": merge,
    "get_split_policy": get_split_policy,
    "set_split_policy": set_split_policy,
    "rebalance": rebalance,
    "watch_source": watch_source,
    "partitions": partitions,
    "partition_history": partition_history,
    "consumers": consumers,
    "leases_list": leases_list,
    "leases_get": leases_get,
    "leases_insert_if_absent": leases_insert_if_absent,
    "leases_update": leases_update,
    "leases_delete": leases_delete,
    "list_streams": list_streams,
    "create_stream": create_stream,
    "describe_stream": describe_stream,
    "delete_stream": delete_stream,
    "change_stream_state": change_stream_state,
}

#: (path, method, scope or None for public, handler) of every endpoint.
ROUTES: list[tuple[str, str, str | None, Handler]] = [
    (e.path, e.method, e.scope, HANDLERS[e.name]) for e in api.ENDPOINTS
]


_B = TypeVar("_B", bound=models.Model)


def _typed(items: list[dict[str, Any]], body: type[_B]) -> list[_B]:
    """``items`` as the declared response bodies (a mismatch is a bug, found by the tests)."""
    return msgspec.convert(items, list[body])  # type: ignore[valid-type]
