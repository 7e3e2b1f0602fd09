"""What a request derives from its step numbers alone: an effect's idempotency key, ``uuid4()``.

Every execution of a request, in any process, derives the same values for
the same step, so an outside service sees one key however often the call is
made, and a replay needs no memo for a derived value.
"""

from __future__ import annotations

import hashlib


def idempotency_key(workflow: str, request_id: str, step: int) -> str:
    """The stable key an effect passes to its outside service (hex sha256)."""
    return hashlib.sha256(b"effect\x00" + digest(workflow, request_id, step)).hexdigest()


def digest(workflow: str, request_id: str, step: int) -> bytes:
    """The step's own 32 bytes, for ``uuid4()`` and ``random()``."""
    return hashlib.sha256(f"{workflow}\x00{request_id}\x00{step}".encode()).digest()
