"""watch()'s keyword arguments and the cursor it returns, declared once: every ``watch()``
(database, remote database or server, table handle) takes ``pipeline`` and then these, by
keyword (:mod:`changestream.watch.options` checks them), and returns a :class:`WatchCursor`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

if TYPE_CHECKING:
    from typing_extensions import Unpack


class WatchArguments(TypedDict, total=False):
    """The keyword arguments of ``watch()`` (MongoDB's names, in pymongo's spelling).

    ``full_document``: ``"default"``, ``"updateLookup"`` (updates carry the row as it is when
    the event is read), ``"whenAvailable"``/``"required"`` (updates carry the row the change
    wrote). ``full_document_before_change``: ``"off"``, ``"whenAvailable"``, ``"required"``.
    Start from now, or ``resume_after``/``start_after`` a resume token, or at
    ``start_at_operation_time`` (a ClusterTime, datetime, RFC 3339 string or microseconds).
    ``max_await_time_ms``: how long ``try_next()`` waits (default 1000). ``batch_size``:
    records each partition reader may read ahead (default 100). ``show_expanded_events``:
    also emit ``create`` events for tables created (default False, as in MongoDB).
    ``null_as_missing``: treat a NULL column as an absent field — left out of documents, and
    reported in ``removedFields`` when an update sets it — instead of a field holding
    ``null`` (the default). ``comment``: any JSON value, kept on the cursor
    (``cursor.comment``; MongoDB attaches it to the commands it logs).
    """

    full_document: str
    full_document_before_change: str
    resume_after: Mapping[str, str] | None
    start_after: Mapping[str, str] | None
    start_at_operation_time: Any
    max_await_time_ms: int | None
    batch_size: int | None
    show_expanded_events: bool
    null_as_missing: bool
    comment: Any


#: The names ``watch()`` accepts after ``pipeline``.
WATCH_ARGUMENTS = tuple(WatchArguments.__annotations__)


@runtime_checkable
class WatchCursor(Protocol):
    """What every ``watch()`` returns: iterate it, or poll it with :meth:`try_next`; keep
    :attr:`resume_token` to continue later."""

    comment: Any

    def __iter__(self) -> Iterator[dict[str, Any]]: ...
    def __next__(self) -> dict[str, Any]: ...
    def try_next(self) -> dict[str, Any] | None: ...
    @property
    def resume_token(self) -> dict[str, str]: ...
    @property
    def alive(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> WatchCursor: ...
    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class Watcher(Protocol):
    """Something with ``watch()``: a database (every table) or a table handle (one)."""

    def watch(
        self,
        pipeline: Sequence[Mapping[str, object]] | None = None,
        **arguments: Unpack[WatchArguments],
    ) -> WatchCursor: ...


@runtime_checkable
class TableWatcher(Watcher, Protocol):
    """What ``db.table(name)`` returns: a handle whose ``watch()`` follows that table alone."""

    name: str
