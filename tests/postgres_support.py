"""A real PostgreSQL 15 server for the source tests: ``initdb`` in a temporary directory (as the
``postgres`` user when the tests run as root, since initdb refuses root), a private socket, no
TCP, ``wal_level = logical``. Started once per test session."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN = Path("/usr/lib/postgresql/15/bin")


def _as_postgres(command: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


class PostgresServer:
    """A running server; ``dsn(db)`` connects to database ``db`` over the private socket."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.socket = root / "socket"

    def dsn(self, database: str = "postgres") -> str:
        return f"host={self.socket} dbname={database} user=postgres"

    def sql(self, statement: str, database: str = "postgres") -> None:
        """Run ``statement`` (autocommit), as a superuser."""
        import psycopg2

        conn = psycopg2.connect(self.dsn(database))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
        finally:
            conn.close()

    def drop_slots(self) -> None:
        """Drop every replication slot (they belong to the server, not to one database), once
        their connectors' sessions are gone."""
        deadline = time.monotonic() + 30
        while True:
            self.sql(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active"
            )
            try:
                self.sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def create_database(self, name: str) -> str:
        self.sql(f"CREATE DATABASE {name}")
        return self.dsn(name)


class NoPostgres(RuntimeError):
    """PostgreSQL 15 is not installed here."""


def start_server(wal_level: str = "logical") -> PostgresServer:
    """A new server in a temporary directory (stop it with :func:`stop_server`)."""
    if not (BIN / "initdb").exists():
        raise NoPostgres(f"PostgreSQL 15 is not installed at {BIN}")
    root = Path(tempfile.mkdtemp(prefix="cs-pg-"))
    server = PostgresServer(root)
    server.socket.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(server.socket, "postgres")
    initdb = [str(BIN / "initdb"), "-D", str(server.data), "-U", "postgres", "-Atrust"]
    subprocess.run(_as_postgres(initdb), check=True, capture_output=True, timeout=120)
    settings = (
        f"-c listen_addresses='' -c unix_socket_directories='{server.socket}' "
        f"-c wal_level={wal_level} -c max_replication_slots=20 -c max_wal_senders=20 "
        "-c fsync=off"
    )
    start = [str(BIN / "pg_ctl"), "-D", str(server.data), "-l", str(root / "server.log")]
    start += ["-w", "-t", "60", "-o", settings, "start"]
    subprocess.run(_as_postgres(start), check=True, capture_output=True, timeout=90)
    return server


def stop_server(server: PostgresServer) -> None:
    """Stop a server at once and remove its directory."""
    stop = [str(BIN / "pg_ctl"), "-D", str(server.data), "-m", "immediate", "stop"]
    subprocess.run(_as_postgres(stop), capture_output=True, timeout=60, check=False)
    time.sleep(0.2)
    shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    pytest.importorskip("psycopg2", reason="psycopg2 (the sources extra) is not installed")
    try:
        server = start_server()
    except NoPostgres as exc:
        pytest.skip(f"{exc}: the source tests need it")
    try:
        yield server
    finally:
        stop_server(server)
