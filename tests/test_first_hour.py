"""A new user's usual mistakes get a clear answer (issue 17, the items fixed so far)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import changestream
from changestream.cli.main import main
from changestream.errors import Unavailable


def test_a_failed_first_ddl_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.db"
    result = CliRunner().invoke(main, ["ddl", str(path), "CREATE TABL T (K INT64) PRIMARY KEY (K)"])
    assert result.exit_code == 2
    assert "error: expected TABLE, INDEX or CHANGE STREAM after CREATE" in result.output
    assert list(tmp_path.iterdir()) == []
    # A failed DDL on an existing database leaves it as it was.
    good = CliRunner().invoke(main, ["ddl", str(path), "CREATE TABLE T (K INT64) PRIMARY KEY (K)"])
    assert good.exit_code == 0, good.output
    again = CliRunner().invoke(main, ["ddl", str(path), "CREATE TABLE T (K INT64) PRIMARY KEY (K)"])
    assert again.exit_code == 2 and path.exists()


def test_a_file_that_is_not_a_database_is_named(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list")
    with pytest.raises(changestream.InvalidArgument, match=f"{notes} is not a database file"):
        changestream.open(str(notes))
    result = CliRunner().invoke(main, ["sql", str(notes), "SELECT 1"])
    assert result.exit_code == 2
    assert f"error: {notes} is not a changestream database: not an SQLite database" in (
        result.output
    )
    assert notes.read_text() == "shopping list"


def test_reading_commands_leave_plain_and_empty_files_as_they_are(tmp_path: Path) -> None:
    import sqlite3

    plain, empty = tmp_path / "plain.db", tmp_path / "empty.db"
    with sqlite3.connect(plain) as conn:
        conn.execute("CREATE TABLE notes (line TEXT)")
    conn.close()
    empty.touch()
    runner = CliRunner()
    for path, reason in ((plain, "without changestream's system tables"), (empty, "an empty file")):
        for command in (["sql", str(path), "SELECT 1"], ["partitions", str(path), "S"]):
            result = runner.invoke(main, command)
            assert result.exit_code == 2, result.output
            assert f"{path} is not a changestream database: " in result.output
            assert reason in result.output and "`changestream ddl` makes it one" in result.output
    with sqlite3.connect(plain) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master")]
    conn.close()
    assert tables == ["notes"]
    assert empty.stat().st_size == 0


def test_partitions_at_outside_the_streams_life_is_an_error(tmp_path: Path) -> None:
    path = str(tmp_path / "p.db")
    with changestream.open(path) as db:
        created = db.execute_ddl(
            ["CREATE TABLE T (K INT64) PRIMARY KEY (K)", "CREATE CHANGE STREAM S FOR T"]
        )
    runner = CliRunner()
    for at in (created - 1, created + 3_600_000_000):
        moment = changestream.clock.format_ts(at)
        result = runner.invoke(main, ["partitions", path, "S", "--at", moment])
        assert result.exit_code == 2, result.output
        assert "is outside the life of change stream 'S'" in result.output
    at_creation = changestream.clock.format_ts(created)
    good = runner.invoke(main, ["partitions", path, "S", "--at", at_creation, "--json"])
    assert good.exit_code == 0 and "token" in good.output


def test_streams_list_and_describe_print_created_at_alike(tmp_path: Path) -> None:
    import orjson

    path = str(tmp_path / "s.db")
    runner = CliRunner()
    ddl = [
        "CREATE TABLE T (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)",
        "CREATE CHANGE STREAM S FOR T OPTIONS (value_capture_type = 'NEW_ROW')",
    ]
    assert runner.invoke(main, ["ddl", path, *ddl]).exit_code == 0
    create = ["streams", "create", "s", "--db", path, "--change-stream", "S"]
    created = runner.invoke(main, [*create, "--destination", str(tmp_path / "out")])
    assert created.exit_code == 0, created.output
    listed = runner.invoke(main, ["streams", "list", "--db", path, "--json"])
    described = runner.invoke(main, ["streams", "describe", "s", "--db", path, "--json"])
    (line,) = listed.output.splitlines()
    in_list = orjson.loads(line)["definition"]["created_at"]
    assert in_list == orjson.loads(described.output)["definition"]["created_at"]
    assert isinstance(in_list, str) and in_list.endswith("Z")


def test_serve_reports_bad_tls_files_busy_ports_and_non_databases(tmp_path: Path) -> None:
    import socket

    path = str(tmp_path / "ok.db")
    runner = CliRunner()
    assert (
        runner.invoke(main, ["ddl", path, "CREATE TABLE T (K INT64) PRIMARY KEY (K)"]).exit_code
        == 0
    )
    base = ["serve", path, "--insecure-no-auth", "--host", "127.0.0.1"]
    missing = runner.invoke(
        main, [*base, "--port", "0", "--tls-cert", str(tmp_path / "c.pem"), "--tls-key", "k.pem"]
    )
    assert missing.exit_code == 2
    assert f"error: --tls-cert: no file at '{tmp_path / 'c.pem'}'" in missing.output
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate")
    bad = runner.invoke(
        main, [*base, "--port", "0", "--tls-cert", str(bogus), "--tls-key", str(bogus)]
    )
    assert bad.exit_code == 2 and f"error: --tls-cert '{bogus}'" in bad.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = runner.invoke(main, [*base, "--port", str(port)])
    assert busy.exit_code == 2
    assert f"error: cannot listen on 127.0.0.1:{port}: Address already in use" in busy.output
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database")
    refused = runner.invoke(main, ["serve", str(notes), "--insecure-no-auth", "--port", "0"])
    assert refused.exit_code == 2 and f"{notes} is not a changestream database" in refused.output


def test_watching_a_missing_table_warns_with_the_tables_there_are(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "w.db")) as db:
        db.execute_ddl("CREATE TABLE Orders (K INT64) PRIMARY KEY (K)")
        with pytest.warns(UserWarning, match="table 'Oders' does not exist.*tables: Orders"):
            cursor = db.table("Oders").watch(max_await_time_ms=50)
        with cursor:
            assert cursor.try_next() is None and cursor.alive


def test_stream_client_logs_say_where_a_lease_came_from(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from changestream.client import RecordProcessor, StreamClient

    with changestream.open(str(tmp_path / "c.db")) as db:
        db.execute_ddl(
            ["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)", "CREATE CHANGE STREAM S FOR T"]
        )
        client = StreamClient(db, "S", "w1", RecordProcessor, lease_timeout=1.0)
        with caplog.at_level(logging.INFO, logger="changestream.client"):
            client.start()
            try:
                import time

                deadline = time.monotonic() + 30
                while "took free partition" not in caplog.text:
                    assert time.monotonic() < deadline, caplog.text
                    time.sleep(0.05)
            finally:
                client.stop()
    assert "from None" not in caplog.text and "from w1" not in caplog.text


def test_a_sql_typo_is_explained_in_our_words(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "q.db")) as db:
        db.execute_ddl("CREATE TABLE T (K INT64) PRIMARY KEY (K)")
        with pytest.raises(changestream.InvalidArgument) as typo:
            db.execute_sql("SELEC * FROM T")
        assert "'SELEC' does not start a statement" in str(typo.value)
        with pytest.raises(changestream.InvalidArgument) as misplaced:
            db.execute_sql("SELECT * FROM T WHERE")
        assert (
            str(misplaced.value)
            == "cannot parse SQL: syntax error at line 1, column 21, near 'WHERE'"
        )
        for error in (typo.value, misplaced.value):
            assert "sqlglot" not in str(error) and "<class" not in str(error)


def test_a_server_never_reached_is_reported_within_seconds() -> None:
    import socket
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once the probe closes
    remote = changestream.connect(f"http://127.0.0.1:{port}/db", reconnect_timeout=30.0)
    began = time.monotonic()
    with pytest.raises(Unavailable, match="has not answered since connect"):
        remote.tables()
    assert time.monotonic() - began < 10  # the 30 s budget is for an established session
    remote.close()


@pytest.mark.parametrize("where", ["file", "url"])
def test_an_untyped_param_takes_the_type_of_the_column_it_meets(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    path = str(tmp_path / "typed.db")
    db = changestream.open(path)
    request.addfinalizer(db.close)
    db.execute_ddl("CREATE TABLE T (K INT64 NOT NULL, S STRING(MAX), F FLOAT64) PRIMARY KEY (K)")
    with db.transaction() as tx:
        tx.insert("T", ["K", "S", "F"], [[5, "x", 1.5], [6, "5", 2.0]])
    runner = CliRunner()
    target = path
    if where == "url":
        databases, url = request.getfixturevalue("served")
        databases.add("typed", db)
        request.addfinalizer(lambda: databases.remove("typed"))
        target = f"{url}/typed"
    k_is = runner.invoke(main, ["sql", target, "SELECT S FROM T WHERE K = @k", "-p", "k=5"])
    assert (k_is.exit_code, k_is.output) == (0, '{"S":"x"}\n')
    text = runner.invoke(main, ["sql", target, "SELECT K FROM T WHERE S = @s", "-p", "s=5"])
    assert (text.exit_code, text.output) == (0, '{"K":6}\n')
    both = runner.invoke(
        main,
        ["sql", target, "SELECT K FROM T t WHERE t.F > @f AND K IN (@a, @b)",
         "-p", "f=1.6", "-p", "a=5", "-p", "b=6"],
    )  # fmt: skip
    assert (both.exit_code, both.output) == (0, '{"K":6}\n')
    bad = runner.invoke(main, ["sql", target, "SELECT S FROM T WHERE K = @k", "-p", "k=abc"])
    assert bad.exit_code == 2
    assert "@k: 'abc' is not a valid INT64 value" in bad.output and "column 'K'" in bad.output
    alone = runner.invoke(main, ["sql", target, "SELECT @x AS x", "-p", "x=5"])
    assert alone.output == '{"x":"5"}\n'  # compared with no column: text
