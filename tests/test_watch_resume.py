"""watch() resume rules: resume_after, start_after, start_at_operation_time, invalidate, expiry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import changestream
from changestream import InvalidArgument, OutOfRange
from changestream.clock import parse_ts, to_datetime
from changestream.watch import ClusterTime
from changestream.watch.tokens import ResumeToken, TokenKind, event_token
from tests.conftest import FixedClock
from tests.watch_support import COLUMNS, ITEMS, items_database, key, nothing_more, take

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    yield from items_database(tmp_path / "resume.db")


def write(db: changestream.EmbeddedDatabase, ids: list[int], value: str) -> int:
    with db.transaction() as tx:
        tx.insert_or_update("Items", COLUMNS, [[i, value, i] for i in ids])
    assert tx.commit_timestamp is not None
    return parse_ts(tx.commit_timestamp)


def summary(events: list[dict[str, Any]]) -> list[tuple[str, Any, Any]]:
    return [
        (e["operationType"], e.get("documentKey"), e.get("fullDocument", {}).get("V"))
        for e in events
    ]


def test_resume_after_every_token_across_splits_and_merges(
    db: changestream.EmbeddedDatabase,
) -> None:
    start = db.ensure_watch_stream().now
    write(db, [10, 500, 900], "a")
    db.split_at("Items", [400])
    write(db, [10, 500], "b")
    db.split_at("Items", [700])
    write(db, [900, 10, 800], "c")
    db.merge_at("Items", [400])
    write(db, [500, 10], "d")
    options: dict[str, Any] = {"full_document": "whenAvailable", "max_await_time_ms": 100}
    with db.watch(start_at_operation_time=start, **options) as cursor:
        events = take(cursor, 10)
        assert nothing_more(cursor)
    keys = [key(e) for e in events]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert [e["fullDocument"]["V"] for e in events] == list("aaabbcccdd")
    for index, event in enumerate(events):
        with db.watch(resume_after=event["_id"], **options) as resumed:
            rest = take(resumed, len(events) - index - 1)
            assert summary(rest) == summary(events[index + 1 :])
            assert nothing_more(resumed)


def test_start_at_operation_time(db: changestream.EmbeddedDatabase) -> None:
    db.ensure_watch_stream()
    write(db, [1], "a")
    second = write(db, [2], "b")
    write(db, [3], "c")
    for start in (ClusterTime.from_us(second), to_datetime(second), second):
        with db.watch(start_at_operation_time=start, max_await_time_ms=100) as cursor:
            assert [e["fullDocument"]["V"] for e in take(cursor, 2)] == ["b", "c"]
            assert nothing_more(cursor)


def test_table_watch_resumes_after_drop_to_invalidate(db: changestream.EmbeddedDatabase) -> None:
    cursor = db.table("Items").watch()
    write(db, [1], "a")
    db.execute_ddl("DROP TABLE Items")
    _, drop, invalidate = take(cursor, 3)
    assert ResumeToken.decode(invalidate["_id"], "t").kind is TokenKind.INVALIDATE
    with (
        pytest.warns(UserWarning, match="table 'Items' does not exist"),
        db.table("Items").watch(resume_after=drop["_id"]) as resumed,
    ):
        assert [e["operationType"] for e in take(resumed, 1)] == ["invalidate"]
        assert not resumed.alive
    with (
        pytest.raises(InvalidArgument, match="resume_after cannot resume after an invalidate"),
        pytest.warns(UserWarning),
    ):
        db.table("Items").watch(resume_after=invalidate["_id"])
    # start_after begins a new stream after the invalidate: the re-created table is watched.
    with pytest.warns(UserWarning):
        fresh = db.table("Items").watch(start_after=invalidate["_id"], max_await_time_ms=200)
    with fresh:
        db.execute_ddl(ITEMS)
        write(db, [2], "b")
        (insert,) = take(fresh, 1)
        assert insert["fullDocument"]["V"] == "b"
        assert fresh.alive and nothing_more(fresh)


def test_resume_token_moves_past_filtered_events(db: changestream.EmbeddedDatabase) -> None:
    with db.watch([{"$match": {"operationType": "delete"}}], max_await_time_ms=100) as cursor:
        before = cursor.resume_token
        write(db, [1, 2], "a")
        stamp = write(db, [3], "b")
        for _ in range(100):
            if cursor.try_next() is None and ResumeToken.decode(cursor.resume_token, "t").key > (
                stamp,
            ):
                break
        token = cursor.resume_token
    assert token["_data"] > before["_data"]
    assert ResumeToken.decode(token, "t").kind is TokenKind.START
    with db.watch(resume_after=token, max_await_time_ms=200) as resumed:
        assert nothing_more(resumed), "the filtered events are not replayed"
        write(db, [4], "c")
        assert [e["fullDocument"]["V"] for e in take(resumed, 1)] == ["c"]


def test_token_older_than_retention_is_refused(tmp_path: Path) -> None:
    clock = FixedClock("2024-01-01T00:00:00Z")
    with changestream.open(str(tmp_path / "old.db"), clock=clock) as db:
        db.execute_ddl(ITEMS)
        clock.set("2024-01-01T00:00:01Z")
        start = db.ensure_watch_stream().now
        clock.set("2024-01-01T00:00:02Z")
        with db.watch(start_at_operation_time=start) as cursor:
            write(db, [1], "a")
            (event,) = take(cursor, 1)
        clock.set("2024-01-03T00:00:00Z")
        with pytest.raises(OutOfRange, match=r"cannot resume watch\(\) at 2024-01-01T00:00:02"):
            db.watch(resume_after=event["_id"])
        with pytest.raises(OutOfRange, match="oldest readable timestamp is 2024-01-02T00:00:00"):
            db.watch(start_at_operation_time="2024-01-01T12:00:00Z")


@given(
    commit_ts=st.integers(0, 2**64 - 1),
    transaction=st.integers(0, 2**64 - 1),
    sequence=st.integers(0, 2**32 - 1),
    mod=st.integers(0, 2**32 - 1),
)
def test_event_token_is_the_general_tokens_event(
    commit_ts: int, transaction: int, sequence: int, mod: int
) -> None:
    token, document = event_token(commit_ts, transaction, sequence, mod)
    expected = ResumeToken(commit_ts, transaction, sequence, mod, 0, TokenKind.EVENT)
    # The fields, as a plain tuple: a ResumeToken is made of them only when one is asked for.
    assert token == tuple(expected) and ResumeToken(*token).kind is TokenKind.EVENT
    assert document == expected.document()
    assert ResumeToken.decode(document, "t") == expected
