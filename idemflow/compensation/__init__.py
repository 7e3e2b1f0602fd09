"""Compensation: workflows that undo their completed steps on a logical failure.

This composes the paper's compensation monad with the idempotence monad. A
step registers its undo with ``atomic(..., compensate=c)``; ``tx.abort(reason)``
in a body or ``yield abort(reason)`` in a workflow aborts. The aborting step
commits nothing of its own but its decision is memoized, then the
compensations of the completed steps run in reverse order, each as an
idempotent step with its own memo (``c<n>``), so a crash in the middle
resumes where it stopped and never repeats one. Every execution of the
request then ends the same way: :class:`WorkflowAborted` from ``run``, or
``Failure(WorkflowAborted)`` from :func:`run_result`.

>>> from idemflow import atomic, workflow
>>> from idemflow.stores import MemoryStore
>>> def debit(tx):
...     tx.increment("balance", -10)
>>> def credit_missing(tx):
...     if tx.get("balance") is None:
...         tx.abort("no such account")
>>> @workflow("pay")
... def pay(req):
...     yield atomic("accounts", "alice", debit, compensate=lambda tx, _: tx.increment("balance", 10))
...     yield atomic("accounts", "nobody", credit_missing)
>>> store = MemoryStore()
>>> run_result(pay({}), request_id="p-1", store=store)
<Failure: workflow 'pay' request 'p-1' aborted: 'no such account'>
"""

from __future__ import annotations

from idemflow._asyncio_runner import arun_result
from idemflow.errors import CompensationError, WorkflowAborted, deprecated_error
from idemflow.monad import Abort, Idem
from idemflow.runner import run_result
from idemflow.serialization import JSON, encode


def abort(reason: JSON = None) -> Idem[None]:
    """Abort the workflow from its generator: ``yield abort("out of stock")``."""
    encode(reason, "abort reason")
    return Idem(Abort(reason))


__all__ = ["CompensationError", "WorkflowAborted", "abort", "arun_result", "run_result"]


def __getattr__(name: str) -> type[Exception]:
    # CompensationFailed before 1.0: idemflow.errors.CompensationError now.
    return deprecated_error(__name__, name)
