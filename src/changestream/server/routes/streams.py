"""Handlers of Datastream-style streams."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request

from changestream.datastream.catalog import StreamCatalog, StreamInfo
from changestream.datastream.definition import StreamDefinition
from changestream.errors import (
    InvalidArgument,
)
from changestream.server.app import ServerState
from changestream.server.auth import Principal
from changestream.server.routes.common import (
    on_db,
    path_part,
)
from changestream.wire import models

# -- Datastream-style streams ----------------------------------------------------------------


def _summary(info: StreamInfo) -> models.StreamSummary:
    definition = msgspec.convert(info.definition.to_dict(), models.StreamDefinitionBody)
    return models.StreamSummary(name=info.name, state=info.state.value, definition=definition)


async def list_streams(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.StreamList:
    found = await on_db(request, state, lambda db: StreamCatalog(db).list())
    return models.StreamList(streams=[_summary(info) for info in found])


async def create_stream(
    request: Request, state: ServerState, principal: Principal, body: models.CreateStreamRequest
) -> models.StreamSummary:
    try:
        definition = StreamDefinition.from_dict(body.definition)
    except TypeError as exc:  # unknown or missing fields
        raise InvalidArgument(f"invalid stream definition: {exc}") from exc
    info = await on_db(request, state, lambda db: StreamCatalog(db).create(definition))
    return _summary(info)


async def describe_stream(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.StreamDescription:
    name = path_part(request, "stream")
    described: dict[str, Any] = await on_db(
        request, state, lambda db: StreamCatalog(db).describe(name)
    )
    return msgspec.convert(described, models.StreamDescription)


async def delete_stream(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Empty:
    name = path_part(request, "stream")
    await on_db(request, state, lambda db: StreamCatalog(db).delete(name))
    return models.Empty()


async def change_stream_state(
    request: Request, state: ServerState, principal: Principal, body: models.StreamStateRequest
) -> models.StreamState:
    name = path_part(request, "stream")
    moved = await on_db(request, state, lambda db: StreamCatalog(db).transition(name, body.verb))
    return models.StreamState(name=name, state=moved.value)
