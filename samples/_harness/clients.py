"""The client side of a load, shared by every sample's ``load`` and ``demo`` commands.

Each sample brings its own requests; how they are sent (copies racing, retries under the same
``Idempotency-Key``), compared and waited for is the same for all, so it lives here once.
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_delay,
    wait_random_exponential,
)

from samples._api import Answer


class Progress:
    """A progress bar on stderr (thread-safe): redrawn in place on a terminal, else a line per quarter."""

    def __init__(self, total: int, label: str, stream: IO[str] | None = None) -> None:
        self.total, self.label, self.done = max(total, 1), label, 0
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._shown = -1.0 if self.tty else 0.0  # a time on a terminal, else the last quarter printed

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            mark = time.monotonic() if self.tty else float(4 * self.done // self.total)
            if (self.tty and mark - self._shown >= 0.1) or (not self.tty and mark > self._shown):
                self._draw()
                self._shown = mark

    def close(self) -> None:
        with self._lock:
            if self.tty or self._shown < 4:
                self._draw()
            if self.tty:
                self.stream.write("\n")
            self.stream.flush()

    def _draw(self) -> None:
        share = min(self.done / self.total, 1.0)
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        bar = "#" * int(30 * share) + "." * (30 - int(30 * share))
        text = f"{self.label:>10} [{bar}] {share:4.0%} {self.done}/{self.total} {rate:6.1f}/s"
        self.stream.write(("\r" + text) if self.tty else (text + "\n"))
        self.stream.flush()


class HttpClient:
    """Calls the API on one or more servers, retrying like a patient client.

    Connection errors, timeouts and 502/503/504 are retried with the *same*
    ``Idempotency-Key``, on the next server, until ``patience`` seconds have
    passed: safe, because the server runs the request under that key.
    """

    def __init__(self, urls: Sequence[str], *, timeout: float = 10.0, patience: float = 60.0) -> None:
        if not urls:
            raise ValueError("HttpClient needs at least one server URL")
        self.urls = [url.rstrip("/") for url in urls]
        self.timeout, self.patience = timeout, patience
        self.sent = self.retries = 0
        self._local = threading.local()
        self._lock = threading.Lock()

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = httpx.Client(timeout=self.timeout)
        return client

    def request(
        self, method: str, path: str, *, key: str | None = None, body: object = None, params: Any = None
    ) -> Answer:
        """One request, retried (tenacity) until it gets a real answer or ``patience`` runs out:
        then a 503 ``gave_up`` answer, or the last connection error."""
        headers = {"Idempotency-Key": key} if key is not None else {}
        with self._lock:
            start = self.sent
        sends = itertools.count(start)

        def send() -> Answer:
            url = self.urls[next(sends) % len(self.urls)] + path
            got = self._client().request(method, url, json=body, headers=headers, params=params)
            return Answer(got.status_code, {} if got.status_code in _UNAVAILABLE else _body(got))

        retrying = Retrying(
            stop=stop_after_delay(self.patience),
            wait=wait_random_exponential(multiplier=0.01, max=0.5),
            retry=retry_if_exception_type(httpx.TransportError) | retry_if_result(_unavailable),
            before_sleep=self._count_retry,
            retry_error_callback=self._give_up,
        )
        answer: Answer = retrying(send)
        if answer.status not in _UNAVAILABLE:
            with self._lock:
                self.sent += 1
        return answer

    def _count_retry(self, state: RetryCallState) -> None:
        with self._lock:
            self.retries += 1

    def _give_up(self, state: RetryCallState) -> Answer:
        assert state.outcome is not None
        state.outcome.result()  # a connection error: raised
        return Answer(503, {"error": "gave_up", "detail": f"no answer within {self.patience} s"})


_UNAVAILABLE = (502, 503, 504)
"""Answers of a server that is down or overloaded: sent again, with the same key."""


def _body(got: httpx.Response) -> dict[str, Any]:
    """A JSON answer's body; a server's plain-text error (an unhandled exception's 500) as an answer
    the checks then report, instead of a crash of the load generator."""
    try:
        found: dict[str, Any] = got.json()
    except ValueError:
        return {"error": "not_json", "detail": got.text[:200]}
    return found


def _unavailable(answer: Answer) -> bool:
    return answer.status in _UNAVAILABLE


Send = Callable[[], Answer]
"""One send of a request; every copy of a request calls the same ``Send``, so carries the same body."""


def send_all(
    requests: Sequence[tuple[str, Send]], *, users: int, rng: random.Random, label: str
) -> dict[str, list[Answer]]:
    """Send each request 2-4 times from ``users`` threads; the answers of its copies, by request id.

    The copies are placed a few positions apart, so duplicates race each
    other on different threads as well as arriving after the first finished.
    """
    spread = 2.0 * users
    placed = [(n + rng.uniform(0, spread), request) for n, request in enumerate(requests)]
    placed += [
        (position + rng.uniform(0, spread), request)
        for position, request in placed
        for _ in range(rng.randint(1, 3))
    ]
    placed.sort(key=lambda item: item[0])
    progress = Progress(len(placed), label)
    answers: dict[str, list[Answer]] = {request_id: [] for request_id, _send in requests}
    lock = threading.Lock()

    def one(request: tuple[str, Send]) -> None:
        answer = request[1]()
        with lock:
            answers[request[0]].append(answer)
        progress.advance()

    with ThreadPoolExecutor(max_workers=users) as pool:
        for future in [pool.submit(one, request) for _position, request in placed]:
            future.result()
    progress.close()
    return answers


def disagreements(answers: Mapping[str, list[Answer]]) -> list[str]:
    """Requests whose copies were answered differently."""
    found = []
    for request_id, got in sorted(answers.items()):
        differ = [answer for answer in got[1:] if answer != got[0]]
        if differ:
            found.append(f"request {request_id!r} answered {got[0]} and {differ[0]}")
    return found


def settle(
    answers: dict[str, list[Answer]],
    sends: Mapping[str, Send],
    status: Callable[[str], Answer],
    *,
    done: int,
    wait: float,
    what: str,
    patience: float = 3.0,
    aborted: Callable[[Mapping[str, Any]], Answer] | None = None,
) -> list[str]:
    """Wait for the workers to finish every request answered ``202``; the ones that never did.

    Each ``202`` in ``answers`` is then replaced by the final answer (status
    ``done``, the result), so the copies of a request compare as a client
    that polled would see them. A request that aborted after its checkpoint
    is a problem, unless the sample expects that: then ``aborted(status
    body)`` is its final answer. Like a patient client, it sends a request
    that still shows ``running`` after ``patience`` seconds again (same key,
    ``sends``): a completion record lost with a killed worker is then
    written by the replay.
    """
    left = {key: sends[key] for key, got in answers.items() if any(a.status == 202 for a in got)}
    deadline, resend_at = time.monotonic() + wait, time.monotonic() + patience
    problems: list[str] = []
    while left and time.monotonic() < deadline:
        for key in list(left):
            found = status(key).body
            if found.get("status") == "completed":
                final = Answer(done, found["result"])
                answers[key] = [final if answer.status == 202 else answer for answer in answers[key]]
                del left[key]
            elif found.get("status") == "aborted":
                if aborted is None:
                    problems.append(f"{what} {key!r} was answered as accepted but aborted: {found}")
                else:
                    final = aborted(found)
                    answers[key] = [final if answer.status == 202 else answer for answer in answers[key]]
                del left[key]
        if left and time.monotonic() >= resend_at:
            for send in left.values():
                send()
            resend_at = time.monotonic() + patience
        elif left:
            time.sleep(0.1)
    return problems + [f"{what} {key!r} not finished after {wait} s (are workers running?)" for key in left]


__all__ = [
    "HttpClient",
    "Progress",
    "Send",
    "disagreements",
    "send_all",
    "settle",
]
