"""``changestream partitions``: a change stream's partition lineage as a tree."""

from __future__ import annotations

import click
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from changestream import Partition
from changestream.cli.common import json_line, open_database
from changestream.clock import format_ts


def short_token(token: str) -> str:
    """A token's last ten characters: its leading ones are shared by every partition of a
    stream (they encode the format version and the stream), the trailing ones tell them apart."""
    return "…" + token[-10:]


def describe(partition: Partition) -> str:
    """One line for a partition: short token, key range, time range, and (live ones) the
    write rate the split policy sees."""
    end = "live" if partition.end_timestamp is None else format_ts(partition.end_timestamp)
    rate = f"  {partition.write_rate:.1f} mods/s" if partition.end_timestamp is None else ""
    return (
        f"{short_token(partition.token)}  [{partition.start_key}, {partition.end_key})  "
        f"{format_ts(partition.start_timestamp)} → {end}{rate}"
    )


def lineage_tree(title: str, history: list[Partition]) -> Tree:
    """The partitions of ``history`` (oldest first) nested under their parents.

    Roots are partitions none of whose parents are in ``history`` (the first partition, or
    the ones live when the stream was created). A merge child is drawn whole under its first
    parent and as a reference under the others, so repeated split/merge cycles stay small.
    """
    by_token = {p.token: p for p in history}
    tree = Tree(Text(title))

    def add(branch: Tree, partition: Partition) -> None:
        parents = [t for t in partition.parent_tokens if t in by_token]
        label = describe(partition)
        if len(parents) > 1:
            label += f"  (merge of {' + '.join(short_token(t) for t in parents)})"
        node = branch.add(Text(label))
        for token in partition.child_tokens:
            child = by_token.get(token)
            if child is None:
                continue
            first_parent = next(t for t in child.parent_tokens if t in by_token)
            if first_parent == partition.token:
                add(node, child)
            else:
                reference = f"{short_token(child.token)}  merge child, drawn under "
                node.add(Text(reference + short_token(first_parent)))

    for partition in history:
        if not any(t in by_token for t in partition.parent_tokens):
            add(tree, partition)
    return tree


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
