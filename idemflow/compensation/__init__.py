"""Compensation: workflows that undo their completed steps on a logical failure.

This composes the paper's compensation monad with the idempotence monad. A
step registers its undo with ``atomic(..., compensate=c)``; ``tx.abort(reason)``
in a body or ``yield abort(reason)`` in a workflow aborts. The aborting step
commits nothing of its own but its decision is memoized, then the
compensations of the completed steps run in reverse order, each as an
idempotent step with its own memo (``c<n>``), so a crash in the middle
resumes where it stopped and never repeats one. Every execution of the
request then ends the same way: :class:`~idemflow.WorkflowAborted` from ``run``, or
``Failure(WorkflowAborted)`` from :func:`~idemflow.run_result`.

The saga itself lives in :mod:`idemflow.compensation.compensator`; what a workflow writes
(``abort``, ``run_result``, the errors) is imported from :mod:`idemflow`.

>>> from idemflow import atomic, run_result, workflow
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

from idemflow.core.moved import Moves, resolve
from idemflow.errors import deprecated_error

_MOVES: Moves = {
    "CompensationError": "idemflow",
    "WorkflowAborted": "idemflow",
    "abort": "idemflow",
    "arun_result": "idemflow",
    "run_result": "idemflow",
}

__all__: list[str] = []


def __getattr__(name: str) -> object:
    if name in _MOVES:
        return resolve(__name__, name, _MOVES)
    # CompensationFailed before 1.0: idemflow.errors.CompensationError now.
    return deprecated_error(__name__, name)
