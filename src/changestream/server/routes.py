"""The HTTP endpoints: one per Database method, each a thin layer over the embedded database.

Request bodies are JSON objects whose values use the typed encoding of
:mod:`changestream.server.values`; arguments are checked only as far as needed to call the
engine, which then checks them exactly as it does for embedded callers (same errors, same
messages). Every engine call runs on a worker thread.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse

from changestream.clock import parse_ts
from changestream.errors import (
    ChangeStreamError,
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from changestream.server.app import Handler, JSONResponse, ServerState, read_body
from changestream.server.auth import Principal
from changestream.server.metrics import OpenStream
from changestream.server.openapi import DOCS_HTML, openapi_document
from changestream.server.streaming import LineStream, start_stream
from changestream.server.values import decode, encode
from changestream.server.wire import (
    StoredDataChange,
    action_to_json,
    lease_from_json,
    lease_to_json,
    partition_to_json,
    policy_from_json,
    record_line,
    watch_source_to_json,
)
from changestream.store.keys import KeyRange
from changestream.store.transaction import Transaction
from changestream.streams.database import WATCH_STREAM, EmbeddedDatabase
from changestream.streams.read import ChangeStreamReader, validate
from changestream.streams.records import ChildPartitionsRecord, HeartbeatRecord
from changestream.streams.sandbox import SqlSandbox

NDJSON = "application/x-ndjson"
_REQUIRED = object()
_WRITES = ("insert", "update", "insert_or_update", "replace")
_StreamItem = StoredDataChange | HeartbeatRecord | ChildPartitionsRecord

# -- request bodies ------------------------------------------------------------------------


def _text(body: dict[str, Any], name: str, default: Any = _REQUIRED) -> Any:
    """A string field; ``default`` (which may be None) when absent or null."""
    value = body.get(name)
    if value is None:
        if default is _REQUIRED:
            raise InvalidArgument(f"the request needs a string field {name!r}")
        return default
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, got {value!r}")
    return value


def _texts(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidArgument(f"{name} must be a list of strings, got {value!r}")
    return value


def _params(body: dict[str, Any]) -> Any:
    params = decode(body.get("params"))
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


async def _body(request: Request, state: ServerState) -> dict[str, Any]:
    return await read_body(request, state.config.max_body_bytes, state.config.max_nesting)


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


def _buffer(tx: Transaction, mutations: Any) -> int:
    """Hand the wire mutations to the transaction; returns the rows they write."""
    if not isinstance(mutations, list):
        raise InvalidArgument(f"mutations must be a list, got {mutations!r}")
    rows = 0
    for index, mutation in enumerate(mutations):
        if not isinstance(mutation, dict):
            raise InvalidArgument(f"mutation {index} must be an object, got {mutation!r}")
        op = mutation.get("op")
        table = _text(mutation, "table")
        if op == "delete":
            keys = _keys(mutation.get("keys"), f"mutation {index} keys")
            tx.delete(table, keys)
            rows += len(keys) if isinstance(keys, list) else 0
        elif op in _WRITES:
            columns = _texts(mutation.get("columns"), f"mutation {index} columns")
            values = decode(mutation.get("values"))
            if not isinstance(values, list):
                raise InvalidArgument(f"values must be a list of rows, got {values!r}")
            getattr(tx, op)(table, columns, values)
            rows += len(values)
        else:
            allowed = ", ".join([*_WRITES, "delete"])
            raise InvalidArgument(f"mutation {index}: op must be one of {allowed}, got {op!r}")
    return rows


def _commit(tx: Transaction, mutations: Any) -> tuple[int, int]:
    """Buffer the mutations and commit; (commit timestamp, rows written). Nothing is applied
    unless everything is: a bad mutation rolls the whole transaction back."""
    try:
        rows = _buffer(tx, mutations)
        stamp = tx.commit()
    except BaseException:
        tx.rollback()
        raise
    return parse_ts(stamp), rows


async def commit(request: Request, state: ServerState, principal: Principal) -> Response:
    body = await _body(request, state)
    tag = body.get("tag")
    mutations = body.get("mutations", [])
    key = _text(body, "session", None)
    database = _path(request, "database")
    if key is None:
        stamp, rows = await _on_db(
            request, state, lambda db: _commit(db.transaction(tag), mutations)
        )
    else:
        session = state.sessions.get(key, principal.name, database)
        stamp, rows = await session.call(lambda tx: _commit(tx, mutations), final=True)
        rows += session.dml_rows
    state.metrics.committed(database, rows)
    return JSONResponse({"commit_timestamp": stamp})


async def execute_update(request: Request, state: ServerState, principal: Principal) -> Response:
    body = await _body(request, state)
    dml = _text(body, "dml")
    params = _params(body)
    key = _text(body, "session", None)
    database = _path(request, "database")
    if key is None:
        db = await _on_db(request, state, lambda db: db)
        session = state.sessions.begin(db, body.get("tag"), principal.name, database)
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
    return JSONResponse({"session": session.key, "row_count": count})


async def rollback(request: Request, state: ServerState, principal: Principal) -> Response:
    body = await _body(request, state)
    key = _text(body, "session")
    try:
        session = state.sessions.get(key, principal.name, _path(request, "database"))
    except FailedPrecondition:
        return JSONResponse({})  # already gone, so already rolled back
    await session.call(lambda tx: tx.rollback(), final=True)
    return JSONResponse({})


# -- DDL, reads, SQL ------------------------------------------------------------------------


async def ddl(request: Request, state: ServerState, principal: Principal) -> Response:
    body = await _body(request, state)
    statements = body.get("statements")
    if not isinstance(statements, str):
        statements = _texts(statements, "statements")
    stamp = await _on_db(request, state, lambda db: db.execute_ddl(statements), initialise=True)
    return JSONResponse({"commit_timestamp": stamp})


async def read(request: Request, state: ServerState, principal: Principal) -> Response:
    body = await _body(request, state)
    table = _text(body, "table")
    keys = None if body.get("keys") is None else _keys(body["keys"], "keys")
    columns = body.get("columns")
    columns = None if columns is None else _texts(columns, "columns")
    rows = await _on_db(request, state, lambda db: db.read(table, keys, columns))
    return JSONResponse({"rows": encode(rows)})


async def read_snapshot(request: Request, state: ServerState, principal: Principal) -> Response:
    body = await _body(request, state)
    table = _text(body, "table")
    keys = decode(body.get("keys"))
    columns = body.get("columns")
    columns = None if columns is None else _texts(columns, "columns")
    limit = body.get("limit")
    found = await _on_db(request, state, lambda db: db.read_snapshot(table, keys, columns, limit))
    return JSONResponse({"rows": encode(found.rows), "read_timestamp": found.read_timestamp})


async def tables(request: Request, state: ServerState, principal: Principal) -> Response:
    found = await _on_db(request, state, lambda db: db.tables())
    return JSONResponse({"tables": [t.to_catalog() for t in found]})


async def change_streams(request: Request, state: ServerState, principal: Principal) -> Response:
    found = await _on_db(request, state, lambda db: db.change_streams())
    return JSONResponse({"change_streams": [s.to_catalog() for s in found]})


# -- system documents ---------------------------------------------------------------------


def _system_op(op: str) -> Handler:
    async def run(request: Request, state: ServerState, principal: Principal) -> Response:
        body = await _body(request, state)
        kind = _text(body, "kind")

        def work(db: EmbeddedDatabase) -> dict[str, Any]:
            if op == "documents/list":
                documents = db.system_documents(kind).values()
                return {
                    "documents": [
                        {"name": d.name, "version": d.version, "body": encode(d.body)}
                        for d in documents
                    ]
                }
            name = _text(body, "name")
            if op == "documents/put":
                version = db.put_system_document(
                    kind, name, decode(body.get("body")), body.get("expected_version")
                )
                return {"version": version}
            if op == "documents/delete":
                return {
                    "deleted": db.delete_system_document(kind, name, body.get("expected_version"))
                }
            if op == "log/append":
                db.append_system_log(kind, name, decode(body.get("entry")))
                return {}
            return {"entries": encode(db.system_log(kind, name, body.get("limit", 100)))}

        return JSONResponse(await _on_db(request, state, work))

    return run


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
    elif state.streams_of[principal.name] >= config.max_streams_per_token:
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


async def sql(request: Request, state: ServerState, principal: Principal) -> Response:
    body = await _body(request, state)
    text = _text(body, "sql")
    params = _params(body)
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
        line = orjson.dumps({"type": kind, kind: encode(value)}) + b"\n"
        sent += len(line)
        if sent > config.sql_max_bytes:
            raise ResourceExhausted(
                f"the rows come to more than {config.sql_max_bytes} bytes, the most one "
                "response may carry; add a LIMIT or page by key"
            )
        return line

    return await _stream(request, state, principal, entry, open_items, render)


async def read_change_stream(
    request: Request, state: ServerState, principal: Principal
) -> Response:
    body = await _body(request, state)
    stream_name = _text(body, "stream")
    args = (
        decode(body.get("start_timestamp")),
        decode(body.get("end_timestamp")),
        decode(body.get("partition_token")),
        decode(body.get("heartbeat_milliseconds", 10_000)),
        decode(body.get("read_options")),
    )
    name = _path(request, "database")
    entry = state.metrics.stream_opened(name, stream_name)

    def open_items(stream: LineStream) -> Iterator[_StreamItem]:
        # EmbeddedDatabase.read_change_stream, but with data records left as stored JSON:
        # decoding and encoding them again would cost the server most of its time.
        db = state.databases.get(name)
        return iter(ChangeStreamReader(db, validate(db, stream_name, *args), StoredDataChange))

    def render(record: _StreamItem) -> bytes:
        entry.records[record.record_type] += 1
        if isinstance(record, StoredDataChange):
            entry.position = record.commit_timestamp
            return record.line()
        if isinstance(record, HeartbeatRecord):
            entry.position = record.timestamp
        else:
            entry.position = record.start_timestamp
        return orjson.dumps(record_line(record)) + b"\n"

    return await _stream(request, state, principal, entry, open_items, render)


# -- partitions, splits, policy --------------------------------------------------------------


async def partitions(request: Request, state: ServerState, principal: Principal) -> Response:
    stream = _path(request, "stream")
    at = _timestamp_query(request.query_params.get("at"))
    found = await _on_db(request, state, lambda db: db.partitions(stream, at))
    return JSONResponse({"partitions": [partition_to_json(p) for p in found]})


async def partition_history(request: Request, state: ServerState, principal: Principal) -> Response:
    stream = _path(request, "stream")
    found = await _on_db(request, state, lambda db: db.partition_history(stream))
    return JSONResponse({"partitions": [partition_to_json(p) for p in found]})


def _split_or_merge(merge: bool) -> Handler:
    async def change(request: Request, state: ServerState, principal: Principal) -> Response:
        body = await _body(request, state)
        table = _text(body, "table")
        key = decode(body.get("key"))
        if not isinstance(key, list):
            raise InvalidArgument(f"key must be a list of key values, got {key!r}")
        if merge:
            stamp = await _on_db(request, state, lambda db: db.merge_at(table, key))
        else:
            stamp = await _on_db(request, state, lambda db: db.split_at(table, key))
        return JSONResponse({"timestamp": stamp})

    return change


async def get_split_policy(request: Request, state: ServerState, principal: Principal) -> Response:
    policy = await _on_db(request, state, lambda db: db.split_policy())
    return JSONResponse(policy.to_dict())


async def set_split_policy(request: Request, state: ServerState, principal: Principal) -> Response:
    body = await _body(request, state)
    given = body.get("policy")
    policy = None if given is None else policy_from_json(given)
    changes = body.get("changes") or {}
    if not isinstance(changes, dict):
        raise InvalidArgument(f"changes must be an object, got {changes!r}")
    updated = await _on_db(request, state, lambda db: db.set_split_policy(policy, **changes))
    return JSONResponse(updated.to_dict())


async def rebalance(request: Request, state: ServerState, principal: Principal) -> Response:
    actions = await _on_db(request, state, lambda db: db.rebalance())
    return JSONResponse({"actions": [action_to_json(a) for a in actions]})


# -- leases and watch -----------------------------------------------------------------------


def _lease_op(op: str) -> Handler:
    async def run(request: Request, state: ServerState, principal: Principal) -> Response:
        body = await _body(request, state)
        stream = _path(request, "stream")
        consumer = _text(body, "consumer")

        def work(db: EmbeddedDatabase) -> dict[str, Any]:
            table = db.leases(stream, consumer)
            if op == "list":
                return {"leases": [lease_to_json(lease) for lease in table.list_leases()]}
            if op == "get":
                found = table.get(_text(body, "status_type"), _text(body, "status_value"))
                return {"lease": None if found is None else lease_to_json(found)}
            lease = lease_from_json(body.get("lease"))
            if op == "insert_if_absent":
                return {"inserted": table.insert_if_absent(lease)}
            if op == "update":
                written = table.update(lease)
                return {"lease": None if written is None else lease_to_json(written)}
            return {"deleted": table.delete(lease)}

        return JSONResponse(await _on_db(request, state, work))

    return run


async def lease_consumers(request: Request, state: ServerState, principal: Principal) -> Response:
    stream = _path(request, "stream")
    names = await _on_db(request, state, lambda db: db.lease_consumers(stream))
    return JSONResponse({"consumers": names})


async def watch_source(request: Request, state: ServerState, principal: Principal) -> Response:
    """The stream watch() reads. Creating it makes every later commit write its records, so
    a read token only gets it once it exists: an admin token creates it (once)."""

    def work(db: EmbeddedDatabase) -> Any:
        if WATCH_STREAM not in db.catalog().streams and "admin" not in principal.scopes:
            raise PermissionDenied(
                f"watch() on {db.name!r} needs its change stream {WATCH_STREAM}, which does not "
                "exist yet; a token with the admin scope creates it by calling watch() once"
            )
        return db.ensure_watch_stream()

    return JSONResponse(watch_source_to_json(await _on_db(request, state, work)))


# -- the server itself ------------------------------------------------------------------------


async def list_databases(request: Request, state: ServerState, principal: Principal) -> Response:
    entries = await state.call(state.databases.entries)
    return JSONResponse(
        {
            "databases": [e.name for e in entries if e.problem is None],
            "not_databases": [
                {"name": e.name, "problem": e.problem} for e in entries if e.problem is not None
            ],
        }
    )


async def healthz(request: Request, state: ServerState, principal: Principal) -> Response:
    if state.closing:
        return JSONResponse({"status": "shutting down"}, status_code=503)
    return JSONResponse({"status": "ok"})


async def metrics(request: Request, state: ServerState, principal: Principal) -> Response:
    def partitions() -> list[tuple[str, str, int]]:
        counts = []
        for name in state.databases.names():
            try:
                db = state.databases.get(name)
            except ChangeStreamError:  # changed under us since it was listed: leave it out
                continue
            for stream in db.catalog().streams:
                counts.append((name, stream, len(db.partitions(stream))))
        return counts

    text = state.metrics.render(await state.call(partitions))
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


async def openapi(request: Request, state: ServerState, principal: Principal) -> Response:
    return JSONResponse(openapi_document())


async def docs(request: Request, state: ServerState, principal: Principal) -> Response:
    return HTMLResponse(DOCS_HTML)


DB = "/v1/databases/{database}"
STREAM = DB + "/streams/{stream}"

#: (path, method, scope or None for public, handler)
ROUTES: list[tuple[str, str, str | None, Handler]] = [
    ("/healthz", "GET", None, healthz),
    ("/metrics", "GET", "read", metrics),
    ("/openapi.json", "GET", None, openapi),
    ("/docs", "GET", None, docs),
    ("/v1/databases", "GET", "read", list_databases),
    (DB + "/ddl", "POST", "admin", ddl),
    (DB + "/commit", "POST", "write", commit),
    (DB + "/execute_update", "POST", "write", execute_update),
    (DB + "/rollback", "POST", "write", rollback),
    (DB + "/read", "POST", "read", read),
    (DB + "/read_snapshot", "POST", "read", read_snapshot),
    (DB + "/tables", "GET", "read", tables),
    (DB + "/change_streams", "GET", "read", change_streams),
    (DB + "/system_documents/list", "POST", "read", _system_op("documents/list")),
    (DB + "/system_documents/put", "POST", "write", _system_op("documents/put")),
    (DB + "/system_documents/delete", "POST", "write", _system_op("documents/delete")),
    (DB + "/system_log/append", "POST", "write", _system_op("log/append")),
    (DB + "/system_log/list", "POST", "read", _system_op("log/list")),
    (DB + "/sql", "POST", "read", sql),
    (DB + "/read_change_stream", "POST", "read", read_change_stream),
    (DB + "/split", "POST", "admin", _split_or_merge(False)),
    (DB + "/merge", "POST", "admin", _split_or_merge(True)),
    (DB + "/split_policy", "GET", "read", get_split_policy),
    (DB + "/split_policy", "PUT", "admin", set_split_policy),
    (DB + "/rebalance", "POST", "admin", rebalance),
    (DB + "/watch_source", "POST", "read", watch_source),
    (STREAM + "/partitions", "GET", "read", partitions),
    (STREAM + "/partition_history", "GET", "read", partition_history),
    (STREAM + "/consumers", "GET", "read", lease_consumers),
    (STREAM + "/leases/list", "POST", "read", _lease_op("list")),
    (STREAM + "/leases/get", "POST", "read", _lease_op("get")),
    (STREAM + "/leases/insert_if_absent", "POST", "write", _lease_op("insert_if_absent")),
    (STREAM + "/leases/update", "POST", "write", _lease_op("update")),
    (STREAM + "/leases/delete", "POST", "write", _lease_op("delete")),
]
