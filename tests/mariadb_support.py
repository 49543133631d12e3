"""A real MariaDB server for the MySQL source tests: ``mariadb-install-db`` in a temporary
directory, a private socket and no TCP, a row-based binlog with full row images and metadata.
Started once per test session; `.ci/run` installs Debian's ``mariadb-server`` when missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

MARIADBD = Path("/usr/sbin/mariadbd")
INSTALL_DB = Path("/usr/bin/mariadb-install-db")

#: The binlog settings a source needs.
BINLOG = (
    "--log-bin=binlog",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
)


class MariaDbServer:
    """A running server; ``dsn(db)`` connects to database ``db`` over the private socket."""

    def __init__(self, root: Path, process: subprocess.Popen[bytes]) -> None:
        self.root = root
        self.socket = root / "socket"
        self.process = process

    def dsn(self, database: str = "", user: str = "root", password: str = "") -> str:
        secret = f":{password}" if password else ""
        return f"mysql://{user}{secret}@localhost/{database}?unix_socket={self.socket}"

    def connect(self, database: str | None = None) -> Any:
        import pymysql

        return pymysql.connect(
            unix_socket=str(self.socket),
            user="root",
            database=database,
            autocommit=True,
            init_command="SET time_zone = '+00:00'",
        )

    def sql(self, statements: str | Sequence[str], database: str | None = None) -> None:
        """Run ``statements`` (autocommit), as root."""
        conn = self.connect(database)
        try:
            with conn.cursor() as cur:
                for statement in [statements] if isinstance(statements, str) else statements:
                    cur.execute(statement)
        finally:
            conn.close()

    def create_database(self, name: str) -> str:
        self.sql(f"CREATE DATABASE {name}")
        return self.dsn(name)


class NoMariaDb(RuntimeError):
    """MariaDB is not installed here."""


def start_server(settings: Sequence[str] = BINLOG) -> MariaDbServer:
    """A new server in a temporary directory (stop it with :func:`stop_server`)."""
    if not MARIADBD.exists() or not INSTALL_DB.exists():
        raise NoMariaDb(f"MariaDB is not installed ({MARIADBD}); .ci/run installs mariadb-server")
    root = Path(tempfile.mkdtemp(prefix="cs-maria-"))
    data = root / "data"
    install = [str(INSTALL_DB), "--no-defaults", f"--datadir={data}", "--skip-test-db"]
    install += ["--auth-root-authentication-method=normal"]
    if os.geteuid() == 0:
        install.append("--user=root")
    subprocess.run(install, check=True, capture_output=True, timeout=120, cwd=root)
    command = [str(MARIADBD), "--no-defaults", f"--datadir={data}", f"--socket={root}/socket"]
    command += ["--skip-networking", "--server-id=1", f"--pid-file={root}/pid"]
    command += [f"--log-error={root}/error.log", "--innodb-flush-log-at-trx-commit=2"]
    command += ["--sync-binlog=0", "--max-connections=200", *settings]
    if os.geteuid() == 0:
        command.append("--user=root")
    process = subprocess.Popen(
        command, cwd=data, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    server = MariaDbServer(root, process)
    deadline = time.monotonic() + 60
    while True:
        try:
            server.sql("SELECT 1")
            return server
        except Exception:
            if process.poll() is not None or time.monotonic() > deadline:
                log = (root / "error.log").read_text(errors="replace")[-2000:]
                stop_server(server)
                raise RuntimeError(f"MariaDB did not start:\n{log}") from None
            time.sleep(0.1)


def stop_server(server: MariaDbServer) -> None:
    """Stop a server at once and remove its directory."""
    server.process.kill()
    server.process.wait(timeout=30)
    shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDbServer]:
    pytest.importorskip(
        "pymysqlreplication", reason="mysql-replication (the sources extra) is missing"
    )
    try:
        server = start_server()
    except NoMariaDb as exc:
        pytest.skip(f"{exc}: the MySQL source tests need it")
    try:
        yield server
    finally:
        stop_server(server)
