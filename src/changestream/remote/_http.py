"""One server's endpoints over one HTTP connection pool: requests built from the declared
endpoints (:mod:`changestream.wire.api`), retries while the server cannot be reached, and the
server's errors turned back into ``changestream.errors`` exceptions."""

from __future__ import annotations

import os
import ssl
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import orjson

from changestream.errors import (
    ChangeStreamError,
    DatabaseClosed,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from changestream.retry import reconnecting
from changestream.wire import api, models
from changestream.wire.api import NO_SUCH_REQUEST, OLDER_NO_SUCH_REQUEST
from changestream.wire.records import StreamLine, decode_stream_line, error_from_json

#: Where a bearer token is read from when none is given.
TOKEN_ENV = "CHANGESTREAM_TOKEN"
_JSON = {"content-type": "application/json"}
#: Change stream reads ask for inserts as stored (the records decode from both forms).
_STREAM_HEADERS = {"read_change_stream": {**_JSON, api.MODS_HEADER: api.STORED_MODS}}


class _Busy(Exception):
    """The server answered 503 (it is shutting down): worth asking again."""

    def __init__(self, error: ChangeStreamError) -> None:
        super().__init__(str(error))
        self.error = error


class Endpoints:
    """The endpoints of the server at ``url`` (``http(s)://host:port[/prefix]/NAME``, or the
    server's root without NAME), called with typed bodies."""

    def __init__(
        self,
        url: str,
        token: str | None,
        timeout: float,
        reconnect_timeout: float,
        verify: bool | str,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InvalidArgument(f"a database URL looks like http://host:7070/NAME, got {url!r}")
        base, _, name = parsed.path.rstrip("/").rpartition("/")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url
        #: The server's root URL, with the path prefix the databases' names follow.
        self.root = f"{parsed.scheme}://{parsed.netloc}{base}"
        #: The database's name in the URL ("" when the URL is the server's root).
        self.database = urllib.parse.unquote(name)
        self._reconnect_timeout = reconnect_timeout
        self._reached = False
        self._closed = False
        self._client = httpx.Client(
            base_url=self.root,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            verify=ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify,
        )

    def close(self) -> None:
        self._closed = True
        self._client.close()

    def invoke(
        self,
        name: str,
        body: models.Request | None = None,
        *,
        stream: str | None = None,
        query: dict[str, str] | None = None,
        idempotent: bool = True,
    ) -> Any:
        """Call the endpoint declared as ``name`` with ``body`` (its request model); returns
        the answer decoded into its response model."""
        endpoint = api.BY_NAME[name]
        request = self._client.build_request(
            endpoint.method,
            self._path(endpoint, stream),
            content=None if body is None else dumps(body),
            headers=_JSON,
            params=query,
        )
        response = self._send(request, stream=False, idempotent=idempotent)
        if response.status_code >= 400:
            raise error_of(response)
        try:
            return msgspec.json.decode(response.content, type=endpoint.response)
        except msgspec.DecodeError as exc:
            raise ChangeStreamError(
                f"the server answered {endpoint.path} with an unexpected body: {exc}"
            ) from exc

    def open_stream(self, name: str, body: models.Request, reconnect: bool) -> httpx.Response:
        """POST a streaming request and return the response once the server accepted it;
        with ``reconnect``, a server answering 503 (shutting down) is asked again (the next
        one may be up) for up to ``reconnect_timeout`` seconds."""
        path = self._path(api.BY_NAME[name], None)
        content = dumps(body)

        def attempt() -> httpx.Response:
            request = self._client.build_request(
                "POST", path, content=content, headers=_STREAM_HEADERS.get(name, _JSON)
            )
            response = self._send(request, stream=True, idempotent=True)
            if response.status_code < 400:
                return response
            response.read()
            response.close()
            error = error_of(response)
            raise _Busy(error) if reconnect and response.status_code == 503 else error

        try:
            return reconnecting(self._reconnect_timeout, lambda e: isinstance(e, _Busy))(attempt)
        except _Busy as busy:
            raise busy.error from None

    def _send(self, request: httpx.Request, stream: bool, idempotent: bool) -> httpx.Response:
        """Send, retrying while the server cannot be reached (and, for requests that may be
        repeated, when the connection broke) for up to ``reconnect_timeout`` seconds."""
        if self._closed:
            raise DatabaseClosed(f"the connection to {self.url} is closed")

        def retryable(exc: BaseException) -> bool:
            # A refused connection never reached the server, so anything may be retried.
            return isinstance(exc, httpx.TransportError) and (
                idempotent or isinstance(exc, httpx.ConnectError)
            )

        # The reconnect budget is for a session that reached the server once; a server that
        # was never reached is reported within a couple of seconds.
        budget = self._reconnect_timeout if self._reached else min(self._reconnect_timeout, 2.0)
        try:
            for attempt in reconnecting(budget, retryable):
                with attempt:
                    response = self._client.send(request, stream=stream)
                    self._reached = True
                    return response
        except httpx.TransportError as exc:
            if not retryable(exc):
                raise Unavailable(
                    f"the connection to {self.url} broke during {request.url.path}; "
                    f"it may or may not have been applied ({exc!r})"
                ) from exc
            raise Unavailable(
                f"cannot reach {self.url}: {exc!r}"
                + ("" if self._reached else " (it has not answered since connect())")
            ) from exc
        raise AssertionError("unreachable: the retry loop returns or raises")

    def _path(self, endpoint: api.Endpoint, stream: str | None) -> str:
        path = endpoint.path
        if "{database}" in path:
            if not self.database:
                names = sorted(self.invoke("list_databases").databases)
                raise InvalidArgument(
                    f"the server at {self.url} serves {len(names)} databases "
                    f"({', '.join(names) or 'none'}); add one's name to the URL (on the "
                    "server's root only watch() works: it follows them all)"
                )
            path = path.replace("{database}", segment(self.database))
        return path if stream is None else path.replace("{stream}", segment(stream))


def segment(name: str) -> str:
    """A name as one URL path segment."""
    return urllib.parse.quote(name, safe="")


def error_of(response: httpx.Response) -> ChangeStreamError:
    """The exception an error answer stands for."""
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        text = response.text[:200]
        return ChangeStreamError(f"the server answered HTTP {response.status_code}: {text}")
    error = body.get("error") if isinstance(body, dict) else None
    if response.status_code == 404 and _unknown_request(response, error):
        request = response.request
        return NotFound(
            f"the server at {request.url.scheme}://{request.url.netloc.decode()} does not "
            f"serve {request.method} {request.url.path}, which this client needs: it runs an "
            "older changestream than this client; upgrade the server (a client needs a "
            "server of its own version or newer)"
        )
    return error_from_json(error, response.status_code)


def _unknown_request(response: httpx.Response, error: Any) -> bool:
    """The server has no endpoint for the request (rather than no such database, stream...)."""
    message = error.get("message") if isinstance(error, dict) else None
    request = response.request
    asked = f"{request.method} {request.url.path}: "
    return message in (asked + NO_SUCH_REQUEST, asked + OLDER_NO_SUCH_REQUEST)


def _complete_lines(response: httpx.Response) -> Iterator[bytes]:
    """The complete NDJSON lines of a streaming response; a cut-off last line is dropped."""
    pending = b""
    for chunk in response.iter_bytes():
        complete = (pending + chunk).split(b"\n")
        pending = complete.pop()
        yield from filter(None, complete)


def lines(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The complete NDJSON lines of a streaming response, parsed."""
    return map(orjson.loads, _complete_lines(response))


def stream_lines(response: httpx.Response) -> Iterator[StreamLine]:
    """The complete lines of a read function's response, as :class:`StreamLine`."""
    for line in _complete_lines(response):
        try:
            yield decode_stream_line(line)
        except msgspec.DecodeError as exc:
            raise FailedPrecondition(
                f"the server sent a line that is not one of a change stream read: {exc}"
            ) from None


def dumps(body: models.Request) -> bytes:
    """A request body as JSON; text that is not valid Unicode cannot be sent."""
    try:
        return msgspec.json.encode(body)
    except (msgspec.EncodeError, UnicodeEncodeError) as exc:
        raise InvalidArgument(f"the request cannot be sent as JSON: {exc}") from exc


def plain(body: models.Model) -> dict[str, Any]:
    """A response body as the JSON object the engine's ``from_json`` functions read (every
    field present: omitted defaults are filled in)."""
    result: dict[str, Any] = msgspec.to_builtins(body)
    for field in msgspec.structs.fields(body):
        result.setdefault(field.encode_name, msgspec.to_builtins(getattr(body, field.name)))
    return result
