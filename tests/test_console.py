"""The web console in a real headless browser (Debian's Chromium through Selenium), against a
real server on 127.0.0.1 with tokens, over a real database file: it loads, its lineage follows a
split and a merge without a reload, a Stream Client worker's lease appears and its lag falls, a
stream paused from it is Paused in ``streams describe``, and a read token sees no action button
and cannot forge one. Each test saves a screenshot under its temp directory."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

import changestream
from changestream import DataChangeRecord
from changestream.client import Checkpointer, RecordProcessor, StreamClient
from changestream.clock import now_us
from changestream.datastream.catalog import StreamCatalog
from changestream.datastream.definition import StreamDefinition
from changestream.server import NoAuth, TokenFile, create_token
from tests.browser_support import chromium, screenshot, script_errors, wait_for
from tests.server_support import serving

STREAM = "Everything"


@dataclass
class Site:
    url: str
    path: str
    tokens: dict[str, str]
    db: changestream.EmbeddedDatabase
    tmp: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("console")
    tokens_file = str(tmp / "tokens")
    tokens = {
        "read": create_token(tokens_file, ("read",), "viewer"),
        "admin": create_token(tokens_file, ("read", "write", "admin"), "operator"),
    }
    path = str(tmp / "shop.db")
    with changestream.open(path) as db:
        db.execute_ddl(
            [
                "CREATE TABLE Orders (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)",
                "CREATE TABLE Customers (Id INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (Id)",
                f"CREATE CHANGE STREAM {STREAM} FOR ALL "
                "OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
            ]
        )
        with db.transaction() as txn:
            txn.insert("Orders", ["Id", "Note"], [[i, f"order {i}"] for i in range(0, 1000, 10)])
        with serving({"shop": db}, TokenFile(tokens_file)) as running:
            yield Site(running.url, path, tokens, db, tmp)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def sign_in(driver: Any, site: Site, scope: str, route: str = "") -> None:
    """Open the console with the token of ``scope`` typed into its sign-in form."""
    from selenium.webdriver.common.by import By

    driver.get(site.url + "/console")
    driver.execute_script("sessionStorage.clear()")
    driver.get(site.url + "/console" + route)
    field = wait_for("the sign-in form", lambda: _shown(driver.find_element(By.ID, "token")))
    field.send_keys(site.tokens[scope])
    driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
    wait_for(
        "the signed-in scopes", lambda: "token scopes" in driver.find_element(By.ID, "who").text
    )
    assert site.tokens[scope] not in driver.current_url
    assert driver.get_cookies() == []


def _shown(element: Any) -> Any:
    return element if element.is_displayed() else None


def go(driver: Any, site: Site, route: str) -> None:
    """Follow a console link (a hash route: the page is not reloaded)."""
    driver.execute_script("location.hash = arguments[0]", route)


def test_the_console_loads_for_a_database(browser: Any, site: Site, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, site, "admin")
    token = browser.execute_script("return sessionStorage.getItem('changestream.token')")
    assert token == site.tokens["admin"]
    link = wait_for(
        "the database list",
        lambda: next(
            (a for a in browser.find_elements(By.CSS_SELECTOR, "#databases a") if a.text == "shop"),
            None,
        ),
    )
    link.click()
    rate = wait_for("the write rate", lambda: _shown(browser.find_element(By.ID, "write-rate")))
    assert float(rate.text.replace(",", "")) >= 0
    page = browser.find_element(By.ID, "view").text
    assert "Orders" in page and "Id INT64 NOT NULL" in page and "Note STRING" in page
    assert "Customers" in page
    assert STREAM in page and "ALL" in page and "NEW_ROW_AND_OLD_VALUES" in page
    assert "ready" in browser.find_element(By.ID, "activity").text
    screenshot(browser, tmp_path, "console-overview")
    assert script_errors(browser) == []


def test_the_lineage_shows_children_with_their_parents_without_a_reload(
    browser: Any, site: Site, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, site, "read", f"#/db/shop/lineage/{STREAM}")
    db = site.db
    before = {p.token for p in db.partitions(STREAM)}
    wait_for(
        "the live partitions",
        lambda: all(_rect(browser, token) is not None for token in before),
    )
    browser.execute_script("window.notReloaded = true")

    db.split_at("Orders", [505])
    children = [p for p in db.partitions(STREAM) if p.token not in before]
    assert len(children) == 2
    (parent,) = {t for child in children for t in child.parent_tokens}
    for child in children:
        wait_for(
            f"split child {child.token[-10:]} under its parent",
            lambda child=child: (
                (rect := _rect(browser, child.token)) is not None
                and rect.get_attribute("data-parents") == parent
                and _edge(browser, parent, child.token)
            ),
        )

    db.merge_at("Orders", [505])
    (merged,) = [
        p for p in db.partitions(STREAM) if p.token not in before | {c.token for c in children}
    ]
    assert set(merged.parent_tokens) == {c.token for c in children}
    wait_for(
        "the merge child under both parents",
        lambda: (
            (rect := _rect(browser, merged.token)) is not None
            and set(rect.get_attribute("data-parents").split()) == set(merged.parent_tokens)
            and all(_edge(browser, p, merged.token) for p in merged.parent_tokens)
        ),
    )
    assert browser.execute_script("return window.notReloaded") is True
    listing = browser.find_element(By.ID, "partitions").text
    assert merged.token[-10:] in listing
    # Keyboard: a partition takes focus and shows its details.
    browser.execute_script(
        "arguments[0].focus()",
        browser.find_element(By.CSS_SELECTOR, f'rect[data-token="{merged.token}"]'),
    )
    details = wait_for(
        "the focused partition's details",
        lambda: merged.token in browser.find_element(By.ID, "partition-details").text and True,
    )
    assert details
    screenshot(browser, tmp_path, "console-lineage")
    assert script_errors(browser) == []


def test_a_window_chosen_with_the_sliders_stays_while_the_lineage_polls(
    browser: Any, site: Site
) -> None:
    import datetime as dt

    from selenium.webdriver.common.by import By

    sign_in(browser, site, "read", f"#/db/shop/lineage/{STREAM}")
    text = wait_for("the window", lambda: browser.find_element(By.ID, "window-text").text)
    chosen_at = dt.datetime.now(dt.UTC)

    def window_end() -> dt.datetime:
        shown = browser.find_element(By.ID, "window-text").text
        return dt.datetime.fromisoformat(shown.split(" → ")[1])

    assert window_end() > chosen_at - dt.timedelta(seconds=30), text  # it follows now
    # The window's end at a thousandth of the stream's life: before this test began.
    browser.execute_script(
        """
        const follow = document.getElementById("follow");
        follow.checked = false;
        follow.dispatchEvent(new Event("change"));
        const to = document.getElementById("window-to");
        to.value = "1";
        to.dispatchEvent(new Event("change"));
        """
    )
    wait_for("the chosen window", lambda: window_end() < chosen_at)
    # The view polls every second: none of its answers may draw another window over it.
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert window_end() < chosen_at
        time.sleep(0.1)
    assert script_errors(browser) == []


def _rect(driver: Any, token: str) -> Any:
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, f'#lineage rect[data-token="{token}"]')
    return found[0] if found else None


def _edge(driver: Any, parent: str, child: str) -> bool:
    from selenium.webdriver.common.by import By

    selector = f'#lineage line.edge[data-parent="{parent}"][data-child="{child}"]'
    return bool(driver.find_elements(By.CSS_SELECTOR, selector))


class SlowProcessor(RecordProcessor):
    """Processes a few records at a time, slowly enough that catching up takes seconds."""

    def process_records(self, records: list[DataChangeRecord], checkpointer: Checkpointer) -> None:
        time.sleep(0.05)
        checkpointer.checkpoint()


def test_a_workers_lease_appears_and_its_lag_falls_as_it_catches_up(
    browser: Any, site: Site, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    db = site.db
    sign_in(browser, site, "read", f"#/db/shop/consumers/{STREAM}")
    wait_for(
        "the empty consumer view",
        lambda: "No Stream Client" in browser.find_element(By.ID, "consumer-groups").text,
    )
    backlog_start = now_us()
    stop = threading.Event()
    pace = {"per_s": 60.0}

    def write() -> None:
        rng = random.Random(7)
        while not stop.is_set():
            with db.transaction() as txn:
                txn.insert_or_update("Orders", ["Id", "Note"], [[rng.randrange(1000), "w"]])
            time.sleep(1 / pace["per_s"])

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    client = None
    try:
        time.sleep(4.0)  # a backlog of four seconds of commits
        pace["per_s"] = 10.0
        client = StreamClient(
            db,
            STREAM,
            "worker-1",
            SlowProcessor,
            lease_timeout=5.0,
            consumer="console-test",
            start_timestamp=backlog_start,
            max_records=4,
        )
        client.start()
        lags: list[float] = []

        def observe() -> bool:
            rows = browser.find_elements(By.CSS_SELECTOR, 'tr[data-owner="worker-1"]')
            values = [r.get_attribute("data-lag") for r in rows]
            if values and all(values):
                lags.append(max(float(v) for v in values))
            return bool(lags) and max(lags) >= 2.0 and lags[-1] <= min(1.5, max(lags) - 1.0)

        wait_for("the lease's lag falling as the worker catches up", observe, timeout=40)
        group = browser.find_element(By.CSS_SELECTOR, 'section[data-consumer="console-test"]').text
        assert "worker-1 holds" in group
        assert "owned" in group
        screenshot(browser, tmp_path, "console-consumers")
    finally:
        stop.set()
        writer.join(10)
        if client is not None:
            assert client.stop(30)
    assert script_errors(browser) == []


def _stream(site: Site, name: str) -> None:
    catalog = StreamCatalog(site.db)
    definition = {
        "name": name,
        "database": site.path,
        "change_stream": STREAM,
        "destination": str(site.tmp / f"{name}-events"),
    }
    catalog.create(StreamDefinition.from_dict(definition))
    catalog.transition(name, "start")
    catalog.record_error(name, "Orders", "a test error <b>not bold</b>", retriable=True)


def test_a_stream_paused_from_the_console_is_paused_in_streams_describe(
    browser: Any, site: Site, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    _stream(site, "orders_feed")
    sign_in(browser, site, "admin", "#/db/shop/streams")
    card = 'section[data-stream="orders_feed"]'
    pause = wait_for(
        "the pause button",
        lambda: next(
            (
                b
                for b in browser.find_elements(By.CSS_SELECTOR, f'{card} button[data-verb="pause"]')
                if b.is_enabled()
            ),
            None,
        ),
    )
    text = browser.find_element(By.CSS_SELECTOR, card).text
    assert "Starting" in text and "a test error <b>not bold</b>" in text  # shown as text, not HTML
    # A double click: the second must not send a pause the new state refuses.
    browser.execute_script("arguments[0].click(); arguments[0].click();", pause)
    wait_for(
        "the stream Paused",
        lambda: browser.find_elements(By.CSS_SELECTOR, f'{card} .state[data-state="Paused"]'),
    )
    # The cards are redrawn by every poll: read them whole, in one script call.
    read_outcome = """
        const outcome = document.querySelector(arguments[0] + " .outcome");
        return outcome && [outcome.textContent, outcome.className,
                           document.getElementById("status").className];
    """
    text, kind, status = wait_for(
        "the action's outcome on the card",
        lambda: browser.execute_script(read_outcome, card),
    )
    assert text.startswith("Last action here: pause: now Paused"), text
    assert kind == "outcome" and "error" not in status, (kind, status)
    time.sleep(2.5)  # a poll later, the outcome is still shown and nothing failed
    assert browser.execute_script(read_outcome, card) == [text, "outcome", status]
    described = subprocess.run(
        [
            sys.executable,
            "-m",
            "changestream",
            "streams",
            "describe",
            "orders_feed",
            "--db",
            site.path,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert orjson.loads(described.stdout)["state"] == "Paused"
    resume = browser.find_element(By.CSS_SELECTOR, f'{card} button[data-verb="resume"]')
    assert resume.is_enabled()
    assert not browser.find_element(
        By.CSS_SELECTOR, f'{card} button[data-verb="drain"]'
    ).is_enabled()
    screenshot(browser, tmp_path, "console-streams")
    assert script_errors(browser) == []


def test_a_read_token_sees_no_action_buttons_and_a_forged_action_gets_403(
    browser: Any, site: Site, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    _stream(site, "viewer_feed")
    sign_in(browser, site, "read", "#/db/shop/streams")
    card = 'section[data-stream="viewer_feed"]'
    wait_for("the stream's card", lambda: browser.find_elements(By.CSS_SELECTOR, f"{card} .state"))
    assert browser.find_elements(By.CSS_SELECTOR, "button[data-verb]") == []
    assert "Actions need a token with the admin scope" in browser.find_element(By.ID, "view").text
    status = browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch("/v1/databases/shop/streams/viewer_feed/state", {
          method: "PUT",
          headers: {
            "Authorization": "Bearer " + sessionStorage.getItem("changestream.token"),
            "Content-Type": "application/json",
          },
          body: JSON.stringify({verb: "pause"}),
          credentials: "omit",
        }).then((r) => done(r.status), (e) => done(String(e)));
        """
    )
    assert status == 403
    assert StreamCatalog(site.db).get("viewer_feed").state.value == "Starting"
    screenshot(browser, tmp_path, "console-read-token")
    assert script_errors(browser) == []


def test_the_tail_shows_records_as_they_arrive_newest_first_with_filters(
    browser: Any, site: Site, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    db = site.db
    sign_in(browser, site, "read", f"#/db/shop/tail/{STREAM}")
    # The view renders after sign-in, once the page has fetched the stream.
    count = wait_for("the tail view", lambda: browser.find_elements(By.ID, "tail-count"))[0]
    wait_for("the tail following", lambda: "following" in count.text)
    with db.transaction() as txn:
        txn.insert_or_update("Customers", ["Id", "Name"], [[1, "Ada"]])
    wait_for(
        "a Customers row",
        lambda: browser.find_elements(By.CSS_SELECTOR, '#tail tr[data-table="Customers"]'),
    )

    # Each change of a filter replaces the tail; the first one's "following" must not stand
    # for the second's, or the changes below could be committed before the second one began.
    Select(browser.find_element(By.ID, "tail-table")).select_by_value("Orders")
    wait_for("the tail of Orders following", lambda: "following; 0" in count.text)
    Select(browser.find_element(By.ID, "tail-mod")).select_by_value("UPDATE")
    wait_for("the filtered tail following", lambda: "following; 0" in count.text)
    for key in (2000, 2001):
        with db.transaction() as txn:
            txn.insert("Orders", ["Id", "Note"], [[key, "new"]])
        with db.transaction() as txn:
            txn.insert_or_update("Customers", ["Id", "Name"], [[key, "x"]])
        with db.transaction() as txn:
            txn.update("Orders", ["Id", "Note"], [[key, "changed"]])

    def rows() -> list[Any]:
        found = browser.find_elements(By.CSS_SELECTOR, "#tail tbody tr")
        return found if len(found) >= 2 else []

    shown = wait_for("both updates", rows, showing=lambda: count.text)
    assert [r.get_attribute("data-table") for r in shown] == ["Orders", "Orders"]
    assert [r.get_attribute("data-mod") for r in shown] == ["UPDATE", "UPDATE"]
    assert '{"Id":2001}' in shown[0].text and '{"Id":2000}' in shown[1].text  # newest first
    screenshot(browser, tmp_path, "console-tail")
    assert script_errors(browser) == []


def test_a_view_left_while_it_was_being_set_up_leaves_nothing_running(
    browser: Any, site: Site
) -> None:
    """The tail is left for the overview before its first fetches answered: it must not open
    its stream afterwards (the overview would keep it open, unseen)."""
    import httpx
    from selenium.webdriver.common.by import By

    with serving({"shop": site.db}, NoAuth()) as running:
        browser.get(running.url + "/console")
        browser.execute_script("sessionStorage.clear()")
        browser.get(running.url + "/console#/db/shop/overview")
        wait_for("the overview", lambda: browser.find_elements(By.ID, "write-rate"))
        # Both route changes are queued before either view's first fetch can answer.
        browser.execute_script(
            f"location.hash = '#/db/shop/tail/{STREAM}';"
            "setTimeout(() => { location.hash = '#/db/shop/overview'; }, 0);"
        )
        wait_for("the overview again", lambda: browser.find_elements(By.ID, "write-rate"))

        def open_streams() -> str:
            text = httpx.get(running.url + "/metrics", timeout=5).text
            return "".join(ln for ln in text.splitlines() if "changestream_open_streams{" in ln)

        # The left tail's fetches (its stream picker, its tables, then the tail) take a few
        # round trips; it would have opened its stream well within this.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert open_streams() == "", "the left tail view opened its stream"
            time.sleep(0.05)
        assert "Overview" in browser.find_element(By.CSS_SELECTOR, "[aria-current=page]").text
        assert script_errors(browser) == []


def test_insecure_no_auth_shows_the_console_without_a_token(browser: Any, site: Site) -> None:
    from selenium.webdriver.common.by import By

    with serving({"shop": site.db}, NoAuth()) as running:
        browser.get(running.url + "/console")
        browser.execute_script("sessionStorage.clear()")
        browser.get(running.url + "/console#/db/shop/streams")
        wait_for(
            "the streams view",
            lambda: browser.find_elements(By.CSS_SELECTOR, "section[data-stream] .state"),
        )
        assert "no token needed" in browser.find_element(By.ID, "who").text
        assert not browser.find_element(By.ID, "login").is_displayed()
        assert browser.find_elements(By.CSS_SELECTOR, "button[data-verb]")
