"""Shared fixtures: a settable clock and databases on real SQLite files."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream.clock import Clock, parse_ts

ACCOUNT_BALANCE = (
    "CREATE TABLE AccountBalance (AccountId STRING(MAX) NOT NULL, "
    "LastUpdate TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true), "
    "Balance INT64 NOT NULL) PRIMARY KEY (AccountId)"
)


class FixedClock:
    """A wall clock that stands still until told otherwise (commit timestamps stay unique)."""

    def __init__(self, start: str) -> None:
        self.value = parse_ts(start)

    def set(self, moment: str) -> None:
        self.value = parse_ts(moment)

    def __call__(self) -> int:
        return self.value


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    with changestream.open(str(tmp_path / "test.db")) as database:
        yield database


def in_threads(
    target: Callable[..., object], calls: Iterable[tuple[Any, ...]], timeout: float
) -> list[BaseException]:
    """Run ``target(*args)`` for each ``args`` of ``calls`` at once, a thread each; wait for
    them (each at most ``timeout`` seconds) and return what they raised. Fails when one is
    still running."""
    errors: list[BaseException] = []

    def run(*args: Any) -> None:
        try:
            target(*args)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=args) for args in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a thread is still running"
    return errors


def drain(records: Iterator[changestream.ChangeRecord]) -> list[changestream.ChangeRecord]:
    """Every record of a finite query."""
    return list(records)


OpenDb = Callable[..., changestream.Database]
_names = itertools.count()


@pytest.fixture(scope="session")
def served() -> Iterator[tuple[Any, str]]:
    """One server (uvicorn in a thread) for the whole session: (its Databases, its URL).
    Tests add the databases they open to it."""
    from changestream.server import Databases, NoAuth, ServerConfig, create_app, serve_in_thread

    databases = Databases()
    app = create_app(databases, NoAuth(), ServerConfig(keepalive_seconds=1.0))
    with serve_in_thread(app) as running:
        yield databases, running.url


@pytest.fixture(params=["embedded", "remote"])
def open_db(request: pytest.FixtureRequest) -> Iterator[OpenDb]:
    """``open_db(path, clock=None)``: the database in the file ``path``, either embedded or
    served by the session's server and reached through ``changestream.connect(url)``."""
    opened: list[changestream.EmbeddedDatabase] = []
    connected: list[tuple[Any, str, changestream.Database]] = []

    def open_(path: str, clock: Clock | None = None) -> changestream.Database:
        embedded = changestream.open(path, clock=clock)
        opened.append(embedded)
        if request.param == "embedded":
            return embedded
        databases, url = request.getfixturevalue("served")
        name = f"db{next(_names)}"
        databases.add(name, embedded)
        remote = changestream.connect(f"{url}/{name}")
        connected.append((databases, name, remote))
        return remote

    yield open_
    for databases, name, remote in connected:
        remote.close()
        databases.remove(name)
    for embedded in opened:
        embedded.close()
