"""DEFAULT (expression) on columns, in CREATE TABLE and ALTER TABLE ADD COLUMN: constants of
every type, and CURRENT_TIMESTAMP(), CURRENT_DATE() and GENERATE_UUID() evaluated for each new
row, whether the row is written by a mutation or by DML, embedded or through the server; and
the change stream records the value each row got."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream import DataChangeRecord
from changestream.ddl.defaults import parse_default
from changestream.ddl.literals import default_literal
from changestream.embedded.database import store_of
from changestream.types import ColumnType
from tests.conftest import OpenDb

TABLE = (
    "CREATE TABLE T (K INT64 NOT NULL, "
    "Created TIMESTAMP NOT NULL DEFAULT (CURRENT_TIMESTAMP()), "
    "Id STRING(36) DEFAULT (GENERATE_UUID()), "
    "Day DATE DEFAULT (CURRENT_DATE()), "
    "D DATE DEFAULT (DATE '2020-01-02'), "
    "N NUMERIC DEFAULT (NUMERIC '-1.5'), "
    "F FLOAT64 DEFAULT (-2.5e1), "
    "B BYTES(10) DEFAULT (b'ab'), "
    "J JSON DEFAULT (JSON '{\"a\": [1, 2]}'), "
    "A ARRAY<INT64> DEFAULT ([1, 2]), "
    "S STRING(MAX) DEFAULT ('it\\'s'), "
    "V INT64) PRIMARY KEY (K)"
)
STREAM = "CREATE CHANGE STREAM CS FOR ALL OPTIONS (value_capture_type = 'NEW_ROW')"
CONSTANTS = {
    "D": dt.date(2020, 1, 2),
    "N": decimal.Decimal("-1.5"),
    "F": -25.0,
    "B": b"ab",
    "J": {"a": [1, 2]},
    "A": [1, 2],
    "S": "it's",
}


@pytest.fixture
def database(open_db: OpenDb, tmp_path: Path) -> changestream.Database:
    db = open_db(str(tmp_path / "defaults.db"))
    db.execute_ddl([TABLE, STREAM])
    return db


def inserted_values(db: changestream.Database) -> dict[int, dict[str, Any]]:
    """Each inserted row's new_values in the change stream since its creation, by key."""
    (partition,) = db.partitions("CS")
    start, end = partition.start_timestamp, dt.datetime.now(dt.UTC)
    found: dict[int, dict[str, Any]] = {}
    for record in db.read_change_stream("CS", start, end, partition.token):
        if isinstance(record, DataChangeRecord) and record.mod_type == "INSERT":
            for mod in record.mods:
                found[int(mod.keys["K"])] = mod.new_values
    return found


def test_rows_left_without_a_value_get_the_default_by_mutation_and_by_dml(
    database: changestream.Database,
) -> None:
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    with database.transaction() as tx:
        tx.insert("T", ["K"], [[1], [2]])
        tx.insert_or_update("T", ["K", "V"], [[3, 30]])
    with database.transaction() as tx:
        tx.execute_update("INSERT INTO T (K) VALUES (4), (5)")
        tx.execute_update("INSERT INTO T (K, S, F) VALUES (6, 'mine', 2.0)")
    after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    names = ["K", "Created", "Id", "Day", *CONSTANTS]
    rows = {row[0]: dict(zip(names, row, strict=True)) for row in database.read("T", None, names)}
    assert sorted(rows) == [1, 2, 3, 4, 5, 6]
    for key, row in rows.items():
        assert before <= row["Created"] <= after, key
        assert uuid.UUID(row["Id"]).version == 4, key
        assert row["Day"] in (before.date(), after.date()), key
        expected = dict(CONSTANTS, S="mine", F=2.0) if key == 6 else CONSTANTS
        assert {name: row[name] for name in CONSTANTS} == expected, key
    assert len({row["Id"] for row in rows.values()}) == 6  # evaluated per row
    # The change stream holds the value each row got, in the JSON form of its type.
    recorded = inserted_values(database)
    for key, row in rows.items():
        assert recorded[key]["Id"] == row["Id"]
        assert recorded[key]["Created"] == row["Created"].strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert recorded[key]["N"] == "-1.5" and recorded[key]["B"] == "YWI="
    assert recorded[6]["F"] == 2.0 and isinstance(recorded[6]["F"], float)


def test_a_generated_default_fills_new_rows_only(database: changestream.Database) -> None:
    with database.transaction() as tx:
        tx.insert("T", ["K", "Id"], [[1, "given"]])
    with database.transaction() as tx:
        tx.insert_or_update("T", ["K", "V"], [[1, 10], [2, 20]])
        tx.update("T", ["K", "V"], [[1, 11]])
    ids = dict(database.read("T", None, ["K", "Id"]))
    assert ids[1] == "given"  # an existing row keeps its value
    assert uuid.UUID(ids[2])
    with database.transaction() as tx:
        tx.replace("T", ["K", "V"], [[1, 12]])  # a replaced row is a new row
    [(replaced,)] = database.read("T", [[1]], ["Id"])
    assert replaced != "given" and uuid.UUID(replaced)


def test_add_column_with_a_default_fills_existing_rows(
    database: changestream.Database,
) -> None:
    with database.transaction() as tx:
        tx.insert("T", ["K"], [[1], [2], [3]])
    database.execute_ddl(
        [
            "ALTER TABLE T ADD COLUMN Ref STRING(MAX) NOT NULL DEFAULT (GENERATE_UUID())",
            "ALTER TABLE T ADD COLUMN Score FLOAT64 NOT NULL DEFAULT (0.5)",
            "ALTER TABLE T ADD COLUMN Seen TIMESTAMP DEFAULT (TIMESTAMP '2024-05-01T09:00:00Z')",
        ]
    )
    rows = database.read("T", None, ["K", "Ref", "Score", "Seen"])
    assert len({ref for _, ref, _, _ in rows}) == 3
    seen = dt.datetime(2024, 5, 1, 9, tzinfo=dt.UTC)
    assert [(k, score, when) for k, _, score, when in rows] == [
        (1, 0.5, seen),
        (2, 0.5, seen),
        (3, 0.5, seen),
    ]
    with database.transaction() as tx:
        tx.execute_update("INSERT INTO T (K) VALUES (4)")
    [(ref, score)] = database.read("T", [[4]], ["Ref", "Score"])
    assert uuid.UUID(ref) and score == 0.5


def test_defaults_survive_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "reopen.db")
    with changestream.open(path) as db:
        db.execute_ddl([TABLE, STREAM])
    with changestream.open(path) as db:
        columns = {c.name: c for c in store_of(db).catalog().tables["T"].columns}
        assert columns["Created"].default_function == "CURRENT_TIMESTAMP()"
        assert {name: columns[name].default for name in CONSTANTS} == CONSTANTS
        with db.transaction() as tx:
            tx.execute_update("INSERT INTO T (K) VALUES (1)")
        [(n, created)] = db.read("T", [[1]], ["N", "Created"])
        assert n == decimal.Decimal("-1.5") and created.tzinfo is not None


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("X INT64 DEFAULT (CURRENT_TIMESTAMP())", "gives a TIMESTAMP, but column 'X' is INT64"),
        ("X DATE DEFAULT ('2020-13-01')", "expected YYYY-MM-DD"),
        ("X INT64 DEFAULT (1 + 2)", "a DEFAULT must be a literal"),
        ("X NUMERIC DEFAULT ('one')", "'one' is not a number"),
        ("X JSON DEFAULT (JSON '{')", "is not JSON"),
        ("X ARRAY<INT64> DEFAULT (['a'])", "cannot hold str 'a'"),
        ("X INT64 DEFAULT (V)", "a DEFAULT must be a literal"),
    ],
)
def test_a_default_that_does_not_fit_is_refused_and_changes_nothing(
    database: changestream.Database, column: str, message: str
) -> None:
    with pytest.raises(changestream.InvalidArgument, match="DEFAULT") as caught:
        database.execute_ddl(
            ["CREATE TABLE Other (K INT64) PRIMARY KEY (K)", f"ALTER TABLE T ADD COLUMN {column}"]
        )
    assert message in str(caught.value)
    assert [t.name for t in database.tables()] == ["T"]


def test_a_bytes_default_is_its_bytes_escaped_or_not() -> None:
    blob = ColumnType("BYTES")
    assert parse_default(r"b'\xff\x00'", blob, "B").value == b"\xff\x00"
    assert parse_default("b'é'", blob, "B").value == "é".encode()


@pytest.mark.parametrize(
    ("ctype", "value"),
    [
        (ColumnType("INT64"), -7),
        (ColumnType("FLOAT64"), 2.5e-8),
        (ColumnType("FLOAT64"), float("nan")),
        (ColumnType("FLOAT64"), float("-inf")),
        (ColumnType("NUMERIC"), decimal.Decimal("-1.250")),
        (ColumnType("STRING"), "it's a \\ \n ✓"),
        (ColumnType("BOOL"), False),
        (ColumnType("DATE"), dt.date(2024, 2, 29)),
        (ColumnType("TIMESTAMP"), dt.datetime(2024, 5, 1, 9, 0, 0, 250000, tzinfo=dt.UTC)),
        (ColumnType("JSON"), {"k": [1, None, "x'y"]}),
        (ColumnType("BYTES"), b"\x00\xff'\\"),
        (ColumnType("ARRAY", element=ColumnType("STRING")), ["a", None, "b c"]),
        (ColumnType("STRING"), None),
    ],
)
def test_a_value_has_a_literal_that_a_default_reads_back(ctype: ColumnType, value: Any) -> None:
    literal = default_literal(value, ctype)
    assert literal is not None
    read = parse_default(literal, ctype, "C").value
    assert read == value or (read != read and value != value)  # NaN is NaN


def test_a_value_the_type_does_not_take_has_no_literal() -> None:
    assert default_literal("x", ColumnType("INT64")) is None
    assert default_literal(2**64, ColumnType("INT64")) is None
