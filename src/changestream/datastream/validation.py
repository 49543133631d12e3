"""Checks a stream passes before anything runs, as Datastream's ``ValidationResult``: each one
PASSED, FAILED or WARNING with a message. ``streams create|start --validate-only`` prints them and
changes nothing; without it a FAILED check refuses the request (``--force`` skips them)."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

from changestream.clock import format_ts
from changestream.datastream.definition import ACCEPTED_CAPTURE_TYPES, StreamDefinition
from changestream.errors import ChangeStreamError, InvalidArgument
from changestream.streams.roles import PipelineDatabase

#: Rows per second a backfill is assumed to read, for the retention check (a measured local
#: pipeline backfills faster; the check errs on the side of a warning).
BACKFILL_ROWS_PER_SECOND = 5_000


class CheckStatus(enum.StrEnum):
    PASSED = "PASSED"
    FAILED = "FAILED"
    WARNING = "WARNING"


@dataclass(frozen=True, slots=True)
class Check:
    """One validation check: what it checked, how it came out, and why."""

    name: str
    status: CheckStatus
    message: str

    def line(self) -> str:
        return f"{self.status.value:<8} {self.name}: {self.message}"


def validate_stream(
    db: PipelineDatabase, definition: StreamDefinition, position: int | None = None
) -> list[Check]:
    """Every check of ``definition`` against ``db``; ``position`` is where CDC would resume
    (for ``start``/``resume`` of a stream that has read before), checked against retention."""
    checks: list[Check] = []
    streams = {s.name: s for s in db.change_streams()}
    change_stream = streams.get(definition.change_stream)
    if change_stream is None:
        known = ", ".join(sorted(streams)) or "none"
        checks.append(
            Check(
                "change stream",
                CheckStatus.FAILED,
                f"{definition.change_stream!r} does not exist (change streams: {known})",
            )
        )
    else:
        checks.append(Check("change stream", CheckStatus.PASSED, f"{change_stream.name} exists"))
        capture = change_stream.value_capture_type
        good = capture in ACCEPTED_CAPTURE_TYPES
        why = (
            f"{change_stream.name} captures {capture}"
            if good
            else f"{change_stream.name} captures {capture}, which gives only the changed "
            "columns, but events carry the whole row; use NEW_ROW_AND_OLD_VALUES or NEW_ROW: "
            f"ALTER CHANGE STREAM {change_stream.name} SET OPTIONS "
            "(value_capture_type = 'NEW_ROW_AND_OLD_VALUES')"
        )
        checks.append(
            Check("capture type", CheckStatus.PASSED if good else CheckStatus.FAILED, why)
        )
    tables = None
    if change_stream is not None and change_stream.value_capture_type in ACCEPTED_CAPTURE_TYPES:
        try:
            tables = definition.validate(db)
        except ChangeStreamError as exc:
            checks.append(Check("objects", CheckStatus.FAILED, str(exc)))
        else:
            names = ", ".join(t.name for t in tables) or "none yet"
            checks.append(Check("objects", CheckStatus.PASSED, f"tables: {names}"))
    checks.append(_writable("destination", definition.destination))
    if definition.replica is not None:
        checks.append(_writable("replica", definition.replica))
    if change_stream is not None and tables and definition.backfill == "automatic":
        rows = sum(_row_count(db, t.name) for t in tables)
        estimate = rows / BACKFILL_ROWS_PER_SECOND
        retention = change_stream.retention_seconds
        fits = estimate <= retention / 2
        checks.append(
            Check(
                "retention",
                CheckStatus.PASSED if fits else CheckStatus.WARNING,
                f"backfill of {rows:,} rows takes about {estimate:,.0f} s at "
                f"{BACKFILL_ROWS_PER_SECOND:,} rows/s; changes are kept {retention:,} s"
                + ("" if fits else ": CDC may find its first changes expired"),
            )
        )
    if change_stream is not None and position is not None:
        oldest = db.current_timestamp() - change_stream.retention_seconds * 1_000_000
        kept = position >= oldest
        checks.append(
            Check(
                "read position",
                CheckStatus.PASSED if kept else CheckStatus.FAILED,
                f"CDC resumes at {format_ts(position)}"
                + ("" if kept else f", before the oldest change kept ({format_ts(oldest)})"),
            )
        )
    return checks


def refuse_on_failure(checks: list[Check], what: str) -> None:
    """InvalidArgument naming every FAILED check, if there is one."""
    failed = [c for c in checks if c.status is CheckStatus.FAILED]
    if failed:
        reasons = "; ".join(f"{c.name}: {c.message}" for c in failed)
        raise InvalidArgument(
            f"{what} failed validation ({reasons}); fix it, or pass --force to skip validation"
        )


def _writable(name: str, directory: str) -> Check:
    """Whether ``directory`` can be written (or made, under its nearest existing parent), as
    seen from this machine; nothing is created."""
    path = Path(directory).absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return Check(name, CheckStatus.FAILED, f"{existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        return Check(name, CheckStatus.FAILED, f"{existing} is not writable")
    made = "" if existing == path else f" (to be made in {existing})"
    return Check(name, CheckStatus.PASSED, f"{path} is writable{made}")


def _row_count(db: PipelineDatabase, table: str) -> int:
    quoted = "`" + table.replace("`", "\\`") + "`"
    [[count]] = db.execute_sql(f"SELECT COUNT(*) FROM {quoted}")
    return int(count)
