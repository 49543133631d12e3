"""What every handler shares: decoding request values, running work on a database, and
streaming NDJSON responses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from changestream.embedded.database import EmbeddedDatabase
from changestream.errors import (
    ChangeStreamError,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
)
from changestream.server._metrics import OpenStream
from changestream.server._streaming import LineStream, start_stream
from changestream.server.app import ServerState
from changestream.server.auth import ANONYMOUS, Principal
from changestream.store.keys import KeyRange
from changestream.streams.records import ChildPartitionsRecord, HeartbeatRecord
from changestream.wire import models
from changestream.wire.records import (
    StoredDataChange,
)
from changestream.wire.values import decode

NDJSON = "application/x-ndjson"
StreamItem = StoredDataChange | HeartbeatRecord | ChildPartitionsRecord


# -- request bodies ------------------------------------------------------------------------


def decode_params(given: Any) -> Any:
    params = decode(given)
    if params is not None and not isinstance(params, dict | list):
        raise InvalidArgument(f"params must be an object, a list or null, got {params!r}")
    return params


def decode_keys(value: Any, name: str) -> list[Any] | KeyRange:
    keys = decode(value)
    if isinstance(keys, KeyRange):
        return keys
    if not isinstance(keys, list) or not all(isinstance(k, list) for k in keys):
        raise InvalidArgument(f"{name} must be a list of key lists or a $key_range, got {keys!r}")
    return keys


def timestamp_query(text: str | None) -> Any:
    """A timestamp from a query string: integer microseconds or RFC 3339."""
    if text is None:
        return None
    # isdigit() alone takes digits int() refuses, such as "¹".
    digits = text.lstrip("-")
    return int(text) if digits.isascii() and digits.isdigit() and len(text) < 20 else text


def path_part(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    return value


async def on_db(
    request: Request,
    state: ServerState,
    work: Callable[[EmbeddedDatabase], Any],
    initialise: bool = False,
) -> Any:
    """Run ``work`` on the database named in the path, on a worker thread; ``initialise``
    (admin requests only) makes a file that is not a changestream database yet one."""
    name = path_part(request, "database")
    return await state.call(lambda: work(state.databases.get(name, initialise)))


async def stop_on_disconnect(request: Request, stream: LineStream) -> None:
    """Stop ``stream`` when the client disconnects (its body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    stream.stop()


async def stream_lines(
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
    gone = asyncio.create_task(stop_on_disconnect(request, stream))
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


_B = TypeVar("_B", bound=models.Model)


def typed(items: list[dict[str, Any]], body: type[_B]) -> list[_B]:
    """``items`` as the declared response bodies (a mismatch is a bug, found by the tests)."""
    return msgspec.convert(items, list[body])  # type: ignore[valid-type]
