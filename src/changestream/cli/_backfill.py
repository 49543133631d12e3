"""``changestream streams backfill``: start and stop one object's backfill job."""

from __future__ import annotations

import click

from changestream.cli._common import open_database
from changestream.datastream import StreamCatalog
from changestream.datastream.backfill_jobs import JOB_STATES

_DB_HELP = "The source database (a file PATH or an http(s):// URL); it holds the streams too."


@click.group()
def backfill() -> None:
    """Start or stop the backfill job of one object (table) of a stream while it runs.

    A running pipeline picks the change up at its next micro-batch: a started job reads the
    object (again, after it completed: an ad-hoc re-snapshot); a stopped one reads no further
    chunk. `streams describe` shows each job's state.
    """


@backfill.command()
@click.argument("name")
@click.argument("object")
@click.option("--db", "db_path", required=True, metavar="PATH_OR_URL", help=_DB_HELP)
@click.option(
    "--where",
    metavar="CONDITION",
    help='Re-read only the rows this SQL condition on the table keeps (e.g. "Amount > 100").',
)
def start(name: str, object: str, db_path: str, where: str | None) -> None:
    """Start the backfill job of OBJECT of stream NAME (a stopped job goes on where it was)."""
    with open_database(db_path) as db:
        entry = StreamCatalog(db).start_backfill(name, object, where)
    shown = f" of the rows where {where}" if where else ""
    click.echo(f"backfill{shown} of {object}: {JOB_STATES[entry.status]}")


@backfill.command()
@click.argument("name")
@click.argument("object")
@click.option("--db", "db_path", required=True, metavar="PATH_OR_URL", help=_DB_HELP)
def stop(name: str, object: str, db_path: str) -> None:
    """Stop the backfill job of OBJECT of stream NAME (events already written stay)."""
    with open_database(db_path) as db:
        entry = StreamCatalog(db).stop_backfill(name, object)
    click.echo(f"backfill of {object}: {JOB_STATES[entry.status]}")
