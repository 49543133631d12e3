"""The pipeline tour's live view: the stream's state, events written, the newest event files
and the replica catching up, refreshed a few times a second."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from changestream.clock import format_ts
from changestream.datastream.layout import event_files
from changestream.demo.landed import (
    first_cdc_event,
    mtime,
    replica_count,
    size,
)
from changestream.demo.shop import (
    DATABASE,
    STREAM,
    TABLE,
    Writer,
)

if TYPE_CHECKING:
    from changestream.spark.pipeline import SparkPipeline


@dataclass(slots=True)
class Counts:
    """What the live view shows besides the pipeline's status (refreshed now and then)."""

    source_rows: int = 0
    replica_rows: int | None = None
    replica_version: int | None = None
    files: list[Path] = field(default_factory=list)
    file_bytes: int = 0
    shown_event: bool = False


class PipelineView:
    """The tour's directory, console and pipeline, and how it shows them live."""

    def __init__(self, directory: Path, console: Console, seconds: float) -> None:
        self.directory = directory
        self.console = console
        self.seconds = seconds
        self.path = str(directory / DATABASE)
        self.events = directory / "events"
        self.replica = directory / "replica"
        self.spark_log = directory / "spark.log"
        self.counts = Counts()
        self.phase = "starting Spark on local[2]"
        self.pipeline: SparkPipeline | None = None
        self.error: BaseException | None = None
        #: The replica's object name (``schema_table``), known once the stream is defined.
        self.object = ""
        self.began = time.monotonic()

    def say(self, live: Live, text: str, style: str = "") -> None:
        """One line above the live view, with the seconds since the pipeline was launched."""
        elapsed = time.monotonic() - self.began
        live.console.print(Text(f"{elapsed:5.1f}s  ", style="dim") + Text(text, style=style))

    # -- the live view -----------------------------------------------------------------------

    def _refresh(self, db: Any, live: Live) -> None:
        counts = self.counts
        counts.source_rows = len(db.read(TABLE, columns=["OrderId"]))
        counts.replica_rows, counts.replica_version = replica_count(self.replica / self.object)
        counts.files = list(event_files(self.events))
        counts.file_bytes = sum(size(p) for p in counts.files)
        if not counts.shown_event:
            event = first_cdc_event(counts.files)
            if event is not None:
                counts.shown_event = True
                self.say(live, "the first CDC event (one line of a .jsonl file, pretty-printed):")
                live.console.print_json(orjson.dumps(event).decode())

    def _view(self, db: Any, writer: Writer) -> Group:
        status = None if self.pipeline is None else self.pipeline.status()
        counts = self.counts
        table = Table(show_header=False, box=None, padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        state = "-" if status is None else status.state
        lag = None if status is None else status.lag_seconds
        table.add_row("phase", self.phase)
        table.add_row("stream state", state)
        backfill = (
            "-"
            if status is None or not status.backfill
            else ", ".join(f"{k} {v}" for k, v in sorted(status.backfill.items()))
        )
        table.add_row("backfill", backfill)
        through = None if status is None else status.frontier
        table.add_row("processed through", "-" if through is None else format_ts(through)[11:])
        table.add_row("events written", "-" if status is None else f"{status.rows_processed:,}")
        table.add_row("lag", "-" if lag is None else f"{lag:.1f}s")
        table.add_row("event files", f"{len(counts.files):,} ({counts.file_bytes / 1024:,.0f} KiB)")
        table.add_row("writer", f"{writer.commits:,} commits, {writer.mods:,} mods")
        replica = counts.replica_rows
        if replica is None:
            text = Text(f"no Delta table yet · source {counts.source_rows:,} rows")
        else:
            same = replica == counts.source_rows
            text = Text(
                f"{replica:,} rows (version {counts.replica_version}) · source "
                f"{counts.source_rows:,} rows · "
                + ("same count" if same else f"{counts.source_rows - replica:+,} to catch up"),
                style="green" if same else "yellow",
            )
        table.add_row("replica", text)
        newest = sorted(counts.files, key=mtime)[-3:]
        files = Text("newest event files:\n", style="bold")
        files.append(
            "\n".join(f"  {p.relative_to(self.directory)}" for p in reversed(newest))
            or "  none yet",
            style="dim",
        )
        return Group(Panel(table, title=f"stream {STREAM} on Spark local[2]", expand=False), files)
