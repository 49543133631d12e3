"""The plain types every role hands out: partitions, query results, timestamps and parameters.

Nothing here imports an implementation, so the roles (:mod:`changestream.streams.roles`), the
remote client and the consumers can name them without pulling in the engine.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

from changestream.clock import format_ts
from changestream.errors import reported_items
from changestream.sql.params import Params as Params
from changestream.sql.params import Value as Value

#: A timestamp as the interfaces take it: RFC 3339 text, an aware datetime, or integer
#: microseconds since the epoch.
Timestamp: TypeAlias = str | dt.datetime | int

#: The read function's heartbeat interval when a read names none.
DEFAULT_HEARTBEAT_MS = 10_000


@dataclass(frozen=True, slots=True)
class Partition:
    """A change stream partition: one split's key range over one time range."""

    token: str
    start_timestamp: int
    end_timestamp: int | None
    start_key: str
    end_key: str
    parent_tokens: tuple[str, ...]
    child_tokens: tuple[str, ...]
    #: Mods per second written to the partition over the split policy's window (live ones).
    write_rate: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "start_timestamp": format_ts(self.start_timestamp),
            "end_timestamp": None if self.end_timestamp is None else format_ts(self.end_timestamp),
            "start_key": self.start_key,
            "end_key": self.end_key,
            "parent_tokens": list(self.parent_tokens),
            "child_tokens": list(self.child_tokens),
            "write_rate": round(self.write_rate, 3),
        }


class ResultSet:
    """Rows of a query, produced lazily; ``fields`` names the columns."""

    def __init__(self, fields: list[str], rows: Iterator[list[Any]]) -> None:
        self.fields = fields
        self._rows = reported_items(rows, "iterating a query's rows")

    def __iter__(self) -> Iterator[list[Any]]:
        return self._rows
