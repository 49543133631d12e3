"""Checkpointing: recording in a lease how far its partition has been processed."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from changestream.errors import FailedPrecondition, InvalidArgument
from changestream.streams.positions import Position
from changestream.streams.records import DataChangeRecord

if TYPE_CHECKING:
    from changestream.client._coordinator import HeldLease, LeaseCoordinator


class LeaseLost(FailedPrecondition):
    """This worker no longer holds the partition's lease, so it may not checkpoint it."""


class Checkpointer:
    """Given to a processor with every batch: ``checkpoint()`` marks everything delivered so
    far as processed, ``checkpoint(record_or_position)`` everything up to that point.

    Checkpoints only move forward and never past what was delivered. After a crash the
    partition is delivered again from the last checkpoint.
    """

    def __init__(
        self,
        coordinator: LeaseCoordinator,
        held: HeldLease,
        every_records: int | None = None,
        every_seconds: float | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._held = held
        self._every_records = every_records
        self._every_seconds = every_seconds
        self._records_since = 0
        self._checkpointed_at = time.monotonic()

    @property
    def partition_token(self) -> str:
        return self._held.token

    @property
    def largest_permitted(self) -> Position:
        """The furthest position a checkpoint may name now: the end of the latest batch."""
        return self._held.permitted

    @property
    def last_checkpoint(self) -> Position:
        """The position recorded by the latest checkpoint (or where the partition started)."""
        return self._held.checkpointed

    def checkpoint(self, position: Position | DataChangeRecord | None = None) -> None:
        """Record that everything up to ``position`` (default: all delivered) is processed.

        Raises :class:`LeaseLost` when another worker took the partition meanwhile, and
        InvalidArgument for a position past the delivered records, before the last
        checkpoint, or a record of another partition.
        """
        held = self._held
        if isinstance(position, DataChangeRecord):
            if position.partition_token and position.partition_token != held.token:
                raise InvalidArgument(
                    "checkpoint() was given a record of another partition "
                    f"({position.partition_token!r}); this checkpointer is for {held.token!r}"
                )
            position = Position.of(position)
        target = held.permitted if position is None else position
        if target > held.permitted:
            raise InvalidArgument(
                f"cannot checkpoint {target}: only records up to {held.permitted} were delivered"
            )
        if target < held.checkpointed:
            raise InvalidArgument(
                f"cannot checkpoint {target}: it is before the last checkpoint "
                f"{held.checkpointed}, and checkpoints only move forward"
            )
        if target == held.checkpointed and not held.lost.is_set():
            return
        if held.lost.is_set() or not self._coordinator.checkpoint(held, target):
            raise LeaseLost(
                f"the lease on partition {held.token!r} was lost, so the checkpoint at "
                f"{target} was not recorded; the new owner resumes from {held.checkpointed}"
            )
        self._records_since = 0
        self._checkpointed_at = time.monotonic()

    def note_processed(self, records: int) -> None:
        """Count a processed batch, and checkpoint when the automatic interval is due."""
        self._records_since += records
        due_records = self._every_records is not None and (
            self._records_since >= self._every_records
        )
        due_time = self._every_seconds is not None and (
            time.monotonic() - self._checkpointed_at >= self._every_seconds
        )
        if (due_records or due_time) and self._held.processed > self._held.checkpointed:
            self.checkpoint(self._held.processed)
