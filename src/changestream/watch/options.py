"""watch()'s keyword arguments, checked with errors that say what is allowed."""

from __future__ import annotations

from dataclasses import dataclass

from changestream.clock import parse_ts
from changestream.errors import InvalidArgument
from changestream.watch.cluster_time import ClusterTime
from changestream.watch.tokens import ResumeToken, TokenKind

FULL_DOCUMENT_MODES = ("default", "updateLookup", "whenAvailable", "required")
BEFORE_CHANGE_MODES = ("off", "whenAvailable", "required")
#: How long ``try_next()`` waits when ``max_await_time_ms`` is not given (MongoDB's default).
DEFAULT_MAX_AWAIT_MS = 1000
#: Records each partition reader may read ahead of the merge when ``batch_size`` is not given.
DEFAULT_BATCH_SIZE = 1000


@dataclass(frozen=True, slots=True)
class WatchOptions:
    """Validated options; ``resume_from`` is the decoded ``resume_after`` or ``start_after``."""

    full_document: str
    full_document_before_change: str
    resume_from: ResumeToken | None
    start_at: int | None
    max_await_s: float
    batch_size: int


def watch_options(
    full_document: object,
    full_document_before_change: object,
    resume_after: object,
    start_after: object,
    start_at_operation_time: object,
    max_await_time_ms: object,
    batch_size: object,
) -> WatchOptions:
    """Check watch()'s arguments (see :meth:`changestream.EmbeddedDatabase.watch`)."""
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
        max_await_s=_count(max_await_time_ms, "max_await_time_ms", 0, DEFAULT_MAX_AWAIT_MS) / 1000,
        batch_size=_count(batch_size, "batch_size", 1, DEFAULT_BATCH_SIZE),
    )


def _count(value: object, name: str, minimum: int, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{name} must be an integer of at least {minimum}, got {value!r}")
    return value
