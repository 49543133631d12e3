"""Streaming offsets as a frontier over the partition lineage.

An offset says how far a query has read: every record committed at or before ``timestamp`` in
the ``live`` partitions (so each live partition's position is ``timestamp``); the partitions
that ended, read to their end, whose children are not all admitted yet (with their end
timestamps); and the children admitted by the batch that ends at this offset, with the
timestamp each starts at (they are read from there). A child is admitted once every parent
has ended (in an earlier batch or in the same one), so no record of a child is read before the
batch that reads its parents' last records. ``watermark`` is the timestamp through which
every record of the stream has been read: ``timestamp``, or less while ended partitions wait
for their children.

Offsets stay small (Spark stores one per micro-batch, and very long offsets break its
parsing): tokens appear once, and children come from the (immutable) lineage. Everything here
is a pure function of offsets and the lineage, so planning a batch again from the same two
offsets gives the same ranges: what Spark's checkpoint needs for exactly-once sinks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from changestream.errors import InvalidArgument
from changestream.streams.lineage import parents_finished

OFFSET_VERSION = 2


class LineageEntry(Protocol):
    """What the frontier needs of a partition (``Database.partition_history`` gives these)."""

    @property
    def token(self) -> str: ...
    @property
    def start_timestamp(self) -> int: ...
    @property
    def end_timestamp(self) -> int | None: ...
    @property
    def parent_tokens(self) -> tuple[str, ...]: ...
    @property
    def child_tokens(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Read ``token`` from ``start`` to ``end`` (commit timestamps, both inclusive)."""

    token: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Frontier:
    """One streaming offset (see the module docstring)."""

    timestamp: int
    live: frozenset[str]
    #: Ended partitions waiting for their children to be admitted: token -> end timestamp.
    ended: Mapping[str, int] = field(default_factory=dict)
    #: Children admitted by the batch ending here: token -> start timestamp.
    admitted: Mapping[str, int] = field(default_factory=dict)

    @staticmethod
    def initial(start: int, tokens: list[str]) -> Frontier:
        """Nothing read yet: the partitions live at ``start`` are read from ``start``."""
        return Frontier(start - 1, frozenset(tokens))

    @property
    def watermark(self) -> int:
        """Every record committed at or before this has been read."""
        return min([self.timestamp, *(end - 1 for end in self.ended.values())])

    def to_offset(self) -> dict[str, Any]:
        """The JSON-able dict Spark stores in its offset log."""
        return {
            "version": OFFSET_VERSION,
            "timestamp": self.timestamp,
            "watermark": self.watermark,
            "live": sorted(self.live),
            "ended": dict(sorted(self.ended.items())),
            "admitted": dict(sorted(self.admitted.items())),
        }

    @staticmethod
    def from_offset(offset: Mapping[str, Any]) -> Frontier:
        """Parse a stored offset (refusing one written by an incompatible version)."""
        if offset.get("version") != OFFSET_VERSION:
            raise InvalidArgument(
                f"checkpointed offset has version {offset.get('version')!r}, this source "
                f"reads version {OFFSET_VERSION}; start the query with a new checkpoint"
            )
        return Frontier(
            timestamp=int(offset["timestamp"]),
            live=frozenset(str(t) for t in offset["live"]),
            ended={str(t): int(e) for t, e in offset["ended"].items()},
            admitted={str(t): int(s) for t, s in offset["admitted"].items()},
        )


def advance(start: Frontier, lineage: Mapping[str, LineageEntry], until: int) -> Frontier:
    """The frontier after reading every partition from ``start`` through ``until``.

    Children are admitted once every parent has ended, in an earlier batch or in this one, so
    a lineage that split many times while a query was down is caught up in one batch: every
    generation whose parents end at or before ``until`` is read in it.

    ``until`` must be a timestamp no commit can still appear at or below, and ``lineage``
    must have been read after that was known (so every split or merge up to it is in it).
    """
    if until < start.timestamp:
        raise ValueError(f"cannot move a frontier back from {start.timestamp} to {until}")
    ended = dict(start.ended)
    live: set[str] = set()
    admitted: dict[str, int] = {}
    read = set(start.live) | set(start.ended)
    todo = sorted(start.live)
    while todo:
        for token in todo:
            end = lineage[token].end_timestamp
            if end is not None and end <= until + 1:
                ended[token] = end
            else:
                live.add(token)
        children = sorted({c for token in ended for c in lineage[token].child_tokens} - read)
        todo = [
            child for child in children if parents_finished(lineage[child].parent_tokens, ended)
        ]
        for child in todo:
            admitted[child] = lineage[child].start_timestamp
            read.add(child)
    waiting = {
        token: end
        for token, end in ended.items()
        if not all(c in read for c in lineage[token].child_tokens)
    }
    return Frontier(until, frozenset(live), waiting, admitted)


def ranges(start: Frontier, end: Frontier) -> list[ReadRange]:
    """What the batch from ``start`` to ``end`` reads, per partition, in token order."""
    reads = {**{token: start.timestamp + 1 for token in start.live}, **end.admitted}
    out = []
    for token, first in sorted(reads.items()):
        last = end.timestamp
        if token in end.ended:
            last = min(last, end.ended[token] - 1)
        if first <= last:
            out.append(ReadRange(token, first, last))
    return out


def changed(start: Frontier, end: Frontier) -> bool:
    """Whether the lineage moved between two frontiers (ends or admissions)."""
    return bool(end.admitted) or set(start.ended) != set(end.ended)
