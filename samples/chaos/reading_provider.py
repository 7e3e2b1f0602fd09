"""The quote provider of the reading workload: a fake service OUTSIDE the worker processes.

An HTTP server on a loopback port, run by the chaos driver, that keeps its own books by
idempotency key, as a real provider does: the first call under a key is *made* (a quote with a
serial number of its own is recorded), a later call under that key is answered from the books
(a *repeat*). What it does to its callers:

- **transient failures**: some calls are answered 503 before anything is recorded (retried by
  the quote's policy);
- **lost answers**: some calls are recorded and then answered 503, so the caller's attempt fails
  though the quote was made, and its retry (same key) is a repeat;
- **slow calls**: some calls take 0.2-0.8 s, a few longer than the caller's timeout (recorded,
  the attempt failed: the retry is a repeat);
- **callers that die mid-call**: a call whose body is cut short (its worker SIGKILLed while
  another of its ``all_of`` branches was being sent) is dropped, as a server drops a broken
  connection; nothing is recorded;
- **a hook** once a call is recorded: ``hook(caller_pid, request)``, so the workload can SIGKILL
  the calling worker right there (the call made, its answer never memoized), or cancel the
  request while its other calls are in flight.

Every ``all_of`` branch is one quote: one key per ``(request, branch)``. A branch called under a
second key is a call made twice, which the checks find in the books (:meth:`Provider.books`).

>>> provider = Provider(random.Random(1), transient=0.0, lost=0.0, slow=0.0)
>>> provider.call({"key": "k1", "request": "r1", "branch": "a"}, 0)
(200, {'quote': 1, 'branch': 'a', 'request': 'r1', 'price': 47})
>>> provider.call({"key": "k1", "request": "r1", "branch": "a"}, 0)[1]["quote"]
1
>>> books = provider.books()
>>> books.made["k1"].serial, books.repeats
(1, 1)
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from samples.chaos.reading_flows import CALLER_HEADER

Hook = Callable[[int, str], None]
"""``(caller pid, request id)``, called once a fresh call is recorded (its answer not sent yet)."""


@dataclass(frozen=True)
class Quote:
    """One call made: recorded once under its key."""

    key: str
    request: str
    branch: str
    serial: int
    price: int


@dataclass(frozen=True)
class Books:
    """A copy of the provider's books, taken at one instant."""

    made: dict[str, Quote]
    """By idempotency key."""
    calls: Counter[str]
    """Calls that reached the provider per key (answered, refused or lost)."""
    repeats: int = 0
    transient: int = 0
    lost: int = 0
    late: int = 0

    def keys_of(self) -> dict[tuple[str, str], list[str]]:
        """Per ``(request, branch)``, the keys it was made under (more than one: made twice)."""
        found: dict[tuple[str, str], list[str]] = {}
        for made in sorted(self.made.values(), key=lambda quote: quote.serial):
            found.setdefault((made.request, made.branch), []).append(made.key)
        return found


@dataclass
class Provider:
    """The books and the behaviour; :meth:`serve` puts it on a port (see the module docstring)."""

    rng: random.Random
    transient: float = 0.12
    lost: float = 0.06
    slow: float = 0.2
    late_seconds: tuple[float, float] = (1.2, 2.0)
    """How long a late answer takes (longer than the quotes' timeout)."""
    late_share: float = 0.05
    hook: Hook | None = None
    _made: dict[str, Quote] = field(default_factory=dict)
    _calls: Counter[str] = field(default_factory=Counter)
    _counts: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, body: dict[str, Any], caller: int) -> tuple[int, dict[str, Any]]:
        """Answer one quote: ``(HTTP status, body)``, after the pause of a slow answer."""
        key, request, branch = str(body.get("key")), str(body.get("request")), str(body.get("branch"))
        with self._lock:
            self._calls[key] += 1
            if self.rng.random() < self.transient:
                self._counts["transient"] += 1
                return 503, {"error": "busy, try again"}
            known = self._made.get(key)
            fresh = known is None
            if known is None:
                price = 10 + (sum(map(ord, f"{request}/{branch}")) % 90)
                known = self._made[key] = Quote(key, request, branch, len(self._made) + 1, price)
            else:
                self._counts["repeat"] += 1
            lost = fresh and self.rng.random() < self.lost
            pause = self.rng.uniform(0.2, 0.8) if self.rng.random() < self.slow else 0.0
            if fresh and self.rng.random() < self.late_share:
                self._counts["late"] += 1
                pause = self.rng.uniform(*self.late_seconds)
            if lost:
                self._counts["lost"] += 1
        if fresh and self.hook is not None:
            self.hook(caller, request)
        time.sleep(pause)
        if lost:
            return 503, {"error": "the answer was lost on its way"}
        return 200, {"quote": known.serial, "branch": branch, "request": request, "price": known.price}

    def books(self) -> Books:
        with self._lock:
            counts = self._counts
            return Books(
                dict(self._made),
                Counter(self._calls),
                counts["repeat"],
                counts["transient"],
                counts["lost"],
                counts["late"],
            )

    def made(self) -> int:
        """How many calls were made (the killer's progress)."""
        with self._lock:
            return len(self._made)

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """The provider on a free loopback port for the block: yields its URL."""
        server = _Server(("127.0.0.1", 0), _Handler)
        server.provider = self
        thread = threading.Thread(target=server.serve_forever, name="chaos-quotes", daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    provider: Provider


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length)
        if len(data) < length:  # the caller died sending it (a SIGKILL mid-call): nothing to answer
            return
        try:
            body = json.loads(data or b"{}")
            caller = int(self.headers.get(CALLER_HEADER) or 0)
        except ValueError:
            self._reply(400, {"error": "not JSON"})
            return
        if self.path.strip("/") != "quote" or not isinstance(body, dict):
            self._reply(404, {"error": f"no such call {self.path!r}"})
            return
        if not all(isinstance(body.get(name), str) for name in ("key", "request", "branch")):
            self._reply(400, {"error": "a quote needs a key, a request and a branch"})
            return
        self._reply(*self.server.provider.call(body, caller))

    def _reply(self, status: int, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        with contextlib.suppress(OSError):  # the caller timed out, or was SIGKILLed meanwhile
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: hundreds of calls per round."""
