"""``changestream sources``: PostgreSQL and MySQL / MariaDB databases as change sources."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click
from rich.console import Console

import changestream
from changestream.cli._common import json_line
from changestream.errors import FailedPrecondition

if TYPE_CHECKING:
    from changestream.sources import RunSummary

# Each command imports changestream.sources when it runs: its MySQL DDL parsing imports
# sqlglot, a tenth of a second every other command of the CLI would wait for.

_DB_HELP = "The changestream database file the source feeds (created if missing by `add`)."


@click.group()
def sources() -> None:
    """Capture changes from PostgreSQL or MySQL / MariaDB into mirror tables and a change
    stream."""


@contextmanager
def _local(path: str, create: bool = False) -> Iterator[changestream.EmbeddedDatabase]:
    if "://" in path:
        raise FailedPrecondition("a source feeds a local database file, not a server URL")
    if not create and not os.path.exists(path):
        raise FailedPrecondition(f"no database file at {path}")
    with changestream.open(path) as db:
        yield db


@sources.command("add")
@click.argument("name")
@click.option("--db", "db_path", required=True, metavar="PATH", help=_DB_HELP)
@click.option("--postgres", metavar="DSN", help="A PostgreSQL source: libpq connection string.")
@click.option(
    "--mysql",
    metavar="DSN",
    help="A MySQL / MariaDB source: mysql://user:password@host:port/database "
    "(?unix_socket=PATH for a local socket).",
)
@click.option(
    "--tables",
    metavar="S.T,...",
    help="Tables to capture (default: all of schema public, or of the MySQL DSN's database).",
)
@click.option("--slot", help="PostgreSQL: replication slot name (default: changestream_<name>).")
@click.option("--publication", help="PostgreSQL: publication name (default: changestream_<name>).")
@click.option(
    "--server-id",
    type=int,
    help="MySQL: the replica server id the connector reads the binlog as, unused by any other "
    "replica of the server (default: from NAME).",
)
def add(
    name: str,
    db_path: str,
    postgres: str | None,
    mysql: str | None,
    tables: str | None,
    slot: str | None,
    publication: str | None,
    server_id: int | None,
) -> None:
    """Add source NAME: mirror tables <schema>_<table> and change stream NAME in --db."""
    from changestream.sources import add_source

    with _local(db_path, create=True) as db:
        definition = add_source(
            db,
            name,
            postgres=postgres,
            mysql=mysql,
            tables=tables,
            slot=slot,
            publication=publication,
            server_id=server_id,
        )
    mirrors = ", ".join(definition.mirror(t) for t in definition.tables)
    click.echo(f"source {name} added: {mirrors}; run it with `changestream sources run {name}`")


@sources.command("list")
@click.option("--db", "db_path", required=True, metavar="PATH", help=_DB_HELP)
def list_command(db_path: str) -> None:
    """One line per source."""
    from changestream.sources import list_sources

    with _local(db_path) as db:
        for definition in list_sources(db):
            click.echo(f"{definition.name}  {definition.kind}  {','.join(definition.tables)}")


@sources.command("describe")
@click.argument("name")
@click.option("--db", "db_path", required=True, metavar="PATH", help=_DB_HELP)
def describe(name: str, db_path: str) -> None:
    """The source's definition and position, as JSON."""
    from changestream.sources import describe_source

    with _local(db_path) as db:
        click.echo(json_line(describe_source(db, name)))


@sources.command("remove")
@click.argument("name")
@click.option("--db", "db_path", required=True, metavar="PATH", help=_DB_HELP)
def remove(name: str, db_path: str) -> None:
    """Forget source NAME and drop its PostgreSQL slot and publication (mirror tables stay)."""
    from changestream.sources import remove_source

    with _local(db_path) as db:
        remove_source(db, name)
    click.echo(f"source {name} removed")


@sources.command("run")
@click.argument("name")
@click.option("--db", "db_path", required=True, metavar="PATH", help=_DB_HELP)
@click.option(
    "--until-caught-up",
    is_flag=True,
    help="Stop once every source commit made before the run started is captured.",
)
def run(name: str, db_path: str, until_caught_up: bool) -> None:
    """Run source NAME's connector until Ctrl-C or SIGTERM (a clean stop)."""
    from changestream.sources import run_source

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    console = Console(stderr=True)
    shown = [0.0]

    def progress(summary: RunSummary) -> None:
        now = time.monotonic()
        if now - shown[0] >= 1.0:
            shown[0] = now
            line = (
                f"{name}: {summary.copied_rows:,} rows copied, "
                f"{summary.transactions:,} transactions captured"
            )
            if console.is_terminal:
                console.print(line, end="\r")
            else:
                print(line, file=sys.stderr, flush=True)

    with _local(db_path) as db:
        summary = run_source(
            db, name, stop=stop, until_caught_up=until_caught_up, progress=progress
        )
    click.echo(
        f"{name}: {summary.copied_rows:,} rows copied, {summary.transactions:,} transactions "
        f"captured ({summary.skipped_transactions} already there)"
    )
