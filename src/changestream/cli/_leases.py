"""``changestream leases``: the Stream Client's lease table, once or as a live view."""

from __future__ import annotations

import time

import click
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from changestream.cli._common import open_database
from changestream.client import LeaseStatus, describe_leases
from changestream.render import short_token
from changestream.streams.roles import StreamClientDatabase

COLUMNS = ("consumer", "partition", "parents", "owner", "stealer", "checkpoint", "lag", "state")


def _cells(consumer: str, status: LeaseStatus) -> tuple[str, ...]:
    lease = status.lease
    if status.state == "finished":
        checkpoint = "end"
    else:
        checkpoint = "-" if status.checkpoint is None else str(status.checkpoint)
    lag = "-" if status.lag_seconds is None else f"{status.lag_seconds:.1f}s"
    return (
        consumer,
        short_token(lease.status_value),
        " ".join(short_token(p) for p in lease.parent_shard_ids) or "-",
        lease.lease_owner or "-",
        lease.lease_stealer or "-",
        checkpoint,
        lag,
        status.state,
    )


def lease_rows(
    db: StreamClientDatabase, stream: str, consumer: str | None
) -> list[tuple[str, ...]]:
    """One row of cells per partition lease, for one consumer group or all of them (lag by
    the database's clock)."""
    consumers = [consumer] if consumer is not None else db.lease_consumers(stream)
    now = db.current_timestamp()
    return [
        _cells(name, status)
        for name in consumers
        for status in describe_leases(db.leases(stream, name).list_leases(), now)
    ]


def plain_table(rows: list[tuple[str, ...]]) -> str:
    """Rows as aligned text columns under a header."""
    lines = [COLUMNS, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _rich_table(stream: str, rows: list[tuple[str, ...]]) -> Group:
    table = Table(*COLUMNS, title=f"leases of change stream {stream}", title_justify="left")
    for row in rows:
        table.add_row(*row)
    owners = {row[3] for row in rows if row[3] != "-"}
    footer = f"{len(rows)} leases, {len(owners)} workers; refreshed {time.strftime('%H:%M:%S')}"
    return Group(table, Text(footer, style="dim"))


@click.command()
@click.argument("path")
@click.argument("stream")
@click.option("--consumer", metavar="NAME", help="Only this consumer group (default: all).")
@click.option("--once", is_flag=True, help="Print a plain table once and exit (for scripts).")
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds between refreshes of the live view.",
)
def leases(path: str, stream: str, consumer: str | None, once: bool, interval: float) -> None:
    """Show the Stream Client leases on change stream STREAM in the database at PATH.

    One row per partition lease: its consumer group, partition and parents (last ten
    characters of their tokens), owner, the worker it is being handed to (stealer),
    checkpoint, lag (time since the checkpoint) and state: free, owned, handing over,
    waiting (for its parents to finish) or finished. Refreshes live until Ctrl-C;
    --once prints a plain table once.
    """
    with open_database(path) as db:
        if once:
            click.echo(plain_table(lease_rows(db, stream, consumer)))
            return
        with Live(
            _rich_table(stream, lease_rows(db, stream, consumer)), auto_refresh=False
        ) as live:
            while True:
                time.sleep(interval)
                live.update(_rich_table(stream, lease_rows(db, stream, consumer)), refresh=True)
