"""What the ``all_of`` / ``any_of`` suites share: an outside service that counts its calls by
idempotency key (and can make its calls wait for each other), and crash plans by branch memo."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from idemflow.keys import RUNS_TABLE
from idemflow.stores.base import Insert, Store
from idemflow.testing import Fault, FaultPoint

TIMEOUT = 30.0
"""Seconds a call waits for the others (only a broken run ever waits that long)."""


class Service:
    """A quote service keeping a ledger by idempotency key, as real ones do.

    ``together=n`` makes every call wait until ``n`` calls are in progress at once (a
    ``threading.Barrier``): the calls can only all answer if they were made concurrently.
    ``down[name]`` calls of ``name`` fail first; ``held[name]`` makes ``name`` wait for its event.
    """

    def __init__(self, together: int = 0) -> None:
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        """Calls per name."""
        self.keys: Counter[str] = Counter()
        """Calls per idempotency key."""
        self.charged: dict[str, int] = {}
        self.refunds: dict[str, str] = {}
        self.down: Counter[str] = Counter()
        self.held: dict[str, threading.Event] = {}
        self.barrier = threading.Barrier(together, timeout=TIMEOUT) if together else None

    def quote(self, name: str, price: int) -> Callable[[str], dict[str, Any]]:
        def call(key: str) -> dict[str, Any]:
            with self.lock:
                self.calls[name] += 1
                self.keys[key] += 1
                failing = self.down[name] > 0
                if failing:
                    self.down[name] -= 1
            if self.barrier is not None:
                self.barrier.wait()
            held = self.held.get(name)
            if held is not None:
                held.wait(TIMEOUT)
            if failing:
                raise ConnectionError(f"{name} down")
            with self.lock:
                self.charged.setdefault(key, price)
            return {"from": name, "price": price}

        call.__qualname__ = name
        return call

    def async_quote(self, name: str, price: int) -> Callable[[str], Any]:
        """:meth:`quote` as a coroutine function (it waits for the others off the loop)."""
        made = self.quote(name, price)

        async def call(key: str) -> dict[str, Any]:
            return await asyncio.to_thread(made, key)

        call.__qualname__ = name
        return call

    def refund(self, key: str, charge: dict[str, Any] | None) -> str:
        """Undo the charge made under ``key``; ``charge`` is None when its outcome is unknown."""
        with self.lock:
            if key not in self.charged:
                return "nothing to refund"
            self.refunds.setdefault("refund-" + key, key)
            return "refunded"

    def kept(self) -> int:
        """What was charged and not refunded."""
        refunded = set(self.refunds.values())
        return sum(price for key, price in self.charged.items() if key not in refunded)

    def release(self) -> None:
        for event in self.held.values():
            event.set()


def is_memo_of(op: object, kind: str) -> bool:
    """Whether ``op`` inserts a memo of a step of ``kind`` (``effect``, ``any_of``...)."""
    value = getattr(op, "value", None)
    return (
        isinstance(op, Insert)
        and isinstance(value, dict)
        and str(value.get("id", "")).split(" ")[0] == kind
        and "abort" not in value
    )


def crash_after(
    kind: str, nth: int, fault: Fault = Fault.CRASH_AFTER
) -> Callable[[FaultPoint], Fault | None]:
    """A crash plan: ``fault`` at the commit carrying the ``nth`` memo of a ``kind`` step (a
    commit sent again, after a transaction conflict, carries the same memo: counted once)."""
    seen: list[Any] = []
    lock = threading.Lock()

    def plan(point: FaultPoint) -> Fault | None:
        memos = [op.ref for op in point.ops if is_memo_of(op, kind)]  # type: ignore[attr-defined]
        if point.kind != "commit" or not memos:
            return None
        with lock:
            if memos[0] in seen:
                return fault if seen.index(memos[0]) == nth - 1 else None
            seen.append(memos[0])
            return fault if len(seen) == nth else None

    return plan


def kept_memos(store: Store, request_id: str, kind: str) -> int:
    """How many memos of ``kind`` steps the request's partition holds (a branch memo sits beside
    the run record): after a crash, those whose commit landed before it."""
    return sum(
        1
        for _, _, row in store.scan(RUNS_TABLE, request_id)
        if isinstance(row.value, dict) and str(row.value.get("id", "")).split(" ")[0] == kind
    )
