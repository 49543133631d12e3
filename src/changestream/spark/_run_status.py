"""What a pipeline run is told and tells: its options, its status, its failures, and which
errors are worth retrying."""

from __future__ import annotations

from dataclasses import dataclass, field

from changestream.clock import now_us
from changestream.errors import (
    ChangeStreamError,
    DatabaseBusy,
    FailedPrecondition,
    Unavailable,
)

#: The state a status reports once the stream's definition is gone.
DELETED = "Deleted"

#: Errors worth retrying: the destination or the source may come back.
RETRIABLE = (OSError, Unavailable, DatabaseBusy, TimeoutError)
#: Names of errors that, raised in a Spark task, are worth retrying (tasks' exceptions reach
#: the driver as text).
_RETRIABLE_NAMES = (
    "OSError",
    "PermissionError",
    "NotADirectoryError",
    "FileNotFoundError",
    "IsADirectoryError",
    "Unavailable",
    "DatabaseBusy",
    "TimeoutError",
    "ConnectionError",
)
_PERMANENT_NAMES = ("InvalidArgument", "FailedPrecondition", "NotFound", "OutOfRange")
#: Rows per micro-batch by default (admission control: the executors' and the driver's work
#: per batch stays bounded however large the backlog).
DEFAULT_MAX_RECORDS_PER_TRIGGER = 200_000
DEFAULT_MAX_BYTES_PER_TRIGGER = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """How ``pipeline run`` runs.

    ``until_caught_up``: stop once every change committed before the run started has landed
    (Spark's ``availableNow`` trigger). ``trigger_seconds``: the micro-batch interval.
    ``max_records_per_trigger`` and ``max_bytes_per_trigger``: admission control (changes, and
    bytes of change records, per micro-batch; None for no limit).
    ``chunk_rows``: rows per backfill chunk. ``attempts``: tries of each batch's work (with
    backoff) before the batch fails. ``restarts``: automatic restarts of the query after a
    retriable failure. ``batch_timeout_seconds``: a micro-batch running longer fails the run.
    ``compact_every``: every this many MERGEs into a replica (0: never), its small files are
    compacted and files older versions alone need, past ``vacuum_retention_hours``, deleted.
    ``spark_log``: where the JVM's own output goes when the pipeline starts Spark (default:
    ``spark.log`` in the stream's ``_changestream`` directory), so it stays off the terminal.
    """

    master: str = "local[2]"
    token: str | None = None
    until_caught_up: bool = False
    trigger_seconds: float = 1.0
    max_records_per_trigger: int | None = DEFAULT_MAX_RECORDS_PER_TRIGGER
    max_bytes_per_trigger: int | None = DEFAULT_MAX_BYTES_PER_TRIGGER
    chunk_rows: int = 10_000
    attempts: int = 3
    backoff_seconds: float = 0.5
    restarts: int = 3
    poll_seconds: float = 0.5
    batch_timeout_seconds: float = 900.0
    heartbeat_seconds: float = 2.0
    compact_every: int = 50
    vacuum_retention_hours: float = 168.0
    spark_log: str | None = None


@dataclass(slots=True)
class PipelineStatus:
    """What a running pipeline reports on every poll (for progress bars)."""

    state: str
    rows_processed: int = 0
    frontier: int | None = None
    target: int | None = None
    backfill: dict[str, str] = field(default_factory=dict)
    idle: bool = False
    #: The source database's clock when the status was taken, which the lag is measured
    #: against (None: this machine's clock).
    now: int | None = None

    @property
    def lag_seconds(self) -> float | None:
        if self.idle:
            return 0.0
        if self.frontier is None:
            return None
        now = now_us() if self.now is None else self.now
        return max(0.0, (now - self.frontier) / 1e6)


class PipelineFailed(FailedPrecondition):
    """The pipeline stopped on an error (recorded in the stream's errors); ``retriable``
    says whether running it again may succeed."""

    def __init__(self, message: str, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable
        #: Whether the query had started (a failure then may be followed by a restart).
        self.while_running = False


class BatchError(Exception):
    """A micro-batch failed; carries what to record."""

    def __init__(self, obj: str, message: str, retriable: bool) -> None:
        super().__init__(message)
        self.obj, self.message, self.retriable = obj, message, retriable


def classify(exc: BaseException) -> tuple[str, bool]:
    """A one-line message for ``exc`` and whether retrying may help. Errors raised in Spark
    tasks arrive as text, so their class names are looked for in it."""
    if isinstance(exc, ChangeStreamError) and not isinstance(exc, Unavailable | DatabaseBusy):
        return f"{type(exc).__name__}: {exc}", False
    if isinstance(exc, RETRIABLE):
        return f"{type(exc).__name__}: {exc}", True
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        name = line.split(":", 1)[0].rsplit(".", 1)[-1]
        if name in _PERMANENT_NAMES:
            return line, False
        if name in _RETRIABLE_NAMES:
            return line, True
    return f"{type(exc).__name__}: {lines[0] if lines else text}", False
