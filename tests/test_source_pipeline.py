"""From PostgreSQL and MariaDB to Datastream-style events and a Delta replica: a real server
feeds a source, and the Spark pipeline lands its changes with the source's own metadata."""

from __future__ import annotations

import decimal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
psycopg2 = pytest.importorskip("psycopg2")

import changestream  # noqa: E402
from changestream.datastream import StreamCatalog, StreamDefinition  # noqa: E402
from changestream.datastream.files import event_files, read_events  # noqa: E402
from changestream.sources import add_source, run_source  # noqa: E402
from changestream.spark.pipeline import PipelineOptions, SparkPipeline  # noqa: E402
from changestream.spark.replica import DeltaReplica  # noqa: E402
from tests.mariadb_support import MariaDbServer, mariadb_server  # noqa: E402, F401
from tests.postgres_support import PostgresServer, postgres_server  # noqa: E402, F401

pytestmark = pytest.mark.timeout(600)

POSTGRES_METADATA = ["schema", "table", "is_deleted", "change_type", "tx_id", "lsn", "primary_keys"]
MYSQL_METADATA = [
    "database",
    "table",
    "is_deleted",
    "change_type",
    "log_file",
    "log_position",
    "primary_keys",
]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from changestream.spark import local_session

    session = local_session()
    yield session
    session.stop()


def _execute(dsn: str, *statements: str) -> list[Any]:
    """Run ``statements`` in one transaction; the rows of the last, if it returns any."""
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            rows = cur.fetchall() if cur.description else []
        conn.commit()
    finally:
        conn.close()
    return rows


@pytest.mark.parametrize("file_format", ["json", "avro"])
def test_postgres_changes_land_as_events_with_postgres_metadata_and_a_replica(
    spark: Any,
    tmp_path: Path,
    postgres_server: PostgresServer,  # noqa: F811
    file_format: str,
) -> None:
    dsn = postgres_server.create_database(f"pipeline_{file_format}")
    _execute(
        dsn,
        "CREATE TABLE accounts (id bigint PRIMARY KEY, owner text, balance numeric(12,2))",
        "INSERT INTO accounts VALUES (1, 'ana', 10.50), (2, 'bo', 3.00)",
    )
    path = str(tmp_path / "bank.db")
    with changestream.open(path) as db:
        add_source(db, "Bank", postgres=dsn)
    written: list[Any] = []

    def write() -> None:
        written.extend(
            _execute(
                dsn,
                "INSERT INTO accounts VALUES (3, 'cy', 7.25)",
                "UPDATE accounts SET balance = 11.00 WHERE id = 1",
                "DELETE FROM accounts WHERE id = 2",
                "SELECT txid_current()",
            )
        )

    try:
        events = _land(spark, tmp_path, path, "Bank", file_format, write)
    finally:
        postgres_server.drop_slots()
    ((xid,),) = written
    backfill, cdc = _split(events, "postgresql-backfill", "postgresql-cdc-wal")
    for event in events:
        metadata = event["source_metadata"]
        assert list(metadata) == POSTGRES_METADATA
        assert (metadata["schema"], metadata["table"]) == ("public", "accounts")
        assert metadata["primary_keys"] == ["id"]
    assert {e["source_metadata"]["tx_id"] for e in cdc} == {str(xid)}
    (lsn,) = {e["source_metadata"]["lsn"] for e in cdc}
    assert lsn is not None and "/" in lsn
    assert all(e["source_metadata"]["tx_id"] is None for e in backfill)
    assert cdc[2]["source_metadata"]["is_deleted"] is True

    with changestream.open(path) as db:
        schema = next(t for t in db.tables() if t.name == "public_accounts")
    replica = DeltaReplica(tmp_path / "replica", "bank", schema).read_rows()
    source = _execute(dsn, "SELECT id, owner, balance FROM accounts ORDER BY id")
    assert sorted(replica) == [tuple(row) for row in source]


def _split(
    events: list[dict[str, Any]], backfill_method: str, cdc_method: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The backfill events (the mirror as the stream began: rows 1 and 2) and the CDC events
    in order (the insert of 3, the update of 1 and the delete of 2), checked."""
    backfill = [e for e in events if e["read_method"] == backfill_method]
    cdc = sorted(
        (e for e in events if e["read_method"] == cdc_method), key=lambda e: e["sort_keys"]
    )
    assert len(backfill) + len(cdc) == len(events)
    assert {e["payload"]["id"] for e in backfill} == {1, 2}
    assert [(e["source_metadata"]["change_type"], e["payload"]["id"]) for e in cdc] == [
        ("INSERT", 3),
        ("UPDATE", 1),
        ("DELETE", 2),
    ]
    return backfill, cdc


def _land(
    spark: Any, tmp_path: Path, path: str, name: str, file_format: str, write: Any
) -> list[dict[str, Any]]:
    """Run the pipeline of source ``name`` over its copy, then ``write()`` to the source,
    capture it and run the pipeline again; every event written."""
    with changestream.open(path) as db:
        run_source(db, name, until_caught_up=True)
        definition = StreamDefinition(
            name="landing",
            database=path,
            change_stream=name,
            destination=str(tmp_path / "events"),
            replica=str(tmp_path / "replica"),
            format=file_format,
        )
        catalog = StreamCatalog(db)
        catalog.create(definition)
        catalog.transition("landing", "start")
    options = PipelineOptions(until_caught_up=True, trigger_seconds=0.5)
    SparkPipeline("landing", path, options, spark=spark).run()
    write()
    with changestream.open(path) as db:
        run_source(db, name, until_caught_up=True)
    SparkPipeline("landing", path, options, spark=spark).run()
    return [e for f in event_files(tmp_path / "events") for e in read_events(f)]


@pytest.mark.parametrize("file_format", ["json", "avro"])
def test_mysql_changes_land_as_events_with_mysql_metadata_and_a_replica(
    spark: Any,
    tmp_path: Path,
    mariadb_server: MariaDbServer,  # noqa: F811
    file_format: str,
) -> None:
    database = f"pipeline_{file_format}"
    dsn = mariadb_server.create_database(database)
    mariadb_server.sql(
        [
            "CREATE TABLE accounts (id bigint PRIMARY KEY, owner text, balance decimal(12,2))",
            "INSERT INTO accounts VALUES (1, 'ana', 10.50), (2, 'bo', 3.00)",
        ],
        database,
    )
    path = str(tmp_path / "bank.db")
    with changestream.open(path) as db:
        add_source(db, "Bank", mysql=dsn)

    def write() -> None:
        conn = mariadb_server.connect(database)
        try:
            conn.begin()
            with conn.cursor() as cur:
                cur.execute("INSERT INTO accounts VALUES (3, 'cy', 7.25)")
                cur.execute("UPDATE accounts SET balance = 11.00 WHERE id = 1")
                cur.execute("DELETE FROM accounts WHERE id = 2")
            conn.commit()
        finally:
            conn.close()

    events = _land(spark, tmp_path, path, "Bank", file_format, write)
    backfill, cdc = _split(events, "mysql-backfill", "mysql-cdc-binlog")
    for event in events:
        metadata = event["source_metadata"]
        assert list(metadata) == MYSQL_METADATA
        assert (metadata["database"], metadata["table"]) == (database, "accounts")
        assert metadata["primary_keys"] == ["id"]
    ((log_file, log_position),) = {
        (e["source_metadata"]["log_file"], e["source_metadata"]["log_position"]) for e in cdc
    }
    assert log_file.startswith("binlog.") and log_position > 4
    assert all(e["source_metadata"]["log_file"] is None for e in backfill)
    assert cdc[2]["source_metadata"]["is_deleted"] is True

    with changestream.open(path) as db:
        schema = next(t for t in db.tables() if t.name == f"{database}_accounts")
    replica = DeltaReplica(tmp_path / "replica", "bank", schema).read_rows()
    assert sorted(replica) == [
        (1, "ana", decimal.Decimal("11.00")),
        (3, "cy", decimal.Decimal("7.25")),
    ]
