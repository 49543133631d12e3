"""Backfill jobs per stream object on a real local[2] Spark pipeline: stopped half-way and
started again, re-read after completing with and without a filter, and the CLI around them."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import changestream
from changestream.cli import main
from changestream.datastream import StreamCatalog, StreamDefinition
from changestream.datastream.files import event_files, read_events
from changestream.errors import FailedPrecondition, InvalidArgument, NotFound
from changestream.spark.pipeline import PipelineOptions, SparkPipeline
from changestream.spark.replica import DeltaReplica

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROWS = 400
CHUNK_ROWS = 10


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from changestream.spark import local_session

    session = local_session()
    yield session
    session.stop()


def _shop(tmp_path: Path, backfill: str = "automatic") -> str:
    path = str(tmp_path / "shop.db")
    with changestream.open(path) as db:
        db.execute_ddl(
            [
                "CREATE TABLE Items (Id INT64 NOT NULL, Qty INT64) PRIMARY KEY (Id)",
                "CREATE CHANGE STREAM Everything FOR ALL "
                "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
            ]
        )
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Qty"], [[i, i] for i in range(ROWS)])
        catalog = StreamCatalog(db)
        catalog.create(
            StreamDefinition(
                name="shop",
                database=path,
                change_stream="Everything",
                destination=str(tmp_path / "events"),
                replica=str(tmp_path / "replica"),
                backfill=backfill,
            )
        )
        catalog.transition("shop", "start")
    return path


def _run(spark: Any, path: str) -> None:
    options = PipelineOptions(until_caught_up=True, trigger_seconds=0.5, chunk_rows=CHUNK_ROWS)
    SparkPipeline("shop", path, options, spark=spark).run()


def _backfilled_ids(tmp_path: Path) -> collections.Counter[int]:
    events = [e for f in event_files(tmp_path / "events") for e in read_events(f)]
    return collections.Counter(
        e["payload"]["Id"] for e in events if e["read_method"] == "changestream-backfill"
    )


def _job(path: str) -> dict[str, Any]:
    with changestream.open(path) as db:
        (entry,) = StreamCatalog(db).describe("shop")["objects"]
    job: dict[str, Any] = entry["backfill_job"]
    return job


def _stop_after_first_chunk(path: str, stopped: list[int]) -> None:
    """Stop the job as soon as a chunk is done (the pipeline reads no further wave)."""
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            entry = catalog.progress("shop").objects.get("shop_Items")
            if entry is not None and any(k.startswith("chunk-") for k in entry.detail):
                catalog.stop_backfill("shop", "shop_Items")
                stopped.append(1)
                return
            time.sleep(0.005)


def test_a_backfill_stopped_half_way_and_started_again_leaves_every_row_once(
    spark: Any, tmp_path: Path
) -> None:
    path = _shop(tmp_path)
    stopped: list[int] = []
    stopper = threading.Thread(target=_stop_after_first_chunk, args=(path, stopped))
    stopper.start()
    _run(spark, path)
    stopper.join(timeout=60)
    assert stopped == [1]
    job = _job(path)
    assert job["state"] == "STOPPED"
    first = _backfilled_ids(tmp_path)
    assert 0 < len(first) < ROWS and set(first.values()) == {1}

    with changestream.open(path) as db:
        entry = StreamCatalog(db).start_backfill("shop", "shop_Items")
        assert entry.status == "pending"
        with db.transaction() as tx:  # a change while the job is stopped: a CDC event
            tx.update("Items", ["Id", "Qty"], [[ROWS - 1, -1]])
    _run(spark, path)
    assert _job(path)["state"] == "COMPLETED"
    ids = _backfilled_ids(tmp_path)
    assert sorted(ids) == list(range(ROWS)) and set(ids.values()) == {1}  # resumed, not redone
    with changestream.open(path) as db:
        table = next(t for t in db.tables() if t.name == "Items")
        source = db.read("Items")
    assert DeltaReplica(tmp_path / "replica", "shop", table).read_rows() == source


def test_a_completed_backfill_started_again_with_a_filter_reads_just_those_rows(
    spark: Any, tmp_path: Path
) -> None:
    path = _shop(tmp_path, backfill="none")
    assert _job(path)["state"] == "NOT_STARTED"
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        with pytest.raises(FailedPrecondition, match="is not active \\(it is NOT_STARTED\\)"):
            catalog.stop_backfill("shop", "shop_Items")
        catalog.start_backfill("shop", "shop_Items")
    _run(spark, path)
    assert _job(path)["state"] == "COMPLETED"
    assert _backfilled_ids(tmp_path) == collections.Counter(range(ROWS))

    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        catalog.start_backfill("shop", "shop_Items", where="Qty >= 350 AND MOD(Id, 2) = 0")
        with pytest.raises(FailedPrecondition, match="is PENDING; stop it before"):
            catalog.start_backfill("shop", "shop_Items")
    _run(spark, path)
    job = _job(path)
    assert (job["state"], job["filter"], job["rows"]) == (
        "COMPLETED",
        "Qty >= 350 AND MOD(Id, 2) = 0",
        25,
    )
    again = _backfilled_ids(tmp_path) - collections.Counter(range(ROWS))
    assert sorted(again) == list(range(350, ROWS, 2)) and set(again.values()) == {1}


def test_the_cli_starts_and_stops_backfill_jobs_and_refuses_bad_input(tmp_path: Path) -> None:
    path = _shop(tmp_path, backfill="none")
    runner = CliRunner()

    def backfill(*args: str) -> Any:
        return runner.invoke(main, ["streams", "backfill", *args, "--db", path])

    started = backfill("start", "shop", "shop_Items", "--where", "Qty > 100")
    assert started.exit_code == 0, started.output
    assert "backfill of the rows where Qty > 100 of shop_Items: PENDING" in started.output
    described = runner.invoke(main, ["streams", "describe", "shop", "--db", path])
    assert "PENDING" in described.output and "Qty > 100" in described.output
    stopped = backfill("stop", "shop", "shop_Items")
    assert stopped.exit_code == 0 and "shop_Items: STOPPED" in stopped.output
    again = backfill("stop", "shop", "shop_Items")
    assert again.exit_code == 2 and "is not active (it is STOPPED)" in again.output
    missing = backfill("start", "shop", "shop_Orders")
    assert missing.exit_code == 2 and "has no object 'shop_Orders'" in missing.output
    bad = backfill("start", "shop", "shop_Items", "--where", "Nope > 1")
    assert bad.exit_code == 2 and "is not a condition on table Items" in bad.output
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        with pytest.raises(NotFound):
            catalog.start_backfill("nosuch", "shop_Items")
        with pytest.raises(InvalidArgument, match="must be a SQL condition"):
            catalog.start_backfill("shop", "shop_Items", where="  ")
        assert catalog.progress("shop").objects["shop_Items"].status == "stopped"
