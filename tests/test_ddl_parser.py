"""Tests for the GoogleSQL DDL parser."""

from __future__ import annotations

import pytest

from changestream.ddl import (
    AlterChangeStream,
    Column,
    CreateChangeStream,
    CreateTable,
    DropChangeStream,
    DropTable,
    StreamOptions,
    StreamTarget,
    Table,
    parse_ddl,
)
from changestream.ddl.schema import DEFAULT_RETENTION_SECONDS, DEFAULT_VALUE_CAPTURE_TYPE
from changestream.errors import DDLError
from changestream.types import ColumnType

SEED_DDL = (
    "CREATE TABLE AccountBalance (AccountId STRING(MAX) NOT NULL, "
    "LastUpdate TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true), "
    "Balance INT64 NOT NULL) PRIMARY KEY (AccountId)"
)


def parse_one(text: str) -> object:
    statements = parse_ddl(text)
    assert len(statements) == 1
    return statements[0]


def parse_error(text: str) -> DDLError:
    with pytest.raises(DDLError) as info:
        parse_ddl(text)
    assert info.value.statement == text
    return info.value


# CREATE TABLE


def test_seed_table() -> None:
    assert parse_ddl(SEED_DDL) == [
        CreateTable(
            Table(
                "AccountBalance",
                (
                    Column("AccountId", ColumnType("STRING"), 1, not_null=True),
                    Column(
                        "LastUpdate",
                        ColumnType("TIMESTAMP"),
                        2,
                        not_null=True,
                        allow_commit_timestamp=True,
                    ),
                    Column("Balance", ColumnType("INT64"), 3, not_null=True),
                ),
                ("AccountId",),
            )
        )
    ]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("BOOL", ColumnType("BOOL")),
        ("INT64", ColumnType("INT64")),
        ("FLOAT64", ColumnType("FLOAT64")),
        ("NUMERIC", ColumnType("NUMERIC")),
        ("STRING(MAX)", ColumnType("STRING")),
        ("STRING(10)", ColumnType("STRING", 10)),
        ("BYTES(MAX)", ColumnType("BYTES")),
        ("BYTES(1024)", ColumnType("BYTES", 1024)),
        ("DATE", ColumnType("DATE")),
        ("TIMESTAMP", ColumnType("TIMESTAMP")),
        ("JSON", ColumnType("JSON")),
        ("ARRAY<INT64>", ColumnType("ARRAY", element=ColumnType("INT64"))),
        ("ARRAY<STRING(MAX)>", ColumnType("ARRAY", element=ColumnType("STRING"))),
        ("ARRAY<BYTES(8)>", ColumnType("ARRAY", element=ColumnType("BYTES", 8))),
        ("array<string(max)>", ColumnType("ARRAY", element=ColumnType("STRING"))),
        ("int64", ColumnType("INT64")),
    ],
)
def test_column_types(source: str, expected: ColumnType) -> None:
    statement = parse_one(f"CREATE TABLE T (k INT64, v {source}) PRIMARY KEY (k)")
    assert statement == CreateTable(
        Table("T", (Column("k", ColumnType("INT64"), 1), Column("v", expected, 2)), ("k",))
    )


def test_keywords_case_insensitive_names_keep_case_and_may_be_backquoted() -> None:
    statement = parse_one(
        "create table `My Table` (`Key Col` string(max) not null, `Order` date, lower int64) "
        "primary key (`Key Col` asc, lower ASC)"
    )
    assert statement == CreateTable(
        Table(
            "My Table",
            (
                Column("Key Col", ColumnType("STRING"), 1, not_null=True),
                Column("Order", ColumnType("DATE"), 2),
                Column("lower", ColumnType("INT64"), 3),
            ),
            ("Key Col", "lower"),
        )
    )


def test_primary_key_order_is_the_declared_order() -> None:
    statement = parse_one("CREATE TABLE T (a INT64, b STRING(5), c BOOL) PRIMARY KEY (c, a)")
    assert isinstance(statement, CreateTable)
    assert statement.table.primary_key == ("c", "a")
    assert [c.ordinal for c in statement.table.columns] == [1, 2, 3]


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("FALSE", False), ("null", False)])
def test_allow_commit_timestamp_values(value: str, expected: bool) -> None:
    statement = parse_one(
        f"CREATE TABLE T (k INT64, ts TIMESTAMP OPTIONS (allow_commit_timestamp = {value})) "
        "PRIMARY KEY (k)"
    )
    assert isinstance(statement, CreateTable)
    assert statement.table.columns[1] == Column(
        "ts", ColumnType("TIMESTAMP"), 2, allow_commit_timestamp=expected
    )


def test_drop_table() -> None:
    assert parse_ddl("DROP TABLE Accounts") == [DropTable("Accounts")]
    assert parse_ddl("drop table `Odd Name`") == [DropTable("Odd Name")]


# CHANGE STREAM statements


def test_create_change_stream_without_for_tracks_nothing() -> None:
    assert parse_one("CREATE CHANGE STREAM S") == CreateChangeStream(
        "S", False, (), StreamOptions()
    )


def test_create_change_stream_for_all() -> None:
    assert parse_one("CREATE CHANGE STREAM S FOR ALL") == CreateChangeStream(
        "S", True, (), StreamOptions()
    )


def test_create_change_stream_targets_and_options() -> None:
    statement = parse_one(
        "CREATE CHANGE STREAM Orders FOR T1, T2(c, `d e`), T3() "
        "OPTIONS (retention_period = '36h', value_capture_type = 'NEW_ROW')"
    )
    assert statement == CreateChangeStream(
        "Orders",
        False,
        (StreamTarget("T1"), StreamTarget("T2", ("c", "d e")), StreamTarget("T3", ())),
        StreamOptions(retention_seconds=36 * 3600, value_capture_type="NEW_ROW"),
    )


@pytest.mark.parametrize(
    ("period", "seconds"),
    [
        ("36h", 129600),
        ("7d", 604800),
        ("3600s", 3600),
        ("90m", 5400),
        ("1h", 3600),
        ("30d", 2592000),
    ],
)
def test_retention_period_units(period: str, seconds: int) -> None:
    statement = parse_one(f'CREATE CHANGE STREAM S FOR ALL OPTIONS (RETENTION_PERIOD = "{period}")')
    assert statement == CreateChangeStream("S", True, (), StreamOptions(retention_seconds=seconds))


@pytest.mark.parametrize("capture", ["OLD_AND_NEW_VALUES", "NEW_VALUES", "NEW_ROW_AND_OLD_VALUES"])
def test_value_capture_types(capture: str) -> None:
    statement = parse_one(f"CREATE CHANGE STREAM S OPTIONS (value_capture_type = '{capture}')")
    assert statement == CreateChangeStream(
        "S", False, (), StreamOptions(value_capture_type=capture)
    )


def test_null_options_mean_defaults() -> None:
    statement = parse_one(
        "CREATE CHANGE STREAM S OPTIONS (retention_period = NULL, value_capture_type = null)"
    )
    assert statement == CreateChangeStream(
        "S", False, (), StreamOptions(DEFAULT_RETENTION_SECONDS, DEFAULT_VALUE_CAPTURE_TYPE)
    )


def test_alter_change_stream_set_for() -> None:
    assert parse_ddl("ALTER CHANGE STREAM S SET FOR ALL") == [
        AlterChangeStream("S", set_for=(True, ()))
    ]
    assert parse_ddl("alter change stream S set for A, B(x), C()") == [
        AlterChangeStream(
            "S",
            set_for=(False, (StreamTarget("A"), StreamTarget("B", ("x",)), StreamTarget("C", ()))),
        )
    ]


def test_alter_change_stream_set_options_only_given() -> None:
    assert parse_ddl("ALTER CHANGE STREAM S SET OPTIONS (retention_period = '2d')") == [
        AlterChangeStream("S", options=StreamOptions(retention_seconds=2 * 86400))
    ]
    assert parse_ddl("ALTER CHANGE STREAM S SET OPTIONS (value_capture_type = NULL)") == [
        AlterChangeStream("S", options=StreamOptions(value_capture_type=DEFAULT_VALUE_CAPTURE_TYPE))
    ]


def test_alter_change_stream_drop_for_all() -> None:
    assert parse_ddl("ALTER CHANGE STREAM S DROP FOR ALL") == [
        AlterChangeStream("S", drop_for_all=True)
    ]


def test_drop_change_stream() -> None:
    assert parse_ddl("DROP CHANGE STREAM S") == [DropChangeStream("S")]


# Statement lists and comments


def test_multiple_statements_empty_statements_and_comments() -> None:
    text = f"""
        -- the seed schema
        {SEED_DDL};;
        /* a block comment
           over two lines; with a semicolon */
        CREATE CHANGE STREAM Balances FOR AccountBalance; -- trailing comment
        DROP CHANGE STREAM Balances /* inline */ ;
    """
    statements = parse_ddl(text)
    assert statements == [
        parse_one(SEED_DDL),
        CreateChangeStream("Balances", False, (StreamTarget("AccountBalance"),), StreamOptions()),
        DropChangeStream("Balances"),
    ]


@pytest.mark.parametrize("text", ["", "  ", ";", " ; ;", "-- only a comment", "/* x */"])
def test_no_statements(text: str) -> None:
    assert parse_ddl(text) == []


# Errors: (input, message substring, the offending token: its last occurrence, "" for the end)

ERRORS = [
    # statement level
    (
        "CREATE VIEW V AS SELECT 1",
        "expected TABLE, INDEX or CHANGE STREAM after CREATE, found 'VIEW'",
        "VIEW",
    ),
    ("SELECT 1", "expected CREATE, ALTER or DROP, found 'SELECT'", "SELECT"),
    (
        "ALTER TABLE T SET OPTIONS (x = 1)",
        "expected RENAME TO, ADD COLUMN, DROP COLUMN or ALTER COLUMN after ALTER TABLE T, "
        "found 'SET'",
        "SET",
    ),
    ("ALTER TABLE T ADD W INT64", "expected COLUMN after ALTER TABLE T ADD, found 'W'", "W"),
    ("CREATE INDEX I ON T", "expected '(', found end of input", ""),
    ("CREATE INDEX I ON T (a, a)", "column 'a' appears twice in index 'I'", "a"),
    ("CREATE UNIQUE TABLE T", "expected INDEX after CREATE UNIQUE", "TABLE"),
    ("ALTER TABLE T ALTER COLUMN c INT64 DEFAULT (1)", "not with ALTER COLUMN", "DEFAULT"),
    ("ALTER TABLE T ADD COLUMN c INT64 DEFAULT (x)", "a DEFAULT must be a literal", "x"),
    ("ALTER TABLE T ADD COLUMN c INT64 DEFAULT (1 + 2)", "a DEFAULT must be a literal", "1"),
    ("ALTER TABLE T ADD COLUMN c INT64 DEFAULT ('1')", "cannot hold str '1'", "'1'"),
    ("ALTER TABLE T ADD COLUMN c BOOL DEFAULT (1)", "cannot hold int 1", "1"),
    ("ALTER TABLE T ADD COLUMN c STRING(2) DEFAULT ('abc')", "longer than 2", "'abc'"),
    ("ALTER TABLE T ADD COLUMN c INT64 DEFAULT (GENERATE_UUID())", "gives a STRING", "GENERATE"),
    ("ALTER TABLE T ADD COLUMN c INT64 DEFAULT ()", "expected an expression in the DEFAULT", ")"),
    ("ALTER TABLE T ADD COLUMN c INT64 DEFAULT (1", "expected ')' closing the DEFAULT", ""),
    ("CREATE INDEX _cs_i ON T (a)", "index name '_cs_i' is reserved", "_cs"),
    ("ALTER INDEX I", "expected TABLE or CHANGE STREAM after ALTER, found 'INDEX'", "INDEX"),
    ("ALTER TABLE T RENAME U", "expected TO, found 'U'", "U"),
    ("ALTER TABLE T RENAME TO _cs_log", "new table name '_cs_log' is reserved", "_cs"),
    ("CREATE CHANGE STREAM _cs_watch FOR ALL", "change stream name '_cs_watch' is reserved", "_cs"),
    ("ALTER CHANGE STREAM _CS_watch DROP FOR ALL", "name '_CS_watch' is reserved", "_CS"),
    ("DROP CHANGE STREAM _cs_watch", "change stream name '_cs_watch' is reserved", "_cs"),
    ("DROP VIEW I", "expected TABLE, INDEX or CHANGE STREAM after DROP, found 'VIEW'", "VIEW"),
    ("CREATE CHANGE T", "expected STREAM, found 'T'", "T"),
    ("DROP TABLE T garbage", "expected ';' or end of input, found 'garbage'", "garbage"),
    ("DROP TABLE A DROP TABLE B", "expected ';' or end of input, found 'DROP'", "DROP TABLE B"),
    ("DROP TABLE", "expected table name, found end of input", ""),
    ("DROP TABLE 'T'", "expected table name, found string 'T'", "'T'"),
    ("DROP TABLE Order", "expected table name, found reserved keyword 'Order'", "Order"),
    # tokens
    ("DROP TABLE `T", "unterminated backquoted name", "`T"),
    ("DROP TABLE ``", "empty backquoted name", "``"),
    ("CREATE CHANGE STREAM S OPTIONS (retention_period = '1h)", "unterminated string", "'1h"),
    ("DROP TABLE T /* never closed", "unterminated /* comment", "/*"),
    ("DROP TABLE T-1", "expected ';' or end of input, found '-'", "-"),
    ("DROP TABLE T+1", "expected ';' or end of input, found '+'", "+"),
    ("DROP TABLE T?1", "unexpected character '?'", "?"),
    ("CREATE TABLE T (k INT64", "expected ',' or ')', found end of input", ""),
    # CREATE TABLE
    ("CREATE TABLE T ()", "table 'T' has no columns", ")"),
    (
        "CREATE TABLE T (a INT64, A BOOL) PRIMARY KEY (a)",
        "duplicate column 'A' in table 'T'",
        "A BOOL",
    ),
    ("CREATE TABLE T (a INT64)", "expected PRIMARY KEY after the columns of table 'T'", ""),
    ("CREATE TABLE T (a INT64) PRIMARY KEY ()", "the primary key of table 'T' has no columns", ")"),
    ("CREATE TABLE T (a INT64) PRIMARY KEY (b)", "column 'b' is not a column of table 'T'", "b)"),
    ("CREATE TABLE T (a INT64) PRIMARY KEY (a, a)", "'a' appears twice in the primary key", "a)"),
    ("CREATE TABLE T (a INT64) PRIMARY KEY (a DESC)", "DESC keys are not supported", "DESC"),
    ("CREATE TABLE T (a JSON) PRIMARY KEY (a)", "'a' of type JSON cannot be a primary key", "a)"),
    (
        "CREATE TABLE T (a ARRAY<INT64>) PRIMARY KEY (a)",
        "column 'a' of type ARRAY<INT64> cannot be a primary key column",
        "a)",
    ),
    ("CREATE TABLE _cs_meta (a INT64) PRIMARY KEY (a)", "table name '_cs_meta' is reserved", "_cs"),
    (
        "CREATE TABLE T (a INT32) PRIMARY KEY (a)",
        "unknown type 'INT32'; expected one of BOOL, I",
        "INT32",
    ),
    ("CREATE TABLE T (a 5) PRIMARY KEY (a)", "expected a column type (BOOL, INT64, ", "5"),
    ("CREATE TABLE T (a ARRAY<ARRAY<INT64>>) PRIMARY KEY (a)", "nested arrays", "ARRAY<INT64>"),
    ("CREATE TABLE T (a ARRAY INT64) PRIMARY KEY (a)", "expected '<' after ARRAY", "INT64"),
    ("CREATE TABLE T (a STRING, b INT64) PRIMARY KEY (a)", "'(' and a length after STRING", ", b"),
    ("CREATE TABLE T (a STRING(0)) PRIMARY KEY (a)", "length must be a positive integer", "0"),
    ("CREATE TABLE T (a BYTES(n)) PRIMARY KEY (a)", "expected a BYTES length (a positive", "n)"),
    ("CREATE TABLE T (a INT64 NOT) PRIMARY KEY (a)", "expected NULL, found ')'", ") P"),
    (
        "CREATE TABLE T (a INT64 OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (a)",
        "allow_commit_timestamp is only allowed on TIMESTAMP columns, not on INT64 column 'a'",
        "allow",
    ),
    (
        "CREATE TABLE T (a TIMESTAMP OPTIONS (foo = 1)) PRIMARY KEY (a)",
        "unknown column option 'foo'; allowed: allow_commit_timestamp",
        "foo",
    ),
    (
        "CREATE TABLE T (a TIMESTAMP OPTIONS (allow_commit_timestamp = 'yes')) PRIMARY KEY (a)",
        "allow_commit_timestamp must be true, false or null, found string 'yes'",
        "'yes'",
    ),
    (
        "CREATE TABLE T (a TIMESTAMP OPTIONS (allow_commit_timestamp = true, "
        "ALLOW_COMMIT_TIMESTAMP = false)) PRIMARY KEY (a)",
        "option 'ALLOW_COMMIT_TIMESTAMP' is given twice",
        "ALLOW",
    ),
    # change streams
    ("CREATE CHANGE STREAM S FOR", "expected table name or ALL, found end of input", ""),
    ("CREATE CHANGE STREAM S FOR A, B, a", "table 'a' is listed twice in the FOR clause", "a"),
    ("CREATE CHANGE STREAM S FOR A(x, X)", "column 'X' of table 'A' is listed twice", "X"),
    ("CREATE CHANGE STREAM S FOR A(x", "expected ',' or ')', found end of input", ""),
    (
        "CREATE CHANGE STREAM S OPTIONS (exclude_everything = true)",
        "unknown change stream option 'exclude_everything'; "
        "allowed: retention_period, value_capture_type, exclude_insert, exclude_update, "
        "exclude_delete, allow_txn_exclusion, exclude_ttl_deletes",
        "exclude",
    ),
    (
        "CREATE CHANGE STREAM S OPTIONS (retention_period = )",
        "expected a value for option 'retention_period', found ')'",
        ")",
    ),
    ("CREATE CHANGE STREAM S OPTIONS ()", "expected option name, found ')'", ")"),
    (
        "CREATE CHANGE STREAM S OPTIONS (retention_period = 36)",
        "retention_period must be a string such as '36h' or '7d', found '36'",
        "36",
    ),
    (
        "CREATE CHANGE STREAM S OPTIONS (value_capture_type = 'NEW_ROWS')",
        "value_capture_type must be one of 'OLD_AND_NEW_VALUES', 'NEW_VALUES', 'NEW_ROW', "
        "'NEW_ROW_AND_OLD_VALUES', found string 'NEW_ROWS'",
        "'NEW_ROWS'",
    ),
    (
        "CREATE CHANGE STREAM S OPTIONS (value_capture_type = 'NEW_ROW', "
        "value_capture_type = NULL)",
        "option 'value_capture_type' is given twice",
        "value_capture_type = NULL",
    ),
    ("ALTER CHANGE STREAM S", "expected SET FOR, SET OPTIONS or DROP FOR ALL, found end", ""),
    ("ALTER CHANGE STREAM S SET ALL", "expected FOR or OPTIONS after SET, found 'ALL'", "ALL"),
    ("ALTER CHANGE STREAM S DROP FOR T", "expected ALL, found 'T'", "T"),
    ("ALTER CHANGE STREAM S SET FOR A, A()", "table 'A' is listed twice", "A()"),
]


@pytest.mark.parametrize(("text", "message", "token"), ERRORS)
def test_errors(text: str, message: str, token: str) -> None:
    error = parse_error(text)
    assert message in str(error)
    assert error.position == (text.rindex(token) if token else len(text))


@pytest.mark.parametrize("period", ["36", "1.5h", "36H", "h", "-1h", "1h30m", ""])
def test_retention_period_format_errors(period: str) -> None:
    text = f"CREATE CHANGE STREAM S OPTIONS (retention_period = '{period}')"
    error = parse_error(text)
    assert (
        "retention_period must be a positive integer followed by s, m, h or d "
        f"(such as '36h' or '7d'), got {period!r}"
    ) in str(error)
    assert error.position == text.index(f"'{period}'")


@pytest.mark.parametrize(
    ("period", "seconds"), [("59m", 3540), ("3599s", 3599), ("0h", 0), ("31d", 2678400)]
)
def test_retention_period_range_errors(period: str, seconds: int) -> None:
    text = f"ALTER CHANGE STREAM S SET OPTIONS (retention_period = '{period}')"
    error = parse_error(text)
    assert (
        f"retention_period must be between '1h' and '30d', got '{period}' ({seconds} seconds)"
    ) in str(error)
    assert error.position == text.index(f"'{period}'")


def test_error_message_reports_line_and_column() -> None:
    text = "DROP TABLE A;\nCREATE TABLE B (\n  x FOO\n) PRIMARY KEY (x)"
    error = parse_error(text)
    assert error.position == text.index("FOO")
    assert str(error).endswith("(line 3, column 5)")


def test_error_in_a_later_statement_has_its_offset_in_the_whole_text() -> None:
    text = "DROP TABLE A; DROP CHANGE STREAM S; CREATE VIEW I"
    error = parse_error(text)
    assert error.position == text.index("VIEW")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("CREATE TABLE T (a STRING(99999999999999999999)) PRIMARY KEY (a)", "up to 2621440"),
        ("CREATE TABLE T (a BYTES(10485761)) PRIMARY KEY (a)", "up to 10485760"),
        ("CREATE TABLE " + "x" * 129 + " (a INT64) PRIMARY KEY (a)", "the limit is 128"),
        (
            "CREATE TABLE T (" + ", ".join(f"c{i} INT64" for i in range(1025)) + ") "
            "PRIMARY KEY (c0)",
            "more than 1024 columns",
        ),
        ("CREATE TABLE sqlite_x (a INT64) PRIMARY KEY (a)", "belong to SQLite"),
        ("CREATE TABLE `a\x00` (a INT64) PRIMARY KEY (a)", "control character"),
    ],
)
def test_spanner_limits_on_names_columns_and_lengths(text: str, message: str) -> None:
    """Beyond them SQLite (or the catalog) would fail with errors of its own."""
    assert message in str(parse_error(text))
