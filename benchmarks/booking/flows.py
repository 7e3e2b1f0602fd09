"""The workflows :mod:`benchmarks.booking` measures, the payment provider they call, and a counter.

- ``bench-book``: hold a seat, charge the card (an ``effect`` undone by a refund), ``checkpoint()``,
  issue the ticket. ``submit`` runs the hold and the charge in the client; one worker execution
  finishes the request. The code after the checkpoint notes each time it starts
  (:data:`STARTS`): a worker execution that resumes the request past its checkpoint, whether it
  then finishes it or finds it finished.
- ``bench-book-confirm``: the same, but after the checkpoint it waits for the customer's
  confirmation (``receive("confirm", timeout=...)``) before issuing the ticket: a worker suspends
  it at the receive, and ``send_message(..., "confirm", ...)`` wakes it.

The provider is a dictionary in this process, keyed by idempotency key as a real one is: the
benchmark measures the library's path, not a network call.

>>> from idemflow import run
>>> from idemflow.stores import MemoryStore
>>> run(book({"id": "b1", "flight": "f0", "amount": 5}), request_id="b1", store=MemoryStore())["ticket"]
'b1'
>>> STARTS.take()
1
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import Any

from idemflow import Idem, Tx, abort, atomic, checkpoint, effect, receive, workflow
from idemflow.serialization import JSON

SEATS, TICKETS = "bkseats", "bktickets"
TABLES = (SEATS, TICKETS)
CONFIRM = "confirm"
Flow = Generator[Idem[Any], Any, Any]


class Provider:
    """A payment provider's books: one charge per idempotency key, one refund per refund key."""

    def __init__(self) -> None:
        self.charges: dict[str, int] = {}
        self.refunds: dict[str, str] = {}
        self.calls = 0
        self._lock = threading.Lock()

    def charge(self, amount: int) -> Callable[[str], dict[str, JSON]]:
        def call(key: str) -> dict[str, JSON]:
            with self._lock:
                self.calls += 1
                self.charges.setdefault(key, amount)
            return {"charge": key, "amount": amount}

        return call

    def refund(self, key: str, charged: dict[str, JSON]) -> str:
        with self._lock:
            self.refunds.setdefault(key, str(charged["charge"]))
        return "refunded"


class Starts:
    """How often the code after a checkpoint started, in all (thread-safe)."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    def note(self) -> None:
        with self._lock:
            self._count += 1

    def take(self) -> int:
        """The count so far, and start again from 0."""
        with self._lock:
            count, self._count = self._count, 0
            return count


PROVIDER = Provider()
STARTS = Starts()


def _hold(request_id: str) -> Callable[[Tx], str]:
    def body(tx: Tx) -> str:
        tx.increment("held")  # no read: concurrent holds on a flight never rerun the body
        tx.put("by:" + request_id, 1)
        return "held"

    return body


def _free(request_id: str) -> Callable[[Tx, object], None]:
    def body(tx: Tx, _held: object) -> None:
        tx.increment("held", -1)
        tx.delete("by:" + request_id)

    return body


def _issue(tx: Tx) -> str:
    tx.put("issued", 1)
    return "issued"


def _paid(req: dict[str, Any]) -> Flow:
    """Hold a seat and charge the card: the steps before the checkpoint (the client runs them)."""
    rid = req["id"]
    yield atomic(SEATS, req["flight"], _hold(rid), compensate=_free(rid), name="hold")
    charge = PROVIDER.charge(int(req["amount"]))
    return (yield effect(charge, compensate=PROVIDER.refund, timeout=30, name="charge"))


@workflow("bench-book")
def book(req: dict[str, Any]) -> Flow:
    paid = yield from _paid(req)
    yield checkpoint()
    STARTS.note()
    yield atomic(TICKETS, req["id"], _issue, name="ticket")
    return {"ticket": req["id"], "charge": paid["charge"]}


@workflow("bench-book-confirm")
def book_confirm(req: dict[str, Any]) -> Flow:
    paid = yield from _paid(req)
    yield checkpoint()
    confirmed = yield receive(CONFIRM, timeout=float(req["timeout"]))
    if confirmed is None:
        yield abort("not confirmed")
    yield atomic(TICKETS, req["id"], _issue, name="ticket")
    return {"ticket": req["id"], "charge": paid["charge"]}


WORKFLOWS = [book, book_confirm]
