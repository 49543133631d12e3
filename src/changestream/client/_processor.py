"""What a user writes: a record processor per partition, made by a factory."""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from changestream.streams.positions import Position
from changestream.streams.records import DataChangeRecord

if TYPE_CHECKING:
    from changestream.client._checkpointer import Checkpointer


class ShutdownReason(enum.Enum):
    """Why a processor's partition stops being processed by this worker."""

    #: The worker is stopping, or hands the partition to another worker to even the load;
    #: the client checkpoints what was processed once ``shutdown`` returns.
    REQUESTED = "requested"
    #: Every record of the partition was processed; the client checkpoints the end so the
    #: children can start.
    PARTITION_END = "partition_end"
    #: Another worker took the lease; checkpointing is refused, the new owner resumes
    #: from the last checkpoint.
    LEASE_LOST = "lease_lost"


@dataclass(frozen=True, slots=True)
class InitializationContext:
    """What a processor is about to read: delivery resumes after ``start``."""

    stream: str
    consumer: str
    worker_id: str
    partition_token: str
    parent_tokens: tuple[str, ...]
    start: Position
    #: The partition's last checkpoint, or None when nothing was checkpointed yet.
    checkpoint: Position | None


class RecordBatch(list[DataChangeRecord]):
    """One batch of a partition's records, in commit order: a list, plus how far behind it is.

    ``millis_behind_latest`` (KCL's name) is how far behind current time the processor is:
    milliseconds from the commit of the batch's last record to the moment the batch is
    handed over, by the database's clock (whatever the worker's machine's says). At the head
    of the stream it is the commit-to-processor latency (a few milliseconds); while a backlog
    is worked off it is the age of the backlog.
    """

    __slots__ = ("millis_behind_latest",)

    def __init__(self, records: Iterable[DataChangeRecord] = (), millis_behind_latest: int = 0):
        super().__init__(records)
        self.millis_behind_latest = millis_behind_latest


class RecordProcessor(abc.ABC):
    """Processes one partition's records in order (the seed's IRecordProcessor).

    A processor instance serves one lease from ``initialize`` to ``shutdown``. Records
    are delivered at least once: after a crash, the records after the last checkpoint are
    delivered again, so make the processing idempotent or checkpoint often.
    """

    def initialize(self, context: InitializationContext) -> None:  # noqa: B027
        """Called once before the first batch of the partition."""

    @abc.abstractmethod
    def process_records(self, records: RecordBatch, checkpointer: Checkpointer) -> None:
        """Handle one batch, in commit order (``records.millis_behind_latest`` says how far
        behind it is). Raising retries the same batch with backoff;
        ``checkpointer.checkpoint()`` marks everything delivered so far as done."""

    def shutdown(self, reason: ShutdownReason, checkpointer: Checkpointer) -> None:  # noqa: B027
        """Called once when this worker stops processing the partition; flush here."""


ProcessorFactory = Callable[[], RecordProcessor]
