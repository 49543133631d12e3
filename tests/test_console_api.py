"""The endpoints the console reads, as scripts would call them, over a real server and database:
lineage windows with record counts and key ranks, the overview's rates and readers, consumer
groups with lag, a stream's errors, the bounded and filtered tail, the caller's scopes, and the
console's files (shipped in the package, nothing fetched from elsewhere)."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import changestream
from changestream.client.lease_table import PARTITION_LEASE
from changestream.clock import now_us, parse_ts
from changestream.datastream.catalog import StreamCatalog
from changestream.datastream.definition import StreamDefinition
from changestream.server import NoAuth, TokenFile, create_token
from changestream.server.console import STATIC
from changestream.store.models import Lease
from changestream.streams.lineage import walk_partitions
from tests.server_support import serving

DB = "/v1/databases/shop"
STREAM = DB + "/streams/Everything"


@pytest.fixture(scope="module")
def shop(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, changestream.EmbeddedDatabase]]:
    tmp = tmp_path_factory.mktemp("console_api")
    path = str(tmp / "shop.db")
    with changestream.open(path) as db:
        db.execute_ddl(
            [
                "CREATE TABLE Orders (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)",
                "CREATE TABLE Customers (Id INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (Id)",
                "CREATE CHANGE STREAM Everything FOR ALL "
                "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
            ]
        )
        with serving({"shop": db}, NoAuth()) as running:
            yield running.url, db


def get(url: str, path: str, **params: Any) -> Any:
    response = httpx.get(url + path, params=params, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def write(db: changestream.EmbeddedDatabase, keys: range, note: str) -> None:
    with db.transaction() as txn:
        txn.insert_or_update("Orders", ["Id", "Note"], [[k, note] for k in keys])


def test_a_lineage_window_holds_the_partitions_live_in_it_with_counts_and_ranks(
    shop: tuple[str, changestream.EmbeddedDatabase],
) -> None:
    url, db = shop
    write(db, range(0, 100), "a")
    split_1 = db.split_at("Orders", [30])
    write(db, range(0, 100, 2), "b")
    split_2 = db.split_at("Orders", [60])
    write(db, range(50, 100), "c")
    whole = get(url, STREAM + "/lineage")
    history = db.partition_history("Everything")
    assert whole["total"] == len(history) == len(whole["partitions"])
    assert {p["token"] for p in whole["partitions"]} == {p.token for p in history}

    # Record counts: what the read function gives for each partition.
    counts: Counter[str] = Counter()
    created = parse_ts(whole["created"])
    for partition in walk_partitions(db, "Everything", created, now_us()):
        for record in partition.records():
            if record.record_type == "data_change_record":
                counts[partition.token] += 1
    assert {p["token"]: p["record_count"] for p in whole["partitions"]} == {
        p.token: counts[p.token] for p in history
    }
    assert sum(counts.values()) >= 3

    # Key ranks: the live partitions tile the key space in key order, children inside parents.
    by_token = {p["token"]: p for p in whole["partitions"]}
    live = sorted(
        (p for p in whole["partitions"] if p["end_timestamp"] is None),
        key=lambda p: p["key_rank_start"],
    )
    assert [(p["key_rank_start"], p["key_rank_end"]) for p in live] == [(0, 1), (1, 2), (2, 3)]
    assert whole["key_ranks"] == 3
    for child in whole["partitions"]:
        for parent in map(by_token.get, child["parent_tokens"]):
            assert parent["key_rank_start"] <= child["key_rank_start"] < child["key_rank_end"]
            assert child["key_rank_end"] <= parent["key_rank_end"]

    # A window after the second split holds only what was live then: the three live ones.
    after = get(url, STREAM + "/lineage", start=split_2 + 1)
    assert {p["token"] for p in after["partitions"]} == {p["token"] for p in live}
    # A window between the splits: the two children of the first split.
    between = get(url, STREAM + "/lineage", start=split_1 + 1, end=split_2 - 1)
    assert len(between["partitions"]) == 2
    assert all(
        p["start_timestamp"] == whole["partitions"][1]["start_timestamp"]
        for p in between["partitions"]
    )
    # A limit keeps the newest and says how many there were.
    limited = get(url, STREAM + "/lineage", limit=3)
    assert limited["total"] == len(history) and len(limited["partitions"]) == 3
    newest = sorted(history, key=lambda p: p.start_timestamp)[-3:]
    assert {p["token"] for p in limited["partitions"]} == {p.token for p in newest}


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"limit": "0"}, "limit must be a positive integer"),
        ({"limit": "many"}, "limit must be a positive integer"),
        # Digits to str.isdigit() that int() refuses (the server fuzzer found these).
        ({"limit": "\u00b9"}, "limit must be a positive integer"),
        ({"start": "\u00b9"}, "start"),
        ({"start": "yesterday"}, "start"),
        ({"start": "2030-01-01T00:00:00Z", "end": "2029-01-01T00:00:00Z"}, "before it starts"),
    ],
)
def test_a_bad_lineage_window_is_a_clear_error(
    shop: tuple[str, changestream.EmbeddedDatabase], params: dict[str, str], words: str
) -> None:
    url, _ = shop
    response = httpx.get(url + STREAM + "/lineage", params=params, timeout=30)
    assert response.status_code == 400, response.text
    assert words in response.json()["error"]["message"]
    unknown = httpx.get(url + DB + "/streams/Nope/lineage", timeout=30)
    assert unknown.status_code == 404 and "Nope" in unknown.json()["error"]["message"]


def test_the_overview_has_the_write_rate_and_each_streams_readers(
    shop: tuple[str, changestream.EmbeddedDatabase],
) -> None:
    url, db = shop
    write(db, range(1000, 1100), "rate")
    overview = get(url, DB + "/overview")
    partitions = get(url, STREAM + "/partitions")["partitions"]
    # Every split's mods count, the ended ones' too (the live partitions show only their own).
    assert overview["write_rate"] >= sum(p["write_rate"] for p in partitions) - 0.01
    assert overview["write_rate"] >= 100 / overview["window_seconds"]
    (stream,) = overview["streams"]
    assert stream["name"] == "Everything" and stream["live_partitions"] == len(partitions)
    assert stream["open_reads"] == 0 and stream["reader_lag_seconds"] is None
    assert parse_ts(overview["last_commit_timestamp"]) <= parse_ts(overview["now"])

    # An open tail is an open read, with its lag.
    with httpx.stream("GET", url + STREAM + "/tail", timeout=30) as tail:
        assert tail.status_code == 200
        write(db, range(1, 2), "seen")
        lines = tail.iter_lines()
        assert orjson.loads(next(lines))["type"] == "data_change_record"
        reading = get(url, DB + "/overview")["streams"][0]
        assert reading["open_reads"] == 1
        assert 0 <= reading["reader_lag_seconds"] < 60


def test_consumer_status_shows_each_groups_leases_with_state_lag_and_workers(
    shop: tuple[str, changestream.EmbeddedDatabase],
) -> None:
    url, db = shop
    assert get(url, STREAM + "/consumer_status") == {"consumers": []}
    live = db.partitions("Everything")
    table = db.leases("Everything", "billing")
    start = now_us() - 5_000_000
    for number, partition in enumerate(live):
        owner = "w1" if number < 2 else None
        lease = Lease(PARTITION_LEASE, partition.token, "", 0, owner, None, (), start)
        assert table.insert_if_absent(lease)
    (group,) = get(url, STREAM + "/consumer_status")["consumers"]
    assert group["consumer"] == "billing"
    assert group["workers"] == {"w1": 2}
    states = Counter(lease["state"] for lease in group["leases"])
    assert states == {"owned": 2, "free": len(live) - 2}
    assert {lease["partition"] for lease in group["leases"]} == {p.token for p in live}
    for lease in group["leases"]:
        assert lease["checkpoint"] is None and 4.5 <= lease["lag_seconds"] < 120


def test_stream_errors_are_the_last_ones_oldest_first(
    shop: tuple[str, changestream.EmbeddedDatabase], tmp_path: Path
) -> None:
    url, db = shop
    catalog = StreamCatalog(db)
    definition = {"name": "feed", "database": "shop.db", "change_stream": "Everything"}
    catalog.create(StreamDefinition.from_dict({**definition, "destination": str(tmp_path)}))
    for number in range(5):
        catalog.record_error("feed", "Orders", f"error {number}", retriable=number % 2 == 0)
    found = get(url, DB + "/streams/feed/errors", limit=3)["errors"]
    expected = [e.to_dict() for e in catalog.errors("feed", 3)]
    assert found == expected and [e["message"] for e in found] == ["error 2", "error 3", "error 4"]
    assert {e["message"] for e in get(url, DB + "/streams/feed/errors")["errors"]} == {
        f"error {n}" for n in range(5)
    }


def _tail(url: str, **params: Any) -> list[dict[str, Any]]:
    response = httpx.get(url + STREAM + "/tail", params=params, timeout=60)
    assert response.status_code == 200, response.text
    lines = [orjson.loads(line) for line in response.content.splitlines()]
    assert lines[-1] == {"type": "end"}
    return [line for line in lines if line["type"] == "data_change_record"]


def test_a_bounded_tail_gives_every_record_in_commit_order_and_filters(
    shop: tuple[str, changestream.EmbeddedDatabase],
) -> None:
    url, db = shop
    begin = now_us()
    for round_ in range(4):
        with db.transaction() as txn:
            txn.insert_or_update(
                "Orders", ["Id", "Note"], [[k, f"r{round_}"] for k in range(0, 100, 7)]
            )
            txn.insert_or_update("Customers", ["Id", "Name"], [[round_, "c"]])
        with db.transaction() as txn:
            txn.delete("Orders", [[7 * round_]])
    end = now_us()
    everything = _tail(url, start=begin, end=end)
    stamps = [
        (line["record"]["commit_timestamp"], line["record"]["record_sequence"])
        for line in everything
    ]
    assert stamps == sorted(stamps)
    expected = 0
    for partition in walk_partitions(db, "Everything", begin, end):
        expected += sum(r.record_type == "data_change_record" for r in partition.records())
    assert len(everything) == expected
    assert {line["record"]["table_name"] for line in everything} == {"Orders", "Customers"}

    deletes = _tail(url, start=begin, end=end, table="Orders", mod_type="delete")
    assert sorted(m["keys"]["Id"] for line in deletes for m in line["record"]["mods"]) == [
        0,
        7,
        14,
        21,
    ]
    keyed = _tail(url, start=begin, end=end, key='"Id":91')
    assert keyed and all(m["keys"] == {"Id": 91} for line in keyed for m in line["record"]["mods"])
    refused = httpx.get(url + STREAM + "/tail", params={"mod_type": "UPSERT"}, timeout=30)
    assert refused.status_code == 400 and "mod_type" in refused.json()["error"]["message"]


def test_a_live_tail_ends_when_its_client_leaves(
    shop: tuple[str, changestream.EmbeddedDatabase],
) -> None:
    url, db = shop
    for _ in range(3):
        with httpx.stream("GET", url + STREAM + "/tail", timeout=30) as tail:
            write(db, range(3, 4), "live")
            assert orjson.loads(next(tail.iter_lines()))["type"] == "data_change_record"
    done = threading.Event()

    def readers_gone() -> bool:
        return get(url, DB + "/overview")["streams"][0]["open_reads"] == 0

    for _ in range(100):
        if readers_gone():
            done.set()
            break
        threading.Event().wait(0.1)
    assert done.is_set(), "a tail kept reading after its client left"


def test_whoami_gives_the_tokens_scopes(tmp_path: Path) -> None:
    tokens_file = str(tmp_path / "tokens")
    read = create_token(tokens_file, ("read",))
    full = create_token(tokens_file, ("read", "write", "admin"))
    with (
        changestream.open(str(tmp_path / "x.db")) as db,
        serving({"x": db}, TokenFile(tokens_file)) as running,
    ):
        for token, scopes in ((read, ["read"]), (full, ["read", "write", "admin"])):
            answer = httpx.get(
                running.url + "/v1/whoami", headers={"Authorization": f"Bearer {token}"}
            )
            assert answer.json() == {"scopes": scopes, "authenticated": True}
        assert httpx.get(running.url + "/v1/whoami").status_code == 401
        page = httpx.get(running.url + "/console")  # the page is public; its data is not
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    with changestream.open(str(tmp_path / "y.db")) as db, serving({"y": db}, NoAuth()) as running:
        assert httpx.get(running.url + "/v1/whoami").json() == {
            "scopes": ["read", "write", "admin"],
            "authenticated": False,
        }


def test_the_console_files_ship_in_the_package_and_fetch_nothing_from_elsewhere(
    shop: tuple[str, changestream.EmbeddedDatabase],
) -> None:
    url, _ = shop
    names = sorted(p.name for p in STATIC.iterdir())
    assert names == ["console.css", "console.js", "index.html"]
    for name in names:
        text = (STATIC / name).read_text()
        addresses = set(re.findall(r"https?://[^\s\"')]+", text))
        assert addresses <= {"http://www.w3.org/2000/svg"}, (name, addresses)
        served = httpx.get(f"{url}/console/static/{name}")
        assert served.status_code == 200 and served.text == text
    script = (STATIC / "console.js").read_text()
    assert "innerHTML" not in script  # server text enters the page as text only
    assert "document.cookie" not in script and 'credentials: "omit"' in script
