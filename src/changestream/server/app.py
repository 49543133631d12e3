"""The ASGI application: server state, authentication, request bodies and error responses."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio
import msgspec
import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from changestream import errors
from changestream.server._databases import Databases
from changestream.server._metrics import Metrics
from changestream.server._sessions import Sessions
from changestream.server._statuses import RequestTooLarge, http_status
from changestream.server._streaming import LineStream
from changestream.server._workers import WorkerThreads
from changestream.server.auth import ANONYMOUS, Principal
from changestream.wire.api import ENDPOINTS, NO_SUCH_REQUEST, Endpoint
from changestream.wire.models import Request as RequestModel
from changestream.wire.records import error_to_json

_log = logging.getLogger(__name__)

T = TypeVar("T")
M = TypeVar("M", bound=RequestModel)


class Authenticator(Protocol):
    """Turns an Authorization header into a principal (``TokenFile`` or ``NoAuth``)."""

    def authenticate(self, authorization: str | None) -> Principal: ...


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Limits and timings of a server."""

    #: Seconds an idle streaming response waits before sending a keepalive line.
    keepalive_seconds: float = 10.0
    #: Largest request body accepted, in bytes.
    max_body_bytes: int = 16 << 20
    #: Seconds a transaction with DML may stay idle before it is rolled back.
    session_idle_seconds: float = 30.0
    #: Transactions with DML open at once.
    max_sessions: int = 64
    #: Streaming responses in flight at once (each holds a thread and a SQLite connection).
    max_streams: int = 1024
    #: Blocking engine calls running at once, outside streams and transactions.
    max_calls: int = 64
    #: Streaming responses one token may have open at once (without tokens, only
    #: ``max_streams`` holds: every caller is the same anonymous one).
    max_streams_per_token: int = 64
    #: What one SQL statement may spend: VM steps, seconds of running, rows returned.
    sql_max_steps: int = 200_000_000
    sql_max_seconds: float = 10.0
    sql_max_rows: int = 100_000
    #: Bytes one SQL response may carry.
    sql_max_bytes: int = 64 << 20


class ServerState:
    """Everything the routes share."""

    def __init__(self, databases: Databases, auth: Authenticator, config: ServerConfig) -> None:
        self.databases = databases
        self.auth = auth
        self.config = config
        self.metrics = Metrics()
        self.threads = WorkerThreads("changestream-server")
        self.sessions = Sessions(self.threads, config.session_idle_seconds, config.max_sessions)
        self.streams: set[LineStream] = set()
        #: Open streams by the name of the token that opened them.
        self.streams_of: Counter[str] = Counter()
        self.closing = False
        self._calls: anyio.Semaphore | None = None

    async def call(self, function: Callable[[], T]) -> T:
        """Run a blocking engine call on a worker thread, at most ``max_calls`` at once."""
        if self._calls is None:
            self._calls = anyio.Semaphore(self.config.max_calls)
        async with self._calls:
            return await self.threads.call(function)

    def begin_shutdown(self) -> None:
        """Stop: end every stream with a shutdown line and roll back open transactions.
        Runs on the event loop; in-flight requests (commits) still finish."""
        if self.closing:
            return
        self.closing = True
        for stream in list(self.streams):
            stream.wake()
        self.sessions.abort_all()


class JSONResponse(Response):
    """A JSON response rendered by orjson."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(exc: errors.ChangeStreamError) -> JSONResponse:
    """The response for an error: its JSON form with its class's HTTP status."""
    return JSONResponse({"error": error_to_json(exc)}, status_code=http_status(exc))


#: A route's handler: the request, the server's state, who is asking, and the request body
#: decoded into its declared model (None for endpoints without one). It answers with a
#: response, or with a value of its declared response model.
Handler = Callable[[Request, ServerState, Principal, Any], Awaitable[Any]]


def endpoint(declared: Endpoint, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a handler: authenticate, check the scope, decode and validate the body into the
    declared request model, encode the answer, and turn errors into JSON responses."""

    async def run(request: Request) -> Response:
        state: ServerState = request.app.state.server
        try:
            if declared.scope is None:
                principal = Principal(ANONYMOUS, frozenset())
            else:
                principal = state.auth.authenticate(request.headers.get("authorization"))
                principal.require(declared.scope)
            body = None
            if declared.request is not None:
                config = state.config
                raw = await read_body(request, config.max_body_bytes)
                body = to_model(raw, declared.request)
            answer = await handler(request, state, principal, body)
            if isinstance(answer, Response):
                response = answer
            else:
                response = Response(msgspec.json.encode(answer), media_type="application/json")
        except errors.ChangeStreamError as exc:
            response = error_response(exc)
        except Exception:
            _log.exception("request %s %s failed", request.method, request.url.path)
            response = error_response(
                errors.ChangeStreamError("internal server error (see the server log)")
            )
        state.metrics.request(declared.path, response.status_code)
        return response

    return run


def to_model(raw: dict[str, Any], model: type[M]) -> M:
    """``raw`` as ``model``, or InvalidArgument saying which field is wrong and how."""
    try:
        return msgspec.convert(raw, model)
    except msgspec.ValidationError as exc:
        raise errors.InvalidArgument(f"invalid request body: {exc}") from exc


async def read_body(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object body, refusing bodies over ``limit`` bytes (orjson refuses
    nesting deeper than 1024; :func:`.values.decode` refuses values deeper than 64)."""
    declared = request.headers.get("content-length")
    too_large = RequestTooLarge(f"the request body is larger than {limit} bytes")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
    except ClientDisconnect as exc:  # nobody will read the answer; keep it out of the log
        raise errors.InvalidArgument("the client went away while sending the request") from exc
    try:
        body = orjson.loads(b"".join(chunks) or b"{}")
    except orjson.JSONDecodeError as exc:
        raise errors.InvalidArgument(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise errors.InvalidArgument(
            f"the request body must be a JSON object, got {type(body).__name__}"
        )
    return body


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown route, wrong method) as JSON like every other error."""
    assert isinstance(exc, HTTPException)
    code = "NotFound" if exc.status_code == 404 else "InvalidArgument"
    detail = NO_SUCH_REQUEST if exc.status_code == 404 else exc.detail
    message = f"{request.method} {request.url.path}: {detail}"
    body = {"error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    _log.error("request %s %s failed", request.method, request.url.path, exc_info=exc)
    body = {"error": {"code": "ChangeStreamError", "message": "internal server error"}}
    return JSONResponse(body, status_code=500)


def create_app(
    databases: Databases, auth: Authenticator, config: ServerConfig | None = None
) -> Starlette:
    """The server's ASGI application over ``databases``, checking requests with ``auth``."""
    from changestream.server.console import STATIC as CONSOLE_STATIC
    from changestream.server.openapi import SWAGGER_UI_STATIC
    from changestream.server.routes import HANDLERS  # routes build on this module

    state = ServerState(databases, auth, config or ServerConfig())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        state.begin_shutdown()
        databases.close()

    app = Starlette(
        routes=[
            *(Route(d.path, endpoint(d, HANDLERS[d.name]), methods=[d.method]) for d in ENDPOINTS),
            Mount("/docs/static", StaticFiles(directory=SWAGGER_UI_STATIC), name="swagger-ui"),
            Mount("/console/static", StaticFiles(directory=CONSOLE_STATIC), name="console"),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    app.state.server = state
    return app
