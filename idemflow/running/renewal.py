"""``yield continue_as_new(input)``: end this incarnation of the request, start the next.

A request that lives for years (a subscription renewing monthly, a nightly job) is written as one
period that ends by continuing as new with the next period's input: the same request id, its
status, handle, messages and events carry on, while its steps start again at 1 and the earlier
period's memos are replaced as the next one reaches them (:mod:`idemflow.engine.renewal`), so the
rows it holds stay those of one period.

>>> from idemflow import atomic, run, workflow
>>> from idemflow.stores import MemoryStore
>>> from idemflow.stores.base import RowRef
>>> def charge(tx):
...     tx.increment("charged")
>>> @workflow("renewing-doc")
... def renewing(period):
...     yield atomic("accounts", "alice", charge)
...     if period < 3:
...         yield continue_as_new(period + 1)
...     return period
>>> store = MemoryStore()
>>> run(renewing(1), request_id="sub-1", store=store)
3
>>> run(renewing(1), request_id="sub-1", store=store)  # a duplicate answers, charging nothing
3
>>> store.read(RowRef("accounts", "alice", "dcharged")).value
3
"""

from __future__ import annotations

from typing import Any, NoReturn

from idemflow.engine.monad import ContinueAsNew, Idem
from idemflow.serialization import decode, encode

__all__ = ["continue_as_new"]


def continue_as_new(*args: Any, **kwargs: Any) -> Idem[NoReturn]:
    """End this incarnation of the request and start the next under the same request id, with
    the workflow called on ``args`` and ``kwargs`` (its new input) and no memos carried over.

    Its value never reaches the workflow: nothing after it runs in this incarnation. Under
    ``run`` the caller's call returns the final incarnation's result; under workers the next
    incarnation is a continuation on the queue. The input must be JSON (or a registered codec's):
    one that is not raises :class:`~idemflow.errors.InvalidValueError` here, before anything is
    written. Where it cannot mean anything (beside other steps in ``all_of`` or ``any_of``, in
    ``on_abort``, outside a ``@workflow``) it raises :class:`~idemflow.errors.ContinueAsNewError`.

    >>> continue_as_new({"period": 2}).node.input  # as the run record stores it
    {'args': [{'period': 2}], 'kwargs': {}}
    """
    given = {"args": list(args), "kwargs": kwargs}
    stored = decode(encode(given, "input of continue_as_new", envelope=2))
    assert isinstance(stored, dict)
    positional, named = stored["args"], stored["kwargs"]
    assert isinstance(positional, list) and isinstance(named, dict)
    return Idem(ContinueAsNew(tuple(positional), named, stored))
