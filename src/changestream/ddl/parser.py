"""A tokenizer and recursive-descent parser for the GoogleSQL DDL subset changestream supports.

Supported statements: ``CREATE TABLE``, ``DROP TABLE``, ``ALTER TABLE`` (``RENAME TO``,
``ADD COLUMN [IF NOT EXISTS]``, ``DROP COLUMN``, ``ALTER COLUMN``), ``CREATE [UNIQUE]
[NULL_FILTERED] INDEX [IF NOT EXISTS]``, ``DROP INDEX [IF EXISTS]``, ``CREATE CHANGE STREAM``,
``ALTER CHANGE STREAM`` (``SET FOR``, ``SET OPTIONS``, ``DROP FOR ALL``) and
``DROP CHANGE STREAM``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from changestream.ddl.defaults import Default, parse_default
from changestream.ddl.schema import (
    BOOLEAN_STREAM_OPTIONS,
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_VALUE_CAPTURE_TYPE,
    MAX_RETENTION_SECONDS,
    MIN_RETENTION_SECONDS,
    VALUE_CAPTURE_TYPES,
    AddColumn,
    AlterChangeStream,
    AlterColumn,
    Column,
    CreateChangeStream,
    CreateIndex,
    CreateTable,
    DropChangeStream,
    DropColumn,
    DropIndex,
    DropTable,
    Index,
    RenameTable,
    RowDeletionPolicy,
    SetRowDeletionPolicy,
    Statement,
    StreamOptions,
    StreamTarget,
    Table,
)
from changestream.errors import DDLError, InvalidArgument
from changestream.types import SCALAR_CODES, ColumnType

__all__ = ["parse_ddl"]

_SIZED_TYPES = frozenset({"STRING", "BYTES"})
_TYPE_LIST = (
    "BOOL, INT64, FLOAT64, NUMERIC, STRING(n|MAX), BYTES(n|MAX), DATE, TIMESTAMP, JSON, ARRAY<type>"
)
_UNKEYABLE_TYPES = frozenset({"ARRAY", "JSON"})
_SYSTEM_TABLE_PREFIX = "_cs_"
#: SQLite keeps names starting with this for itself.
_SQLITE_PREFIX = "sqlite_"
# Spanner's limits on names, columns per table and STRING/BYTES lengths.
_MAX_NAME_CHARS = 128
_MAX_COLUMNS = 1024
_MAX_LENGTH = {"STRING": 2_621_440, "BYTES": 10_485_760}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_COLUMN_OPTIONS = ("allow_commit_timestamp",)
_STREAM_OPTIONS = ("retention_period", "value_capture_type", *BOOLEAN_STREAM_OPTIONS)
_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"([0-9]+)([smhd])")

# GoogleSQL's reserved keywords: like Spanner, they are names only when backquoted, which also
# keeps ``FOR ALL`` unambiguous. A word list reads better here than a 95-line literal.
_RESERVED = frozenset(
    """
    ALL AND ANY ARRAY AS ASC ASSERT_ROWS_MODIFIED AT BETWEEN BY CASE CAST COLLATE CONTAINS CREATE
    CROSS CUBE CURRENT DEFAULT DEFINE DESC DISTINCT ELSE END ENUM ESCAPE EXCEPT EXCLUDE EXISTS
    EXTRACT FALSE FETCH FOLLOWING FOR FROM FULL GROUP GROUPING GROUPS HASH HAVING IF IGNORE IN
    INNER INTERSECT INTERVAL INTO IS JOIN LATERAL LEFT LIKE LIMIT LOOKUP MERGE NATURAL NEW NO NOT
    NULL NULLS OF ON OR ORDER OUTER OVER PARTITION PRECEDING PROTO RANGE RECURSIVE RESPECT RIGHT
    ROLLUP ROWS SELECT SET SOME STRUCT TABLESAMPLE THEN TO TREAT TRUE UNBOUNDED UNION UNNEST USING
    WHEN WHERE WINDOW WITH WITHIN
    """.split()  # noqa: SIM905
)

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INTEGER = re.compile(r"[0-9]+")
_QUOTED_NAME = re.compile(r"`([^`\n]*)`")
# A backslash takes the next character literally: option values never need control characters.
_STRING = re.compile(r"""'((?:[^'\\\n]|\\.)*)'|"((?:[^"\\\n]|\\.)*)\"""")
_ESCAPE = re.compile(r"\\(.)")
_PUNCTUATION = frozenset("(),;<>=-.[]+*/")

_TokenKind = Literal["word", "name", "string", "integer", "punct", "end"]


@dataclass(frozen=True, slots=True)
class _Token:
    """``value`` is the word, the unquoted name or string, the digits, or the punctuation mark."""

    kind: _TokenKind
    value: str
    pos: int
    end: int


def parse_ddl(text: str) -> list[Statement]:
    """Parse one or more ``;``-separated DDL statements.

    Keywords are case-insensitive; names keep their case and may be backquoted. Raises
    :class:`DDLError` whose ``position`` is the offset in ``text`` of the offending token.
    """
    return _Parser(text).statements()


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char.isspace():
            pos += 1
        elif text.startswith("--", pos):
            newline = text.find("\n", pos)
            pos = len(text) if newline < 0 else newline + 1
        elif text.startswith("/*", pos):
            close = text.find("*/", pos + 2)
            if close < 0:
                raise DDLError("unterminated /* comment", text, pos)
            pos = close + 2
        elif match := _WORD.match(text, pos):
            tokens.append(_Token("word", match.group(), pos, match.end()))
            pos = match.end()
        elif match := _INTEGER.match(text, pos):
            tokens.append(_Token("integer", match.group(), pos, match.end()))
            pos = match.end()
        elif char == "`":
            match = _QUOTED_NAME.match(text, pos)
            if match is None:
                raise DDLError("unterminated backquoted name", text, pos)
            if not match.group(1):
                raise DDLError("empty backquoted name", text, pos)
            tokens.append(_Token("name", match.group(1), pos, match.end()))
            pos = match.end()
        elif char in "'\"":
            match = _STRING.match(text, pos)
            if match is None:
                raise DDLError("unterminated string literal", text, pos)
            body = match.group(1) if char == "'" else match.group(2)
            tokens.append(_Token("string", _ESCAPE.sub(r"\1", body), pos, match.end()))
            pos = match.end()
        elif char in _PUNCTUATION:
            tokens.append(_Token("punct", char, pos, pos + 1))
            pos += 1
        else:
            raise DDLError(f"unexpected character {char!r}", text, pos)
    tokens.append(_Token("end", "", len(text), len(text)))
    return tokens


def _duration(seconds: int) -> str:
    """``seconds`` in the largest unit that divides it, as retention_period is written."""
    unit = next(unit for unit, size in _DURATION_UNITS.items() if seconds % size == 0)
    return f"{seconds // _DURATION_UNITS[unit]}{unit}"


def _is_null(token: _Token) -> bool:
    """NULL as an option value resets the option to its default."""
    return token.kind == "word" and token.value.upper() == "NULL"


class _Parser:
    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _tokenize(text)
        self._index = 0

    # Token helpers

    @property
    def _token(self) -> _Token:
        return self._tokens[self._index]

    def _advance(self) -> _Token:
        token = self._tokens[self._index]
        if token.kind != "end":
            self._index += 1
        return token

    def _error(self, message: str, token: _Token) -> DDLError:
        return DDLError(message, self._text, token.pos)

    def _describe(self, token: _Token) -> str:
        if token.kind == "end":
            return "end of input"
        source = self._text[token.pos : token.end]
        return f"string {source}" if token.kind == "string" else f"'{source}'"

    def _unexpected(self, expected: str) -> DDLError:
        return self._error(f"expected {expected}, found {self._describe(self._token)}", self._token)

    def _at_keyword(self, keyword: str) -> bool:
        return self._token.kind == "word" and self._token.value.upper() == keyword

    def _peek_keyword(self, keyword: str) -> bool:
        """Whether the token after this one is ``keyword``."""
        following = self._tokens[min(self._index + 1, len(self._tokens) - 1)]
        return following.kind == "word" and following.value.upper() == keyword

    def _at_end(self) -> bool:
        return self._token.kind == "end"

    def _at_punct(self, mark: str) -> bool:
        return self._token.kind == "punct" and self._token.value == mark

    def _accept_keyword(self, keyword: str) -> bool:
        if self._at_keyword(keyword):
            self._advance()
            return True
        return False

    def _expect_keyword(self, keyword: str, expected: str | None = None) -> None:
        if not self._accept_keyword(keyword):
            raise self._unexpected(expected or keyword)

    def _accept_punct(self, mark: str) -> bool:
        if self._at_punct(mark):
            self._advance()
            return True
        return False

    def _expect_punct(self, mark: str, expected: str | None = None) -> None:
        if not self._accept_punct(mark):
            raise self._unexpected(expected or f"'{mark}'")

    def _name(self, what: str) -> _Token:
        token = self._token
        if token.kind == "word" and token.value.upper() in _RESERVED:
            raise self._error(
                f"expected {what}, found reserved keyword '{token.value}' "
                f"(write `{token.value}` to use it as a name)",
                token,
            )
        if token.kind not in ("word", "name"):
            raise self._unexpected(what)
        if len(token.value) > _MAX_NAME_CHARS:
            raise self._error(
                f"{what} is {len(token.value)} characters long; the limit is {_MAX_NAME_CHARS}",
                token,
            )
        if _CONTROL.search(token.value):
            raise self._error(f"{what} {token.value!r} holds a control character", token)
        return self._advance()

    # Statements

    def statements(self) -> list[Statement]:
        statements: list[Statement] = []
        while True:
            while self._accept_punct(";"):
                pass
            if self._at_end():
                return statements
            statements.append(self._statement())
            if not self._at_punct(";") and not self._at_end():
                raise self._unexpected("';' or end of input")

    def _statement(self) -> Statement:
        if self._accept_keyword("CREATE"):
            if self._accept_keyword("TABLE"):
                return self._create_table()
            if self._at_keyword("UNIQUE") or self._at_keyword("NULL_FILTERED"):
                return self._create_index()
            if self._accept_keyword("INDEX"):
                return self._create_index(after_index=True)
            self._expect_keyword("CHANGE", "TABLE, INDEX or CHANGE STREAM after CREATE")
            self._expect_keyword("STREAM")
            return self._create_change_stream()
        if self._accept_keyword("ALTER"):
            if self._accept_keyword("TABLE"):
                return self._alter_table()
            self._expect_keyword("CHANGE", "TABLE or CHANGE STREAM after ALTER")
            self._expect_keyword("STREAM")
            return self._alter_change_stream()
        if self._accept_keyword("DROP"):
            if self._accept_keyword("TABLE"):
                return DropTable(self._name("table name").value)
            if self._accept_keyword("INDEX"):
                if_exists = self._if_exists()
                return DropIndex(self._name("index name").value, if_exists)
            self._expect_keyword("CHANGE", "TABLE, INDEX or CHANGE STREAM after DROP")
            self._expect_keyword("STREAM")
            return DropChangeStream(self._user_name("change stream name").value)
        raise self._unexpected("CREATE, ALTER or DROP")

    def _user_name(self, what: str) -> _Token:
        """A name user DDL may create, alter or drop: not one of the engine's own."""
        token = self._name(what)
        if token.value.lower().startswith(_SQLITE_PREFIX):
            raise self._error(
                f"{what} {token.value!r} is reserved: names starting with {_SQLITE_PREFIX!r} "
                "belong to SQLite",
                token,
            )
        if token.value.lower().startswith(_SYSTEM_TABLE_PREFIX):
            raise self._error(
                f"{what} {token.value!r} is reserved: names starting with "
                f"{_SYSTEM_TABLE_PREFIX!r} belong to changestream's system tables and streams",
                token,
            )
        return token

    def _create_table(self) -> CreateTable:
        table = self._user_name("table name").value
        self._expect_punct("(")
        if self._at_punct(")"):
            raise self._error(f"table {table!r} has no columns", self._token)
        columns: dict[str, Column] = {}
        seen: set[str] = set()
        while True:
            column_token = self._name("column name")
            # Spanner names are case-insensitive, and so are SQLite's.
            if column_token.value.lower() in seen:
                raise self._error(
                    f"duplicate column {column_token.value!r} in table {table!r}", column_token
                )
            seen.add(column_token.value.lower())
            if len(columns) == _MAX_COLUMNS:
                raise self._error(
                    f"table {table!r} has more than {_MAX_COLUMNS} columns", column_token
                )
            columns[column_token.value] = self._column(column_token.value, len(columns) + 1)
            if not self._accept_punct(","):
                break
        self._expect_punct(")", "',' or ')'")
        self._expect_keyword("PRIMARY", f"PRIMARY KEY after the columns of table {table!r}")
        self._expect_keyword("KEY")
        key = self._primary_key(table, columns)
        policy = None
        if self._accept_punct(","):
            self._expect_keyword("ROW", "ROW DELETION POLICY after the primary key")
            policy = self._row_deletion_policy()
        return CreateTable(Table(table, tuple(columns.values()), key, row_deletion_policy=policy))

    def _row_deletion_policy(self) -> RowDeletionPolicy:
        """``DELETION POLICY (OLDER_THAN(column, INTERVAL n DAY))``, after ROW."""
        self._expect_keyword("DELETION")
        self._expect_keyword("POLICY")
        self._expect_punct("(")
        self._expect_keyword("OLDER_THAN", "OLDER_THAN, the only row deletion policy")
        self._expect_punct("(")
        column = self._name("timestamp column name").value
        self._expect_punct(",")
        self._expect_keyword("INTERVAL")
        token = self._token
        if token.kind != "integer":
            raise self._unexpected("a number of days")
        days = int(self._advance().value)
        if not 0 <= days <= 365_000:
            raise self._error(f"INTERVAL must be 0 to 365000 days, got {days}", token)
        self._expect_keyword("DAY", "DAY (intervals are in days)")
        self._expect_punct(")")
        self._expect_punct(")")
        return RowDeletionPolicy(column, days)

    def _column(self, name: str, ordinal: int, allow_default: bool = True) -> Column:
        column_type = self._column_type()
        not_null = False
        if self._accept_keyword("NOT"):
            self._expect_keyword("NULL")
            not_null = True
        default = Default()
        if self._at_keyword("DEFAULT"):
            if not allow_default:
                raise self._error(
                    "DEFAULT is set with CREATE TABLE or ALTER TABLE ... ADD COLUMN, not with "
                    "ALTER COLUMN",
                    self._token,
                )
            self._advance()
            default = self._default(name, column_type)
        allow_commit_timestamp = False
        if self._accept_keyword("OPTIONS"):
            for option, value in self._options():
                if option.value.lower() not in _COLUMN_OPTIONS:
                    raise self._error(
                        f"unknown column option {option.value!r}; allowed: "
                        + ", ".join(_COLUMN_OPTIONS),
                        option,
                    )
                if column_type.code != "TIMESTAMP":
                    raise self._error(
                        f"allow_commit_timestamp is only allowed on TIMESTAMP columns, "
                        f"not on {column_type} column {name!r}",
                        option,
                    )
                allow_commit_timestamp = self._bool_option(option, value)
        return Column(
            name,
            column_type,
            ordinal,
            not_null,
            allow_commit_timestamp,
            default.value,
            default.function,
        )

    def _default(self, column: str, column_type: ColumnType) -> Default:
        """``( expression )``, read by :func:`changestream.ddl.defaults.parse_default`."""
        self._expect_punct("(", "'(' and an expression after DEFAULT")
        first = self._token
        depth = 0
        while not (depth == 0 and self._at_punct(")")):
            if self._at_end():
                raise self._unexpected(f"')' closing the DEFAULT of column {column!r}")
            depth += 1 if self._at_punct("(") else -1 if self._at_punct(")") else 0
            self._advance()
        if self._token is first:
            raise self._unexpected(f"an expression in the DEFAULT of column {column!r}")
        text = self._text[first.pos : self._token.pos].strip()
        self._advance()
        try:
            return parse_default(text, column_type, column)
        except InvalidArgument as exc:
            raise self._error(str(exc), first) from exc

    def _column_type(self, in_array: bool = False) -> ColumnType:
        token = self._token
        if token.kind != "word":
            raise self._unexpected(f"a column type ({_TYPE_LIST})")
        code = token.value.upper()
        if code == "ARRAY":
            if in_array:
                raise self._error("nested arrays are not supported", token)
            self._advance()
            self._expect_punct("<", "'<' after ARRAY")
            element = self._column_type(in_array=True)
            self._expect_punct(">")
            return ColumnType("ARRAY", element=element)
        if code not in SCALAR_CODES:
            raise self._error(f"unknown type '{token.value}'; expected one of {_TYPE_LIST}", token)
        self._advance()
        if code not in _SIZED_TYPES:
            return ColumnType(code)
        self._expect_punct("(", f"'(' and a length after {code}")
        length_token = self._token
        length: int | None = None
        if length_token.kind == "integer":
            length = int(length_token.value)
            if not 0 < length <= _MAX_LENGTH[code]:
                raise self._error(
                    f"{code} length must be a positive integer up to {_MAX_LENGTH[code]} "
                    f"or MAX, got {length}",
                    length_token,
                )
            self._advance()
        elif not self._accept_keyword("MAX"):
            raise self._unexpected(f"a {code} length (a positive integer or MAX)")
        self._expect_punct(")")
        return ColumnType(code, length)

    def _primary_key(self, table: str, columns: dict[str, Column]) -> tuple[str, ...]:
        self._expect_punct("(")
        if self._at_punct(")"):
            raise self._error(f"the primary key of table {table!r} has no columns", self._token)
        key: list[str] = []
        while True:
            token = self._name("key column name")
            column = columns.get(token.value)
            if column is None:
                raise self._error(
                    f"primary key column {token.value!r} is not a column of table {table!r}", token
                )
            if token.value in key:
                raise self._error(f"column {token.value!r} appears twice in the primary key", token)
            if column.type.code in _UNKEYABLE_TYPES:
                raise self._error(
                    f"column {token.value!r} of type {column.type} cannot be a primary key column",
                    token,
                )
            if self._at_keyword("DESC"):
                raise self._error(
                    f"DESC keys are not supported (key column {token.value!r}); "
                    "keys are always ascending",
                    self._token,
                )
            self._accept_keyword("ASC")
            key.append(token.value)
            if not self._accept_punct(","):
                break
        self._expect_punct(")", "',' or ')'")
        return tuple(key)

    def _alter_table(
        self,
    ) -> RenameTable | AddColumn | DropColumn | AlterColumn | SetRowDeletionPolicy:
        name = self._name("table name").value
        for action in ("ADD", "REPLACE", "DROP"):
            if self._at_keyword(action) and self._peek_keyword("ROW"):
                self._advance()
                self._advance()
                policy = None if action == "DROP" else self._row_deletion_policy()
                if action == "DROP":
                    self._expect_keyword("DELETION")
                    self._expect_keyword("POLICY")
                return SetRowDeletionPolicy(name, action, policy)
        if self._accept_keyword("ADD"):
            self._expect_keyword("COLUMN", f"COLUMN after ALTER TABLE {name} ADD")
            if_not_exists = self._if_not_exists()
            column = self._name("column name").value
            return AddColumn(name, self._column(column, 0), if_not_exists)
        if self._accept_keyword("DROP"):
            self._expect_keyword("COLUMN", f"COLUMN after ALTER TABLE {name} DROP")
            return DropColumn(name, self._name("column name").value)
        if self._accept_keyword("ALTER"):
            self._expect_keyword("COLUMN", f"COLUMN after ALTER TABLE {name} ALTER")
            column = self._name("column name").value
            return AlterColumn(name, self._column(column, 0, allow_default=False))
        self._expect_keyword(
            "RENAME", f"RENAME TO, ADD COLUMN, DROP COLUMN or ALTER COLUMN after ALTER TABLE {name}"
        )
        self._expect_keyword("TO")
        return RenameTable(name, self._user_name("new table name").value)

    def _if_exists(self) -> bool:
        if self._accept_keyword("IF"):
            self._expect_keyword("EXISTS")
            return True
        return False

    def _if_not_exists(self) -> bool:
        if self._accept_keyword("IF"):
            self._expect_keyword("NOT")
            self._expect_keyword("EXISTS")
            return True
        return False

    def _create_index(self, after_index: bool = False) -> CreateIndex:
        unique = null_filtered = False
        if not after_index:
            unique = self._accept_keyword("UNIQUE")
            null_filtered = self._accept_keyword("NULL_FILTERED")
            self._expect_keyword("INDEX", "INDEX after CREATE UNIQUE / NULL_FILTERED")
        if_not_exists = self._if_not_exists()
        name = self._user_name("index name").value
        self._expect_keyword("ON", f"ON after CREATE INDEX {name}")
        table = self._name("table name").value
        self._expect_punct("(")
        columns: list[tuple[str, bool]] = []
        while True:
            column = self._name("index column name")
            if any(column.value == c for c, _ in columns):
                raise self._error(
                    f"column {column.value!r} appears twice in index {name!r}", column
                )
            descending = self._accept_keyword("DESC")
            if not descending:
                self._accept_keyword("ASC")
            columns.append((column.value, descending))
            if not self._accept_punct(","):
                break
        self._expect_punct(")", "',' or ')'")
        storing: tuple[str, ...] = ()
        if self._accept_keyword("STORING"):
            self._expect_punct("(", "'(' after STORING")
            storing = self._tracked_columns(table)
        index = Index(name, table, tuple(columns), unique, null_filtered, storing)
        return CreateIndex(index, if_not_exists)

    def _create_change_stream(self) -> CreateChangeStream:
        name = self._user_name("change stream name").value
        for_all, targets = self._for_clause() if self._accept_keyword("FOR") else (False, ())
        options = self._stream_options() if self._accept_keyword("OPTIONS") else StreamOptions()
        return CreateChangeStream(name, for_all, targets, options)

    def _alter_change_stream(self) -> AlterChangeStream:
        name = self._user_name("change stream name").value
        if self._accept_keyword("SET"):
            if self._accept_keyword("FOR"):
                return AlterChangeStream(name, set_for=self._for_clause())
            self._expect_keyword("OPTIONS", "FOR or OPTIONS after SET")
            return AlterChangeStream(name, options=self._stream_options())
        self._expect_keyword("DROP", "SET FOR, SET OPTIONS or DROP FOR ALL")
        self._expect_keyword("FOR")
        self._expect_keyword("ALL")
        return AlterChangeStream(name, drop_for_all=True)

    def _for_clause(self) -> tuple[bool, tuple[StreamTarget, ...]]:
        if self._accept_keyword("ALL"):
            return True, ()
        targets: list[StreamTarget] = []
        while True:
            token = self._name("table name or ALL")
            if any(t.table.lower() == token.value.lower() for t in targets):
                raise self._error(f"table {token.value!r} is listed twice in the FOR clause", token)
            columns: tuple[str, ...] | None = None
            if self._accept_punct("("):
                columns = self._tracked_columns(token.value)
            targets.append(StreamTarget(token.value, columns))
            if not self._accept_punct(","):
                return False, tuple(targets)

    def _tracked_columns(self, table: str) -> tuple[str, ...]:
        if self._accept_punct(")"):
            return ()
        columns: list[str] = []
        while True:
            token = self._name("column name")
            if token.value.lower() in (c.lower() for c in columns):
                raise self._error(
                    f"column {token.value!r} of table {table!r} is listed twice", token
                )
            columns.append(token.value)
            if not self._accept_punct(","):
                break
        self._expect_punct(")", "',' or ')'")
        return tuple(columns)

    # Options

    def _options(self) -> list[tuple[_Token, _Token]]:
        """``( name = value, ... )`` as (name token, value token) pairs, still uninterpreted."""
        self._expect_punct("(")
        options: list[tuple[_Token, _Token]] = []
        while True:
            name = self._name("option name")
            if any(n.value.lower() == name.value.lower() for n, _ in options):
                raise self._error(f"option {name.value!r} is given twice", name)
            self._expect_punct("=")
            if self._token.kind not in ("word", "string", "integer"):
                raise self._unexpected(f"a value for option {name.value!r}")
            options.append((name, self._advance()))
            if not self._accept_punct(","):
                break
        self._expect_punct(")", "',' or ')'")
        return options

    def _bool_option(self, option: _Token, value: _Token) -> bool:
        word = value.value.upper() if value.kind == "word" else ""
        if word not in ("TRUE", "FALSE", "NULL"):
            raise self._error(
                f"{option.value} must be true, false or null, found {self._describe(value)}", value
            )
        return word == "TRUE"

    def _stream_options(self) -> StreamOptions:
        retention: int | None = None
        capture: str | None = None
        flags: list[tuple[str, bool]] = []
        for option, value in self._options():
            name = option.value.lower()
            if name == "retention_period":
                retention = self._retention(value)
            elif name == "value_capture_type":
                capture = self._value_capture_type(value)
            elif name in BOOLEAN_STREAM_OPTIONS:
                flags.append((name, self._bool_option(option, value)))
            else:
                raise self._error(
                    f"unknown change stream option {option.value!r}; allowed: "
                    + ", ".join(_STREAM_OPTIONS),
                    option,
                )
        return StreamOptions(retention, capture, tuple(flags))

    def _retention(self, value: _Token) -> int:
        if _is_null(value):
            return DEFAULT_RETENTION_SECONDS
        if value.kind != "string":
            raise self._error(
                "retention_period must be a string such as '36h' or '7d', "
                f"found {self._describe(value)}",
                value,
            )
        match = _DURATION.fullmatch(value.value)
        if match is None:
            raise self._error(
                "retention_period must be a positive integer followed by s, m, h or d "
                f"(such as '36h' or '7d'), got {value.value!r}",
                value,
            )
        seconds = int(match.group(1)) * _DURATION_UNITS[match.group(2)]
        if not MIN_RETENTION_SECONDS <= seconds <= MAX_RETENTION_SECONDS:
            raise self._error(
                f"retention_period must be between {_duration(MIN_RETENTION_SECONDS)!r} and "
                f"{_duration(MAX_RETENTION_SECONDS)!r}, got {value.value!r} ({seconds} seconds)",
                value,
            )
        return seconds

    def _value_capture_type(self, value: _Token) -> str:
        if _is_null(value):
            return DEFAULT_VALUE_CAPTURE_TYPE
        if value.kind != "string" or value.value not in VALUE_CAPTURE_TYPES:
            raise self._error(
                "value_capture_type must be one of "
                + ", ".join(repr(v) for v in VALUE_CAPTURE_TYPES)
                + f", found {self._describe(value)}",
                value,
            )
        return value.value
