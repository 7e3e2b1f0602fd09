"""Headless Chromium from the system's packages, driven by Selenium (``make setup`` installs both)."""

from __future__ import annotations

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def chromium(width: int = 1280, height: int = 900) -> webdriver.Chrome:
    """A headless Chromium; the caller quits it."""
    options = Options()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def status_of(driver: webdriver.Chrome) -> int:
    """The HTTP status of the page the browser shows (Navigation Timing's ``responseStatus``)."""
    return int(driver.execute_script("return performance.getEntriesByType('navigation')[0].responseStatus"))
