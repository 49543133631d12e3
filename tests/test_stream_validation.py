"""Datastream-style validation of streams (issue 20): every check PASSED, FAILED or WARNING
with its message; ``--validate-only`` changes nothing, a failed check refuses the request,
``--force`` skips the checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import changestream
from changestream.cli import main
from changestream.clock import now_us
from changestream.datastream import StreamCatalog, StreamDefinition, validation
from changestream.datastream.validation import CheckStatus

SCHEMA = [
    "CREATE TABLE Orders (Id INT64 NOT NULL, Status STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE CHANGE STREAM Whole FOR ALL OPTIONS (value_capture_type = 'NEW_ROW', "
    "retention_period = '1h')",
    "CREATE CHANGE STREAM Diffs FOR ALL",
]


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.chdir(tmp_path)
    with changestream.open("shop.db") as db:
        db.execute_ddl(SCHEMA)
        with db.transaction() as tx:
            tx.insert("Orders", ["Id", "Status"], [[1, "new"], [2, "paid"]])
    yield "shop.db"


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def listed(path: str) -> list[str]:
    with changestream.open(path) as db:
        return [info.name for info in StreamCatalog(db).list()]


def test_validate_only_prints_every_check_and_changes_nothing(shop: str) -> None:
    code, out = cli("streams", "create", "s", "--db", shop, "--change-stream", "Whole",
                    "--destination", "out/events", "--replica", "out/replica",
                    "--validate-only")  # fmt: skip
    assert code == 0, out
    for line in (
        "PASSED   change stream: Whole exists",
        "PASSED   capture type: Whole captures NEW_ROW",
        "PASSED   objects: tables: Orders",
        "PASSED   destination:",
        "PASSED   replica:",
        "PASSED   retention: backfill of 2 rows",
        "passed validation; nothing was changed",
    ):
        assert line in out, out
    assert listed(shop) == [] and not Path("out").exists()


def test_each_failing_check_is_reported_and_refuses(shop: str) -> None:
    Path("blocker").write_text("a file where a directory should be")
    bad = ("streams", "create", "s", "--db", shop, "--destination", "blocker/events",
           "--replica", "blocker/replica")  # fmt: skip
    code, out = cli(*bad, "--change-stream", "Diffs", "--validate-only")
    assert code == 2
    assert "FAILED   capture type: Diffs captures OLD_AND_NEW_VALUES" in out
    assert "FAILED   destination:" in out and "is a file, not a directory" in out
    assert "FAILED   replica:" in out
    code, out = cli(*bad, "--change-stream", "Whole", "--include", "Nope", "--validate-only")
    assert code == 2 and "FAILED   objects: stream 's': table 'Nope' does not exist" in out
    code, out = cli(*bad, "--change-stream", "Whole")
    assert code == 2 and "failed validation (destination:" in out and "--force" in out
    assert listed(shop) == []
    code, out = cli(*bad, "--change-stream", "Whole", "--force")
    assert code == 0 and listed(shop) == ["s"]


def test_start_checks_the_read_position_against_retention(shop: str) -> None:
    with changestream.open(shop) as db:
        catalog = StreamCatalog(db)
        catalog.create(
            StreamDefinition(name="s", database=shop, change_stream="Whole", destination="out")
        )
        two_hours_ago = now_us() - 2 * 3600 * 1_000_000
        catalog.update_progress("s", cdc_start_timestamp=two_hours_ago)
    code, out = cli("streams", "start", "s", "--db", shop, "--validate-only")
    assert code == 2
    assert "FAILED   read position: CDC resumes at" in out and "before the oldest change" in out
    code, out = cli("streams", "start", "s", "--db", shop)
    assert code == 2 and "start of stream 's' failed validation (read position" in out
    with changestream.open(shop) as db:
        assert StreamCatalog(db).get("s").state.value == "Not started"
    code, out = cli("streams", "start", "s", "--db", shop, "--force")
    assert (code, out) == (0, "stream s is now Starting\n")


def test_the_python_api_validates_and_warns(shop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    definition = StreamDefinition(name="s", database=shop, change_stream="Diffs", destination="o")
    with changestream.open(shop) as db:
        catalog = StreamCatalog(db)
        statuses = {c.name: c.status for c in catalog.validate(definition)}
        assert statuses["capture type"] is CheckStatus.FAILED
        with pytest.raises(changestream.FailedPrecondition, match="captures OLD_AND_NEW"):
            catalog.create(definition)
        # A backfill slower than half the retention is a warning, not a refusal.
        monkeypatch.setattr(validation, "BACKFILL_ROWS_PER_SECOND", 0.0001)
        slow = StreamDefinition(name="t", database=shop, change_stream="Whole", destination="o")
        (retention,) = [c for c in catalog.validate(slow) if c.name == "retention"]
        assert retention.status is CheckStatus.WARNING and "expired" in retention.message
        catalog.create(slow)
        assert [info.name for info in catalog.list()] == ["t"]


def test_update_changes_only_what_is_given_and_validates(shop: str) -> None:
    with changestream.open(shop) as db:
        db.execute_ddl("CREATE TABLE Customers (Id INT64 NOT NULL) PRIMARY KEY (Id)")
    create = ("streams", "create", "s", "--db", shop, "--change-stream", "Whole",
              "--destination", "out", "--include", "Orders")  # fmt: skip
    assert cli(*create)[0] == 0
    code, out = cli("streams", "update", "s", "--db", shop, "--include", "Orders,Customers",
                    "--file-rotation-mb", "5", "--validate-only")  # fmt: skip
    assert code == 0 and "PASSED   objects: tables: Customers, Orders" in out
    with changestream.open(shop) as db:
        assert StreamCatalog(db).get("s").definition.include == ("Orders",)  # unchanged
    code, out = cli("streams", "update", "s", "--db", shop, "--include", "Orders,Customers",
                    "--file-rotation-mb", "5")  # fmt: skip
    assert (code, out) == (0, "updated stream s: file_rotation_mb, include\n")
    code, out = cli("streams", "update", "s", "--db", shop, "--include", "Orders,Nope")
    assert code == 2 and "table 'Nope' does not exist" in out
    code, out = cli("streams", "update", "s", "--db", shop, "--schema-file", "avro")
    assert (code, out) == (0, "updated stream s: schema_file\n")
    with changestream.open(shop) as db:
        catalog = StreamCatalog(db)
        definition = catalog.get("s").definition
        assert (definition.include, definition.file_rotation_mb) == (("Orders", "Customers"), 5)
        assert definition.destination == "out" and definition.format == "json"
        assert definition.schema_file == "avro"
        with pytest.raises(changestream.InvalidArgument, match="destination cannot change"):
            catalog.update("s", destination="elsewhere")
        with pytest.raises(changestream.InvalidArgument, match="unexpected keyword"):
            catalog.update("s", colour="red")


def test_cdc_start_strategies_recover_a_stream(shop: str) -> None:
    with changestream.open(shop) as db:
        catalog = StreamCatalog(db)
        catalog.create(
            StreamDefinition(name="s", database=shop, change_stream="Whole", destination="out")
        )
        catalog.transition("s", "start")
        catalog.transition("s", "fail_permanently")
        three_hours_ago = now_us() - 3 * 3600 * 1_000_000
        catalog.update_progress("s", cdc_start_timestamp=three_hours_ago, batch_id=7)
    resume = ("streams", "resume", "s", "--db", shop)
    code, out = cli(*resume, "--cdc-start", "most-recent", "--cdc-start-timestamp", "x")
    assert code == 2 and "not both" in out
    code, out = cli(*resume, "--cdc-start-timestamp", "2001-01-01T00:00:00Z")
    assert code == 2 and "outside the changes kept" in out
    # Failed permanently comes back; the expired position is skipped, and the gap recorded.
    code, out = cli(*resume, "--cdc-start", "next-available")
    assert code == 0 and "is now Starting; CDC carries on from" in out, out
    with changestream.open(shop) as db:
        catalog = StreamCatalog(db)
        progress = catalog.progress("s")
        assert progress.cdc_start_timestamp is not None
        assert progress.cdc_start_timestamp > three_hours_ago + 3600 * 1_000_000  # within 1h
        assert progress.detail["cdc_generation"] == 1 and progress.detail["last_batch_id"] == -1
        (gap,) = catalog.errors("s")
        assert "expired before they were read" in gap.message
        catalog.transition("s", "pause")
    code, out = cli(*resume, "--cdc-start", "most-recent")
    assert (code, out) == (0, "stream s is now Starting; CDC carries on where it was\n")
    code, out = cli("streams", "describe", "s", "--db", shop)
    assert "last recovery" in out and "last recovery  -" not in out
    code, out = cli(*resume, "--cdc-start", "most-recent")
    assert code == 2 and "it is Starting; pause it first" in out
