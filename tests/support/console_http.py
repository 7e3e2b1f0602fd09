"""A small HTTP client for the console's tests: keeps the session cookie, never follows redirects,
and can send any header (a forged Origin, a wrong Host) a browser would not let a test set."""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from idemflow.console._server import Console
from idemflow.console._settings import ConsoleSettings
from idemflow.stores import Store
from idemflow.worker import Queue, Worker
from tests.support.console_app import WORKFLOWS


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str

    def json(self) -> Any:
        return json.loads(self.body)

    def csrf(self) -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', self.body)
        assert found is not None, "no CSRF token in the page"
        return found.group(1)

    def action_id(self, action: str) -> str:
        found = re.search(r'name="action_id" value="([^"]+-' + action + ')"', self.body)
        assert found is not None, f"no {action} form in the page"
        return found.group(1)


@dataclass
class Client:
    base: str
    cookie: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def get(self, path: str, **headers: str) -> Answer:
        return self.send("GET", path, None, headers)

    def post_form(self, path: str, form: dict[str, str], **headers: str) -> Answer:
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": self.base, **headers}
        return self.send("POST", path, urlencode(form).encode(), headers)

    def post_json(self, path: str, body: dict[str, Any], **headers: str) -> Answer:
        return self.send(
            "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json", **headers}
        )

    def send(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        parts = urlsplit(self.base)
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
        sent = {**self.headers, **{key.replace("_", "-"): value for key, value in headers.items()}}
        if self.cookie is not None:
            sent.setdefault("Cookie", self.cookie)
        try:
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            answer = Answer(response.status, dict(response.getheaders()), response.read().decode())
        finally:
            connection.close()
        cookie = answer.headers.get("Set-Cookie")
        if cookie is not None:
            self.cookie = cookie.split(";", 1)[0]
        return answer


@contextmanager
def running(settings: ConsoleSettings, store: Store, queue: Queue | None) -> Iterator[Console]:
    console = Console(settings, store, queue, WORKFLOWS).start()
    try:
        yield console
    finally:
        console.close()


@contextmanager
def worker(store: Store, queue: Queue) -> Iterator[Worker]:
    """A worker on a thread of its own for as long as the block runs."""
    working = Worker(WORKFLOWS, store=store, queue=queue, wait=0.05, relay_every=None)
    thread = threading.Thread(target=working.run, daemon=True)
    thread.start()
    try:
        yield working
    finally:
        working.stop()
        thread.join(timeout=30)
