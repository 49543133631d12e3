"""Planning reads on the driver: which partition ranges a batch or micro-batch reads.

Everything goes through the database roles (embedded file or server), so a job reads
a local file or a remote server alike.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Generator, Iterator, Sequence

from changestream.clock import format_ts
from changestream.errors import NotFound, OutOfRange
from changestream.spark._options import EARLIEST, LATEST
from changestream.spark.frontier import (
    Frontier,
    LineageEntry,
    ReadRange,
    advance,
    changed,
    ranges,
)
from changestream.streams.records import DataChangeRecord, data_changes
from changestream.streams.roles import ChangeStreamSource

log = logging.getLogger(__name__)

#: Ranges spanning less commit time than this are not cut for parallelism: each task has a
#: fixed cost (a database opened, files written) that a short range does not repay.
MIN_CUT_US = 5_000_000

#: ``earliest`` starts this far inside the retention window, so the changes it names are
#: still there when the first micro-batch reads them.
EARLIEST_MARGIN_US = 5_000_000


def resolve_position(
    db: ChangeStreamSource, stream: str, position: int | str, fail_on_data_loss: bool
) -> int:
    """A start position as a timestamp: ``latest`` is now, ``earliest`` the oldest retained
    change (a few seconds inside the retention window, so it is still there when read). A
    timestamp older than that fails with ``failOnDataLoss`` (the default), or else starts at
    the oldest retained change, logging the gap."""
    now = db.current_timestamp()
    if position == LATEST:
        return now
    streams = {s.name: s for s in db.change_streams()}
    if stream not in streams:
        raise NotFound(
            f"change stream {stream!r} does not exist (change streams: "
            f"{', '.join(sorted(streams)) or 'none'})"
        )
    created = min((p.start_timestamp for p in db.partition_history(stream)), default=now)
    horizon = now - streams[stream].retention_seconds * 1_000_000
    oldest = max(created, horizon)
    if position == EARLIEST:
        return min(now, max(created, horizon + EARLIEST_MARGIN_US))
    assert isinstance(position, int)
    if position >= oldest:
        return position
    if fail_on_data_loss:
        raise OutOfRange(
            f"startingTimestamp {format_ts(position)} is older than the oldest retained change "
            f"of {stream!r} ({format_ts(oldest)}); start at 'earliest', or set failOnDataLoss "
            "to false to start there anyway (the gap is logged)"
        )
    start = min(now, max(created, horizon + EARLIEST_MARGIN_US))
    log.warning(
        "data loss: changes of %s from %s to %s are no longer retained; reading from %s",
        stream,
        format_ts(position),
        format_ts(start),
        format_ts(start),
    )
    return start


def live_tokens(db: ChangeStreamSource, stream: str, at: int) -> list[str]:
    """The partitions live at ``at``, by the read function's initial query (which returns
    only once no commit at or below ``at`` can still appear)."""
    tokens: list[str] = []
    for record in db.read_change_stream(stream, at, at):
        tokens.extend(c.token for c in record.children)
    return tokens


def lineage(db: ChangeStreamSource, stream: str) -> dict[str, LineageEntry]:
    """Every partition of ``stream`` still within retention, by token."""
    return {p.token: p for p in db.partition_history(stream)}


def batch_ranges(db: ChangeStreamSource, stream: str, start: int, end: int) -> list[ReadRange]:
    """Every partition range holding records of ``stream`` committed in ``[start, end]``:
    the partitions live at ``start`` and, following the lineage, their descendants."""
    roots = live_tokens(db, stream, start)
    history = lineage(db, stream)
    out: list[ReadRange] = []
    seen: set[str] = set()
    frontier = list(roots)
    while frontier:
        token = frontier.pop()
        if token in seen:
            continue
        seen.add(token)
        entry = history.get(token)
        if entry is None:
            raise OutOfRange(f"partition {token!r} of {stream!r} left the retention window")
        first = max(start, entry.start_timestamp)
        if first > end:
            continue
        last = end if entry.end_timestamp is None else min(end, entry.end_timestamp - 1)
        if first <= last:
            out.append(ReadRange(token, first, last))
        if entry.end_timestamp is not None and entry.end_timestamp <= end:
            frontier.extend(entry.child_tokens)
    return sorted(out, key=lambda r: (r.start, r.token))


def group(reads: Sequence[ReadRange], groups: int) -> list[list[ReadRange]]:
    """At most ``groups`` lists of ranges, round-robin so big and small mix. With fewer
    ranges than groups, the longest are first cut in two by time (a range's records are
    still each read once, by one of its halves) while they span at least ``MIN_CUT_US``, so
    catching up on one busy partition keeps every task slot busy."""
    reads = list(reads)
    while 0 < len(reads) < groups:
        longest = max(reads, key=lambda r: (r.end - r.start, r.token, r.start))
        if longest.end - longest.start < MIN_CUT_US:
            break  # a short range (a live micro-batch) costs more cut than whole
        middle = longest.start + (longest.end - longest.start) // 2
        at = reads.index(longest)
        reads[at : at + 1] = [
            ReadRange(longest.token, longest.start, middle),
            ReadRange(longest.token, middle + 1, longest.end),
        ]
    buckets: list[list[ReadRange]] = [[] for _ in range(min(groups, len(reads)))]
    for index, read in enumerate(reads):
        buckets[index % len(buckets)].append(read)
    return buckets


def read_records(
    db: ChangeStreamSource, stream: str, read: ReadRange
) -> Generator[DataChangeRecord, None, None]:
    """The data change records of one range, in commit order."""
    yield from data_changes(db.read_change_stream(stream, read.start, read.end, read.token))


#: Commit timestamps asked for at a time when sizing a micro-batch: a first page, then
#: doubling up to the most (a range holding more is paged through only as far as the
#: limits need, and a batch of many partitions sizes little more of each than it takes).
FIRST_SIZES_PAGE = 256
MOST_SIZES_PAGE = 16_384


def _sizes(
    db: ChangeStreamSource, stream: str, read: ReadRange, row_per_mod: bool, page: int
) -> Iterator[tuple[int, int, int]]:
    """(commit timestamp, rows, bytes) per commit timestamp of one range, asked for ``page``
    at a time at first: the rows the source makes of its records (mods, or records) and the
    bytes of their JSON as stored. The database counts them; no record is read here."""
    start = read.start
    while start <= read.end:
        sizes = db.change_sizes(stream, read.token, start, read.end, page)
        for size in sizes:
            rows = size.mods if row_per_mod else size.records
            if rows:
                yield size.commit_timestamp, rows, size.bytes
        if len(sizes) < page:
            return
        start = sizes[-1].commit_timestamp + 1
        page = min(2 * page, MOST_SIZES_PAGE)


def next_frontier(
    db: ChangeStreamSource,
    stream: str,
    start: Frontier,
    until: int,
    max_records: int | None,
    idle_advance_us: int,
    row_per_mod: bool = False,
    max_bytes: int | None = None,
) -> Frontier:
    """Where the next micro-batch ends: at ``until`` (which must be safe), or earlier so it
    holds at most ``max_records`` rows (records, or mods with ``row_per_mod``) and about
    ``max_bytes`` of change records (one whole commit timestamp at least); ``start`` itself
    when nothing was committed, no partition ended, and the frontier moved less than
    ``idle_advance_us`` ago."""
    history = lineage(db, stream)
    end = advance(start, history, until)
    limited = max_records is not None or max_bytes is not None
    page = FIRST_SIZES_PAGE if limited else 1  # unlimited: only whether anything is there
    # A commit timestamp at a time, not a row: the limits are crossed at the same commit
    # timestamp as row by row (sums of rows and bytes only grow), and cuts keep whole ones.
    sizes = heapq.merge(*(_sizes(db, stream, r, row_per_mod, page) for r in ranges(start, end)))
    stamps: list[int] = []
    over = False
    rows = size = 0
    for stamp, count, stamp_bytes in sizes:
        stamps.append(stamp)
        rows += count
        size += stamp_bytes
        if not limited:
            break
        over = (max_records is not None and rows > max_records) or (
            max_bytes is not None and size > max_bytes and rows > 1
        )
        if over:
            break
    if over:
        # Cut before the first row over a limit, keeping whole commit timestamps; an
        # admitted child may hold records from before the frontier, which cannot move back.
        cut = min(until, max(stamps[-1] - 1, stamps[0], start.timestamp + 1))
        end = advance(start, history, cut)
    elif not stamps and not changed(start, end) and until - start.timestamp < idle_advance_us:
        return start
    return end
