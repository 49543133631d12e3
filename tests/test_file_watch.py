"""An idle commit poller waits on the WAL file instead of looking every few milliseconds, and
still sees another handle's commit at once: pauses end when the file is written."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import changestream
from changestream.embedded.database import store_of
from changestream.store import commit_signal
from changestream.store.commit_signal import CommitSignal
from changestream.store.file_watch import FileWatch

pytestmark = pytest.mark.timeout(60)


def test_a_write_ends_a_pause_and_no_write_lets_it_run_out(tmp_path: Path) -> None:
    path = tmp_path / "watched"
    path.write_bytes(b"")
    with FileWatch(str(path)) as watch:
        assert watch.watching
        started = time.monotonic()
        assert watch.pause(0.2) is False
        assert time.monotonic() - started >= 0.19
        writer = threading.Timer(0.1, lambda: path.write_bytes(b"x"))
        writer.start()
        started = time.monotonic()
        assert watch.pause(20) is True
        assert time.monotonic() - started < 10
        writer.join()
        path.write_bytes(b"y")  # written before the pause: it ends at once
        assert watch.pause(20) is True


def test_a_missing_file_is_not_watched_and_its_pauses_are_sleeps(tmp_path: Path) -> None:
    with FileWatch(str(tmp_path / "absent")) as watch:
        assert not watch.watching
        started = time.monotonic()
        assert watch.pause(0.1) is False
        assert time.monotonic() - started >= 0.09


def test_a_removed_file_stops_being_watched(tmp_path: Path) -> None:
    path = tmp_path / "watched"
    path.write_bytes(b"")
    with FileWatch(str(path)) as watch:
        path.unlink()
        deadline = time.monotonic() + 5
        while watch.watching and time.monotonic() < deadline:
            watch.pause(0.05)
        assert not watch.watching


@contextlib.contextmanager
def timed_looks(
    tmp_path: Path,
) -> Iterator[tuple[CommitSignal, list[float], changestream.EmbeddedDatabase]]:
    """A listening commit signal of a database, the times of its poller's looks at the
    watermark, and another handle of the database to write with."""
    path = str(tmp_path / "s.db")
    with changestream.open(path) as db, changestream.open(path) as other:
        db.execute_ddl("CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)")
        store = store_of(db)
        looks: list[float] = []

        def watermark(conn: object) -> int:
            looks.append(time.monotonic())
            return store.watermark(conn)  # type: ignore[arg-type]

        signal = CommitSignal(store.connection, watermark, lambda: False, f"{path}-wal")
        try:
            with signal.listening():
                yield signal, looks, other
        finally:
            signal.stop()


def assert_a_commit_is_seen_at_once(
    signal: CommitSignal, other: changestream.EmbeddedDatabase
) -> None:
    seen = signal.generation
    with other.transaction() as tx:
        tx.insert("T", ["K"], [[1]])
    committed = time.monotonic()
    assert signal.wait(seen, 10) != seen
    # Waiting a whole idle pause would take MAX_WATCHED_POLL_S.
    assert time.monotonic() - committed < commit_signal.MAX_WATCHED_POLL_S / 2


def test_an_idle_poller_looks_rarely_and_still_sees_another_handles_commit_at_once(
    tmp_path: Path,
) -> None:
    with timed_looks(tmp_path) as (signal, looks, other):
        time.sleep(1.0)  # long past ACTIVE_S: the poller is idle
        idle_from = time.monotonic()
        time.sleep(1.5)
        idle_looks = sum(1 for at in looks if at >= idle_from)
        # Sleeping between looks, the poller would look every MAX_POLL_S (187 times).
        assert idle_looks <= 1.5 / commit_signal.MAX_POLL_S / 4, idle_looks
        assert_a_commit_is_seen_at_once(signal, other)


def test_writes_that_move_no_watermark_do_not_keep_the_poller_looking_fast(
    tmp_path: Path,
) -> None:
    with timed_looks(tmp_path) as (signal, looks, other):
        writer = store_of(other)
        with writer.locked() as conn:
            conn.execute("CREATE TABLE bookkeeping (n INTEGER)")
        time.sleep(0.5)
        before, writes = len(looks), 0
        began = time.monotonic()
        while time.monotonic() - began < 1.0:
            # Bookkeeping, as a Stream Client's checkpoints: the WAL is written, the
            # watermark stays.
            with writer.locked() as conn:
                conn.execute("INSERT INTO bookkeeping VALUES (?)", (writes,))
            writes += 1
            time.sleep(0.02)
        per_write = (len(looks) - before) / writes
        # Looking every FIRST_POLL_S for ACTIVE_S after each write was 29 looks a write; a
        # few looks after each (its commit shows a moment after it), then the long pause.
        assert per_write <= 12, per_write
        assert_a_commit_is_seen_at_once(signal, other)


def test_closing_a_database_ends_its_pollers_long_pause_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit_signal, "FIRST_POLL_S", 30.0)  # a pause the close must cut
    db = changestream.open(str(tmp_path / "s.db"))
    db.execute_ddl("CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)")
    signal = store_of(db).commit_signal
    with signal.listening():
        pollers = [t for t in threading.enumerate() if t.name == "changestream-commit-poller"]
        time.sleep(0.2)  # the poller is in its first pause
    started = time.monotonic()
    db.close()
    assert time.monotonic() - started < 1.5
    assert pollers and not any(t.is_alive() for t in pollers)
