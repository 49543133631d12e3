"""Stream definitions, lifecycle, progress, errors and discover — embedded and remote."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import changestream
from changestream.clock import now_us, parse_ts
from changestream.datastream import (
    StreamCatalog,
    StreamDefinition,
    StreamState,
    allowed_verbs,
    discover,
    schema_name,
)
from changestream.datastream.states import TRANSITIONS
from changestream.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from changestream.spark.pipeline import PipelineStatus
from changestream.spark.planning import resolve_position
from tests.conftest import OpenDb

SCHEMA = [
    "CREATE TABLE Orders (Id INT64 NOT NULL, Item STRING(MAX), Qty INT64 NOT NULL)"
    " PRIMARY KEY (Id)",
    "CREATE TABLE Users (Name STRING(100) NOT NULL, Region STRING(10) NOT NULL,"
    " Tags ARRAY<STRING(MAX)>, Born DATE) PRIMARY KEY (Region, Name)",
    "CREATE TABLE Audit (K INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (K)",
    "CREATE CHANGE STREAM Everything FOR ALL"
    " OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
    "CREATE CHANGE STREAM WholeRows FOR Orders, Users OPTIONS (value_capture_type = 'NEW_ROW')",
    "CREATE CHANGE STREAM Diffs FOR Orders OPTIONS (value_capture_type = 'NEW_VALUES')",
    "CREATE CHANGE STREAM Defaults FOR Orders",
    "CREATE CHANGE STREAM Partial FOR Orders(Qty), Users OPTIONS (value_capture_type = 'NEW_ROW')",
]
S = StreamState


def definition(path: str, **changes: object) -> StreamDefinition:
    fields: dict[str, object] = {
        "name": "orders",
        "database": path,
        "change_stream": "Everything",
        "destination": "/tmp/never-written",
    }
    fields.update(changes)
    return StreamDefinition(**fields)  # type: ignore[arg-type]


@pytest.fixture
def source(tmp_path: Path, open_db: OpenDb) -> tuple[changestream.Database, str]:
    path = str(tmp_path / "shop.db")
    db = open_db(path)
    db.execute_ddl(SCHEMA)
    return db, path


def test_create_get_list_delete(source: tuple[changestream.Database, str]) -> None:
    db, path = source
    catalog = StreamCatalog(db)
    info = catalog.create(definition(path, exclude=["Audit"], format="avro", replica="/r"))
    assert info.state is S.NOT_STARTED
    assert info.definition.created_at > 0
    assert info.definition.exclude == ("Audit",)
    assert catalog.get("orders") == info
    with pytest.raises(AlreadyExists, match="stream 'orders' already exists"):
        catalog.create(definition(path))
    catalog.create(definition(path, name="all-rows", change_stream="WholeRows", backfill="none"))
    assert [i.name for i in catalog.list()] == ["all-rows", "orders"]
    assert [t.name for t in info.definition.tables(db)] == ["Orders", "Users"]
    assert info.definition.object_name("Orders") == "shop_Orders"
    catalog.delete("orders")
    with pytest.raises(NotFound, match=r"stream 'orders' does not exist \(streams: all-rows\)"):
        catalog.get("orders")
    # The name is free again, with nothing left over.
    catalog.create(definition(path))
    assert catalog.progress("orders").rows_processed == 0
    assert catalog.errors("orders") == []


def test_every_allowed_transition_and_a_sample_of_refused_ones(
    source: tuple[changestream.Database, str],
) -> None:
    db, path = source
    catalog = StreamCatalog(db)
    paths = [
        ["start", "started", "pause", "resume", "started", "drain", "drained", "start"],
        ["start", "pause", "start", "started", "fail", "retry", "started", "fail", "resume"],
        ["start", "started", "fail", "pause", "resume", "fail", "fail_permanently"],
        ["start", "fail_permanently"],
        ["start", "started", "fail_permanently"],
        ["start", "started", "drain", "fail"],
        ["start", "started", "drain", "fail_permanently"],
    ]
    seen: set[tuple[StreamState, str]] = set()
    for index, verbs in enumerate(paths):
        name = f"s{index}"
        catalog.create(definition(path, name=name))
        state = S.NOT_STARTED
        for verb in verbs:
            sources, target = TRANSITIONS[verb]
            assert state in sources
            seen.add((state, verb))
            state = catalog.transition(name, verb)
            assert state is target
            assert catalog.get(name).state is target
    every = {(s, verb) for verb, (sources, _) in TRANSITIONS.items() for s in sources}
    assert seen == every
    # Refused: the message names the verb, the state and what is allowed.
    with pytest.raises(
        FailedPrecondition,
        match=r"cannot start stream 's3': it is Failed permanently; allowed now: delete, "
        r"resume with --cdc-start$",
    ):
        catalog.transition("s3", "start")
    catalog.create(definition(path, name="fresh"))
    for verb in ("pause", "resume", "drain", "started", "drained", "fail", "retry"):
        with pytest.raises(FailedPrecondition, match=f"cannot {verb} stream 'fresh': it is Not"):
            catalog.transition("fresh", verb)
    catalog.transition("fresh", "start")
    with pytest.raises(
        FailedPrecondition,
        match=r"it is Starting; allowed now: pause \(the pipeline may: started, fail,",
    ):
        catalog.transition("fresh", "drain")
    with pytest.raises(FailedPrecondition, match="cannot delete stream 'fresh': it is Starting"):
        catalog.delete("fresh")
    with pytest.raises(InvalidArgument, match="unknown stream verb 'stop'"):
        catalog.transition("fresh", "stop")
    with pytest.raises(NotFound, match="stream 'nope' does not exist"):
        catalog.transition("nope", "start")
    assert allowed_verbs(S.PAUSED) == ["start", "resume", "delete"]
    assert [s.value for s in StreamState] == [
        "Not started",
        "Starting",
        "Running",
        "Draining",
        "Paused",
        "Failed",
        "Failed permanently",
    ]


def test_state_survives_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "shop.db")
    with changestream.open(path) as db:
        db.execute_ddl(SCHEMA)
        catalog = StreamCatalog(db)
        catalog.create(definition(path))
        catalog.transition("orders", "start")
        catalog.update_progress("orders", add_rows=7, last_commit_timestamp=123)
        catalog.record_error("orders", "shop_Orders", "disk full", retriable=True)
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        assert catalog.get("orders").state is S.STARTING
        assert catalog.progress("orders").rows_processed == 7
        assert [e.message for e in catalog.errors("orders")] == ["disk full"]


def test_concurrent_transitions_one_wins(tmp_path: Path, open_db: OpenDb) -> None:
    """Many catalogs (separate connections; in the remote variant each its own client of the
    server) start the same stream at once: exactly one succeeds, the others are refused by the
    state machine, not lost."""
    path = str(tmp_path / "race.db")
    db = open_db(path)
    db.execute_ddl(SCHEMA)
    StreamCatalog(db).create(definition(path))
    others = [open_db(path) for _ in range(6)]
    assert {type(other) for other in others} == {type(db)}  # remote actors in the remote variant
    barrier = threading.Barrier(len(others))
    outcomes: list[str] = []

    def start(other: changestream.Database) -> None:
        barrier.wait()
        try:
            StreamCatalog(other).transition("orders", "start")
            outcomes.append("started")
        except FailedPrecondition as exc:
            assert "it is Starting" in str(exc)
            outcomes.append("refused")

    threads = [threading.Thread(target=start, args=(o,)) for o in others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused"] * 5 + ["started"]
    assert StreamCatalog(db).get("orders").state is S.STARTING
    assert StreamCatalog(db).get("orders").version == 2


def test_concurrent_progress_updates_all_count(tmp_path: Path, open_db: OpenDb) -> None:
    path = str(tmp_path / "progress.db")
    db = open_db(path)
    db.execute_ddl(SCHEMA)
    StreamCatalog(db).create(definition(path))
    others = [open_db(path) for _ in range(4)]
    assert {type(other) for other in others} == {type(db)}

    def chunks(index: int, other: changestream.Database) -> None:
        catalog = StreamCatalog(other)
        for chunk in range(5):
            catalog.set_object_backfill(
                "orders",
                "shop_Orders",
                "running",
                add_rows=10,
                detail={f"chunk-{index}-{chunk}": {"read_timestamp": chunk}},
            )
            catalog.update_progress("orders", add_rows=10, last_commit_timestamp=index * 10 + chunk)

    threads = [threading.Thread(target=chunks, args=(i, o)) for i, o in enumerate(others)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    progress = StreamCatalog(db).progress("orders")
    assert progress.rows_processed == 200
    assert progress.last_commit_timestamp == 34
    orders = progress.objects["shop_Orders"]
    assert orders.rows == 200
    assert len(orders.detail) == 20


def test_progress_errors_and_describe(source: tuple[changestream.Database, str]) -> None:
    db, path = source
    catalog = StreamCatalog(db)
    catalog.create(definition(path, include=["Orders", "Users"]))
    described = catalog.describe("orders")
    assert described["state"] == "Not started"
    job = {"state": "PENDING", "trigger": "automatic", "filter": None, "rows": 0}
    assert described["objects"] == [
        {
            "object": "shop_Orders",
            "table": "Orders",
            "status": "pending",
            "rows": 0,
            "backfill_job": job,
        },
        {
            "object": "shop_Users",
            "table": "Users",
            "status": "pending",
            "rows": 0,
            "backfill_job": job,
        },
    ]
    assert described["lag_seconds"] is None
    assert described["rows_processed"] == 0
    catalog.transition("orders", "start")
    snapshot = db.read_snapshot("Orders").read_timestamp
    catalog.update_progress("orders", cdc_start_timestamp=snapshot, detail={"epoch": 1})
    written = catalog.set_object_backfill(
        "orders", "shop_Orders", "done", rows=3, detail={"chunks": [[0, snapshot]]}
    )
    assert written.rows == 3 and written.status == "done"
    catalog.set_object_backfill("orders", "shop_Users", "running", add_rows=2)
    catalog.transition("orders", "started")
    progress = catalog.update_progress("orders", add_rows=5, last_commit_timestamp=snapshot)
    # The last processed commit never moves back.
    progress = catalog.update_progress("orders", last_commit_timestamp=snapshot - 10)
    assert progress.last_commit_timestamp == snapshot
    assert progress.cdc_start_timestamp == snapshot
    assert progress.detail == {"epoch": 1}
    assert catalog.progress("orders").objects["shop_Orders"].detail == {"chunks": [[0, snapshot]]}
    described = catalog.describe("orders")
    assert described["state"] == "Running"
    assert described["rows_processed"] == 5
    assert [(o["status"], o["rows"]) for o in described["objects"]] == [
        ("done", 3),
        ("running", 2),
    ]
    assert described["last_processed_commit_timestamp"] == changestream.clock.format_ts(snapshot)
    assert described["cdc_start_timestamp"] == changestream.clock.format_ts(snapshot)
    # No pipeline attached: no lag is claimed; a runner's heartbeat brings its lag.
    assert described["lag_seconds"] is None and described["pipeline_attached"] is False
    catalog.heartbeat("orders", 1.5)
    described = catalog.describe("orders")
    assert described["pipeline_attached"] is True and described["lag_seconds"] == 1.5
    assert described["pipeline"]["pid"] == os.getpid()
    catalog.heartbeat("orders", None, attached=False)
    assert catalog.describe("orders")["pipeline_attached"] is False
    assert catalog.progress("orders").detail["epoch"] == 1
    assert described["definition"]["include"] == ["Orders", "Users"]

    catalog.record_error("orders", "shop_Users", "bad value in row ('EU', 'x')", retriable=False)
    assert catalog.get("orders").state is S.RUNNING  # logging alone leaves the state
    assert catalog.fail("orders", "", "destination unwritable", retriable=True) is S.FAILED
    assert catalog.fail("orders", "", "still unwritable", retriable=True) is S.FAILED
    assert catalog.transition("orders", "retry") is S.STARTING
    catalog.transition("orders", "pause")
    # A paused stream keeps its state; the error is logged all the same.
    assert catalog.fail("orders", "shop_Orders", "late failure", retriable=False) is S.PAUSED
    errors = catalog.errors("orders")
    assert [(e.object, e.message, e.retriable) for e in errors] == [
        ("shop_Users", "bad value in row ('EU', 'x')", False),
        ("", "destination unwritable", True),
        ("", "still unwritable", True),
        ("shop_Orders", "late failure", False),
    ]
    assert errors[0].time <= errors[-1].time
    assert [e.message for e in catalog.errors("orders", limit=1)] == ["late failure"]
    assert errors[0].to_dict()["time"].endswith("Z")
    catalog.transition("orders", "resume")
    assert catalog.fail("orders", "", "schema gone", retriable=False) is S.FAILED_PERMANENTLY
    with pytest.raises(InvalidArgument, match="backfill status must be one of"):
        catalog.set_object_backfill("orders", "shop_Orders", "finished")
    with pytest.raises(InvalidArgument, match="add_rows must be a non-negative integer"):
        catalog.update_progress("orders", add_rows=-1)
    with pytest.raises(NotFound):
        catalog.update_progress("gone", add_rows=1)


def test_validation_errors(source: tuple[changestream.Database, str]) -> None:
    db, path = source
    catalog = StreamCatalog(db)
    with pytest.raises(InvalidArgument, match="a stream name is 1 to 63 letters"):
        definition(path, name="1bad name")
    with pytest.raises(InvalidArgument, match="format must be one of json, avro, got 'csv'"):
        definition(path, format="csv")
    with pytest.raises(InvalidArgument, match="backfill must be one of automatic, none"):
        definition(path, backfill="later")
    with pytest.raises(InvalidArgument, match="Orders are both included and excluded"):
        definition(path, include="Orders,Users", exclude=["Orders"])
    with pytest.raises(InvalidArgument, match="needs a destination"):
        definition(path, destination="")
    with pytest.raises(InvalidArgument, match="replica and destination must be different"):
        definition(path, destination="out", replica="./out")
    with pytest.raises(InvalidArgument, match="names no database"):
        definition("http://127.0.0.1:7070/")
    with pytest.raises(NotFound, match=r"change stream 'Nope' does not exist \(change streams:"):
        catalog.create(definition(path, change_stream="Nope"))
    for capture, stream in (("NEW_VALUES", "Diffs"), ("OLD_AND_NEW_VALUES", "Defaults")):
        with pytest.raises(
            FailedPrecondition,
            match=f"captures {capture}, which gives only the changed columns.*"
            "use NEW_ROW_AND_OLD_VALUES",
        ):
            catalog.create(definition(path, change_stream=stream))
    with pytest.raises(NotFound, match=r"table 'Ghost' does not exist \(tables: Audit, Orders"):
        catalog.create(definition(path, include=["Ghost"]))
    with pytest.raises(NotFound, match="table 'Ghost' does not exist"):
        catalog.create(definition(path, exclude=["Ghost"]))
    with pytest.raises(
        FailedPrecondition,
        match=r"'WholeRows' does not watch table 'Audit' \(it watches: Orders, Users",
    ):
        catalog.create(definition(path, change_stream="WholeRows", include=["Audit"]))
    with pytest.raises(
        FailedPrecondition,
        match=r"does not watch column\(s\) Item of 'Orders'.*--include \"Orders\(Id,Qty\)\"",
    ):
        catalog.create(definition(path, change_stream="Partial"))
    with pytest.raises(NotFound, match=r"table 'Orders' has no column\(s\) Colour \(columns: Id"):
        catalog.create(definition(path, change_stream="Partial", include="Orders(Colour)"))
    with pytest.raises(InvalidArgument, match="exclude takes whole tables"):
        definition(path, exclude="Orders(Qty)")
    # ... which keeping only the columns it watches, or excluding that table, fixes.
    kept = definition(path, name="kept", change_stream="Partial", include="Orders(Qty), Users")
    assert kept.include == ("Orders(Qty)", "Users")
    catalog.create(kept)
    assert [c.name for c in kept.tables(db)[0].columns] == ["Id", "Qty"]
    catalog.delete("kept")
    catalog.create(definition(path, change_stream="Partial", exclude=["Orders"]))
    with pytest.raises(FailedPrecondition, match="would stream no table"):
        catalog.create(
            definition(path, name="none", change_stream="WholeRows", exclude="Orders,Users")
        )
    assert catalog.list()[0].definition.tables(db)[0].name == "Users"


def test_schema_names() -> None:
    assert schema_name("data/shop.db") == "shop"
    assert schema_name("/abs/path/ledger") == "ledger"
    assert schema_name(":memory:") == "memory"
    assert schema_name("http://host:7070/bank") == "bank"
    assert schema_name("https://host/prefix/my%20db/") == "my db"


def test_discover(source: tuple[changestream.Database, str]) -> None:
    db, _ = source
    db.ensure_watch_stream()
    found = discover(db)
    # The schema is the database's name: the file's stem, or the name in the server's URL.
    if isinstance(db, changestream.EmbeddedDatabase):
        schema = "shop"
    else:
        schema = schema_name(db.url)  # type: ignore[attr-defined]
        assert schema.startswith("db")
    assert db.name == schema
    assert [o.object_name for o in found] == [f"{schema}_{t}" for t in ("Audit", "Orders", "Users")]
    users = found[2]
    assert (users.schema, users.table, users.primary_keys) == (schema, "Users", ("Region", "Name"))
    assert users.to_dict() == {
        "schema": schema,
        "table": "Users",
        "object_name": f"{schema}_Users",
        "columns": [
            {
                "name": "Name",
                "type": "STRING(100)",
                "nullable": False,
                "ordinal_position": 1,
                "is_primary_key": True,
            },
            {
                "name": "Region",
                "type": "STRING(10)",
                "nullable": False,
                "ordinal_position": 2,
                "is_primary_key": True,
            },
            {
                "name": "Tags",
                "type": "ARRAY<STRING(MAX)>",
                "nullable": True,
                "ordinal_position": 3,
                "is_primary_key": False,
            },
            {
                "name": "Born",
                "type": "DATE",
                "nullable": True,
                "ordinal_position": 4,
                "is_primary_key": False,
            },
        ],
        "primary_keys": ["Region", "Name"],
        # The change streams tracking it, with their options (the engine's own left out).
        "change_streams": [
            {
                "name": "Everything",
                "retention_seconds": 86400,
                "value_capture_type": "NEW_ROW_AND_OLD_VALUES",
            },
            {"name": "Partial", "retention_seconds": 86400, "value_capture_type": "NEW_ROW"},
            {"name": "WholeRows", "retention_seconds": 86400, "value_capture_type": "NEW_ROW"},
        ],
    }
    # No system table shows up, whatever the engine keeps for itself.
    assert not any(o.table.startswith("_cs_") for o in found)


HOUR_US = 3_600_000_000


@pytest.mark.parametrize("skew_us", [HOUR_US, -HOUR_US], ids=["server-ahead", "server-behind"])
def test_positions_come_from_the_databases_clock_not_the_callers(
    tmp_path: Path, open_db: OpenDb, skew_us: int
) -> None:
    """A CLI or pipeline on another machine than the server: `streams start` records where
    the database's clock is, so every change committed after it is after the CDC position,
    however far this machine's clock is off (server-behind lost such changes before)."""
    path = str(tmp_path / "skewed.db")
    db = open_db(path, clock=lambda: now_us() + skew_us)
    db.execute_ddl(SCHEMA)

    def near_the_database_clock(timestamp: int) -> bool:
        return abs(timestamp - (now_us() + skew_us)) < 60_000_000

    assert near_the_database_clock(db.current_timestamp())
    catalog = StreamCatalog(db)
    catalog.create(definition(path))
    catalog.transition("orders", "start")
    position = catalog.get("orders").state_changed_at
    assert near_the_database_clock(position)
    with db.transaction() as tx:
        tx.insert("Orders", ["Id", "Item", "Qty"], [[1, "a", 1]])
    assert tx.commit_timestamp is not None
    assert parse_ts(tx.commit_timestamp) > position
    # Where a Spark read starts: `latest` is the database's now, `earliest` not before the
    # change stream began.
    created = db.partition_history("Everything")[0].start_timestamp
    assert near_the_database_clock(resolve_position(db, "Everything", "latest", True))
    assert resolve_position(db, "Everything", "earliest", True) >= created
    # A heartbeat and the describe that reads it take the same clock; so does a pipeline's
    # lag, which it takes with the frontier it reached.
    catalog.heartbeat("orders", 0.0)
    assert catalog.describe("orders")["pipeline_attached"]
    status = PipelineStatus("Running", frontier=position, now=position + 2_500_000)
    assert status.lag_seconds == 2.5
