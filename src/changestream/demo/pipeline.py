"""``changestream demo --pipeline``: a Datastream-style stream run on Spark, live.

1. create ``shop.db`` with table ``Orders`` (some rows already in it) and a ``FOR ALL`` change
   stream capturing ``NEW_ROW_AND_OLD_VALUES``;
2. define stream ``orders`` with event files (JSON lines) and a Delta Lake replica, and start it;
3. run the pipeline (:class:`changestream.spark.pipeline.SparkPipeline`, started in the
   background with ``start()`` and followed with ``status()``) on ``local[2]`` while a writer
   keeps committing (and splits, then merges, the key space), showing the stream's state,
   events written, the newest event files and the replica catching up;
4. drain the stream (it ends Paused once everything committed has landed), then show the event
   files, one event, and check that the replica equals the source row for row.

Ctrl-C pauses the stream, lets the running micro-batch finish and stops Spark (a second Ctrl-C
gives up waiting).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

import changestream
from changestream.clock import format_ts
from changestream.datastream import StreamCatalog, StreamDefinition, StreamState, schema_name
from changestream.datastream.layout import event_files
from changestream.demo.pipeline_view import PipelineView
from changestream.demo.shop import (
    CHANGE_STREAM,
    CHUNK_ROWS,
    INITIAL_ROWS,
    STREAM,
    TABLE,
    Writer,
    create_source,
)
from changestream.errors import ChangeStreamError, FailedPrecondition
from changestream.extras import needs

DRAIN_TIMEOUT_SECONDS = 180.0
#: How long to wait for Spark to start and the first micro-batch (with the backfill) to land.
START_TIMEOUT_SECONDS = 240.0


class PipelineTour(PipelineView):
    """The demo's steps on one directory: source, stream, live run, drain, checks."""

    # -- steps -------------------------------------------------------------------------------

    def setup(self) -> None:
        self.console.rule(Text("A stream: backfill + CDC into event files and a Delta replica"))
        create_source(self.path)
        self.console.print(
            Text(
                f"created {self.path}: table {TABLE} with {INITIAL_ROWS:,} orders, change "
                f"stream {CHANGE_STREAM} FOR ALL (NEW_ROW_AND_OLD_VALUES)"
            )
        )
        definition = StreamDefinition(
            name=STREAM,
            database=self.path,
            change_stream=CHANGE_STREAM,
            destination=str(self.events),
            format="json",
            replica=str(self.replica),
            backfill="automatic",
        )
        with changestream.open(self.path) as db:
            catalog = StreamCatalog(db)
            catalog.create(definition)
            state = catalog.transition(STREAM, "start")
        self.console.print(
            Text(
                f"created stream {STREAM!r} (destination {self.events}, JSON lines; replica "
                f"{self.replica}, Delta Lake) and started it: {state.value}"
            )
        )
        self.object = definition.object_name(TABLE)

    def live(self, trigger_seconds: float) -> None:
        """Run the pipeline and the writer, then drain, showing everything live."""
        from changestream.spark.pipeline import PipelineOptions, SparkPipeline

        writer = Writer(self.path, next_id=INITIAL_ROWS + 1)
        options = PipelineOptions(
            trigger_seconds=trigger_seconds, chunk_rows=CHUNK_ROWS, spark_log=str(self.spark_log)
        )
        # Its own local[2] session, stopped when the run ends; Spark's log goes to a file.
        self.pipeline = SparkPipeline(STREAM, self.path, options)
        with changestream.open(self.path) as db:
            catalog = StreamCatalog(db)
            with Live(self._view(db, writer), console=self.console, refresh_per_second=4) as live:
                self.began = time.monotonic()
                self.pipeline.start()
                try:
                    self._watch(db, catalog, writer, live)
                except BaseException as exc:
                    reason = (
                        "Ctrl-C"
                        if isinstance(exc, KeyboardInterrupt)
                        else f"{type(exc).__name__}: {exc}"
                    )
                    self._stop_pipeline(catalog, writer, live, reason)
                    raise
                finally:
                    writer.stop()
                live.update(self._view(db, writer))
        self.console.print()
        if self.error is not None:
            raise self._failed(self.error)
        self.console.print(
            Text(
                f"the writer committed {writer.commits:,} transactions ({writer.mods:,} mods); "
                + "; ".join(writer.notes)
            )
        )

    def _watch(self, db: Any, catalog: StreamCatalog, writer: Writer, live: Live) -> None:
        started = time.monotonic()
        running_since: float | None = None
        drained_at: float | None = None
        notes_seen = 0
        # Writes race Spark's start and the backfill: CDC must pick up exactly where each
        # chunk's snapshot left off, with no gap and no duplicate.
        writer.start()
        self.say(
            live,
            f"Spark starts, then backfills {self.object} in chunks of {CHUNK_ROWS} rows, while "
            "the writer commits",
        )
        while not self._ended(0.25):
            state = catalog.get(STREAM).state
            now = time.monotonic()
            if writer.error is not None:
                raise FailedPrecondition(f"the demo's writer failed: {writer.error}")
            for note in writer.notes[notes_seen:]:
                self.say(live, f"writer: {note}", style="dim")
            notes_seen = len(writer.notes)
            if running_since is None:
                if state is StreamState.RUNNING:
                    running_since = now
                    self.phase = f"streaming: the writer commits for {self.seconds:g}s"
                    self.say(
                        live,
                        "the first micro-batch landed (backfill done): the stream is Running; "
                        "CDC events follow the writer",
                    )
                if now - started > START_TIMEOUT_SECONDS:
                    raise FailedPrecondition(
                        f"the pipeline did not start within {START_TIMEOUT_SECONDS:g}s"
                    )
            elif drained_at is None and now - running_since >= self.seconds:
                writer.stop()
                catalog.transition(STREAM, "drain")
                drained_at = now
                self.phase = "draining: the pipeline lands what was committed, then pauses"
                self.say(
                    live,
                    "writer stopped; `drain`: the pipeline lands every change committed so far, "
                    "then moves the stream to Paused",
                )
            elif drained_at is not None and now - drained_at > DRAIN_TIMEOUT_SECONDS:
                raise FailedPrecondition(
                    f"the drain did not finish within {DRAIN_TIMEOUT_SECONDS:g}s"
                )
            self._refresh(db, live)
            live.update(self._view(db, writer))
        self.phase = "paused" if self.error is None else "failed"
        self._refresh(db, live)
        if self.error is None:
            self.say(live, "drained: the stream is Paused and the pipeline has stopped")

    def _stop_pipeline(
        self, catalog: StreamCatalog, writer: Writer, live: Live, reason: str
    ) -> None:
        """Ctrl-C or a failure: stop writing, pause the stream, let the pipeline stop between
        batches and Spark shut down (a second Ctrl-C stops waiting)."""
        self.say(live, f"{reason}: pausing the stream and stopping Spark…", style="bold")
        writer.stop()
        try:
            state = catalog.get(STREAM).state
            if state in (StreamState.STARTING, StreamState.RUNNING, StreamState.FAILED):
                catalog.transition(STREAM, "pause")
        except ChangeStreamError as exc:
            self.say(live, f"could not pause the stream: {exc}")
        try:
            self._ended(90)
        except KeyboardInterrupt:
            self.say(live, "not waiting for Spark any longer")

    def _ended(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the pipeline's run to end; whether it has (its failure,
        if any, kept in :attr:`error`)."""
        assert self.pipeline is not None
        try:
            self.pipeline.wait(seconds)
        except TimeoutError:
            return False
        except Exception as exc:
            self.error = exc
        return True

    def _failed(self, error: BaseException) -> ChangeStreamError:
        with changestream.open(self.path) as db:
            errors = StreamCatalog(db).errors(STREAM, 5)
        for entry in errors:
            self.console.print(
                Text(f"stream error at {format_ts(entry.time)} ({entry.object}): {entry.message}")
            )
        if self.spark_log.exists():
            tail = self.spark_log.read_text(errors="replace").splitlines()[-15:]
            if tail:
                self.console.print(Text(f"the end of Spark's log ({self.spark_log}):"))
                self.console.print(Text("\n".join(tail), style="dim"))
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return FailedPrecondition(f"the pipeline failed: {type(error).__name__}: {first}")

    # -- the end -----------------------------------------------------------------------------

    def results(self) -> None:
        """Where the events are, what one looks like, and the replica checked against the
        source."""
        from changestream.spark.replica import DeltaReplica

        self.console.rule(Text("Event files"))
        files = list(event_files(self.events))
        by_method: dict[str, int] = {}
        for file in files:
            for line in file.read_bytes().splitlines():
                method = orjson.loads(line)["read_method"]
                by_method[method] = by_method.get(method, 0) + 1
        self.console.print(
            Text(
                f"{len(files):,} files under {self.events}, laid out as "
                "<schema>_<table>/<yyyy>/<mm>/<dd>/<HH>/<MM>/<uuid>.jsonl; events: "
                + ", ".join(f"{n:,} {m}" for m, n in sorted(by_method.items()))
            )
        )
        for file in files[:3]:
            self.console.print(Text(f"  {file.relative_to(self.directory)}"))
        if len(files) > 3:
            self.console.print(Text(f"  … {len(files) - 3:,} more"))

        self.console.rule(Text("Replica"))
        with changestream.open(self.path) as db:
            table = next(t for t in db.tables() if t.name == TABLE)
            source = db.read(TABLE)
            described = StreamCatalog(db).describe(STREAM)
        replica = DeltaReplica(self.replica, schema_name(self.path), table)
        rows = replica.read_rows()
        self.console.print(
            Text(
                f"stream {STREAM}: {described['state']}, {described['rows_processed']:,} events, "
                f"every change through {described['last_processed_commit_timestamp']}"
            )
        )
        if rows != source:
            keys = {row[0] for row in rows} ^ {row[0] for row in source}
            raise FailedPrecondition(
                f"the replica {replica.path} differs from the source: {len(rows):,} rows vs "
                f"{len(source):,}; keys only on one side: {sorted(keys)[:10]}"
            )
        self.console.print(
            Text(
                f"replica equals source: {len(rows):,} rows of {TABLE}, row for row "
                f"(Delta table {replica.path})",
                style="bold green",
            )
        )


@contextmanager
def _directory(given: str | None) -> Iterator[Path]:
    if given is not None:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(
        prefix="changestream-pipeline-demo-", ignore_cleanup_errors=True
    ) as scratch:
        yield Path(scratch)


def run_pipeline_demo(
    console: Console, seconds: float, directory: str | None, trigger_seconds: float = 0.5
) -> None:
    """The whole pipeline demo (see the module docstring)."""
    if directory is not None:
        given = Path(directory)
        if given.exists() and (not given.is_dir() or any(given.iterdir())):
            raise FailedPrecondition(
                f"{directory!r} exists and is not an empty directory; the demo needs a new one"
            )
    with needs("spark", "the pipeline demo"):
        import deltalake  # noqa: F401
        import pyspark  # noqa: F401
    console.print(
        Panel(
            Text(
                "A stream reads a change stream and writes every existing row (backfill) and "
                "every later change (CDC) as Datastream-style events to files, and keeps a "
                "Delta Lake replica of each table equal to the source. The pipeline is a Spark "
                "job in micro-batches, planned as the changestream data source plans a "
                "streaming query's."
            ),
            title=f"changestream {changestream.__version__} pipeline demo",
        )
    )
    with _directory(directory) as path:
        tour = PipelineTour(path, console, seconds)
        tour.setup()
        tour.live(trigger_seconds)
        tour.results()
        if directory is not None:
            console.print(
                Text(
                    f"\nEverything is kept in {path}. Try:\n"
                    f"  changestream streams describe {STREAM} --db {tour.path}\n"
                    f"  changestream streams resume {STREAM} --db {tour.path}\n"
                    f"  changestream pipeline run {STREAM} --db {tour.path} --until-caught-up"
                )
            )
        else:
            console.print(
                Text(
                    f"\nThe files above were in {path}, a temporary directory, and are deleted "
                    "now; run `changestream demo --pipeline --dir DIR` to keep them."
                )
            )
