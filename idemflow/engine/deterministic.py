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

>>> from idemflow import run, workflow
>>> from idemflow.stores import MemoryStore
>>> @workflow("stamp")
... def stamp(order):
...     ident = yield uuid4()
...     sent = yield effect(lambda idempotency_key: f"mail sent ({len(idempotency_key)}-char key)")
...     return {"id": len(ident), "sent": sent}
>>> run(stamp({"n": 1}), request_id="order-1", store=MemoryStore())
{'id': 36, 'sent': 'mail sent (64-char key)'}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from idemflow.core.limit_spec import LimitGroup, effect_group
from idemflow.core.step_retry import StepRetry, check_retry
from idemflow.engine.monad import Effect, Idem, Now, Random, Uuid4
from idemflow.errors import InvalidInputError
from idemflow.keys import check_duration

T = TypeVar("T")


def now() -> Idem[float]:
    """The time (epoch seconds) at the first execution of this step, memoized."""
    return Idem(Now())


def uuid4() -> Idem[str]:
    """A UUID (version 4 layout) derived from the request and step: stable on replay."""
    return Idem(Uuid4())


def random() -> Idem[float]:
    """A float in [0, 1) derived from the request and step: stable on replay."""
    return Idem(Random())


def effect(
    fn: Callable[[str], T],
    *,
    name: str | None = None,
    lease: float | None = None,
    compensate: Callable[[str, T], object] | None = None,
    retry: StepRetry | None = None,
    timeout: float | None = None,
    group: LimitGroup | None = None,
) -> Idem[T]:
    """Call ``fn(idempotency_key)`` outside the store: at least once, result memoized.

    ``name`` identifies the step for non-determinism checks (default: the
    function's qualified name). The result must be JSON-compatible (or a
    codec type). With ``lease=seconds``, racing executions of the request do
    not each call ``fn``: one holds the call for up to ``seconds`` and the
    others wait for its result; a holder that crashed (or whose call outlives
    the lease) is taken over once the lease ends. Choose a lease longer than
    the call can take. It costs one more commit per call.

    ``compensate=undo`` makes the call undoable: whenever the request is
    undone once this call was reached (a later step aborts, ``yield
    abort(...)``, ``on_failure="compensate"``, an operator's abort, a
    request deadline), ``undo(key, result)`` runs exactly once, in reverse
    order with the other compensations. ``key`` is the call's own idempotency
    key and ``result`` its memoized answer — or None when the request was
    undone at this very call, whose outcome is then unknown (it may be in
    flight, or an attempt that timed out may have gone through): the undo
    must then find what ``key`` did at the provider, if anything; if the call has a
    ``timeout=`` (or a lease still held), the undo runs once more with None once the call can no
    longer land, and the request ends only after that. Derive the
    undo's own idempotency key from ``key`` (``"refund-" + key``): a provider
    refuses one key for two different calls. A failing undo is retried under
    ``retry``; it is never dropped. ``retry`` (a
    :class:`~idemflow.StepRetry`) says how a call that raised is
    made again; ``timeout=seconds`` fails an attempt that takes longer
    (:class:`~idemflow.errors.EffectTimeoutError`).

    ``group=`` (a :class:`~idemflow.LimitGroup`) holds the group's limits
    around the call alone: a slot taken just before ``fn`` is called and
    given back when it returns, and a token spent per call, across every
    process sharing the store. A call that raised may still be running at the
    provider (a client's timeout, a reset connection): its slot stays taken
    until the group's lease ends, unless the exception is named in the
    step's ``StepRetry(non_retryable=...)`` (the provider answered; a
    ``TimeoutError`` or ``ConnectionError`` is never taken so). The
    call's undo (``compensate=``) holds the group the same way. A call whose group is full waits: under
    workers (and ``submit``) as a delayed continuation, never an attempt;
    under ``run`` in place, for up to 30 seconds, then
    :class:`~idemflow.errors.LimitReachedError`. A replayed call takes
    nothing. The group's lease must outlast the call: a ``timeout=`` longer
    than it is refused.

    >>> from idemflow import run, workflow, WorkflowAborted
    >>> from idemflow.stores import MemoryStore
    >>> from idemflow import abort
    >>> refunds = []
    >>> @workflow("pay")
    ... def pay(order):
    ...     charge = yield effect(lambda key: {"charge": "ch_1"},
    ...                           compensate=lambda key, charge: refunds.append(charge and charge["charge"]))
    ...     yield abort("out of stock")
    >>> try:
    ...     run(pay({"n": 1}), request_id="o-1", store=MemoryStore())
    ... except WorkflowAborted as aborted:
    ...     print(aborted.reason, refunds)
    out of stock ['ch_1']
    """
    lease = None if lease is None else check_duration(lease, "effect lease")
    timeout = None if timeout is None else check_duration(timeout, "effect timeout")
    if not callable(fn):
        raise InvalidInputError(f"effect() takes a callable, not {type(fn).__name__}")
    if compensate is not None and not callable(compensate):
        raise InvalidInputError(f"effect compensate= takes a callable, not {type(compensate).__name__}")
    label = name if name is not None else getattr(fn, "__qualname__", type(fn).__qualname__)
    group_limit = effect_group(group, timeout)
    return Idem(Effect(label, fn, lease, compensate, check_retry(retry), timeout, group_limit))
