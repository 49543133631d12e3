"""Handlers of the Stream Client's lease tables, and of the stream watch() reads."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from changestream.embedded.database import WATCH_STREAM, EmbeddedDatabase, store_of
from changestream.errors import (
    PermissionDenied,
)
from changestream.server.app import ServerState
from changestream.server.auth import Principal
from changestream.server.routes.common import (
    on_db,
    path_part,
)
from changestream.store.leases import Lease
from changestream.streams.interface import WatchSource
from changestream.wire import models
from changestream.wire.records import (
    lease_from_json,
    watch_source_to_json,
)

# -- leases and watch -----------------------------------------------------------------------


async def _leases(request: Request, state: ServerState, consumer: str, work: Any) -> Any:
    """Run ``work`` on the lease table of ``consumer`` on the stream in the path."""
    stream = path_part(request, "stream")
    return await on_db(request, state, lambda db: work(db.leases(stream, consumer)))


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
    stream = path_part(request, "stream")
    names = await on_db(request, state, lambda db: db.lease_consumers(stream))
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

    source = await on_db(request, state, work)
    return models.WatchSourceResponse(**watch_source_to_json(source))
