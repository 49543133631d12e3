"""``changestream demo --pipeline``: a Datastream-style stream run on Spark, live.

1. create ``shop.db`` with table ``Orders`` (some rows already in it) and a ``FOR ALL`` change
   stream capturing ``NEW_ROW_AND_OLD_VALUES``;
2. define stream ``orders`` with event files (JSON lines) and a Delta Lake replica, and start it;
3. run the pipeline (:class:`changestream.spark.pipeline.SparkPipeline`) on ``local[2]`` in a thread
   while a writer keeps committing (and splits, then merges, the key space), showing the
   stream's state, events written, the newest event files and the replica catching up;
4. drain the stream (it ends Paused once everything committed has landed), then show the event
   files, one event, and check that the replica equals the source row for row.

Ctrl-C pauses the stream, lets the running micro-batch finish and stops Spark (a second Ctrl-C
gives up waiting).
"""

from __future__ import annotations

import decimal
import random
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

import changestream
from changestream import COMMIT_TIMESTAMP
from changestream.clock import format_ts
from changestream.datastream import StreamCatalog, StreamDefinition, StreamState, schema_name
from changestream.errors import ChangeStreamError, FailedPrecondition
from changestream.extras import needs

DATABASE = "shop.db"
TABLE = "Orders"
CHANGE_STREAM = "OrdersFeed"
STREAM = "orders"
COLUMNS = ["OrderId", "Customer", "Status", "Amount", "UpdatedAt"]
INITIAL_ROWS = 2_000
CHUNK_ROWS = 500
SPLIT_KEY = 1_000
STATUSES = ("new", "paid", "packed", "shipped", "delivered")
CUSTOMERS = ("ana", "bruno", "carla", "diego", "eva", "felipe", "gabi", "hugo")

SCHEMA = [
    f"CREATE TABLE {TABLE} (OrderId INT64 NOT NULL, Customer STRING(MAX) NOT NULL, "
    "Status STRING(MAX) NOT NULL, Amount NUMERIC, "
    "UpdatedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (OrderId)",
    f"CREATE CHANGE STREAM {CHANGE_STREAM} FOR ALL "
    "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
]

#: How long to wait for the drain (after the writer stopped) before calling it a failure.
DRAIN_TIMEOUT_SECONDS = 180.0
#: How long to wait for Spark to start and the first micro-batch (with the backfill) to land.
START_TIMEOUT_SECONDS = 240.0


def _amount(rng: random.Random) -> decimal.Decimal:
    return decimal.Decimal(rng.randrange(100, 100_000)) / 100


def _order(rng: random.Random, order_id: int) -> list[Any]:
    return [order_id, rng.choice(CUSTOMERS), "new", _amount(rng), COMMIT_TIMESTAMP]


def create_source(path: str, rows: int = INITIAL_ROWS) -> None:
    """The source database: table, change stream and ``rows`` orders."""
    rng = random.Random(1)
    with changestream.open(path) as db:
        db.execute_ddl(SCHEMA)
        # The demo splits and merges by hand; keep the automatic policy out of the picture.
        db.set_split_policy(enabled=False)
        with db.transaction(tag="demo=pipeline,action=seed") as tx:
            tx.insert(TABLE, COLUMNS, [_order(rng, i) for i in range(1, rows + 1)])


class Writer:
    """Commits orders on its own connection: new ones, status changes, cancellations (deletes);
    splits the key space at :data:`SPLIT_KEY` after a while, and merges it back later."""

    def __init__(self, path: str, next_id: int) -> None:
        self.path = path
        self.next_id = next_id
        self._live = set(range(1, next_id))
        self.commits = 0
        self.mods = 0
        self.notes: list[str] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop writing (and wait for the last commit); harmless when stopped already or
        never started."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        rng = random.Random(2)
        try:
            with changestream.open(self.path) as db:
                while not self._stop.is_set():
                    self._commit(db, rng)
                    if self.commits == 40:
                        db.split_at(TABLE, [SPLIT_KEY])
                        self.notes.append(f"split the key space of {TABLE} at {SPLIT_KEY}")
                    elif self.commits == 120:
                        db.merge_at(TABLE, [SPLIT_KEY])
                        self.notes.append(f"merged the key space of {TABLE} back at {SPLIT_KEY}")
                    self._stop.wait(0.05)
        except BaseException as exc:  # shown by the demo, which then stops
            self.error = exc

    def _commit(self, db: changestream.EmbeddedDatabase, rng: random.Random) -> None:
        new = [_order(rng, self.next_id + i) for i in range(rng.randrange(1, 4))]
        self.next_id += len(new)
        picked = rng.sample(sorted(self._live), min(len(self._live), rng.randrange(2, 6)))
        gone = [order_id for order_id in picked if rng.random() < 0.15]
        updated = [
            [order_id, rng.choice(STATUSES), _amount(rng), COMMIT_TIMESTAMP]
            for order_id in picked
            if order_id not in gone
        ]
        with db.transaction(tag="demo=pipeline,action=orders") as tx:
            tx.insert(TABLE, COLUMNS, new)
            if updated:
                tx.update(TABLE, ["OrderId", "Status", "Amount", "UpdatedAt"], updated)
            if gone:
                tx.delete(TABLE, [[order_id] for order_id in gone])
        self._live.update(row[0] for row in new)
        self._live.difference_update(gone)
        self.commits += 1
        self.mods += len(new) + len(picked)


@dataclass(slots=True)
class Run:
    """The pipeline thread's outcome and latest status."""

    status: Any = None
    final: Any = None
    error: BaseException | None = None
    spark_ready: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def _run_pipeline(path: str, run: Run, trigger_seconds: float, log: Path) -> None:
    """The pipeline on a local[2] session of its own (stopped at the end); Spark's own log
    goes to ``log``."""
    try:
        from changestream.spark import local_session
        from changestream.spark.pipeline import PipelineOptions, SparkPipeline

        spark = local_session("local[2]", "changestream-demo", log=log)
        try:
            run.spark_ready = True
            options = PipelineOptions(trigger_seconds=trigger_seconds, chunk_rows=CHUNK_ROWS)

            def on_status(status: Any) -> None:
                run.status = status

            run.final = SparkPipeline(STREAM, path, options, spark=spark, on_status=on_status).run()
        finally:
            spark.stop()
    except BaseException as exc:
        run.error = exc
    finally:
        run.done.set()


@dataclass(slots=True)
class Counts:
    """What the live view shows besides the pipeline's status (refreshed now and then)."""

    source_rows: int = 0
    replica_rows: int | None = None
    replica_version: int | None = None
    files: list[Path] = field(default_factory=list)
    file_bytes: int = 0
    shown_event: bool = False


class PipelineTour:
    """The demo's steps on one directory: source, stream, live run, drain, checks."""

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
        self.run = Run()
        self.began = time.monotonic()

    def say(self, live: Live, text: str, style: str = "") -> None:
        """One line above the live view, with the seconds since the pipeline was launched."""
        elapsed = time.monotonic() - self.began
        live.console.print(Text(f"{elapsed:5.1f}s  ", style="dim") + Text(text, style=style))

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
        writer = Writer(self.path, next_id=INITIAL_ROWS + 1)
        thread = threading.Thread(
            target=_run_pipeline,
            args=(self.path, self.run, trigger_seconds, self.spark_log),
            name="demo-pipeline",
            daemon=True,
        )
        with changestream.open(self.path) as db:
            catalog = StreamCatalog(db)
            with Live(self._view(db, writer), console=self.console, refresh_per_second=4) as live:
                self.began = time.monotonic()
                thread.start()
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
        if self.run.error is not None:
            raise self._failed(self.run.error)
        self.console.print(
            Text(
                f"the writer committed {writer.commits:,} transactions ({writer.mods:,} mods); "
                + "; ".join(writer.notes)
            )
        )

    def _watch(self, db: Any, catalog: StreamCatalog, writer: Writer, live: Live) -> None:
        started = time.monotonic()
        spark_seen = False
        running_since: float | None = None
        drained_at: float | None = None
        notes_seen = 0
        while not self.run.done.wait(0.25):
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
                elif self.run.spark_ready and not spark_seen:
                    spark_seen = True
                    # Writes race the backfill: CDC must pick up exactly where each chunk's
                    # snapshot left off, with no gap and no duplicate.
                    writer.start()
                    self.phase = "backfill: chunks read in parallel, written as events"
                    self.say(
                        live,
                        f"Spark is up; backfilling {self.object} in chunks of {CHUNK_ROWS} rows "
                        "while the writer commits",
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
        self.phase = "paused" if self.run.error is None else "failed"
        self._refresh(db, live)
        if self.run.error is None:
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
            self.run.done.wait(90)
        except KeyboardInterrupt:
            self.say(live, "not waiting for Spark any longer")

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

    # -- the live view -----------------------------------------------------------------------

    def _refresh(self, db: Any, live: Live) -> None:
        counts = self.counts
        counts.source_rows = len(db.read(TABLE, columns=["OrderId"]))
        counts.replica_rows, counts.replica_version = replica_count(self.replica / self.object)
        counts.files = list(_event_files(self.events))
        counts.file_bytes = sum(_size(p) for p in counts.files)
        if not counts.shown_event:
            event = first_cdc_event(counts.files)
            if event is not None:
                counts.shown_event = True
                self.say(live, "the first CDC event (one line of a .jsonl file, pretty-printed):")
                live.console.print_json(orjson.dumps(event).decode())

    def _view(self, db: Any, writer: Writer) -> Group:
        status = self.run.status
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
        newest = sorted(counts.files, key=_mtime)[-3:]
        files = Text("newest event files:\n", style="bold")
        files.append(
            "\n".join(f"  {p.relative_to(self.directory)}" for p in reversed(newest))
            or "  none yet",
            style="dim",
        )
        return Group(Panel(table, title=f"stream {STREAM} on Spark local[2]", expand=False), files)

    # -- the end -----------------------------------------------------------------------------

    def results(self) -> None:
        """Where the events are, what one looks like, and the replica checked against the
        source."""
        from changestream.spark.replica import DeltaReplica

        self.console.rule(Text("Event files"))
        files = list(_event_files(self.events))
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
    for file in sorted(files, key=_mtime):
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


def _event_files(root: Path) -> Iterator[Path]:
    if not root.is_dir():
        return iter(())
    return (p for p in sorted(root.rglob("*.jsonl")) if not p.name.startswith("."))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


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
                "Structured Streaming job over the changestream data source."
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
