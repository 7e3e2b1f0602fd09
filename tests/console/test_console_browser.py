"""The console clicked through in headless Chromium, as an operator would: sign in, find a failed
request with the filters, open its timeline, retry it after the fix and watch a worker complete it;
abort a waiting booking after reading the compensations it will run, and see them run; a browser
without the token is refused (401), and a form of another site posting to the console is refused
(403). On SQLite, and on DynamoDB with SQS (moto)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from idemflow import atomic, open_store, run
from idemflow.client import RunStatus, status, submit
from idemflow.console._settings import ConsoleSettings
from idemflow.stores import SqliteStore, Store
from idemflow.testing import data_rows
from idemflow.testing.servers import Moto
from idemflow.worker import Queue, SqliteQueue, Worker
from tests.support.console_app import WORKFLOWS, booking, fix_carrier, shipment
from tests.support.console_browser import chromium, status_of
from tests.support.console_http import running, worker
from tests.support.selection import kinds

TOKEN = "browser-test-token-0123456789"


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(params=kinds("sqlite", "dynamodb"))
def backends(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Queue]]:
    if request.param == "sqlite":
        store: Store = SqliteStore(str(tmp_path / "store.db"))
        queue: Queue = SqliteQueue(str(tmp_path / "queue.db"))
    else:
        moto: Moto = request.getfixturevalue("moto")
        store = open_store(moto.store_url(f"c{tmp_path.name[-8:]}", tmp_path), create=True)
        queue = moto.queue(f"console-{tmp_path.name[-12:]}", tmp_path, visibility_timeout=5.0, clock=None)
    store.create_tables("items")
    submit(shipment("b1"), request_id="ship-b1", store=store, queue=queue)
    submit(
        booking("gala", {"number": "4242", "cvc_token": "tok_9"}),
        request_id="book-gala",
        store=store,
        queue=queue,
    )
    Worker(WORKFLOWS, store=store, queue=queue, wait=0.05, relay_every=None).run(idle_timeout=1.0)
    assert status(store, "shipment", "ship-b1").status is RunStatus.FAILED
    try:
        yield store, queue
    finally:
        queue.close()
        store.close()


def _text(driver: webdriver.Chrome, css: str) -> str:
    """The element's text, found again if the page refreshed between finding it and reading it
    (a request's page reloads itself while the request runs)."""
    for _ in range(4):
        try:
            return str(driver.find_element(By.CSS_SELECTOR, css).text)
        except StaleElementReferenceException:
            continue
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def test_an_operator_finds_retries_and_aborts_requests(
    browser: webdriver.Chrome, backends: tuple[Store, Queue]
) -> None:
    store, queue = backends
    settings = ConsoleSettings(port=0, token=TOKEN, store_url="sqlite:store.db")
    with running(settings, store, queue) as console, worker(store, queue):
        browser.delete_all_cookies()
        browser.get(console.url + "/")
        assert status_of(browser) == 401 and "needs its token" in browser.page_source

        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "form[action='/login'] button").click()
        WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "runs"))

        Select(browser.find_element(By.ID, "status")).select_by_value("failed")
        browser.find_element(By.ID, "request-id").send_keys("ship-")
        Select(browser.find_element(By.NAME, "match")).select_by_value("prefix")
        browser.find_element(By.ID, "apply").click()
        WebDriverWait(browser, 20).until(lambda d: "status=failed" in d.current_url)
        rows = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
        assert [row.text.split()[2:4] for row in rows] == [["failed", "shipment"]]
        browser.find_element(By.LINK_TEXT, "ship-b1").click()

        WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "steps"))
        assert _text(browser, "#status") == "failed"
        assert "the carrier refused the parcel" in _text(browser, "#failure")
        assert "pack" in _text(browser, "#steps")

        run(atomic("items", "carrier", fix_carrier), request_id="fix-carrier", store=store)
        browser.find_element(By.ID, "retry").click()
        WebDriverWait(
            browser, 60, poll_frequency=0.5, ignored_exceptions=(StaleElementReferenceException,)
        ).until(lambda d: _text(d, "#status") == "completed")
        assert status(store, "shipment", "ship-b1").result == "shipped"

        browser.get(console.url + "/?workflow=booking")
        browser.find_element(By.LINK_TEXT, "book-gala").click()
        WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "waits-for"))
        assert "waiting for a message on 'confirm'" in _text(browser, "#waits-for")
        assert "tok_9" not in browser.page_source
        browser.find_element(By.ID, "abort").click()
        WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.ID, "compensations"))
        listed = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#compensations li")]
        assert listed == ["step 2 (atomic charge)", "step 1 (atomic hold)"]
        assert status(store, "booking", "book-gala").status is RunStatus.RUNNING
        browser.find_element(By.ID, "confirm-abort").click()
        WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "compensations-run"))
        ran = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#compensations-run li")]
        assert ran == listed
        assert status(store, "booking", "book-gala").status is RunStatus.ABORTED
        rows = data_rows(store, "items")
        assert rows[("items", "payments-gala", "refunded")] == 1 and rows[("items", "gala", "released")] == 1
        assert rows[("items", "gala", "seats")] == 10


def test_a_form_of_another_site_cannot_post_to_the_console(tmp_path: Path, browser: webdriver.Chrome) -> None:
    store = SqliteStore(str(tmp_path / "store.db"))
    queue = SqliteQueue(str(tmp_path / "queue.db"))
    store.create_tables("items")
    submit(shipment("x"), request_id="ship-x", store=store, queue=queue)
    settings = ConsoleSettings(port=0, token=TOKEN)
    with running(settings, store, queue) as console, _evil_site(console.url + "/runs/ship-x/cancel") as evil:
        browser.delete_all_cookies()
        browser.get(f"{console.url}/login?token={TOKEN}")  # signed in: the session cookie is set
        assert status_of(browser) == 200
        browser.get(evil)
        WebDriverWait(browser, 20).until(lambda d: d.current_url.startswith(console.url))
        WebDriverWait(browser, 20).until(lambda d: "cross-site" in d.page_source)
        assert status_of(browser) == 403
        assert status(store, "shipment", "ship-x").status is RunStatus.RUNNING


class _EvilPage(BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:
        body = (
            f'<html><body><form id="f" method="post" action="{self.target}">'
            '<input name="workflow" value="shipment"><input name="action_id" value="evil">'
            '<input name="csrf" value="guessed"></form>'
            "<script>document.getElementById('f').submit()</script></body></html>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _evil_site(target: str) -> Iterator[str]:
    handler = type("Evil", (_EvilPage,), {"target": target})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
