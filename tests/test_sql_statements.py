"""Parsing of user SQL text: read-function calls, SELECT and DML translated for SQLite."""

from __future__ import annotations

import datetime as dt
import decimal
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from changestream.errors import InvalidArgument
from changestream.sql.statements import (
    DmlStatement,
    ReadFunctionCall,
    SelectQuery,
    parse_statement,
)

# --- the seed's change stream queries, verbatim ---

GOOGLESQL_WORKFLOW = [
    (
        """SELECT ChangeRecord FROM READ_SingersNameStream (
  start_timestamp => "2022-05-01T09:00:00Z",
  end_timestamp => NULL,
  partition_token => NULL,
  heartbeat_milliseconds => 10000
);""",
        "2022-05-01T09:00:00Z",
        None,
    ),
    *[
        (
            f"""SELECT ChangeRecord FROM READ_SingersNameStream (
  start_timestamp => "2022-05-01T09:00:01Z",
  end_timestamp => NULL,
  partition_token => "child_token_{n}",
  heartbeat_milliseconds => 10000
);""",
            "2022-05-01T09:00:01Z",
            f"child_token_{n}",
        )
        for n in (1, 2, 3)
    ],
    (
        """SELECT ChangeRecord FROM READ_SingersNameStream(
  start_timestamp => "2022-05-01T09:30:15Z",
  end_timestamp => NULL,
  partition_token => "child_token_4",
  heartbeat_milliseconds => 10000
);""",
        "2022-05-01T09:30:15Z",
        "child_token_4",
    ),
]

POSTGRESQL_WORKFLOW = [
    (
        """SELECT *
FROM "spanner"."read_json_SingersNameStream" (
  '2022-05-01T09:00:00Z',
  NULL,
  NULL,
  10000,
  NULL
) ;""",
        "2022-05-01T09:00:00Z",
        None,
    ),
    *[
        (
            f"""SELECT *
FROM "spanner"."read_json_SingersNameStream" (
  '2022-05-01T09:00:01Z',
  NULL,
  'child_token_{n}',
  10000,
  NULL
);""",
            "2022-05-01T09:00:01Z",
            f"child_token_{n}",
        )
        for n in (1, 2, 3)
    ],
    (
        """SELECT *
FROM "spanner"."read_json_SingersNameStream" (
  '2022-05-01T09:30:15Z',
  NULL,
  'child_token_4',
  10000,
  NULL
);""",
        "2022-05-01T09:30:15Z",
        "child_token_4",
    ),
]

# The Java templates, concatenated exactly as the seed's string expressions produce them.
GOOGLESQL_TEMPLATE = (
    "SELECT ChangeRecord FROM READ_SingersNameStream"
    + "("
    + "   start_timestamp => @startTimestamp,"
    + "   end_timestamp => @endTimestamp,"
    + "   partition_token => @partitionToken,"
    + "   heartbeat_milliseconds => @heartbeatMillis"
    + ")"
)
POSTGRESQL_TEMPLATE = (
    'SELECT * FROM "spanner"."read_json_SingersNameStream"' + "($1, $2, $3, $4, null)"
)

START = dt.datetime(2022, 5, 1, 9, 0, tzinfo=dt.UTC)


def read_call(sql: str, params: Any = None) -> ReadFunctionCall:
    statement = parse_statement(sql, params)
    assert isinstance(statement, ReadFunctionCall)
    return statement


def select(sql: str, params: Any = None, **kwargs: Any) -> SelectQuery:
    statement = parse_statement(sql, params, **kwargs)
    assert isinstance(statement, SelectQuery)
    return statement


def dml(sql: str, params: Any = None) -> DmlStatement:
    statement = parse_statement(sql, params)
    assert isinstance(statement, DmlStatement)
    return statement


def rejects(sql: str, match: str, params: Any = None, **kwargs: Any) -> None:
    with pytest.raises(InvalidArgument, match=match):
        parse_statement(sql, params, **kwargs)


@pytest.mark.parametrize(("sql", "start", "token"), GOOGLESQL_WORKFLOW)
def test_seed_googlesql_workflow_queries(sql: str, start: str, token: str | None) -> None:
    assert read_call(sql) == ReadFunctionCall(
        dialect="googlesql",
        stream="SingersNameStream",
        start_timestamp=start,
        end_timestamp=None,
        partition_token=token,
        heartbeat_milliseconds=10000,
        read_options=None,
    )


@pytest.mark.parametrize(("sql", "start", "token"), POSTGRESQL_WORKFLOW)
def test_seed_postgresql_workflow_queries(sql: str, start: str, token: str | None) -> None:
    assert read_call(sql) == ReadFunctionCall(
        dialect="postgresql",
        stream="SingersNameStream",
        start_timestamp=start,
        end_timestamp=None,
        partition_token=token,
        heartbeat_milliseconds=10000,
        read_options=None,
    )


def test_seed_googlesql_template_with_bound_parameters() -> None:
    params = {
        "startTimestamp": START,
        "endTimestamp": None,
        "partitionToken": "child_token_1",
        "heartbeatMillis": 10000,
    }
    call = read_call(GOOGLESQL_TEMPLATE, params)
    assert call.dialect == "googlesql"
    assert call.stream == "SingersNameStream"
    assert call.start_timestamp is START  # passed through unconverted
    assert (call.end_timestamp, call.partition_token) == (None, "child_token_1")
    assert (call.heartbeat_milliseconds, call.read_options) == (10000, None)


@pytest.mark.parametrize(
    "params",
    [
        {"p1": START, "p2": None, "p3": "child_token_1", "p4": 10000},
        {"1": START, "2": None, "3": "child_token_1", "4": 10000},
        [START, None, "child_token_1", 10000],
        (START, None, "child_token_1", 10000),
    ],
)
def test_seed_postgresql_template_with_bound_parameters(params: Any) -> None:
    call = read_call(POSTGRESQL_TEMPLATE, params)
    assert call.dialect == "postgresql"
    assert call.stream == "SingersNameStream"
    assert call.start_timestamp is START
    assert (call.end_timestamp, call.partition_token) == (None, "child_token_1")
    assert (call.heartbeat_milliseconds, call.read_options) == (10000, None)


def test_googlesql_named_arguments_in_any_order_with_optional_ones_left_out() -> None:
    call = read_call(
        "SELECT ChangeRecord FROM READ_Orders(heartbeat_milliseconds => 2000, "
        "start_timestamp => '2022-05-01T09:00:00Z')"
    )
    assert call.stream == "Orders"
    assert call.start_timestamp == "2022-05-01T09:00:00Z"
    assert (call.end_timestamp, call.partition_token, call.read_options) == (None, None, None)
    assert call.heartbeat_milliseconds == 2000


def test_googlesql_positional_and_mixed_arguments() -> None:
    call = read_call(
        "SELECT ChangeRecord FROM READ_S(@start, '2022-05-02T00:00:00Z', 'tok', 1000, NULL)",
        {"start": "2022-05-01T00:00:00Z"},
    )
    assert (call.start_timestamp, call.end_timestamp) == (
        "2022-05-01T00:00:00Z",
        "2022-05-02T00:00:00Z",
    )
    assert (call.partition_token, call.heartbeat_milliseconds) == ("tok", 1000)
    mixed = read_call("SELECT ChangeRecord FROM READ_S('x', heartbeat_milliseconds => 5)")
    assert (mixed.start_timestamp, mixed.heartbeat_milliseconds) == ("x", 5)


def test_read_prefix_is_case_insensitive_and_stream_case_is_kept() -> None:
    assert read_call("select changerecord from read_MyStream('x', null, null, 1000)").stream == (
        "MyStream"
    )
    assert read_call("SELECT * FROM Read_lower_case('x', NULL, NULL, 1000)").stream == (
        "lower_case"
    )
    unquoted = read_call(
        "SELECT * FROM spanner.read_json_SingersNameStream('x', null, null, 1, null)"
    )
    assert (unquoted.dialect, unquoted.stream) == ("postgresql", "SingersNameStream")


def test_stream_names_that_collide_with_sqlglot_functions() -> None:
    # sqlglot knows DuckDB's READ_CSV / READ_PARQUET; those must still be read functions.
    for name in ("Csv", "Parquet"):
        call = read_call(f"SELECT ChangeRecord FROM READ_{name}('x', NULL, NULL, 1000)")
        assert (call.stream, call.start_timestamp) == (name, "x")


def test_argument_value_forms() -> None:
    call = read_call(
        "SELECT ChangeRecord FROM READ_S(start_timestamp => TIMESTAMP '2022-05-01T09:00:00Z', "
        "heartbeat_milliseconds => -5, read_options => ['x'])"
    )
    assert call.start_timestamp == "2022-05-01T09:00:00Z"
    assert call.heartbeat_milliseconds == -5
    assert call.read_options is not None  # passed through for the caller to reject
    pg = read_call(
        "SELECT * FROM spanner.read_json_S('2022-05-01T09:00:00Z'::timestamptz, NULL, NULL, "
        "1000, 'opt')"
    )
    assert (pg.start_timestamp, pg.read_options) == ("2022-05-01T09:00:00Z", "opt")


def test_read_function_detection_uses_the_syntax_tree() -> None:
    # The text mentions READ_ functions, but nothing is selected FROM one.
    query = select("SELECT 'READ_S(1, 2)' AS s, x FROM READ_LOG WHERE y = 'read_json_x'")
    assert "READ_LOG" in query.sql


@pytest.mark.parametrize(
    ("sql", "params", "match"),
    [
        (
            "SELECT ChangeRecord FROM READ_S(start_timestamp => 'x', colour => 1, "
            "heartbeat_milliseconds => 1)",
            None,
            "no argument 'colour'; allowed: start_timestamp, end_timestamp, partition_token, "
            "heartbeat_milliseconds, read_options",
        ),
        (
            "SELECT ChangeRecord FROM READ_S(heartbeat_milliseconds => 1000)",
            None,
            "requires the start_timestamp argument",
        ),
        (
            "SELECT ChangeRecord FROM READ_S(start_timestamp => 'x', end_timestamp => NULL)",
            None,
            "requires the heartbeat_milliseconds argument",
        ),
        (
            "SELECT ChangeRecord FROM READ_S(start_timestamp => @start, "
            "heartbeat_milliseconds => 1000)",
            {"other": 1},
            "no value given for query parameter @start",
        ),
        (
            "SELECT ChangeRecord FROM READ_S(start_timestamp => @start, "
            "heartbeat_milliseconds => 1000)",
            None,
            "no value given for query parameter @start",
        ),
        (
            "SELECT ChangeRecord FROM READ_S(start_timestamp => 'x', start_timestamp => 'y', "
            "heartbeat_milliseconds => 1)",
            None,
            "argument start_timestamp given twice",
        ),
        (
            "SELECT ChangeRecord FROM READ_S(start_timestamp => 'x', 1000)",
            None,
            "positional arguments must come before named ones",
        ),
        (
            "SELECT ChangeRecord FROM READ_S('x', NULL, NULL, 1000, NULL, 6)",
            None,
            "takes at most 5 arguments",
        ),
        (
            "SELECT ChangeRecord FROM READ_S(CURRENT_TIMESTAMP(), NULL, NULL, 1000)",
            None,
            "start_timestamp must be a literal or a query parameter",
        ),
        (
            "SELECT ChangeRecord FROM READ_S('x', NULL, NULL, 1000) WHERE true",
            None,
            "must have exactly the form SELECT ChangeRecord FROM READ_<stream>",
        ),
        (
            "SELECT ChangeRecord, 1 FROM READ_S('x', NULL, NULL, 1000)",
            None,
            "must have exactly the form",
        ),
        (
            'SELECT * FROM "spanner"."read_json_S"($1, $2, $3, $4)',
            ["x", None, None, 1000],
            r"spanner.read_json_S takes exactly 5 positional arguments .*got 4",
        ),
        (
            "SELECT * FROM spanner.read_json_S('x', NULL, NULL, 1000, NULL, NULL)",
            None,
            "takes exactly 5 positional arguments",
        ),
        (
            "SELECT * FROM spanner.read_json_S($1, $2, $3, $4, NULL)",
            ["x", None, None],
            r"no value given for query parameter \$4",
        ),
        (
            "SELECT * FROM spanner.read_json_S($1, $2, $3, $4, NULL)",
            {"p1": "x"},
            r"no value given for query parameter \$2",
        ),
        (
            "SELECT ChangeRecord FROM READ_S(@start, NULL, NULL, 1000)",
            ["x"],
            "named parameter @start needs params given as a mapping",
        ),
    ],
)
def test_read_function_errors(sql: str, params: Any, match: str) -> None:
    rejects(sql, match, params)


# --- SELECT over user tables, run against a real SQLite database ---


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(":memory:")
    db.executescript(
        """
        CREATE TABLE Singers (
            SingerId INTEGER PRIMARY KEY, Name TEXT, Active INTEGER, Birth TEXT,
            Updated TEXT, Score TEXT, Info TEXT, Photo BLOB
        );
        CREATE TABLE Albums (SingerId INTEGER, AlbumId INTEGER, Title TEXT,
            PRIMARY KEY (SingerId, AlbumId));
        CREATE TABLE _cs_secret (x INTEGER);
        INSERT INTO Singers VALUES
            (1, 'Marc', 1, '1970-01-02', '2022-05-01T09:00:00.000000Z', '1.50',
             '{"a":1,"b":[2]}', x'0102'),
            (2, 'Catalina', 0, '1985-06-07', '2022-05-01T10:30:00.250000Z', '10.00',
             '{"a":2}', x'ff'),
            (3, 'Alice', 1, '1990-12-31', '2022-05-02T00:00:00.000000Z', '7', NULL, NULL);
        INSERT INTO Albums VALUES (1, 1, 'Total Junk'), (1, 2, 'Go, Go, Go'), (2, 1, 'Green');
        """
    )
    yield db
    db.close()


def run(conn: sqlite3.Connection, query: SelectQuery) -> list[tuple[Any, ...]]:
    return conn.execute(query.sql, query.params).fetchall()


def test_select_with_named_parameters(conn: sqlite3.Connection) -> None:
    query = select(
        'SELECT `SingerId`, Name FROM Singers WHERE Active = @active AND Name != "Zed" '
        "ORDER BY SingerId",
        {"active": True},
    )
    assert query.params == (1,)
    assert run(conn, query) == [(1, "Marc"), (3, "Alice")]


def test_names_googlesql_allows_but_sqlite_reserves_are_quoted(conn: sqlite3.Connection) -> None:
    conn.execute('CREATE TABLE Log (K INTEGER PRIMARY KEY, "index" TEXT, "nothing" INTEGER)')
    conn.execute("INSERT INTO Log VALUES (1, 'a', 2), (2, 'b', 3)")
    query = select("SELECT `index`, nothing FROM Log AS transaction WHERE nothing > @n", {"n": 2})
    assert run(conn, query) == [("b", 3)]


def test_parameters_are_numbered_in_text_order(conn: sqlite3.Connection) -> None:
    # sqlglot walks the tree breadth-first, which would put @ids before @name.
    query = select(
        "SELECT SingerId FROM Singers WHERE (Name = @name OR Name = @other) "
        "AND SingerId IN (@a, @b) AND SingerId != @a ORDER BY SingerId",
        {"name": "Marc", "other": "Alice", "a": 3, "b": 1},
    )
    assert query.sql.count("?") == 5
    assert query.params == ("Marc", "Alice", 3, 1, 3)
    assert run(conn, query) == [(1,)]


def test_parameter_values_are_converted_to_storage_form(conn: sqlite3.Connection) -> None:
    cases: list[tuple[str, Any, list[tuple[Any, ...]]]] = [
        ("Birth = @v", dt.date(1985, 6, 7), [(2,)]),
        ("Updated = @v", dt.datetime(2022, 5, 1, 10, 30, 0, 250000, tzinfo=dt.UTC), [(2,)]),
        (
            "Updated = @v",
            dt.datetime(2022, 5, 1, 11, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            [(1,)],
        ),
        ("Score = @v", decimal.Decimal("10.00"), [(2,)]),
        ("Info = @v", {"b": [2], "a": 1}, [(1,)]),
        ("Photo = @v", b"\xff", [(2,)]),
        ("Active = @v", False, [(2,)]),
    ]
    for condition, value, expected in cases:
        query = select(f"SELECT SingerId FROM Singers WHERE {condition}", {"v": value})
        assert run(conn, query) == expected, (condition, value, query.params)
    assert select("SELECT @v", {"v": [3, {"z": 1, "a": None}]}).params == ('[3,{"a":null,"z":1}]',)


def test_timestamp_literals_and_casts_compare_as_stored_text(conn: sqlite3.Connection) -> None:
    literal = select(
        "SELECT SingerId FROM Singers WHERE Updated > TIMESTAMP '2022-05-01T09:00:00Z' "
        "ORDER BY SingerId"
    )
    assert run(conn, literal) == [(2,), (3,)]
    cast = select(
        "SELECT SingerId FROM Singers WHERE Updated >= CAST(@t AS TIMESTAMP) ORDER BY SingerId",
        {"t": "2022-05-01T10:30:00.25Z"},
    )
    assert cast.params == ("2022-05-01T10:30:00.250000Z",)
    assert run(conn, cast) == [(2,), (3,)]
    pg = select(
        'SELECT "SingerId" FROM "Singers" WHERE "Updated" <= $1::timestamptz',
        ["2022-05-01T10:00:00+01:00"],
    )
    assert pg.params == ("2022-05-01T09:00:00.000000Z",)
    assert run(conn, pg) == [(1,)]


def test_select_in_postgresql(conn: sqlite3.Connection) -> None:
    by_sequence = select(
        'SELECT "Name" FROM "Singers" WHERE "SingerId" = $2 OR "SingerId" = $1 ORDER BY 1',
        [3, 2],
    )
    assert by_sequence.params == (2, 3)
    assert run(conn, by_sequence) == [("Alice",), ("Catalina",)]
    # A mapping with p<n> keys: GoogleSQL would read $1 as a column, so PostgreSQL is chosen.
    by_mapping = select("SELECT Name FROM Singers WHERE SingerId = $1", {"p1": 1})
    assert run(conn, by_mapping) == [("Marc",)]
    forced = select('SELECT "Name" FROM "Singers" WHERE "SingerId" = 2', dialect="postgresql")
    assert run(conn, forced) == [("Catalina",)]
    # Without the hint, GoogleSQL reads "Name" as a string literal.
    assert run(conn, select('SELECT "Name" FROM Singers WHERE SingerId = 2')) == [("Name",)]


def test_joins_subqueries_unions_and_aggregates(conn: sqlite3.Connection) -> None:
    query = select(
        "WITH counts AS (SELECT SingerId, COUNT(*) AS n FROM Albums GROUP BY SingerId) "
        "SELECT s.Name, c.n FROM Singers AS s JOIN counts AS c ON c.SingerId = s.SingerId "
        "WHERE s.SingerId IN (SELECT SingerId FROM Albums WHERE Title LIKE @pattern) "
        "UNION ALL SELECT 'total', COUNT(*) FROM Albums ORDER BY 1",
        {"pattern": "%Go%"},
    )
    assert run(conn, query) == [("Marc", 2), ("total", 3)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM _cs_secret",
        "SELECT * FROM _CS_SECRET",
        "SELECT * FROM `_cs_secret`",
        'SELECT * FROM "_cs_secret"',
        "SELECT * FROM main._cs_secret",
        "SELECT * FROM Singers WHERE SingerId IN (SELECT x FROM _cs_secret)",
        "SELECT * FROM Singers JOIN _cs_secret ON true",
        "WITH a AS (SELECT * FROM _cs_secret) SELECT * FROM a",
        "SELECT * FROM sqlite_master",
        "SELECT * FROM SQLITE_SCHEMA",
        "SELECT * FROM pragma_table_info('_cs_secret')",
    ],
)
def test_system_tables_are_unreachable(sql: str) -> None:
    rejects(sql, "is not accessible from SQL")


def test_dml_cannot_touch_system_tables() -> None:
    rejects("INSERT INTO _cs_secret (x) VALUES (1)", "'_cs_secret' is not accessible")
    rejects("DELETE FROM Singers WHERE SingerId IN (SELECT x FROM _cs_secret)", "not accessible")


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE t (a INT64) PRIMARY KEY (a)",
        "CREATE CHANGE STREAM s FOR ALL",
        "DROP TABLE Singers",
        "ALTER TABLE Singers ADD COLUMN x INT64",
        "PRAGMA table_info(Singers)",
        "ATTACH DATABASE 'other.db' AS other",
        "VACUUM",
    ],
)
def test_non_query_statements_are_rejected(sql: str) -> None:
    rejects(sql, "DDL goes through execute_ddl")


@pytest.mark.parametrize(
    ("sql", "params", "match"),
    [
        ("SELECT 1; SELECT 2", None, "one statement at a time"),
        ("UPDATE t SET a = 1 WHERE true; DELETE FROM t WHERE true", None, "one statement"),
        ("", None, "empty SQL statement"),
        ("  -- only a comment\n ;", None, "empty SQL statement"),
        ("SELECT FROM WHERE", None, r"cannot parse SQL: syntax error at line 1, column"),
        ("SELECT 'unterminated", None, "cannot parse SQL: cannot read the statement"),
        ("SELECT * FROM Singers WHERE SingerId = ?", [1], "use @name .* or \\$n"),
        ("SELECT * FROM Singers WHERE SingerId = :id", {"id": 1}, "use @name"),
        ("SELECT @missing", {"other": 1}, "no value given for query parameter @missing"),
        ("SELECT $3", [1, 2], r"no value given for query parameter \$3"),
        ("SELECT @v", {"v": dt.datetime(2022, 1, 1)}, "must be timezone-aware"),
        ("SELECT 1", "not params", "params must be a mapping or a sequence, got str"),
        ("SELECT 1", 5, "params must be a mapping or a sequence, got int"),
        ("SELECT TIMESTAMP 'yesterday'", None, "must be an RFC 3339 timestamp"),
    ],
)
def test_statement_errors(sql: str, params: Any, match: str) -> None:
    rejects(sql, match, params)


def test_trailing_semicolon_and_comments_are_one_statement(conn: sqlite3.Connection) -> None:
    for sql in ("SELECT 1;", "SELECT 1; -- trailing comment", "-- leading\nSELECT 1 ;\n"):
        assert run(conn, select(sql)) == [(1,)]


def test_unknown_dialect_is_rejected() -> None:
    rejects("SELECT 1", "dialect must be one of", dialect="mysql")


# --- DML, run against a real SQLite database ---


def test_insert_values_returns_the_new_rows(conn: sqlite3.Connection) -> None:
    statement = dml(
        "INSERT INTO Singers (SingerId, Name, Active, Updated) "
        "VALUES (@id, @name, @active, @updated), (11, 'Bea', FALSE, NULL)",
        {"id": 10, "name": "Zoe", "active": True, "updated": START},
    )
    assert (statement.kind, statement.table) == ("INSERT", "Singers")
    assert statement.columns == ("SingerId", "Name", "Active", "Updated")
    assert statement.sql.endswith(" RETURNING *")
    assert (statement.select_old_sql, statement.select_old_params) == (None, ())
    assert statement.params == (10, "Zoe", 1, "2022-05-01T09:00:00.000000Z")
    rows = conn.execute(statement.sql, statement.params).fetchall()
    assert [row[:5] for row in rows] == [
        (10, "Zoe", 1, None, "2022-05-01T09:00:00.000000Z"),
        (11, "Bea", 0, None, None),
    ]


def test_insert_without_into_and_insert_select(conn: sqlite3.Connection) -> None:
    plain = dml("INSERT Albums (SingerId, AlbumId, Title) VALUES (3, 1, @t)", {"t": "Blue"})
    assert conn.execute(plain.sql, plain.params).fetchall() == [(3, 1, "Blue")]
    copied = dml(
        "INSERT INTO Albums (SingerId, AlbumId, Title) "
        "SELECT SingerId, AlbumId + 10, Title FROM Albums WHERE SingerId = @s",
        {"s": 1},
    )
    assert copied.columns == ("SingerId", "AlbumId", "Title")
    rows = conn.execute(copied.sql, copied.params).fetchall()
    assert sorted(rows) == [(1, 11, "Total Junk"), (1, 12, "Go, Go, Go")]


def test_update_select_old_then_update(conn: sqlite3.Connection) -> None:
    statement = dml(
        "UPDATE Singers s SET s.Name = @name, Active = NOT Active "
        "WHERE s.SingerId >= @low AND Name != @skip",
        {"name": "Renamed", "low": 2, "skip": "Alice"},
    )
    assert (statement.kind, statement.table, statement.columns) == (
        "UPDATE",
        "Singers",
        ("Name", "Active"),
    )
    assert statement.params == ("Renamed", 2, "Alice")
    assert statement.select_old_params == (2, "Alice")
    assert statement.select_old_sql is not None
    assert statement.select_old_sql.startswith("SELECT * FROM Singers")
    old = conn.execute(statement.select_old_sql, statement.select_old_params).fetchall()
    new = conn.execute(statement.sql, statement.params).fetchall()
    assert [row[:3] for row in old] == [(2, "Catalina", 0)]
    assert [row[:3] for row in new] == [(2, "Renamed", 1)]
    assert conn.execute("SELECT Name FROM Singers WHERE SingerId = 2").fetchone() == ("Renamed",)


def test_update_where_true_changes_every_row(conn: sqlite3.Connection) -> None:
    statement = dml("UPDATE Albums SET Title = UPPER(Title) WHERE true")
    assert statement.select_old_sql is not None
    assert len(conn.execute(statement.select_old_sql).fetchall()) == 3
    assert sorted(r[2] for r in conn.execute(statement.sql).fetchall()) == [
        "GO, GO, GO",
        "GREEN",
        "TOTAL JUNK",
    ]


@pytest.mark.parametrize(
    "sql", ["DELETE FROM Albums WHERE SingerId = @s", "DELETE Albums WHERE SingerId = @s"]
)
def test_delete_returns_the_deleted_rows(conn: sqlite3.Connection, sql: str) -> None:
    statement = dml(sql, {"s": 1})
    assert (statement.kind, statement.table, statement.columns) == ("DELETE", "Albums", ())
    assert statement.sql.startswith("DELETE FROM Albums")
    assert statement.select_old_sql is not None
    old = conn.execute(statement.select_old_sql, statement.select_old_params).fetchall()
    gone = conn.execute(statement.sql, statement.params).fetchall()
    assert sorted(old) == sorted(gone) == [(1, 1, "Total Junk"), (1, 2, "Go, Go, Go")]
    assert conn.execute("SELECT COUNT(*) FROM Albums").fetchone() == (1,)


def test_postgresql_dml(conn: sqlite3.Connection) -> None:
    update = dml(
        'UPDATE "Albums" SET "Title" = $1 WHERE "SingerId" = $2 AND "AlbumId" = $3',
        ["New", 2, 1],
    )
    assert update.select_old_params == (2, 1)
    assert update.select_old_sql is not None
    assert conn.execute(update.select_old_sql, update.select_old_params).fetchall() == [
        (2, 1, "Green")
    ]
    assert conn.execute(update.sql, update.params).fetchall() == [(2, 1, "New")]
    delete = dml("DELETE FROM Albums WHERE SingerId = $1", {"p1": 2})
    assert conn.execute(delete.sql, delete.params).fetchall() == [(2, 1, "New")]


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        ("INSERT INTO Singers VALUES (1, 'x')", "INSERT needs an explicit column list"),
        ("INSERT INTO Singers (SingerId, Name) VALUES (1)", "lists 2 columns but a row has 1"),
        ("UPDATE Singers SET Name = 'x'", "UPDATE needs a WHERE clause"),
        ("DELETE FROM Singers", "DELETE needs a WHERE clause"),
        ("DELETE Singers", "DELETE needs a WHERE clause"),
        (
            "INSERT INTO Singers (SingerId) VALUES (1) ON CONFLICT (SingerId) DO NOTHING",
            r"upserts \(ON CONFLICT, INSERT OR ...\) are not supported",
        ),
        ("INSERT OR IGNORE INTO Singers (SingerId) VALUES (1)", "upserts"),
        ("INSERT OR UPDATE INTO Singers (SingerId) VALUES (1)", "INSERT OR UPDATE .* not supp"),
        ("INSERT INTO Singers (SingerId) VALUES (1) RETURNING *", "RETURNING is not supported"),
        ("DELETE FROM Singers WHERE true RETURNING SingerId", "RETURNING is not supported"),
        ("DELETE FROM Singers WHERE true THEN RETURN *", "THEN RETURN is not supported"),
        (
            "UPDATE Singers SET Name = a.Title FROM Albums a WHERE a.SingerId = Singers.SingerId",
            "multi-table UPDATE",
        ),
        (
            "DELETE FROM Singers USING Albums WHERE Albums.SingerId = Singers.SingerId",
            "multi-table DELETE",
        ),
        ("UPDATE main.Singers SET Name = 'x' WHERE true", "qualified table names"),
        (
            "WITH x AS (SELECT 1 AS id) DELETE FROM Singers WHERE SingerId IN (SELECT id FROM x)",
            "WITH is not supported in INSERT, UPDATE or DELETE",
        ),
        ("UPDATE Singers SET Name = 'x' WHERE true LIMIT 1", "UPDATE with LIMIT"),
    ],
)
def test_dml_errors(sql: str, match: str) -> None:
    rejects(sql, match)
