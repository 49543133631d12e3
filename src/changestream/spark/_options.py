"""The options of the ``changestream`` Spark data source: parsed and checked at ``load()``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from changestream.clock import parse_ts
from changestream.errors import InvalidArgument

#: Canonical option names; Spark hands them over lower-cased. ``startTimestamp`` and
#: ``endTimestamp`` are older names of ``startingTimestamp`` and ``endingTimestamp``.
BATCH_ONLY = ("endingTimestamp", "endTimestamp")
STREAMING_ONLY = ("maxRecordsPerTrigger", "maxBytesPerTrigger", "heartbeatMilliseconds")
COMMON = (
    "database",
    "path",
    "stream",
    "token",
    "rowPerMod",
    "rowPerRange",
    "maxPartitions",
    "startingTimestamp",
    "startTimestamp",
    "failOnDataLoss",
)
ALL_OPTIONS = COMMON + BATCH_ONLY + STREAMING_ONLY
#: The positions ``startingTimestamp`` / ``endingTimestamp`` accept besides a timestamp.
EARLIEST = "earliest"
LATEST = "latest"
_CANONICAL = {name.lower(): name for name in ALL_OPTIONS}

#: Spark tasks per read: a batch read fans out, a micro-batch stays cheap to schedule.
DEFAULT_MAX_PARTITIONS = 32
DEFAULT_STREAMING_MAX_PARTITIONS = 4
#: An idle stream's offset moves forward once per heartbeat (so checkpoints stay within
#: retention) and otherwise not at all: no empty micro-batch per trigger.
DEFAULT_HEARTBEAT_MS = 60_000

Position = int | str


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Checked options: where to read (``database`` path or URL, ``stream``) and how."""

    database: str
    stream: str
    token: str | None = None
    row_per_mod: bool = False
    row_per_range: bool = False
    max_partitions: int | None = None
    #: A timestamp (µs), ``"earliest"`` or ``"latest"``; None: the mode's default.
    starting: Position | None = None
    ending: Position | None = None
    fail_on_data_loss: bool = True
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    heartbeat_milliseconds: int = DEFAULT_HEARTBEAT_MS
    given: frozenset[str] = frozenset()

    @property
    def counts_mods(self) -> bool:
        """Whether admission control counts mods (changes) rather than records."""
        return self.row_per_mod or self.row_per_range

    def tasks(self, streaming: bool) -> int:
        """How many Spark tasks a read may use (``maxPartitions``, or the mode's default)."""
        if self.max_partitions is not None:
            return self.max_partitions
        return DEFAULT_STREAMING_MAX_PARTITIONS if streaming else DEFAULT_MAX_PARTITIONS

    def require_mode(self, streaming: bool) -> None:
        """Refuse options of the other mode (a batch option on a stream, or the reverse)."""
        wrong = STREAMING_ONLY if not streaming else BATCH_ONLY
        mode = "a streaming read (readStream)" if streaming else "a batch read (read)"
        for name in wrong:
            if name in self.given:
                raise InvalidArgument(
                    f"option {name!r} does not apply to {mode}; options of both modes: "
                    + ", ".join(n for n in COMMON if n != "path")
                )


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    """Check every option: names, required ones, and values."""
    values: dict[str, str] = {}
    for key, value in raw.items():
        name = _CANONICAL.get(key.lower())
        if name is None:
            raise InvalidArgument(
                f"unknown option {key!r} for format 'changestream'; allowed: "
                + ", ".join(n for n in ALL_OPTIONS if n != "path")
            )
        values[name] = value
    database = values.get("database") or values.get("path")
    if not database:
        raise InvalidArgument(
            "option 'database' is required: the path of a database file or the URL of a "
            "`changestream serve` server (http(s)://host:port/NAME)"
        )
    stream = values.get("stream")
    if not stream:
        raise InvalidArgument("option 'stream' is required: the name of a change stream")
    for name, alias in (
        ("startingTimestamp", "startTimestamp"),
        ("endingTimestamp", "endTimestamp"),
    ):
        if name in values and alias in values:
            raise InvalidArgument(f"options {name!r} and {alias!r} are the same; give one")
    return SourceOptions(
        database=database,
        stream=stream,
        token=values.get("token"),
        row_per_mod=_boolean(values, "rowPerMod"),
        row_per_range=_boolean(values, "rowPerRange"),
        max_partitions=_positive(values, "maxPartitions"),
        starting=_position(values, "startingTimestamp") or _position(values, "startTimestamp"),
        ending=_position(values, "endingTimestamp") or _position(values, "endTimestamp"),
        fail_on_data_loss=_boolean(values, "failOnDataLoss", default="true"),
        max_records_per_trigger=_positive(values, "maxRecordsPerTrigger"),
        max_bytes_per_trigger=_positive(values, "maxBytesPerTrigger"),
        heartbeat_milliseconds=_positive(values, "heartbeatMilliseconds") or DEFAULT_HEARTBEAT_MS,
        given=frozenset(values),
    )


def _boolean(values: Mapping[str, str], name: str, default: str = "false") -> bool:
    text = values.get(name, default).strip().lower()
    if text not in ("true", "false"):
        raise InvalidArgument(f"option {name!r} must be true or false, got {values[name]!r}")
    return text == "true"


def _positive(values: Mapping[str, str], name: str) -> int | None:
    if name not in values:
        return None
    text = values[name].strip()
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise InvalidArgument(f"option {name!r} must be a positive integer, got {values[name]!r}")
    return int(text)


def _position(values: Mapping[str, str], name: str) -> Position | None:
    if name not in values:
        return None
    text = values[name].strip()
    if text.lower() in (EARLIEST, LATEST):
        if name.startswith("end") and text.lower() == EARLIEST:
            raise InvalidArgument(f"option {name!r} must be a timestamp or 'latest', got {text!r}")
        return text.lower()
    return parse_ts(text, f"option {name!r} (RFC 3339, 'earliest' or 'latest')")
