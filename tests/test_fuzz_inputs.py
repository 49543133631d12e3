"""Fuzzing the API with mutated DDL, SQL, DML, mutations and read-function arguments, both
embedded and through the server (``connect(url)``).

Bounded: ``CHANGESTREAM_FUZZ_SECONDS`` (default 20 embedded, half that remote) of calls, from
``CHANGESTREAM_FUZZ_SEED``. Fails on any exception that is not a changestream error, on an
error logged as a bug (by the engine or the server), on a call slower than
``SLOW_CALL_SECONDS``, and on a database whose tables no longer read back or that fails
``PRAGMA integrity_check``. A failure names the seed and the call that caused it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import logging
import math
import os
import random
import reprlib
import sqlite3
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import changestream
from changestream.clock import now_us, parse_ts
from changestream.embedded.database import store_of
from changestream.errors import ChangeStreamError
from changestream.sql.statements import ReadFunctionCall, parse_statement

SECONDS = float(os.environ.get("CHANGESTREAM_FUZZ_SECONDS", "20"))
SEED = int(os.environ.get("CHANGESTREAM_FUZZ_SEED", "14"))
SLOW_CALL_SECONDS = 5.0
#: Calls between checks that the database still reads back and passes integrity_check.
CHECK_EVERY = 200
#: Calls before starting again on a fresh database (mutated DDL drifts the schema away).
FRESH_EVERY = 1500
LIMITS = changestream.SqlLimits(parse_seconds=1.0, execute_seconds=1.0)

DDL = [
    "CREATE TABLE T (K INT64 NOT NULL, S STRING(MAX), F FLOAT64, N NUMERIC, J JSON, "
    "A ARRAY<INT64>, B BYTES(16), D DATE, TS TIMESTAMP OPTIONS (allow_commit_timestamp = true), "
    "AS_ ARRAY<STRING(MAX)>, BO BOOL) PRIMARY KEY (K)",
    "CREATE TABLE S (K STRING(MAX) NOT NULL, V INT64, W FLOAT64) PRIMARY KEY (K)",
    "CREATE TABLE P (A BYTES(MAX), B TIMESTAMP, C DATE, D NUMERIC, E BOOL, F FLOAT64) "
    "PRIMARY KEY (A, B, C, D, E, F)",
    "CREATE CHANGE STREAM CS FOR ALL",
    "CREATE CHANGE STREAM C2 FOR T(S, J), S OPTIONS (value_capture_type = 'NEW_ROW', "
    "retention_period = '1h')",
    "ALTER CHANGE STREAM C2 SET FOR ALL",
    "ALTER TABLE S RENAME TO S2",
    "DROP CHANGE STREAM C2",
    "DROP TABLE P",
]
SQL = [
    "SELECT * FROM T WHERE K = @k",
    "SELECT K, S FROM T WHERE S LIKE @s ORDER BY K LIMIT 10",
    "SELECT COUNT(*), SUM(F) FROM T JOIN S ON T.S = S.K WHERE T.F > @f GROUP BY T.K",
    "SELECT * FROM T WHERE TS >= CAST(@t AS TIMESTAMP) AND D < DATE '2020-01-01'",
    "SELECT ARRAY_LENGTH(A), JSON_VALUE(J, '$.a') FROM T WHERE K IN (1, 2, 3)",
    "WITH x AS (SELECT K FROM T) SELECT * FROM x WHERE K > (SELECT MIN(K) FROM S)",
    "SELECT * FROM T WHERE K = $1 AND S = $2",
    "SELECT ChangeRecord FROM READ_CS(@s, @e, @t, @h)",
    "SELECT ChangeRecord FROM READ_CS(start_timestamp => @s, heartbeat_milliseconds => 1000)",
    'SELECT * FROM "spanner"."read_json_CS"($1, $2, $3, $4, null)',
]
DML = [
    "INSERT INTO T (K, S, F, A, J) VALUES (@k, @s, @f, @a, @j)",
    "INSERT INTO S (K, V) VALUES (@s, @k), ('x', 2)",
    "UPDATE T SET S = @s, F = F * 2, A = @a WHERE K = @k",
    "UPDATE T SET J = @j, N = @n, TS = PENDING_COMMIT_TIMESTAMP() WHERE K > @k",
    "UPDATE S SET V = V + 1 WHERE K = @s",
    "DELETE FROM T WHERE K = @k",
    "DELETE S WHERE V > @k",
    "INSERT INTO T (K, D, B) SELECT V, DATE '2020-01-01', b'x' FROM S",
]
WORDS = [
    "SELECT", "FROM", "WHERE", "JOIN", "ON", "(", ")", ",", "@k", "$1", "'", '"', "`", "NULL",
    "CAST(", "AS", "ARRAY<", ">", "STRUCT", "UNNEST", "--", "/*", ";", "T", "S", "_cs_meta",
    "READ_CS(", "TIMESTAMP", "9" * 40, "-", "1e400", "\ud800", "\x00", "é", "NOT", "OR", "*",
    "INT64", "STRING(", "MAX", "PRIMARY KEY", "OPTIONS", "CHANGE STREAM", "DROP", "TABLE",
]  # fmt: skip


COLUMNS = {
    "T": ["K", "S", "F", "N", "J", "A", "B", "D", "TS"],
    "S": ["K", "V", "W"],
    "P": ["A", "B", "C", "D", "E", "F"],
}
_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxlist, _SHOW.maxstring, _SHOW.maxother = 8, 10, 400, 200


def show(value: Any) -> str:
    """A bounded repr (fuzzed values nest thousands deep)."""
    return _SHOW.repr(value)


def values(rng: random.Random, depth: int = 0) -> Any:
    """A value a careless caller might pass anywhere."""
    pick = rng.randrange(17 if depth < 3 else 13)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, 1, -1, 2**63 - 1, -(2**63), 2**63, 2**53 + 1, 10**40, -(10**400)])
    if pick == 3:
        return rng.randint(-(2**70), 2**70)
    if pick == 4:
        return rng.choice([0.5, -0.0, math.nan, math.inf, -math.inf, 1e308, 5e-324])
    if pick == 5:
        return decimal.Decimal(rng.choice(["1.5", "1e30", "NaN", "-Inf", "1e-12", "-0"]))
    if pick == 6:
        return "".join(chr(rng.choice([0, 0x41, 0xE9, 0xD800, 0xDFFF, 0x1F600])) for _ in range(3))
    if pick == 7:
        return rng.choice([b"", b"\xff\x00", bytearray(b"x"), memoryview(b"y")])
    if pick == 8:
        return rng.choice([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2020, 2, 29)])
    if pick == 9:
        return rng.choice(
            [
                dt.datetime(1, 1, 1, tzinfo=dt.UTC),
                dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
                dt.datetime(2020, 1, 1),
                dt.datetime.now(dt.UTC) - dt.timedelta(seconds=rng.randint(0, 5)),
                dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5))),
            ]
        )
    if pick == 10:
        return rng.choice(["0001-01-01T00:00:00Z", "0000-01-01T00:00:00Z", "12", "１２", "x"])
    if pick == 11:
        return rng.choice([dt.time(1), object(), changestream.COMMIT_TIMESTAMP, {1, 2}])
    if pick == 12:
        return rng.randrange(-(10**30), 10**30)
    if pick in (13, 14):
        return [values(rng, depth + 1) for _ in range(rng.randrange(4))]
    if pick == 15:
        return {rng.choice(["a", "$b", "\ud800", 1]): values(rng, depth + 1)}
    nested: Any = 0
    for _ in range(rng.choice([50, 150, 3000])):
        nested = [nested]
    return nested


def mutate(rng: random.Random, text: str) -> str:
    """``text`` with one to three random edits: insertions, deletions, repeats, swaps."""
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(text) + 1)
        end = min(len(text), at + rng.randrange(1, 12))
        edit = rng.randrange(5)
        if edit == 0:
            text = f"{text[:at]} {rng.choice(WORDS)} {text[at:]}"
        elif edit == 1:
            text = text[:at] + text[end:]
        elif edit == 2:
            text = text[:at] + text[at:end] * rng.choice([2, 30, 400]) + text[end:]
        elif edit == 3:
            text = text[:at] + rng.choice(WORDS) + text[end:]
        else:
            text = text[:at]
    return text


def params(rng: random.Random) -> Any:
    named = {name: values(rng) for name in ("k", "s", "f", "a", "j", "n", "t", "e", "h")}
    if rng.random() < 0.3:
        named["k"] = rng.randrange(50)
        named["h"] = 1000
        named["e"] = dt.datetime.now(dt.UTC)
    return rng.choice([named, [values(rng) for _ in range(4)], None, named])


#: Opens a fresh database file: (the embedded database, the handle the calls go through).
Opener = Callable[[Path], tuple[changestream.EmbeddedDatabase, changestream.Database]]


@dataclass
class Fuzzer:
    rng: random.Random
    path: Path
    opener: Opener
    calls: int = 0
    failures: list[str] = field(default_factory=list)
    db: changestream.Database | None = None
    embedded: changestream.EmbeddedDatabase | None = None

    def fresh(self) -> changestream.Database:
        if self.db is not None:
            self.db.close()
        if self.embedded is not None and self.embedded is not self.db:
            self.embedded.close()
        self.embedded, self.db = self.opener(self.path / f"fuzz{self.calls}.db")
        self.db.execute_ddl(DDL[:4])
        with self.db.transaction() as tx:
            tx.insert("T", ["K", "S", "F"], [[k, str(k), k / 2] for k in range(20)])
            tx.insert("S", ["K", "V"], [[str(k), k] for k in range(10)])
        return self.db

    def call(self, what: str, action: Callable[[], object]) -> None:
        """Run one fuzzed call; note it if it raised anything else or took too long."""
        self.calls += 1
        began = time.monotonic()
        try:
            action()
        except ChangeStreamError:
            pass
        except Exception:
            self.failures.append(f"{what}\n{traceback.format_exc()}")
        elapsed = time.monotonic() - began
        if elapsed > SLOW_CALL_SECONDS:
            self.failures.append(f"{what}\ntook {elapsed:.1f} s")

    def step(self) -> None:
        db = self.db
        assert db is not None
        rng = self.rng
        kind = rng.randrange(5)
        if kind == 0:
            ddl = mutate(rng, rng.choice(DDL))
            self.call(f"execute_ddl({show(ddl)})", lambda: db.execute_ddl(ddl))
        elif kind == 1:
            sql, args = mutate(rng, rng.choice(SQL)), params(rng)
            self.call(f"execute_sql({show(sql)}, {show(args)})", lambda: _query(db, sql, args))
        elif kind == 2:
            dml, args = mutate(rng, rng.choice(DML)), params(rng)
            self.call(f"execute_update({show(dml)}, {show(args)})", lambda: _update(db, dml, args))
        elif kind == 3:
            op = rng.choice(["insert", "update", "insert_or_update", "replace", "delete"])
            table, columns = rng.choice(list(COLUMNS.items()))
            chosen = rng.sample(columns, rng.randint(1, len(columns)))
            rows = [[values(rng) for _ in chosen] for _ in range(rng.randint(1, 3))]
            self.call(
                f"tx.{op}({table!r}, {chosen!r}, {show(rows)})",
                lambda: _mutation(db, op, table, chosen, rows),
            )
        else:
            arguments = [values(rng) for _ in range(5)]
            if rng.random() < 0.5:
                arguments[0] = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
                arguments[1] = dt.datetime.now(dt.UTC)
                arguments[3] = 1000
            if rng.random() < 0.5 and "CS" in {stream.name for stream in db.change_streams()}:
                arguments[2] = rng.choice(db.partitions("CS")).token
            self.call(f"read_change_stream('CS', *{show(arguments)})", lambda: _read(db, arguments))

    def check(self) -> None:
        """Every table and change stream still reads back, and SQLite finds no damage."""
        db = self.db
        assert db is not None and self.embedded is not None
        try:
            for table in db.tables():
                rows = db.read(table.name)
                assert len(list(db.execute_sql(f"SELECT * FROM `{table.name}`"))) == len(rows)
            now = store_of(self.embedded).now()
            for stream in db.change_streams():
                for partition in db.partitions(stream.name):
                    start = max(partition.start_timestamp, now - 10_000_000)
                    list(db.read_change_stream(stream.name, start, now, partition.token))
        except Exception:
            self.failures.append(f"database no longer reads back\n{traceback.format_exc()}")
        with sqlite3.connect(self.embedded.path) as raw:
            result = raw.execute("PRAGMA integrity_check").fetchall()
        if result != [("ok",)]:
            self.failures.append(f"integrity_check: {result}")


def _query(db: changestream.Database, sql: str, args: Any) -> None:
    if _tails(sql, args):
        return
    list(db.execute_sql(sql, args))


def _tails(sql: str, args: Any) -> bool:
    """Whether ``sql`` is a read-function call that would follow a partition live (by
    design it runs until its end timestamp, so it is not a call to time)."""
    try:
        call = parse_statement(sql, args, limits=LIMITS)
    except ChangeStreamError:
        return False
    return isinstance(call, ReadFunctionCall) and _open_ended(
        call.end_timestamp, call.partition_token
    )


def _open_ended(end: Any, token: Any) -> bool:
    if token is None:
        return False
    try:
        return end is None or parse_ts(end) > now_us()
    except ChangeStreamError:
        return False


def _update(db: changestream.Database, dml: str, args: Any) -> None:
    with db.transaction() as tx:
        tx.execute_update(dml, args)


def _mutation(
    db: changestream.Database, op: str, table: str, columns: list[str], rows: Any
) -> None:
    with db.transaction() as tx:
        if op == "delete":
            tx.delete(table, rows)
        else:
            getattr(tx, op)(table, columns, rows)


def _read(db: changestream.Database, arguments: list[Any]) -> None:
    if _open_ended(arguments[1], arguments[2]):
        arguments[1] = dt.datetime.now(dt.UTC)
    list(db.read_change_stream("CS", *arguments))


def _embedded(path: Path) -> tuple[changestream.EmbeddedDatabase, changestream.Database]:
    db = changestream.open(str(path), sql_limits=LIMITS)
    return db, db


@pytest.fixture(params=["embedded", "remote"])
def opener(request: pytest.FixtureRequest) -> Iterator[tuple[Opener, float]]:
    """How the fuzzer opens its databases, and how long it runs."""
    if request.param == "embedded":
        yield _embedded, SECONDS
        return
    databases, url = request.getfixturevalue("served")
    names: list[str] = []

    def remote(path: Path) -> tuple[changestream.EmbeddedDatabase, changestream.Database]:
        embedded = changestream.open(str(path), sql_limits=LIMITS)
        names.append(f"fuzz{next(_served)}")
        databases.add(names[-1], embedded)
        return embedded, changestream.connect(f"{url}/{names[-1]}")

    yield remote, SECONDS / 2
    for name in names:
        databases.remove(name)


_served = itertools.count()


def test_fuzzed_calls_fail_only_with_changestream_errors(
    tmp_path: Path, opener: tuple[Opener, float], caplog: pytest.LogCaptureFixture
) -> None:
    open_, seconds = opener
    fuzzer = Fuzzer(random.Random(SEED), tmp_path, open_)
    fuzzer.fresh()
    deadline = time.monotonic() + seconds
    with caplog.at_level(logging.ERROR):
        while time.monotonic() < deadline and not fuzzer.failures:
            fuzzer.step()
            if fuzzer.calls % CHECK_EVERY == 0:
                fuzzer.check()
            if fuzzer.calls % FRESH_EVERY == 0:
                fuzzer.fresh()
        fuzzer.check()
    assert fuzzer.db is not None
    fuzzer.db.close()
    # A bug is logged, not raised, where the failure crosses the HTTP boundary.
    bugs = [r for r in caplog.records if r.levelno >= logging.ERROR]
    traceback_of = logging.Formatter().formatException
    fuzzer.failures += [
        f"logged: {r.getMessage()}\n{traceback_of(r.exc_info) if r.exc_info else ''}" for r in bugs
    ]
    report = "\n\n".join(fuzzer.failures[:3])
    assert not fuzzer.failures, f"seed {SEED}, after {fuzzer.calls} calls:\n{report}"
    assert fuzzer.calls > 100
