"""``changestream serve`` and ``changestream token``: run the server and make its tokens."""

from __future__ import annotations

import logging
import os
import socket
import ssl

import click

from changestream.cli._common import setting
from changestream.errors import InvalidArgument
from changestream.extras import needs
from changestream.store.inspection import inspect


@click.command()
@click.argument("path")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=7070, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--tokens",
    "tokens_file",
    metavar="FILE",
    help="Accept the bearer tokens in FILE (made by `changestream token create`).",
)
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="Accept every request without a token, with every scope. For local use only.",
)
@click.option("--tls-cert", metavar="PEM", help="Serve HTTPS with this certificate (chain).")
@click.option("--tls-key", metavar="PEM", help="The private key of --tls-cert.")
@setting(
    "--keepalive",
    10.0,
    click.FloatRange(min=0.1),
    "Seconds between keepalive lines on idle streams.",
)
@setting("--max-body-bytes", 16 << 20, click.IntRange(min=1024), "Largest request body accepted.")
@setting(
    "--sql-max-seconds",
    10.0,
    click.FloatRange(min=0.01),
    "Seconds one SQL statement may run before it is stopped.",
)
@setting("--sql-max-rows", 100_000, click.IntRange(min=1), "Rows one SQL response may carry.")
@setting(
    "--max-streams-per-token",
    64,
    click.IntRange(min=1),
    "Streaming responses one token may have open at once.",
)
@click.option(
    "--follow-symlinks",
    is_flag=True,
    help="Serve NAME.db symlinks whose target lies outside the directory (refused by default).",
)
def serve(
    path: str,
    host: str,
    port: int,
    tokens_file: str | None,
    insecure_no_auth: bool,
    tls_cert: str | None,
    tls_key: str | None,
    keepalive: float,
    max_body_bytes: int,
    sql_max_seconds: float,
    sql_max_rows: int,
    max_streams_per_token: int,
    follow_symlinks: bool,
) -> None:
    """Serve the database file PATH, or every NAME.db file in directory PATH, over HTTP.

    Clients connect with changestream.connect("http://HOST:PORT/NAME", token=...), where
    NAME is the file name without .db; every command taking a database path also takes that
    URL (with --token or $CHANGESTREAM_TOKEN). The API is described at /openapi.json and
    /docs. SIGTERM or Ctrl-C stops gracefully: commits in flight finish, streams end and
    their clients reconnect when the server is back.

    The server never changes a file that is not a changestream database yet (an empty file,
    plain SQLite, an older layout) unless an admin-scoped DDL request asks; other files are
    listed under not_databases by GET /v1/databases and refused.
    """
    with needs("server", "serve"):
        from changestream.server import Databases, NoAuth, ServerConfig, TokenFile, create_app
        from changestream.server.serve import make_server

    if (tls_cert is None) != (tls_key is None):
        raise InvalidArgument("--tls-cert and --tls-key go together")
    if tokens_file is None and not insecure_no_auth:
        raise InvalidArgument(
            "pass --tokens FILE (make one with `changestream token create`) or, for local "
            "use only, --insecure-no-auth"
        )
    if tokens_file is not None and insecure_no_auth:
        raise InvalidArgument("--tokens and --insecure-no-auth exclude each other")
    auth = NoAuth() if insecure_no_auth else TokenFile(tokens_file or "")
    if tls_cert is not None and tls_key is not None:
        _check_tls(tls_cert, tls_key)
    _check_port(host, port)
    if os.path.isfile(path):
        problem = inspect(path)
        if problem is not None and not problem.fixable:
            raise InvalidArgument(f"{path} is not a changestream database: {problem.reason}")
    databases = Databases.serve(path, follow_symlinks)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if insecure_no_auth:
        click.secho(
            "WARNING: --insecure-no-auth: anyone who can reach this port can read, write and "
            "drop everything. Use --tokens for anything but local experiments.",
            fg="red",
            bold=True,
            err=True,
        )
    config = ServerConfig(
        keepalive_seconds=keepalive,
        max_body_bytes=max_body_bytes,
        sql_max_seconds=sql_max_seconds,
        sql_max_rows=sql_max_rows,
        max_streams_per_token=max_streams_per_token,
    )
    server = make_server(create_app(databases, auth, config), host, port, tls_cert, tls_key)
    scheme = "https" if tls_cert else "http"
    names = ", ".join(databases.names()) or "none yet"
    click.echo(f"serving {path} at {scheme}://{host}:{port}/NAME (databases: {names})", err=True)
    server.run()


def _check_tls(cert: str, key: str) -> None:
    """Load the certificate and key now, so a bad one is an error naming the file."""
    for what, name in (("--tls-cert", cert), ("--tls-key", key)):
        if not os.path.isfile(name):
            raise InvalidArgument(f"{what}: no file at {name!r}")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidArgument(f"--tls-cert {cert!r} / --tls-key {key!r}: {exc}") from exc


def _check_port(host: str, port: int) -> None:
    """Fail now, with the address, when the port cannot be listened on (taken, say)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise InvalidArgument(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


@click.group()
def token() -> None:
    """Make bearer tokens for `changestream serve --tokens FILE`."""


@token.command("create")
@click.option("--tokens", "tokens_file", required=True, metavar="FILE", help="The tokens file.")
@click.option(
    "--scope",
    "scopes",
    default="read",
    show_default=True,
    metavar="SCOPES",
    help="Comma-separated: read (reads, SQL, streams), write (transactions, leases), "
    "admin (DDL, split/merge, split policy).",
)
@click.option("--name", default="", help="A note kept with the hash, e.g. who the token is for.")
def create(tokens_file: str, scopes: str, name: str) -> None:
    """Print a new token and append its hash and scopes to FILE.

    The token itself is shown only now; FILE keeps its SHA-256. A running server picks up
    the new line within a second. Delete the line to revoke the token.
    """
    from changestream.server.auth import create_token, parse_scopes

    click.echo(create_token(tokens_file, parse_scopes(scopes), name))
