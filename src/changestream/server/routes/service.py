"""Handlers of the server itself: its databases, health, metrics and documentation."""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from changestream.embedded.database import store_of
from changestream.errors import (
    ChangeStreamError,
)
from changestream.server._metrics import CONTENT_TYPE
from changestream.server.app import JSONResponse, ServerState
from changestream.server.auth import Principal
from changestream.server.openapi import DOCS_HTML, openapi_document
from changestream.wire import models

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
