"""The embedded database: DDL, mutations, reads, SQL, splits, retention and lifecycle."""

from __future__ import annotations

import datetime as dt
import inspect
import threading
from pathlib import Path

import pytest

import changestream
from changestream import (
    COMMIT_TIMESTAMP,
    AlreadyExists,
    DataChangeRecord,
    DDLError,
    FailedPrecondition,
    InvalidArgument,
    KeyRange,
    NotFound,
)
from changestream.clock import parse_ts
from changestream.embedded.database import store_of
from changestream.remote import RemoteDatabase
from tests.conftest import ACCOUNT_BALANCE, FixedClock

SINGERS = (
    "CREATE TABLE Singers (SingerId INT64 NOT NULL, Name STRING(20), Born DATE) "
    "PRIMARY KEY (SingerId)"
)
PAIRS = (
    "CREATE TABLE Pairs (A STRING(MAX) NOT NULL, B INT64 NOT NULL, V FLOAT64) PRIMARY KEY (A, B)"
)


def test_open_memory_and_file_and_reopen(tmp_path: Path) -> None:
    with changestream.open(":memory:") as memory:
        memory.execute_ddl(SINGERS)
        with memory.transaction() as tx:
            tx.insert("Singers", ["SingerId", "Name"], [[1, "a"]])
        assert memory.read("Singers", columns=["Name"]) == [("a",)]
    path = str(tmp_path / "file.db")
    with changestream.open(path, durability="full") as db:
        db.execute_ddl([SINGERS, "CREATE CHANGE STREAM S FOR ALL"])
        with db.transaction() as tx:
            tx.insert("Singers", ["SingerId", "Name"], [[1, "a"]])
    with changestream.open(path) as again:
        assert again.read("Singers", columns=["SingerId", "Name"]) == [(1, "a")]
        assert [p.token for p in again.partitions("S")]
    with pytest.raises(InvalidArgument, match="durability must be one of normal, full"):
        changestream.open(path, durability="fast")


def test_closed_database_refuses_work(tmp_path: Path) -> None:
    db = changestream.open(str(tmp_path / "c.db"))
    db.close()
    with pytest.raises(changestream.DatabaseClosed):
        db.execute_ddl(SINGERS)


def test_ddl_errors_name_the_problem(db: changestream.EmbeddedDatabase) -> None:
    db.execute_ddl(SINGERS)
    with pytest.raises(AlreadyExists, match="table 'Singers' already exists"):
        db.execute_ddl(SINGERS)
    with pytest.raises(NotFound, match="names table 'Nope'"):
        db.execute_ddl("CREATE CHANGE STREAM S FOR Nope")
    with pytest.raises(NotFound, match="column 'Age'"):
        db.execute_ddl("CREATE CHANGE STREAM S FOR Singers(Age)")
    with pytest.raises(DDLError, match=r"line 1, column \d+"):
        db.execute_ddl("CREATE TABLE Broken (a INT64 NOT NULL) PRIMARY KEY (b)")
    db.execute_ddl("CREATE CHANGE STREAM S FOR Singers")
    with pytest.raises(FailedPrecondition, match="tracked by change stream"):
        db.execute_ddl("DROP TABLE Singers")
    with pytest.raises(AlreadyExists, match="change stream 'S' already exists"):
        db.execute_ddl("CREATE CHANGE STREAM S FOR ALL")
    # A failing batch applies nothing.
    with pytest.raises(NotFound):
        db.execute_ddl([PAIRS, "CREATE CHANGE STREAM T FOR Missing"])
    assert "Pairs" not in store_of(db).catalog().tables
    db.execute_ddl(["DROP CHANGE STREAM S", "DROP TABLE Singers"])
    assert store_of(db).catalog().tables == {} and store_of(db).catalog().streams == {}


def test_alter_change_stream_options(db: changestream.EmbeddedDatabase) -> None:
    db.execute_ddl([SINGERS, "CREATE CHANGE STREAM S FOR Singers"])
    db.execute_ddl(
        "ALTER CHANGE STREAM S SET OPTIONS "
        "(retention_period = '36h', value_capture_type = 'NEW_ROW')"
    )
    stream = store_of(db).catalog().stream("S").definition
    assert (stream.retention_seconds, stream.value_capture_type) == (36 * 3600, "NEW_ROW")


def test_mutation_errors(db: changestream.EmbeddedDatabase) -> None:
    db.execute_ddl([ACCOUNT_BALANCE, SINGERS])
    with db.transaction() as tx:
        tx.insert("Singers", ["SingerId"], [[1]])
    missing = r"row \(2,\) does not exist in table 'Singers'"
    with pytest.raises(NotFound, match=missing), db.transaction() as tx:
        tx.update("Singers", ["SingerId", "Name"], [[2, "x"]])
    with pytest.raises(AlreadyExists, match=r"row \(1,\) already exists"), db.transaction() as tx:
        tx.insert("Singers", ["SingerId"], [[1]])
    with db.transaction() as tx:
        with pytest.raises(InvalidArgument, match="has no column 'Age'"):
            tx.insert("Singers", ["SingerId", "Age"], [[3, 4]])
        with pytest.raises(InvalidArgument, match="must include its key column"):
            tx.update("Singers", ["Name"], [["x"]])
        with pytest.raises(InvalidArgument, match="longer than 20 characters"):
            tx.insert("Singers", ["SingerId", "Name"], [[3, "x" * 21]])
        with pytest.raises(InvalidArgument, match="cannot hold str"):
            tx.insert("Singers", ["SingerId"], [["three"]])
        with pytest.raises(InvalidArgument, match="1 value"):
            tx.insert("Singers", ["SingerId", "Name"], [[3]])
        with pytest.raises(InvalidArgument, match="allow_commit_timestamp"):
            tx.insert("Singers", ["SingerId", "Born"], [[3, COMMIT_TIMESTAMP]])
        with pytest.raises(NotFound, match="table 'Nope' does not exist"):
            tx.insert("Nope", ["x"], [[1]])
    with pytest.raises(InvalidArgument, match="NOT NULL"), db.transaction() as tx:
        tx.insert("AccountBalance", ["AccountId", "Balance"], [["Id1", 5]])
    tx = db.transaction()
    tx.commit()
    with pytest.raises(FailedPrecondition, match="already committed"):
        tx.insert("Singers", ["SingerId"], [[9]])
    assert db.read("Singers", columns=["SingerId"]) == [(1,)]


def test_commit_timestamp_column_and_increasing_timestamps(
    db: changestream.EmbeddedDatabase,
) -> None:
    db.execute_ddl(ACCOUNT_BALANCE)
    stamps = []
    for i in range(5):
        with db.transaction() as tx:
            tx.insert_or_update(
                "AccountBalance",
                ["AccountId", "LastUpdate", "Balance"],
                [["A", COMMIT_TIMESTAMP, i]],
            )
        assert isinstance(tx.commit_timestamp, dt.datetime)
        assert db.read("AccountBalance", [("A",)], ["LastUpdate"]) == [(tx.commit_timestamp,)]
        stamps.append(tx.commit_timestamp)
    assert stamps == sorted(set(stamps))


def test_reads_by_keys_and_key_ranges(db: changestream.EmbeddedDatabase) -> None:
    db.execute_ddl(PAIRS)
    rows = [[a, b, float(b)] for a in ("x", "y") for b in range(3)]
    with db.transaction() as tx:
        tx.insert("Pairs", ["A", "B", "V"], rows)
    assert db.read("Pairs", [("y", 1), ("x", 2), ("z", 0)]) == [("y", 1, 1.0), ("x", 2, 2.0)]
    assert db.read("Pairs", KeyRange(start_closed=("x", 1), end_open=("y",))) == [
        ("x", 1, 1.0),
        ("x", 2, 2.0),
    ]
    assert db.read("Pairs", KeyRange(start_open=("x",), end_closed=("y", 1)), ["B"]) == [
        (0,),
        (1,),
    ]
    assert len(db.read("Pairs", KeyRange(start_closed=(), end_closed=()))) == 6
    with pytest.raises(InvalidArgument, match="exactly one of start_closed or start_open"):
        KeyRange(end_closed=())
    with pytest.raises(InvalidArgument, match="has key"):
        db.read("Pairs", [("x",)])


def test_execute_sql_selects_with_typed_values(db: changestream.EmbeddedDatabase) -> None:
    db.execute_ddl(SINGERS)
    with db.transaction() as tx:
        tx.insert(
            "Singers",
            ["SingerId", "Name", "Born"],
            [[1, "Ann", dt.date(1990, 5, 1)], [2, "Bo", None]],
        )
    result = db.execute_sql("SELECT SingerId, Born FROM Singers WHERE Name = @n", {"n": "Ann"})
    assert result.fields == ["SingerId", "Born"]
    assert list(result) == [[1, dt.date(1990, 5, 1)]]
    assert list(db.execute_sql("SELECT count(*) FROM Singers")) == [[2]]
    with pytest.raises(InvalidArgument, match="_cs_"):
        db.execute_sql("SELECT * FROM _cs_log")
    with pytest.raises(InvalidArgument, match="execute_update"):
        db.execute_sql("DELETE FROM Singers WHERE true")


def test_split_and_merge_validation(db: changestream.EmbeddedDatabase) -> None:
    db.execute_ddl([PAIRS, "CREATE CHANGE STREAM S FOR ALL"])
    first = db.split_at("Pairs", ("m",))
    with pytest.raises(FailedPrecondition, match="already a split boundary"):
        db.split_at("Pairs", ("m",))
    with pytest.raises(FailedPrecondition, match="not a split boundary"):
        db.merge_at("Pairs", ("n",))
    second = db.split_at("Pairs", ("m", 5))
    assert second > first
    assert len(db.partitions("S")) == 3
    db.merge_at("Pairs", ("m",))
    parts = db.partitions("S")
    assert len(parts) == 2
    assert len(parts[0].parent_tokens) == 2
    history = db.partition_history("S")
    assert len(history) == 6
    assert [p.token for p in db.partitions("S", at=first)] == [
        p.token for p in history if p.start_timestamp == first
    ]


def test_expired_records_are_removed(tmp_path: Path) -> None:
    clock = FixedClock("2024-01-01T00:00:00Z")
    with changestream.open(str(tmp_path / "gc.db"), clock=clock) as db:
        db.execute_ddl(
            [SINGERS, "CREATE CHANGE STREAM S FOR ALL OPTIONS (retention_period = '1h')"]
        )
        with db.transaction() as tx:
            tx.insert("Singers", ["SingerId"], [[1]])
        clock.set("2024-01-01T02:00:00Z")
        with db.transaction() as tx:
            tx.insert("Singers", ["SingerId"], [[2]])
        kept = store_of(db).connection().execute("SELECT commit_ts FROM _cs_log").fetchall()
        assert kept == [(parse_ts("2024-01-01T02:00:00Z"),)]
        token = db.partitions("S")[0].token
        records = list(
            db.read_change_stream("S", "2024-01-01T01:30:00Z", "2024-01-01T02:00:00Z", token, 1000)
        )
        assert [r.mods[0].keys for r in records if isinstance(r, DataChangeRecord)] == [
            {"SingerId": 2}
        ]


def test_threads_share_one_database(db: changestream.EmbeddedDatabase) -> None:
    db.execute_ddl([SINGERS, "CREATE CHANGE STREAM S FOR ALL"])

    def work(base: int) -> None:
        for i in range(20):
            with db.transaction() as tx:
                tx.insert("Singers", ["SingerId"], [[base + i]])

    threads = [threading.Thread(target=work, args=(n * 100,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(db.read("Singers")) == 60


@pytest.mark.parametrize("implementation", [changestream.EmbeddedDatabase, RemoteDatabase])
def test_databases_implement_every_interface_method_as_declared(implementation: type) -> None:
    """isinstance() on a Protocol only sees that the names exist; here every parameter the
    interface declares must be accepted with the same kind and default."""
    interface = changestream.Database
    methods = {
        n
        for role in interface.__mro__
        if role.__module__.startswith("changestream.")
        for n, v in vars(role).items()
        if inspect.isfunction(v) and n[0] != "_"
    }
    assert {"transaction", "read_change_stream", "partitions", "watch", "leases"} <= methods
    for name in methods:
        declared = inspect.signature(getattr(interface, name)).parameters
        actual = inspect.signature(getattr(implementation, name)).parameters
        for parameter in declared.values():
            assert parameter.name in actual, (name, parameter.name)
            found = actual[parameter.name]
            assert (found.kind, found.default) == (parameter.kind, parameter.default), name


def test_query_errors_are_changestream_errors(db: changestream.EmbeddedDatabase) -> None:
    db.execute_ddl(SINGERS)
    with pytest.raises(NotFound, match=r"no such table: Nope .*tables: Singers"):
        db.execute_sql("SELECT * FROM Nope")
    with pytest.raises(InvalidArgument, match="no such column"):
        db.execute_sql("SELECT nope FROM Singers")
    # Quoted, it is still a name: SQLite reads a double-quoted name matching no column as a
    # string, so names go to it in backticks.
    with pytest.raises(InvalidArgument, match="no such column"):
        db.execute_sql("SELECT `nope` FROM Singers")
    with pytest.raises(InvalidArgument, match="syntax error"):
        db.execute_sql("SELECT 1 +")
    # An SQLite keyword GoogleSQL allows as a name works bare or quoted.
    assert list(db.execute_sql("SELECT 1 AS nothing")) == [[1]]
    assert list(db.execute_sql("SELECT 1 AS `nothing`")) == [[1]]
