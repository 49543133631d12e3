"""MySQL / MariaDB as a change source, against a real MariaDB server: mirrors equal to their
source tables, each source transaction once and in order in the change stream, columns added
and dropped followed, restarts after SIGKILL that lose and repeat nothing, and clear errors
for bad input."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import changestream
from changestream.cli import main
from changestream.clock import now_us
from changestream.errors import AlreadyExists, FailedPrecondition, NotFound, Unavailable
from changestream.sources import (
    RunSummary,
    add_source,
    describe_source,
    list_sources,
    run_source,
)
from changestream.streams.origins import source_of_tag
from tests.mariadb_support import (  # noqa: F401
    MariaDbServer,
    mariadb_server,
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

pymysql = pytest.importorskip("pymysql")

ACCOUNTS = (
    "CREATE TABLE accounts (id bigint PRIMARY KEY, owner varchar(40) NOT NULL, "
    "balance decimal(20,2), active tinyint(1), opened date, seen timestamp(6) NULL, "
    "doc json, blob_value blob, kind enum('a','b'), flags set('x','y','z'), "
    "ratio double, at_time time(3), big bigint unsigned, bits bit(5), born year)"
)


@pytest.fixture
def source_dsn(mariadb_server: MariaDbServer, request: pytest.FixtureRequest) -> str:  # noqa: F811
    name = "t_" + "".join(c for c in request.node.name.lower() if c.isalnum())[:40]
    dsn = mariadb_server.create_database(name)
    _execute(dsn, ACCOUNTS)
    return dsn


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    with changestream.open(str(tmp_path / "mirror.db")) as database:
        yield database


def _connect(dsn: str) -> Any:
    from changestream.sources.mysql_catalog import connect_args

    args = connect_args(dsn)
    database = dsn.split("?")[0].rsplit("/", 1)[1]
    return pymysql.connect(**args, database=database, init_command="SET time_zone = '+00:00'")


def _execute(dsn: str, *statements: str) -> None:
    """Run ``statements`` in one transaction (a DDL statement commits on its own)."""
    conn = _connect(dsn)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        conn.commit()
    finally:
        conn.close()


def _source_rows(dsn: str, columns: list[str]) -> list[tuple[Any, ...]]:
    conn = _connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(columns)} FROM accounts ORDER BY id")
            return [tuple(row) for row in cur.fetchall()]
    finally:
        conn.close()


def _mirror_rows(db: changestream.EmbeddedDatabase, database: str, columns: list[str]) -> list[Any]:
    result = db.execute_sql(f"SELECT {', '.join(columns)} FROM {database}_accounts ORDER BY id")
    return [tuple(row) for row in result]


def _database(dsn: str) -> str:
    return dsn.split("?")[0].rsplit("/", 1)[1]


def _in_order(transactions: list[str]) -> bool:
    """MariaDB GTIDs (domain-server-sequence) in commit order."""
    sequences = [int(t.rsplit("-", 1)[1]) for t in transactions]
    return sequences == sorted(sequences)


def test_types_are_mirrored_with_their_values_by_the_copy_and_the_binlog(
    source_dsn: str, db: Any
) -> None:
    row = (
        "'ana', 12.50, 1, '2024-02-29', '2024-03-01 08:00:00.123456', '{\"k\": [1, 2]}', "
        "x'00ff', 'b', 'z,x', 1.25, '01:02:03.250', 18446744073709551615, b'10101', 2024"
    )
    _execute(source_dsn, f"INSERT INTO accounts VALUES (1, {row})")
    _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (2, 'bo')")
    add_source(db, "Bank", mysql=source_dsn, tables="accounts")
    assert run_source(db, "Bank", until_caught_up=True).copied_rows == 2
    _execute(source_dsn, f"INSERT INTO accounts VALUES (3, {row})")  # through the binlog
    _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (4, 'bo')")
    assert run_source(db, "Bank", until_caught_up=True).transactions == 2
    columns = ["id", "owner", "balance", "active", "opened", "seen", "doc", "blob_value"]
    columns += ["kind", "flags", "ratio", "at_time", "big", "bits", "born"]
    rows = db.read(f"{_database(source_dsn)}_accounts", [[1], [2], [3], [4]], columns)
    expected = [
        "ana",
        decimal.Decimal("12.50"),
        1,
        dt.date(2024, 2, 29),
        dt.datetime(2024, 3, 1, 8, 0, 0, 123456, tzinfo=dt.UTC),
        {"k": [1, 2]},
        b"\x00\xff",
        "b",
        "x,z",
        1.25,
        "01:02:03.250000",
        decimal.Decimal("18446744073709551615"),
        21,
        2024,
    ]
    assert list(rows[0]) == [1, *expected]
    assert list(rows[2]) == [3, *expected]
    assert list(rows[1]) == [2, "bo", *[None] * 13]
    assert list(rows[3]) == [4, "bo", *[None] * 13]
    (stream,) = db.change_streams()
    assert (stream.name, stream.value_capture_type) == ("Bank", "NEW_ROW_AND_OLD_VALUES")
    assert len(captured_transactions(db, "Bank")) == 2  # the copy is the starting state


def _workload(
    dsn: str,
    seed: int,
    transactions: int,
    alter_at: int | None,
    pause: float = 0.0,
    committed: list[tuple[str, bool]] | None = None,
) -> None:
    """``transactions`` random transactions of 1-4 inserts, updates and deletes; with
    ``committed``, each one's GTID and whether it only deleted rows go there."""
    rng = random.Random(seed)
    conn = _connect(dsn)
    next_id = 1_000_000
    try:
        with conn.cursor() as cur:
            for number in range(transactions):
                deletes_only = True
                if number == alter_at:
                    cur.execute("ALTER TABLE accounts ADD COLUMN note varchar(20)")
                    cur.execute("ALTER TABLE accounts DROP COLUMN ratio")
                cur.execute("SELECT id FROM accounts")
                ids = [i for (i,) in cur.fetchall()]
                for _ in range(rng.randint(1, 4)):
                    choice = rng.random()
                    deletes_only = deletes_only and not (choice < 0.85 or not ids)
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
                            "UPDATE accounts SET balance = COALESCE(balance, 0) + 1, "
                            "active = %s WHERE id = %s",
                            (int(rng.random() < 0.5), target),
                        )
                    else:
                        target = rng.choice(ids)
                        ids.remove(target)
                        cur.execute("DELETE FROM accounts WHERE id = %s", (target,))
                conn.commit()
                if committed is not None:
                    cur.execute("SELECT @@last_gtid")
                    ((gtid,),) = cur.fetchall()
                    committed.append((str(gtid), deletes_only))
                time.sleep(pause)
    finally:
        conn.close()


def _seed(dsn: str, rows: int) -> None:
    values = ", ".join(f"({i}, 'seed')" for i in range(1, rows + 1))
    _execute(dsn, f"INSERT INTO accounts (id, owner) VALUES {values}")


def test_a_random_workload_with_columns_added_and_dropped_leaves_the_mirror_equal(
    source_dsn: str, db: Any
) -> None:
    _seed(source_dsn, 300)
    add_source(db, "Bank", mysql=source_dsn)
    with running_source(db):
        wait_until_streaming(db, "Bank")
        _workload(source_dsn, 7, 120, 60)
    run_source(db, "Bank", until_caught_up=True)
    database = _database(source_dsn)
    (mirror,) = [t for t in db.tables() if t.name == f"{database}_accounts"]
    names = [c.name for c in mirror.columns]
    assert "ratio" not in names and names[-1] == "note"
    columns = ["id", "owner", "balance", "active", "note"]
    assert _mirror_rows(db, database, columns) == _source_rows(source_dsn, columns)
    transactions = captured_transactions(db, "Bank")
    assert len(transactions) == len(set(transactions)) == 120
    assert _in_order(transactions)


def test_columns_added_with_a_default_read_it_in_the_mirror_rows_that_had_them(
    source_dsn: str, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (1, 'ana'), (2, 'bo')")
    add_source(db, "Bank", mysql=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    # Changed while the connector is stopped; the server fills the existing rows without a
    # binlog row event for them.
    _execute(
        source_dsn,
        "ALTER TABLE accounts ADD COLUMN status varchar(20) DEFAULT 'it''s open'",
        "ALTER TABLE accounts ADD COLUMN score int DEFAULT -7",
        "ALTER TABLE accounts ADD COLUMN since date DEFAULT '2024-01-02'",
        "ALTER TABLE accounts ADD COLUMN rate decimal(6,3) DEFAULT 1.5",
        "ALTER TABLE accounts ADD COLUMN grade enum('x','y') DEFAULT 'y'",
        "ALTER TABLE accounts ADD COLUMN plain varchar(5)",
        "ALTER TABLE accounts ADD COLUMN nothing int DEFAULT NULL",
        "INSERT INTO accounts (id, owner, status, score) VALUES (3, 'cy', 'closed', 1)",
        "UPDATE accounts SET score = 5 WHERE id = 2",
    )
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "status", "score", "since", "rate", "grade", "plain", "nothing"]
    mirrored = _mirror_rows(db, _database(source_dsn), columns)
    assert mirrored == _source_rows(source_dsn, columns)
    assert mirrored[0] == (
        1,
        "it's open",
        -7,
        dt.date(2024, 1, 2),
        decimal.Decimal("1.5"),
        "y",
        None,
        None,
    )
    # An expression gives each row its own value: the mirror's old rows read NULL, and a
    # warning says so.
    _execute(
        source_dsn,
        "ALTER TABLE accounts ADD COLUMN drawn double DEFAULT (rand())",
        "INSERT INTO accounts (id, owner, drawn) VALUES (4, 'di', 0.5)",
    )
    with caplog.at_level(logging.WARNING, logger="changestream.sources"):
        run_source(db, "Bank", until_caught_up=True)
    drawn = _mirror_rows(db, _database(source_dsn), ["id", "drawn"])
    assert drawn == [(1, None), (2, None), (3, None), (4, 0.5)]
    (warning,) = [r.getMessage() for r in caplog.records if "column drawn" in r.getMessage()]
    assert "rand()" in warning and "read NULL" in warning


def test_columns_dropped_and_added_again_or_renamed_keep_the_mirror_equal(
    source_dsn: str, db: Any
) -> None:
    """The server changes every row for these without a row event: a column dropped and
    added again reads its new default, a renamed one keeps its values under the new name.
    The mirror follows them from the binlog's statements, whether the connector was stopped
    meanwhile or runs."""
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner, ratio) VALUES (1, 'ana', 1.5), (2, 'bo', 2.5)",
        "INSERT INTO accounts (id, owner) VALUES (3, 'cy')",
    )
    add_source(db, "Bank", mysql=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    database = _database(source_dsn)
    _execute(
        source_dsn,
        "ALTER TABLE accounts DROP COLUMN ratio",
        "ALTER TABLE accounts ADD COLUMN ratio double DEFAULT 9.5",
        "ALTER TABLE accounts RENAME COLUMN owner TO holder",
        "INSERT INTO accounts (id, holder, ratio) VALUES (4, 'di', 4.5)",
        "UPDATE accounts SET holder = 'bob' WHERE id = 2",
    )
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "holder", "ratio", "balance"]
    assert _mirror_rows(db, database, columns) == _source_rows(source_dsn, columns)
    assert _mirror_rows(db, database, ["holder", "ratio"]) == [
        ("ana", 9.5),
        ("bob", 9.5),
        ("cy", 9.5),
        ("di", 4.5),
    ]
    with running_source(db) as runner:
        # Once the connector follows the binlog (a run starting during an ALTER TABLE may
        # find no table in the server's catalog, and stop with that error).
        _execute(source_dsn, "UPDATE accounts SET balance = 1 WHERE id = 1")
        wait_while_running(lambda: _mirror_rows(db, database, ["balance"])[0] == (1,), runner)
        _execute(
            source_dsn,
            "ALTER TABLE accounts CHANGE holder Owner varchar(40) NOT NULL, "
            "DROP COLUMN ratio, ADD COLUMN ratio varchar(9)",
            "INSERT INTO accounts (id, Owner, ratio) VALUES (5, 'ed', 'five')",
        )
        wait_while_running(lambda: bool(db.read(f"{database}_accounts", [[5]], ["id"])), runner)
    columns = ["id", "Owner", "ratio", "balance"]
    assert _mirror_rows(db, database, columns) == _source_rows(source_dsn, columns)
    assert [r[1:3] for r in _mirror_rows(db, database, columns)] == [
        ("ana", None),
        ("bob", None),
        ("cy", None),
        ("di", None),
        ("ed", "five"),
    ]
    (mirror,) = [t for t in db.tables() if t.name == f"{database}_accounts"]
    names = [c.name for c in mirror.columns]
    assert "holder" not in names and "owner" not in names and names.count("ratio") == 1
    # The renames' values reached the change stream (updates tagged with the statement's
    # position), so whatever follows the stream, a replica included, has them too.
    renamed = [
        record
        for partition in changestream.walk_partitions(
            db, "Bank", min(p.start_timestamp for p in db.partition_history("Bank")), now_us()
        )
        for record in changestream.data_changes(partition.records())
        if record.mod_type == "UPDATE" and "Owner" in record.mods[0].new_values
    ]
    assert sorted(mod.keys["id"] for r in renamed for mod in r.mods) == [1, 2, 3, 4]
    assert len({source_of_tag(r.transaction_tag) for r in renamed}) == 1


def test_a_statement_swapping_two_column_names_swaps_them_in_the_mirror(
    source_dsn: str, db: Any
) -> None:
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner, kind, flags) VALUES (1, 'ana', 'a', 'x'), (2, 'bo', "
        "NULL, 'y,z')",
    )
    add_source(db, "Bank", mysql=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    _execute(
        source_dsn,
        "ALTER TABLE accounts RENAME COLUMN owner TO kind, RENAME COLUMN kind TO owner, "
        "CHANGE flags marks set('x','y','z')",
        "UPDATE accounts SET owner = 'b' WHERE id = 2",
    )
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "owner", "kind", "marks"]
    assert _mirror_rows(db, _database(source_dsn), columns) == _source_rows(source_dsn, columns)
    assert _mirror_rows(db, _database(source_dsn), columns) == [
        (1, "a", "ana", "x"),
        (2, "b", "bo", "y,z"),
    ]


def test_columns_given_another_type_take_it_with_the_values_the_server_converted(
    source_dsn: str, db: Any
) -> None:
    _execute(
        source_dsn,
        "INSERT INTO accounts (id, owner, ratio, active, balance) VALUES "
        "(1, 'ana', 1.5, 1, 10.25), (2, 'bo', NULL, 0, 20.75)",
    )
    add_source(db, "Bank", mysql=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    _execute(
        source_dsn,
        "ALTER TABLE accounts MODIFY ratio varchar(9), MODIFY active varchar(5)",
        "ALTER TABLE accounts MODIFY balance decimal(20,1)",  # the same type, values rounded
        "ALTER TABLE accounts MODIFY id int NOT NULL",  # the key keeps its mirrored type
        "ALTER TABLE accounts CHANGE owner holder varchar(40) NOT NULL",  # renamed only
        "INSERT INTO accounts (id, holder, ratio, active) VALUES (3, 'cy', 'five', 'yes')",
    )
    run_source(db, "Bank", until_caught_up=True)
    database = _database(source_dsn)
    columns = ["id", "holder", "ratio", "active", "balance"]
    assert _mirror_rows(db, database, columns) == _source_rows(source_dsn, columns)
    assert _mirror_rows(db, database, columns) == [
        (1, "ana", "1.5", "1", decimal.Decimal("10.3")),
        (2, "bo", None, "0", decimal.Decimal("20.8")),
        (3, "cy", "five", "yes", None),
    ]
    (mirror,) = [t for t in db.tables() if t.name == f"{database}_accounts"]
    types = {c.name: str(c.type) for c in mirror.columns}
    assert (types["ratio"], types["active"], types["holder"]) == (
        "STRING(MAX)",
        "STRING(MAX)",
        "STRING(MAX)",
    )


def test_a_table_truncated_or_dropped_and_created_again_empties_its_mirror_first(
    source_dsn: str, db: Any
) -> None:
    _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (1, 'ana'), (2, 'bo')")
    add_source(db, "Bank", mysql=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    database = _database(source_dsn)
    _execute(
        source_dsn,
        "TRUNCATE TABLE accounts",
        "INSERT INTO accounts (id, owner) VALUES (3, 'cy')",
    )
    run_source(db, "Bank", until_caught_up=True)
    assert _mirror_rows(db, database, ["id", "owner"]) == [(3, "cy")]
    _execute(
        source_dsn,
        "DROP TABLE accounts",
        ACCOUNTS,
        "INSERT INTO accounts (id, owner) VALUES (4, 'di')",
    )
    run_source(db, "Bank", until_caught_up=True)
    assert _mirror_rows(db, database, ["id", "owner"]) == [(4, "di")]
    deleted = [
        mod.keys["id"]
        for record in changestream.data_changes(
            r
            for partition in changestream.walk_partitions(
                db, "Bank", min(p.start_timestamp for p in db.partition_history("Bank")), now_us()
            )
            for r in partition.records()
        )
        if record.mod_type == "DELETE"
        for mod in record.mods
    ]
    assert sorted(deleted) == [1, 2, 3]  # in the change stream, for what follows it


def test_the_table_of_a_captured_name_is_followed_through_renames(source_dsn: str, db: Any) -> None:
    """A source captures a table by its name. A migration that fills a new table and swaps
    it in with RENAME TABLE, or ALTER TABLE ... RENAME (MariaDB's WAIT and NOWAIT, MySQL's
    RENAME AS among the spellings), leaves the mirror equal to the table
    of that name (here 6,000 rows, copied a page at a time, its key not its first column),
    not to the one renamed away, whose later changes are not the mirror's; whether the
    connector was stopped meanwhile or runs. Before, the mirror kept the old table's rows."""
    _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (1, 'ana'), (2, 'bo')")
    add_source(db, "Bank", mysql=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    database = _database(source_dsn)
    _execute(
        source_dsn,
        "CREATE TABLE accounts_new (owner varchar(40) NOT NULL, id bigint PRIMARY KEY, "
        "balance decimal(20,2))",
    )
    _execute(
        source_dsn,
        "INSERT INTO accounts_new (id, owner, balance) "
        "SELECT seq, CONCAT('o', seq), seq FROM seq_1_to_6000",
    )
    _execute(source_dsn, "RENAME TABLE accounts NOWAIT TO accounts_old, accounts_new TO accounts")
    _execute(source_dsn, "UPDATE accounts SET owner = 'first' WHERE id = 1")
    _execute(source_dsn, "UPDATE accounts_old SET owner = 'old'")
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "owner", "balance"]
    mirror = _mirror_rows(db, database, columns)
    assert mirror == _source_rows(source_dsn, columns)
    assert len(mirror) == 6000 and mirror[:2] == [
        (1, "first", decimal.Decimal("1.00")),
        (2, "o2", decimal.Decimal("2.00")),
    ]
    with running_source(db) as runner:
        # Once the run follows the binlog (one starting without the table would stop).
        _execute(source_dsn, "UPDATE accounts SET owner = 'second' WHERE id = 2")
        wait_while_running(lambda: _mirror_rows(db, database, ["owner"])[1] == ("second",), runner)
        _execute(source_dsn, "ALTER TABLE accounts RENAME AS accounts_newer")
        _execute(source_dsn, "ALTER TABLE accounts_old WAIT 5 RENAME TO accounts")
        _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (3, 'cy')")
        _execute(source_dsn, "UPDATE accounts_newer SET owner = 'newer'")
        wait_while_running(
            lambda: (
                _mirror_rows(db, database, ["id", "owner"]) == [(1, "old"), (2, "old"), (3, "cy")]
            ),
            runner,
        )
    columns = ["id", "owner", "active"]
    assert _mirror_rows(db, database, columns) == _source_rows(source_dsn, columns)


def test_runs_starting_while_the_table_is_altered_find_it(source_dsn: str, db: Any) -> None:
    """An ALTER TABLE that copies the table takes it out of the server's catalog for a moment:
    a run starting then looks again instead of stopping with "no table"."""
    _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (1, 'ana')")
    add_source(db, "Bank", mysql=source_dsn)
    run_source(db, "Bank", until_caught_up=True)
    halt = threading.Event()
    altered = [0]

    def alter() -> None:
        conn = _connect(source_dsn)
        try:
            with conn.cursor() as cur:
                while not halt.is_set():
                    cur.execute("ALTER TABLE accounts ADD COLUMN spare int, ALGORITHM=COPY")
                    cur.execute("ALTER TABLE accounts DROP COLUMN spare, ALGORITHM=COPY")
                    altered[0] += 1
        finally:
            conn.close()

    alterer = threading.Thread(target=alter)
    alterer.start()
    try:
        for _ in range(30):
            run_source(db, "Bank", until_caught_up=True)
    finally:
        halt.set()
        alterer.join(timeout=60)
    assert altered[0] > 0
    _execute(source_dsn, "UPDATE accounts SET owner = 'ann' WHERE id = 1")
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "owner"]
    assert _mirror_rows(db, _database(source_dsn), columns) == [(1, "ann")]


def test_a_connector_killed_again_and_again_loses_and_repeats_nothing(
    source_dsn: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "killed.db")
    with changestream.open(path) as db:
        add_source(db, "Bank", mysql=source_dsn)
        run_source(db, "Bank", until_caught_up=True)
    writer = Writer(_workload, source_dsn, 3, 400, None, 0.03)
    writer.start()
    kills = kill_while_writing(path, writer)
    writer.join()
    with changestream.open(path) as db:
        _run_when_released(db)
        columns = ["id", "owner", "balance", "active"]
        assert _mirror_rows(db, _database(source_dsn), columns) == _source_rows(source_dsn, columns)
        transactions = captured_transactions(db, "Bank")
    assert kills >= 20
    assert len(transactions) == len(set(transactions)) == 400
    assert _in_order(transactions)


def _run_when_released(db: changestream.EmbeddedDatabase) -> RunSummary:
    """Catch up, once the server has noticed a killed connector's session is gone."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return run_source(db, "Bank", until_caught_up=True)
        except FailedPrecondition:
            assert time.monotonic() < deadline, "the source stayed locked 30 s after its kill"
            time.sleep(0.2)


def test_the_initial_copy_under_concurrent_writes_leaves_no_gap(source_dsn: str, db: Any) -> None:
    _seed(source_dsn, 20000)
    add_source(db, "Bank", mysql=source_dsn)
    writer = Writer(_workload, source_dsn, 11, 150, None, 0.005)
    writer.start()
    summary = run_source(db, "Bank", until_caught_up=True)
    writer.join()
    run_source(db, "Bank", until_caught_up=True)
    columns = ["id", "owner", "balance", "active"]
    assert _mirror_rows(db, _database(source_dsn), columns) == _source_rows(source_dsn, columns)
    transactions = captured_transactions(db, "Bank")
    assert len(transactions) == len(set(transactions)) <= 150
    assert summary.copied_rows >= 20000


def test_bad_input_is_refused_and_nothing_is_created(
    source_dsn: str,
    db: Any,
    mariadb_server: MariaDbServer,  # noqa: F811
) -> None:
    database = _database(source_dsn)
    _execute(source_dsn, "CREATE TABLE nokey (a int, b text)")
    with pytest.raises(FailedPrecondition, match=r"no primary key.*ADD PRIMARY KEY"):
        add_source(db, "Bank", mysql=source_dsn, tables="accounts,nokey")
    with pytest.raises(NotFound, match=rf"no table {database}\.missing"):
        add_source(db, "Bank", mysql=source_dsn, tables="missing")
    _execute(source_dsn, "CREATE TABLE shapes (id int PRIMARY KEY, p point)")
    with pytest.raises(changestream.InvalidArgument, match=r"'p' of .*shapes has type point"):
        add_source(db, "Bank", mysql=source_dsn, tables="shapes")
    _execute(source_dsn, "CREATE TABLE wide (id int PRIMARY KEY, v decimal(40,10))")
    with pytest.raises(changestream.InvalidArgument, match=r"decimal\(40,10\), wider than"):
        add_source(db, "Bank", mysql=source_dsn, tables="wide")
    with pytest.raises(Unavailable, match="cannot reach the MySQL server"):
        add_source(db, "Bank", mysql="mysql://root@localhost/x?unix_socket=/nonexistent/socket")
    with pytest.raises(changestream.InvalidArgument, match="mysql://"):
        add_source(db, "Bank", mysql="host=somewhere")
    with pytest.raises(changestream.InvalidArgument, match="--postgres DSN or --mysql DSN"):
        add_source(db, "Bank", mysql=source_dsn, postgres="host=x")
    mariadb_server.sql(
        ["CREATE USER plain@localhost", f"GRANT SELECT ON {database}.* TO plain@localhost"]
    )
    plain = mariadb_server.dsn(database, user="plain")
    with pytest.raises(FailedPrecondition, match="lacks the REPLICATION SLAVE privilege"):
        add_source(db, "Bank", mysql=plain)
    assert db.tables() == [] and list_sources(db) == []
    add_source(db, "Bank", mysql=source_dsn, tables="accounts")
    with pytest.raises(AlreadyExists, match="source Bank already exists"):
        add_source(db, "Bank", mysql=source_dsn, tables="accounts")


@pytest.mark.usefixtures("mariadb_server")  # skips, as every test here does, without MariaDB
def test_a_server_without_a_row_based_binlog_is_named(db: Any) -> None:
    statement_based = start_server(("--log-bin=binlog", "--binlog-format=STATEMENT"))
    try:
        with pytest.raises(FailedPrecondition, match=r"binlog_format = STATEMENT.*= ROW"):
            add_source(db, "Bank", mysql=statement_based.create_database("shop"))
    finally:
        stop_server(statement_based)
    no_binlog = start_server(())
    try:
        with pytest.raises(FailedPrecondition, match=r"log_bin = OFF.*log_bin = ON"):
            add_source(db, "Bank", mysql=no_binlog.create_database("shop"))
    finally:
        stop_server(no_binlog)
    assert db.tables() == [] and list_sources(db) == []


def test_a_second_connector_of_a_running_source_is_refused(source_dsn: str, db: Any) -> None:
    add_source(db, "Bank", mysql=source_dsn)
    stop = threading.Event()
    runner = threading.Thread(target=run_source, args=(db, "Bank"), kwargs={"stop": stop})
    runner.start()
    try:
        wait_until_streaming(db, "Bank")
        with pytest.raises(FailedPrecondition, match="in use by another connector"):
            run_source(db, "Bank", until_caught_up=True)
    finally:
        stop.set()
        runner.join(timeout=30)
    assert not runner.is_alive()  # the stop is seen within a heartbeat


def _replicas_with_id(dsn: str, server_id: int) -> list[str]:
    """The hosts the server lists for replicas using ``server_id``."""
    conn = _connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SLAVE HOSTS")
            return [row[1] for row in cur.fetchall() if int(row[0]) == server_id]
    finally:
        conn.close()


def _until(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_server_id_another_replica_of_the_server_uses_is_refused(
    source_dsn: str, db: Any, tmp_path: Path
) -> None:
    add_source(db, "Bank", mysql=source_dsn, server_id=4242)
    with pytest.raises(changestream.InvalidArgument, match="Bank reads the same server with"):
        add_source(db, "Shop", mysql=source_dsn, server_id=4242)
    stop = threading.Event()
    runner = threading.Thread(target=run_source, args=(db, "Bank"), kwargs={"stop": stop})
    runner.start()
    try:
        # The connector reports itself to the server while it reads the binlog.
        _until("Bank listed", lambda: _replicas_with_id(source_dsn, 4242) == ["changestream:Bank"])
        with changestream.open(str(tmp_path / "other.db")) as other:
            add_source(other, "Shop", mysql=source_dsn, server_id=4242)
            with pytest.raises(
                FailedPrecondition,
                match=r"server id 4242 is in use by another replica of the server "
                r"\(changestream:Bank:0\).*--server-id N",
            ):
                run_source(other, "Shop", until_caught_up=True)
            assert describe_source(other, "Shop")["state"] == "new"  # refused before reading
            stop.set()
            runner.join(timeout=30)
            _until("Bank gone", lambda: _replicas_with_id(source_dsn, 4242) == [])
            assert run_source(other, "Shop", until_caught_up=True).lsn > 0
    finally:
        stop.set()
        runner.join(timeout=30)
    assert not runner.is_alive()


def test_the_cli_adds_runs_describes_and_removes_a_source(source_dsn: str, tmp_path: Path) -> None:
    path = str(tmp_path / "cli.db")
    database = _database(source_dsn)
    _execute(source_dsn, "INSERT INTO accounts (id, owner) VALUES (1, 'ana'), (2, 'bo')")
    runner = CliRunner()
    added = runner.invoke(main, ["sources", "add", "Bank", "--db", path, "--mysql", source_dsn])
    assert added.exit_code == 0, added.output
    assert f"{database}_accounts" in added.output
    ran = runner.invoke(main, ["sources", "run", "Bank", "--db", path, "--until-caught-up"])
    assert ran.exit_code == 0, ran.output
    assert "2 rows copied" in ran.output
    listed = runner.invoke(main, ["sources", "list", "--db", path])
    assert listed.output.startswith(f"Bank  mysql  {database}.accounts")
    described = runner.invoke(main, ["sources", "describe", "Bank", "--db", path])
    assert '"log_file":"binlog.000001"' in described.output.replace(" ", "")
    removed = runner.invoke(main, ["sources", "remove", "Bank", "--db", path])
    assert removed.exit_code == 0, removed.output
    both = runner.invoke(
        main, ["sources", "add", "B", "--db", path, "--mysql", source_dsn, "--postgres", "x"]
    )
    assert both.exit_code == 2 and "--postgres DSN or --mysql DSN" in both.output


def test_a_connection_lost_while_running_ends_the_run_with_a_clear_error(
    source_dsn: str,
    db: Any,
    mariadb_server: MariaDbServer,  # noqa: F811
) -> None:
    add_source(db, "Bank", mysql=source_dsn)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            run_source(db, "Bank", stop=threading.Event())
        except BaseException as exc:
            failures.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    wait_until_streaming(db, "Bank")
    conn = mariadb_server.connect()  # ends every other session: the connector's included
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT id FROM information_schema.processlist WHERE id <> CONNECTION_ID() "
                "AND user = 'root'"
            )
            for (pid,) in cur.fetchall():
                try:
                    cur.execute(f"KILL {int(pid)}")
                except pymysql.err.OperationalError as exc:
                    if exc.args[0] != 1094:  # gone already: the connector reconnects its reader
                        raise
    finally:
        conn.close()
    runner.join(timeout=30)
    assert not runner.is_alive()
    (failure,) = failures
    assert isinstance(failure, Unavailable)
    assert "source Bank: the server failed" in str(failure)


def test_a_connector_killed_during_its_copy_resumes_it_and_misses_nothing(
    source_dsn: str, tmp_path: Path
) -> None:
    _seed(source_dsn, 60000)
    database = _database(source_dsn)
    path = str(tmp_path / "copy.db")
    with changestream.open(path) as db:
        add_source(db, "Bank", mysql=source_dsn)
    process = start_connector(path)
    with changestream.open(path) as db:
        deadline = time.monotonic() + 60
        while _mirror_count(db, database) == 0:  # the copy has begun
            assert time.monotonic() < deadline
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        assert describe_source(db, "Bank")["state"] == "copying"
        before = _mirror_count(db, database)
        assert 0 < before < 60000
        # Changes to rows copied and not yet copied, between the first snapshot and the
        # resumed copy's: the binlog replays them over rows that may already hold them.
        _execute(
            source_dsn,
            "UPDATE accounts SET owner = 'after' WHERE id <= 10 OR id > 59990",
            "DELETE FROM accounts WHERE id IN (5, 59000)",
            "INSERT INTO accounts (id, owner) VALUES (-1, 'low'), (70000, 'high')",
            "UPDATE accounts SET id = 80000 WHERE id = 7",
        )
        committed: list[tuple[str, bool]] = []
        writer = Writer(_workload, source_dsn, 13, 60, None, 0.01, committed)
        writer.start()  # and commits during the resumed copy
        summary = _run_when_released(db)
        writer.join()
        run_source(db, "Bank", until_caught_up=True)
        assert summary.copied_rows < 60000 - before + 10  # resumed, not started over
        columns = ["id", "owner", "balance", "active"]
        assert _mirror_rows(db, database, columns) == _source_rows(source_dsn, columns)
        transactions = captured_transactions(db, "Bank")
        assert len(transactions) == len(set(transactions))
        # Every transaction of the writer is captured, but one that only deleted rows the
        # resumed copy had not reached yet, and read after them: the mirror never held those
        # rows, so it changed nothing (it is captured when the copy read the rows first).
        # The one more is the batch of changes before the writer started.
        written = {gtid for gtid, _ in committed}
        changed = {gtid for gtid, deletes_only in committed if not deletes_only}
        assert len(written) == 60 and changed < written
        assert changed <= set(transactions) and len(set(transactions) - written) == 1
        assert _in_order(transactions)


def _mirror_count(db: changestream.EmbeddedDatabase, database: str) -> int:
    ((count,),) = list(db.execute_sql(f"SELECT COUNT(*) FROM {database}_accounts"))
    return int(count)


KINDS = (
    "CREATE TABLE kinds (id int PRIMARY KEY, a tinyint unsigned, b smallint, c mediumint, "
    "d int unsigned, e float, f char(3), g varchar(300), h text, i mediumblob, "
    "j datetime(3), k timestamp NULL, l time, m time(6), n decimal(38,9), o decimal(5,0), "
    "p set('a','b'), q varbinary(8), r year, s mediumint unsigned, t decimal(4,3))"
)
KIND_ROWS = [
    "255, -32768, -8388608, 4294967295, 1.5, 'ab', REPEAT('x', 300), 'text é', x'0001ff', "
    "'2024-12-31 23:59:59.999', '2038-01-19 03:14:07', '838:59:59', '-12:34:56.000001', "
    "-12345678901234567890.012345678, -99999, '', x'00', 1901, 16777215, -0.001",
    "0, 32767, 8388607, 0, -2.25, '', '', '', '', '1000-01-01 00:00:00.001', "
    "'1970-01-01 00:00:01', '-838:59:59', '00:00:00.5', 0.000000001, 0, 'a,b', '', 2155, 0, "
    "9.999",
]


def test_every_kind_of_value_reads_the_same_from_the_binlog_as_from_the_copy(
    mariadb_server: MariaDbServer,  # noqa: F811
    db: Any,
) -> None:
    dsn = mariadb_server.create_database("kinds")
    values = [f"({number}, {row})" for number, row in enumerate(KIND_ROWS, start=1)]
    _execute(
        dsn, KINDS, f"INSERT INTO kinds VALUES {', '.join(values)}, (3, {', '.join(['NULL'] * 20)})"
    )
    add_source(db, "Kinds", mysql=dsn)
    run_source(db, "Kinds", until_caught_up=True)  # rows 1-3 through the copy
    again = [f"({number + 10}, {row})" for number, row in enumerate(KIND_ROWS, start=1)]
    _execute(dsn, f"INSERT INTO kinds VALUES {', '.join(again)}, (13, {', '.join(['NULL'] * 20)})")
    _execute(
        dsn, "UPDATE kinds SET b = b + 1 WHERE id IN (1, 11)", "DELETE FROM kinds WHERE id = 2"
    )
    assert run_source(db, "Kinds", until_caught_up=True).transactions == 2
    rows = {row[0]: tuple(row[1:]) for row in db.execute_sql("SELECT * FROM kinds_kinds")}
    assert sorted(rows) == [1, 3, 11, 12, 13]
    assert rows[11] == rows[1] and rows[13] == rows[3]
    assert rows[3] == tuple([None] * 20)
    first = rows[1]
    assert first[11] == "838:59:59" and first[12] == "-12:34:56.000001"
    assert first[13] == decimal.Decimal("-12345678901234567890.012345678")
    assert first[1] == -32767 and first[15] == "" and first[18] == 16777215
    assert first[19] == decimal.Decimal("-0.001")
    assert rows[12][12] == "00:00:00.500000" and rows[12][14] == 0


def test_random_decimals_and_times_read_the_same_from_the_binlog_as_from_the_copy(
    mariadb_server: MariaDbServer,  # noqa: F811
    db: Any,
) -> None:
    kinds = {"a": (5, 0), "b": (12, 2), "c": (38, 9), "d": (9, 9), "e": (19, 1), "f": (20, 3)}
    columns = ", ".join(f"{name} decimal({p},{s})" for name, (p, s) in kinds.items())
    times = ", ".join(f"t{fsp} time({fsp})" for fsp in range(7))
    dsn = mariadb_server.create_database("numbers")
    _execute(dsn, f"CREATE TABLE numbers (id int PRIMARY KEY, {columns}, {times})")
    rng = random.Random(11)

    def row(number: int) -> str:
        values = []
        for precision, scale in kinds.values():
            digits = "".join(rng.choice("0123456789") for _ in range(precision))
            integral, fraction = digits[: precision - scale] or "0", digits[precision - scale :]
            text = integral + ("." + fraction if fraction else "")
            values.append(("-" if rng.random() < 0.5 else "") + text)
        for fsp in range(7):
            fraction = "".join(rng.choice("0123456789") for _ in range(fsp))
            moment = f"{rng.randint(0, 838)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
            sign = "-" if rng.random() < 0.5 else ""
            values.append(f"'{sign}{moment}{'.' + fraction if fraction else ''}'")
        return f"({number}, {', '.join(values)})"

    _execute(dsn, f"INSERT INTO numbers VALUES {', '.join(row(n) for n in range(100))}")
    add_source(db, "Numbers", mysql=dsn)
    run_source(db, "Numbers", until_caught_up=True)
    copied = list(db.execute_sql("SELECT * FROM numbers_numbers ORDER BY id"))
    _execute(dsn, "DELETE FROM numbers")
    rng = random.Random(11)
    _execute(dsn, f"INSERT INTO numbers VALUES {', '.join(row(n) for n in range(100))}")
    run_source(db, "Numbers", until_caught_up=True)
    streamed = list(db.execute_sql("SELECT * FROM numbers_numbers ORDER BY id"))
    assert len(copied) == 100 and [list(r) for r in streamed] == [list(r) for r in copied]
