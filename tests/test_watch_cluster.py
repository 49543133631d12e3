"""watch() on a server's root URL: every database the server serves, in commit order, resumable,
with databases that appear while it runs (MongoDB's client-level change stream)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream import InvalidArgument, InvalidToken
from changestream.server import Databases, NoAuth, ServerConfig, create_app, serve_in_thread
from tests.watch_support import COLUMNS, ITEMS, take

pytestmark = pytest.mark.timeout(120)


def database(tmp_path: Path, name: str) -> changestream.EmbeddedDatabase:
    db = changestream.open(str(tmp_path / f"{name}.db"))
    db.execute_ddl(ITEMS)
    db.ensure_watch_stream()
    return db


def insert(db: changestream.EmbeddedDatabase, key: int) -> None:
    with db.transaction() as tx:
        tx.insert("Items", COLUMNS, [[key, f"v{key}", key]])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Databases, dict[str, Any], str]]:
    """Two databases served from one in-thread server; yields the server's root URL."""
    databases = Databases()
    dbs = {name: database(tmp_path, name) for name in ("alpha", "beta")}
    for name, db in dbs.items():
        databases.add(name, db)
    running = serve_in_thread(create_app(databases, NoAuth(), ServerConfig()))
    try:
        yield databases, dbs, f"http://127.0.0.1:{running.server.port}"
    finally:
        running.stop()
        for db in dbs.values():
            db.close()


def where(event: dict[str, Any]) -> tuple[str, int]:
    return event["ns"]["db"], event["documentKey"]["Id"]


def test_root_watch_merges_every_database_in_commit_order(
    served: tuple[Databases, dict[str, Any], str],
) -> None:
    _, dbs, root = served
    server = changestream.connect(root)
    try:
        assert server.name == "" and server.list_database_names() == ["alpha", "beta"]
        with server.watch(max_await_time_ms=200) as cursor:
            for key, name in enumerate(["alpha", "beta", "beta", "alpha", "beta"]):
                insert(dbs[name], key)
            events = take(cursor, 5)
            last = cursor.resume_token
        assert [where(e) for e in events] == [
            ("alpha", 0),
            ("beta", 1),
            ("beta", 2),
            ("alpha", 3),
            ("beta", 4),
        ]
        times = [e["clusterTime"] for e in events]
        assert times == sorted(times)
        tokens = [e["_id"]["_data"] for e in events]
        assert tokens == sorted(tokens), "cluster tokens sort like the events they name"
        assert last == events[-1]["_id"]

        # Resume after the second event: the other three come again, in the same order.
        with server.watch(resume_after=events[1]["_id"], max_await_time_ms=200) as resumed:
            again = take(resumed, 3)
        assert [e["_id"] for e in again] == [e["_id"] for e in events[2:]]

        # A database-level token is not a cluster token.
        with dbs["alpha"].watch() as local:
            insert(dbs["alpha"], 10)
            (local_event,) = take(local, 1)
        with pytest.raises(InvalidToken, match="watch\\(\\) across databases"):
            server.watch(resume_after=local_event["_id"])
        # Calls that need one database say so on a root serving two.
        with pytest.raises(InvalidArgument, match="serves 2 databases"):
            server.read("Items")
    finally:
        server.close()


def test_a_database_that_appears_is_followed(
    served: tuple[Databases, dict[str, Any], str], tmp_path: Path
) -> None:
    databases, dbs, root = served
    server = changestream.connect(root)
    later = database(tmp_path, "gamma")
    try:
        with server.watch([{"$match": {"ns.db": {"$ne": "alpha"}}}]) as cursor:
            insert(dbs["alpha"], 1)
            insert(dbs["beta"], 2)
            (first,) = take(cursor, 1)
            databases.add("gamma", later)
            # Listed again within a few seconds; a change made after that is seen.
            time.sleep(2.5)
            cursor.try_next()
            insert(later, 3)
            (second,) = take(cursor, 1)
        assert [where(first), where(second)] == [("beta", 2), ("gamma", 3)]
    finally:
        server.close()
        later.close()


def test_a_root_with_one_database_still_reaches_it(tmp_path: Path) -> None:
    only = database(tmp_path, "only")
    databases = Databases()
    databases.add("only", only)
    running = serve_in_thread(create_app(databases, NoAuth(), ServerConfig()))
    server = changestream.connect(f"http://127.0.0.1:{running.server.port}")
    try:
        assert server.name == "only"
        insert(only, 1)
        assert server.read("Items") == [(1, "v1", 1)]
        with server.watch() as cursor:
            insert(only, 2)
            (event,) = take(cursor, 1)
        assert where(event) == ("only", 2)
    finally:
        server.close()
        running.stop()
        only.close()
