"""The job ``changestream pipeline prepare`` has ``jvm_archive.build_archive`` run under
``spark-submit``: small pipelines, one per file format, each with a backfill, CDC
micro-batches and a Delta replica, so the JVM loads the classes real pipelines load before it
writes them to the archive. It works in the directory ``$CHANGESTREAM_ARCHIVE_WORK``."""

from __future__ import annotations

import os
from pathlib import Path

import changestream
from changestream.datastream import StreamCatalog, StreamDefinition
from changestream.spark.pipeline import PipelineOptions, SparkPipeline

_DDL = (
    "CREATE TABLE Items (Id INT64 NOT NULL, Name STRING(MAX), Price FLOAT64) PRIMARY KEY (Id)",
    "CREATE CHANGE STREAM Everything FOR ALL "
    "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
)
_COLUMNS = ["Id", "Name", "Price"]


def main(work: Path) -> None:
    path = str(work / "source.db")
    with changestream.open(path) as db:
        db.execute_ddl(list(_DDL))
        with db.transaction() as tx:
            tx.insert("Items", _COLUMNS, [[i, f"item {i}", i * 1.5] for i in range(100)])
        catalog = StreamCatalog(db)
        for fmt in ("json", "avro"):
            catalog.create(
                StreamDefinition(
                    name=f"warm_{fmt}",
                    database=path,
                    change_stream="Everything",
                    destination=str(work / f"events-{fmt}"),
                    format=fmt,
                    replica=str(work / f"replica-{fmt}"),
                )
            )
            catalog.transition(f"warm_{fmt}", "start")
        with db.transaction() as tx:
            tx.insert_or_update("Items", _COLUMNS, [[i, f"new {i}", 2.0] for i in range(50, 150)])
            tx.delete("Items", [[i] for i in range(10)])
    for fmt in ("json", "avro"):
        SparkPipeline(f"warm_{fmt}", path, PipelineOptions(until_caught_up=True)).run()


if __name__ == "__main__":
    main(Path(os.environ["CHANGESTREAM_ARCHIVE_WORK"]))
