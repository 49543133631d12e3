"""Handlers of partitions (their lineage and sizes), splits and the split policy."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request

from changestream.errors import (
    InvalidArgument,
)
from changestream.server.app import ServerState
from changestream.server.auth import Principal
from changestream.server.routes.common import (
    on_db,
    path_part,
    timestamp_query,
    typed,
)
from changestream.store.policy import SplitPolicy
from changestream.streams.models import Partition
from changestream.wire import models
from changestream.wire.records import (
    action_to_json,
    partition_to_json,
    policy_from_json,
)
from changestream.wire.values import decode

# -- partitions, splits, policy --------------------------------------------------------------


def _partitions(found: list[Partition]) -> models.Partitions:
    return models.Partitions(partitions=[models.Partition(**partition_to_json(p)) for p in found])


async def partitions(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Partitions:
    stream = path_part(request, "stream")
    at = timestamp_query(request.query_params.get("at"))
    return _partitions(await on_db(request, state, lambda db: db.partitions(stream, at)))


async def partition_history(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.Partitions:
    stream = path_part(request, "stream")
    return _partitions(await on_db(request, state, lambda db: db.partition_history(stream)))


async def change_sizes(
    request: Request, state: ServerState, principal: Principal, body: models.ChangeSizesRequest
) -> models.ChangeSizes:
    stream = path_part(request, "stream")
    token, limit = decode(body.partition_token), decode(body.limit)
    start, end = decode(body.start_timestamp), decode(body.end_timestamp)
    sizes = await on_db(
        request, state, lambda db: db.change_sizes(stream, token, start, end, limit)
    )
    return models.ChangeSizes(
        commit_timestamps=[s.commit_timestamp for s in sizes],
        records=[s.records for s in sizes],
        mods=[s.mods for s in sizes],
        bytes=[s.bytes for s in sizes],
    )


async def split(
    request: Request, state: ServerState, principal: Principal, body: models.KeyRequest
) -> models.Timestamp:
    key = _key(body.key)
    return models.Timestamp(
        timestamp=await on_db(request, state, lambda db: db.split_at(body.table, key))
    )


async def merge(
    request: Request, state: ServerState, principal: Principal, body: models.KeyRequest
) -> models.Timestamp:
    key = _key(body.key)
    return models.Timestamp(
        timestamp=await on_db(request, state, lambda db: db.merge_at(body.table, key))
    )


def _key(given: Any) -> list[Any]:
    key = decode(given)
    if not isinstance(key, list):
        raise InvalidArgument(f"key must be a list of key values, got {key!r}")
    return key


async def get_split_policy(
    request: Request, state: ServerState, principal: Principal, _: None
) -> models.SplitPolicyBody:
    policy: SplitPolicy = await on_db(request, state, lambda db: db.split_policy())
    return msgspec.convert(policy.to_dict(), models.SplitPolicyBody)


async def set_split_policy(
    request: Request, state: ServerState, principal: Principal, body: models.SetSplitPolicyRequest
) -> models.SplitPolicyBody:
    policy = None if body.policy is None else policy_from_json(body.policy)
    changes = body.changes or {}
    updated: SplitPolicy = await on_db(
        request, state, lambda db: db.set_split_policy(policy, **changes)
    )
    return msgspec.convert(updated.to_dict(), models.SplitPolicyBody)


async def rebalance(
    request: Request, state: ServerState, principal: Principal, _: models.NoBody
) -> models.Actions:
    actions = await on_db(request, state, lambda db: db.rebalance())
    return models.Actions(actions=typed([action_to_json(a) for a in actions], models.ActionBody))
