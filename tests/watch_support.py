"""Helpers shared by the watch() tests: bounded waits for events, and event keys."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import changestream
from changestream.watch import ChangeStreamCursor
from changestream.watch.tokens import EventKey, ResumeToken

ITEMS = "CREATE TABLE Items (Id INT64 NOT NULL, V STRING(MAX), N INT64) PRIMARY KEY (Id)"


def items_database(path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    """A database at ``path`` holding the Items table, closed when the generator is (for
    fixtures: ``yield from items_database(...)``)."""
    with changestream.open(str(path)) as database:
        database.execute_ddl(ITEMS)
        yield database


COLUMNS = ["Id", "V", "N"]
#: Every wait is bounded so a broken cursor fails a test instead of hanging it.
WAIT_S = 30.0


def take(cursor: ChangeStreamCursor, count: int, wait_s: float = WAIT_S) -> list[dict[str, Any]]:
    """The cursor's next ``count`` events; fails if they do not come within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    events: list[dict[str, Any]] = []
    while len(events) < count:
        assert time.monotonic() < deadline, f"only {len(events)} of {count} events: {events}"
        event = cursor.try_next()
        if event is not None:
            events.append(event)
        else:
            assert cursor.alive, f"cursor closed after {len(events)} of {count} events"
    return events


def nothing_more(cursor: ChangeStreamCursor, polls: int = 2) -> bool:
    """Whether a few ``try_next()`` calls find no event."""
    return all(cursor.try_next() is None for _ in range(polls))


def key(event: dict[str, Any]) -> EventKey:
    """The event's place in the merged order, from its resume token."""
    return ResumeToken.decode(event["_id"], "_id").key
