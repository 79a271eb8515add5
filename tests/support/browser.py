"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``, Selenium) for the page tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def headless_chromium() -> Iterator[object]:
    """A Selenium driver of the system browser, quit afterwards; fails the test (never skips)
    when the browser is missing."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        pytest.fail("this test drives the system browser: install Debian's chromium and "
                    "chromium-driver (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(chromedriver))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()
