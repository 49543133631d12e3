"""What a connector's run reports: a summary, and the progress callback that sees it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class RunSummary:
    """What one run of a source did (``lsn``: the position reached; for MySQL, the offset in
    the binlog file)."""

    copied_rows: int = 0
    transactions: int = 0
    skipped_transactions: int = 0
    lsn: int = 0


Progress = Callable[[RunSummary], None]
