"""What the transfer demo sends: its sizes (:class:`Settings`) and the requests made from them.

Apart from the processes that run them (:mod:`samples.transfer.demo_workers`) because the chaos
suite makes the same requests for workloads of its own.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from samples.transfer.workflows import TransferRequest

Submission = tuple[str, TransferRequest]
"""A request as submitted: its request id (the idempotency key) and its input."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Sizes of one run. The defaults are the demo's; tests shrink them."""

    path: Path
    """The SQLite file; it and its ``-wal``/``-shm`` companions are deleted first."""
    workers: int = 4
    requests: int = 300
    accounts: int = 8
    balance: int = 1000
    kills: int = 12
    seed: int = 0
    window: int = 2
    """Requests handed to one worker before its answers come back (what a kill loses)."""
    kill_jitter: float = 0.02
    """Seconds of random delay before a due kill, so it lands anywhere in a step."""
    timeout: float = 120.0
    """Give up (and fail) if the run has not finished by then."""
    unkeyed: bool = False
    """Run every copy under its own request id, as code without idempotence keys
    would: duplicates then apply twice, and the check must FAIL."""


def account_names(count: int) -> list[str]:
    return [f"acct-{n}" for n in range(count)]


def make_requests(settings: Settings, rng: random.Random) -> list[Submission]:
    """Distinct transfer requests; the abort shares are fixed so small runs still cover them."""
    names = account_names(settings.accounts)
    requests: list[Submission] = []
    for n in range(settings.requests):
        src, dst = rng.sample(names, 2)
        amount = rng.randint(1, max(1, settings.balance // 5))
        if n % 20 == 7:
            dst = f"ghost-{rng.randrange(3)}"  # never opened: aborts after the debit
        elif n % 12 == 5:
            amount = rng.randint(settings.balance + 1, 3 * settings.balance)  # more than anyone has
        requests.append((f"req-{n:05d}", {"src": src, "dst": dst, "amount": amount}))
    return requests


def make_submissions(
    requests: Sequence[Submission], settings: Settings, rng: random.Random
) -> list[Submission]:
    """Each request 2-3 times, the copies a few places apart so they run concurrently."""
    spread = 2.0 * settings.workers * settings.window
    placed = [
        (n + rng.uniform(0, spread), request)
        for n, request in enumerate(requests)
        for _copy in range(rng.choice((2, 3)))
    ]
    placed.sort(key=lambda item: item[0])
    return [request for _position, request in placed]


__all__ = ["Settings", "Submission", "account_names", "make_requests", "make_submissions"]
