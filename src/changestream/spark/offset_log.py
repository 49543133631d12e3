"""A micro-batch query's checkpoint: the offset each batch reads to, and which batches are done.

The format is Spark's own (``<checkpoint>/offsets/<batch id>`` and ``commits/<batch id>``), so
the pipeline resumes checkpoints its Spark streaming queries wrote, and a test can compare a
Spark query's planning with the pipeline's. An offsets entry is a version line (``v1``), the
batch's metadata, then one line per source with the offset the batch reads to; it is written
before the batch runs. A commit entry (``v1`` and its metadata) is written once the batch's
work is done. A micro-batch reads from the offset logged for the batch before it (the
source's initial offset for the first); a batch logged but not committed is run again with
the offsets it logged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson

from changestream.errors import FailedPrecondition

#: The offset log format this reader knows.
VERSION: Final = "v1"
#: Batches whose entries are kept (Spark's ``minBatchesToRetain`` default).
RETAINED: Final = 100
_BATCH_FILE = re.compile(r"[0-9]+")


def logged_offset(checkpoint: Path, batch_id: int) -> dict[str, Any]:
    """The offset micro-batch ``batch_id`` of the one-source query checkpointed at
    ``checkpoint`` reads to; FailedPrecondition when it is not logged or not understood."""
    path = checkpoint / "offsets" / str(batch_id)
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        raise FailedPrecondition(
            f"the checkpoint logged no offsets for micro-batch {batch_id} at {path}"
        ) from None
    if len(lines) != 3 or lines[0].decode(errors="replace") != VERSION:
        raise FailedPrecondition(
            f"{path} is not a {VERSION} offset log entry of one source (Spark changed its "
            "checkpoint format?)"
        )
    offset = orjson.loads(lines[2])
    if not isinstance(offset, dict):
        raise FailedPrecondition(f"{path} logs {lines[2][:80]!r}, not a changestream offset")
    return offset


def batch_offsets(
    checkpoint: Path, batch_id: int, initial: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (start, end) offsets of micro-batch ``batch_id``: it reads from where the batch
    before it ended (from the source's ``initial()`` offset when it is the first) to its own
    logged offset."""
    end = logged_offset(checkpoint, batch_id)
    start = logged_offset(checkpoint, batch_id - 1) if batch_id else initial()
    return start, end


def last_batch(checkpoint: Path, log: str) -> int | None:
    """The highest batch id with an entry in ``log`` (``offsets`` or ``commits``)."""
    directory = checkpoint / log
    ids = [int(p.name) for p in _entries(directory)]
    return max(ids, default=None)


def commit_metadata(checkpoint: Path, batch_id: int) -> dict[str, Any]:
    """The metadata of batch ``batch_id``'s commit entry."""
    lines = (checkpoint / "commits" / str(batch_id)).read_bytes().splitlines()
    metadata = orjson.loads(lines[1]) if len(lines) > 1 else {}
    return metadata if isinstance(metadata, dict) else {}


def log_offset(checkpoint: Path, batch_id: int, offset: dict[str, Any], now_ms: int) -> None:
    """Log the offset batch ``batch_id`` reads to, before it runs."""
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": now_ms}
    _write(checkpoint / "offsets", batch_id, [metadata, offset])


def log_commit(checkpoint: Path, batch_id: int, progress: dict[str, Any]) -> None:
    """Mark batch ``batch_id`` done (``progress``: what it did, kept in the entry's metadata),
    and forget the entries of batches older than the last :data:`RETAINED`."""
    _write(checkpoint / "commits", batch_id, [{"nextBatchWatermarkMs": 0, **progress}])
    for log in ("offsets", "commits"):
        for entry in _entries(checkpoint / log):
            if int(entry.name) <= batch_id - RETAINED:
                entry.unlink(missing_ok=True)


def _entries(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir() if _BATCH_FILE.fullmatch(p.name)]


def _write(directory: Path, batch_id: int, lines: list[dict[str, Any]]) -> None:
    """Write an entry durably under its final name: a crash leaves it whole or absent."""
    directory.mkdir(parents=True, exist_ok=True)
    body = b"\n".join([VERSION.encode(), *(orjson.dumps(line) for line in lines)])
    temp = directory / f".{batch_id}.tmp"
    with open(temp, "wb") as out:
        out.write(body)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, directory / str(batch_id))
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
