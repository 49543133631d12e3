"""``changestream pipeline run``: the Spark job that moves a stream's changes into event
files and Delta replicas; ``pipeline prepare``: the class archive that starts it sooner."""

from __future__ import annotations

from pathlib import Path

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from changestream.cli._common import TOKEN_KEY, setting
from changestream.clock import format_ts
from changestream.extras import needs

#: ``PipelineOptions``' defaults, repeated so ``--help`` needs no pyspark import.
DEFAULT_MAX_RECORDS_PER_TRIGGER = 200_000
DEFAULT_MAX_BYTES_PER_TRIGGER = 256 * 1024 * 1024


@click.group()
def pipeline() -> None:
    """Run streams' pipelines on Spark (needs the `spark` extra and Java 17+)."""


@pipeline.command()
@click.argument("name")
@click.option(
    "--db",
    "db_path",
    required=True,
    metavar="PATH_OR_URL",
    help="The source database (a file PATH or an http(s):// URL) holding the stream.",
)
@click.option("--master", default="local[2]", show_default=True, help="The Spark master.")
@click.option(
    "--until-caught-up",
    is_flag=True,
    help="Stop once every change committed before the run started has landed.",
)
@setting("--trigger-seconds", 1.0, click.FloatRange(min=0.05), "Micro-batch interval.")
@setting(
    "--max-records-per-trigger",
    DEFAULT_MAX_RECORDS_PER_TRIGGER,
    click.IntRange(min=0),
    "At most this many changes per micro-batch (whole commits; 0: no limit).",
)
@setting(
    "--max-bytes-per-trigger",
    DEFAULT_MAX_BYTES_PER_TRIGGER,
    click.IntRange(min=0),
    "At most about this many bytes of change records per micro-batch (0: no limit).",
)
@setting(
    "--batch-timeout",
    900.0,
    click.FloatRange(min=1),
    "Fail the run (recording the error) when a micro-batch runs longer than this.",
    metavar="SECONDS",
)
@setting(
    "--chunk-rows",
    10_000,
    click.IntRange(min=1),
    "Rows per backfill chunk (chunks are read in parallel).",
)
@setting(
    "--compact-every",
    50,
    click.IntRange(min=0),
    "Compact each replica's small files every N micro-batches (0: never).",
    metavar="N",
)
@setting(
    "--vacuum-retention-hours",
    168.0,
    click.FloatRange(min=0),
    "When compacting, delete replica files only versions older than this need.",
)
@click.option(
    "--spark-log",
    metavar="FILE",
    help="Where Spark's own log lines go (default: spark.log in the stream's _changestream "
    "directory under its destination), so they stay out of the progress line.",
)
@click.pass_context
def run(
    ctx: click.Context,
    name: str,
    db_path: str,
    master: str,
    until_caught_up: bool,
    trigger_seconds: float,
    max_records_per_trigger: int,
    max_bytes_per_trigger: int,
    batch_timeout: float,
    chunk_rows: int,
    compact_every: int,
    vacuum_retention_hours: float,
    spark_log: str | None,
) -> None:
    """Run stream NAME's pipeline: backfill its objects, then stream every change as events
    to its destination (and its Delta replicas), until the stream is paused, drained or
    deleted (or caught up, with --until-caught-up).

    The stream must be Starting, Running, Draining or Failed (`changestream streams start
    NAME --db D` first). A killed run resumes from its checkpoint, in the destination's
    _changestream directory.
    """
    with needs("spark", "pipeline run"):
        from changestream.spark.pipeline import PipelineOptions, PipelineStatus, SparkPipeline

    options = PipelineOptions(
        master=master,
        token=ctx.meta.get(TOKEN_KEY),
        until_caught_up=until_caught_up,
        trigger_seconds=trigger_seconds,
        max_records_per_trigger=max_records_per_trigger or None,
        max_bytes_per_trigger=max_bytes_per_trigger or None,
        chunk_rows=chunk_rows,
        batch_timeout_seconds=batch_timeout,
        compact_every=compact_every,
        vacuum_retention_hours=vacuum_retention_hours,
        spark_log=spark_log,
    )
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(name, total=None, detail="opening the stream")

        def show(status: PipelineStatus) -> None:
            lag = status.lag_seconds
            backfill = ", ".join(f"{k} {v}" for k, v in sorted(status.backfill.items()))
            progress.update(
                task,
                detail=f"{status.state} · {status.rows_processed} events · "
                + ("lag -" if lag is None else f"lag {lag:.1f}s")
                + (f" · backfill: {backfill}" if backfill else ""),
            )

        job = SparkPipeline(name, db_path, options, on_status=show)
        progress.update(task, detail=f"starting Spark (its log: {job.spark_log})")
        final = job.run()
    frontier = "-" if final.frontier is None else format_ts(final.frontier)
    click.echo(
        f"stream {name}: {final.state}, {final.rows_processed} events, through {frontier} "
        f"(Spark's log: {job.spark_log})"
    )


@pipeline.command()
@click.option(
    "--timeout",
    default=600.0,
    show_default=True,
    type=click.FloatRange(min=1),
    metavar="SECONDS",
    help="Give up building after this long.",
)
def prepare(timeout: float) -> None:
    """Build the JVM class archive that starts every later pipeline's Spark driver a few
    seconds sooner (once per Spark and Java installation; about half a minute).

    It runs small pipelines under spark-submit and keeps the classes their JVM loaded in the
    cache directory ($CHANGESTREAM_CACHE_DIR, else ~/.cache/changestream), then removes the
    archives there that no installation can use any more (their Spark or Java is gone or
    changed) or that do not say what they were built for (an earlier version made them) and
    were not read for a week, and says why. `make` runs this after installing. Pipelines
    run without it too, only slower to start.
    """
    with needs("spark", "pipeline prepare"):
        from changestream.spark.jvm_archive import archive_file, build_archive, prune_archives

    click.echo(f"building the JVM class archive {archive_file()} ...")
    path = build_archive(Path(__file__).with_name("_archive_job.py"), timeout)
    click.echo(f"built {path} ({path.stat().st_size / 2**20:.0f} MB)")
    for removed, why in prune_archives(path).items():
        click.echo(f"removed {removed}: {why}")
