"""watch() against MongoDB's documented change-event behaviour: $project expressions, update
descriptions with dotted paths and truncatedArrays, txnNumber/lsid only for transactions, one
rule for NULL, expanded (create) events and comment — embedded and through the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream import InvalidArgument
from tests.server_support import serving
from tests.watch_support import COLUMNS, ITEMS, nothing_more, take

pytestmark = pytest.mark.timeout(120)

DOCS = "CREATE TABLE Docs (Id INT64 NOT NULL, J JSON, A ARRAY<INT64>, N INT64) PRIMARY KEY (Id)"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    with changestream.open(str(tmp_path / "shop.db")) as database:
        database.execute_ddl([ITEMS, DOCS])
        yield database


def update_of(db: changestream.EmbeddedDatabase, before: list[Any], after: list[Any]) -> Any:
    """The updateDescription of one Docs row going from ``before`` to ``after``."""
    columns = ["Id", "J", "A", "N"]
    with db.transaction() as tx:
        tx.insert_or_update("Docs", columns, [[1, *before]])
    with db.watch() as cursor:
        with db.transaction() as tx:
            tx.update("Docs", columns, [[1, *after]])
        (event,) = take(cursor, 1)
    assert event["operationType"] == "update"
    return event["updateDescription"]


# -- $project ---------------------------------------------------------------------------------


def project(db: changestream.EmbeddedDatabase, spec: dict[str, Any]) -> dict[str, Any]:
    with db.watch([{"$project": spec}]) as cursor:
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, [[1, "a", 10]])
        (event,) = take(cursor, 1)
    return event


def test_project_computes_fields_from_paths_literals_and_documents(
    db: changestream.EmbeddedDatabase,
) -> None:
    event = project(
        db,
        {
            "optype": "$operationType",
            "ns": {"db": "$ns.db", "coll": "$ns.coll"},
            "ns.viewOn": "shop.Items",
            "newField": "value",
            "dollar": {"$literal": "$not.a.path"},
            "one": {"$literal": 1},
            "pair": ["$documentKey.Id", "x", "$nothing"],
            "missing": "$no.such.field",
            "key": "$documentKey",
        },
    )
    assert event == {
        "_id": event["_id"],
        "optype": "insert",
        "ns": {"db": "shop", "coll": "Items", "viewOn": "shop.Items"},
        "newField": "value",
        "dollar": "$not.a.path",
        "one": 1,
        "pair": [1, "x", None],
        "key": {"Id": 1},
    }


def test_project_mixes_inclusion_with_computed_fields(db: changestream.EmbeddedDatabase) -> None:
    event = project(db, {"fullDocument.V": 1, "root": "$$ROOT.ns.coll", "_id": 1})
    assert event == {"_id": event["_id"], "fullDocument": {"V": "a"}, "root": "Items"}


def test_added_fields_and_unknown_operation_types_do_not_fail_the_stream(
    db: changestream.EmbeddedDatabase,
) -> None:
    pipeline = [
        {"$match": {"operationType": {"$in": ["insert", "frobnicate"]}}},
        {"$project": {"extra": {"deep": ["$operationType"]}, "fullDocument": 1}},
    ]
    with db.watch(pipeline) as cursor:
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, [[1, "a", 10]])
        with db.transaction() as tx:
            tx.update("Items", COLUMNS, [[1, "b", 10]])
        with db.transaction() as tx:
            tx.insert("Items", COLUMNS, [[2, "c", 20]])
        first, second = take(cursor, 2)
        assert cursor.alive
        token = cursor.resume_token
    assert first["extra"] == {"deep": ["insert"]}
    assert second["fullDocument"] == {"Id": 2, "V": "c", "N": 20}
    with db.watch(pipeline, resume_after=first["_id"]) as resumed:
        (again,) = take(resumed, 1)
    assert again["_id"] == second["_id"] == token


# -- updateDescription ------------------------------------------------------------------------


def test_every_update_carries_truncated_arrays(db: changestream.EmbeddedDatabase) -> None:
    described = update_of(db, [None, None, 1], [None, None, 2])
    assert described == {"updatedFields": {"N": 2}, "removedFields": [], "truncatedArrays": []}


def test_a_dropped_column_is_removed_by_the_first_update_of_each_row(
    db: changestream.EmbeddedDatabase,
) -> None:
    with db.transaction() as tx:
        tx.insert("Docs", ["Id", "N"], [[1, 10], [2, 20]])
    with db.watch() as cursor:
        db.execute_ddl("ALTER TABLE Docs DROP COLUMN N")
        for value in ([1], [2], [3]):
            with db.transaction() as tx:
                tx.update("Docs", ["Id", "A"], [[1, value]])
        with db.transaction() as tx:
            tx.update("Docs", ["Id", "A"], [[2, [9]]])
        db.execute_ddl("ALTER TABLE Docs ADD COLUMN N INT64")  # back: no longer removed
        with db.transaction() as tx:
            tx.update("Docs", ["Id", "A"], [[2, [8]]])
        events = take(cursor, 5)
    assert [(e["documentKey"]["Id"], e["updateDescription"]["removedFields"]) for e in events] == [
        (1, ["N"]),
        (1, []),
        (1, []),
        (2, ["N"]),
        (2, []),
    ]


def test_an_array_that_only_shrank_is_truncated_not_updated(
    db: changestream.EmbeddedDatabase,
) -> None:
    described = update_of(db, [None, [1, 2, 3], 0], [None, [1, 2], 0])
    assert described == {
        "updatedFields": {},
        "removedFields": [],
        "truncatedArrays": [{"field": "A", "newSize": 2}],
    }


def test_array_elements_are_described_by_index(db: changestream.EmbeddedDatabase) -> None:
    shrunk_and_changed = update_of(db, [None, [1, 2, 3], 0], [None, [9, 2], 0])
    assert shrunk_and_changed["updatedFields"] == {"A.0": 9}
    assert shrunk_and_changed["truncatedArrays"] == [{"field": "A", "newSize": 2}]
    grown = update_of(db, [None, [1], 0], [None, [1, 5, 6], 0])
    assert grown == {
        "updatedFields": {"A.1": 5, "A.2": 6},
        "removedFields": [],
        "truncatedArrays": [],
    }


def test_changes_inside_json_documents_have_dotted_paths(
    db: changestream.EmbeddedDatabase,
) -> None:
    described = update_of(
        db,
        [{"a": {"1": 1, "k": "same"}, "b": True, "l": [{"x": 1}, 2, 3], "t": 1}, None, 0],
        [{"a": {"1": 2, "k": "same"}, "l": [{"x": 1, "y": 3}, 2], "t": [1], "new": None}, None, 0],
    )
    assert described == {
        "updatedFields": {"J.a.1": 2, "J.l.0.y": 3, "J.t": [1], "J.new": None},
        "removedFields": ["J.b"],
        "truncatedArrays": [{"field": "J.l", "newSize": 2}],
    }
    # true and 1 are different values, as they are in MongoDB.
    assert update_of(db, [{"v": 1}, None, 0], [{"v": True}, None, 0])["updatedFields"] == {
        "J.v": True
    }
    # A column whose value changes kind is described whole.
    assert update_of(db, [{"v": 1}, None, 0], [[1], None, 0])["updatedFields"] == {"J": [1]}


# -- NULL ------------------------------------------------------------------------------------


def test_null_is_a_value_by_default_and_absent_with_null_as_missing(
    db: changestream.EmbeddedDatabase,
) -> None:
    with db.transaction() as tx:
        tx.insert("Items", COLUMNS, [[1, "a", None]])
    start = db.ensure_watch_stream().now
    with db.transaction() as tx:
        tx.update("Items", COLUMNS, [[1, None, 5]])
    with db.transaction() as tx:
        tx.replace("Items", COLUMNS, [[1, "b", None]])

    options: dict[str, Any] = {
        "start_at_operation_time": start,
        "full_document": "whenAvailable",
        "full_document_before_change": "whenAvailable",
    }
    with db.watch(**options) as cursor:
        update, replace = take(cursor, 2)
    assert update["updateDescription"]["updatedFields"] == {"V": None, "N": 5}
    assert update["updateDescription"]["removedFields"] == []
    assert update["fullDocument"] == {"Id": 1, "V": None, "N": 5}
    assert update["fullDocumentBeforeChange"] == {"Id": 1, "V": "a", "N": None}
    assert replace["fullDocument"] == {"Id": 1, "V": "b", "N": None}

    with db.watch(null_as_missing=True, **options) as cursor:
        update, replace = take(cursor, 2)
    assert update["updateDescription"]["updatedFields"] == {"N": 5}
    assert update["updateDescription"]["removedFields"] == ["V"]
    assert update["fullDocument"] == {"Id": 1, "N": 5}
    assert update["fullDocumentBeforeChange"] == {"Id": 1, "V": "a"}
    assert replace["fullDocument"] == {"Id": 1, "V": "b"}
    assert replace["fullDocumentBeforeChange"] == {"Id": 1, "N": 5}


# -- transactions and sessions ----------------------------------------------------------------


def test_txn_number_and_lsid_only_on_transactions_of_several_rows(tmp_path: Path) -> None:
    path = str(tmp_path / "two.db")
    with changestream.open(path) as first, changestream.open(path) as second:
        first.execute_ddl([ITEMS, DOCS])
        assert first.session_id != second.session_id
        with first.watch() as cursor:
            with first.transaction() as tx:
                tx.insert("Items", COLUMNS, [[1, "a", 1]])
            with second.transaction() as tx:
                tx.insert("Items", COLUMNS, [[2, "b", 2], [3, "c", 3]])
            with first.transaction() as tx:
                tx.insert("Items", COLUMNS, [[4, "d", 4]])
                tx.insert("Docs", ["Id"], [[1]])
            single, pair_a, pair_b, tables_a, tables_b = take(cursor, 5)
    assert "txnNumber" not in single and "lsid" not in single
    assert pair_a["lsid"] == pair_b["lsid"] == {"id": second.session_id}
    assert pair_a["txnNumber"] == pair_b["txnNumber"]
    assert tables_a["lsid"] == tables_b["lsid"] == {"id": first.session_id}
    assert tables_a["txnNumber"] == tables_b["txnNumber"] > pair_a["txnNumber"]


# -- expanded events, comment, arguments --------------------------------------------------------


def test_create_events_only_with_show_expanded_events(db: changestream.EmbeddedDatabase) -> None:
    with pytest.warns(UserWarning, match="table 'Later' does not exist"):
        later = db.table("Later").watch(show_expanded_events=True)
    with (
        db.watch(show_expanded_events=True) as expanded,
        db.watch() as plain,
        later as table,
    ):
        db.execute_ddl("CREATE TABLE Later (K INT64 NOT NULL, S STRING(10)) PRIMARY KEY (K)")
        db.execute_ddl("CREATE TABLE Other (K INT64 NOT NULL) PRIMARY KEY (K)")
        with db.transaction() as tx:
            tx.insert("Later", ["K", "S"], [[1, "x"]])
        created, other, inserted = take(expanded, 3)
        (plain_insert,) = take(plain, 1)
        table_created, table_insert = take(table, 2)
        assert nothing_more(table)
    assert created["operationType"] == "create"
    assert created["ns"] == {"db": "shop", "coll": "Later"}
    assert created["nsType"] == "collection"
    assert created["operationDescription"] == {
        "columns": [
            {"name": "K", "type": {"code": "INT64"}},
            {"name": "S", "type": {"code": "STRING"}},
        ],
        "primaryKey": ["K"],
    }
    assert "txnNumber" not in created and "lsid" not in created
    assert other["ns"]["coll"] == "Other"
    assert inserted["operationType"] == plain_insert["operationType"] == "insert"
    assert table_created["_id"] == created["_id"]
    assert table_insert["_id"] == inserted["_id"]


def test_comment_is_kept_and_arguments_are_checked(db: changestream.EmbeddedDatabase) -> None:
    with db.watch(comment={"app": "billing", "run": 7}) as cursor:
        assert cursor.comment == {"app": "billing", "run": 7}
    with db.watch() as cursor:
        assert cursor.comment is None
    bad: list[tuple[dict[str, Any], str]] = [
        ({"comment": object()}, "comment must be a JSON value"),
        ({"show_expanded_events": 1}, "show_expanded_events must be True or False"),
        ({"null_as_missing": "yes"}, "null_as_missing must be True or False"),
        ({"fullDocument": "updateLookup"}, "unknown argument(s) 'fullDocument'"),
    ]
    for arguments, message in bad:
        with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
            db.watch(**arguments)


def test_remote_watch_has_the_same_fidelity(db: changestream.EmbeddedDatabase) -> None:
    db.ensure_watch_stream()
    with serving({"shop": db}) as running:
        remote = changestream.connect(f"http://127.0.0.1:{running.server.port}/shop")
        try:
            with remote.watch(
                [{"$project": {"op": "$operationType", "desc": "$updateDescription"}}],
                show_expanded_events=True,
                comment="remote",
            ) as cursor:
                assert cursor.comment == "remote"
                db.execute_ddl("CREATE TABLE Later (K INT64 NOT NULL) PRIMARY KEY (K)")
                with db.transaction() as tx:
                    tx.insert("Docs", ["Id", "A"], [[1, [1, 2, 3]]])
                with db.transaction() as tx:
                    tx.update("Docs", ["Id", "A"], [[1, [1, 2]]])
                db.execute_ddl("ALTER TABLE Docs DROP COLUMN J")
                with db.transaction() as tx:
                    tx.update("Docs", ["Id", "N"], [[1, 5]])
                created, inserted, updated, modified, after_drop = take(cursor, 5)
        finally:
            remote.close()
    assert [created["op"], inserted["op"], updated["op"]] == ["create", "insert", "update"]
    assert updated["desc"]["truncatedArrays"] == [{"field": "A", "newSize": 2}]
    assert modified["op"] == "modify" and after_drop["desc"]["removedFields"] == ["J"]


def test_a_remote_handle_commits_under_its_own_session(
    db: changestream.EmbeddedDatabase,
) -> None:
    db.ensure_watch_stream()
    with serving({"shop": db}) as running:
        url = f"http://127.0.0.1:{running.server.port}/shop"
        first, second = changestream.connect(url), changestream.connect(url)
        try:
            assert len({first.session_id, second.session_id, db.session_id}) == 3
            with db.watch() as cursor:
                for remote, base in ((first, 1), (second, 10)):
                    with remote.transaction() as tx:
                        tx.insert("Items", COLUMNS, [[base, "a", 1], [base + 1, "b", 2]])
                with second.transaction() as tx:  # DML: a server-side transaction
                    tx.execute_update("UPDATE Items SET N = 0 WHERE Id IN (1, 2)")
                events = take(cursor, 6)
        finally:
            first.close()
            second.close()
    sessions = [e["lsid"]["id"] for e in events]
    assert sessions == [first.session_id] * 2 + [second.session_id] * 4
    with pytest.raises(InvalidArgument, match="session_id must be a UUID"):
        db.transaction(session_id="not-a-uuid")
