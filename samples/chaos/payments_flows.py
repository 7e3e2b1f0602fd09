"""The booking saga of the payments workload (:mod:`samples.chaos.payments`), as worker processes run it.

It lives apart from the workload so a worker (``python -m samples.chaos worker payments``) imports
only what it runs. One request books one seat on a flight and pays for it:

1. ``checkpoint()``: the client only claims the request, worker processes run every step;
2. *hold* a seat (table ``payseats``, partition the flight): ``held`` counts the seats held and
   ``by:<request>`` says who holds one; a full flight aborts (nothing to undo yet); undone by
   giving the seat back;
3. *charge* the card at the payment provider, an outside HTTP service
   (:mod:`samples.chaos.payments_provider`), as ``effect(..., compensate=refund, timeout=,
   retry=StepRetry(...))``: the provider drops repeats by idempotency key, answers 503 while it
   is down (retried through the outage), 402 for a declined card (non-retryable: the worker
   compensates at once, as the workflow is ``on_failure="compensate"``) and sometimes later than
   the timeout (the attempt fails; the next one carries the same key);
4. ``receive("confirm", timeout=...)``: no confirmation in time aborts (the seat is given back, the
   charge refunded);
5. take a *meal* (table ``paymeals``): the stock is smaller than the seats, so some requests
   abort here, sold out, after they paid.

The timing (the call's timeout, the policy) travels in the request, so the quick and the full run
share one workflow. The refund receives the charge's memoized answer and an idempotency key of its
own; it names the charge, which is how the provider finds it.

>>> from idemflow.stores import MemoryStore
>>> store = MemoryStore()
>>> seats_taken(store)
{}
>>> retry_of(booking_request("b-1", "LX1", 5, 5, "4242", 30, quick=True)).non_retryable
(<class 'samples.chaos.payments_flows.CardDeclined'>,)
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Generator
from typing import Any, TypedDict

from idemflow import Idem, StepRetry, Tx, abort, atomic, checkpoint, effect, receive
from idemflow import workflow as define
from idemflow.client import rows
from idemflow.serialization import JSON
from idemflow.stores import Store

SEATS, MEALS = "payseats", "paymeals"
TABLES = (SEATS, MEALS)
BOOKING = "chaos-booking"
CONFIRM = "confirm"
HELD, BY = "held", "by:"
PROVIDER_ENV = "CHAOS_PAYMENTS_URL"
"""Where the worker processes find the payment provider (the chaos driver sets it)."""
CALLER_HEADER = "X-Caller-Pid"
"""The calling process, so the provider can SIGKILL a worker right at an effect boundary."""
DECLINED_CARD = "4000000000000002"
"""A card the provider always declines (as the test cards of real providers)."""

_endpoint: list[str] = []
"""The provider's URL in the driver's own process (its operator aborts refund from there)."""


class Booking(TypedDict):
    id: str
    flight: str
    seats: int
    """The flight's capacity."""
    meals: int
    """The flight's meal stock: smaller than its seats, so some paid requests abort, sold out."""
    card: str
    amount: int
    timeout: float
    """Seconds the charge (and the refund) may take before the attempt fails."""
    retry: list[float]
    """The charge's StepRetry: ``[initial, maximum_interval, expiry]``."""
    confirm_within: float


class CardDeclined(Exception):
    """The provider declined the card: trying again cannot help (non-retryable)."""


class ProviderDown(ConnectionError):
    """The provider answered 503 or could not be reached: an outage, waited out by the policy."""


class ProviderRefused(Exception):
    """Any other refusal (e.g. a refund of a charge it never made): retried, and reported by the checks."""


def booking_request(
    request_id: str, flight: str, seats: int, meals: int, card: str, amount: int, *, quick: bool
) -> Booking:
    """A request with the run's timing: a quick run's calls time out and retry sooner."""
    return {
        "id": request_id,
        "flight": flight,
        "seats": seats,
        "meals": meals,
        "card": card,
        "amount": amount,
        "timeout": 0.4 if quick else 1.0,
        "retry": [0.1, 0.5, 60.0] if quick else [0.25, 2.0, 150.0],
        "confirm_within": 3.0 if quick else 8.0,
    }


def retry_of(req: Booking) -> StepRetry:
    """The charge's policy: outlasts the longest outage; a declined card is never tried again."""
    initial, longest, expiry = req["retry"]
    return StepRetry(initial=initial, maximum_interval=longest, expiry=expiry, non_retryable=(CardDeclined,))


def use_provider(url: str | None) -> None:
    """Call the provider at ``url`` from this process (None: from the environment again)."""
    _endpoint.clear()
    if url is not None:
        _endpoint.append(url)


def post(path: str, body: dict[str, JSON]) -> dict[str, JSON]:
    """One call to the provider, its refusals as the exceptions the policy tells apart."""
    url = (_endpoint[0] if _endpoint else os.environ[PROVIDER_ENV]) + path
    headers = {"Content-Type": "application/json", CALLER_HEADER: str(os.getpid())}
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            found: dict[str, JSON] = json.loads(answer.read())
            return found
    except urllib.error.HTTPError as refused:
        detail = refused.read().decode(errors="replace")
        if refused.code == 402:
            raise CardDeclined(detail) from None
        if refused.code == 503:
            raise ProviderDown(detail) from None
        raise ProviderRefused(f"{refused.code}: {detail}") from None
    except OSError as unreachable:  # URLError, a reset connection, a socket timeout
        raise ProviderDown(f"{type(unreachable).__name__}: {unreachable}") from None


def charge(req: Booking) -> Callable[[str], dict[str, JSON]]:
    def call(idempotency_key: str) -> dict[str, JSON]:
        body: dict[str, JSON] = {"key": idempotency_key, "request": req["id"], "card": req["card"]}
        return post("/charge", {**body, "amount": req["amount"]})

    return call


def refund(charge_key: str, charged: dict[str, JSON] | None) -> dict[str, JSON]:
    """The undo of a charge, by the charge's own key (its answer is None when the booking was
    undone while the charge was in flight), under a refund key derived from it."""
    request = None if charged is None else charged.get("request")
    return post("/refund", {"key": "refund-" + charge_key, "charge_key": charge_key, "request": request})


def _take(capacity: int, request_id: str, why: str) -> Callable[[Tx], int]:
    def body(tx: Tx) -> int:
        held = int(tx.get(HELD, 0))
        if held >= capacity:
            tx.abort(why)
        tx.put(HELD, held + 1)
        tx.put(BY + request_id, 1)
        return held + 1

    return body


def _give_back(request_id: str) -> Callable[[Tx, object], None]:
    def body(tx: Tx, _taken: object) -> None:
        tx.put(HELD, int(tx.get(HELD, 0)) - 1)
        tx.delete(BY + request_id)

    return body


@define(BOOKING, on_failure="compensate")
def booking(req: Booking) -> Generator[Idem[Any], Any, dict[str, JSON]]:
    yield checkpoint()
    rid, flight = req["id"], req["flight"]
    hold = _take(req["seats"], rid, "flight full")
    yield atomic(SEATS, flight, hold, compensate=_give_back(rid), name="hold")
    paid = yield effect(
        charge(req), compensate=refund, timeout=req["timeout"], retry=retry_of(req), name="charge"
    )
    confirmed = yield receive(CONFIRM, timeout=req["confirm_within"])
    if confirmed is None:
        yield abort("not confirmed")
    meal = _take(req["meals"], rid, "sold out")
    yield atomic(MEALS, flight, meal, compensate=_give_back(rid), name="meal")
    return {"charge": paid["charge"], "flight": flight}


WORKFLOWS = (booking,)


def seats_taken(store: Store, table: str = SEATS) -> dict[str, tuple[int, frozenset[str]]]:
    """Per flight, the ``held`` counter and who holds one (one read of the table: one snapshot)."""
    found: dict[str, tuple[int, frozenset[str]]] = {}
    counters: dict[str, int] = {}
    holders: dict[str, set[str]] = {}
    for (flight, key), value in rows(store, table).items():
        if key == HELD and isinstance(value, int):
            counters[flight] = value
        elif key.startswith(BY):
            holders.setdefault(flight, set()).add(key[len(BY) :])
    for flight in sorted({*counters, *holders}):
        found[flight] = (counters.get(flight, 0), frozenset(holders.get(flight, ())))
    return found
