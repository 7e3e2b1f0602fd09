"""Workflows the console's tests click through: a booking that holds a seat, charges a card (both
undone by an abort) and waits for a confirmation; a shipment that fails until a "fix" row exists,
then completes once retried; a tour that starts a booking as its child and sends it a message."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from idemflow import Idem, Tx, atomic, checkpoint, workflow
from idemflow.core.step_retry import StepRetry
from idemflow.running.coordination import receive, send, start, wait


def _hold(tx: Tx) -> int:
    seats = int(tx.get("seats", 10)) - 1
    tx.put("seats", seats)
    return seats


def _release(tx: Tx, _held: object) -> None:
    tx.put("seats", int(tx.get("seats", 0)) + 1)
    tx.put("released", int(tx.get("released", 0)) + 1)


def _charge(card: dict[str, Any]) -> Any:
    def charge(tx: Tx) -> dict[str, Any]:
        tx.put("charged", int(tx.get("charged", 0)) + 1)
        return {"charge": "ch_1", "card": card}

    return charge


def _refund(tx: Tx, _charged: object) -> None:
    tx.put("refunded", int(tx.get("refunded", 0)) + 1)


@workflow("booking")
def booking(show: str, card: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
    yield atomic("items", show, _hold, compensate=_release, name="hold")
    yield atomic("items", "payments-" + show, _charge(card), compensate=_refund, name="charge")
    confirmed = yield receive("confirm")
    return {"confirmed": confirmed}


def _ship(tx: Tx) -> str:
    if not tx.get("fixed"):
        raise RuntimeError("the carrier refused the parcel")
    tx.put("shipped", True)
    return "shipped"


@workflow("shipment", retry=StepRetry(initial=0.05, maximum_attempts=2))
def shipment(order: str) -> Generator[Idem[Any], Any, Any]:
    yield atomic("items", order, lambda tx: tx.put("packed", True) or "packed", name="pack")
    yield checkpoint()
    return (yield atomic("items", "carrier", _ship, name="ship"))


def fix_carrier(tx: Tx) -> None:
    tx.put("fixed", True)


@workflow("tour")
def tour(name: str) -> Generator[Idem[Any], Any, Any]:
    """A parent: starts a booking as its child, leaves it a note, waits for it."""
    child = yield start(booking(name, {"number": "1"}), request_id=f"{name}-seat")
    yield send(booking, f"{name}-seat", "note", "window seat")
    return (yield wait(child))


WORKFLOWS = [booking, shipment, tour]
