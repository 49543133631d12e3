"""``change_sizes``: how much a partition range holds, counted by the database, and micro-batch
planning by it (no record read on the planner's side)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

import changestream
from changestream import DataChangeRecord, InvalidArgument, InvalidToken, NotFound
from changestream.embedded.database import store_of
from changestream.server import Databases, NoAuth, create_app, serve_in_thread
from changestream.spark.frontier import Frontier, ranges
from changestream.spark.planning import live_tokens, next_frontier
from changestream.streams.read import ChangeStreamReader, validate
from tests.conftest import OpenDb

DDL = "CREATE TABLE Items (Id INT64 NOT NULL, Name STRING(MAX), N INT64) PRIMARY KEY (Id)"
COLUMNS = ["Id", "Name", "N"]


def _workload(db: Any) -> None:
    """Inserts stored compact, updates and deletes, over two partitions."""
    db.set_split_policy(enabled=False)
    db.execute_ddl([DDL, "CREATE CHANGE STREAM S FOR Items"])
    db.split_at("Items", (50,))
    for batch in range(6):
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, [[batch * 15 + i, f"n{i}", i] for i in range(15)])
    with db.transaction() as tx:
        tx.update("Items", ["Id", "N"], [[k, -k] for k in range(0, 90, 7)])
    with db.transaction() as tx:
        tx.delete("Items", [[k] for k in range(3, 90, 11)])


def _read(db: Any, token: str, start: int, end: int) -> list[DataChangeRecord]:
    return [
        r for r in db.read_change_stream("S", start, end, token) if isinstance(r, DataChangeRecord)
    ]


def _stored_bytes(path: str) -> Counter[tuple[str, int]]:
    """Payload bytes per (split, commit timestamp), from the file itself."""
    with sqlite3.connect(path) as raw:
        rows = raw.execute("SELECT split_id, commit_ts, LENGTH(payload) FROM _cs_log")
        found: Counter[tuple[str, int]] = Counter()
        for split, ts, size in rows:
            found[(str(split), ts)] += size
    return found


def test_sizes_count_what_the_read_function_returns(open_db: OpenDb, tmp_path: Path) -> None:
    path = str(tmp_path / "items.db")
    db = open_db(path)
    _workload(db)
    end = db.current_timestamp()
    partitions = db.partitions("S")
    assert len(partitions) == 2
    all_bytes = 0
    for partition in partitions:
        start = partition.start_timestamp
        records = _read(db, partition.token, start, end)
        sizes = db.change_sizes("S", partition.token, start, end)
        by_ts: dict[int, list[DataChangeRecord]] = {}
        for record in records:
            by_ts.setdefault(record.commit_timestamp, []).append(record)
        assert [s.commit_timestamp for s in sizes] == sorted(by_ts)
        for size in sizes:
            same = by_ts[size.commit_timestamp]
            assert size.records == len(same)
            assert size.mods == sum(len(r.mods) for r in same) > 0
        all_bytes += sum(s.bytes for s in sizes)
    assert all_bytes == sum(_stored_bytes(path).values())


def test_a_limit_pages_and_both_ends_are_included(open_db: OpenDb, tmp_path: Path) -> None:
    db = open_db(str(tmp_path / "items.db"))
    _workload(db)
    (partition, _) = db.partitions("S")
    start, token = partition.start_timestamp, partition.token
    every = db.change_sizes("S", token, start, db.current_timestamp())
    assert len(every) >= 4
    assert db.change_sizes("S", token, start, db.current_timestamp(), 2) == every[:2]
    first, last = every[1].commit_timestamp, every[3].commit_timestamp
    assert db.change_sizes("S", token, first, last) == every[1:4]


@pytest.mark.parametrize(
    ("token", "limit", "error", "message"),
    [
        (None, 10, InvalidArgument, "give a partition_token"),
        ("forged", 10, InvalidToken, "forged"),
        ("live", 0, InvalidArgument, "limit must be an integer from 1"),
        ("live", 10**9, InvalidArgument, "limit must be an integer from 1"),
    ],
)
def test_bad_arguments_fail_as_the_read_functions_do(
    open_db: OpenDb,
    tmp_path: Path,
    token: str | None,
    limit: int,
    error: type[Exception],
    message: str,
) -> None:
    db = open_db(str(tmp_path / "items.db"))
    _workload(db)
    live = db.partitions("S")[0]
    start, end = live.start_timestamp, db.current_timestamp()
    given = live.token if token == "live" else token
    with pytest.raises(error, match=message):
        db.change_sizes("S", given, start, end, limit)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        db.change_sizes("Nope", live.token, start, end)
    with pytest.raises(InvalidArgument, match="before start_timestamp"):
        db.change_sizes("S", live.token, end, start)


def test_a_stream_dropped_after_the_arguments_were_checked_is_not_found(tmp_path: Path) -> None:
    """Sizes are counted in the same snapshot that finds the stream, as records are read: a
    stream dropped between the check of the arguments and the count is NotFound, not empty."""
    with changestream.open(str(tmp_path / "items.db")) as db:
        _workload(db)
        live = db.partitions("S")[0]
        store = store_of(db)
        request = validate(
            store, "S", live.start_timestamp, db.current_timestamp(), live.token, 1000, None
        )
        db.execute_ddl("DROP CHANGE STREAM S")
        with pytest.raises(NotFound, match="was dropped"):
            ChangeStreamReader(store, request).sizes(10)


def test_a_file_from_before_the_mods_column_gets_it_and_counts_its_old_rows(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "old.db")
    with changestream.open(path) as db:
        _workload(db)
    with sqlite3.connect(path) as raw:
        raw.execute("ALTER TABLE _cs_log DROP COLUMN mods")  # as an earlier version made it
    with changestream.open(path) as db:
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, [[500 + i, "new", i] for i in range(3)])
        end = db.current_timestamp()
        for partition in db.partitions("S"):
            start = partition.start_timestamp
            records = _read(db, partition.token, start, end)
            sizes = db.change_sizes("S", partition.token, start, end)
            assert sum(s.mods for s in sizes) == sum(len(r.mods) for r in records) > 0
    with sqlite3.connect(path) as raw:
        counted = raw.execute("SELECT count(*), count(mods) FROM _cs_log").fetchone()
    assert counted[1] == 1 < counted[0], "only the row written since has the column filled"


class _NoRecords:
    """A database whose read function must not be called (the planner sizes, not reads)."""

    def __init__(self, db: changestream.EmbeddedDatabase) -> None:
        self._db = db

    def read_change_stream(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("planning read a record")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


@pytest.mark.parametrize("max_records", [1, 20, 40, 10_000])
def test_a_micro_batch_is_planned_without_reading_a_record(
    tmp_path: Path, max_records: int
) -> None:
    with changestream.open(str(tmp_path / "items.db")) as db:
        _workload(db)
        start = min(p.start_timestamp for p in db.partition_history("S"))
        until = store_of(db).watermark(store_of(db).connection())
        frontier = Frontier.initial(start, live_tokens(db, "S", start))
        sizing = _NoRecords(db)
        end = next_frontier(sizing, "S", frontier, until, max_records, 0, True)  # type: ignore[arg-type]
        mods = Counter[int]()
        for read in ranges(frontier, end):
            for record in _read(db, read.token, read.start, read.end):
                mods[record.commit_timestamp] += len(record.mods)
        committed = [
            r for p in db.partitions("S") for r in _read(db, p.token, p.start_timestamp, until)
        ]
        everything = sum(len(r.mods) for r in committed)
        # At most the limit, in whole commit timestamps (one at least), and the next commit
        # timestamp would have crossed it.
        assert 0 < sum(mods.values()) <= max(max_records, min(mods.values()))
        if sum(mods.values()) < everything:
            rest = [r for r in committed if r.commit_timestamp > end.timestamp]
            following = min(r.commit_timestamp for r in rest)
            extra = sum(len(r.mods) for r in rest if r.commit_timestamp == following)
            assert sum(mods.values()) + extra > max_records
        else:
            assert max_records >= everything


@pytest.mark.parametrize("server", ["current", "older"])
def test_a_server_without_change_sizes_is_named_as_older_than_the_client(
    tmp_path: Path, server: str
) -> None:
    """A pipeline of this version asks its server for ``change_sizes``; a server that has no
    such request (an older one: today's 404 text, or the one servers had before) gets an
    error saying so, not a NotFound that reads like a missing stream."""
    with changestream.open(str(tmp_path / "items.db")) as db:
        _workload(db)
        live = db.partitions("S")[0]
        end = db.current_timestamp()
        databases = Databases()
        databases.add("items", db)
        app = create_app(databases, NoAuth())
        app.router.routes = [
            r for r in app.router.routes if not getattr(r, "path", "").endswith("/change_sizes")
        ]
        if server == "older":

            async def older_404(request: Request, exc: Exception) -> Response:
                message = f"{request.method} {request.url.path}: Not Found"
                return JSONResponse({"error": {"code": "NotFound", "message": message}}, 404)

            app.exception_handlers[HTTPException] = older_404
        running = serve_in_thread(app)
        try:
            remote = changestream.connect(f"{running.url}/items")
            try:
                assert remote.partitions("S")[0].token == live.token
                with pytest.raises(NotFound, match="runs an older changestream than this client"):
                    remote.change_sizes("S", live.token, live.start_timestamp, end)
                with pytest.raises(NotFound, match="change stream 'Nope' does not exist"):
                    remote.partitions("Nope")
            finally:
                remote.close()
        finally:
            running.stop()
