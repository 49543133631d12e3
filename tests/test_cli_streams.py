"""``changestream streams ...`` and ``changestream discover``, on a file and on a server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

import changestream
from changestream.cli import main
from changestream.datastream import StreamCatalog, StreamDefinition

SCHEMA = [
    "CREATE TABLE Orders (Id INT64 NOT NULL, Item STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE TABLE Users (Name STRING(100) NOT NULL, Region STRING(10) NOT NULL)"
    " PRIMARY KEY (Region, Name)",
    "CREATE CHANGE STREAM Everything FOR ALL"
    " OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
    "CREATE CHANGE STREAM Diffs FOR Orders OPTIONS (value_capture_type = 'NEW_VALUES')",
]


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "250"})


def ok(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.output


def fails(*args: str) -> str:
    """The error message of a command that must fail the way users see it: exit 2, one
    ``error:`` line, no traceback."""
    result = run(*args)
    assert result.exit_code == 2, (args, result.output)
    assert result.output.startswith("error: "), result.output
    assert "Traceback" not in result.output
    return result.output


@pytest.fixture(params=["file", "url"])
def target(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, changestream.EmbeddedDatabase]]:
    """(what --db is given, the database it reaches)."""
    path = str(tmp_path / "shop.db")
    with changestream.open(path) as db:
        db.execute_ddl(SCHEMA)
        if request.param == "file":
            yield path, db
            return
        databases, url = request.getfixturevalue("served")
        databases.add("shop", db)
        try:
            yield f"{url}/shop", db
        finally:
            databases.remove("shop")


def lines(output: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in output.splitlines()]


def test_lifecycle_through_the_cli(target: tuple[str, changestream.EmbeddedDatabase]) -> None:
    db_arg, db = target
    out = ok(
        "streams", "create", "orders", "--db", db_arg, "--change-stream", "Everything",
        "--destination", "out/events", "--format", "avro", "--replica", "out/replica",
        "--exclude", "Users", "--backfill", "none",
    )  # fmt: skip
    assert out == "created stream orders (Not started), objects: shop_Orders\n"
    ok("streams", "create", "users", "--db", db_arg, "--change-stream", "Everything",
       "--destination", "out2", "--include", "Users,Orders",
       "--replica", "out2/replica", "--replica-dropped-columns", "drop")  # fmt: skip
    listed = lines(ok("streams", "list", "--db", db_arg, "--json"))
    assert [(s["name"], s["state"]) for s in listed] == [
        ("orders", "Not started"),
        ("users", "Not started"),
    ]
    assert listed[0]["definition"]["format"] == "avro"
    assert [s["definition"]["replica_dropped_columns"] for s in listed] == ["keep", "drop"]
    assert listed[0]["definition"]["database"] == db_arg
    table = ok("streams", "list", "--db", db_arg)
    assert "orders" in table and "Not started" in table and "out/replica" in table

    assert ok("streams", "start", "orders", "--db", db_arg) == "stream orders is now Starting\n"
    # The pipeline's part, done here by hand.
    StreamCatalog(db).transition("orders", "started")
    assert "now Draining" in ok("streams", "drain", "orders", "--db", db_arg)
    StreamCatalog(db).transition("orders", "drained")
    assert "now Starting" in ok("streams", "resume", "orders", "--db", db_arg)
    assert "now Paused" in ok("streams", "pause", "orders", "--db", db_arg)
    assert fails("streams", "drain", "orders", "--db", db_arg) == (
        "error: cannot drain stream 'orders': it is Paused; allowed now: start, resume, delete\n"
    )

    described = lines(ok("streams", "describe", "orders", "--db", db_arg, "--json"))[0]
    assert described["state"] == "Paused"
    job = {"state": "NOT_STARTED", "trigger": None, "filter": None, "rows": 0}
    assert described["objects"] == [
        {
            "object": "shop_Orders",
            "table": "Orders",
            "status": "skipped",
            "rows": 0,
            "backfill_job": job,
        }
    ]
    text = ok("streams", "describe", "orders", "--db", db_arg)
    for expected in ("stream orders", "Paused", "shop_Orders", "NOT_STARTED", "out/events (avro)"):
        assert expected in text

    StreamCatalog(db).record_error("orders", "shop_Orders", "disk full", retriable=True)
    errors = lines(ok("streams", "errors", "orders", "--db", db_arg, "--json"))
    assert [(e["object"], e["message"], e["retriable"]) for e in errors] == [
        ("shop_Orders", "disk full", True)
    ]
    assert "disk full" in ok("streams", "errors", "orders", "--db", db_arg)

    assert ok("streams", "delete", "orders", "--db", db_arg) == "deleted stream orders\n"
    assert fails("streams", "describe", "orders", "--db", db_arg) == (
        "error: stream 'orders' does not exist (streams: users)\n"
    )


def test_cli_errors(target: tuple[str, changestream.EmbeddedDatabase]) -> None:
    db_arg, _ = target
    base = ("streams", "create", "s", "--db", db_arg, "--destination", "out")
    assert "captures NEW_VALUES" in fails(*base, "--change-stream", "Diffs")
    assert "table 'Nope' does not exist" in fails(
        *base, "--change-stream", "Everything", "--include", "Nope"
    )
    assert "a stream name is 1 to 63" in fails(
        "streams", "create", "bad name", "--db", db_arg, "--destination", "o",
        "--change-stream", "Everything",
    )  # fmt: skip
    result = run(*base, "--change-stream", "Everything", "--format", "csv")
    assert result.exit_code == 2 and "'csv' is not one of 'json', 'avro'" in result.output
    assert "compression 'gzip' is for JSON files" in fails(
        *base, "--change-stream", "Everything", "--format", "avro", "--compression", "gzip"
    )
    assert "schema_file 'avro' is for JSON files" in fails(
        *base, "--change-stream", "Everything", "--format", "avro", "--schema-file", "avro"
    )
    result = run(*base, "--change-stream", "Everything", "--replica-dropped-columns", "hide")
    assert result.exit_code == 2 and "'hide' is not one of 'keep', 'drop'" in result.output
    with pytest.raises(changestream.InvalidArgument, match="replica_dropped_columns must be"):
        StreamDefinition(
            name="s", database="x.db", change_stream="C", destination="o",
            replica_dropped_columns="hide",
        )  # fmt: skip
    assert "stream 'ghost' does not exist" in fails("streams", "start", "ghost", "--db", db_arg)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.db")
    assert "no database file" in fails("streams", "list", "--db", missing)
    assert "no database file" in fails("discover", missing)


def test_discover(target: tuple[str, changestream.EmbeddedDatabase]) -> None:
    db_arg, _ = target
    found = lines(ok("discover", db_arg, "--json"))
    assert [o["object_name"] for o in found] == ["shop_Orders", "shop_Users"]
    assert found[1]["primary_keys"] == ["Region", "Name"]
    assert found[1]["columns"][0] == {
        "name": "Name",
        "type": "STRING(100)",
        "nullable": False,
        "ordinal_position": 1,
        "is_primary_key": True,
    }
    text = ok("discover", db_arg)
    assert "shop_Users" in text and "primary key Region, Name" in text and "STRING(100)" in text


def test_a_server_url_without_a_name_gets_one(tmp_path: Path) -> None:
    from tests.server_support import serving

    with changestream.open(str(tmp_path / "only.db")) as db:
        db.execute_ddl(SCHEMA)
        with serving({"solo": db}) as running:
            ok("streams", "create", "s", "--db", running.url, "--change-stream", "Everything",
               "--destination", "out")  # fmt: skip
        assert StreamCatalog(db).get("s").definition.database == running.url + "/solo"


def test_help_describes_every_verb() -> None:
    out = ok("streams", "--help")
    for verb in ("create", "list", "describe", "start", "pause", "resume", "drain", "delete"):
        assert verb in out
    assert "pipeline run" in out
    assert "--change-stream" in ok("streams", "create", "--help")
