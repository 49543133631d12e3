"""The remote database against the embedded one: values, transactions, errors, the rest of the
API (leases, policy, watch), clusters, the CLI with URLs, TLS, and the server's own endpoints."""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import changestream
from changestream import COMMIT_TIMESTAMP, DataChangeRecord, KeyRange, Lease
from changestream.cli import main
from changestream.client import Checkpointer, RecordProcessor, StreamClient
from changestream.embedded.database import store_of
from changestream.errors import (
    AlreadyExists,
    DDLError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from changestream.remote._http import stream_lines
from changestream.server import Databases, NoAuth, create_app, serve_in_thread
from changestream.streams.positions import Position
from changestream.streams.records import ChildPartitionsRecord, HeartbeatRecord
from changestream.streams.stored_changes import StoredInserts
from changestream.wire import api
from changestream.wire.records import decode_stream_line, record_from_line, record_from_stream_line
from changestream.wire.values import decode, encode
from tests.conftest import ACCOUNT_BALANCE
from tests.server_support import EXPECTED_SCOPES, response_validator, serving

TYPES = (
    "CREATE TABLE V (K STRING(MAX) NOT NULL, Ts TIMESTAMP OPTIONS (allow_commit_timestamp = true),"
    " B BYTES(MAX), N NUMERIC, D DATE, J JSON, A ARRAY<INT64>, F FLOAT64, Flag BOOL,"
    " I INT64, Texts ARRAY<STRING(MAX)>) PRIMARY KEY (K)"
)
COLUMNS = ["K", "Ts", "B", "N", "D", "J", "A", "F", "Flag", "I", "Texts"]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[changestream.EmbeddedDatabase, changestream.Database]]:
    """(the embedded database, the same database through a server)."""
    with changestream.open(str(tmp_path / "pair.db")) as db:
        db.execute_ddl([TYPES, ACCOUNT_BALANCE, "CREATE CHANGE STREAM S FOR ALL"])
        with serving({"pair": db}, max_body_bytes=64 << 10) as running:
            remote = changestream.connect(running.url + "/pair")
            yield db, remote
            remote.close()


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.datetimes(timezones=st.none() | st.just(dt.UTC))
    | st.dates()
    | st.decimals(allow_nan=False)
    | st.just(COMMIT_TIMESTAMP)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)


@given(values)
@settings(max_examples=300, deadline=None)
def test_typed_values_round_trip_exactly(value: Any) -> None:
    back = decode(orjson.loads(orjson.dumps(encode(value))))
    assert back == value
    assert type(back) is type(value)


def test_non_finite_floats_and_key_ranges_round_trip() -> None:
    for number in (math.inf, -math.inf):
        assert decode(orjson.loads(orjson.dumps(encode(number)))) == number
    assert math.isnan(decode(orjson.loads(orjson.dumps(encode(math.nan)))))
    key_range = KeyRange(start_closed=("a", 1), end_open=(b"z",))
    assert decode(orjson.loads(orjson.dumps(encode(key_range)))) == key_range
    with pytest.raises(InvalidArgument, match="unknown typed value '\\$nope'"):
        decode({"$nope": 1})
    with pytest.raises(InvalidArgument, match="malformed"):
        decode({"$numeric": "twelve"})


def test_values_round_trip_through_the_server(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    embedded, remote = pair
    rows = [
        [
            "a",
            COMMIT_TIMESTAMP,
            b"\x00\xff\n",
            decimal.Decimal("-12.500000001"),
            dt.date(1999, 12, 31),
            {"$weird": [1, 2.5, None, {"x": "y"}], "big": 2**62},
            [1, None, -(2**63)],
            -0.0,
            True,
            2**63 - 1,
            ["", "é", None],
        ],
        [
            "b",
            dt.datetime(2020, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC),
            None,
            None,
            None,
            None,
            None,
            math.inf,
            False,
            -1,
            [],
        ],
    ]
    assert isinstance(remote, changestream.Database)
    with remote.transaction(tag="types") as tx:
        assert isinstance(tx, changestream.TransactionLike)
        tx.insert("V", COLUMNS, rows)
    assert remote.read("V") == embedded.read("V")
    assert remote.read("V", [("a",)], ["K", "Ts"]) == [("a", tx.commit_timestamp)]
    assert remote.read("V", KeyRange(start_open=("a",), end_closed=("z",)), ["K"]) == [("b",)]
    query = "SELECT K, B, F FROM V WHERE B = @b OR Ts = @t ORDER BY K"
    params = {"b": b"\x00\xff\n", "t": "2020-01-01T00:00:00.000001Z"}
    result = remote.execute_sql(query, params)
    expected = embedded.execute_sql(query, params)
    assert result.fields == expected.fields == ["K", "B", "F"]
    assert list(result) == list(expected)


def test_commit_is_all_or_nothing_with_the_embedded_errors(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    embedded, remote = pair
    columns = ["AccountId", "LastUpdate", "Balance"]
    for db in (embedded, remote):
        with db.transaction() as tx:
            tx.insert_or_update("AccountBalance", columns, [["a", COMMIT_TIMESTAMP, 1]])
    messages = []
    for db in (embedded, remote):
        with pytest.raises(AlreadyExists) as raised, db.transaction() as tx:
            tx.insert("AccountBalance", columns, [["new", COMMIT_TIMESTAMP, 1]])
            tx.insert("AccountBalance", columns, [["a", COMMIT_TIMESTAMP, 2]])
        messages.append(str(raised.value))
        with pytest.raises(InvalidArgument) as bad, db.transaction() as tx:
            tx.update("AccountBalance", ["AccountId", "Nope"], [["a", 1]])
        messages.append(str(bad.value))
    assert messages[0] == messages[2] and messages[1] == messages[3]
    assert [r[0] for r in remote.read("AccountBalance")] == ["a"]
    with pytest.raises(FailedPrecondition, match="already committed"):
        tx.commit()


def test_dml_runs_in_one_server_transaction_with_the_mutations(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    embedded, remote = pair
    insert = "INSERT INTO AccountBalance (AccountId, LastUpdate, Balance) VALUES (@id, @ts, @b)"
    stamp = "2024-01-01T00:00:00Z"
    with remote.transaction(tag="dml") as tx:
        tx.insert("AccountBalance", ["AccountId", "LastUpdate", "Balance"], [["m", stamp, 5]])
        assert tx.execute_update(insert, {"id": "d1", "ts": stamp, "b": 1}) == 1
        assert embedded.read("AccountBalance") == []  # not committed yet
        # A failing statement leaves the transaction usable, as embedded.
        with pytest.raises(AlreadyExists):
            tx.execute_update(insert, {"id": "d1", "ts": stamp, "b": 1})
        assert tx.execute_update("UPDATE AccountBalance SET Balance = 7 WHERE Balance = 1") == 1
    assert [(r[0], r[2]) for r in embedded.read("AccountBalance")] == [("d1", 7), ("m", 5)]
    with pytest.raises(RuntimeError), remote.transaction() as tx:
        tx.execute_update(insert, {"id": "gone", "ts": stamp, "b": 1})
        raise RuntimeError("roll back")
    assert "gone" not in {r[0] for r in embedded.read("AccountBalance")}
    # The rolled-back transaction released the write lock: others can write.
    with remote.transaction() as tx:
        tx.delete("AccountBalance", KeyRange(start_closed=(), end_closed=()))
    assert embedded.read("AccountBalance") == []
    with pytest.raises(InvalidArgument, match="execute_sql does not change data"):
        remote.execute_sql("DELETE FROM AccountBalance WHERE TRUE")


def test_errors_carry_the_embedded_class_and_message(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    embedded, remote = pair
    calls = [
        lambda db: db.read("Nope"),
        lambda db: db.execute_ddl("CREATE TABLE ("),
        lambda db: db.execute_sql("SELECT * FROM Nope"),
        lambda db: db.split_at("AccountBalance", (1,)),
        lambda db: db.partitions("Nope"),
        lambda db: db.set_split_policy(max_rows=-1),
        lambda db: db.leases("S", ""),
    ]
    for call in calls:
        with pytest.raises(changestream.ChangeStreamError) as local:
            call(embedded)
        with pytest.raises(changestream.ChangeStreamError) as far:
            call(remote)
        assert type(far.value) is type(local.value)
        assert str(far.value) == str(local.value)
    with pytest.raises(DDLError) as ddl:
        remote.execute_ddl("CREATE TABLE (")
    assert ddl.value.position is not None and ddl.value.statement == "CREATE TABLE ("
    with pytest.raises(NotFound, match=r"database 'other' does not exist \(databases: pair\)"):
        changestream.connect(remote.url.replace("/pair", "/other")).read("V")  # type: ignore[attr-defined]


def test_bad_requests_get_json_errors(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    _, remote = pair
    base = remote.url.rsplit("/", 1)[0]  # type: ignore[attr-defined]
    cases = [
        ("POST", "/v1/databases/pair/read", b"{not json", 400, "not valid JSON"),
        ("POST", "/v1/databases/pair/read", b"[1]", 400, "must be a JSON object"),
        (
            "POST",
            "/v1/databases/pair/read",
            b'{"table": 5}',
            400,
            "Expected `str`, got `int` - at `$.table`",
        ),
        ("POST", "/v1/databases/pair/read", b"x" * (65 << 10), 413, "larger than 65536 bytes"),
        (
            "POST",
            "/v1/databases/pair/commit",
            b'{"mutations": [{"op": "drop"}]}',
            400,
            "Invalid enum value 'drop' - at `$.mutations[0].op`",
        ),
        ("GET", "/v1/nowhere", None, 404, "GET /v1/nowhere: this server has no such request"),
        ("DELETE", "/v1/databases", None, 405, "Method Not Allowed"),
    ]
    for method, path, body, status, message in cases:
        response = httpx.request(method, base + path, content=body)
        assert response.status_code == status, response.text
        error = orjson.loads(response.content)["error"]
        assert message in error["message"], error
    with pytest.raises(InvalidArgument, match="larger than"), remote.transaction() as tx:
        tx.insert("V", ["K", "B"], [["big", b"x" * (70 << 10)]])


def test_partitions_policy_and_leases_match_embedded(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    embedded, remote = pair
    remote.split_at("AccountBalance", ("m",))
    assert remote.partitions("S") == embedded.partitions("S")
    assert remote.partition_history("S") == embedded.partition_history("S")  # type: ignore[attr-defined]
    at = embedded.partitions("S")[0].start_timestamp
    assert remote.partitions("S", at=at) == embedded.partitions("S", at=at)
    assert remote.merge_at("AccountBalance", ("m",)) > 0
    policy = remote.set_split_policy(max_rows=50_000, merge_max_rows=1_000)  # type: ignore[attr-defined]
    assert policy == embedded.split_policy() == remote.split_policy()  # type: ignore[attr-defined]
    assert remote.rebalance() == []  # type: ignore[attr-defined]
    table = remote.leases("S", "group")
    lease = Lease("partition", "p1", parent_shard_ids=("p0",), start_timestamp=5)
    assert table.insert_if_absent(lease) and not table.insert_if_absent(lease)
    updated = table.update(Lease("partition", "p1", "cp", 0, "worker", None, ("p0",), 5))
    assert updated is not None and updated.lease_counter == 1
    assert table.get("partition", "p1") == embedded.leases("S", "group").get("partition", "p1")
    assert table.list_leases() == [updated]
    assert remote.lease_consumers("S") == ["group"]
    assert table.update(lease) is None  # stale counter
    assert table.delete(updated) and table.list_leases() == []


def test_watch_over_a_remote_database(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    embedded, remote = pair
    cursor = remote.watch(max_await_time_ms=200)
    with embedded.transaction() as tx:
        tx.insert(
            "AccountBalance",
            ["AccountId", "LastUpdate", "Balance"],
            [["w", "2024-01-01T00:00:00Z", 3]],
        )
    event = None
    for _ in range(100):
        event = cursor.try_next()
        if event is not None:
            break
    assert event is not None and event["operationType"] == "insert"
    assert event["documentKey"] == {"AccountId": "w"}
    cursor.close()


def test_a_directory_is_a_cluster(tmp_path: Path) -> None:
    for name in ("alpha", "beta"):
        with changestream.open(str(tmp_path / f"{name}.db")) as db:
            db.execute_ddl(f"CREATE TABLE {name} (K INT64 NOT NULL) PRIMARY KEY (K)")
    (tmp_path / "notes.txt").write_text("not a database")
    app = create_app(Databases.serve(str(tmp_path)), NoAuth())
    with serve_in_thread(app) as running:
        # The root reaches no one database (watch() alone follows them all).
        with changestream.connect(running.url) as root:
            assert root.list_database_names() == ["alpha", "beta"]
            with pytest.raises(InvalidArgument, match="serves 2 databases \\(alpha, beta\\)"):
                root.read("alpha")
        with changestream.connect(running.url + "/beta") as beta:
            assert beta.read("beta") == []
        shutil.copy(tmp_path / "alpha.db", tmp_path / "gamma.db")  # added while serving
        with changestream.connect(running.url + "/gamma") as gamma:
            assert gamma.read("alpha") == []
    with changestream.open(str(tmp_path / "beta.db")):
        pass  # the server closed what it opened, so the files open again


def test_cli_commands_take_urls(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    _, remote = pair
    url: str = remote.url  # type: ignore[attr-defined]
    runner = CliRunner()
    ddl = runner.invoke(main, ["ddl", url, "CREATE TABLE C (K INT64 NOT NULL) PRIMARY KEY (K)"])
    assert ddl.exit_code == 0 and ddl.output.startswith("applied at ")
    sql = runner.invoke(main, ["--token", "ignored", "sql", url, "SELECT 1 AS one"])
    assert sql.exit_code == 0 and orjson.loads(sql.output) == {"one": 1}
    parts = runner.invoke(main, ["partitions", url, "S", "--json"])
    assert parts.exit_code == 0 and "token" in orjson.loads(parts.output.splitlines()[0])
    policy = runner.invoke(main, ["policy", url])
    assert policy.exit_code == 0 and orjson.loads(policy.output)["enabled"] is True
    bad = runner.invoke(main, ["sql", url, "SELECT * FROM Nope"])
    assert bad.exit_code == 2 and "error: query failed: no such table: Nope" in bad.output


def test_health_metrics_openapi_and_docs(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    embedded, remote = pair
    base = remote.url.rsplit("/", 1)[0]  # type: ignore[attr-defined]
    with remote.transaction() as tx:
        tx.insert(
            "AccountBalance", ["AccountId", "LastUpdate", "Balance"], [["x", COMMIT_TIMESTAMP, 1]]
        )
    created = min(p.start_timestamp for p in embedded.partition_history("S"))
    records = list(
        remote.read_change_stream(
            "S", created, tx.commit_timestamp, remote.partitions("S")[0].token, 1000
        )
    )
    assert len(records) == 1
    assert httpx.get(base + "/healthz").json() == {"status": "ok"}
    assert httpx.get(base + "/readyz").json()["status"] == "ready"
    metrics = httpx.get(base + "/metrics").text
    for line in (
        'changestream_commits_total{database="pair"} 1.0',
        'changestream_rows_written_total{database="pair"} 1.0',
        'changestream_records_read_total{database="pair",type="data_change_record"} 1.0',
        'changestream_partitions{database="pair",stream="S"} 1.0',
        "# TYPE changestream_open_streams gauge",
        "# TYPE changestream_stream_lag_seconds gauge",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE python_info gauge",
    ):
        assert line in metrics, metrics
    document = httpx.get(base + "/openapi.json").json()
    described = {
        (method.upper(), path) for path, item in document["paths"].items() for method in item
    }
    # Every endpoint of the written-down list, no other (independent of the server's tables).
    assert described == set(EXPECTED_SCOPES)
    assert document["openapi"] == "3.1.0"
    # The schema describes what the server accepts: a body it takes validates, one it refuses
    # does not (checked with a JSON Schema validator of its own, not the server's models).
    commit = jsonschema_rs.validator_for(
        {"$ref": "#/components/schemas/CommitRequest", "components": document["components"]}
    )
    good = {
        "mutations": [
            {"op": "insert", "table": "T", "columns": ["K"], "values": [["a"]]},
        ]
    }
    assert commit.is_valid(good)
    assert not commit.is_valid({"mutations": [{**good["mutations"][0], "table": 7}]})
    assert {"CommitRequest", "Mutation", "Partitions", "Error"} <= set(
        document["components"]["schemas"]
    )
    docs = httpx.get(base + "/docs")
    assert docs.status_code == 200 and "openapi.json" in docs.text
    assert "SwaggerUIBundle" in docs.text
    assert "https://" not in docs.text  # every asset comes from this server
    bundle = httpx.get(base + "/docs/static/swagger-ui-bundle.js")
    assert bundle.status_code == 200 and len(bundle.content) > 100_000


def test_tls(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    with changestream.open(str(tmp_path / "tls.db")) as db:
        db.execute_ddl(ACCOUNT_BALANCE)
        databases = Databases()
        databases.add("tls", db)
        app = create_app(databases, NoAuth())
        with serve_in_thread(app, tls_cert=cert, tls_key=key) as running:
            assert running.url.startswith("https://")
            with changestream.connect(running.url + "/tls", verify=cert) as remote:
                assert remote.read("AccountBalance") == []
            with pytest.raises(changestream.errors.Unavailable):
                changestream.connect(running.url + "/tls", reconnect_timeout=0.1).read(
                    "AccountBalance"
                )


class _Collect(RecordProcessor):
    def __init__(self, seen: list[tuple[int, int]], lock: threading.Lock) -> None:
        self.seen, self.lock = seen, lock

    def process_records(self, records: list[DataChangeRecord], checkpointer: Checkpointer) -> None:
        with self.lock:
            self.seen.extend((m.keys["K"], m.new_values["V"]) for r in records for m in r.mods)
        checkpointer.checkpoint()


def test_stream_client_workers_over_remote_databases(tmp_path: Path) -> None:
    with changestream.open(str(tmp_path / "sc.db")) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl("CREATE TABLE Acc (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)")
        created = db.execute_ddl("CREATE CHANGE STREAM AccStream FOR Acc")
        seen: list[tuple[int, int]] = []
        lock = threading.Lock()
        with serving({"sc": db}) as running:
            remotes = [changestream.connect(running.url + "/sc") for _ in range(2)]
            workers = [
                StreamClient(
                    remote,
                    "AccStream",
                    f"w{i}",
                    lambda: _Collect(seen, lock),
                    lease_timeout=1.0,
                    start_timestamp=created,
                )
                for i, remote in enumerate(remotes)
            ]
            for worker in workers:
                worker.start()
            expected = []
            for step in range(90):
                with db.transaction() as tx:
                    tx.insert_or_update("Acc", ["K", "V"], [[step % 30, step]])
                expected.append((step % 30, step))
                if step == 30:
                    db.split_at("Acc", (15,))
                if step == 60:
                    db.merge_at("Acc", (15,))
            deadline = time.monotonic() + 30
            while len(seen) < len(expected) and time.monotonic() < deadline:
                time.sleep(0.05)
            for worker in workers:
                assert worker.stop(timeout=30)
            for remote in remotes:
                remote.close()
    # Every change once, and each key's changes in commit order.
    assert sorted(seen) == sorted(expected)
    for key in range(30):
        assert [v for k, v in seen if k == key] == [v for k, v in expected if k == key]


def test_answers_and_stream_lines_fit_the_declared_schemas(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    """Every kind of answer, checked against /openapi.json by an independent validator: the
    hand-rendered record lines included (they skip the models for speed)."""
    embedded, remote = pair
    base = remote.url.rsplit("/", 1)[0] + "/v1/databases/pair"  # type: ignore[attr-defined]
    embedded.execute_ddl(
        [
            "CREATE INDEX ByI ON V (I DESC) STORING (F)",
            "ALTER TABLE V ADD COLUMN Made TIMESTAMP DEFAULT (CURRENT_TIMESTAMP())",
            "CREATE CHANGE STREAM Part FOR V(I, F) OPTIONS (exclude_delete = true)",
        ]
    )
    start = min(p.start_timestamp for p in embedded.partition_history("S"))
    with remote.transaction() as tx:
        tx.insert("V", COLUMNS, [["a", COMMIT_TIMESTAMP, b"x", None, None, {"j": [1]}, [1, None],
                                  1.5, True, 7, ["t"]]])  # fmt: skip
    with remote.transaction() as tx:
        tx.update("V", ["K", "F"], [["a", float("nan")]])
        tx.delete("V", [["a"]])
    embedded.split_at("V", ["m"])
    lease = Lease("partition", "p1", parent_shard_ids=("p0",))
    remote.leases("S", "group").insert_if_absent(lease)
    headers = {"content-type": "application/json"}
    checked = 0

    def fits(method: str, path: str, answer: Any) -> None:
        nonlocal checked
        validator = response_validator(method, "/v1/databases/{database}" + path)
        errors = [e.message for e in validator.iter_errors(answer)]
        assert not errors, (path, answer, errors[:3])
        checked += 1

    paths = ("/tables", "/current_timestamp", "/change_streams", "/split_policy")
    for path in (*paths, "/streams/S/partitions"):
        fits("GET", path.replace("/streams/S", "/streams/{stream}"), httpx.get(base + path).json())
    leases = httpx.post(base + "/streams/S/leases/list", json={"consumer": "group"}).json()
    assert leases["leases"][0]["parent_shard_ids"] == ["p0"]
    fits("POST", "/streams/{stream}/leases/list", leases)
    end = store_of(embedded).now()
    kinds, decoded_kinds = set(), set()
    reads = [
        (None, start),
        *((p.token, p.start_timestamp) for p in embedded.partition_history("S")),
    ]
    # Asked for the stored form with the header clients send, with the body field of the
    # previous version's clients, or not at all.
    asks: dict[str, tuple[dict[str, bool], dict[str, str]]] = {
        "header": ({}, {api.MODS_HEADER: api.STORED_MODS}),
        "field": ({"stored_mods": True}, {}),
        "none": ({}, {}),
    }
    forms: dict[str, set[str]] = {ask: set() for ask in asks}
    for (token, begin), ask in itertools.product(reads, asks):
        field, header = asks[ask]
        body = {"stream": "S", "start_timestamp": begin, "end_timestamp": end, **field}
        response = httpx.post(
            base + "/read_change_stream",
            json={**body, "partition_token": token},
            headers={**headers, **header},
        )
        assert response.status_code == 200, response.text
        for line in response.content.splitlines():
            answer = orjson.loads(line)
            kinds.add(answer["type"])
            fits("POST", "/read_change_stream", answer)
            if answer["type"] != "end":
                # What the client builds, one msgspec pass, is what the line's dicts give
                # (repr: a NaN equals no other).
                decoded = record_from_stream_line(decode_stream_line(line))
                assert repr(decoded) == repr(record_from_line(answer))
                decoded_kinds.add(answer["type"])
            if answer["type"] == "data_change_record":
                forms[ask].add("mods" if "mods" in answer["record"] else "mod_values")
    assert {"data_change_record", "child_partitions_record", "end"} <= kinds
    assert decoded_kinds == kinds - {"end"}
    # The seed's form unless the client asks for the stored one (the insert is stored compact).
    stored = {"mods", "mod_values"}
    assert forms == {"header": stored, "field": stored, "none": {"mods"}}
    sql = httpx.post(base + "/sql", json={"sql": "SELECT * FROM V"}, headers=headers)
    for line in sql.content.splitlines():
        fits("POST", "/sql", orjson.loads(line))
    assert checked > 10


def test_a_read_line_the_client_cannot_decode_is_a_clear_error() -> None:
    """Lines that are not a read's stop the read with what is wrong; a last line cut off
    (the connection broke mid-line) is left for the resumed read."""
    good = b'{"type":"heartbeat_record","partition_token":"p","timestamp_us":5,"record":{}}'
    cut = httpx.Response(200, content=good + b"\n" + good[:20])
    assert [line.type for line in stream_lines(cut)] == ["heartbeat_record"]
    for bad in (b'{"partition_token":"p"}', b'{"type":"x","timestamp_us":"soon"}', b"[1"):
        with pytest.raises(FailedPrecondition, match="not one of a change stream read"):
            list(stream_lines(httpx.Response(200, content=bad + b"\n")))


def test_the_client_asks_for_stored_mods_in_a_way_older_servers_ignore(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    """The remote read asks for inserts as stored with a header, not a body field: servers
    that predate it refuse unknown body fields but ignore headers. Its body holds only the
    fields every version knows, and the records it reads equal the embedded ones."""
    embedded, remote = pair
    with embedded.transaction() as tx:
        tx.insert("V", ["K", "I"], [["x", 1], ["y", 2]])  # a batch: stored compact
    sent: list[httpx.Request] = []
    client = remote._http._client  # type: ignore[attr-defined]
    client.event_hooks["request"].append(sent.append)
    (partition,) = embedded.partitions("S")
    begin, end = partition.start_timestamp, store_of(embedded).now()
    read = list(remote.read_change_stream("S", begin, end, partition.token))
    (request,) = [r for r in sent if r.url.path.endswith("/read_change_stream")]
    every_version = {"stream", "start_timestamp", "end_timestamp", "partition_token"}
    every_version |= {"heartbeat_milliseconds", "read_options"}
    assert set(orjson.loads(request.content)) <= every_version
    assert request.headers[api.MODS_HEADER] == api.STORED_MODS
    expected = list(embedded.read_change_stream("S", begin, end, partition.token))
    assert [r for r in read if isinstance(r, DataChangeRecord)] == [
        r for r in expected if isinstance(r, DataChangeRecord)
    ]
    assert any(len(r.mods) == 2 for r in read if isinstance(r, DataChangeRecord))


def test_remote_stored_reads_give_what_the_embedded_ones_give(
    pair: tuple[changestream.EmbeddedDatabase, changestream.Database],
) -> None:
    """``read_stored_changes`` over HTTP (what watch() reads): inserts stored compact come as
    :class:`StoredInserts`, other changes as records, then the child partitions, each equal
    to the embedded read's (heartbeats aside: the embedded one also promises at commits);
    a reader resuming after stored inserts resumes after them."""
    embedded, remote = pair
    with embedded.transaction() as tx:
        tx.insert("V", ["K", "I"], [["x", 1], ["y", 2]])  # a batch: stored compact
    with embedded.transaction() as tx:
        tx.update("V", ["K", "I"], [["x", 3]])
        tx.insert("V", ["K", "I"], [["z", 4]])
    embedded.split_at("V", ["m"])
    end = store_of(embedded).now()

    def changes(db: Any, partition: Any) -> list[Any]:
        read = db.read_stored_changes("S", partition.start_timestamp, end, partition.token, 1000)
        return [r for r in read if not isinstance(r, HeartbeatRecord)]

    kinds = set()
    for partition in embedded.partition_history("S"):
        got = changes(remote, partition)
        assert got == changes(embedded, partition)
        kinds |= {type(r) for r in got}
        for record in got:
            if isinstance(record, StoredInserts):
                after = Position(record.commit_timestamp, int(record.record_sequence))
                assert Position.after(record) == after and after.covers(record)
    assert {StoredInserts, DataChangeRecord, ChildPartitionsRecord} <= kinds


def test_a_stream_client_catches_up_many_remote_partitions_in_turns(tmp_path: Path) -> None:
    """A backlog in four partitions, caught up over HTTP in small batches: the worker's one
    catch-up thread holds a streamed read of each partition open at once, in turns."""
    with changestream.open(str(tmp_path / "backlog.db")) as db:
        db.set_split_policy(enabled=False)
        db.execute_ddl("CREATE TABLE Acc (K INT64 NOT NULL, V INT64) PRIMARY KEY (K)")
        created = db.execute_ddl("CREATE CHANGE STREAM AccStream FOR Acc")
        for boundary in (10, 20, 30):
            db.split_at("Acc", (boundary,))
        expected = []
        for step in range(160):
            with db.transaction() as tx:
                tx.insert_or_update("Acc", ["K", "V"], [[step % 40, step]])
            expected.append((step % 40, step))
        seen: list[tuple[int, int]] = []
        lock = threading.Lock()
        with serving({"b": db}) as running, changestream.connect(running.url + "/b") as remote:
            worker = StreamClient(
                remote,
                "AccStream",
                "w",
                lambda: _Collect(seen, lock),
                lease_timeout=1.0,
                start_timestamp=created,
                max_records=3,
            )
            worker.start()
            deadline = time.monotonic() + 30
            while len(seen) < len(expected) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert worker.stop(timeout=30)
    assert sorted(seen) == sorted(expected)
    for key in range(40):
        assert [v for k, v in seen if k == key] == [v for k, v in expected if k == key]
