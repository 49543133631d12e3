"""``changestream partitions``: a change stream's partition lineage as a tree."""

from __future__ import annotations

import click
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from changestream.cli._common import json_line, open_database
from changestream.render import describe, lineage_tree


@click.command()
@click.argument("path")
@click.argument("stream")
@click.option("--at", "at", metavar="TIMESTAMP", help="Only the partitions live at TIMESTAMP.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per partition, full tokens.")
@click.option(
    "--tokens",
    "tokens_only",
    is_flag=True,
    help="Only the full tokens, one per line (live partitions unless --at), for scripts.",
)
def partitions(path: str, stream: str, at: str | None, as_json: bool, tokens_only: bool) -> None:
    """Show the partitions of change stream STREAM in the database at PATH.

    Without --at, draws the lineage: every partition since the stream was created,
    children under their parents, live ones ending in "live". Tokens are shortened
    to their last ten characters; use --json for the full tokens to query with, or
    --tokens for just them.

    \b
    Example:
      TOKEN=$(changestream partitions app.db TStream --tokens | head -1)
    """
    if tokens_only:
        with open_database(path) as db:
            for partition in db.partitions(stream, at=at):
                click.echo(partition.token)
        return
    with open_database(path) as db:
        found = db.partition_history(stream) if at is None else db.partitions(stream, at=at)
        options = next(s.options_text() for s in db.change_streams() if s.name == stream)
    if as_json:
        for partition in found:
            click.echo(json_line(partition.to_dict()))
        return
    console = Console()
    if at is None:
        console.print(lineage_tree(f"change stream {stream} ({options})", found))
        return
    live = Tree(Text(f"partitions of {stream} ({options}) live at {at}"))
    for partition in found:
        live.add(Text(describe(partition)))
    console.print(live)
