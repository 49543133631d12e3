"""A real headless browser for the console tests: Debian's Chromium driven by Selenium through
Debian's chromedriver (``.ci/run`` installs both when missing). Nothing is downloaded: Selenium
is pointed at both executables, so its own driver manager never runs."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

#: Every wait is bounded, so a console that never shows something fails the test.
WAIT_S = 20.0
#: The window the issue asks the console to work in.
WINDOW = (1280, 800)


def _executable(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium of 1280×800, quit at the end; skips (loudly) only when Chromium or
    chromedriver is not installed, which ``.ci/run`` makes happen only when apt cannot."""
    browser = _executable("chromium", "chromium-browser")
    driver_path = _executable("chromedriver")
    if browser is None or driver_path is None:
        pytest.skip(
            "SKIPPED LOUDLY: Chromium or chromedriver is not installed "
            "(apt-get install -y chromium chromium-driver; .ci/run does it when it can)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_script_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float = WAIT_S,
    showing: Callable[[], str] | None = None,
) -> T:
    """The first truthy result of ``probe``; fails naming ``what`` after ``timeout`` seconds,
    and what ``showing`` says the page shows instead. Errors of a page being redrawn (a stale
    element) count as not yet."""
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
    )

    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            found = probe()
        except (StaleElementReferenceException, NoSuchElementException) as exc:
            last, found = exc, None
        if found:
            return found
        time.sleep(0.1)
    instead = ""
    if showing is not None:
        try:
            instead = f"; it shows {showing()!r}"
        except Exception as exc:  # the page was redrawn meanwhile: say that instead
            instead = f"; what it shows could not be read ({exc!r})"
    raise AssertionError(
        f"the console did not show {what} within {timeout} s{instead} (last: {last!r})"
    )


def screenshot(driver: Any, directory: Path, name: str) -> Path:
    """A PNG of the window, kept under the test's temp directory as an artifact."""
    path = directory / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot saved at {path}"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def script_errors(driver: Any) -> list[str]:
    """The page's JavaScript errors since the last call: the browser log's SEVERE entries,
    less the HTTP statuses of requests the tests make fail on purpose (401, 403)."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE" and "Failed to load resource" not in entry["message"]
    ]
