"""The payment provider of the payments workload: a fake card service OUTSIDE the worker processes.

An HTTP server on a loopback port, run by the chaos driver, that keeps its own books as real
providers do: one charge per idempotency key (a repeat is answered from the books), one refund per
refund key. What it does to its callers:

- **outages**: while :attr:`Provider.down` it answers every call 503; :class:`Outages` takes it
  down for 2-30 s at a time (less in a quick run);
- **declines**: a declined card is answered 402 and nothing is charged;
- **late answers**: some calls are recorded at once but answered after a pause longer than the
  caller's timeout, so the caller's attempt fails though the money moved;
- **charges that land late**: for the requests in :attr:`Provider.landing_late`, the first charge
  is written to the books a while after it arrived (within the caller's timeout, as a provider
  that queues its work does), so a caller SIGKILLed as it arrives leaves a charge that lands
  after an operator's abort may already have looked it up;
- **hooks** at the effect boundaries: ``hook(call, moment, caller_pid, request)`` when a call
  arrives (``"arrived"``: nothing recorded yet) and once it is recorded (``"recorded"``: the money
  moved, the answer not sent), so the workload can SIGKILL the calling worker there, or start an
  operator's abort while the charge is in flight.

It never refuses what a correct client must never do — a second refund of a charge under another
key, a refund of a charge it never made — but writes it down, for the checks to find
(:mod:`samples.chaos.payments_checks`).

>>> provider = Provider(random.Random(1), late_share=0.0)
>>> provider.call("/charge", {"key": "k1", "request": "r1", "card": "4242", "amount": 5}, 0)[0]
200
>>> provider.call("/charge", {"key": "k1", "request": "r1", "card": "4242", "amount": 5}, 0)[1]["charge"]
'ch-1'
>>> provider.call("/refund", {"key": "u1", "charge_key": "k1", "request": "r1"}, 0)[0]
200
>>> ledger = provider.ledger()
>>> len(ledger.charges), ledger.refunds, ledger.repeats
(1, {'u1': 'ch-1'}, 1)
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from samples.chaos.payments_flows import CALLER_HEADER, DECLINED_CARD

Hook = Callable[[str, str, int, str], None]
"""``(call, moment, caller pid, request id)``: ``call`` is ``charge`` or ``refund``, ``moment``
``arrived`` or ``recorded``."""


@dataclass(frozen=True)
class Charged:
    """One charge in the provider's books."""

    id: str
    key: str
    request: str
    card: str
    amount: int


@dataclass(frozen=True)
class Ledger:
    """A copy of the provider's books, taken at one instant."""

    charges: dict[str, Charged]
    """By charge id."""
    refunds: dict[str, str]
    """Refund key -> the charge it refunded (two keys for one charge: a double refund)."""
    declines: Counter[str]
    """Declined calls per request."""
    strays: list[str]
    """Refunds of charges never made."""
    down: bool
    repeats: int = 0
    """Calls answered from the books (a repeat under a key already used)."""
    late: int = 0
    """Calls answered later than the caller's timeout."""
    outage_answers: int = 0


@dataclass
class Provider:
    """The books and the behaviour; :meth:`serve` puts it on a port (see the module docstring)."""

    rng: random.Random
    late_share: float = 0.1
    late_seconds: tuple[float, float] = (1.5, 3.0)
    hook: Hook | None = None
    down: bool = False
    slow_requests: set[str] = field(default_factory=set)
    """Requests whose first charge is always answered late (the workload aborts them meanwhile)."""
    landing_late: dict[str, float] = field(default_factory=dict)
    """Requests whose first charge is written to the books this many seconds after it arrived."""
    _charges: dict[str, Charged] = field(default_factory=dict)
    _by_key: dict[str, Charged] = field(default_factory=dict)
    _refunds: dict[str, str] = field(default_factory=dict)
    _declines: Counter[str] = field(default_factory=Counter)
    _strays: list[str] = field(default_factory=list)
    _counts: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, path: str, body: dict[str, Any], caller: int) -> tuple[int, dict[str, Any]]:
        """Answer one call: ``(HTTP status, body)``, after the pause of a late answer."""
        kind = path.strip("/")
        request = str(body.get("request", ""))
        with self._lock:
            if self.down:
                self._counts["outage"] += 1
                return 503, {"error": "payments unavailable"}
        if kind not in ("charge", "refund"):
            return 404, {"error": f"no such call {path!r}"}
        self._notify(kind, "arrived", caller, request)
        if kind == "charge":
            with self._lock:
                lag = self.landing_late.pop(request, 0.0)
            time.sleep(lag)  # the money moves now, whether the caller still waits or not
        pause = 0.0
        with self._lock:
            status, answer, fresh = self._charge(body) if kind == "charge" else self._refund(body)
            late = fresh and (request in self.slow_requests or self.rng.random() < self.late_share)
            self.slow_requests.discard(request)
            if late:
                self._counts["late"] += 1
                pause = self.rng.uniform(*self.late_seconds)
        if status == 200 and fresh:
            self._notify(kind, "recorded", caller, request)
        time.sleep(pause)
        return status, answer

    def _charge(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], bool]:
        key, request = str(body["key"]), str(body["request"])
        known = self._by_key.get(key)
        if known is not None:
            self._counts["repeat"] += 1
            return 200, _answer(known), False
        if body.get("card") == DECLINED_CARD:
            self._declines[request] += 1
            return 402, {"error": "card declined"}, False
        made = Charged(f"ch-{len(self._charges) + 1}", key, request, str(body["card"]), int(body["amount"]))
        self._charges[made.id] = self._by_key[key] = made
        return 200, _answer(made), True

    def _refund(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], bool]:
        key = str(body["key"])
        if key in self._refunds:
            self._counts["repeat"] += 1
            return 200, {"refund": key, "charge": self._refunds[key]}, False
        if "charge_key" in body:  # by the charge's own key: its outcome may be unknown to the caller
            made = self._by_key.get(str(body["charge_key"]))
            if made is None:
                return 200, {"refund": None, "charge": None}, False  # never charged: nothing to undo
            charge = made.id
        else:
            charge = str(body["charge"])
        if charge not in self._charges:
            self._strays.append(
                f"refund {key[:12]} of {charge}, never charged (request {body.get('request')})"
            )
            return 404, {"error": f"no charge {charge}"}, False
        self._refunds[key] = charge  # a second key for one charge is recorded: the checks find it
        return 200, {"refund": key, "charge": charge}, True

    def _notify(self, kind: str, moment: str, caller: int, request: str) -> None:
        if self.hook is not None:
            self.hook(kind, moment, caller, request)

    def ledger(self) -> Ledger:
        with self._lock:
            return Ledger(
                dict(self._charges),
                dict(self._refunds),
                Counter(self._declines),
                list(self._strays),
                self.down,
                self._counts["repeat"],
                self._counts["late"],
                self._counts["outage"],
            )

    def reached(self) -> int:
        """How many requests reached the provider (charged or declined): the killer's progress."""
        with self._lock:
            return len({made.request for made in self._charges.values()} | set(self._declines))

    def set_down(self, down: bool) -> None:
        with self._lock:
            self.down = down

    @contextlib.contextmanager
    def serve(self) -> Any:
        """The provider on a free loopback port for the block: yields its URL."""
        server = _Server(("127.0.0.1", 0), _Handler)
        server.provider = self
        thread = threading.Thread(target=server.serve_forever, name="chaos-payments", daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


def _answer(made: Charged) -> dict[str, Any]:
    return {"charge": made.id, "amount": made.amount, "request": made.request}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    provider: Provider


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            caller = int(self.headers.get(CALLER_HEADER) or 0)
        except ValueError:
            self._reply(400, {"error": "not JSON"})
            return
        status, answer = self.server.provider.call(self.path, body, caller)
        self._reply(status, answer)

    def _reply(self, status: int, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        with contextlib.suppress(OSError):  # the caller timed out, or was SIGKILLed meanwhile
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: thousands of calls per round."""


class Outages:
    """Takes the provider down for ``lengths`` seconds at a time, ``gaps`` seconds apart, from a
    thread, until :meth:`stop` (which lets a running outage end first: :meth:`stop` returns when
    the provider is up)."""

    def __init__(
        self, provider: Provider, rng: random.Random, lengths: tuple[float, float], gaps: tuple[float, float]
    ) -> None:
        self.provider, self.rng = provider, rng
        self.lengths, self.gaps = lengths, gaps
        self.count = 0
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-outages", daemon=True)

    def __enter__(self) -> Outages:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.rng.uniform(*self.gaps)):
            length = self.rng.uniform(*self.lengths)
            self.provider.set_down(True)
            self.count += 1
            time.sleep(length)  # an outage started is lived through: stop() waits for its end
            self.seconds += length
            self.provider.set_down(False)
