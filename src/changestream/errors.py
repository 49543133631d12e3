"""The error hierarchy: every error a user can cause is a subclass of :class:`ChangeStreamError`."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")


class ChangeStreamError(Exception):
    """Base class of every error raised by changestream."""


class InvalidArgument(ChangeStreamError, ValueError):
    """An argument is malformed or outside what is allowed."""


class DDLError(InvalidArgument):
    """A DDL statement could not be parsed or applied; ``position`` is the 0-based offset."""

    def __init__(self, message: str, statement: str = "", position: int | None = None) -> None:
        self.statement = statement
        self.position = position
        if position is not None and statement:
            line = statement.count("\n", 0, position) + 1
            column = position - (statement.rfind("\n", 0, position) + 1) + 1
            message = f"{message} (line {line}, column {column})"
        super().__init__(message)


class InvalidToken(InvalidArgument):
    """A partition token or watch() resume token is unknown, malformed, or not this stream's."""


class NotFound(ChangeStreamError, LookupError):
    """A table, column, change stream, row or partition does not exist."""


class AlreadyExists(ChangeStreamError):
    """A table, change stream or row already exists."""


class FailedPrecondition(ChangeStreamError):
    """The operation is valid but the database is not in a state that allows it."""


class OutOfRange(InvalidArgument):
    """A timestamp lies outside the change stream's retention window or creation time."""


class DatabaseBusy(ChangeStreamError):
    """The database stayed locked by another writer for longer than the busy timeout."""


class DatabaseClosed(ChangeStreamError):
    """The database was used after ``close()``."""


class Unauthenticated(ChangeStreamError):
    """The server was given no bearer token, or one it does not know."""


class PermissionDenied(ChangeStreamError):
    """The bearer token lacks the scope (read, write or admin) the request needs."""


class Unavailable(ChangeStreamError):
    """The server could not be reached, is shutting down, or the connection broke."""


class ResourceExhausted(ChangeStreamError):
    """A statement or a caller went past a budget: parse or run time, steps, rows, bytes or
    open streams (the settings that set each are named in the message)."""


_reported: set[tuple[type[BaseException], str, int]] = set()
_log = logging.getLogger("changestream")


def reported(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Wrap a public entry point: an exception that is not a :class:`ChangeStreamError` is a
    bug in changestream, so it is logged with its traceback, once per place it comes from,
    and raised on unchanged."""

    @functools.wraps(function)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return function(*args, **kwargs)
        except ChangeStreamError:
            raise
        except Exception as exc:
            _report(exc, function.__qualname__)
            raise

    return call


def reported_items(items: Iterable[_T], where: str) -> Iterator[_T]:
    """``items`` (produced lazily, so outside the entry point that returned them) with the
    same rule as :func:`reported`: an exception that is not a :class:`ChangeStreamError`
    is logged once as a bug and raised on."""
    try:
        yield from items
    except ChangeStreamError:
        raise
    except Exception as exc:
        _report(exc, where)
        raise


def _report(exc: Exception, where: str) -> None:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    origin = (
        type(exc),
        tb.tb_frame.f_code.co_filename if tb else "",
        tb.tb_lineno if tb else 0,
    )
    if origin not in _reported:
        _reported.add(origin)
        _log.error("unexpected %s in %s (a bug)", type(exc).__name__, where, exc_info=exc)
