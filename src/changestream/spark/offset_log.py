"""The offsets a streaming query logged for its micro-batches, read from its checkpoint.

Spark writes ``<checkpoint>/offsets/<batch id>`` before it runs a micro-batch: a version line
(``v1``), the batch's metadata, then one line per source with the offset the batch reads to.
A micro-batch reads from the offset logged for the batch before it (the source's initial offset
for the first). The pipeline plans its tasks from these two offsets on the driver, with the
source's own planning, instead of having Spark run the source in tasks of their own only to
hand the planned ranges on: a task and a Python worker less per task, and no source read at
all in a micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson

from changestream.errors import FailedPrecondition

#: The offset log format this reader knows.
VERSION: Final = "v1"


def logged_offset(checkpoint: Path, batch_id: int) -> dict[str, Any]:
    """The offset micro-batch ``batch_id`` of the one-source query checkpointed at
    ``checkpoint`` reads to; FailedPrecondition when it is not logged or not understood."""
    path = checkpoint / "offsets" / str(batch_id)
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        raise FailedPrecondition(
            f"Spark logged no offsets for micro-batch {batch_id} at {path}"
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
