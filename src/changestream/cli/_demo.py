"""``changestream demo``: the guided tours of :mod:`changestream.demo`."""

from __future__ import annotations

import os
import tempfile

import click
from rich.console import Console

import changestream
from changestream.demo.load import run_load_demo
from changestream.demo.tour import run_tour


@click.command()
@click.option(
    "--path",
    type=click.Path(dir_okay=False),
    help="Keep the demo database in this new file (default: a temporary file).",
)
@click.option(
    "--tail-seconds",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="How long to tail the live partitions at the end.",
)
@click.option(
    "--load",
    "load_seconds",
    type=click.FloatRange(min=1),
    is_flag=False,
    flag_value=10.0,
    default=None,
    help="Instead: drive a skewed load for this many seconds (default 10) and show the "
    "partitions splitting on the hot range, then merging back while idle.",
)
@click.option(
    "--pipeline",
    "pipeline_seconds",
    type=click.FloatRange(min=1),
    is_flag=False,
    flag_value=10.0,
    default=None,
    help="Instead: define a stream, run its pipeline on Spark local[2] while a writer "
    "commits for this many seconds (default 10), then drain it; shows the event files and "
    "the Delta replica catching up (needs the spark extra and Java 17+).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    help="With --pipeline: keep the database, event files and replica in this new (or empty) "
    "directory (default: a temporary one).",
)
def demo(
    path: str | None,
    tail_seconds: float,
    load_seconds: float | None,
    pipeline_seconds: float | None,
    directory: str | None,
) -> None:
    """A guided tour: splits, the query workflow, a merge, and live tailing.

    With --load, the partitions following a skewed write load instead; with --pipeline, a
    stream run on Spark into event files and a Delta Lake replica.
    """
    if pipeline_seconds is not None:
        if load_seconds is not None or path is not None:
            raise click.UsageError("--pipeline does not combine with --load or --path")
        from changestream.demo.pipeline import run_pipeline_demo

        run_pipeline_demo(Console(), pipeline_seconds, directory)
        return
    if directory is not None:
        raise click.UsageError("--dir applies to --pipeline only (use --path for the tour)")
    if path is not None and os.path.exists(path):
        raise click.BadParameter(f"{path!r} exists; the demo needs a new file", param_hint="--path")
    console = Console()
    with (
        tempfile.TemporaryDirectory(prefix="changestream-demo-") as scratch,
        changestream.open(path or os.path.join(scratch, "demo.db")) as db,
    ):
        if load_seconds is not None:
            run_load_demo(db, console, load_seconds)
            return
        run_tour(db, console, tail_seconds, path)
