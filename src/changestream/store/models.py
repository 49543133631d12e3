"""The store's plain types: what its reads, lease tables, documents and split policy hand
out. They import no implementation, so the roles and the remote client can name them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from changestream.errors import InvalidArgument

#: The longest consumer group or worker name, in characters.
MAX_CONSUMER_LENGTH = 128


def check_consumer(consumer: object) -> str:
    """A consumer name: 1 to 128 printable characters."""
    if (
        not isinstance(consumer, str)
        or not 0 < len(consumer) <= MAX_CONSUMER_LENGTH
        or not consumer.isprintable()
    ):
        raise InvalidArgument(
            f"consumer must be 1 to {MAX_CONSUMER_LENGTH} printable characters, got {consumer!r}"
        )
    return consumer


@dataclass(frozen=True, slots=True)
class SnapshotRead:
    """Rows read in one consistent snapshot, and the commit timestamp of that snapshot: every
    commit at or before ``read_timestamp`` (microseconds) is reflected, none after it."""

    rows: list[tuple[Any, ...]]
    read_timestamp: int


@dataclass(frozen=True, slots=True)
class Lease:
    """One row of a consumer group's lease table, with the seed's columns.

    ``status_type`` / ``status_value`` form the key (for a partition's lease: a kind and
    the partition token). ``checkpoint`` is the consumer's progress as opaque text,
    ``lease_counter`` the optimistic lock, ``lease_owner`` the worker holding the lease,
    ``lease_stealer`` the worker it is being handed to, ``parent_shard_ids`` the partitions
    that must finish first, and ``start_timestamp`` where reading begins (microseconds).
    """

    status_type: str
    status_value: str
    checkpoint: str = ""
    lease_counter: int = 0
    lease_owner: str | None = None
    lease_stealer: str | None = None
    parent_shard_ids: tuple[str, ...] = ()
    start_timestamp: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The row with the seed's column names."""
        return {
            "StatusType": self.status_type,
            "StatusValue": self.status_value,
            "Checkpoint": self.checkpoint,
            "LeaseCounter": self.lease_counter,
            "LeaseOwner": self.lease_owner,
            "LeaseStealer": self.lease_stealer,
            "ParentShardIds": list(self.parent_shard_ids),
            "StartTimestamp": self.start_timestamp,
        }


@dataclass(frozen=True, slots=True)
class SystemDocument:
    """One stored document: ``version`` starts at 1 and grows by one with every write."""

    name: str
    version: int
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SplitPolicy:
    """Thresholds for automatic splitting and merging; every process of a database shares one.

    A split splits when it holds more than ``max_rows`` rows (at the median key by rows) or
    takes more than ``max_write_rate`` mods/s over the last ``window_seconds`` (at the
    load-weighted median of the keys written). Two adjacent splits merge when together they
    hold at most ``merge_max_rows`` rows and take at most ``merge_max_write_rate`` mods/s.
    No split younger than ``min_lifetime_seconds`` splits or merges, so partitions do not
    flap. The policy runs every ``check_interval_seconds`` in one writing process.
    """

    enabled: bool = True
    max_rows: int = 100_000
    max_write_rate: float = 2_000.0
    window_seconds: float = 10.0
    merge_max_rows: int = 10_000
    merge_max_write_rate: float = 50.0
    min_lifetime_seconds: float = 30.0
    check_interval_seconds: float = 5.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "enabled":
                if not isinstance(value, bool):
                    raise InvalidArgument(f"enabled must be true or false, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidArgument(f"{field.name} must be a non-negative number, got {value!r}")
        if self.window_seconds < 1 or self.check_interval_seconds < 0.05:
            raise InvalidArgument(
                "window_seconds must be at least 1 and check_interval_seconds at least 0.05, "
                f"got {self.window_seconds} and {self.check_interval_seconds}"
            )
        if self.merge_max_rows > self.max_rows // 2:
            raise InvalidArgument(
                f"merge_max_rows ({self.merge_max_rows}) must be at most half of max_rows "
                f"({self.max_rows}), or merged splits would split again at once"
            )
        if self.merge_max_write_rate > self.max_write_rate / 2:
            raise InvalidArgument(
                f"merge_max_write_rate ({self.merge_max_write_rate}) must be at most half of "
                f"max_write_rate ({self.max_write_rate}), or merged splits would split again"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> SplitPolicy:
        """A copy with ``changes``; unknown names are an error listing the known ones."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InvalidArgument(
                f"unknown split policy setting(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Action:
    """A planned split (``merge`` False) or merge at ``boundary``, and why."""

    merge: bool
    boundary: bytes
    reason: str
