"""Issue 14's reproducers: bad input gets a changestream error, never a crash, a hang, a
silently changed value or an unreadable table."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import math
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream.codecs import to_json_value
from changestream.embedded.database import store_of
from changestream.errors import InvalidArgument, NotFound, ResourceExhausted
from changestream.store.database import Store
from changestream.types import ColumnType

SCHEMA = [
    "CREATE TABLE T (K INT64 NOT NULL, TS TIMESTAMP, S STRING(MAX), F FLOAT64, N NUMERIC, "
    "J JSON, A ARRAY<INT64>, B BYTES(MAX), D DATE) PRIMARY KEY (K)",
    "CREATE TABLE S (K STRING(MAX) NOT NULL, V INT64) PRIMARY KEY (K)",
    "CREATE CHANGE STREAM CS FOR ALL",
]
UTC = dt.UTC


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    with changestream.open(str(tmp_path / "bad.db")) as database:
        database.execute_ddl(SCHEMA)
        yield database


def all_rows(db: changestream.EmbeddedDatabase) -> dict[str, list[tuple[Any, ...]]]:
    """Every table read three ways (read, SQL, a fresh SQLite check), proving it is readable."""
    rows = {name: db.read(name) for name in ("T", "S")}
    for name in rows:
        assert len(list(db.execute_sql(f"SELECT * FROM {name}"))) == len(rows[name])
    with sqlite3.connect(db.path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    return rows


def records(db: changestream.EmbeddedDatabase, start: int) -> list[dict[str, Any]]:
    """The data change records since ``start``, as their JSON mods."""
    token = db.partitions("CS")[0].token
    found = db.read_change_stream("CS", start, store_of(db).now(), token)
    return [m for r in found if isinstance(r, changestream.DataChangeRecord) for m in r.mods]


def refused(db: changestream.EmbeddedDatabase, call: Callable[[], object]) -> str:
    """Run ``call``, which must raise InvalidArgument (or ResourceExhausted, for a spent
    budget) and leave every table as it was."""
    before = all_rows(db)
    with pytest.raises((InvalidArgument, ResourceExhausted)) as caught:
        call()
    assert all_rows(db) == before
    return str(caught.value)


def insert(db: changestream.EmbeddedDatabase, columns: list[str], row: list[Any]) -> None:
    with db.transaction() as tx:
        tx.insert("T", columns, [row])


# --- a committed value made the table unreadable ---


@pytest.mark.parametrize(
    "moment",
    [
        dt.datetime(1, 1, 1, tzinfo=UTC),
        dt.datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_timestamps_across_spanners_range_round_trip(
    db: changestream.EmbeddedDatabase, moment: dt.datetime
) -> None:
    start = store_of(db).now()
    insert(db, ["K", "TS"], [1, moment])
    assert db.read("T", columns=["TS"]) == [(moment,)]
    assert list(db.execute_sql("SELECT K FROM T WHERE TS = @t", {"t": moment})) == [[1]]
    [mod] = records(db, start)
    assert mod.new_values["TS"] == moment.strftime(f"{moment.year:04d}-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(
    "text", ["0000-12-31T23:59:59Z", "0001-01-01T00:30:00+01:00", "9999-12-31T23:00:00-01:00"]
)
def test_timestamps_outside_the_range_are_refused_at_write_time(
    db: changestream.EmbeddedDatabase, text: str
) -> None:
    message = refused(db, lambda: insert(db, ["K", "TS"], [1, text]))
    assert "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z" in message


# --- hangs ---


def test_backtracking_sql_is_stopped_by_the_parse_time_limit(tmp_path: Path) -> None:
    limits = changestream.SqlLimits(parse_seconds=0.5)
    with changestream.open(str(tmp_path / "limits.db"), sql_limits=limits) as db:
        began = time.monotonic()
        with pytest.raises(ResourceExhausted, match="parsing the SQL statement took too long"):
            db.execute_sql("SELECT * FROM T JOIN " + "S T JOIN " * 20 + "S")
        assert time.monotonic() - began < 2


def test_size_and_nesting_limits_are_checked_before_parsing(
    db: changestream.EmbeddedDatabase,
) -> None:
    with pytest.raises(InvalidArgument, match="nests brackets 401 deep; the limit is 100"):
        db.execute_sql("SELECT CAST(" + "T(" * 400)
    with pytest.raises(InvalidArgument, match="characters long; the limit is 1000000"):
        db.execute_sql("SELECT 1" + " " * 1_000_000)
    with pytest.raises(InvalidArgument, match="nested too deeply"):
        db.execute_sql("SELECT " + "NOT " * 5000 + "1")


def test_a_long_query_is_stopped_by_the_execution_time_limit(tmp_path: Path) -> None:
    limits = changestream.SqlLimits(execute_seconds=0.2)
    with changestream.open(str(tmp_path / "slow.db"), sql_limits=limits) as db:
        endless = (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
        )
        began = time.monotonic()
        with pytest.raises(ResourceExhausted, match="execute_seconds"):
            db.execute_sql(endless)
        assert time.monotonic() - began < 2


def test_sql_limits_must_be_a_sql_limits(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="sql_limits must be a SqlLimits"):
        changestream.open(str(tmp_path / "x.db"), sql_limits={"parse_seconds": 1})  # type: ignore[arg-type]


# --- exceptions that were not changestream errors ---


def test_lone_surrogates_are_refused(db: changestream.EmbeddedDatabase) -> None:
    assert "lone surrogate" in refused(db, lambda: insert(db, ["K", "S"], [1, "\ud800"]))
    assert "lone surrogate" in refused(db, lambda: db.execute_sql("SELECT * \ud800"))
    with pytest.raises(InvalidArgument):
        db.execute_ddl("CREATE TABLE \ud800 (K INT64) PRIMARY KEY (K)")

    def dml() -> None:
        with db.transaction() as tx:
            tx.execute_update("INSERT INTO S (K, V) VALUES (@k, 1)", {"k": "a\udfffb"})

    assert "lone surrogate" in refused(db, dml)
    assert "lone surrogate" in refused(db, lambda: insert(db, ["K", "J"], [1, {"\ud800": 1}]))


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("SELECT * FROM T WHERE K = @k", {"k": -(2**63) - 1}),
        ("SELECT * FROM T WHERE K = @k", {"k": 10**40}),
        ("SELECT * FROM T WHERE F = @k", {"k": [1, 10**40]}),
        ("SELECT ChangeRecord FROM READ_CS(@s, NULL, NULL, 1000)", {"s": 10**30}),
        ("SELECT ChangeRecord FROM READ_CS(1000000000000000000000000, NULL, NULL, 1000)", None),
    ],
)
def test_out_of_range_numbers_are_refused(
    db: changestream.EmbeddedDatabase, sql: str, params: dict[str, Any] | None
) -> None:
    refused(db, lambda: list(db.execute_sql(sql, params)))


def test_out_of_range_numbers_in_mutations_and_the_read_function(
    db: changestream.EmbeddedDatabase,
) -> None:
    assert "FLOAT64" in refused(db, lambda: insert(db, ["K", "F"], [1, -(10**400)]))
    assert "INT64 range" in refused(db, lambda: insert(db, ["K"], [2**63]))
    assert "9999-12-31" in refused(db, lambda: list(db.read_change_stream("CS", 10**30)))
    assert "digits" in refused(db, lambda: insert(db, ["K", "N"], [1, decimal.Decimal("1e30")]))
    assert "digits" in refused(db, lambda: insert(db, ["K", "N"], [1, decimal.Decimal("1e-10")]))


def test_deeply_nested_parameters_are_refused(db: changestream.EmbeddedDatabase) -> None:
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    assert "nested deeper than 100" in refused(
        db, lambda: list(db.execute_sql("SELECT * FROM T WHERE J = @j", {"j": deep}))
    )
    assert "nested deeper than 100" in refused(db, lambda: insert(db, ["K", "J"], [1, deep]))


def update(db: changestream.EmbeddedDatabase, dml: str, params: dict[str, Any]) -> None:
    with db.transaction() as tx:
        tx.execute_update(dml, params)


@pytest.mark.parametrize(
    ("dml", "params", "message"),
    [
        ("UPDATE T SET A = @a WHERE K = 1", {"a": 5}, "ARRAY<INT64> cannot hold int"),
        ("UPDATE T SET A = @a WHERE K = 1", {"a": "[1]"}, "ARRAY<INT64> cannot hold str"),
        ("UPDATE T SET A = @a WHERE K = 1", {"a": b"\xff"}, "ARRAY<INT64> cannot hold bytes"),
        ("UPDATE T SET A = @a WHERE K = 1", {"a": [decimal.Decimal(1)]}, "cannot hold Decimal"),
        ("UPDATE T SET A = 5 WHERE K = 1", {}, "cannot hold"),
        ("UPDATE T SET A = 'x' WHERE K = 1", {}, "cannot hold"),
        ("UPDATE T SET S = X'ff' WHERE K = 1", {}, "STRING(MAX) cannot hold bytes"),
        ("UPDATE T SET TS = 'soon' WHERE K = 1", {}, "must be an RFC 3339 timestamp"),
        ("UPDATE T SET F = 'x' WHERE K = 1", {}, "FLOAT64 cannot hold str"),
        ("INSERT INTO S (K, V) VALUES (@k, 1)", {"k": [1]}, "STRING(MAX) cannot hold list"),
        ("INSERT INTO S (K, V) VALUES (@k, 1)", {"k": b"\xff"}, "STRING(MAX) cannot hold bytes"),
        ("INSERT INTO S (K, V) VALUES ('a', @v)", {"v": "12"}, "INT64 cannot hold str"),
        ("INSERT INTO S (K, V) VALUES ('a', @v)", {"v": object()}, "cannot hold object"),
        ("SELECT 1 FROM T WHERE J = @j", {"j": [decimal.Decimal(1), {}]}, "Decimal"),
    ],
)
def test_wrong_types_in_dml_and_parameters_are_refused(
    db: changestream.EmbeddedDatabase, dml: str, params: dict[str, Any], message: str
) -> None:
    insert(db, ["K"], [1])
    if dml.startswith("SELECT"):
        assert message in refused(db, lambda: list(db.execute_sql(dml, params)))
    else:
        assert message in refused(db, lambda: update(db, dml, params))


# --- values changed without a word ---


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.0, 2.0**53])
def test_float64_keeps_nan_and_infinities(db: changestream.EmbeddedDatabase, value: float) -> None:
    """Through mutations, DML and the change stream (-0.0 may come back as 0.0, its equal)."""
    start = store_of(db).now()
    insert(db, ["K", "F"], [1, value])
    update(db, "UPDATE T SET F = @f WHERE K = 1", {"f": value})
    [(stored,)] = db.read("T", columns=["F"])
    assert stored == value or (math.isnan(stored) and math.isnan(value))
    mods = records(db, start)
    assert mods[0].new_values["F"] == to_json_value(ColumnType("FLOAT64"), value)


def test_float64_refuses_integers_it_would_round(db: changestream.EmbeddedDatabase) -> None:
    assert "not exactly representable" in refused(
        db, lambda: insert(db, ["K", "F"], [1, 2**53 + 1])
    )
    insert(db, ["K", "F"], [1, 2**53])
    assert db.read("T", columns=["F"]) == [(float(2**53),)]


@pytest.mark.parametrize(
    "value",
    [
        {"a": math.nan},
        [math.inf],
        {"d": dt.date(2020, 1, 1)},
        {"t": dt.time(1, 2)},
        {"ts": dt.datetime(2020, 1, 1, tzinfo=UTC)},
        {"n": decimal.Decimal(1)},
        {1: "int key"},
        (1, 2),
    ],
)
def test_json_refuses_values_it_would_change(db: changestream.EmbeddedDatabase, value: Any) -> None:
    assert "JSON" in refused(db, lambda: insert(db, ["K", "J"], [1, value]))


@pytest.mark.parametrize(
    ("columns", "row"),
    [(["K"], ["１２"]), (["K"], ["12"]), (["K", "N"], [1, "12"]), (["K", "N"], [1, 1.5])],
)
def test_int64_and_numeric_refuse_strings_and_floats(
    db: changestream.EmbeddedDatabase, columns: list[str], row: list[Any]
) -> None:
    message = refused(db, lambda: insert(db, columns, row))
    assert f"column {columns[-1]!r}" in message and type(row[-1]).__name__ in message


def test_an_unexpected_exception_is_logged_once_and_raised(
    db: changestream.EmbeddedDatabase,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Store, "_read", broken)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="a bug"):
            db.read("T")
    with pytest.raises(changestream.NotFound):
        db.execute_sql("SELECT * FROM Missing")
    [logged] = [r for r in caplog.records if r.name == "changestream"]
    assert "unexpected RuntimeError in Store.read" in logged.getMessage()
    assert logged.exc_info is not None


def test_sql_the_sqlite_renderer_cannot_handle_is_refused(
    db: changestream.EmbeddedDatabase,
) -> None:
    """Found by the fuzz test: b'' parses but sqlglot cannot render it for SQLite."""
    assert "cannot be run on SQLite" in refused(
        db, lambda: update(db, "INSERT INTO T (K, B) SELECT 1, b'' FROM S", {})
    )
    # A stray backtick (read as an alias) once made text SQLite's tokenizer refused; names now
    # go to SQLite in backticks, and what is wrong is the table that is not there.
    with pytest.raises(NotFound, match="no such table: x"):
        list(db.execute_sql("SELECT * FROM x  ` WHERE K > 1"))


def test_a_long_dml_statement_is_stopped_and_changes_nothing(tmp_path: Path) -> None:
    limits = changestream.SqlLimits(execute_seconds=0.2)
    with changestream.open(str(tmp_path / "slow_dml.db"), sql_limits=limits) as db:
        db.execute_ddl(SCHEMA)
        with db.transaction() as tx:
            tx.insert("T", ["K"], [[k] for k in range(2, 40)])
        huge = "INSERT INTO S (K, V) SELECT 'z', COUNT(*) FROM T a, T b, T c, T d, T e, T f"
        began = time.monotonic()
        message = refused(db, lambda: update(db, huge, {}))
        assert "execute_seconds" in message and "the transaction was rolled back" in message
        assert time.monotonic() - began < 3


@pytest.mark.parametrize(
    ("column", "text"),
    [
        ("D", "20240101"),
        ("D", "2024-W01-1"),
        ("D", "２０２４-01-01"),
        ("TS", "２０２４-01-01T00:00:00Z"),
    ],
)
def test_dates_and_timestamps_as_text_take_one_exact_form(
    db: changestream.EmbeddedDatabase, column: str, text: str
) -> None:
    refused(db, lambda: insert(db, ["K", column], [1, text]))


def test_a_parameter_named_by_a_non_integer_number_is_refused(
    db: changestream.EmbeddedDatabase,
) -> None:
    """Found by the fuzz test (seed 6)."""
    message = refused(db, lambda: list(db.execute_sql("SELECT K FROM T WHERE S LIKE @1e400", {})))
    assert "@1e400 is not a name or a number" in message


def test_text_literals_in_dml_are_stored_in_their_columns_form(
    db: changestream.EmbeddedDatabase,
) -> None:
    """So a key written by DML is found by a typed lookup, and SQL compares like with like."""
    db.execute_ddl("CREATE TABLE P (K TIMESTAMP NOT NULL, D DATE, N NUMERIC) PRIMARY KEY (K)")
    update(
        db, "INSERT INTO P (K, D, N) VALUES ('2020-01-01T05:00:00+05:00', '2020-01-02', '1e2')", {}
    )
    moment = dt.datetime(2020, 1, 1, tzinfo=UTC)
    assert db.read("P", [[moment]]) == [(moment, dt.date(2020, 1, 2), decimal.Decimal(100))]
    found = db.execute_sql("SELECT K FROM P WHERE N = @n", {"n": decimal.Decimal(100)})
    assert list(found) == [[moment]]
    assert "not a number" in refused(
        db, lambda: update(db, "UPDATE P SET N = 'abc' WHERE true", {})
    )


def test_dml_expressions_must_give_text_columns_their_stored_form(
    db: changestream.EmbeddedDatabase,
) -> None:
    insert(db, ["K", "D"], [1, dt.date(2020, 1, 1)])
    update(db, "UPDATE T SET D = CONCAT('2020-01-0', '3') WHERE K = 1", {})
    assert db.read("T", columns=["D"]) == [(dt.date(2020, 1, 3),)]
    message = refused(
        db,
        lambda: update(db, "UPDATE T SET TS = CONCAT('2021-01-01', 'T00:00:00Z') WHERE K = 1", {}),
    )
    assert "is not in its stored form '2021-01-01T00:00:00.000000Z'" in message


# --- what the first fixes left: a NaN selected as text, nanoseconds, steps, lazy bugs ---


def test_a_nan_selected_through_sql_comes_back_as_a_float(
    db: changestream.EmbeddedDatabase,
) -> None:
    insert(db, ["K", "F", "S"], [1, math.nan, "NaN"])
    for sql in (
        "SELECT F, S FROM T",
        "SELECT t.F AS g, t.S FROM T AS t JOIN T AS u ON t.K = u.K",
        "SELECT MAX(F), S FROM T GROUP BY S",
        "SELECT COALESCE(F, 0.0), S FROM T",
        "WITH w AS (SELECT F, S FROM T) SELECT * FROM w UNION ALL SELECT F, S FROM T",
    ):
        for f, s in db.execute_sql(sql):
            assert isinstance(f, float) and math.isnan(f), sql
            assert s == "NaN", sql  # a STRING holding the same text stays text
    [[k, f, s]] = db.execute_sql("SELECT K, F, S FROM T WHERE F = 'NaN'")
    assert (k, s) == (1, "NaN") and math.isnan(f)


@pytest.mark.parametrize(
    "value",
    [
        "2024-01-01T00:00:00.123456789Z",
        "2024-01-01T00:00:00.0000001Z",
        pytest.param("pandas", id="pandas-nanoseconds"),
    ],
)
def test_timestamps_finer_than_microseconds_are_refused_not_truncated(
    db: changestream.EmbeddedDatabase, value: Any
) -> None:
    if value == "pandas":
        pandas = pytest.importorskip("pandas")
        value = pandas.Timestamp("2024-01-01T00:00:00.123456789Z")
    for write in (
        lambda: insert(db, ["K", "TS"], [1, value]),
        lambda: update(db, "INSERT INTO T (K, TS) VALUES (1, @t)", {"t": value}),
    ):
        assert "more precision than microseconds" in refused(db, write)
    with pytest.raises(InvalidArgument, match="more precision than microseconds"):
        db.read_change_stream("CS", value)
    # Trailing zeros carry no precision: the same instant, accepted.
    insert(db, ["K", "TS"], [1, "2024-01-01T00:00:00.123456000Z"])
    assert db.read("T", columns=["TS"]) == [(dt.datetime(2024, 1, 1, 0, 0, 0, 123456, UTC),)]


def test_a_statement_is_stopped_by_the_step_limit(tmp_path: Path) -> None:
    limits = changestream.SqlLimits(max_steps=200_000)
    counting = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000) "
        "SELECT max(x) FROM c"
    )
    with changestream.open(str(tmp_path / "steps.db"), sql_limits=limits) as db:
        db.execute_ddl(SCHEMA)
        with pytest.raises(ResourceExhausted, match=r"more than 200,000 steps.*max_steps"):
            db.execute_sql(counting)
        assert list(db.execute_sql("SELECT 1")) == [[1]]  # the next statement has its own
        # Steps count over every batch of a query read lazily, not per batch.
        rows = db.execute_sql(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) "
            "SELECT x FROM c"
        )
        with pytest.raises(ResourceExhausted, match="max_steps"):
            list(rows)
        insert(db, ["K"], [1])
        message = refused(db, lambda: update(db, f"UPDATE T SET F = ({counting}) WHERE K = 1", {}))
        assert "max_steps" in message


def test_a_bug_met_while_rows_are_read_lazily_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Lazy results outlive the call that returned them, so they report bugs themselves."""
    from changestream.errors import reported_items

    def broken() -> Iterator[int]:
        yield 1
        raise KeyError("a bug")

    with caplog.at_level(logging.ERROR, logger="changestream"):
        for _ in range(2):
            items = reported_items(broken(), "reading test rows")
            assert next(items) == 1
            with pytest.raises(KeyError):
                next(items)
    [logged] = [r for r in caplog.records if "reading test rows" in r.getMessage()]
    assert "unexpected KeyError" in logged.getMessage() and logged.exc_info is not None
    refusal = reported_items(iter([InvalidArgument("bad input")]), "x")
    assert isinstance(next(refusal), InvalidArgument)  # items are passed on, not raised
