"""Bearer tokens and scopes: no token, a wrong token, and each scope against every endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner

import changestream
from changestream.cli import main
from changestream.datastream.catalog import StreamCatalog
from changestream.datastream.definition import StreamDefinition
from changestream.errors import InvalidArgument, PermissionDenied, Unauthenticated
from changestream.server import TokenFile, create_token
from changestream.server.auth import token_hash
from changestream.server.routes import ROUTES
from tests.conftest import ACCOUNT_BALANCE
from tests.server_support import EXPECTED_SCOPES, serving

SCOPES = ("read", "write", "admin")
DATASTREAM = {"database": "bank.db", "change_stream": "Bank", "destination": "/nonexistent/out"}
LEASE = {"status_type": "partition", "status_value": "p1"}


def test_every_declared_endpoint_has_the_documented_scope() -> None:
    declared = {(method, path): scope for path, method, scope, *_ in ROUTES}
    assert declared == EXPECTED_SCOPES


def request_for(path: str, method: str, created: int) -> tuple[str, dict[str, Any] | None]:
    """A request each route accepts, given the scope it needs."""
    # The one Datastream stream deleted is its own, so the others still find "Bank".
    stream = (
        "Doomed"
        if (path, method) == ("/v1/databases/{database}/streams/{stream}", "DELETE")
        else "Bank"
    )
    url = path.replace("{database}", "bank").replace("{stream}", stream)
    bodies: dict[str, dict[str, Any]] = {
        "/ddl": {"statements": "CREATE TABLE Extra (K INT64 NOT NULL) PRIMARY KEY (K)"},
        "/commit": {
            "mutations": [
                {
                    "op": "insert_or_update",
                    "table": "AccountBalance",
                    "columns": ["AccountId", "LastUpdate", "Balance"],
                    "values": [["a", {"$commit_timestamp": True}, 1]],
                }
            ]
        },
        "/execute_update": {"dml": "DELETE FROM AccountBalance WHERE AccountId = 'none'"},
        "/rollback": {"session": "unknown"},
        "/read": {"table": "AccountBalance"},
        "/sql": {"sql": "SELECT * FROM AccountBalance"},
        "/read_change_stream": {"stream": "Bank", "start_timestamp": created},
        # With a live partition's token and start (see live_partition).
        "/change_sizes": {},
        "/split": {"table": "AccountBalance", "key": ["m"]},
        "/merge": {"table": "AccountBalance", "key": ["m"]},
        "/split_policy": {"changes": {"enabled": False}},
        "/leases/list": {"consumer": "c"},
        "/leases/get": {"consumer": "c", **LEASE},
        "/leases/insert_if_absent": {"consumer": "c", "lease": LEASE},
        "/leases/update": {"consumer": "c", "lease": LEASE},
        "/leases/delete": {"consumer": "c", "lease": LEASE},
        "/read_snapshot": {"table": "AccountBalance"},
        "/system_documents/list": {"kind": "k"},
        "/system_documents/put": {"kind": "k", "name": "n", "body": {}, "expected_version": None},
        "/system_documents/delete": {"kind": "k", "name": "n"},
        "/system_log/append": {"kind": "k", "name": "n", "entry": {"x": 1}},
        "/system_log/list": {"kind": "k", "name": "n"},
        "/streams": {"definition": {**DATASTREAM, "name": "Created"}},
        "/state": {"verb": "start"},
    }
    if url.endswith("/tail"):  # a bounded tail, so the request ends
        return f"{url}?start={created}&end={created}", None
    if method == "GET":
        return url, None
    suffix = next((s for s in bodies if url.endswith(s)), None)
    return url, bodies[suffix] if suffix else {}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], int]]:
    """(server URL, a token per scope, stream creation time) for a server needing tokens."""
    tmp = tmp_path_factory.mktemp("auth")
    tokens_file = str(tmp / "tokens")
    tokens = {scope: create_token(tokens_file, (scope,), scope) for scope in SCOPES}
    with changestream.open(str(tmp / "bank.db")) as db:
        created = db.execute_ddl(
            [
                ACCOUNT_BALANCE,
                "CREATE CHANGE STREAM Bank FOR AccountBalance "
                "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
            ]
        )
        for name in ("Bank", "Doomed"):
            StreamCatalog(db).create(StreamDefinition(name=name, **DATASTREAM))
        db.ensure_watch_stream()  # a read token may watch once an admin made watch()'s stream
        with serving({"bank": db}, TokenFile(tokens_file)) as running:
            yield running.url, tokens, created


def live_partition(url: str, token: str) -> dict[str, Any]:
    """A change_sizes body of one live partition of the Bank stream (other tests split it)."""
    answer = call(url, "GET", "/v1/databases/bank/streams/Bank/partitions", None, token)
    partition = answer.json()["partitions"][0]
    start = partition["start_timestamp"]
    return {"partition_token": partition["token"], "start_timestamp": start, "end_timestamp": start}


def call(url: str, method: str, path: str, body: Any, token: str | None) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    content = None if body is None else orjson.dumps(body)
    return httpx.request(method, url + path, content=content, headers=headers, timeout=30)


@pytest.mark.parametrize(
    ("path", "method", "scope"),
    [(path, method, scope) for (method, path), scope in EXPECTED_SCOPES.items()],
)
def test_every_endpoint_checks_token_and_scope(
    secured: tuple[str, dict[str, str], int], path: str, method: str, scope: str | None
) -> None:
    url, tokens, created = secured
    target, body = request_for(path, method, created)
    if path.endswith("/change_sizes"):
        body = live_partition(url, tokens["read"])
    if scope is None:
        assert call(url, method, target, body, None).status_code == 200
        return
    for token, status, code in [
        (None, 401, "Unauthenticated"),
        ("cs_wrong", 401, "Unauthenticated"),
        *((tokens[s], 403, "PermissionDenied") for s in SCOPES if s != scope),
    ]:
        response = call(url, method, target, body, token)
        assert response.status_code == status, (token, response.text)
        assert response.headers["content-type"] == "application/json"
        # The error and nothing else: no data leaks with it.
        assert orjson.loads(response.content) == {
            "error": {"code": code, "message": orjson.loads(response.content)["error"]["message"]}
        }
    response = call(url, method, target, body, tokens[scope])
    assert response.status_code == 200, response.text
    if path.endswith("/execute_update"):
        session = orjson.loads(response.content)["session"]
        rollback = target.replace("/execute_update", "/rollback")
        assert call(url, "POST", rollback, {"session": session}, tokens[scope]).status_code == 200


def test_malformed_authorization_headers(secured: tuple[str, dict[str, str], int]) -> None:
    url = secured[0]
    for header in ("Basic abc", "Bearer", "Token x", secured[1]["read"]):
        response = httpx.get(url + "/v1/databases", headers={"Authorization": header})
        assert response.status_code == 401
        assert orjson.loads(response.content)["error"]["code"] == "Unauthenticated"


def test_remote_database_raises_auth_errors(secured: tuple[str, dict[str, str], int]) -> None:
    url, tokens, _ = secured
    with pytest.raises(Unauthenticated, match="not valid"):
        changestream.connect(url + "/bank", token="cs_wrong").read("AccountBalance")
    reader = changestream.connect(url + "/bank", token=tokens["read"])
    assert isinstance(reader.read("AccountBalance"), list)
    denied = "needs the 'write' scope; the token has read"
    with pytest.raises(PermissionDenied, match=denied), reader.transaction() as tx:
        tx.insert("AccountBalance", ["AccountId"], [["x"]])
    with pytest.raises(PermissionDenied, match="'admin'"):
        reader.execute_ddl("DROP CHANGE STREAM Bank")
    reader.close()


def test_tokens_file_keeps_hashes_only_and_is_reread(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens")
    create = ["token", "create", "--tokens", path, "--scope", "write,read"]
    result = CliRunner().invoke(main, create)
    assert result.exit_code == 0, result.output
    token = result.output.strip()
    text = (tmp_path / "tokens").read_text()
    assert token not in text and token_hash(token) in text
    entry = orjson.loads(text)
    assert entry["scopes"] == ["read", "write"]
    assert (tmp_path / "tokens").stat().st_mode & 0o077 == 0
    accepted = TokenFile(path).authenticate(f"Bearer {token}")
    assert accepted.scopes == {"read", "write"}
    bad = CliRunner().invoke(main, ["token", "create", "--tokens", path, "--scope", "root"])
    assert bad.exit_code == 2 and "scopes must be a comma-separated list" in bad.output
    with pytest.raises(InvalidArgument, match="no tokens file"):
        TokenFile(str(tmp_path / "missing"))


def test_serve_refuses_to_start_without_a_choice_of_auth(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "a.db")):
        pass
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "a.db")])
    assert result.exit_code == 2
    assert "--tokens FILE" in result.output and "--insecure-no-auth" in result.output
