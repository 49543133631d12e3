"""Live readers woken by the same commit share what they read: the commit signal computes an
answer once per place and generation, and many live readers of one partition each still get
every record once, in order."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import changestream
from changestream import DataChangeRecord
from changestream.embedded.database import store_of
from changestream.store import commit_signal
from changestream.streams.read import ChangeStreamReader

pytestmark = pytest.mark.timeout(120)


def test_an_answer_is_computed_once_per_place_question_and_generation(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "s.db")) as db:
        signal = store_of(db).commit_signal
        computed: list[str] = []

        def answer(text: str) -> str:
            computed.append(text)
            return text

        assert signal.shared(5, "p", 1, lambda: answer("a")) == "a"
        assert signal.shared(5, "p", 1, lambda: answer("b")) == "a"  # shared
        assert signal.shared(5, "q", 1, lambda: answer("c")) == "c"  # another place
        assert signal.shared(5, "p", 2, lambda: answer("d")) == "d"  # another question
        assert signal.shared(5, "p", 2, lambda: answer("e")) == "d"
        assert signal.shared(6, "p", 2, lambda: answer("f")) == "f"  # a newer generation
        assert signal.shared(5, "p", 2, lambda: answer("g")) == "g"  # older: not kept
        assert signal.shared(6, "p", 2, lambda: answer("h")) == "f"
        assert computed == ["a", "c", "d", "f", "g"]


def test_many_live_readers_of_one_partition_share_their_reads_and_each_get_every_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readers, commits = 8, 40
    snapshots = [0]
    original = ChangeStreamReader._snapshot

    def counted(self: ChangeStreamReader[DataChangeRecord], *args: object) -> object:
        snapshots[0] += 1
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ChangeStreamReader, "_snapshot", counted)
    with changestream.open(str(tmp_path / "s.db")) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl("CREATE TABLE T (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)")
        created = db.execute_ddl("CREATE CHANGE STREAM S FOR T")
        (partition,) = db.partitions("S")
        received: list[list[int]] = [[] for _ in range(readers)]
        ready = threading.Barrier(readers + 1)

        def read(index: int) -> None:
            records = db.read_change_stream("S", created, None, partition.token, 1000)
            ready.wait()
            for record in records:
                if isinstance(record, DataChangeRecord):
                    received[index].append(int(record.mods[0].keys["K"]))
                    if len(received[index]) == commits:
                        break
            records.close()  # type: ignore[attr-defined]

        threads = [threading.Thread(target=read, args=(i,)) for i in range(readers)]
        for thread in threads:
            thread.start()
        ready.wait()
        snapshots[0] = 0
        for key in range(commits):
            with db.transaction() as tx:
                tx.insert("T", ["K", "V"], [[key, key]])
        for thread in threads:
            thread.join(60)
    assert received == [list(range(commits))] * readers
    # Unshared, every reader would read the log at least once per commit.
    assert snapshots[0] < readers * commits / 2


def test_closing_the_database_ends_its_commit_poller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poller left running at interpreter exit crashed a process inside SQLite (a benchmark
    exited with SIGSEGV after its last line); closing waits for it."""
    monkeypatch.setattr(commit_signal, "FIRST_POLL_S", 0.3)  # it sleeps when the close comes
    db = changestream.open(str(tmp_path / "s.db"))
    db.execute_ddl("CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)")
    created = db.execute_ddl("CREATE CHANGE STREAM S FOR T")
    with db.transaction() as tx:
        tx.insert("T", ["K"], [[1]])
    (partition,) = db.partitions("S")
    live = db.read_change_stream("S", created, None, partition.token, heartbeat_milliseconds=1000)
    assert any(isinstance(record, DataChangeRecord) for record in live)
    pollers = [t for t in threading.enumerate() if t.name == "changestream-commit-poller"]
    assert pollers, "reading live should have started the commit poller"
    db.close()
    assert not any(t.is_alive() for t in pollers)


def _pollers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "changestream-commit-poller"}


def test_a_read_of_the_past_starts_no_commit_poller(tmp_path: Path) -> None:
    """A read whose end has passed never waits for a commit: a poller for it would only take
    CPU from the reader (Spark tasks, a Stream Client catching up)."""
    with changestream.open(str(tmp_path / "s.db")) as db:
        db.execute_ddl("CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)")
        created = db.execute_ddl("CREATE CHANGE STREAM S FOR T")
        for key in range(3):
            with db.transaction() as tx:
                tx.insert("T", ["K"], [[key]])
        store = store_of(db)
        end = store.last_commit_ts()
        (partition,) = db.partitions("S")
        before = _pollers()
        past = db.read_change_stream("S", created, end, partition.token, 1000)
        keys = [m.keys["K"] for r in past if isinstance(r, DataChangeRecord) for m in r.mods]
        assert keys == [0, 1, 2]
        assert not _pollers() - before
        # A read whose end is still ahead waits for commits until then: it listens.
        ahead = db.read_change_stream("S", end + 1, store.now() + 300_000, partition.token, 1000)
        assert all(not isinstance(r, DataChangeRecord) for r in ahead)
        assert _pollers() - before
