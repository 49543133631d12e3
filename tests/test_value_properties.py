"""Property tests: through every entry point, a value of every column type either reads back
equal (NaN equal to NaN) or is refused with a changestream error that leaves the database as it
was. Runs against the embedded database and the same database through the server's JSON."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import changestream
from changestream.errors import ChangeStreamError
from tests.conftest import OpenDb
from tests.value_strategies import COLUMN_TYPES, column_name, nan_equal, same, values

KEY_TYPES = [t for t in COLUMN_TYPES if not t.startswith("ARRAY") and t != "JSON"]
SCHEMA = [
    "CREATE TABLE T (K INT64 NOT NULL, "
    + ", ".join(f"{column_name(t)} {t}" for t in COLUMN_TYPES)
    + ") PRIMARY KEY (K)",
    *(f"CREATE TABLE K{column_name(t)} (K {t}, V INT64) PRIMARY KEY (K)" for t in KEY_TYPES),
    "CREATE CHANGE STREAM CS FOR ALL",
]
PROPERTY = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
Write = Callable[[changestream.Database, int, str, Any], None]


def _mutation(op: str) -> Write:
    def write(db: changestream.Database, key: int, column: str, value: Any) -> None:
        with db.transaction() as tx:
            getattr(tx, op)("T", ["K", column], [[key, value]])

    return write


def _dml_insert(db: changestream.Database, key: int, column: str, value: Any) -> None:
    with db.transaction() as tx:
        tx.execute_update(f"INSERT INTO T (K, {column}) VALUES (@k, @v)", {"k": key, "v": value})


def _dml_update(db: changestream.Database, key: int, column: str, value: Any) -> None:
    with db.transaction() as tx:
        tx.execute_update(f"UPDATE T SET {column} = @v WHERE K = @k", {"k": key, "v": value})


WRITES: dict[str, Write] = {
    "insert": _mutation("insert"),
    "update": _mutation("update"),
    "insert_or_update": _mutation("insert_or_update"),
    "replace": _mutation("replace"),
    "dml_insert": _dml_insert,
    "dml_update": _dml_update,
}
#: Writes that need the row to exist already.
UPDATES = frozenset({"update", "dml_update"})
_keys = itertools.count(1)


@pytest.fixture
def database(open_db: OpenDb, tmp_path: Path) -> changestream.Database:
    db = open_db(str(tmp_path / "values.db"))
    db.execute_ddl(SCHEMA)
    return db


@PROPERTY
@given(ctype=st.sampled_from(COLUMN_TYPES), how=st.sampled_from(sorted(WRITES)), value=values)
# Values that once came back changed: a NaN selected as text, nanoseconds cut off.
@example(ctype="FLOAT64", how="insert", value=math.nan)
@example(ctype="FLOAT64", how="dml_update", value=-math.inf)
@example(ctype="TIMESTAMP", how="insert", value="2024-01-01T00:00:00.123456789Z")
def test_a_written_value_reads_back_equal_or_is_refused(
    database: changestream.Database, ctype: str, how: str, value: Any
) -> None:
    key, column = next(_keys), column_name(ctype)
    if how in UPDATES:
        with database.transaction() as tx:
            tx.insert("T", ["K"], [[key]])
    before = database.read_snapshot("T")
    try:
        WRITES[how](database, key, column, value)
    except ChangeStreamError:
        after = database.read_snapshot("T")
        # No commit at all: the rows, and so the change log, are as they were.
        assert after.read_timestamp == before.read_timestamp, (how, column, value)
        assert nan_equal(after.rows, before.rows), (how, column, value)
        return
    [(read,)] = database.read("T", [[key]], [column])
    assert same(read, value, ctype), (how, column, value, read)
    [[selected]] = database.execute_sql(f"SELECT {column} FROM T WHERE K = @k", {"k": key})
    assert same(selected, value, ctype), (how, column, value, selected)


@PROPERTY
@given(ctype=st.sampled_from(KEY_TYPES), value=values, dml=st.booleans())
def test_a_key_of_any_value_reads_back_by_that_key_or_is_refused(
    database: changestream.Database, ctype: str, value: Any, dml: bool
) -> None:
    table = f"K{column_name(ctype)}"
    before = database.read_snapshot(table)
    try:
        with database.transaction() as tx:
            if dml:
                tx.execute_update(f"INSERT INTO {table} (K, V) VALUES (@k, 1)", {"k": value})
            else:
                tx.insert_or_update(table, ["K", "V"], [[value, 1]])
    except ChangeStreamError:
        after = database.read_snapshot(table)
        assert after.read_timestamp == before.read_timestamp, (ctype, value)
        assert nan_equal(after.rows, before.rows), (ctype, value)
        return
    except changestream.AlreadyExists:
        return
    [(read, _)] = database.read(table, [[value]])
    assert same(read, value, ctype), (ctype, value, read)
    with database.transaction() as tx:
        tx.delete(table, [[value]])
    assert database.read(table, [[value]]) == []


@PROPERTY
@given(ctype=st.sampled_from(COLUMN_TYPES), value=values)
def test_a_sql_parameter_of_any_value_runs_or_is_refused(
    database: changestream.Database, ctype: str, value: Any
) -> None:
    column = column_name(ctype)
    with contextlib.suppress(ChangeStreamError):
        list(database.execute_sql(f"SELECT K FROM T WHERE {column} = @v", {"v": value}))
    with contextlib.suppress(ChangeStreamError):
        list(database.execute_sql("SELECT @v", {"v": value}))


@PROPERTY
@given(
    start=values,
    token=st.none() | st.text(max_size=30) | values,
    heartbeat=st.sampled_from([1000, 300_000, 999, 10**30, 2.5, "1000", None, True]),
    options=st.none() | values,
)
def test_read_function_arguments_of_any_value_are_served_or_refused(
    database: changestream.Database, start: Any, token: Any, heartbeat: Any, options: Any
) -> None:
    end = dt.datetime.now(dt.UTC)
    with contextlib.suppress(ChangeStreamError):
        list(database.read_change_stream("CS", start, end, token, heartbeat, options))
    with contextlib.suppress(ChangeStreamError):
        list(
            database.execute_sql(
                "SELECT ChangeRecord FROM READ_CS(@s, @e, @t, @h)",
                {"s": start, "e": end, "t": token, "h": heartbeat},
            )
        )


GOOD = {
    "BOOL": True,
    "INT64": -(2**63),
    "FLOAT64": float("nan"),
    "NUMERIC": decimal.Decimal("-99999999999999999999999999999.999999999"),
    "STRING(MAX)": "a\x00é😀",
    "BYTES(MAX)": b"\x00\xff",
    "DATE": dt.date(1, 1, 1),
    "TIMESTAMP": dt.datetime(1, 1, 1, tzinfo=dt.UTC),
    "JSON": {"a": [1, 2.5, None, True, "x"], "b": {}},
}


@pytest.mark.parametrize("how", sorted(WRITES))
def test_a_value_of_every_type_is_accepted_by_every_write(
    database: changestream.Database, how: str
) -> None:
    """The accepting side of the property above, for an edge value of each type."""
    for ctype in COLUMN_TYPES:
        value = GOOD[ctype] if ctype in GOOD else [GOOD[ctype[len("ARRAY<") : -1]], None]
        key, column = next(_keys), column_name(ctype)
        if how in UPDATES:
            with database.transaction() as tx:
                tx.insert("T", ["K"], [[key]])
        WRITES[how](database, key, column, value)
        [(read,)] = database.read("T", [[key]], [column])
        assert same(read, value, ctype), (ctype, value, read)
