"""Shared fixtures: a settable clock and databases on real SQLite files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import changestream
from changestream.clock import parse_ts

ACCOUNT_BALANCE = (
    "CREATE TABLE AccountBalance (AccountId STRING(MAX) NOT NULL, "
    "LastUpdate TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true), "
    "Balance INT64 NOT NULL) PRIMARY KEY (AccountId)"
)


class FixedClock:
    """A wall clock that stands still until told otherwise (commit timestamps stay unique)."""

    def __init__(self, start: str) -> None:
        self.value = parse_ts(start)

    def set(self, moment: str) -> None:
        self.value = parse_ts(moment)

    def __call__(self) -> int:
        return self.value


@pytest.fixture
def db(tmp_path: Path) -> Iterator[changestream.EmbeddedDatabase]:
    with changestream.open(str(tmp_path / "test.db")) as database:
        yield database


def drain(records: Iterator[changestream.ChangeRecord]) -> list[changestream.ChangeRecord]:
    """Every record of a finite query."""
    return list(records)
