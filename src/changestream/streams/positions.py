"""Positions within one partition: how far a reader has got, what a record moves it to, and
whether a record is behind it (a reader resuming skips those); with their text form, kept in
the Stream Client's lease table as ``Checkpoint``."""

from __future__ import annotations

from dataclasses import dataclass

from changestream.clock import format_ts
from changestream.errors import InvalidArgument
from changestream.streams.records import DataChangeRecord
from changestream.streams.stored_changes import StoredInserts, StoredRecord

#: Above every record sequence (they have eight digits): past every record at a timestamp.
AFTER_ALL = 99_999_999
#: Below every record sequence: before every record at a timestamp.
BEFORE_ALL = -1


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A point in a partition: every record up to ``(timestamp, sequence)`` is behind it.

    ``timestamp`` is a commit timestamp in microseconds and ``sequence`` a record sequence
    as a number; :data:`BEFORE_ALL` and :data:`AFTER_ALL` stand before and after every
    record at ``timestamp`` (a heartbeat moves a position to ``AFTER_ALL``).
    """

    timestamp: int
    sequence: int

    @staticmethod
    def of(record: DataChangeRecord | StoredInserts) -> Position:
        """The position just after ``record``."""
        return Position(record.commit_timestamp, int(record.record_sequence))

    @staticmethod
    def after(record: StoredRecord) -> Position:
        """Where ``record`` moves a reader: just after a data change (inserts stored compact
        are one); after every record at or before the timestamp of the other two."""
        if isinstance(record, DataChangeRecord | StoredInserts):
            return Position.of(record)
        return Position.through(record.timestamp)

    def covers(self, record: StoredRecord) -> bool:
        """Whether ``record`` is at or behind this position (a child partitions record, which
        ends a partition, never is)."""
        return not record.ends_partition and Position.after(record) <= self

    @staticmethod
    def before(timestamp: int) -> Position:
        """Before every record committed at or after ``timestamp``."""
        return Position(timestamp, BEFORE_ALL)

    @staticmethod
    def through(timestamp: int) -> Position:
        """After every record committed at or before ``timestamp``."""
        return Position(timestamp, AFTER_ALL)

    def to_text(self) -> str:
        """The form stored in the lease table: ``<microseconds>:<sequence>``."""
        return f"{self.timestamp}:{self.sequence}"

    @staticmethod
    def from_text(text: str) -> Position:
        """Parse :meth:`to_text`."""
        timestamp, sep, sequence = text.partition(":")
        try:
            if not sep:
                raise ValueError(text)
            return Position(int(timestamp), int(sequence))
        except ValueError:
            raise InvalidArgument(
                f"a checkpoint position must look like <microseconds>:<sequence>, got {text!r}"
            ) from None

    def __str__(self) -> str:
        moment = format_ts(self.timestamp)
        if self.sequence == AFTER_ALL:
            return f"{moment} (all)"
        if self.sequence == BEFORE_ALL:
            return f"{moment} (start)"
        return f"{moment}#{self.sequence}"
