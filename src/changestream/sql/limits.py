"""Bounds on the work one SQL statement may cause: text size, nesting, parse time, run time
and steps.

sqlglot's parser backtracks, so some malformed statements take time exponential in their
length, and it recurses once per nesting level; SQLite runs a query as long as it takes.
Each bound below turns that into an :class:`~changestream.errors.InvalidArgument` (or
:class:`~changestream.errors.ResourceExhausted` for time) that names the limit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from changestream.errors import InvalidArgument, ResourceExhausted
from changestream.values import text_problem

_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")
_QUOTES = frozenset("'\"`")


@dataclass(frozen=True, slots=True)
class SqlLimits:
    """The limits every statement is held to (the defaults are documented in the README)."""

    #: Longest statement text, in characters.
    max_sql_chars: int = 1_000_000
    #: Deepest nesting of brackets, counted before parsing.
    max_nesting: int = 100
    #: Longest time parsing one statement may take.
    parse_seconds: float = 2.0
    #: Longest time SQLite may spend running one statement (SELECT or DML).
    execute_seconds: float = 30.0
    #: Most SQLite virtual-machine instructions one statement may run (a query that scans a
    #: million rows takes some tens of millions).
    max_steps: int = 2_000_000_000


DEFAULT_LIMITS = SqlLimits()


def check_text(sql: object, limits: SqlLimits) -> str:
    """``sql`` if it is text within the size and nesting limits, else InvalidArgument."""
    if not isinstance(sql, str):
        raise InvalidArgument(f"SQL must be a string, got {type(sql).__name__}")
    if len(sql) > limits.max_sql_chars:
        raise InvalidArgument(
            f"SQL statement is {len(sql)} characters long; the limit is {limits.max_sql_chars}"
        )
    problem = text_problem(sql)
    if problem:
        raise InvalidArgument(f"SQL text is {problem}")
    depth = nesting(sql)
    if depth > limits.max_nesting:
        raise InvalidArgument(
            f"SQL statement nests brackets {depth} deep; the limit is {limits.max_nesting}"
        )
    return sql


def nesting(sql: str) -> int:
    """The deepest bracket nesting outside quoted text (an unclosed quote ends the scan)."""
    deepest = depth = 0
    quote = ""
    for char in sql:
        if quote:
            if char == quote:
                quote = ""
        elif char in _QUOTES:
            quote = char
        elif char in _OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        elif char in _CLOSERS:
            depth = max(depth - 1, 0)
    return deepest


class _Deadline(threading.local):
    at: float | None = None


_deadline = _Deadline()


@contextmanager
def parse_deadline(seconds: float) -> Iterator[None]:
    """Parsing on this thread raises ResourceExhausted once ``seconds`` have passed."""
    _deadline.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _deadline.at = None


def check_deadline() -> None:
    """Called by the parser as it moves through tokens."""
    at = _deadline.at
    if at is not None and time.monotonic() > at:
        raise ResourceExhausted(
            "parsing the SQL statement took too long (it backtracks too much); simplify it"
        )
