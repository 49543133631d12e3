"""A read-function call made through SQL (``execute_sql``), as the result rows of its dialect:
GoogleSQL's one ``ChangeRecord`` column, or PostgreSQL's one JSON column."""

from __future__ import annotations

from typing import TYPE_CHECKING

from changestream.streams.models import ResultSet
from changestream.streams.records import googlesql_row, postgresql_row
from changestream.streams.roles import ChangeStreamSource

if TYPE_CHECKING:
    from changestream.sql.statements import ReadFunctionCall


def read_function_rows(source: ChangeStreamSource, call: ReadFunctionCall) -> ResultSet:
    """The rows of ``call`` read from ``source``, produced as the records arrive."""
    records = source.read_change_stream(
        call.stream,
        call.start_timestamp,
        call.end_timestamp,
        call.partition_token,
        call.heartbeat_milliseconds,
        call.read_options,
    )
    if call.dialect == "postgresql":
        return ResultSet(["read_json_" + call.stream], map(postgresql_row, records))
    return ResultSet(["ChangeRecord"], map(googlesql_row, records))
