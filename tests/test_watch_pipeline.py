"""watch() pipelines: $match and $project, their MongoDB semantics and their errors."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream import InvalidArgument
from changestream.watch import ClusterTime
from changestream.watch.pipeline import AggregationPipeline
from tests.watch_support import COLUMNS, ITEMS, nothing_more, take

pytestmark = pytest.mark.timeout(120)

EVENT: dict[str, Any] = {
    "_id": {"_data": "01"},
    "operationType": "update",
    "clusterTime": ClusterTime(1_700_000_000, 5),
    "wallTime": dt.datetime(2023, 11, 14, tzinfo=dt.UTC),
    "ns": {"db": "shop", "coll": "Items"},
    "documentKey": {"Id": 7},
    "fullDocument": {"Id": 7, "V": "x", "N": 3, "Tags": ["a", "b"], "Lines": [{"q": 1}, {"q": 5}]},
    "updateDescription": {"updatedFields": {"V": "x"}, "removedFields": []},
    "txnNumber": 12,
    "lsid": {"id": ""},
}


def matches(query: dict[str, Any]) -> bool:
    return AggregationPipeline([{"$match": query}]).apply(EVENT) is not None


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"operationType": "update"},
        {"ns.coll": "Items", "documentKey.Id": 7},
        {"ns": {"db": "shop", "coll": "Items"}},
        {"operationType": {"$eq": "update"}},
        {"operationType": {"$ne": "insert"}},
        {"operationType": {"$in": ["insert", "update"]}},
        {"operationType": {"$nin": ["delete"]}},
        {"txnNumber": {"$gt": 11, "$lte": 12}},
        {"txnNumber": {"$gte": 12.0, "$lt": 13}},
        {"fullDocument.V": {"$gte": "w"}},
        {"clusterTime": {"$gt": ClusterTime(1_700_000_000, 4)}},
        {"wallTime": {"$lt": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)}},
        {"fullDocument.Tags": "b"},
        {"fullDocument.Tags.1": "b"},
        {"fullDocument.Lines.q": 5},
        {"fullDocument.Lines.q": {"$gt": 4}},
        {"fullDocument.Missing": None},
        {"fullDocumentBeforeChange": {"$exists": False}},
        {"updateDescription.updatedFields.V": {"$exists": True}},
        {"$or": [{"operationType": "insert"}, {"documentKey.Id": 7}]},
        {"$and": [{"operationType": "update"}, {"ns.coll": {"$in": ["Items"]}}]},
        {"$nor": [{"operationType": "delete"}]},
    ],
)
def test_match_accepts(query: dict[str, Any]) -> None:
    assert matches(query)


@pytest.mark.parametrize(
    "query",
    [
        {"operationType": "insert"},
        {"operationType": {"$in": ["insert", "delete"]}},
        {"operationType": {"$nin": ["update"]}},
        {"documentKey.Id": {"$ne": 7}},
        {"txnNumber": {"$gt": 12}},
        {"txnNumber": "12"},
        {"txnNumber": {"$gt": "1"}},
        {"fullDocument.Missing": {"$exists": True}},
        {"fullDocument.V": None},
        {"lsid.id": {"$gt": 0}},
        {"fullDocument.Lines.q": 2},
        {"$or": [{"operationType": "insert"}, {"ns.coll": "Other"}]},
        {"$and": [{"operationType": "update"}, {"ns.coll": "Other"}]},
        {"$nor": [{"operationType": "update"}]},
        {"documentKey": {"Id": 7, "Extra": 1}},
        {"fullDocument.Tags.\u00b9": "b"},  # a digit to str.isdigit(), not an index
    ],
)
def test_match_rejects(query: dict[str, Any]) -> None:
    assert not matches(query)


def test_booleans_are_not_numbers() -> None:
    event = {"_id": {}, "flag": True, "one": 1}
    assert AggregationPipeline([{"$match": {"flag": True}}]).apply(event) is not None
    assert AggregationPipeline([{"$match": {"flag": 1}}]).apply(event) is None
    assert AggregationPipeline([{"$match": {"one": True}}]).apply(event) is None


def test_project_include_and_exclude() -> None:
    included = AggregationPipeline(
        [{"$project": {"operationType": 1, "fullDocument.V": True}}]
    ).apply(EVENT)
    assert included == {"_id": EVENT["_id"], "operationType": "update", "fullDocument": {"V": "x"}}
    lines = AggregationPipeline([{"$project": {"fullDocument.Lines.q": 1}}]).apply(EVENT)
    assert lines == {"_id": EVENT["_id"], "fullDocument": {"Lines": [{"q": 1}, {"q": 5}]}}
    excluded = AggregationPipeline([{"$project": {"fullDocument.Tags": 0, "lsid": 0}}]).apply(EVENT)
    assert excluded is not None
    assert "lsid" not in excluded and "Tags" not in excluded["fullDocument"]
    assert excluded["fullDocument"]["V"] == "x"
    assert "Tags" in EVENT["fullDocument"], "the event itself is left alone"


def test_stages_run_in_order() -> None:
    pipeline = AggregationPipeline(
        [{"$project": {"operationType": 1}}, {"$match": {"documentKey.Id": {"$exists": False}}}]
    )
    assert pipeline.apply(EVENT) == {"_id": EVENT["_id"], "operationType": "update"}
    assert (
        AggregationPipeline([{"$project": {"ns": 0}}, {"$match": {"ns.coll": "Items"}}]).apply(
            EVENT
        )
        is None
    )


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        (
            [{"$match": {}}, {"$group": {"_id": None}}],
            "pipeline stage 2 '$group' is not supported by watch(); allowed stages: $match, "
            "$project",
        ),
        ([{"$match": {}, "$project": {"a": 1}}], "pipeline stage 1 must be a document with"),
        (["$match"], "pipeline stage 1 must be a document with exactly one stage name"),
        ([{"$match": []}], "$match (pipeline stage 1) takes a query document"),
        (
            [{"$match": {"a": {"$regex": "x"}}}],
            "$match (pipeline stage 1): unknown operator '$regex' on 'a'; allowed: $eq, $ne",
        ),
        ([{"$match": {"$where": "1"}}], "unknown top-level operator '$where'; allowed: $and"),
        ([{"$match": {"$or": []}}], "$or takes a non-empty list of query documents"),
        ([{"$match": {"a": {"$in": 3}}}], "$in on 'a' takes a list, got 3"),
        ([{"$match": {"a": {"$gt": 1, "b": 2}}}], "mixes operators and field names"),
        ([{"$project": {}}], "$project (pipeline stage 1) takes a non-empty document"),
        ([{"$project": {"a": 1, "b": 0}}], "cannot mix inclusion and exclusion"),
        ([{"$project": {"a": {"$concat": ["$b"]}}}], "unsupported expression"),
        ([{"$project": {"a": "$$NOW"}}], "unknown variable '$$NOW'"),
        ([{"$project": {"a": "$b", "c": 0}}], "nor computed fields and exclusion"),
        ([{"$project": {"$a": 1}}], "'$a' is not a field path"),
    ],
)
def test_pipeline_errors_name_the_stage(pipeline: list[Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        AggregationPipeline(pipeline)


def test_cursor_applies_the_pipeline(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "p.db")) as db:
        db.execute_ddl(ITEMS)
        pipeline = [
            {"$match": {"operationType": {"$in": ["update", "delete"]}, "documentKey.Id": 1}},
            {"$project": {"operationType": 1, "documentKey": 1}},
        ]
        with db.watch(pipeline, max_await_time_ms=200) as cursor:
            with db.transaction() as tx:
                tx.insert("Items", COLUMNS, [[1, "a", 1], [2, "b", 2]])
            with db.transaction() as tx:
                tx.update("Items", COLUMNS, [[1, "c", 1], [2, "d", 2]])
            with db.transaction() as tx:
                tx.delete("Items", [[1], [2]])
            update, delete = take(cursor, 2)
            assert set(update) == {"_id", "operationType", "documentKey"}
            assert (update["operationType"], delete["operationType"]) == ("update", "delete")
            assert nothing_more(cursor)
        with pytest.raises(InvalidArgument, match=r"pipeline stage 1 '\$addFields'"):
            db.watch([{"$addFields": {"x": 1}}])


def test_removing_id_fails_when_the_event_is_returned(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "p.db")) as db:
        db.execute_ddl(ITEMS)
        cursor = db.watch([{"$project": {"_id": 0}}])
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, [[1, "a", 1]])
        with pytest.raises(InvalidArgument, match="removed or changed _id"):
            take(cursor, 1)
        assert not cursor.alive


def test_the_old_name_still_works_with_a_warning() -> None:
    import changestream.watch.pipeline as module

    with pytest.warns(DeprecationWarning, match="now AggregationPipeline"):
        old = module.Pipeline
    assert old is AggregationPipeline
