"""Datastream-style streams as REST resources: define, list, describe, move through the
lifecycle and delete, over a real server and database, each verb with the scope it needs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import changestream
from changestream.datastream.catalog import StreamCatalog
from changestream.errors import PermissionDenied
from changestream.server import TokenFile, create_token
from tests.conftest import ACCOUNT_BALANCE
from tests.server_support import serving

STREAMS = "/v1/databases/bank/streams"


class Site:
    def __init__(self, url: str, tokens: dict[str, str], db: changestream.EmbeddedDatabase):
        self.url, self.tokens, self.db = url, tokens, db

    def call(self, method: str, path: str, body: Any = None, scope: str = "read") -> httpx.Response:
        content = None if body is None else orjson.dumps(body)
        headers = {"Authorization": f"Bearer {self.tokens[scope]}"}
        return httpx.request(method, self.url + path, content=content, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("streams")
    tokens_file = str(tmp / "tokens")
    tokens = {s: create_token(tokens_file, (s,), s) for s in ("read", "write", "admin")}
    with changestream.open(str(tmp / "bank.db")) as db:
        db.execute_ddl(
            [
                ACCOUNT_BALANCE,
                "CREATE CHANGE STREAM Bank FOR AccountBalance "
                "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
            ]
        )
        with serving({"bank": db}, TokenFile(tokens_file)) as running:
            yield Site(running.url, tokens, db)


def definition(name: str, tmp: Path) -> dict[str, Any]:
    return {
        "name": name,
        "database": "bank.db",
        "change_stream": "Bank",
        "destination": str(tmp / "events"),
    }


def test_a_stream_goes_through_its_lifecycle(site: Site, tmp_path: Path) -> None:
    body = {"definition": definition("orders", tmp_path)}
    created = site.call("POST", STREAMS, body, scope="admin")
    assert created.status_code == 200, created.text
    assert created.json()["state"] == "Not started"
    assert [s["name"] for s in site.call("GET", STREAMS).json()["streams"]] == ["orders"]
    described = site.call("GET", STREAMS + "/orders").json()
    assert described["state"] == "Not started"
    assert described["definition"]["change_stream"] == "Bank"

    def move(verb: str) -> httpx.Response:
        return site.call("PUT", STREAMS + "/orders/state", {"verb": verb}, scope="write")

    assert move("start").json() == {"name": "orders", "state": "Starting"}
    refused = move("start")
    assert refused.status_code == 412
    assert "Starting" in refused.json()["error"]["message"]
    assert move("pause").json()["state"] == "Paused"
    assert StreamCatalog(site.db).get("orders").state.value == "Paused"
    assert site.call("DELETE", STREAMS + "/orders", scope="admin").status_code == 200
    gone = site.call("GET", STREAMS + "/orders")
    assert gone.status_code == 404 and "does not exist" in gone.json()["error"]["message"]


def test_each_verb_needs_its_scope_and_a_valid_body(site: Site, tmp_path: Path) -> None:
    body = {"definition": definition("guarded", tmp_path)}
    assert site.call("POST", STREAMS, body, scope="write").status_code == 403
    assert site.call("GET", STREAMS).json()["streams"] == []
    assert site.call("POST", STREAMS, body, scope="admin").status_code == 200
    try:
        put = site.call("PUT", STREAMS + "/guarded/state", {"verb": "start"}, scope="read")
        assert put.status_code == 403
        bad = site.call("PUT", STREAMS + "/guarded/state", {"verb": "explode"}, scope="write")
        assert bad.status_code == 400 and "$.verb" in bad.json()["error"]["message"]
        assert site.call("DELETE", STREAMS + "/guarded", scope="write").status_code == 403
    finally:
        site.call("DELETE", STREAMS + "/guarded", scope="admin")
    unknown = {"definition": {**definition("x", tmp_path), "colour": "red"}}
    wrong = site.call("POST", STREAMS, unknown, scope="admin")
    assert wrong.status_code == 400 and "colour" in wrong.json()["error"]["message"]


def test_the_remote_client_drives_the_stream_resources(site: Site, tmp_path: Path) -> None:
    from changestream.datastream import StreamDefinition

    admin = changestream.connect(site.url + "/bank", token=site.tokens["admin"])
    reader = changestream.connect(site.url + "/bank", token=site.tokens["read"])
    writer = changestream.connect(site.url + "/bank", token=site.tokens["write"])
    try:
        made = admin.create_stream(StreamDefinition(**definition("viaclient", tmp_path)))
        assert (made.name, made.state) == ("viaclient", "Not started")
        assert made.definition.replica_dropped_columns == "keep"
        assert [s.name for s in reader.list_streams()] == ["viaclient"]
        described = reader.describe_stream("viaclient")
        assert described.state == "Not started" and described.definition.change_stream == "Bank"
        assert described.pipeline is None and described.lag_seconds is None
        with pytest.raises(PermissionDenied):
            reader.change_stream_state("viaclient", "start")
        assert writer.change_stream_state("viaclient", "start") == "Starting"
        with pytest.raises(changestream.FailedPrecondition, match="Starting"):
            writer.change_stream_state("viaclient", "start")
        with pytest.raises(changestream.InvalidArgument, match="verb"):
            writer.change_stream_state("viaclient", "explode")
        assert writer.change_stream_state("viaclient", "pause") == "Paused"
        with pytest.raises(changestream.InvalidArgument, match="colour"):
            admin.create_stream({**definition("bad", tmp_path), "colour": "red"})
    finally:
        admin.delete_stream("viaclient")
        for handle in (admin, reader, writer):
            handle.close()
    with pytest.raises(changestream.NotFound, match="does not exist"):
        StreamCatalog(site.db).get("viaclient")
