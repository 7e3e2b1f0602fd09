"""``@idempotent``: a handler (HTTP route, queue consumer) that runs exactly once per key.

The handler is a workflow: a generator that yields steps, an ``async def``
that awaits them, or a function returning an ``Idem``. Each call runs it as
one request whose id is ``key(*args, **kwargs)``; a duplicate returns the
first call's result. An ``async def`` handler becomes an ``async def``
(awaiting :func:`~idemflow.arunner.arun`, so the event loop never blocks);
any other becomes a plain function (calling :func:`~idemflow.run`).

The wrapper keeps the handler's name, docstring and signature, but not its
``__wrapped__`` link: frameworks such as FastAPI follow that link to decide
how to call a route and encode its answer, and would take a generator
workflow for a streaming response.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any, ParamSpec

from idemflow.arunner import arun
from idemflow.errors import InvalidInputError
from idemflow.policy import RetryPolicy
from idemflow.runner import Workflow, run
from idemflow.stores.base import AsyncStore, Store

P = ParamSpec("P")

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


def _derived_name(handler: Callable[..., Any]) -> str:
    name = _NAME_CHARS.sub("_", f"{handler.__module__}.{handler.__qualname__}")
    return name[:100] if name[0].isalpha() or name[0] == "_" else ("_" + name)[:100]


def idempotent(
    store: Store | AsyncStore,
    *,
    key: Callable[..., str],
    name: str | None = None,
    policy: RetryPolicy | None = None,
) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
    """Make a handler exactly-once per request id ``key(*args, **kwargs)``.

    The handler is a ``@workflow``-style generator, an ``async def`` awaiting
    steps, a function returning an ``Idem`` or a :class:`Workflow`;
    duplicates return the first call's result.

    >>> from idemflow import MemoryStore, atomic
    >>> store = MemoryStore()
    >>> @idempotent(store, key=lambda order: order["id"])
    ... def place(order):
    ...     yield atomic("orders", order["id"], lambda tx: tx.increment("placed"))
    ...     return "placed"
    >>> place({"id": "o-1"}), place({"id": "o-1"})
    ('placed', 'placed')
    """

    def decorate(handler: Callable[P, Any]) -> Callable[P, Any]:
        if isinstance(handler, Workflow):
            flow: Workflow[P, Any] = handler
            function = handler.function
        elif callable(handler):
            flow = Workflow(name or _derived_name(handler), handler)
            function = handler
        else:
            raise InvalidInputError(f"@idempotent needs a callable, not {type(handler).__name__}")

        if inspect.iscoroutinefunction(function):

            async def ahandle(*args: P.args, **kwargs: P.kwargs) -> Any:
                request_id = key(*args, **kwargs)
                return await arun(flow(*args, **kwargs), request_id=request_id, store=store, policy=policy)

            return _named_like(ahandle, handler, function)

        if not isinstance(store, Store):
            raise InvalidInputError(
                "@idempotent on a plain function or generator needs a blocking store; "
                "give an async store to an `async def` handler"
            )
        blocking: Store = store

        def handle(*args: P.args, **kwargs: P.kwargs) -> Any:
            return run(flow(*args, **kwargs), request_id=key(*args, **kwargs), store=blocking, policy=policy)

        return _named_like(handle, handler, function)

    return decorate


def _named_like(
    wrapper: Callable[P, Any], handler: Callable[P, Any], function: Callable[..., Any]
) -> Callable[P, Any]:
    """Name, docstring and signature of ``handler`` on ``wrapper``, without ``__wrapped__``.

    The signature's annotations are evaluated in the handler's own module (a
    framework would look them up in this one, where a user's ``Order`` model
    does not exist); a generator's return annotation is dropped: the wrapper
    returns the workflow's result, not a generator.
    """
    functools.update_wrapper(wrapper, handler)
    try:
        signature = inspect.signature(handler, eval_str=True)
    except (NameError, TypeError, SyntaxError):  # names only imported under TYPE_CHECKING
        signature = inspect.signature(handler)
    if inspect.isgeneratorfunction(function):
        signature = signature.replace(return_annotation=inspect.Signature.empty)
    wrapper.__signature__ = signature  # type: ignore[attr-defined]
    del wrapper.__wrapped__  # type: ignore[attr-defined]
    return wrapper
