"""PostgreSQL as a change source, against a real PostgreSQL 15 server: mirrors equal to their
source tables, each source transaction once and in order in the change stream, restarts after
SIGKILL that lose and repeat nothing, and clear errors for bad input."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import changestream
from changestream.cli import main
from changestream.clock import now_us
from changestream.errors import AlreadyExists, FailedPrecondition, NotFound, Unavailable
from changestream.sources import add_source, describe_source, list_sources, pg_columns, run_source
from changestream.streams.origins import source_of_tag
from tests.postgres_support import (  # noqa: F401
    PostgresServer,
    postgres_server,
    start_server,
    stop_server,
)
from tests.source_support import (
    Writer,
    captured_transactions,
    kill_while_writing,
    running_source,
    start_connector,
    wait_until_streaming,
    wait_while_running,
)

pytestmark = pytest.mark.timeout(300)

psycopg2 = pytest.importorskip("psycopg2")

ACCOUNTS = (
    "CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(20,2), "
    "active boolean, opened date, seen timestamptz, tags text[], doc jsonb, blob bytea)"
)


def _connect(dsn: str) -> Any:
    conn = psycopg2.connect(dsn)
    conn.autocommit = False
    return conn


def _execute(dsn: str, *statements: str) -> None:
    conn = _connect(dsn)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        conn.commit()
    finally:
        conn.close()


@pytest.fixture
def source_dsn(
    postgres_server: PostgresServer,  # noqa: F811
    request: pytest.FixtureRequest,
) -> Iterator[str]:
    name = "t_" + "".join(c for c in request.node.name.lower() if c.isalnum())[:40]
    dsn = postgres_server.create_database(name)
    _execute(dsn, ACCOUNTS)
    yield dsn
    postgres_server.drop_slots()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    with changestream.open(str(tmp_path / "mirror.db")) as database:
        yield database


def _source_rows(dsn: str, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    conn = _connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")
            cur.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id")
            rows = cur.fetchall()
    finally:
        conn.close()
    return [tuple(_plain(v) for v in row) for row in rows]


def _plain(value: Any) -> Any:
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC)
    return value


def _mirror_rows(db: changestream.EmbeddedDatabase, table: str, columns: list[str]) -> list[Any]:
    result = db.execute_sql(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id")
    return [tuple(_plain(v) for v in row) for row in result]


def test_types_are_mirrored_with_their_values(source_dsn: str, db: Any) -> None:
    _execute(
        source_dsn,
        "INSERT INTO accounts VALUES (1, 'ana', 12.50, true, '2024-02-29', "
        "'2024-03-01 10:00:00.123456+02', ARRAY['a', 'b c', NULL], '{\"k\": [1, 2]}', "
        "'\\x00ff')",
        "INSERT INTO accounts (id, owner) VALUES (2, 'bo')",
    )
    add_source(db, "Bank", postgres=source_dsn, tables="accounts")
    summary = run_source(db, "Bank", until_caught_up=True)
    assert summary.copied_rows == 2
    rows = db.read(
        "public_accounts",
        [[1], [2]],
        ["id", "owner", "balance", "active", "opened", "seen", "tags", "doc", "blob"],
    )
    assert list(rows[0]) == [
        1,
        "ana",
        decimal.Decimal("12.50"),
        True,
        dt.date(2024, 2, 29),
        dt.datetime(2024, 3, 1, 8, 0, 0, 123456, tzinfo=dt.UTC),
        ["a", "b c", None],
        {"k": [1, 2]},
        b"\x00\xff",
    ]
    assert list(rows[1]) == [2, "bo", None, None, None, None, None, None, None]
    (stream,) = db.change_streams()
    assert (stream.name, stream.value_capture_type) == ("Bank", "NEW_ROW_AND_OLD_VALUES")
    assert captured_transactions(db, "Bank") == []  # the copy is the starting state, not changes


def _workload(
    dsn: str, seed: int, transactions: int, alter_at: int | None, pause: float = 0.0
) -> None:
    rng = random.Random(seed)
    conn = _connect(dsn)
    next_id = 1_000_000
    try:
        with conn.cursor() as cur:
            for number in range(transactions):
                if number == alter_at:
                    cur.execute("ALTER TABLE accounts ADD COLUMN note text")
                    conn.commit()
                cur.execute("SELECT id FROM accounts")
                # Rows are touched once per transaction, so every transaction changes
                # something in the end (an insert deleted again would leave no change).
                ids = [i for (i,) in cur.fetchall()]
                for _ in range(rng.randint(1, 4)):
                    choice = rng.random()
                    if choice < 0.5 or not ids:
                        next_id += 1
                        cur.execute(
                            "INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)",
                            (next_id, f"o{next_id}", rng.randint(0, 10_000) / 100),
                        )
                    elif choice < 0.85:
                        target = rng.choice(ids)
                        ids.remove(target)
                        cur.execute(
                            "UPDATE accounts SET balance = COALESCE(balance, 0) + 1, active = %s "
                            "WHERE id = %s",
                            (rng.random() < 0.5, target),
                        )
                    else:
                        target = rng.choice(ids)
                        ids.remove(target)
                        cur.execute("DELETE FROM accounts WHERE id = %s", (target,))
                conn.commit()
                time.sleep(pause)
    finally:
        conn.close()


def test_a_random_workload_leaves_the_mirror_equal_and_each_transaction_once(
    source_dsn: str, db: Any
) -> None:
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner) SELECT g, 'seed' FROM generate_series(1, 300) g",
    )
    add_source(db, "Bank", postgres=source_dsn)
    with running_source(db):
        wait_until_streaming(db, "Bank")  # commits before it are in the copy, not the stream
        _workload(source_dsn, seed=7, transactions=120, alter_at=60)
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "owner", "balance", "active", "note"]
    assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
        source_dsn, "accounts", columns
    )
    xids = captured_transactions(db, "Bank")
    assert len(xids) == len(set(xids)) == 120
    assert [int(x) for x in xids] == sorted(int(x) for x in xids)


def test_a_connector_killed_again_and_again_loses_and_repeats_nothing(
    source_dsn: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "killed.db")
    with changestream.open(path) as db:
        add_source(db, "Bank", postgres=source_dsn)
        run_source(db, "Bank", until_caught_up=True)  # the copy: later commits are changes
    writer = Writer(_workload, source_dsn, 3, 400, None, 0.03)
    writer.start()
    kills = kill_while_writing(path, writer)
    writer.join()
    with changestream.open(path) as db:
        _wait_for_slot_release(source_dsn)
        run_source(db, "Bank", until_caught_up=True)
        columns = ["id", "owner", "balance", "active"]
        assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
            source_dsn, "accounts", columns
        )
        xids = captured_transactions(db, "Bank")
    assert kills >= 20
    assert len(xids) == len(set(xids)) == 400


def _wait_for_slot_release(dsn: str) -> None:
    """A SIGKILLed connector's walsender notices its client is gone within a few seconds."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        conn = _connect(dsn)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_replication_slots WHERE active")
                (active,) = cur.fetchone()
        finally:
            conn.close()
        if not active:
            return
        time.sleep(0.2)
    raise AssertionError("the replication slot stayed in use 30 s after its connector died")


def test_bad_input_is_refused_and_nothing_is_created(
    source_dsn: str,
    db: Any,
    postgres_server: PostgresServer,  # noqa: F811
) -> None:
    _execute(source_dsn, "CREATE TABLE nokey (a int, b text)")
    with pytest.raises(FailedPrecondition, match=r"no primary key.*ADD PRIMARY KEY"):
        add_source(db, "Bank", postgres=source_dsn, tables="accounts,nokey")
    with pytest.raises(NotFound, match=r"no table public\.missing"):
        add_source(db, "Bank", postgres=source_dsn, tables="missing")
    _execute(
        source_dsn,
        "CREATE TABLE parted (id int PRIMARY KEY) PARTITION BY RANGE (id)",
        "CREATE TABLE parted_low PARTITION OF parted FOR VALUES FROM (0) TO (10)",
    )
    with pytest.raises(FailedPrecondition, match=r"partitioned.*\(parted_low\)"):
        add_source(db, "Bank", postgres=source_dsn, tables="parted")
    _execute(source_dsn, "CREATE TABLE shapes (id int PRIMARY KEY, p point)")
    with pytest.raises(changestream.InvalidArgument, match=r"'p' of public\.shapes has type point"):
        add_source(db, "Bank", postgres=source_dsn, tables="shapes")
    with pytest.raises(Unavailable, match="cannot reach the PostgreSQL server"):
        add_source(db, "Bank", postgres=f"host={postgres_server.root}/nowhere dbname=x")
    with pytest.raises(changestream.InvalidArgument, match="source name"):
        add_source(db, "no spaces", postgres=source_dsn)
    _execute(source_dsn, "SELECT pg_create_logical_replication_slot('taken', 'pgoutput')")
    try:
        with pytest.raises(AlreadyExists, match="replication slot taken already exists"):
            add_source(db, "Bank", postgres=source_dsn, slot="taken")
    finally:
        _execute(source_dsn, "SELECT pg_drop_replication_slot('taken')")
    assert db.tables() == [] and list_sources(db) == []
    add_source(db, "Bank", postgres=source_dsn, tables="accounts")
    with pytest.raises(AlreadyExists, match="source Bank already exists"):
        add_source(db, "Bank", postgres=source_dsn, tables="accounts")


def test_a_partitioned_table_is_captured_through_its_partitions(source_dsn: str, db: Any) -> None:
    """Logical decoding sends a partitioned table's changes under its partitions' names: the
    table itself is refused (above), and left out of the default tables; its partitions are
    mirrored, whatever table the statements name."""
    _execute(
        source_dsn,
        "CREATE TABLE parted (id bigint PRIMARY KEY, v text) PARTITION BY RANGE (id)",
        "CREATE TABLE parted_low PARTITION OF parted FOR VALUES FROM (0) TO (100)",
        "INSERT INTO parted VALUES (1, 'a')",
    )
    add_source(db, "Bank", postgres=source_dsn)
    assert describe_source(db, "Bank")["tables"] == ["public.accounts", "public.parted_low"]
    run_source(db, "Bank", until_caught_up=True)
    _execute(source_dsn, "INSERT INTO parted VALUES (2, 'b')", "UPDATE parted SET v = 'c'")
    run_source(db, "Bank", until_caught_up=True)
    assert _mirror_rows(db, "public_parted_low", ["id", "v"]) == [(1, "c"), (2, "c")]


def test_a_second_connector_of_a_running_source_is_refused(source_dsn: str, db: Any) -> None:
    add_source(db, "Bank", postgres=source_dsn)
    stop = threading.Event()
    runner = threading.Thread(target=run_source, args=(db, "Bank"), kwargs={"stop": stop})
    runner.start()
    try:
        wait_until_streaming(db, "Bank")
        time.sleep(0.5)
        with pytest.raises(FailedPrecondition, match="in use by another connector"):
            run_source(db, "Bank", until_caught_up=True)
    finally:
        stop.set()
        runner.join(timeout=30)


def test_the_cli_adds_runs_describes_and_removes_a_source(source_dsn: str, tmp_path: Path) -> None:
    path = str(tmp_path / "cli.db")
    _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (1, 'ana'), (2, 'bo')")
    runner = CliRunner()
    added = runner.invoke(main, ["sources", "add", "Bank", "--db", path, "--postgres", source_dsn])
    assert added.exit_code == 0, added.output
    assert "public_accounts" in added.output
    ran = runner.invoke(main, ["sources", "run", "Bank", "--db", path, "--until-caught-up"])
    assert ran.exit_code == 0, ran.output
    assert "2 rows copied" in ran.output
    listed = runner.invoke(main, ["sources", "list", "--db", path])
    assert listed.output.startswith("Bank  postgres  public.accounts")
    described = runner.invoke(main, ["sources", "describe", "Bank", "--db", path])
    assert '"state": "streaming"' in described.output or '"state":"streaming"' in described.output
    removed = runner.invoke(main, ["sources", "remove", "Bank", "--db", path])
    assert removed.exit_code == 0, removed.output
    missing = runner.invoke(main, ["sources", "describe", "Bank", "--db", path])
    assert missing.exit_code == 2 and "no source named 'Bank'" in missing.output


def test_a_server_without_logical_wal_or_a_user_without_replication_is_named(
    source_dsn: str,
    db: Any,
    postgres_server: PostgresServer,  # noqa: F811
) -> None:
    postgres_server.sql("CREATE ROLE plain LOGIN")
    with pytest.raises(FailedPrecondition, match="lacks the REPLICATION privilege"):
        add_source(db, "Bank", postgres=source_dsn.replace("user=postgres", "user=plain"))
    replica_only = start_server(wal_level="replica")
    try:
        with pytest.raises(FailedPrecondition, match=r"wal_level = replica.*wal_level = logical"):
            add_source(db, "Bank", postgres=replica_only.dsn())
    finally:
        stop_server(replica_only)
    assert db.tables() == [] and list_sources(db) == []


def test_the_initial_copy_under_concurrent_writes_leaves_no_gap(source_dsn: str, db: Any) -> None:
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner) SELECT g, 'seed' FROM generate_series(1, 20000) g",
    )
    add_source(db, "Bank", postgres=source_dsn)
    writer = Writer(_workload, source_dsn, 11, 150, None, 0.005)
    writer.start()  # commits land before, during and after the copy's snapshot
    summary = run_source(db, "Bank", until_caught_up=True)
    writer.join()
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "owner", "balance", "active"]
    assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
        source_dsn, "accounts", columns
    )
    xids = captured_transactions(db, "Bank")
    assert len(xids) == len(set(xids)) <= 150  # those before the slot's snapshot: in the copy
    assert summary.copied_rows >= 20000


def test_a_connector_killed_during_its_copy_resumes_it_and_misses_nothing(
    source_dsn: str, tmp_path: Path
) -> None:
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner, doc) SELECT g, 'seed', '{\"a\": 1}' "
        "FROM generate_series(1, 60000) g",
    )
    path = str(tmp_path / "copy.db")
    with changestream.open(path) as db:
        add_source(db, "Bank", postgres=source_dsn)
    process = start_connector(path)
    with changestream.open(path) as db:
        deadline = time.monotonic() + 60
        while _mirror_count(db) == 0:  # the copy has begun
            assert time.monotonic() < deadline
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        described = describe_source(db, "Bank")
        assert described["state"] == "copying"
        before = _mirror_count(db)
        (reached,) = described["copy_progress"]["public.accounts"]
        assert int(reached) == before  # ids 1..n, copied in key order
        assert 0 < before < 60000
        # Changes to rows copied and not yet copied, between the slot's snapshot and the
        # resumed copy's: the stream replays them over rows that may already hold them.
        _execute(
            source_dsn,
            "UPDATE accounts SET owner = 'after' WHERE id <= 10 OR id > 59990",
            "DELETE FROM accounts WHERE id IN (5, 59000)",
            "INSERT INTO accounts (id, owner) VALUES (-1, 'low'), (70000, 'high')",
            "UPDATE accounts SET id = 80000 WHERE id = 7",
        )
        _wait_for_slot_release(source_dsn)
        writer = Writer(_workload, source_dsn, 13, 60, None, 0.01)
        writer.start()  # and commits during the resumed copy
        summary = run_source(db, "Bank", until_caught_up=True)
        writer.join()
        run_source(db, "Bank", until_caught_up=True)
        assert summary.copied_rows < 60000 - before + 10  # resumed, not started over
        columns = ["id", "owner", "doc", "balance"]
        assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
            source_dsn, "accounts", columns
        )
        transactions = captured_transactions(db, "Bank")
        assert len(transactions) == len(set(transactions)) == 61


def _mirror_count(db: changestream.EmbeddedDatabase) -> int:
    ((count,),) = list(db.execute_sql("SELECT COUNT(*) FROM public_accounts"))
    return int(count)


def test_a_connection_lost_while_running_ends_the_run_with_a_clear_error(
    source_dsn: str, db: Any
) -> None:
    add_source(db, "Bank", postgres=source_dsn)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            run_source(db, "Bank", stop=threading.Event())
        except BaseException as exc:
            failures.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    wait_until_streaming(db, "Bank")
    _execute(
        source_dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'",
    )
    runner.join(timeout=30)
    assert not runner.is_alive()
    (failure,) = failures
    assert isinstance(failure, Unavailable)
    assert "source Bank: the server failed" in str(failure)


def test_columns_dropped_and_added_in_the_source_are_followed(source_dsn: str, db: Any) -> None:
    _execute(source_dsn, "INSERT INTO accounts (id, owner, blob) VALUES (1, 'ana', '\\x01')")
    add_source(db, "Bank", postgres=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    _execute(
        source_dsn,
        "ALTER TABLE accounts DROP COLUMN blob",
        "ALTER TABLE accounts ADD COLUMN note text",
        "INSERT INTO accounts (id, owner, note) VALUES (2, 'bo', 'new')",
    )
    run_source(db, "Bank", until_caught_up=True)
    (mirror,) = [t for t in db.tables() if t.name == "public_accounts"]
    names = [c.name for c in mirror.columns]
    assert "blob" not in names and names[-1] == "note"
    columns = ["id", "owner", "note"]
    assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
        source_dsn, "accounts", columns
    )


def test_columns_renamed_or_dropped_and_added_again_are_followed(source_dsn: str, db: Any) -> None:
    """PostgreSQL changes every row for these without a row change: a renamed column keeps
    its values, one dropped and added again reads its new default. The source's event
    trigger tells the connector which column is which, in the WAL's order, whether the
    connector was stopped meanwhile or runs, and also in a transaction that changed rows
    before altering their table."""
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner, balance) VALUES (1, 'ana', 1.5), (2, 'bo', 2.5)",
        "INSERT INTO accounts (id, owner) VALUES (3, 'cy')",
    )
    add_source(db, "Bank", postgres=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    _execute(
        source_dsn,
        "ALTER TABLE accounts RENAME COLUMN owner TO holder",
        "ALTER TABLE accounts DROP COLUMN balance",
        "ALTER TABLE accounts ADD COLUMN balance numeric(20,2) DEFAULT 9.5",
        "INSERT INTO accounts (id, holder, balance) VALUES (4, 'di', 4.5)",
        "UPDATE accounts SET holder = 'bob' WHERE id = 2",
    )
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "holder", "balance"]
    assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
        source_dsn, "accounts", columns
    )
    assert [r[1:] for r in _mirror_rows(db, "public_accounts", columns)] == [
        ("ana", decimal.Decimal("9.5")),
        ("bob", decimal.Decimal("9.5")),
        ("cy", decimal.Decimal("9.5")),
        ("di", decimal.Decimal("4.5")),
    ]
    with running_source(db) as runner:
        _execute(source_dsn, "UPDATE accounts SET active = false WHERE id = 1")
        wait_while_running(
            lambda: db.read("public_accounts", [[1]], ["active"]) == [(False,)], runner
        )
        _execute(
            source_dsn,
            "UPDATE accounts SET holder = 'cyd', active = true WHERE id = 3",
            "ALTER TABLE accounts RENAME COLUMN holder TO keeper",
            "ALTER TABLE accounts DROP COLUMN active, ADD COLUMN active text",
            "INSERT INTO accounts (id, keeper, active) VALUES (5, 'ed', 'yes')",
        )
        wait_while_running(lambda: bool(db.read("public_accounts", [[5]], ["id"])), runner)
    columns = ["id", "keeper", "active", "balance"]
    assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
        source_dsn, "accounts", columns
    )
    assert [r[1:3] for r in _mirror_rows(db, "public_accounts", columns)] == [
        ("ana", None),
        ("bob", None),
        ("cyd", None),
        ("di", None),
        ("ed", "yes"),
    ]
    (mirror,) = [t for t in db.tables() if t.name == "public_accounts"]
    names = [c.name for c in mirror.columns]
    assert "owner" not in names and "holder" not in names and names.count("active") == 1
    # The renames' values reached the change stream as updates tagged with the statement's
    # transaction, so whatever follows the stream, a replica included, has them too.
    start = min(p.start_timestamp for p in db.partition_history("Bank"))
    renamed = [
        record
        for partition in changestream.walk_partitions(db, "Bank", start, now_us())
        for record in changestream.data_changes(partition.records())
        if record.mod_type == "UPDATE" and "keeper" in record.mods[0].new_values
    ]
    # (Row 3 twice: renamed, then its update read before the rename, applied at the commit.)
    assert sorted(mod.keys["id"] for r in renamed for mod in r.mods) == [1, 2, 3, 3, 4]
    assert len({source_of_tag(r.transaction_tag) for r in renamed}) == 1


def _deleted_keys(db: changestream.EmbeddedDatabase) -> list[int]:
    """The keys of the rows the source's change stream says were deleted, in commit order."""
    start = min(p.start_timestamp for p in db.partition_history("Bank"))
    return [
        mod.keys["id"]
        for partition in changestream.walk_partitions(db, "Bank", start, now_us())
        for record in changestream.data_changes(partition.records())
        if record.mod_type == "DELETE"
        for mod in record.mods
    ]


def test_a_table_dropped_and_created_again_is_copied_again(source_dsn: str, db: Any) -> None:
    """A table dropped and created again under its name is another table, which the
    publication lost with the drop: without this, the mirror kept the old rows and never got
    the new ones. The drop empties the mirror (its rows' deletions reach the change stream);
    the new table is published and copied, whether the connector was stopped meanwhile or
    runs, with what was written and altered in it before the connector saw it; a table the
    publication lost is published and copied again too."""
    table = "CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL, score int)"
    _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (1, 'ana'), (2, 'bo')")
    add_source(db, "Bank", postgres=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    _execute(source_dsn, "DROP TABLE accounts")
    _execute(source_dsn, table, "INSERT INTO accounts VALUES (3, 'cy', 30), (4, 'di', 40)")
    _execute(source_dsn, "ALTER TABLE accounts RENAME COLUMN score TO points")
    _execute(source_dsn, "UPDATE accounts SET points = 41 WHERE id = 4")
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "owner", "points"]
    assert _mirror_rows(db, "public_accounts", columns) == [(3, "cy", 30), (4, "di", 41)]
    assert sorted(_deleted_keys(db)) == [1, 2]
    _execute(source_dsn, "ALTER PUBLICATION changestream_bank DROP TABLE accounts")
    _execute(source_dsn, "INSERT INTO accounts VALUES (5, 'ed', 50)")
    run_source(db, "Bank", until_caught_up=True)
    assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
        source_dsn, "accounts", columns
    )
    assert len(_mirror_rows(db, "public_accounts", columns)) == 3
    # (Copied again as the table made anew it may be: its rows deleted, then inserted.)
    assert sorted(_deleted_keys(db)) == [1, 2, 3, 4]
    table = table.replace("score", "points")
    with running_source(db) as runner:
        # Once the run follows the slot (one starting without the table would stop).
        _execute(source_dsn, "UPDATE accounts SET points = 1 WHERE id = 3")
        wait_while_running(lambda: db.read("public_accounts", [[3]], ["points"]) == [(1,)], runner)
        # In one transaction, with rows changed before the drop and written after the create.
        _execute(
            source_dsn,
            "UPDATE accounts SET points = 0",
            "DROP TABLE accounts",
            table,
            "INSERT INTO accounts VALUES (6, 'fa', 60)",
        )
        _execute(source_dsn, "INSERT INTO accounts VALUES (7, 'gu', 70)")
        wait_while_running(
            lambda: [r[0] for r in _mirror_rows(db, "public_accounts", columns)] == [6, 7],
            runner,
        )
        # In transactions of their own, with writes the connector reads before it copies.
        _execute(source_dsn, "DROP TABLE accounts")
        _execute(source_dsn, table)
        for key in range(8, 12):
            _execute(source_dsn, f"INSERT INTO accounts VALUES ({key}, 'ho', {key})")
        _execute(source_dsn, "UPDATE accounts SET points = 81 WHERE id = 8")
        _execute(source_dsn, "DELETE FROM accounts WHERE id = 9")
        wait_while_running(
            lambda: (
                _mirror_rows(db, "public_accounts", columns)
                == [(8, "ho", 81), (10, "ho", 10), (11, "ho", 11)]
            ),
            runner,
        )
    assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
        source_dsn, "accounts", columns
    )
    # Each drop deleted what the mirror held; the rows of the table there now never were.
    deleted = _deleted_keys(db)
    assert {3, 4, 5, 6, 7} <= set(deleted) and not {8, 10, 11} & set(deleted)


def test_the_table_of_a_captured_name_is_followed_through_renames(source_dsn: str, db: Any) -> None:
    """A source captures a table by its name. A migration that fills a new table and swaps
    it in by renames leaves the mirror equal to the table of that name, not to the one
    renamed away (whose later changes are not the mirror's), whether the connector runs or
    was stopped meanwhile."""
    _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (1, 'ana'), (2, 'bo')")
    add_source(db, "Bank", postgres=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "owner"]
    with running_source(db) as runner:
        # Once the run follows the slot (one starting without the table would stop).
        _execute(source_dsn, "UPDATE accounts SET active = true WHERE id = 1")
        wait_while_running(
            lambda: db.read("public_accounts", [[1]], ["active"]) == [(True,)], runner
        )
        _execute(
            source_dsn,
            ACCOUNTS.replace("accounts", "accounts_new"),
            "INSERT INTO accounts_new (id, owner) SELECT id, owner || '!' FROM accounts",
        )
        _execute(
            source_dsn,
            "ALTER TABLE accounts RENAME TO accounts_old",
            "ALTER TABLE accounts_new RENAME TO accounts",
        )
        _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (3, 'cy')")
        _execute(source_dsn, "UPDATE accounts_old SET owner = 'old'")
        _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (4, 'di')")
        wait_while_running(lambda: len(_mirror_rows(db, "public_accounts", columns)) == 4, runner)
    assert _mirror_rows(db, "public_accounts", columns) == [
        (1, "ana!"),
        (2, "bo!"),
        (3, "cy"),
        (4, "di"),
    ]
    _execute(
        source_dsn,
        "ALTER TABLE accounts RENAME TO accounts_newer",
        "ALTER TABLE accounts_old RENAME TO accounts",
    )
    _execute(source_dsn, "UPDATE accounts_newer SET owner = 'newer'")
    run_source(db, "Bank", until_caught_up=True)
    assert _mirror_rows(db, "public_accounts", columns) == [(1, "old"), (2, "old")]


def test_a_copy_longer_than_the_servers_stream_timeout_keeps_the_run_going(
    source_dsn: str, db: Any
) -> None:
    """A table made anew while the stream runs is copied with the stream stopped (a copy
    longer than the server's ``wal_sender_timeout``, 1 s here, must not end the run), then
    the stream goes on where the statement's transaction does: 200,000 rows copied, and the
    change after them."""
    database = source_dsn.split("dbname=")[1].split()[0]
    _execute(source_dsn, f"ALTER DATABASE {database} SET wal_sender_timeout = '1s'")
    add_source(db, "Bank", postgres=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    with running_source(db) as runner:
        _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (0, 'first')")
        wait_while_running(lambda: bool(db.read("public_accounts", [[0]], ["id"])), runner)
        _execute(
            source_dsn,
            "DROP TABLE accounts",
            ACCOUNTS,
            "INSERT INTO accounts (id, owner) SELECT g, 'made' FROM generate_series(1, 200000) g",
        )
        _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (0, 'last')")
        wait_while_running(
            lambda: db.read("public_accounts", [[0]], ["owner"]) == [("last",)], runner
        )
    assert _mirror_count(db) == 200_001


def _made_again_and_again(dsn: str, times: int, rows: int) -> None:
    """Drop the table and make it again ``times`` times, each time with ``rows`` rows
    written in transactions of 1,000, and some updated and deleted."""
    for time_ in range(times):
        _execute(dsn, "DROP TABLE accounts", ACCOUNTS)
        for first in range(0, rows, 1000):
            _execute(
                dsn,
                "INSERT INTO accounts (id, owner) SELECT g, 'made "
                f"{time_}' FROM generate_series({first}, {first + 999}) AS g",
            )
        _execute(dsn, f"UPDATE accounts SET active = true WHERE id % 7 = {time_ % 7}")
        _execute(dsn, f"DELETE FROM accounts WHERE id % 11 = {time_ % 11}")
        time.sleep(0.5)


def test_a_connector_killed_while_tables_are_made_again_loses_nothing(
    source_dsn: str, tmp_path: Path
) -> None:
    """SIGKILL at random moments while the table is dropped and made again with 12,000 rows
    (each copy again takes several pages): the mirror ends equal to the source."""
    path = str(tmp_path / "killed.db")
    with changestream.open(path) as db:
        add_source(db, "Bank", postgres=source_dsn)
        run_source(db, "Bank", until_caught_up=True)
    writer = Writer(_made_again_and_again, source_dsn, 6, 12_000)
    writer.start()
    kills = kill_while_writing(path, writer, at_least=10)
    writer.join()
    with changestream.open(path) as db:
        _wait_for_slot_release(source_dsn)
        run_source(db, "Bank", until_caught_up=True)
        columns = ["id", "owner", "active"]
        mirror = _mirror_rows(db, "public_accounts", columns)
    source = _source_rows(source_dsn, "accounts", columns)
    assert kills >= 10
    assert len(mirror) > 10_000
    missing, extra = sorted(set(source) - set(mirror)), sorted(set(mirror) - set(source))
    assert mirror == source, f"missing {missing[:10]} ({len(missing)}), extra {extra[:10]}"


def test_columns_given_another_type_take_it_with_the_values_the_server_converted(
    source_dsn: str, db: Any
) -> None:
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner, active, balance) VALUES (1, 'ana', true, 10.25), "
        "(2, 'bo', NULL, 20.75)",
    )
    add_source(db, "Bank", postgres=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    _execute(
        source_dsn,
        "ALTER TABLE accounts ALTER COLUMN active TYPE text",
        "ALTER TABLE accounts ALTER COLUMN balance TYPE numeric(20,1)",  # the same mirror type
        "ALTER TABLE accounts ALTER COLUMN id TYPE int",  # the key keeps its mirrored type
        "ALTER TABLE accounts RENAME COLUMN owner TO holder",  # renamed only
        "INSERT INTO accounts (id, holder, active) VALUES (3, 'cy', 'yes')",
    )
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "holder", "active", "balance"]
    assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
        source_dsn, "accounts", columns
    )
    assert _mirror_rows(db, "public_accounts", columns) == [
        (1, "ana", "true", decimal.Decimal("10.3")),
        (2, "bo", None, decimal.Decimal("20.8")),
        (3, "cy", "yes", None),
    ]
    (mirror,) = [t for t in db.tables() if t.name == "public_accounts"]
    assert {c.name: str(c.type) for c in mirror.columns}["active"] == "STRING(MAX)"


def test_rows_changed_before_a_type_change_in_its_transaction_take_the_converted_values(
    source_dsn: str, db: Any
) -> None:
    """Row changes read before an ``ALTER COLUMN ... TYPE`` of their own transaction carry
    values of the old type; they are applied at the commit, after the mirror's column took
    the new one, with the values the server converted (here by a ``USING`` expression),
    whether the connector was stopped meanwhile or runs."""
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner, active, balance) VALUES "
        "(1, 'ana', true, 1.25), (2, 'bo', true, 2.50), (4, 'di', NULL, 4.00)",
        "CREATE TABLE ledger (book text, line int, amount numeric(10,2), PRIMARY KEY (book, line))",
        "INSERT INTO ledger VALUES ('a', 1, 1.5), ('a', 2, 2.5), ('b', 1, 3.5)",
    )
    add_source(db, "Bank", postgres=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "owner", "active", "balance"]
    _execute(
        source_dsn,
        "UPDATE ledger SET amount = 9.25 WHERE book = 'a' AND line = 2",
        "INSERT INTO ledger VALUES ('b', 2, 4.75)",
        "ALTER TABLE ledger ALTER COLUMN amount TYPE text USING 'x' || amount",
        "UPDATE accounts SET active = false, balance = 7.75 WHERE id = 1",
        "INSERT INTO accounts (id, owner, active, balance) VALUES (3, 'cy', false, 3.5)",
        "UPDATE accounts SET owner = 'bob' WHERE id = 2",
        "ALTER TABLE accounts ALTER COLUMN active TYPE text",
        "ALTER TABLE accounts ALTER COLUMN balance TYPE bigint USING (balance * 100)::bigint",
        "DELETE FROM accounts WHERE id = 2",
    )
    run_source(db, "Bank", until_caught_up=True)
    assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
        source_dsn, "accounts", columns
    )
    assert _mirror_rows(db, "public_accounts", columns) == [
        (1, "ana", "false", 775),
        (3, "cy", "false", 350),
        (4, "di", None, 400),
    ]
    ledger = db.execute_sql("SELECT book, line, amount FROM public_ledger ORDER BY book, line")
    assert [tuple(row) for row in ledger] == [
        ("a", 1, "x1.50"),
        ("a", 2, "x9.25"),
        ("b", 1, "x3.50"),
        ("b", 2, "x4.75"),
    ]
    with running_source(db) as runner:
        _execute(
            source_dsn,
            "UPDATE accounts SET balance = 123 WHERE id = 1",
            "INSERT INTO accounts (id, owner, active, balance) VALUES (5, 'ed', 'yes', 5)",
            "ALTER TABLE accounts ALTER COLUMN balance TYPE numeric(20,2) USING balance / 8.0",
            "ALTER TABLE accounts ALTER COLUMN active TYPE boolean USING active = 'false'",
        )
        wait_while_running(lambda: bool(db.read("public_accounts", [[5]], ["id"])), runner)
    assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
        source_dsn, "accounts", columns
    )
    assert _mirror_rows(db, "public_accounts", columns) == [
        (1, "ana", True, decimal.Decimal("15.38")),
        (3, "cy", True, decimal.Decimal("43.75")),
        (4, "di", None, decimal.Decimal("50.00")),
        (5, "ed", False, decimal.Decimal("0.63")),
    ]


@pytest.mark.parametrize(
    ("statements", "columns", "expected"),
    [
        (
            ["ALTER TABLE accounts RENAME COLUMN owner TO holder"],
            ["id", "holder", "balance"],
            [(1, "anna", decimal.Decimal("7.75")), (2, "bo", decimal.Decimal("2.50"))],
        ),
        (
            ["ALTER TABLE accounts ALTER COLUMN balance TYPE bigint USING (balance * 100)::bigint"],
            ["id", "owner", "balance"],
            [(1, "anna", 775), (2, "bo", 250)],
        ),
        (
            [
                "ALTER TABLE accounts DROP COLUMN balance",
                "ALTER TABLE accounts ADD COLUMN balance numeric(20,2) DEFAULT 9.5",
                "UPDATE accounts SET balance = 3 WHERE id = 2",
                "ALTER TABLE accounts RENAME COLUMN owner TO holder",
                "ALTER TABLE accounts ALTER COLUMN balance TYPE text",
            ],
            ["id", "holder", "balance"],
            [(1, "anna", "9.50"), (2, "bo", "3.00")],
        ),
    ],
    ids=["rename", "type", "drop-add-rename-type"],
)
def test_a_kill_after_statements_followed(
    source_dsn: str,
    tmp_path: Path,
    statements: list[str],
    columns: list[str],
    expected: list[tuple[Any, ...]],
) -> None:
    """SIGKILL after the connector followed the statements of a transaction that changed
    rows before them, and before that transaction was applied: the next run reads it again,
    with its row changes in the table's shape before the statements (so the mirror, which
    followed them already, is ahead of them), and the mirror ends equal to the source,
    losing no column's values."""
    path = str(tmp_path / "killed.db")
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner, balance) VALUES (1, 'ana', 1.25), (2, 'bo', 2.5)",
    )
    with changestream.open(path) as db:
        add_source(db, "Bank", postgres=source_dsn)
        run_source(db, "Bank", until_caught_up=True)
    _execute(
        source_dsn, "UPDATE accounts SET owner = 'anna', balance = 7.75 WHERE id = 1", *statements
    )
    process = start_connector(path, fault="sigkill-before-source-apply")
    assert process.wait(timeout=60) == -signal.SIGKILL
    _wait_for_slot_release(source_dsn)
    with changestream.open(path) as db:
        run_source(db, "Bank", until_caught_up=True)
        assert _mirror_rows(db, "public_accounts", columns) == _source_rows(
            source_dsn, "accounts", columns
        )
        assert _mirror_rows(db, "public_accounts", columns) == expected
        xids = captured_transactions(db, "Bank")
    assert len(xids) == len(set(xids))


def test_the_event_trigger_follows_any_owner_and_lets_statements_through(
    source_dsn: str,
    db: Any,
    postgres_server: PostgresServer,  # noqa: F811
) -> None:
    """A table owner who is no superuser renames a column: the trigger reports it and the
    source follows. On a server without logical decoding (its wal_level lowered after a
    source was added) the trigger writes nothing, and the ALTER TABLE goes through."""
    postgres_server.sql(
        "DO $$ BEGIN CREATE ROLE owner_role LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; "
        "END $$"
    )
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner) VALUES (1, 'ana')",
        "ALTER TABLE accounts OWNER TO owner_role",
    )
    add_source(db, "Bank", postgres=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    _execute(
        source_dsn.replace("user=postgres", "user=owner_role"),
        "ALTER TABLE accounts RENAME COLUMN owner TO holder",
    )
    run_source(db, "Bank", until_caught_up=True)
    assert _mirror_rows(db, "public_accounts", ["id", "holder"]) == [(1, "ana")]
    server = start_server(wal_level="replica")
    try:
        dsn = server.create_database("plain")
        _execute(dsn, ACCOUNTS)
        conn = _connect(dsn)
        conn.autocommit = True
        try:
            assert pg_columns.ensure_trigger(conn)
        finally:
            conn.close()
        _execute(
            dsn,
            "ALTER TABLE accounts ADD COLUMN note text",
            "INSERT INTO accounts (id, owner, note) VALUES (1, 'ana', 'added')",
        )
        assert _source_rows(dsn, "accounts", ["id", "note"]) == [(1, "added")]
    finally:
        stop_server(server)


def test_a_role_that_may_not_create_the_event_trigger_gets_a_warning(
    source_dsn: str,
    postgres_server: PostgresServer,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    postgres_server.sql(
        "DO $$ BEGIN CREATE ROLE nosuper LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )
    conn = psycopg2.connect(source_dsn.replace("user=postgres", "user=nosuper"))
    conn.autocommit = True
    try:
        with caplog.at_level(logging.WARNING, logger="changestream.sources"):
            assert not pg_columns.ensure_trigger(conn)
    finally:
        conn.close()
    assert "may not create the event trigger changestream_columns" in caplog.text
    superuser = _connect(source_dsn)
    superuser.autocommit = True
    try:
        assert pg_columns.ensure_trigger(superuser)
        assert pg_columns.ensure_trigger(superuser)  # there already
        # An earlier version's trigger (after ALTER TABLE alone, no drop trigger) is replaced.
        with superuser.cursor() as cur:
            cur.execute("DROP EVENT TRIGGER changestream_columns")
            cur.execute("DROP EVENT TRIGGER changestream_dropped")
            cur.execute(
                "CREATE EVENT TRIGGER changestream_columns ON ddl_command_end "
                "WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION changestream_columns()"
            )
        assert pg_columns.ensure_trigger(superuser)
        with superuser.cursor() as cur:
            cur.execute(
                "SELECT evtname, evtevent, evttags FROM pg_event_trigger "
                "WHERE evtname LIKE 'changestream%' ORDER BY evtname"
            )
            assert cur.fetchall() == [
                (
                    "changestream_columns",
                    "ddl_command_end",
                    ["ALTER TABLE", "CREATE TABLE", "CREATE TABLE AS", "SELECT INTO"],
                ),
                ("changestream_dropped", "sql_drop", None),
            ]
    finally:
        superuser.close()


def test_columns_added_with_a_default_read_it_in_the_mirror_rows_that_had_them(
    source_dsn: str, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner) VALUES (1, 'ana'), (2, 'bo')",
    )
    add_source(db, "Bank", postgres=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    # PostgreSQL fills the existing rows without a change per row (a "fast default"); a
    # volatile default rewrites the table instead, which logical decoding does not send.
    _execute(
        source_dsn,
        "ALTER TABLE accounts ADD COLUMN status text DEFAULT 'it''s open'",
        "ALTER TABLE accounts ADD COLUMN score int DEFAULT -7",
        "ALTER TABLE accounts ADD COLUMN since date DEFAULT '2024-01-02'",
        "ALTER TABLE accounts ADD COLUMN rate numeric(6,3) DEFAULT 1.5",
        "ALTER TABLE accounts ADD COLUMN stamp timestamptz DEFAULT '2024-05-01 09:00:00.25+02'",
        "ALTER TABLE accounts ADD COLUMN labels text[] DEFAULT '{a,\"b c\"}'",
        "ALTER TABLE accounts ADD COLUMN extra jsonb DEFAULT '{\"k\": [1, null]}'",
        "ALTER TABLE accounts ADD COLUMN raw bytea DEFAULT '\\x00ff'",
        "ALTER TABLE accounts ADD COLUMN plain text",
        "INSERT INTO accounts (id, owner, status, score) VALUES (3, 'cy', 'closed', 1)",
        "UPDATE accounts SET score = 5 WHERE id = 2",
    )
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "status", "score", "since", "rate", "stamp", "labels", "extra", "raw", "plain"]
    mirrored = _mirror_rows(db, "public_accounts", columns)
    assert mirrored == _source_rows(source_dsn, "accounts", columns)
    assert mirrored[0] == (
        1,
        "it's open",
        -7,
        dt.date(2024, 1, 2),
        decimal.Decimal("1.5"),
        dt.datetime(2024, 5, 1, 7, 0, 0, 250000, tzinfo=dt.UTC),
        ["a", "b c"],
        {"k": [1, None]},
        b"\x00\xff",
        None,
    )
    _execute(
        source_dsn,
        "ALTER TABLE accounts ADD COLUMN drawn double precision DEFAULT random()",
        "INSERT INTO accounts (id, owner, drawn) VALUES (4, 'di', 0.5)",
    )
    with caplog.at_level(logging.WARNING, logger="changestream.sources"):
        run_source(db, "Bank", until_caught_up=True)
    assert _mirror_rows(db, "public_accounts", ["id", "drawn"]) == [
        (1, None),
        (2, None),
        (3, None),
        (4, 0.5),
    ]
    (warning,) = [r.getMessage() for r in caplog.records if "column drawn" in r.getMessage()]
    assert "volatile default" in warning and "read NULL" in warning


def test_an_unchanged_toasted_value_left_out_of_an_update_keeps_its_mirror_value(
    source_dsn: str, db: Any
) -> None:
    big = "".join(random.Random(3).choice("abcdefghij0123456789") for _ in range(20000))
    # Stored out of line, uncompressed: what pgoutput leaves out of an update when unchanged.
    _execute(source_dsn, "ALTER TABLE accounts ALTER COLUMN owner SET STORAGE EXTERNAL")
    add_source(db, "Bank", postgres=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    _execute(source_dsn, f"INSERT INTO accounts (id, owner) VALUES (1, '{big}'), (2, '{big}')")
    _execute(
        source_dsn,
        "UPDATE accounts SET balance = 5 WHERE id = 1",  # owner: TOASTed and unchanged
        "UPDATE accounts SET id = 3 WHERE id = 2",  # the row moves with its TOASTed owner
    )
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "owner", "balance"]
    mirrored = _mirror_rows(db, "public_accounts", columns)
    assert mirrored == _source_rows(source_dsn, "accounts", columns)
    assert [(row[0], len(row[1])) for row in mirrored] == [(1, 20000), (3, 20000)]
