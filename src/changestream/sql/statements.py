"""Parse user SQL text: change stream read-function calls, SELECTs and DML, made ready for SQLite.

GoogleSQL is the default dialect; PostgreSQL is used when ``params`` is a sequence, when the text
only parses as PostgreSQL, or when it uses PostgreSQL-only forms (``$n`` parameters,
``spanner.read_json_<stream>``). Text valid in both dialects is read as GoogleSQL, so
``"x"`` is a string there, not a quoted identifier; pass ``dialect="postgresql"`` to force it.
"""

from __future__ import annotations

import decimal
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

import sqlglot
from sqlglot import TokenType, exp
from sqlglot.dialects.bigquery import BigQuery
from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.postgres import Postgres
from sqlglot.dialects.sqlite import SQLite
from sqlglot.errors import ErrorLevel, ParseError, SqlglotError, TokenError, UnsupportedError
from sqlglot.parser import Parser

from changestream.clock import format_ts, parse_ts
from changestream.codecs import to_sqlite
from changestream.errors import InvalidArgument
from changestream.sql.limits import (
    DEFAULT_LIMITS,
    SqlLimits,
    check_deadline,
    check_text,
    parse_deadline,
)
from changestream.sql.params import Params, UntypedText, stored_parameter
from changestream.types import ColumnType, normalize

#: The type of a table's column, or None when there is no such table or column.
ColumnTypes = Callable[[str, str], ColumnType | None]
_P = TypeVar("_P", bound=Parser)

_ARGUMENTS = (
    "start_timestamp",
    "end_timestamp",
    "partition_token",
    "heartbeat_milliseconds",
    "read_options",
)
_REQUIRED_ARGUMENTS = ("start_timestamp", "heartbeat_milliseconds")
_HIDDEN_TABLE_PREFIXES = ("_cs_", "sqlite_", "pragma_")
_STATEMENT_KEYWORDS = frozenset({"SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "("})
_NOT_A_QUERY = (
    "only SELECT, INSERT, UPDATE and DELETE statements are accepted here; "
    "DDL goes through execute_ddl"
)
_TIMESTAMP_TYPES = (
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
    exp.DataType.Type.TIMESTAMPLTZ,
)
_POSITIONAL_PARAMETER = re.compile(r"^\$\d+$")
# Bound values become ``:<marker><index>`` placeholders until rendering turns them into ``?``.
_MARKER = "cs_bind_"


def _bounded(base: type[_P]) -> type[_P]:
    """``base`` minus sqlglot's READ_* functions (DuckDB's READ_CSV, READ_PARQUET, ...), checking
    the parse deadline (:mod:`changestream.sql.limits`) at every token it moves to.

    Without the first, ``READ_Csv(...)`` would parse as DuckDB's function, losing the stream
    name's case and the argument layout; without the second, backtracking has no bound.
    """
    functions = {name: f for name, f in base.FUNCTIONS.items() if not name.startswith("READ_")}

    def _advance(self: Parser, times: int = 1) -> None:
        base._advance(self, times)
        check_deadline()

    return cast(
        "type[_P]",
        type(base.__name__, (base,), {"FUNCTIONS": functions, "_advance": _advance}),
    )


class _GoogleSQL(BigQuery):
    parser_class = _bounded(BigQuery.parser_class)


class _PostgreSQL(Postgres):
    parser_class = _bounded(Postgres.parser_class)


_DIALECTS: dict[str, type[Dialect]] = {"googlesql": _GoogleSQL, "postgresql": _PostgreSQL}


class _SQLiteOut(SQLite):
    """SQLite as statements are written for it: names quoted with backticks, which SQLite
    never takes for a string (a double-quoted name that matches no column, it does)."""

    class Tokenizer(SQLite.Tokenizer):
        IDENTIFIERS: ClassVar[list[str | tuple[str, str]]] = ["`", '"', ("[", "]")]


_SQLITE = _SQLiteOut()


@dataclass(frozen=True, slots=True)
class ReadFunctionCall:
    """A change stream query: ``READ_<stream>(...)`` or ``spanner.read_json_<stream>(...)``.

    Argument values are the literals or bound parameter values as given, unconverted.
    """

    dialect: str
    stream: str
    start_timestamp: Any
    end_timestamp: Any
    partition_token: Any
    heartbeat_milliseconds: Any
    read_options: Any


@dataclass(frozen=True, slots=True)
class SelectQuery:
    """A query over user tables as SQLite text with ``?`` placeholders and storage-form params."""

    sql: str
    params: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class DmlStatement:
    """An INSERT, UPDATE or DELETE as SQLite text ending in ``RETURNING *``.

    ``select_old_sql`` (UPDATE and DELETE) selects the rows the statement will change; run it
    first, in the same transaction, to capture their old values.
    """

    kind: str
    table: str
    columns: tuple[str, ...]
    sql: str
    select_old_sql: str | None
    params: tuple[Any, ...]
    select_old_params: tuple[Any, ...]


def parse_statement(
    sql: str,
    params: Params = None,
    *,
    dialect: str | None = None,
    column_types: ColumnTypes | None = None,
    limits: SqlLimits = DEFAULT_LIMITS,
) -> ReadFunctionCall | SelectQuery | DmlStatement:
    """Parse one statement of user SQL; ``dialect`` ("googlesql"/"postgresql") skips detection.

    ``column_types`` lets a parameter assigned straight to a column be checked as that
    column's type; ``limits`` bounds the text and the parse time.
    """
    if isinstance(params, str | bytes) or not isinstance(params, Mapping | Sequence | None):
        raise InvalidArgument(
            f"params must be a mapping or a sequence, got {type(params).__name__}"
        )
    check_text(sql, limits)
    try:
        with parse_deadline(limits.parse_seconds):
            statement = _parse(sql, params, dialect)
        return _prepare(statement, _Binder(params), column_types)
    except RecursionError as exc:
        # Brackets are counted up front; this catches nesting without them (NOT NOT ... x).
        raise InvalidArgument("SQL statement is nested too deeply to parse") from exc
    except SqlglotError as exc:
        # Parse errors are explained where they arise; this is text sqlglot parsed but then
        # could not turn into SQLite (an identifier it renders unquoted, say).
        raise InvalidArgument(f"statement cannot be run on SQLite: {exc}") from exc


def _prepare(
    statement: exp.Expr, binder: _Binder, column_types: ColumnTypes | None
) -> ReadFunctionCall | SelectQuery | DmlStatement:
    form = _read_function_form(statement)
    if form is not None:
        assert isinstance(statement, exp.Select)
        return _read_function_call(statement, *form, binder)
    _check_tables(statement)
    _fold_timestamp_casts(statement)
    if isinstance(statement, exp.Insert):
        return _insert(statement, binder, column_types)
    if isinstance(statement, exp.Update):
        return _update(statement, binder, column_types)
    if isinstance(statement, exp.Delete):
        return _delete(statement, binder, column_types)
    if isinstance(statement, exp.Query):
        compared = _compared(statement, binder, column_types)
        return SelectQuery(*_render(statement, _bind(statement, binder, compared=compared)))
    raise InvalidArgument(_NOT_A_QUERY)


# --- parsing and dialect detection ---


def _parse(sql: str, params: Params, dialect: str | None) -> exp.Expr:
    if dialect is not None:
        if dialect not in _DIALECTS:
            raise InvalidArgument(f"dialect must be one of {sorted(_DIALECTS)}, got {dialect!r}")
        order: tuple[str, ...] = (dialect,)
    elif isinstance(params, Sequence):
        order = ("postgresql", "googlesql")
    else:
        order = ("googlesql", "postgresql")
    failures: list[ParseError | TokenError] = []
    for name in order:
        try:
            statement = _parse_as(sql, name)
        except (ParseError, TokenError) as exc:
            failures.append(exc)
            continue
        wanted = name if dialect is not None else _dialect_of(statement, name)
        if wanted == name:
            return statement
        try:
            return _parse_as(sql, wanted)
        except (ParseError, TokenError) as exc:
            raise InvalidArgument(_parse_failure(sql, exc)) from exc
    raise InvalidArgument(_parse_failure(sql, failures[0])) from failures[0]


def _parse_as(sql: str, dialect: str) -> exp.Expr:
    # A comment after the last `;` comes back as a bare Semicolon node: not a statement.
    statements = [
        s
        for s in sqlglot.parse(sql, read=_DIALECTS[dialect])
        if s is not None and not isinstance(s, exp.Semicolon)
    ]
    if not statements:
        raise InvalidArgument("empty SQL statement")
    if len(statements) > 1:
        raise InvalidArgument(f"one statement at a time, got {len(statements)}")
    return statements[0]


def _dialect_of(statement: exp.Expr, parsed_as: str) -> str:
    """The dialect the text is written in, judged from a parse in ``parsed_as``."""
    form = _read_function_form(statement)
    if form is not None:
        return form[1]
    # GoogleSQL reads `$1` as a column name; only PostgreSQL means a parameter by it.
    if parsed_as == "googlesql" and any(
        not ident.quoted and _POSITIONAL_PARAMETER.match(ident.name)
        for ident in statement.find_all(exp.Identifier)
    ):
        return "postgresql"
    return parsed_as


def _read_function_form(statement: exp.Expr) -> tuple[str, str] | None:
    """(stream, dialect) when the statement selects FROM a change stream read function."""
    if not isinstance(statement, exp.Select):
        return None
    source = statement.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return None
    table = source.this
    call = table.this
    # GoogleSQL misreads `"spanner"."read_json_x"(...)` as a table with column aliases, so the
    # PostgreSQL form is recognised by schema and name alone.
    name = call.name if isinstance(call, exp.Anonymous) else table.name
    if table.db.lower() == "spanner" and name.lower().startswith("read_json_"):
        return name[len("read_json_") :], "postgresql"
    if not table.db and isinstance(call, exp.Anonymous) and name.lower().startswith("read_"):
        return name[len("read_") :], "googlesql"
    return None


def _parse_failure(sql: str, exc: ParseError | TokenError) -> str:
    """Why ``sql`` does not parse, in the user's terms: where, and near which word (the
    parser's own description names its internal classes, so it is left out)."""
    if isinstance(exc, ParseError) and exc.errors:
        first = exc.errors[0]
        near = str(first.get("highlight") or "").strip()
        where = f"line {first['line']}, column {first['col']}"
        detail = f"syntax error at {where}" + (f", near {near!r}" if near else "")
    else:
        detail = f"cannot read the statement ({str(exc).splitlines()[0]})"
    try:
        words = [token.text.upper() for token in _GoogleSQL().tokenize(sql)]
    except TokenError:
        words = []
    if words and words[0] not in _STATEMENT_KEYWORDS:
        return f"cannot parse SQL: {words[0]!r} does not start a statement; {_NOT_A_QUERY}"
    if any(pair == ("THEN", "RETURN") for pair in itertools.pairwise(words)):
        return "THEN RETURN is not supported; the statement's result already has the changed rows"
    if words[:3] == ["INSERT", "OR", "UPDATE"]:
        return "INSERT OR UPDATE (upsert) is not supported"
    return f"cannot parse SQL: {detail}"


# --- read function calls ---


def _read_function_call(
    statement: exp.Select, stream: str, dialect: str, binder: _Binder
) -> ReadFunctionCall:
    table = statement.args["from_"].this
    call = table.this
    shape = (
        'SELECT * FROM "spanner"."read_json_<stream>"(...)'
        if dialect == "postgresql"
        else "SELECT ChangeRecord FROM READ_<stream>(...)"
    )
    extra = [
        key
        for key, value in statement.args.items()
        if value and key not in ("expressions", "from_")
    ]
    projection = statement.expressions
    if (
        extra
        or not isinstance(call, exp.Anonymous)
        or len(projection) != 1
        or not (
            isinstance(projection[0], exp.Star)
            or (
                isinstance(projection[0], exp.Column)
                and projection[0].name.lower() == "changerecord"
            )
        )
    ):
        raise InvalidArgument(f"a change stream query must have exactly the form {shape}")
    function = f"{table.db}.{call.name}" if dialect == "postgresql" else call.name
    if dialect == "postgresql":
        values = _postgres_arguments(call, function, binder)
    else:
        values = _googlesql_arguments(call, function, binder)
    return ReadFunctionCall(dialect=dialect, stream=stream, **values)


def _googlesql_arguments(call: exp.Anonymous, function: str, binder: _Binder) -> dict[str, Any]:
    values: dict[str, Any] = {}
    named = False
    for position, argument in enumerate(call.expressions):
        if isinstance(argument, exp.Kwarg):
            named = True
            name = argument.this.name.lower()
            if name not in _ARGUMENTS:
                raise InvalidArgument(
                    f"{function} has no argument {argument.this.name!r}; "
                    f"allowed: {', '.join(_ARGUMENTS)}"
                )
            node = argument.expression
        elif named:
            raise InvalidArgument(f"{function}: positional arguments must come before named ones")
        elif position >= len(_ARGUMENTS):
            raise InvalidArgument(f"{function} takes at most {len(_ARGUMENTS)} arguments")
        else:
            name, node = _ARGUMENTS[position], argument
        if name in values:
            raise InvalidArgument(f"{function}: argument {name} given twice")
        values[name] = _argument_value(node, name, binder)
    for name in _REQUIRED_ARGUMENTS:
        if name not in values:
            raise InvalidArgument(f"{function} requires the {name} argument")
    return {name: values.get(name) for name in _ARGUMENTS}


def _postgres_arguments(call: exp.Anonymous, function: str, binder: _Binder) -> dict[str, Any]:
    arguments = call.expressions
    if len(arguments) != len(_ARGUMENTS) or any(isinstance(a, exp.Kwarg) for a in arguments):
        raise InvalidArgument(
            f"{function} takes exactly {len(_ARGUMENTS)} positional arguments "
            f"({', '.join(_ARGUMENTS[:-1])}, null), got {len(arguments)}"
        )
    return {
        name: _argument_value(node, name, binder)
        for name, node in zip(_ARGUMENTS, arguments, strict=True)
    }


def _argument_value(node: exp.Expr, name: str, binder: _Binder) -> Any:
    # Typed literals (TIMESTAMP '...', '...'::timestamptz) keep their text; the caller converts.
    while isinstance(node, exp.Cast):
        node = node.this
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return node.this
    if isinstance(node, exp.Parameter):
        return binder.lookup(node)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else _number(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return -_number(node.this.this)
    if name == "read_options":
        return node.sql()
    raise InvalidArgument(f"{name} must be a literal or a query parameter, got {node.sql()}")


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


# --- parameters ---


class _Binder:
    """Looks up ``@name`` and ``$n`` parameters in the caller's params."""

    def __init__(self, params: Params) -> None:
        self._params = params
        values = params.values() if isinstance(params, Mapping) else params or ()
        #: Whether some value is untyped text, to be typed by the column it meets.
        self.untyped = any(isinstance(v, UntypedText) for v in values)

    def lookup(self, node: exp.Parameter) -> Any:
        key = node.this
        params = self._params
        if isinstance(key, exp.Literal) and not key.is_string:
            if not key.this.isdecimal() or not key.this.isascii():
                raise InvalidArgument(f"query parameter {node.sql()} is not a name or a number")
            index = int(key.this)
            label = f"${index}"
            if isinstance(params, Mapping):
                for candidate in (f"p{index}", str(index)):
                    if candidate in params:
                        return params[candidate]
            elif params is not None and 1 <= index <= len(params):
                return params[index - 1]
        else:
            label = f"@{node.name}"
            if isinstance(params, Mapping):
                if node.name in params:
                    return params[node.name]
            elif params is not None:
                raise InvalidArgument(f"named parameter {label} needs params given as a mapping")
        raise InvalidArgument(f"no value given for query parameter {label}")


def _is_timestamp_cast(node: exp.Expr | None) -> bool:
    return isinstance(node, exp.Cast) and node.to.is_type(*_TIMESTAMP_TYPES)


def _fold_timestamp_casts(tree: exp.Expr) -> None:
    """Replace ``TIMESTAMP 'literal'`` by its stored RFC 3339 text.

    SQLite gives an unknown type like TIMESTAMP numeric affinity, so a cast would turn
    '2022-05-01T09:00:00Z' into 2022.
    """
    for node in list(tree.find_all(exp.Cast)):
        if _is_timestamp_cast(node) and isinstance(node.this, exp.Literal) and node.this.is_string:
            node.replace(
                exp.Literal.string(format_ts(parse_ts(node.this.this, "TIMESTAMP literal")))
            )


#: The column (name, type) each parameter assigned straight to a column goes to, by node id.
Targets = dict[int, tuple[str, ColumnType]]


def _bind(
    tree: exp.Expr,
    binder: _Binder,
    targets: Targets | None = None,
    compared: Targets | None = None,
) -> list[Any]:
    """Swap parameters for numbered markers; return the storage-form values by marker number.

    Each value is checked once: as its target column's type, or else by its Python type;
    untyped text also takes the type of a column it is ``compared`` with.
    """
    if any(True for _ in tree.find_all(exp.Placeholder)):
        raise InvalidArgument(
            "use @name (GoogleSQL) or $n (PostgreSQL) query parameters, not ? or :name"
        )
    values: list[Any] = []
    for parameter in list(tree.find_all(exp.Parameter)):
        value = binder.lookup(parameter)
        target: exp.Expr = parameter
        # CAST(@p AS TIMESTAMP) must compare as stored text, not as SQLite's numeric cast.
        if _is_timestamp_cast(parameter.parent):
            assert parameter.parent is not None
            target = parameter.parent
            if value is not None:
                value = format_ts(parse_ts(value, f"query parameter {parameter.sql()}"))
        label = parameter.sql()
        column = (targets or {}).get(id(parameter))
        if column is None and isinstance(value, UntypedText):
            column = (compared or {}).get(id(parameter))
        values.append(stored_parameter(value, label, column))
        target.replace(exp.Placeholder(this=f"{_MARKER}{len(values) - 1}"))
    return values


#: SQLite keywords that are never identifiers there unquoted, though GoogleSQL takes some of
#: them as column and table names (``index``, ``nothing``, ``transaction``, ``add``...).
# fmt: off
_SQLITE_RESERVED = frozenset({
    "add", "all", "alter", "and", "as", "autoincrement", "between", "case", "check", "collate",
    "commit", "constraint", "create", "default", "deferrable", "delete", "distinct", "drop",
    "else", "escape", "except", "exists", "foreign", "from", "group", "having", "in", "index",
    "insert", "intersect", "into", "is", "isnull", "join", "limit", "not", "nothing", "notnull",
    "null", "on", "or", "order", "primary", "raise", "references", "returning", "select", "set",
    "table", "then", "to", "transaction", "union", "unique", "update", "using", "values", "when",
    "where",
})
# fmt: on


def _render(tree: exp.Expr, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
    """SQLite text for ``tree`` with ``?`` placeholders, and the values in text order."""
    for identifier in tree.find_all(exp.Identifier):
        if not identifier.quoted and identifier.name.lower() in _SQLITE_RESERVED:
            identifier.set("quoted", True)
    try:
        text = tree.sql(dialect=_SQLITE, unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as exc:
        raise InvalidArgument(f"statement cannot be run on SQLite: {exc}") from exc
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # sqlglot's generator fails on some trees its parser accepts (b'' as a bit string).
        raise InvalidArgument(
            f"statement cannot be run on SQLite: {type(exc).__name__}: {exc}"
        ) from exc
    # find_all walks breadth-first, which is not the order the markers appear in the text, so
    # the order is read back from the rendered text's tokens (string literals stay opaque).
    pieces: list[str] = []
    ordered: list[Any] = []
    start = 0
    for colon, word in itertools.pairwise(_SQLITE.tokenize(text)):
        if (
            colon.token_type is TokenType.COLON
            and word.token_type is TokenType.VAR
            and word.start == colon.end + 1
            and word.text.startswith(_MARKER)
        ):
            pieces += (text[start : colon.start], "?")
            ordered.append(values[int(word.text[len(_MARKER) :])])
            start = word.end + 1
    pieces.append(text[start:])
    return "".join(pieces), tuple(ordered)


# --- tables and DML ---


def _check_tables(tree: exp.Expr) -> None:
    for table in tree.find_all(exp.Table):
        call = table.this
        name = call.name if isinstance(call, exp.Func) else table.name
        if name.lower().startswith(_HIDDEN_TABLE_PREFIXES):
            raise InvalidArgument(f"table {name!r} is not accessible from SQL")


def _target_table(table: exp.Expr, kind: str) -> str:
    if not isinstance(table, exp.Table) or isinstance(table.this, exp.Func):
        raise InvalidArgument(f"{kind} needs a table name")
    if table.db or table.catalog:
        raise InvalidArgument(f"{kind}: qualified table names are not supported, got {table.sql()}")
    return table.name


_CLAUSE_ERRORS = {
    "returning": "RETURNING is not supported; the statement's result already has the changed rows",
    "conflict": "upserts (ON CONFLICT, INSERT OR ...) are not supported",
    "alternative": "upserts (ON CONFLICT, INSERT OR ...) are not supported",
    "from_": "UPDATE ... FROM (multi-table UPDATE) is not supported",
    "using": "DELETE ... USING (multi-table DELETE) is not supported",
    "with_": "WITH is not supported in INSERT, UPDATE or DELETE",
}


def _reject_clauses(statement: exp.Expr, kind: str, allowed: tuple[str, ...]) -> None:
    for key, value in statement.args.items():
        if value is None or value is False or value == [] or key in allowed:
            continue
        clause = key.rstrip("_").upper()
        raise InvalidArgument(_CLAUSE_ERRORS.get(key, f"{kind} with {clause} is not supported"))


def _targets(
    table: str, pairs: Sequence[tuple[str, exp.Expr]], column_types: ColumnTypes | None
) -> Targets:
    """The column each parameter among ``pairs`` (column name, value node) is assigned to.

    A text literal assigned to a TIMESTAMP, DATE or NUMERIC column is rewritten in place to
    the form the column stores, so it compares and sorts like every other value there.
    """
    targets: Targets = {}
    if column_types is None:
        return targets
    for name, node in pairs:
        ctype = column_types(table, name)
        if ctype is None:
            continue
        if isinstance(node, exp.Parameter):
            targets[id(node)] = (name, ctype)
        elif isinstance(node, exp.Literal) and node.is_string and ctype.code in _TEXT_STORED:
            node.replace(exp.Literal.string(_stored_text(ctype, node.this, name)))
    return targets


_TEXT_STORED = frozenset({"TIMESTAMP", "DATE", "NUMERIC"})
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def _compared(tree: exp.Expr, binder: _Binder, column_types: ColumnTypes | None) -> Targets:
    """The column each parameter is compared straight with (``c = @p``, ``@p < t.c``,
    ``c IN (@p, @q)``), where exactly one type fits the column's name among the tables; only
    looked for when some parameter is untyped text (no other value uses it)."""
    if column_types is None or not binder.untyped:
        return {}
    tables = {table.alias_or_name: table.name for table in tree.find_all(exp.Table)}

    def typed(column: exp.Column) -> tuple[str, ColumnType] | None:
        names = [tables.get(column.table, column.table)] if column.table else set(tables.values())
        types = {found for name in names if (found := column_types(name, column.name))}
        return (column.name, types.pop()) if len(types) == 1 else None

    found: Targets = {}
    for comparison in tree.find_all(*_COMPARISONS):
        sides = (comparison.this, comparison.expression)
        for column, parameter in (sides, sides[::-1]):
            if (
                isinstance(column, exp.Column)
                and isinstance(parameter, exp.Parameter)
                and (target := typed(column)) is not None
            ):
                found[id(parameter)] = target
    for among in tree.find_all(exp.In):
        if isinstance(among.this, exp.Column) and (target := typed(among.this)) is not None:
            for item in among.expressions:
                if isinstance(item, exp.Parameter):
                    found[id(item)] = target
    return found


def _stored_text(ctype: ColumnType, text: str, column: str) -> str:
    value: Any = text
    if ctype.code == "NUMERIC":
        try:
            value = decimal.Decimal(text)
        except decimal.InvalidOperation as exc:
            raise InvalidArgument(
                f"column {column!r} of type NUMERIC: {text!r} is not a number"
            ) from exc
    stored = to_sqlite(ctype, normalize(ctype, value, column))
    assert isinstance(stored, str)
    return stored


def _insert(
    statement: exp.Insert, binder: _Binder, column_types: ColumnTypes | None
) -> DmlStatement:
    _reject_clauses(statement, "INSERT", ("this", "expression"))
    target = statement.this
    if not isinstance(target, exp.Schema):
        raise InvalidArgument(
            "INSERT needs an explicit column list: INSERT INTO T (a, b) VALUES ..."
        )
    table = _target_table(target.this, "INSERT")
    columns = tuple(column.name for column in target.expressions)
    source = statement.expression
    pairs: list[tuple[str, exp.Expr]] = []
    if isinstance(source, exp.Values):
        for row in source.expressions:
            items = row.expressions if isinstance(row, exp.Tuple) else [row]
            if len(items) != len(columns):
                raise InvalidArgument(
                    f"INSERT lists {len(columns)} columns but a row has {len(items)} values"
                )
            pairs += zip(columns, items, strict=True)
    elif not isinstance(source, exp.Query):
        raise InvalidArgument("INSERT needs VALUES (...) or a SELECT")
    targets = _targets(table, pairs, column_types)
    sql, params = _render(statement, _bind(statement, binder, targets))
    return DmlStatement("INSERT", table, columns, f"{sql} RETURNING *", None, params, ())


def _update(
    statement: exp.Update, binder: _Binder, column_types: ColumnTypes | None
) -> DmlStatement:
    _reject_clauses(statement, "UPDATE", ("this", "expressions", "where"))
    if statement.args.get("where") is None:
        raise InvalidArgument("UPDATE needs a WHERE clause (WHERE true updates every row)")
    target = statement.this
    table = _target_table(target, "UPDATE")
    columns: list[str] = []
    for assignment in statement.expressions:
        column = assignment.this
        if not isinstance(assignment, exp.EQ) or not isinstance(column, exp.Column):
            raise InvalidArgument(f"UPDATE: expected column = value, got {assignment.sql()}")
        # GoogleSQL allows `SET alias.col = ...`; SQLite only takes the bare column.
        column.set("table", None)
        columns.append(column.name)
    pairs = [(a.this.name, a.expression) for a in statement.expressions]
    targets = _targets(table, pairs, column_types)
    compared = _compared(statement, binder, column_types)
    return _changing_statement(
        "UPDATE", statement, target, table, tuple(columns), binder, targets, compared
    )


def _delete(
    statement: exp.Delete, binder: _Binder, column_types: ColumnTypes | None
) -> DmlStatement:
    _reject_clauses(statement, "DELETE", ("this", "where", "tables"))
    tables = statement.args.get("tables") or []
    if tables:
        # GoogleSQL's `DELETE T WHERE ...` (no FROM) arrives as a table list SQLite cannot render.
        if len(tables) != 1 or statement.this:
            raise InvalidArgument("multi-table DELETE is not supported")
        statement.set("tables", None)
        statement.set("this", tables[0])
    if statement.args.get("where") is None:
        raise InvalidArgument("DELETE needs a WHERE clause (WHERE true deletes every row)")
    target = statement.this
    table = _target_table(target, "DELETE")
    compared = _compared(statement, binder, column_types)
    return _changing_statement("DELETE", statement, target, table, (), binder, {}, compared)


def _changing_statement(
    kind: str,
    statement: exp.Update | exp.Delete,
    target: exp.Table,
    table: str,
    columns: tuple[str, ...],
    binder: _Binder,
    targets: Targets,
    compared: Targets,
) -> DmlStatement:
    values = _bind(statement, binder, targets, compared)
    sql, params = _render(statement, values)
    select_old = exp.select("*").from_(target.copy()).where(statement.args["where"].this.copy())
    old_sql, old_params = _render(select_old, values)
    return DmlStatement(kind, table, columns, f"{sql} RETURNING *", old_sql, params, old_params)
