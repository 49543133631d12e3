"""A read token cannot escape: each attack found on the server, tried again and refused.

Every attack runs against a real server over a directory of real files, with a read-scoped
token, and checks the refusal says why and that no file changed.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import changestream
from changestream.errors import InvalidArgument, PermissionDenied
from changestream.server import Databases, ServerConfig, TokenFile, create_app, create_token
from changestream.server.app import ServerState
from changestream.server.serve import RunningServer, serve_in_thread
from changestream.streams.sandbox import SqlSandbox
from tests.conftest import ACCOUNT_BALANCE
from tests.server_support import free_port, spawn_server

RECURSIVE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


def dump(path: Path) -> list[str]:
    """Every table's schema and rows, read without writing (a plain file's bytes if not SQLite)."""
    uri = f"file:{urllib.parse.quote(str(path))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            return list(conn.iterdump())
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return [path.read_bytes().hex()]


@dataclass
class Site:
    """A server over a directory, its tokens, and the files it holds."""

    url: str
    tokens: dict[str, str]
    directory: Path
    outside: Path
    state: ServerState
    errors: list[logging.LogRecord]

    def call(
        self, method: str, path: str, body: Any = None, scope: str = "read", **kw: Any
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[scope]}"}
        content = kw.pop("content", None if body is None else orjson.dumps(body))
        kw.setdefault("timeout", 30)
        return httpx.request(method, self.url + path, content=content, headers=headers, **kw)

    def sql(self, text: str, database: str = "bank") -> httpx.Response:
        return self.call("POST", f"/v1/databases/{database}/sql", {"sql": text})

    def files(self) -> dict[str, list[str]]:
        """What each file holds (SQLite's -wal and -shm files count as part of their database)."""
        files = [*self.directory.glob("*.db"), self.outside]
        return {p.name: dump(p) for p in sorted(files)}


class _Errors(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.ERROR)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _serve(directory: Path, tokens_file: str, follow: bool, **config: Any) -> RunningServer:
    app = create_app(
        Databases.serve(str(directory), follow_symlinks=follow),
        TokenFile(tokens_file),
        ServerConfig(**config),
    )
    return serve_in_thread(app)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("security")
    directory, elsewhere = tmp / "served", tmp / "elsewhere"
    directory.mkdir()
    elsewhere.mkdir()
    with changestream.open(str(directory / "bank.db")) as db:
        db.execute_ddl([ACCOUNT_BALANCE, "CREATE CHANGE STREAM Bank FOR AccountBalance"])
        with db.transaction() as tx:
            rows = [[f"a{i:03}", changestream.COMMIT_TIMESTAMP, i] for i in range(300)]
            tx.insert("AccountBalance", ["AccountId", "LastUpdate", "Balance"], rows)
    with changestream.open(str(elsewhere / "secret.db")) as db:
        db.execute_ddl(["CREATE TABLE Secret (K INT64 NOT NULL) PRIMARY KEY (K)"])
    plain = sqlite3.connect(directory / "plain.db")
    plain.execute("CREATE TABLE notes (body TEXT)")
    plain.commit()
    plain.close()
    (directory / "empty.db").touch()
    (directory / "junk.db").write_bytes(b"not a database at all" * 100)
    os.symlink(elsewhere / "secret.db", directory / "outside.db")
    tokens_file = str(tmp / "tokens")
    tokens = {s: create_token(tokens_file, (s,), s) for s in ("read", "write", "admin")}
    tokens["reader2"] = create_token(tokens_file, ("read",), "reader2")
    records: list[logging.LogRecord] = []
    handler = _Errors(records)
    for name in ("changestream", "uvicorn.error", "uvicorn"):
        logging.getLogger(name).addHandler(handler)
    limits = {
        "sql_max_seconds": 1.0,
        "sql_max_rows": 200,
        "sql_max_bytes": 20_000,
        "max_streams_per_token": 2,
        "max_body_bytes": 4096,
        "keepalive_seconds": 0.2,
    }
    running = _serve(directory, tokens_file, False, **limits)
    state: ServerState = running.server.config.app.state.server
    try:
        yield Site(running.url, tokens, directory, elsewhere / "secret.db", state, records)
    finally:
        running.stop()
        for name in ("changestream", "uvicorn.error", "uvicorn"):
            logging.getLogger(name).removeHandler(handler)


@pytest.fixture
def unchanged(site: Site) -> Iterator[None]:
    """The test must leave every file of the site as it found it."""
    before = site.files()
    yield
    assert site.files() == before


def refused(response: httpx.Response, status: int, code: str, *words: str) -> str:
    assert response.status_code == status, response.text
    error = orjson.loads(response.content)["error"]
    assert error["code"] == code, error
    for word in words:
        assert word in error["message"], error["message"]
    return str(error["message"])


def stream_error(response: httpx.Response) -> dict[str, Any]:
    """The error line a streamed response ended with."""
    assert response.status_code == 200, response.text
    last = orjson.loads(response.content.splitlines()[-1])
    assert last["type"] == "error", last
    error: dict[str, Any] = last["error"]
    return error


# -- SQL ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("SELECT fts3_tokenizer('simple')", ["fts3_tokenizer", "not allowed"]),
        ("SELECT fts3_tokenizer('mine', x'00')", ["fts3_tokenizer", "not allowed"]),
        ("SELECT load_extension('/tmp/evil')", ["load_extension", "not allowed"]),
        ("SELECT name FROM dbstat", ["dbstat"]),
        ("SELECT * FROM (SELECT name FROM dbstat)", ["dbstat"]),
        ("SELECT name FROM sqlite_master", ["sqlite_master", "not accessible"]),
        ("SELECT name FROM sqlite_schema", ["sqlite_schema", "not accessible"]),
        ('SELECT * FROM "_cs_streams"', ["_cs_streams", "not accessible"]),
        ("SELECT * FROM _CS_META", ["not accessible"]),
        ("SELECT * FROM pragma_table_info('AccountBalance')", ["not accessible"]),
        ("PRAGMA table_info(AccountBalance)", ["SELECT"]),
        ("ATTACH 'other.db' AS other", ["SELECT"]),
        ("SELECT randomblob(100000000)", ["randomblob", "not allowed"]),
    ],
)
def test_sql_outside_user_tables_and_allowed_functions_is_refused(
    site: Site, query: str, words: list[str]
) -> None:
    refused(site.sql(query), 400, "InvalidArgument", *words)


def test_sql_over_user_tables_still_works(site: Site) -> None:
    lines = [
        orjson.loads(line)
        for line in site.sql(
            "SELECT count(*), max(Balance), upper('x') FROM AccountBalance"
        ).content.splitlines()
    ]
    assert lines[1] == {"type": "row", "row": [300, 299, "X"]}
    assert lines[-1] == {"type": "end"}


@pytest.mark.usefixtures("unchanged")
def test_an_unbounded_query_is_stopped_by_its_time_budget(site: Site) -> None:
    started = time.monotonic()
    message = refused(site.sql(RECURSIVE), 429, "ResourceExhausted", "longer than 1 s")
    assert "LIMIT" in message
    assert time.monotonic() - started < 5


def producing(site: Site) -> bool:
    """Whether a streaming response still has a thread producing it."""
    return "changestream_open_streams{" in site.call("GET", "/metrics").text


def wait_until_idle(site: Site) -> float:
    """Seconds until no thread produces a streaming response (at most 5)."""
    started = time.monotonic()
    while producing(site) and time.monotonic() - started < 5:
        time.sleep(0.01)
    assert not producing(site)
    return time.monotonic() - started


def test_a_query_whose_client_left_before_any_row_is_cancelled(site: Site) -> None:
    """The budget is 1 s; a client gone after 0.2 s frees the server's thread well before."""
    with pytest.raises(httpx.ReadTimeout):
        site.call("POST", "/v1/databases/bank/sql", {"sql": RECURSIVE}, timeout=0.2)
    assert wait_until_idle(site) < 0.7


def test_a_query_whose_client_left_mid_stream_is_cancelled(site: Site) -> None:
    """The first row comes at once, then the query runs on without finding more."""
    query = RECURSIVE.replace("SELECT count(*) FROM c", "SELECT x FROM c WHERE x = 1 OR x < 0")
    headers = {"Authorization": f"Bearer {site.tokens['read']}"}
    body = orjson.dumps({"sql": query})
    url = site.url + "/v1/databases/bank/sql"
    with httpx.stream("POST", url, content=body, headers=headers, timeout=30) as response:
        first = next(response.iter_lines())
    assert orjson.loads(first) == {"type": "fields", "fields": ["x"]}
    assert wait_until_idle(site) < 0.7


def test_rows_past_the_cap_end_the_response_with_a_clear_error(site: Site) -> None:
    error = stream_error(site.sql("SELECT AccountId FROM AccountBalance"))
    assert error["code"] == "ResourceExhausted"
    assert "more than 200 rows" in error["message"]


def test_bytes_past_the_cap_end_the_response_with_a_clear_error(site: Site) -> None:
    error = stream_error(site.sql("SELECT printf('%0200d', Balance) FROM AccountBalance LIMIT 199"))
    assert error["code"] == "ResourceExhausted"
    assert "more than 20000 bytes" in error["message"]


def test_embedded_callers_opt_into_the_sandbox(site: Site) -> None:
    with changestream.open(str(site.directory / "bank.db")) as db:
        with pytest.raises(InvalidArgument, match="fts3_tokenizer"):
            db.execute_sql("SELECT fts3_tokenizer('simple')", sandbox=SqlSandbox())
        # Without a sandbox an embedded caller keeps the whole of SQLite (its own SQL).
        assert list(db.execute_sql("SELECT typeof(fts3_tokenizer('simple'))")) == [["blob"]]


# -- reading never writes ----------------------------------------------------------------------


def streams_in(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (count,) = conn.execute("SELECT count(*) FROM _cs_streams").fetchone()
        return int(count)
    finally:
        conn.close()


@pytest.mark.usefixtures("unchanged")
def test_a_read_token_cannot_make_watch_create_a_stream(site: Site) -> None:
    remote = changestream.connect(site.url + "/bank", token=site.tokens["read"])
    try:
        with pytest.raises(PermissionDenied, match="admin scope creates it"):
            remote.watch().try_next()
    finally:
        remote.close()
    assert streams_in(site.directory / "bank.db") == 1


# -- files that are not changestream databases ------------------------------------------------


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("plain", ["without changestream's system tables", "admin"]),
        ("empty", ["an empty file", "admin"]),
        ("junk", ["not an SQLite database"]),
        ("outside", ["symlink", "--follow-symlinks"]),
    ],
)
def test_files_that_are_not_served_databases_are_refused_untouched(
    site: Site, name: str, words: list[str]
) -> None:
    for method, path, body in [
        ("GET", f"/v1/databases/{name}/tables", None),
        ("POST", f"/v1/databases/{name}/read", {"table": "notes"}),
        ("POST", f"/v1/databases/{name}/sql", {"sql": "SELECT 1"}),
        ("POST", f"/v1/databases/{name}/watch_source", {}),
    ]:
        refused(site.call(method, path, body), 412, "FailedPrecondition", *words)


def test_the_listing_names_files_that_are_not_databases(site: Site) -> None:
    listing = site.call("GET", "/v1/databases").json()
    assert listing["databases"] == ["bank"]
    problems = {entry["name"]: entry["problem"] for entry in listing["not_databases"]}
    assert set(problems) == {"empty", "junk", "outside", "plain"}
    assert "symlink" in problems["outside"]


def test_metrics_answer_beside_files_that_are_not_databases(site: Site) -> None:
    response = site.call("GET", "/metrics")
    assert response.status_code == 200, response.text
    assert 'stream="Bank"' in response.text


def test_an_admin_ddl_request_makes_an_empty_file_a_database(site: Site, tmp_path: Path) -> None:
    target = site.directory / "fresh.db"
    target.touch()
    try:
        ddl = {"statements": "CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)"}
        refused(
            site.call("POST", "/v1/databases/fresh/ddl", ddl, scope="read"), 403, "PermissionDenied"
        )
        assert target.stat().st_size == 0
        assert site.call("POST", "/v1/databases/fresh/ddl", ddl, scope="admin").status_code == 200
        assert site.call("GET", "/v1/databases/fresh/tables").json()["tables"][0]["name"] == "T"
    finally:
        site.state.databases.remove("fresh")
        target.unlink()


def test_follow_symlinks_serves_a_database_outside_the_directory(site: Site) -> None:
    tokens_file = str(site.directory.parent / "tokens")
    with _serve(site.directory, tokens_file, True) as running:
        headers = {"Authorization": f"Bearer {site.tokens['read']}"}
        response = httpx.get(f"{running.url}/v1/databases/outside/tables", headers=headers)
    assert response.status_code == 200, response.text
    assert [t["name"] for t in response.json()["tables"]] == ["Secret"]


# -- request limits -----------------------------------------------------------------------------


@pytest.mark.usefixtures("unchanged")
def test_deeply_nested_parameters_are_a_clear_400(site: Site) -> None:
    deep = b'{"sql": "SELECT ?", "params": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    response = site.call("POST", "/v1/databases/bank/sql", content=deep)
    refused(response, 400, "InvalidArgument", "more than 64 levels deep")
    deeper = b'{"sql": "SELECT ?", "params": ' + b"[" * 1500 + b"]" * 1500 + b"}"
    response = site.call("POST", "/v1/databases/bank/sql", content=deeper)
    refused(response, 400, "InvalidArgument", "not valid JSON")


@pytest.mark.usefixtures("unchanged")
def test_a_request_over_the_size_limit_is_a_clear_413(site: Site) -> None:
    body = {"sql": "SELECT 1 -- " + "x" * 5000}
    refused(site.call("POST", "/v1/databases/bank/sql", body), 413, "InvalidArgument", "4096")


def test_open_streams_per_token_are_limited(site: Site) -> None:
    path = site.url + "/v1/databases/bank/read_change_stream"
    with httpx.Client(timeout=30) as client:
        client.headers["Authorization"] = f"Bearer {site.tokens['read']}"
        found = client.get(site.url + "/v1/databases/bank/streams/Bank/partitions").json()
        partition = found["partitions"][0]
        body = orjson.dumps(
            {
                "stream": "Bank",
                "start_timestamp": partition["start_timestamp"],
                "partition_token": partition["token"],
                "heartbeat_milliseconds": 1000,
            }
        )
        other = {"Authorization": f"Bearer {site.tokens['reader2']}"}
        with (
            client.stream("POST", path, content=body) as first,
            client.stream("POST", path, content=body) as second,
        ):
            assert first.status_code == second.status_code == 200
            refused(client.post(path, content=body), 429, "ResourceExhausted", "2 streams")
            # Another token is not held to this one's streams.
            with client.stream("POST", path, content=body, headers=other) as third:
                assert third.status_code == 200


def test_the_serve_command_takes_the_limits_and_follow_symlinks(site: Site) -> None:
    port = free_port()
    process = spawn_server(
        str(site.directory),
        port,
        "--insecure-no-auth",
        "--sql-max-seconds",
        "0.3",
        "--follow-symlinks",
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/databases"
        stopped = httpx.post(f"{url}/bank/sql", content=orjson.dumps({"sql": RECURSIVE}))
        refused(stopped, 429, "ResourceExhausted", "longer than 0.3 s")
        assert httpx.get(f"{url}/outside/tables").status_code == 200
    finally:
        process.terminate()
        process.wait(30)


def test_the_server_logged_no_tracebacks(site: Site) -> None:
    """Runs last: every refusal above was an answer, not a crash."""
    assert [r.getMessage() for r in site.errors] == []
