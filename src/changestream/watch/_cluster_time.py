"""``clusterTime``: a commit timestamp in the shape of MongoDB's 64-bit BSON Timestamp."""

from __future__ import annotations

from dataclasses import dataclass

_US_PER_S = 1_000_000


@dataclass(frozen=True, slots=True, order=True)
class ClusterTime:
    """32-bit seconds since the epoch (``time``) and a counter within the second (``inc``).

    The counter is the commit timestamp's microsecond within its second, so ClusterTimes order
    exactly like commit timestamps, every transaction has its own (commit timestamps are unique
    per transaction), and :meth:`to_us` gives the commit timestamp back. Events of one
    transaction share it, as in MongoDB.
    """

    time: int
    inc: int

    @staticmethod
    def from_us(us: int) -> ClusterTime:
        """The ClusterTime of a commit timestamp in microseconds."""
        seconds, micros = divmod(us, _US_PER_S)
        return ClusterTime(seconds, micros)

    def to_us(self) -> int:
        """The commit timestamp in microseconds."""
        return self.time * _US_PER_S + self.inc

    def as_int64(self) -> int:
        """The 64-bit form: seconds in the high 32 bits, the counter in the low 32."""
        return self.time << 32 | self.inc

    def __repr__(self) -> str:
        return f"Timestamp({self.time}, {self.inc})"
