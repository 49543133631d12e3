"""watch()'s keyword arguments, checked with errors that say what is allowed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from changestream.clock import parse_ts
from changestream.errors import InvalidArgument
from changestream.streams.watch_arguments import WATCH_ARGUMENTS
from changestream.watch._cluster_time import ClusterTime
from changestream.watch.tokens import ResumeToken, TokenKind

FULL_DOCUMENT_MODES = ("default", "updateLookup", "whenAvailable", "required")
BEFORE_CHANGE_MODES = ("off", "whenAvailable", "required")
#: How long ``try_next()`` waits when ``max_await_time_ms`` is not given (MongoDB's default).
DEFAULT_MAX_AWAIT_MS = 1000
#: Records each partition reader may read ahead of the merge when ``batch_size`` is not given.
#: Small enough that what 16 partitions hold in the merge (about 0.9 MB of records, 9 MB at
#: 1000) stays near a core's cache: at 1000, the watch benchmark's cursor over 16 catching-up
#: partitions missed a 2 MB cache 1.47 times as often and ran 3 % more instructions
#: (cachegrind).
DEFAULT_BATCH_SIZE = 100


@dataclass(frozen=True, slots=True)
class WatchOptions:
    """Validated options; ``resume_from`` is the decoded ``resume_after`` or ``start_after``."""

    full_document: str
    full_document_before_change: str
    resume_from: ResumeToken | None
    start_at: int | None
    max_await_s: float
    batch_size: int
    show_expanded_events: bool = False
    null_as_missing: bool = False
    comment: Any = None


def watch_options(arguments: Mapping[str, Any]) -> WatchOptions:
    """Check watch()'s keyword arguments (see :class:`WatchArguments`)."""
    unknown = [name for name in arguments if name not in WATCH_ARGUMENTS]
    if unknown:
        raise InvalidArgument(
            f"watch() got unknown argument(s) {', '.join(map(repr, unknown))}; it takes "
            f"pipeline and {', '.join(WATCH_ARGUMENTS)}"
        )
    full_document = arguments.get("full_document", "default")
    full_document_before_change = arguments.get("full_document_before_change", "off")
    resume_after = arguments.get("resume_after")
    start_after = arguments.get("start_after")
    start_at_operation_time = arguments.get("start_at_operation_time")
    if full_document not in FULL_DOCUMENT_MODES:
        raise InvalidArgument(
            f"full_document must be one of {', '.join(map(repr, FULL_DOCUMENT_MODES))}, "
            f"got {full_document!r}"
        )
    if full_document_before_change not in BEFORE_CHANGE_MODES:
        raise InvalidArgument(
            "full_document_before_change must be one of "
            f"{', '.join(map(repr, BEFORE_CHANGE_MODES))}, got {full_document_before_change!r}"
        )
    given = [
        name
        for name, value in (
            ("resume_after", resume_after),
            ("start_after", start_after),
            ("start_at_operation_time", start_at_operation_time),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise InvalidArgument(
            "give at most one of resume_after, start_after and start_at_operation_time, "
            f"got {' and '.join(given)}"
        )
    resume_from: ResumeToken | None = None
    if resume_after is not None:
        resume_from = ResumeToken.decode(resume_after, "resume_after")
        if resume_from.kind is TokenKind.INVALIDATE:
            raise InvalidArgument(
                "resume_after cannot resume after an invalidate event: the watched table was "
                "dropped or renamed; use start_after=<that token> to start a new stream after it"
            )
    elif start_after is not None:
        resume_from = ResumeToken.decode(start_after, "start_after")
    start_at: int | None = None
    if isinstance(start_at_operation_time, ClusterTime):
        start_at = start_at_operation_time.to_us()
    elif start_at_operation_time is not None:
        start_at = parse_ts(start_at_operation_time, "start_at_operation_time")
    return WatchOptions(
        full_document=str(full_document),
        full_document_before_change=str(full_document_before_change),
        resume_from=resume_from,
        start_at=start_at,
        max_await_s=_count(
            arguments.get("max_await_time_ms"), "max_await_time_ms", 0, DEFAULT_MAX_AWAIT_MS
        )
        / 1000,
        batch_size=_count(arguments.get("batch_size"), "batch_size", 1, DEFAULT_BATCH_SIZE),
        show_expanded_events=_flag(arguments, "show_expanded_events"),
        null_as_missing=_flag(arguments, "null_as_missing"),
        comment=_comment(arguments.get("comment")),
    )


def _flag(arguments: Mapping[str, Any], name: str) -> bool:
    value = arguments.get(name, False)
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be True or False, got {value!r}")
    return value


def _comment(value: object) -> Any:
    """A JSON value (MongoDB takes any BSON value; ours travel as JSON)."""
    try:
        orjson.dumps(value)
    except TypeError as exc:
        raise InvalidArgument(f"comment must be a JSON value, got {value!r}") from exc
    return value


def _count(value: object, name: str, minimum: int, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{name} must be an integer of at least {minimum}, got {value!r}")
    return value
