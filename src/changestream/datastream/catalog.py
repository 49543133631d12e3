"""The stream catalog: definitions, states, progress and errors, kept in the source database.

Everything lives in system documents of the source (``db.put_system_document``), so it is
shared by every process that opens the database, embedded or remote:

- kind ``datastream``, one document per stream: its definition and state; its log holds the
  stream's errors (FetchStreamErrors).
- kind ``datastream.progress``, one document per stream: what the pipeline has done. It is a
  separate document so the pipeline's frequent progress writes never conflict with a user's
  ``pause``.

Every change is a read-modify-write conditional on the version read; on a conflict it is
read again and re-validated (so of two concurrent ``start`` calls one wins and the other is
refused by the state machine), never applied blindly.
"""

from __future__ import annotations

import builtins
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from changestream.clock import format_ts, parse_ts
from changestream.datastream import backfill_jobs
from changestream.datastream.backfill_jobs import backfill_job
from changestream.datastream.definition import StreamDefinition
from changestream.datastream.states import (
    RECOVERABLE_STATES,
    StreamState,
    check_delete,
    next_state,
)
from changestream.datastream.validation import Check, refuse_on_failure, validate_stream
from changestream.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OutOfRange,
)
from changestream.streams.roles import PipelineDatabase

KIND = "datastream"
PROGRESS_KIND = "datastream.progress"
BACKFILL_STATUSES = ("pending", "running", "done", "stopped", "failed")
#: ``StreamProgress.detail`` keys: the last micro-batch counted, and the attached runner.
LAST_BATCH = "last_batch_id"
RUNNER = "runner"
#: ``StreamProgress.detail`` key: the data freshness the pipeline observed.
FRESHNESS = "freshness"
#: How many times CDC was restarted from a chosen position: each restart reads into a
#: checkpoint of its own (see ``SparkPipeline``), and the time of the last one.
CDC_GENERATION = "cdc_generation"
CDC_RECOVERED_AT = "cdc_recovered_at"
#: Datastream's CDC start strategies for start and resume.
CDC_STRATEGIES = ("most-recent", "next-available", "timestamp")
#: A runner whose heartbeat is older than this (seconds) is no longer attached.
RUNNER_TIMEOUT_SECONDS = 15.0
#: Read-modify-write attempts before a change gives up under constant contention.
MAX_ATTEMPTS = 50


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stored stream: its definition, state, when the state last changed (µs), and the
    version of its document."""

    definition: StreamDefinition
    state: StreamState
    state_changed_at: int
    version: int

    @property
    def name(self) -> str:
        return self.definition.name


@dataclass(frozen=True, slots=True)
class StreamError:
    """One entry of FetchStreamErrors: when (µs), which object (or ``""`` for the stream as a
    whole), what happened, and whether the pipeline retries it."""

    time: int
    object: str
    message: str
    retriable: bool

    @staticmethod
    def of(entry: Mapping[str, builtins.object]) -> StreamError:
        """The error a stream's log entry records."""
        time, obj, message = entry.get("time"), entry.get("object"), entry.get("message")
        retriable = entry.get("retriable")
        if not (
            isinstance(time, int)
            and isinstance(obj, str)
            and isinstance(message, str)
            and isinstance(retriable, bool)
        ):
            raise FailedPrecondition(f"a stream's error log holds a malformed entry: {entry!r}")
        return StreamError(time, obj, message, retriable)

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": format_ts(self.time),
            "object": self.object,
            "message": self.message,
            "retriable": self.retriable,
        }


@dataclass(frozen=True, slots=True)
class ObjectBackfill:
    """The backfill of one object: ``status`` pending/running/done, rows emitted, and the
    pipeline's own ``detail`` (chunk boundaries, their read timestamps, ...)."""

    status: str = "pending"
    rows: int = 0
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StreamProgress:
    """What the pipeline has done for a stream.

    ``rows_processed``: events emitted (backfill and CDC). ``last_commit_timestamp`` (µs):
    every change committed at or before it has been processed (the pipeline may advance it
    with heartbeats, so an idle source shows no lag). ``cdc_start_timestamp`` (µs): where CDC
    began (the backfill snapshot). ``objects``: backfill per object name. ``detail``: the
    pipeline's own stream-level data.
    """

    rows_processed: int = 0
    last_commit_timestamp: int | None = None
    cdc_start_timestamp: int | None = None
    objects: dict[str, ObjectBackfill] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_body(self) -> dict[str, Any]:
        return {
            "rows_processed": self.rows_processed,
            "last_commit_timestamp": self.last_commit_timestamp,
            "cdc_start_timestamp": self.cdc_start_timestamp,
            "objects": {
                name: {"status": o.status, "rows": o.rows, "detail": o.detail}
                for name, o in self.objects.items()
            },
            "detail": self.detail,
        }

    @staticmethod
    def from_body(body: Mapping[str, Any]) -> StreamProgress:
        return StreamProgress(
            rows_processed=body["rows_processed"],
            last_commit_timestamp=body["last_commit_timestamp"],
            cdc_start_timestamp=body["cdc_start_timestamp"],
            objects={name: ObjectBackfill(**o) for name, o in body["objects"].items()},
            detail=body["detail"],
        )


def _info(body: Mapping[str, Any], version: int) -> StreamInfo:
    return StreamInfo(
        StreamDefinition.from_dict(body["definition"]),
        StreamState(body["state"]),
        body["state_changed_at"],
        version,
    )


def _body(info: StreamInfo) -> dict[str, Any]:
    return {
        "definition": info.definition.to_dict(),
        "state": info.state.value,
        "state_changed_at": info.state_changed_at,
    }


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"{what} must be a non-negative integer, got {value!r}")
    return value


class StreamCatalog:
    """The streams defined in database ``db`` (embedded or remote), with their lifecycle."""

    def __init__(self, db: PipelineDatabase) -> None:
        self.db = db

    # -- definitions -------------------------------------------------------------------------

    def create(self, definition: StreamDefinition, *, force: bool = False) -> StreamInfo:
        """Validate ``definition`` against the database (every check of :meth:`validate`;
        ``force`` skips them) and store it, Not started. AlreadyExists when a stream of that
        name exists."""
        if not force:
            definition.validate(self.db)  # the precise error for a definition that cannot work
            refuse_on_failure(self.validate(definition), f"stream {definition.name!r}")
        now = self.db.current_timestamp()
        info = StreamInfo(replace(definition, created_at=now), StreamState.NOT_STARTED, now, 1)
        try:
            self.db.put_system_document(KIND, definition.name, _body(info), None)
        except AlreadyExists:
            raise AlreadyExists(f"stream {definition.name!r} already exists") from None
        # Progress a crash left behind when a stream of this name was deleted.
        self.db.delete_system_document(PROGRESS_KIND, definition.name)
        return info

    def validate(self, stream: StreamDefinition | str) -> list[Check]:
        """Datastream's validation of a definition, or of a defined stream about to start or
        resume (its CDC position is then checked against the change stream's retention)."""
        if isinstance(stream, StreamDefinition):
            return validate_stream(self.db, stream)
        definition = self.get(stream).definition
        progress = self.progress(stream)
        position = progress.last_commit_timestamp or progress.cdc_start_timestamp
        return validate_stream(self.db, definition, position)

    def list(self) -> list[StreamInfo]:
        """Every stream, by name."""
        found = self.db.system_documents(KIND)
        return [_info(found[name].body, found[name].version) for name in sorted(found)]

    def get(self, name: str) -> StreamInfo:
        """The stream called ``name``; NotFound listing the streams there are."""
        found = self.db.system_documents(KIND)
        document = found.get(name)
        if document is None:
            known = ", ".join(sorted(found)) or "none"
            raise NotFound(f"stream {name!r} does not exist (streams: {known})")
        return _info(document.body, document.version)

    def delete(self, name: str) -> None:
        """Remove a stream, its errors and its progress; only when no pipeline works on it
        (Not started, Paused, Failed, Failed permanently). Its files are left alone."""
        for _ in range(MAX_ATTEMPTS):
            info = self.get(name)
            check_delete(name, info.state)
            try:
                self.db.delete_system_document(KIND, name, info.version)
            except FailedPrecondition:
                continue  # changed since we read it: check its new state
            self.db.delete_system_document(PROGRESS_KIND, name)
            return
        raise self._contended(name)

    def update(self, name: str, *, force: bool = False, **changes: Any) -> StreamInfo:
        """Change stream ``name``'s definition (while it runs: its pipeline follows at the next
        micro-batch, backfilling objects added). ``changes`` are definition fields; the
        source, change stream, destination and replica stay, as they make the stream what it
        is (define a new one instead). The new definition is validated as :meth:`create`
        does unless ``force``."""
        fixed = {"name", "database", "change_stream", "destination", "replica", "created_at"}
        if fixed & set(changes):
            raise InvalidArgument(
                f"stream {name!r}: {', '.join(sorted(fixed & set(changes)))} cannot change; "
                "define a new stream instead"
            )
        for _ in range(MAX_ATTEMPTS):
            info = self.get(name)
            try:
                definition = replace(info.definition, **changes)
            except TypeError as exc:
                raise InvalidArgument(f"stream {name!r}: {exc}") from exc
            if not force:
                definition.validate(self.db)
                refuse_on_failure(self.validate(definition), f"update of stream {name!r}")
            updated = replace(info, definition=definition)
            try:
                self.db.put_system_document(KIND, name, _body(updated), info.version)
            except FailedPrecondition:
                continue  # another writer was first: apply the changes to what it wrote
            return updated
        raise self._contended(name)

    def recover(
        self, name: str, strategy: str = "most-recent", timestamp: Any = None
    ) -> tuple[StreamState, int | None]:
        """Start or resume stream ``name`` with Datastream's CDC start strategy (a stream
        Failed permanently included); returns the new state and where CDC restarts (None:
        it carries on where it was).

        ``most-recent``: carry on from the last position read. ``next-available``: the same,
        unless that position has expired from the change stream's retention: then restart at
        the oldest change kept, recording the gap as an error. ``timestamp``: replay from
        ``timestamp`` (within retention; events come again, replicas stay correct)."""
        if strategy not in CDC_STRATEGIES:
            raise InvalidArgument(
                f"CDC start strategy must be one of {', '.join(CDC_STRATEGIES)}, got {strategy!r}"
            )
        if (strategy == "timestamp") != (timestamp is not None):
            raise InvalidArgument("a timestamp goes with the timestamp strategy, and only there")
        definition = self.get(name).definition
        retention = next(
            (
                s.retention_seconds
                for s in self.db.change_streams()
                if s.name == definition.change_stream
            ),
            None,
        )
        if retention is None:
            raise NotFound(f"stream {name!r}: change stream {definition.change_stream!r} is gone")
        now = self.db.current_timestamp()
        oldest = now - retention * 1_000_000
        restart: int | None = None
        if strategy == "timestamp":
            restart = parse_ts(timestamp, "CDC start timestamp")
            if not oldest <= restart <= now:
                raise OutOfRange(
                    f"CDC start timestamp {format_ts(restart)} is outside the changes kept, "
                    f"{format_ts(oldest)} to now"
                )
        elif strategy == "next-available":
            progress = self.progress(name)
            position = progress.last_commit_timestamp or progress.cdc_start_timestamp
            if position is not None and position < oldest:
                restart = oldest
                self.record_error(
                    name,
                    "",
                    f"changes from {format_ts(position)} to {format_ts(oldest)} expired before "
                    "they were read; CDC restarted at the oldest change kept",
                    retriable=False,
                )
        for _ in range(MAX_ATTEMPTS):
            info = self.get(name)
            if info.state not in RECOVERABLE_STATES:
                raise FailedPrecondition(
                    f"cannot restart stream {name!r}: it is {info.state.value}; pause it first"
                )
            if restart is not None:
                self._restart_cdc(name, restart)
            updated = replace(
                info, state=StreamState.STARTING, state_changed_at=self.db.current_timestamp()
            )
            try:
                self.db.put_system_document(KIND, name, _body(updated), info.version)
            except FailedPrecondition:
                continue  # another writer was first: check its state again
            return StreamState.STARTING, restart
        raise self._contended(name)

    def _restart_cdc(self, name: str, at: int) -> None:
        recovered = self.db.current_timestamp()

        def change(progress: StreamProgress) -> StreamProgress:
            generation = int(progress.detail.get(CDC_GENERATION, 0)) + 1
            detail = {
                **progress.detail,
                CDC_GENERATION: generation,
                CDC_RECOVERED_AT: recovered,
                LAST_BATCH: -1,  # the new checkpoint numbers its batches from 0 again
            }
            return replace(
                progress, cdc_start_timestamp=at, last_commit_timestamp=at - 1, detail=detail
            )

        self._update_progress(name, change)

    # -- lifecycle ---------------------------------------------------------------------------

    def transition(self, name: str, verb: str) -> StreamState:
        """Apply lifecycle ``verb`` (see :mod:`changestream.datastream.states`) and persist the
        new state; FailedPrecondition naming the state and the allowed verbs when it does not
        apply. Returns the new state."""
        return self._transition(name, verb, lenient=False)

    def _transition(self, name: str, verb: str, lenient: bool) -> StreamState:
        for _ in range(MAX_ATTEMPTS):
            info = self.get(name)
            try:
                state = next_state(name, info.state, verb)
            except FailedPrecondition:
                if lenient:
                    return info.state
                raise
            updated = replace(info, state=state, state_changed_at=self.db.current_timestamp())
            try:
                self.db.put_system_document(KIND, name, _body(updated), info.version)
            except FailedPrecondition:
                continue  # another writer was first: validate against what it wrote
            return state
        raise self._contended(name)

    @staticmethod
    def _contended(name: str) -> FailedPrecondition:
        return FailedPrecondition(
            f"stream {name!r} changed concurrently {MAX_ATTEMPTS} times in a row; try again"
        )

    # -- errors (FetchStreamErrors) ---------------------------------------------------------

    def record_error(self, name: str, object: str, message: str, retriable: bool) -> None:
        """Log an error of ``object`` (``""``: the whole stream); the state is left alone."""
        self.get(name)
        entry = {"object": object, "message": message, "retriable": bool(retriable)}
        self.db.append_system_log(KIND, name, entry)

    def fail(self, name: str, object: str, message: str, retriable: bool) -> StreamState:
        """Log an error and move the stream to Failed (``retriable``) or Failed permanently.
        A stream no pipeline should be working on (paused meanwhile, say) keeps its state.
        Returns the state the stream is in."""
        self.record_error(name, object, message, retriable)
        return self._transition(name, "fail" if retriable else "fail_permanently", lenient=True)

    def errors(self, name: str, limit: int = 100) -> builtins.list[StreamError]:
        """The stream's last ``limit`` errors, oldest first."""
        self.get(name)
        return [StreamError.of(e) for e in self.db.system_log(KIND, name, limit)]

    # -- progress ----------------------------------------------------------------------------

    def progress(self, name: str) -> StreamProgress:
        """What the pipeline has recorded for the stream (all zero before it ran)."""
        self.get(name)
        document = self.db.system_documents(PROGRESS_KIND).get(name)
        return StreamProgress() if document is None else StreamProgress.from_body(document.body)

    def update_progress(
        self,
        name: str,
        *,
        add_rows: int = 0,
        last_commit_timestamp: int | None = None,
        cdc_start_timestamp: int | None = None,
        detail: Mapping[str, Any] | None = None,
        batch_id: int | None = None,
    ) -> StreamProgress:
        """Add ``add_rows`` to the rows processed (unless ``batch_id`` is given and not above
        the last one recorded: a replayed micro-batch is counted once); advance
        ``last_commit_timestamp`` (it never moves back); set ``cdc_start_timestamp``; merge
        ``detail`` into the stream's detail (the keys given replace those keys). Returns the
        progress as written."""
        _count(add_rows, "add_rows")
        if last_commit_timestamp is not None:
            _count(last_commit_timestamp, "last_commit_timestamp")
        if cdc_start_timestamp is not None:
            _count(cdc_start_timestamp, "cdc_start_timestamp")

        def change(progress: StreamProgress) -> StreamProgress:
            last = progress.last_commit_timestamp
            if last_commit_timestamp is not None:
                last = max(last or 0, last_commit_timestamp)
            added, batches = add_rows, {}
            if batch_id is not None:
                if batch_id <= progress.detail.get(LAST_BATCH, -1):
                    added = 0
                batches = {LAST_BATCH: max(batch_id, progress.detail.get(LAST_BATCH, -1))}
            return replace(
                progress,
                rows_processed=progress.rows_processed + added,
                last_commit_timestamp=last,
                cdc_start_timestamp=(
                    progress.cdc_start_timestamp
                    if cdc_start_timestamp is None
                    else cdc_start_timestamp
                ),
                detail={**progress.detail, **(detail or {}), **batches},
            )

        return self._update_progress(name, change)

    def heartbeat(self, name: str, lag_seconds: float | None, attached: bool = True) -> None:
        """Record that this process runs the stream's pipeline, ``lag_seconds`` behind the
        source (``attached=False``: it has stopped). ``describe`` shows a pipeline as attached
        while its heartbeat is under ``RUNNER_TIMEOUT_SECONDS`` old."""
        runner = (
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "heartbeat": self.db.current_timestamp(),
                "lag": lag_seconds,
            }
            if attached
            else None
        )
        self.update_progress(name, detail={RUNNER: runner})

    def set_object_backfill(
        self,
        name: str,
        object: str,
        status: str | None,
        *,
        rows: int | None = None,
        add_rows: int = 0,
        detail: Mapping[str, Any] | None = None,
        fresh: bool = False,
    ) -> ObjectBackfill:
        """Record the backfill of ``object``: its ``status`` (pending, running, done, stopped,
        failed; None keeps the one it has, so a stop is not overwritten), its row count (set
        to ``rows``, then ``add_rows`` added, so parallel chunks can each add theirs), and
        ``detail`` merged into its detail (``fresh``: replacing it). Returns the object's entry
        as written."""
        if status is not None and status not in BACKFILL_STATUSES:
            raise InvalidArgument(
                f"backfill status must be one of {', '.join(BACKFILL_STATUSES)}, got {status!r}"
            )
        if rows is not None:
            _count(rows, "rows")
        _count(add_rows, "add_rows")

        def change(progress: StreamProgress) -> StreamProgress:
            old = progress.objects.get(object, ObjectBackfill())
            new = ObjectBackfill(
                old.status if status is None else status,
                (old.rows if rows is None else rows) + add_rows,
                {**({} if fresh else old.detail), **(detail or {})},
            )
            return replace(progress, objects={**progress.objects, object: new})

        return self._update_progress(name, change).objects[object]

    def _update_progress(
        self, name: str, change: Callable[[StreamProgress], StreamProgress]
    ) -> StreamProgress:
        self.get(name)  # no progress for a stream that is gone
        for _ in range(MAX_ATTEMPTS):
            document = self.db.system_documents(PROGRESS_KIND).get(name)
            if document is None:
                current, version = StreamProgress(), None
            else:
                current, version = StreamProgress.from_body(document.body), document.version
            updated = change(current)
            try:
                self.db.put_system_document(PROGRESS_KIND, name, updated.to_body(), version)
            except (AlreadyExists, FailedPrecondition):
                continue  # another writer was first: apply ours to what it wrote
            return updated
        raise self._contended(name)

    # -- backfill jobs -----------------------------------------------------------------------

    def start_backfill(self, name: str, object: str, where: str | None = None) -> ObjectBackfill:
        """Start the backfill job of ``object`` (see :func:`backfill_jobs.start_backfill`)."""
        return backfill_jobs.start_backfill(self, name, object, where)

    def stop_backfill(self, name: str, object: str) -> ObjectBackfill:
        """Stop the backfill job of ``object`` (see :func:`backfill_jobs.stop_backfill`)."""
        return backfill_jobs.stop_backfill(self, name, object)

    # -- describe ----------------------------------------------------------------------------

    def describe(self, name: str) -> dict[str, Any]:
        """The stream for people and scripts: state, definition, backfill per object (status
        and rows), rows processed, the last processed commit, where CDC started, and lag
        (seconds behind the source, as the attached pipeline last measured it; None while no
        pipeline is attached: one is when its runner's heartbeat is recent)."""
        info = self.get(name)
        definition = info.definition
        progress = self.progress(name)
        try:
            tables = [t.name for t in definition.tables(self.db)]
        except NotFound:
            tables = []  # the change stream is gone; the progress still tells what was done
        default = "pending" if definition.backfill == "automatic" else "skipped"
        objects = {definition.object_name(t): t for t in tables}
        backfill = []
        for obj in sorted({*objects, *progress.objects}):
            entry = progress.objects.get(obj)
            backfill.append(
                {
                    "object": obj,
                    "table": objects.get(obj),
                    "status": default if entry is None else entry.status,
                    "rows": 0 if entry is None else entry.rows,
                    "backfill_job": backfill_job(definition, entry, obj in objects),
                }
            )
        last = progress.last_commit_timestamp
        cdc = progress.cdc_start_timestamp
        recovered = progress.detail.get(CDC_RECOVERED_AT)
        runner: dict[str, Any] = progress.detail.get(RUNNER) or {}
        # Heartbeats and this look both use the database's clock: the pipeline may run on
        # another machine than this describe.
        age = (self.db.current_timestamp() - runner["heartbeat"]) / 1e6 if runner else None
        attached = age is not None and age < RUNNER_TIMEOUT_SECONDS
        return {
            "name": definition.name,
            "state": info.state.value,
            "state_changed_at": format_ts(info.state_changed_at),
            "definition": definition.to_display_dict(),
            "objects": backfill,
            "rows_processed": progress.rows_processed,
            "last_processed_commit_timestamp": None if last is None else format_ts(last),
            "cdc_start_timestamp": None if cdc is None else format_ts(cdc),
            "cdc_recovered_at": None if recovered is None else format_ts(recovered),
            "pipeline_attached": attached,
            "pipeline": (
                {"host": runner["host"], "pid": runner["pid"], "lag_seconds": runner["lag"]}
                if attached
                else None
            ),
            "lag_seconds": runner["lag"] if attached else None,
            "data_freshness": {
                "limit_seconds": definition.data_freshness,
                **(progress.detail.get(FRESHNESS) or {}),
            },
        }
