"""The ``changestream`` command: sql, partitions, ddl, demo, errors and Ctrl-C."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

import changestream
from changestream import ChildPartitionsRecord
from changestream.cli import main
from changestream.clock import format_ts, now_us, parse_ts

TABLE_DDL = (
    "CREATE TABLE AccountBalance (AccountId STRING(MAX) NOT NULL, "
    "LastUpdate TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true), "
    "Balance INT64 NOT NULL) PRIMARY KEY (AccountId)"
)
STREAM_DDL = "CREATE CHANGE STREAM AccountStream FOR AccountBalance"
COLUMNS = ["AccountId", "LastUpdate", "Balance"]
TAG = "app=banking,env=prod,action=update"


@dataclass(frozen=True)
class Bank:
    """A database file with the seed's table and stream, split so Id1 and Id2 are apart."""

    path: str
    created: int
    transfer: int


def run(*args: str) -> Result:
    # A wide terminal keeps rich from wrapping tree lines in the middle of what we look for.
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "250"})


def lines_of(result: Result) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture
def bank(tmp_path: Path) -> Iterator[Bank]:
    path = str(tmp_path / "bank.db")
    with changestream.open(path) as db:
        db.execute_ddl(TABLE_DDL)
        created = db.execute_ddl(STREAM_DDL)
        with db.transaction() as tx:
            tx.insert(
                "AccountBalance",
                COLUMNS,
                [[k, changestream.COMMIT_TIMESTAMP, 1500] for k in ("Id1", "Id2", "Id3")],
            )
        db.split_at("AccountBalance", ("Id2",))
        with db.transaction(tag=TAG) as tx:
            tx.update(
                "AccountBalance",
                COLUMNS,
                [
                    ["Id1", changestream.COMMIT_TIMESTAMP, 1000],
                    ["Id2", changestream.COMMIT_TIMESTAMP, 2000],
                ],
            )
        assert tx.commit_timestamp is not None
        transfer = parse_ts(tx.commit_timestamp)
    yield Bank(path, created, transfer)


def live_token(bank: Bank, index: int = 0) -> str:
    with changestream.open(bank.path) as db:
        return db.partitions("AccountStream")[index].token


# --- help, version, ddl ---


def test_help_and_version_in_a_real_process() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "changestream", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for command in ("sql", "partitions", "ddl", "demo"):
        assert f"  {command}" in shown.stdout
    version = subprocess.run(
        [sys.executable, "-m", "changestream", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert changestream.__version__ in version.stdout


_EXIT = """
import atexit, gc, sys
from changestream.cli import run
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
sys.argv = ["changestream", *sys.argv[1:]]
run()
"""


@pytest.mark.parametrize("args", [["--version"], ["sql", "/nonexistent/dir/x.db", "SELECT 1"]])
def test_the_command_freezes_what_it_imported_before_the_interpreter_exits(
    args: list[str],
) -> None:
    """The console script (and ``python -m changestream``) freezes the objects left when the
    command ends, succeeding or failing, so the interpreter's last collection skips them."""
    done = subprocess.run(
        [sys.executable, "-c", _EXIT, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == (0 if args == ["--version"] else 2), done.stderr
    assert done.stdout.splitlines()[-1] == "frozen at exit: True"


def test_ddl_creates_the_file_and_sql_prints_json_lines(tmp_path: Path) -> None:
    path = str(tmp_path / "new.db")
    created = run(
        "ddl",
        path,
        "CREATE TABLE T (K STRING(MAX) NOT NULL, Ts TIMESTAMP, N NUMERIC, B BYTES(MAX), "
        "D DATE, V INT64) PRIMARY KEY (K)",
    )
    assert created.exit_code == 0, created.output
    assert created.stdout.startswith("applied at ")
    with changestream.open(path) as db, db.transaction() as tx:
        tx.insert(
            "T",
            ["K", "Ts", "N", "B", "D", "V"],
            [
                [
                    "a",
                    dt.datetime(2024, 5, 1, 9, 0, tzinfo=dt.UTC),
                    decimal.Decimal("1.25"),
                    b"\x00\xff",
                    dt.date(2024, 5, 1),
                    7,
                ],
                ["b", None, None, None, None, 8],
            ],
        )
    result = run("sql", path, "SELECT * FROM T ORDER BY K")
    assert result.exit_code == 0, result.output
    assert lines_of(result) == [
        {
            "K": "a",
            "Ts": "2024-05-01T09:00:00.000000Z",
            "N": "1.25",
            "B": "AP8=",
            "D": "2024-05-01",
            "V": 7,
        },
        {"K": "b", "Ts": None, "N": None, "B": None, "D": None, "V": 8},
    ]


def test_sql_binds_typed_parameters(bank: Bank) -> None:
    result = run(
        "sql",
        bank.path,
        "SELECT AccountId, Balance + @n AS more, @flag AS flag, @nothing AS missing "
        "FROM AccountBalance WHERE AccountId = @id",
        "--param",
        "id=Id1",
        "--param",
        "n:int=5",
        "-p",
        "flag:bool=true",
        "-p",
        "nothing:null",
    )
    assert result.exit_code == 0, result.output
    assert lines_of(result) == [{"AccountId": "Id1", "more": 1005, "flag": 1, "missing": None}]
    bad = run("sql", bank.path, "SELECT @n AS n", "--param", "n:int=five")
    assert bad.exit_code == 2
    assert "n:int=five" in bad.stderr


# --- the read function through `sql` ---


def test_sql_read_function_in_googlesql(bank: Bank) -> None:
    query = (
        "SELECT ChangeRecord FROM READ_AccountStream(start_timestamp => @start, "
        "end_timestamp => @end, partition_token => @token, heartbeat_milliseconds => 10000)"
    )
    initial = run(
        "sql",
        bank.path,
        query,
        "-p",
        f"start={format_ts(bank.created)}",
        "-p",
        f"end={format_ts(bank.transfer)}",
        "-p",
        "token:null",
    )
    assert initial.exit_code == 0, initial.output
    [row] = lines_of(initial)
    [change_record] = row["ChangeRecord"]
    assert set(change_record) == {
        "data_change_record",
        "heartbeat_record",
        "child_partitions_record",
    }
    assert len(change_record["child_partitions_record"]) == 1

    moment = format_ts(bank.transfer)
    token = live_token(bank, 0)
    result = run(
        "sql",
        bank.path,
        query,
        "-p",
        f"start={moment}",
        "-p",
        f"end={moment}",
        "-p",
        f"token={token}",
    )
    assert result.exit_code == 0, result.output
    [row] = lines_of(result)
    [record] = row["ChangeRecord"][0]["data_change_record"]
    assert record["mods"][0]["keys"] == {"AccountId": "Id1"}
    assert record["number_of_partitions_in_transaction"] == 2
    assert record["transaction_tag"] == TAG
    assert record["commit_timestamp"] == moment


def test_sql_read_function_in_postgresql(bank: Bank) -> None:
    moment = format_ts(bank.transfer)
    result = run(
        "sql",
        bank.path,
        'SELECT * FROM "spanner"."read_json_AccountStream"($1, $2, $3, 10000, NULL)',
        "-p",
        f"1={moment}",
        "-p",
        f"2={moment}",
        "-p",
        f"3={live_token(bank, 1)}",
    )
    assert result.exit_code == 0, result.output
    [row] = lines_of(result)
    assert list(row) == ["read_json_AccountStream"]
    record = row["read_json_AccountStream"]["data_change_record"]
    assert record["mods"][0]["keys"] == {"AccountId": "Id2"}
    assert record["mods"][0]["old_values"]["Balance"] == 1500
    assert record["mods"][0]["new_values"]["Balance"] == 2000


# --- partitions ---


def test_partitions_tree_after_a_split_and_a_merge(bank: Bank) -> None:
    with changestream.open(bank.path) as db:
        db.split_at("AccountBalance", ("Id3",))
        db.merge_at("AccountBalance", ("Id3",))
        history = db.partition_history("AccountStream")
        live = db.partitions("AccountStream")
    result = run("partitions", bank.path, "AccountStream")
    assert result.exit_code == 0, result.output
    for partition in history:
        assert partition.token[-10:] in result.stdout
    assert "[-∞, ∞)" in result.stdout
    assert f"[{live[0].start_key}, {live[0].end_key})" in result.stdout
    merged = next(p for p in history if len(p.parent_tokens) == 2)
    assert "(merge of " in result.stdout
    assert f"…{merged.token[-10:]}  merge child, drawn under" in result.stdout
    assert result.stdout.count("live") == len(live)

    as_json = run("partitions", bank.path, "AccountStream", "--json")
    assert as_json.exit_code == 0, as_json.output
    rows = lines_of(as_json)
    # Checked field by field against the partitions, not against to_dict() (what the CLI prints).
    assert [row["token"] for row in rows] == [p.token for p in history]
    for row, partition in zip(rows, history, strict=True):
        assert parse_ts(row["start_timestamp"]) == partition.start_timestamp
        end = row["end_timestamp"]
        assert (end and parse_ts(end)) == partition.end_timestamp
        assert (row["start_key"], row["end_key"]) == (partition.start_key, partition.end_key)
        assert row["parent_tokens"] == list(partition.parent_tokens)
        assert row["child_tokens"] == list(partition.child_tokens)
        assert row["write_rate"] >= 0
    # One root; the one merge made the only partition with two parents.
    parents = [len(row["parent_tokens"]) for row in rows]
    assert (parents.count(0), parents.count(2), parents.count(1)) == (1, 1, len(rows) - 2)
    by_token = {row["token"]: row for row in rows}
    for row in rows:
        for child in row["child_tokens"]:
            assert row["token"] in by_token[child]["parent_tokens"]

    now = run("partitions", bank.path, "AccountStream", "--at", format_ts(now_us()), "--json")
    assert [p["token"] for p in lines_of(now)] == [p.token for p in live]
    flat = run("partitions", bank.path, "AccountStream", "--at", format_ts(bank.transfer))
    assert flat.exit_code == 0, flat.output
    assert flat.stdout.count("→") == 2


# --- errors ---


def test_missing_database_file_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    for args in (("sql", str(path), "SELECT 1"), ("partitions", str(path), "S")):
        result = run(*args)
        assert result.exit_code == 2
        assert result.stderr.startswith("error: no database file at")
        assert "Traceback" not in result.output
    assert not path.exists()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELEC 1", "cannot parse SQL"),
        ("SELECT * FROM NoSuchTable", "NoSuchTable"),
        ("SELECT Nope FROM AccountBalance", "Nope"),
        ("SELECT * FROM AccountBalance WHERE AccountId = @id", "@id"),
    ],
)
def test_bad_sql_is_an_error_without_traceback(bank: Bank, query: str, message: str) -> None:
    result = run("sql", bank.path, query)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert result.stdout == ""
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_unknown_stream_is_an_error(bank: Bank) -> None:
    result = run("partitions", bank.path, "NoSuchStream")
    assert result.exit_code == 2
    assert "NoSuchStream" in result.stderr


# --- a real process tailing a live partition ---


def test_tailing_streams_lines_and_ctrl_c_exits_130(bank: Bank) -> None:
    query = (
        "SELECT ChangeRecord FROM READ_AccountStream(start_timestamp => @start, "
        "partition_token => @token, heartbeat_milliseconds => 1000)"
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "changestream",
            "sql",
            bank.path,
            query,
            "-p",
            f"start={format_ts(now_us())}",
            "-p",
            f"token={live_token(bank)}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell starts background jobs with SIGINT ignored, and Python then installs no
        # KeyboardInterrupt handler; give the child the default so Ctrl-C reaches it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout is not None
        first = orjson.loads(process.stdout.readline())
        assert len(first["ChangeRecord"][0]["heartbeat_record"]) == 1
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert "Traceback" not in stderr


# --- the demo ---


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "demo.db"
    result = run("demo", "--path", str(path), "--tail-seconds", "2")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert '"transaction_tag": "app=banking,env=prod,action=update"' in out
    assert out.count('"number_of_partitions_in_transaction": 2') >= 2
    assert "the transfer came back as 2 records from 2 partitions" in out
    assert "must wait for its other parent" in out
    assert "both parents returned the same child partitions record: True" in out
    assert '"value_capture_type": "NEW_VALUES"' in out
    assert '"value_capture_type": "NEW_ROW"' in out
    assert '"read_json_AccountBalanceStream": {' in out
    tail = out[out.index("Tailing live partitions") :]
    assert "heartbeat_record" in tail
    assert "data_change_record" in tail
    assert path.exists()
    # The merge's claim, checked here rather than on the demo's word: each parent, read to its
    # end, announces the same child partitions record naming the merged partition.
    with changestream.open(str(path)) as db:
        history = db.partition_history("AccountBalanceStream")
        (merged,) = [p for p in history if len(p.parent_tokens) == 2]
        starts = {p.token: p.start_timestamp for p in history}
        announced = [
            [
                r
                for r in db.read_change_stream(
                    "AccountBalanceStream", starts[parent], None, parent, 1000
                )
                if isinstance(r, ChildPartitionsRecord)
            ]
            for parent in merged.parent_tokens
        ]
    # The same record apart from which parent's query it came from.
    assert [dataclasses.replace(r, partition_token="") for r in announced[0]] == [
        dataclasses.replace(r, partition_token="") for r in announced[1]
    ]
    (record,) = announced[0]
    assert [c.token for c in record.child_partitions] == [merged.token]
    assert record.start_timestamp == merged.start_timestamp
    again = run("demo", "--path", str(path))
    assert again.exit_code == 2
    assert "exists" in again.stderr
