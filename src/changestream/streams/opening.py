"""Opening a database named by a path or an ``http(s)://`` URL, for the layers that only get
such a name (a Spark task on an executor, the pipeline job) and must not import the two
implementations: the package top registers how, and importing any ``changestream`` module
imports the top first."""

from __future__ import annotations

from collections.abc import Callable

from changestream.errors import FailedPrecondition
from changestream.streams.roles import PipelineDatabase

Opener = Callable[[str, "str | None"], PipelineDatabase]

_opener: list[Opener] = []


def register_opener(opener: Opener) -> None:
    """How :func:`open_database` opens a path or URL (``changestream.open_path_or_url``)."""
    _opener[:] = [opener]


def open_database(target: str, token: str | None = None) -> PipelineDatabase:
    """The database at ``target``: a file path, or a server URL reached with ``token``."""
    if not _opener:
        raise FailedPrecondition("changestream's package top was not imported: nothing opens")
    return _opener[0](target, token)
