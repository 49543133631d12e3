"""The ``changestream`` command group, its error handling, and the ``ddl`` command."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from typing import Any

import click

import changestream
from changestream.cli._common import CA_CERT_KEY, TOKEN_KEY, open_database
from changestream.cli._demo import demo
from changestream.cli._leases import leases
from changestream.cli._partitions import partitions
from changestream.cli._pipeline import pipeline
from changestream.cli._policy import policy
from changestream.cli._serve import serve
from changestream.cli._serve import token as token_command
from changestream.cli._sources import sources
from changestream.cli._sql import sql
from changestream.cli._streams import discover_command, streams
from changestream.clock import format_ts
from changestream.errors import ChangeStreamError

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


class _Group(click.Group):
    """Turns user errors into ``error: ...`` on stderr and Ctrl-C into a quiet exit 130."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        # sqlite3 errors reach here for SQL naming unknown tables or columns, or a file that
        # is not a database: the user's mistake, so no traceback either.
        except (ChangeStreamError, sqlite3.Error) as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(EXIT_ERROR)
        except KeyboardInterrupt:
            ctx.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            # The reader of our output went away (``| head``): stop quietly, and keep Python
            # from complaining again when it flushes stdout at exit.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(changestream.__version__, prog_name="changestream")
@click.option(
    "--token",
    metavar="TOKEN",
    help="Bearer token for databases given as http(s):// URLs (default: $CHANGESTREAM_TOKEN).",
)
@click.option(
    "--ca-cert",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False),
    help="Trust the https:// server whose certificate FILE holds (or is signed by).",
)
@click.pass_context
def main(ctx: click.Context, token: str | None, ca_cert: str | None) -> None:
    """Spanner-style change streams over an embedded database file.

    Start with `changestream demo` for a guided tour. Errors print as
    "error: ..." and exit with status 2; Ctrl-C exits with status 130.
    """
    ctx.meta[TOKEN_KEY] = token
    ctx.meta[CA_CERT_KEY] = ca_cert


@main.command()
@click.argument("path")
@click.argument("statements", nargs=-1, required=True)
def ddl(path: str, statements: tuple[str, ...]) -> None:
    """Apply DDL STATEMENTS to the database at PATH (created if missing), atomically.

    \b
    Example:
      changestream ddl app.db "CREATE TABLE T (K STRING(MAX) NOT NULL, V INT64) PRIMARY KEY (K)"
      changestream ddl app.db "CREATE CHANGE STREAM TStream FOR T"
    """
    created = "://" not in path and not os.path.exists(path)
    try:
        with open_database(path, create=True) as db:
            applied = db.execute_ddl(list(statements))
    except BaseException:
        if created:  # a failed first DDL leaves no file behind
            for leftover in (path, f"{path}-wal", f"{path}-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(leftover)
        raise
    click.echo(f"applied at {format_ts(applied)}")


main.add_command(sql)
main.add_command(partitions)
main.add_command(leases)
main.add_command(policy)
main.add_command(demo)
main.add_command(serve)
main.add_command(token_command)
main.add_command(streams)
main.add_command(discover_command)
main.add_command(pipeline)
main.add_command(sources)
