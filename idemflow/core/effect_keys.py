"""What a request derives from its step numbers alone: an effect's idempotency key, ``uuid4()``.

Every execution of a request, in any process, derives the same values for
the same step, so an outside service sees one key however often the call is
made, and a replay needs no memo for a derived value.

A request that continued as new numbers its steps from 1 again in each incarnation, so the
incarnation's number is part of what is derived from (from the second on; the first derives
what every request derived before incarnations were numbered): period 2's charge gets a key of
its own, not period 1's, which a payment provider would answer as the duplicate it is not.

>>> idempotency_key("renewal", "sub-1", 1) == idempotency_key("renewal", "sub-1", 1, incarnation=1)
True
>>> idempotency_key("renewal", "sub-1", 1) != idempotency_key("renewal", "sub-1", 1, incarnation=2)
True
"""

from __future__ import annotations

import hashlib


def idempotency_key(workflow: str, request_id: str, step: int, *, incarnation: int = 1) -> str:
    """The stable key an effect passes to its outside service (hex sha256)."""
    return hashlib.sha256(
        b"effect\x00" + digest(workflow, request_id, step, incarnation=incarnation)
    ).hexdigest()


def digest(workflow: str, request_id: str, step: int, *, incarnation: int = 1) -> bytes:
    """The step's own 32 bytes, for ``uuid4()`` and ``random()`` (a request id holds no NUL, so
    an incarnation's text is no other request's)."""
    which = request_id if incarnation == 1 else f"{request_id}\x00{incarnation}"
    return hashlib.sha256(f"{workflow}\x00{which}\x00{step}".encode()).digest()
