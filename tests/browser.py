"""A real browser for the suite: Debian's headless Chromium, driven through Selenium and Debian's
chromedriver (the same build as the browser, so their versions always match). Nothing is downloaded at
test time: where the browser, the driver or the selenium package is missing, a test that asks for one
skips and prints why (`./bootstrap test` installs all three).

Screenshots go to the suite's output folder (HPNLAB_TEST_OUTPUT, default /tmp/hpnlab-test-output), and
every page's console errors can be read back, so a test fails on a page that throws."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

OUTPUT = Path(os.environ.get("HPNLAB_TEST_OUTPUT", "/tmp/hpnlab-test-output"))
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _skip(reason: str):
    print(f"SKIP: {reason}", file=sys.stderr)
    pytest.skip(reason)


def find_browser() -> tuple[str, str] | str:
    """(browser, driver) paths, or the reason they cannot be had."""
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    if browser is None:
        return "no Chromium (Debian package chromium; ./bootstrap test installs it)"
    driver = shutil.which("chromedriver")
    if driver is None:
        return "no chromedriver (Debian package chromium-driver; ./bootstrap test installs it)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the selenium package is not installed (pip install 'hpnlab[test]')"
    return browser, driver


class Page:
    """One headless Chromium window: open a URL, wait for a condition in the page, read console errors,
    take a screenshot."""

    def __init__(self, browser: str, driver: str, width: int = 1400, height: int = 900):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        opts = webdriver.ChromeOptions()
        opts.binary_location = browser
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    f"--window-size={width},{height}", "--disable-background-networking",
                    "--no-first-run", "--disable-extensions"):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
        self.driver.set_page_load_timeout(30)

    def open(self, url: str) -> None:
        self.driver.get(url)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait_for(self, script: str, timeout: float = 10.0, what: str = "") -> Any:
        """Poll `return <expr>` in the page until it is truthy; fail naming `what` and the last value."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = self.js(script)
            if last:
                return last
            time.sleep(0.1)
        raise AssertionError(f"page: {what or script} not true within {timeout} s (last: {last!r})")

    def console(self) -> list[dict]:
        """Console entries since the last call (Chromium hands each entry out once)."""
        return self.driver.get_log("browser")

    def console_errors(self) -> list[str]:
        return [e["message"] for e in self.console() if e.get("level") == "SEVERE"]

    def screenshot(self, name: str) -> Path:
        OUTPUT.mkdir(parents=True, exist_ok=True)
        path = OUTPUT / f"{name}.png"
        self.driver.save_screenshot(str(path))
        print(f"screenshot: {path}", file=sys.stderr)
        return path

    def close(self) -> None:
        self.driver.quit()


@pytest.fixture
def page() -> Iterator[Page]:
    found = find_browser()
    if isinstance(found, str):
        _skip(found)
    p = Page(*found)
    try:
        yield p
    finally:
        p.close()


def serve_file_url(path: Path) -> str:
    """A file:// URL: a self-contained page must render with no server and no network."""
    return path.resolve().as_uri()

