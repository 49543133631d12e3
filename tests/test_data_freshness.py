"""A stream's data freshness limit (Datastream's staleness limit): validated, setting the
pipeline's micro-batch interval, and the freshness the pipeline observed shown by describe,
on a real local[2] Spark pipeline."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import changestream
from changestream.cli import main
from changestream.datastream import StreamCatalog, StreamDefinition
from changestream.errors import InvalidArgument
from changestream.spark.pipeline import PipelineOptions, SparkPipeline

WAIT_S = 2.0


def _definition(path: str, root: Path, **extra: Any) -> StreamDefinition:
    return StreamDefinition(
        name="shop",
        database=path,
        change_stream="Everything",
        destination=str(root / "events"),
        replica=str(root / "replica"),
        **extra,
    )


def _database(tmp_path: Path) -> str:
    path = str(tmp_path / "shop.db")
    with changestream.open(path) as db:
        db.execute_ddl(
            [
                "CREATE TABLE Items (Id INT64 NOT NULL, Qty INT64) PRIMARY KEY (Id)",
                "CREATE CHANGE STREAM Everything FOR ALL "
                "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
            ]
        )
    return path


def test_a_freshness_limit_is_validated_and_shown(tmp_path: Path) -> None:
    path = _database(tmp_path)
    for bad in (0.5, 100_000, "soon", True):
        with pytest.raises(InvalidArgument, match="data_freshness must be a number of seconds"):
            _definition(path, tmp_path, data_freshness=bad)
    runner = CliRunner()
    create = ["streams", "create", "shop", "--db", path, "--change-stream", "Everything"]
    create += ["--destination", str(tmp_path / "events"), "--data-freshness", "30"]
    assert runner.invoke(main, create).exit_code == 0
    described = runner.invoke(main, ["streams", "describe", "shop", "--db", path, "--json"])
    assert json.loads(described.output)["data_freshness"] == {"limit_seconds": 30.0}
    updated = runner.invoke(
        main, ["streams", "update", "shop", "--db", path, "--data-freshness", "0"]
    )
    assert updated.exit_code == 2 and "between 1 and 86400" in updated.output
    runner.invoke(main, ["streams", "update", "shop", "--db", path, "--data-freshness", "12"])
    text = runner.invoke(main, ["streams", "describe", "shop", "--db", path]).output
    assert "limit 12s" in text


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from changestream.spark import local_session

    session = local_session()
    yield session
    session.stop()


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_the_pipeline_batches_by_the_limit_and_reports_what_it_observed(
    spark: Any, tmp_path: Path
) -> None:
    path = _database(tmp_path)
    with changestream.open(path) as db:
        catalog = StreamCatalog(db)
        catalog.create(_definition(path, tmp_path, data_freshness=6.0))
        catalog.transition("shop", "start")
        written = time.monotonic()
        with db.transaction() as tx:
            tx.insert("Items", ["Id", "Qty"], [[i, i] for i in range(50)])
    options = PipelineOptions(until_caught_up=True, trigger_seconds=0.5)
    pipeline = SparkPipeline("shop", path, options, spark=spark)
    assert pipeline.trigger_seconds == 2.0  # a third of the limit, not --trigger-seconds
    time.sleep(WAIT_S)  # the changes wait: the observed freshness must include it
    pipeline.run()
    waited = time.monotonic() - written
    with changestream.open(path) as db:
        freshness = StreamCatalog(db).describe("shop")["data_freshness"]
    assert freshness["limit_seconds"] == 6.0 and freshness["batches"] >= 1
    assert WAIT_S <= freshness["last_seconds"] <= freshness["max_seconds"] <= waited + 1.0
