"""Headless Chromium through Selenium (Debian's ``chromium`` + ``chromium-driver``): the explorer's browser
test and its documentation screenshot. Selenium is a ``dev`` extra, imported only here."""

from __future__ import annotations

import shutil
from typing import Any


class NoBrowser(RuntimeError):
    """Selenium or a Chromium binary / driver is missing."""


def chromium(width: int = 1280, height: int = 1400) -> Any:
    """A headless Chromium WebDriver that records the page's console (``driver.get_log("browser")``)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        raise NoBrowser("selenium is not installed (pip install -e '.[dev]')") from exc
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        raise NoBrowser("headless Chromium not installed (apt-get install chromium chromium-driver)")
    opts = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.binary_location = binary
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)
