"""Deterministic helpers: time, identifiers, randomness and outside calls.

A workflow must take the same path when it is replayed, so anything that
differs between executions goes through these, each an ``Idem`` to yield:

- ``now()`` reads the clock once and memoizes it (one commit beside the run
  record);
- ``uuid4()`` and ``random()`` are derived from ``(workflow, request id,
  step)`` by hashing: the same on every replay and free of store calls;
- ``effect(fn)`` calls something outside the store (HTTP, e-mail). It runs
  at least once, its result is memoized, and ``fn`` receives a stable
  ``idempotency_key`` to hand to the outside service so that service can
  drop the repeats.

>>> from idemflow import MemoryStore, run, workflow
>>> @workflow("stamp")
... def stamp(order):
...     ident = yield uuid4()
...     sent = yield effect(lambda idempotency_key: f"mail sent ({len(idempotency_key)}-char key)")
...     return {"id": len(ident), "sent": sent}
>>> run(stamp({"n": 1}), request_id="order-1", store=MemoryStore())
{'id': 36, 'sent': 'mail sent (64-char key)'}
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from idemflow.monad import Idem, Special, special

if TYPE_CHECKING:
    from idemflow.engine import Execution
    from idemflow.tx import Tx

T = TypeVar("T")


def now() -> Idem[float]:
    """The time (epoch seconds) at the first execution of this step, memoized."""
    return special("now")


def uuid4() -> Idem[str]:
    """A UUID (version 4 layout) derived from the request and step: stable on replay."""
    return special("uuid4")


def random() -> Idem[float]:
    """A float in [0, 1) derived from the request and step: stable on replay."""
    return special("random")


def effect(fn: Callable[[str], T], *, name: str | None = None) -> Idem[T]:
    """Call ``fn(idempotency_key)`` outside the store: at least once, result memoized.

    ``name`` identifies the step for non-determinism checks (default: the
    function's qualified name). The result must be JSON-compatible.
    """
    label = name if name is not None else getattr(fn, "__qualname__", type(fn).__qualname__)
    return special("effect", (label, fn))


def _digest(execution: Execution, step: int) -> bytes:
    text = f"{execution.workflow}\x00{execution.request_id}\x00{step}"
    return hashlib.sha256(text.encode("utf-8")).digest()


def idempotency_key(execution: Execution, step: int) -> str:
    """The stable key an effect passes to its outside service (hex sha256)."""
    return hashlib.sha256(b"effect\x00" + _digest(execution, step)).hexdigest()


def evaluate_special(execution: Execution, node: Special) -> Any:
    """Run one table-less step inside ``execution``."""
    kind = node.kind
    if kind == "now":
        clock = execution.clock
        return execution.table_less_step("now", lambda tx: clock())
    if kind in ("uuid4", "random"):
        execution.step += 1
        digest = _digest(execution, execution.step)
        if kind == "uuid4":
            return str(uuid.UUID(bytes=digest[:16], version=4))
        return int.from_bytes(digest[:7], "big") / float(1 << 56)
    if kind == "effect":
        label, fn = node.payload
        key = idempotency_key(execution, execution.step + 1)

        def call(tx: Tx) -> Any:
            tx.settle()  # a duplicate of a finished request stops here, not after fn
            return fn(key)

        return execution.table_less_step("effect " + label, call)
    if kind == "abort":
        reason = node.payload
        return execution.table_less_step("abort", lambda tx: tx.abort(reason))
    if kind == "checkpoint":
        if execution.on_checkpoint is not None:
            execution.on_checkpoint(execution)
        return None
    from idemflow.errors import InvalidInputError

    raise InvalidInputError(f"unknown step kind {kind!r}")
