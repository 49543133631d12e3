"""From PostgreSQL to Datastream-style events and a Delta replica: a real PostgreSQL 15 feeds a
source, and the Spark pipeline lands its changes with PostgreSQL's own source metadata."""

from __future__ import annotations

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
from tests.postgres_support import PostgresServer, postgres_server  # noqa: E402, F401

pytestmark = pytest.mark.timeout(600)

POSTGRES_METADATA = ["schema", "table", "is_deleted", "change_type", "tx_id", "lsn", "primary_keys"]


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
        run_source(db, "Bank", until_caught_up=True)
        definition = StreamDefinition(
            name="bank",
            database=path,
            change_stream="Bank",
            destination=str(tmp_path / "events"),
            replica=str(tmp_path / "replica"),
            format=file_format,
        )
        catalog = StreamCatalog(db)
        catalog.create(definition)
        catalog.transition("bank", "start")
    options = PipelineOptions(until_caught_up=True, trigger_seconds=0.5)
    SparkPipeline("bank", path, options, spark=spark).run()  # the backfill of the copy
    ((xid,),) = _execute(
        dsn,
        "INSERT INTO accounts VALUES (3, 'cy', 7.25)",
        "UPDATE accounts SET balance = 11.00 WHERE id = 1",
        "DELETE FROM accounts WHERE id = 2",
        "SELECT txid_current()",
    )
    with changestream.open(path) as db:
        run_source(db, "Bank", until_caught_up=True)
    SparkPipeline("bank", path, options, spark=spark).run()

    events = [e for f in event_files(tmp_path / "events") for e in read_events(f)]
    backfill = [e for e in events if e["read_method"] == "postgresql-backfill"]
    cdc = sorted(
        (e for e in events if e["read_method"] == "postgresql-cdc-wal"),
        key=lambda e: e["sort_keys"],
    )
    assert len(backfill) + len(cdc) == len(events)
    assert {e["payload"]["id"] for e in backfill} == {1, 2}  # the mirror as the stream began
    assert [(e["source_metadata"]["change_type"], e["payload"]["id"]) for e in cdc] == [
        ("INSERT", 3),
        ("UPDATE", 1),
        ("DELETE", 2),
    ]
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
