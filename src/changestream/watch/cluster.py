"""watch() across every database of a server (MongoDB's client-level change stream).

One database-level cursor per database, merged in the order (commit timestamp, database name,
event): an event is returned once every other database has either an event after it waiting or
has read past its timestamp (its resume token), so databases written at once interleave in
commit order. The event's ``_id`` is a cluster resume token naming the database too; resuming
from one restarts that database just after its event and every other database at the
timestamp where it stood. Databases are listed again every few seconds: one that appears while
the cursor runs is watched from then on.
"""

from __future__ import annotations

import logging
import struct
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from changestream.errors import InvalidArgument, InvalidToken, reported
from changestream.streams.roles import WatchedDatabase
from changestream.watch._events import Document
from changestream.watch._iteration import CursorIteration
from changestream.watch.cursor import ChangeStreamCursor
from changestream.watch.options import watch_options
from changestream.watch.pipeline import AggregationPipeline
from changestream.watch.tokens import ResumeToken, TokenKind

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from changestream.streams.watch_arguments import WatchArguments

log = logging.getLogger(__name__)

_VERSION = 2
_TS = struct.Struct(">BQ")
_REST = struct.Struct(">QIIBB")
_CRC = struct.Struct(">I")
#: How long each database's cursor waits per look, and how often databases are listed again.
_LOOK_MS = 10
_RELIST_S = 2.0


class ClusterToken(NamedTuple):
    """A cluster resume token: a database's token plus the database's name. ``_data`` is
    version 2, commit timestamp, the name's UTF-8 bytes and a zero byte, the rest of the
    database token, and a CRC32: its hex sorts like (timestamp, database, event)."""

    database: str
    token: ResumeToken

    def encode(self) -> str:
        t = self.token
        body = (
            _TS.pack(_VERSION, t.commit_ts)
            + self.database.encode()
            + b"\0"
            + _REST.pack(t.transaction, t.sequence, t.mod, t.event, t.kind)
        )
        return (body + _CRC.pack(zlib.crc32(body))).hex()

    def document(self) -> dict[str, str]:
        return {"_data": self.encode()}

    @staticmethod
    def decode(value: object, name: str) -> ClusterToken:
        data = value.get("_data") if isinstance(value, Mapping) else None
        try:
            raw = bytes.fromhex(data) if isinstance(data, str) else b""
        except ValueError:
            raw = b""
        minimum = _TS.size + 1 + _REST.size + _CRC.size
        if len(raw) < minimum or raw[0] != _VERSION:
            raise InvalidToken(
                f"{name} must be a resume token of a watch() across databases (an event's _id "
                f"or the cursor's resume_token); got {value!r}"
            )
        body, (crc,) = raw[: -_CRC.size], _CRC.unpack(raw[-_CRC.size :])
        _, commit_ts = _TS.unpack(body[: _TS.size])
        database, zero, rest = body[_TS.size :].partition(b"\0")
        if crc != zlib.crc32(body) or not zero or len(rest) != _REST.size:
            raise InvalidToken(f"{name} {data!r} is not a resume token issued by watch()")
        transaction, sequence, mod, event, kind = _REST.unpack(rest)
        if kind > max(TokenKind):
            raise InvalidToken(f"{name} {data!r} is not a resume token issued by watch()")
        token = ResumeToken(commit_ts, transaction, sequence, mod, event, TokenKind(kind))
        return ClusterToken(database.decode(), token)


class ClusterChangeStreamCursor(CursorIteration):
    """A cursor over every change in every database ``list_names()`` returns, each opened with
    ``open_database(name)`` (see the module docstring). Same protocol as
    :class:`~changestream.watch.ChangeStreamCursor`; a table dropped or renamed does not end it.
    """

    def __init__(
        self,
        list_names: Callable[[], Sequence[str]],
        open_database: Callable[[str], WatchedDatabase],
        pipeline: Sequence[Mapping[str, Any]] | None = None,
        **arguments: Unpack[WatchArguments],
    ) -> None:
        # Resume tokens here are cluster tokens: decoded below, not by watch_options.
        rest: dict[str, Any] = dict(arguments)
        tokens = {n: rest.pop(n, None) for n in ("resume_after", "start_after")}
        options = watch_options(rest)
        given_names = [n for n, v in tokens.items() if v is not None]
        if options.start_at is not None:
            given_names.append("start_at_operation_time")
        if len(given_names) > 1:
            raise InvalidArgument(
                "give at most one of resume_after, start_after and start_at_operation_time, "
                f"got {' and '.join(given_names)}"
            )
        self.comment = options.comment
        self._pipeline = AggregationPipeline(pipeline)
        self._list_names, self._open = list_names, open_database
        self._max_await_s = options.max_await_s
        # Per database: what its cursor is built with, less where it starts.
        self._inner: dict[str, Any] = {
            "full_document": options.full_document,
            "full_document_before_change": options.full_document_before_change,
            "show_expanded_events": options.show_expanded_events,
            "null_as_missing": options.null_as_missing,
            "batch_size": options.batch_size,
            "max_await_time_ms": _LOOK_MS,
        }
        given = tokens["resume_after"] or tokens["start_after"]
        self._resume = None if given is None else ClusterToken.decode(given, given_names[0])
        start = options.start_at
        if self._resume is not None:
            start = self._resume.token.commit_ts
        self._databases: dict[str, WatchedDatabase] = {}
        self._cursors: dict[str, ChangeStreamCursor] = {}
        self._heads: dict[str, Document] = {}
        self._token = self._resume or ClusterToken("", ResumeToken(start or 0))
        self._listed_at = 0.0
        self._closed = False
        try:
            self._add_new(start)
        except BaseException:
            self.close()
            raise
        if start is None:
            # Started "now": the earliest of the databases' own now.
            starts = [self._position(name).commit_ts for name in self._cursors]
            self._token = ClusterToken("", ResumeToken(min(starts, default=0)))

    # -- the cursor protocol ------------------------------------------------------------------

    @reported
    def try_next(self) -> Document | None:
        """The next event in the merged order, or None if none within ``max_await_time_ms``."""
        deadline = time.monotonic() + self._max_await_s
        while not self._closed:
            if time.monotonic() - self._listed_at >= _RELIST_S:
                self._add_new(self._token.token.commit_ts + 1)
            for name, cursor in list(self._cursors.items()):
                if name not in self._heads:
                    event = cursor.try_next()
                    if event is not None:
                        self._heads[name] = event
            ready = self._ready()
            if ready is not None:
                event = self._emit(ready)
                if event is not None:
                    return event
                continue
            if time.monotonic() >= deadline:
                self._note_progress()
                return None
        return None

    @property
    def resume_token(self) -> dict[str, str]:
        """Resume here with ``watch(resume_after=...)`` on the same server root."""
        return self._token.document()

    def close(self) -> None:
        self._closed = True
        for cursor in self._cursors.values():
            cursor.close()
        for db in self._databases.values():
            db.close()

    # -- merging ------------------------------------------------------------------------------

    def _position(self, name: str) -> ResumeToken:
        return ResumeToken.decode(self._cursors[name].resume_token, "resume_token")

    def _ready(self) -> str | None:
        """The database whose waiting event comes next, if no other can still precede it."""
        if not self._heads:
            return None
        keys = {
            name: (ResumeToken.decode(e["_id"], "_id").key, name) for name, e in self._heads.items()
        }
        first = min(keys, key=lambda name: (keys[name][0][0], name, keys[name][0]))
        ts = keys[first][0][0]
        for name in self._cursors:
            if name in self._heads:
                continue
            # Its next event may come at its position or later: it must be past ``ts``
            # (at ``ts`` when it sorts after ``first``).
            position = self._position(name).commit_ts
            if position < ts or (position == ts and name < first):
                return None
        return first

    def _emit(self, name: str) -> Document | None:
        event = self._heads.pop(name)
        inner = ResumeToken.decode(event["_id"], "_id")
        token = ClusterToken(name, inner)
        event = {**event, "_id": token.document()}
        self._token = token
        out = self._pipeline.apply(event)
        if out is None:
            return None
        if out.get("_id") != event["_id"]:
            self.close()
            raise InvalidArgument(
                "the pipeline removed or changed _id, which holds the event's resume token, so "
                "the stream could not be resumed from this event; keep _id in $project"
            )
        return out

    def _note_progress(self) -> None:
        """With nothing waiting, move the token up to where every database has read through."""
        if self._heads or not self._cursors:
            return
        safe = min(self._position(name).commit_ts for name in self._cursors)
        if safe > self._token.token.commit_ts:
            self._token = ClusterToken("", ResumeToken(safe))

    def _add_new(self, start: int | None) -> None:
        """Open a cursor on every database not watched yet (all of them on the first call)."""
        self._listed_at = time.monotonic()
        for name in sorted(set(self._list_names()) - set(self._cursors)):
            db = self._open(name)
            self._databases[name] = db
            self._cursors[name] = ChangeStreamCursor(db, None, None, **self._start(name, start))
            log.debug("watching database %s across the server (comment %r)", name, self.comment)

    def _start(self, name: str, start: int | None) -> dict[str, Any]:
        """The database cursor's arguments: where the merged stream stands, for this one."""
        arguments = dict(self._inner)
        resume = self._resume
        if (
            resume is not None
            and resume.database == name
            and resume.token.kind is not TokenKind.START
        ):
            arguments["resume_after"] = resume.token.document()
        elif start is not None:
            behind = resume is not None and name < resume.database
            arguments["start_at_operation_time"] = start + 1 if behind else start
        return arguments
