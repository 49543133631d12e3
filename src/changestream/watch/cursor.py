"""The change stream cursor: ordered events from the merge, filtered, resumable, closable."""

from __future__ import annotations

import time
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from changestream.clock import format_ts
from changestream.errors import InvalidArgument, OutOfRange, reported
from changestream.streams.roles import WatchedDatabase
from changestream.watch._events import INVALIDATING, Document, Event, EventBuilder
from changestream.watch._iteration import CursorIteration
from changestream.watch.merge import DataChange, PartitionMerge, SortKey
from changestream.watch.options import watch_options
from changestream.watch.pipeline import AggregationPipeline
from changestream.watch.tokens import ResumeToken, TokenFields

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from changestream.streams.watch_arguments import WatchArguments

_NEVER = 2**62
#: The most records the cursor takes from the merge at once (it converts them one by one, as
#: events are asked for, so ``updateLookup`` reads rows as late as it can).
_TAKE = 256


class ChangeStreamCursor(CursorIteration):
    """Change events of a whole database, or of one table, in commit order.

    Iterate it (``for event in cursor``: blocks until the next event, ends after an
    invalidate event or :meth:`close`), or poll it with :meth:`try_next`. It is a context
    manager that closes itself. Keep :attr:`resume_token` to continue later with
    ``watch(resume_after=token)``. Use a cursor from one thread; :meth:`close` may come from
    any.
    """

    def __init__(
        self,
        db: WatchedDatabase,
        table: str | None = None,
        pipeline: Sequence[Mapping[str, Any]] | None = None,
        **arguments: Unpack[WatchArguments],
    ) -> None:
        options = watch_options(arguments)
        #: The ``comment`` given to watch() (None when none was).
        self.comment = options.comment
        self._pipeline = AggregationPipeline(pipeline)
        self._table = table
        self._max_await_s = options.max_await_s
        source = db.ensure_watch_stream()
        self._builder = EventBuilder(db, source.database, options)
        #: Where the stream resumes now: the last event's token (its fields, see event_token).
        self._token: TokenFields
        if options.resume_from is not None:
            start = options.resume_from.commit_ts
            self._token = options.resume_from
        else:
            start = source.now if options.start_at is None else options.start_at
            self._token = ResumeToken(start)
        #: Where the stream resumes: events at or before it are left out (None once an event
        #: after it came: the ones after that come in order, after it too).
        self._after: ResumeToken | None = ResumeToken(*self._token)
        try:
            self._merge = PartitionMerge(
                db,
                source.stream,
                start,
                options.batch_size,
                now=lambda: db.ensure_watch_stream().now,
                stored=True,
            )
        except OutOfRange as exc:
            detail = (
                str(exc)
                .replace(f"change stream {source.stream!r} was created", "watch() was first used")
                .replace(f"change stream {source.stream!r}", "watch()'s change history")
            )
            raise OutOfRange(
                f"cannot resume watch() at {format_ts(start)}: the change history there is no "
                f"longer kept ({detail}); watch again without a resume point"
            ) from exc
        self._finalizer = weakref.finalize(self, self._merge.close)
        self._ready: deque[tuple[SortKey, DataChange]] = deque()
        self._pending: deque[Event] = deque()
        self._invalidated = False
        self._closed = False

    # -- the cursor protocol ------------------------------------------------------------------

    @reported
    def try_next(self) -> Document | None:
        """The next event, or None if none arrived within ``max_await_time_ms``."""
        if self._closed:
            return None
        if not self._pending:
            self._fill()
            if not self._pending:
                return None
        token, event = self._pending.popleft()
        self._token = token
        if self._invalidated and not self._pending:
            self.close()
        return event

    def _fill(self) -> None:
        """Wait up to ``max_await_time_ms`` for events (none when it runs out)."""
        deadline = time.monotonic() + self._max_await_s
        while not self._pending:
            if self._invalidated:
                self.close()
                return
            if not self._ready:
                self._ready.extend(self._take(max(0.0, deadline - time.monotonic())))
                if not self._ready:
                    self._note_progress()
                    return
            self._consume(*self._ready.popleft())

    @property
    def resume_token(self) -> dict[str, str]:
        """Resume here with ``watch(resume_after=...)``: after the last event returned, or
        later when the cursor has read further without finding an event."""
        return ResumeToken(*self._token).document()

    def close(self) -> None:
        """Stop reading; the partition readers end within about a second."""
        self._closed = True
        self._finalizer()

    # -- records to events ------------------------------------------------------------------

    def _take(self, timeout: float) -> list[tuple[SortKey, DataChange]]:
        try:
            return self._merge.take(_TAKE, timeout)
        except BaseException:
            self.close()
            raise

    def _consume(self, key: SortKey, record: DataChange) -> None:
        if self._table is not None and record.table_name != self._table:
            return
        events = self._builder.events(record, key)
        if self._after is None and self._pipeline.empty:
            self._pending.extend(events)  # nothing to leave out or change
        else:
            for token, event in events:
                if not self._skips(token):
                    self._emit(token, event)
        if self._table is not None and record.mod_type in INVALIDATING:
            token, event = self._builder.invalidate(key)
            if not self._skips(token):
                self._emit(token, event)
                self._invalidated = True

    def _skips(self, token: TokenFields) -> bool:
        if self._after is None:
            return False
        if self._after.skips(token[:5]):
            return True
        self._after = None
        return False

    def _emit(self, token: TokenFields, event: Document) -> None:
        out = self._pipeline.apply(event)
        if out is None:
            return
        if out is not event and out.get("_id") != event["_id"]:
            self.close()
            raise InvalidArgument(
                "the pipeline removed or changed _id, which holds the event's resume token, so "
                "the stream could not be resumed from this event; keep _id in $project"
            )
        self._pending.append((token, out))

    def _note_progress(self) -> None:
        """With nothing pending, move the resume token up to what the merge has read
        through, so a resumed stream does not re-read what was filtered out or idle."""
        if self._pending or self._ready or self._closed:
            return
        safe = self._merge.safe_through()
        if self._token[0] <= safe < _NEVER:
            self._token = ResumeToken(safe + 1)
