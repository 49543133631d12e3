"""What the pipeline tour reads back from its destination: event files and the Delta replica."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


def replica_count(path: Path) -> tuple[int | None, int | None]:
    """Live rows (not tombstones) of a Delta replica and its version; (None, None) before the
    table exists."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from changestream.spark.replica import DELETED_COLUMN, delta_rows

    try:
        delta = DeltaTable(str(path))
    except TableNotFoundError:
        return None, None
    deleted = delta_rows(delta, [DELETED_COLUMN]).column(DELETED_COLUMN)
    return len(deleted) - sum(1 for flag in deleted.to_pylist() if flag), delta.version()


def first_cdc_event(files: list[Path]) -> dict[str, Any] | None:
    """An UPDATE event (else any CDC event) of the oldest files that hold CDC events."""
    fallback = None
    for file in sorted(files, key=mtime):
        for line in file.read_bytes().splitlines():
            event = orjson.loads(line)
            if event["read_method"] != "changestream-cdc":
                break  # a file holds one batch: backfill or CDC
            if event["source_metadata"]["change_type"] == "UPDATE":
                return dict(event)
            fallback = fallback or dict(event)
        if fallback is not None:
            return fallback
    return None


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
