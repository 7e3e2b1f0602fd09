"""``@idempotent``: a handler (HTTP route, queue consumer) that runs exactly once per key.

The handler is a workflow: a generator that yields steps, an ``async def``
that awaits them, or a function returning an ``Idem``. Each call runs it as
one request whose id is ``key(*args, **kwargs)``; a duplicate returns the
first call's result. An ``async def`` handler becomes an ``async def``
(awaiting :func:`~idemflow.running.runner_asyncio.arun`, so the event loop never blocks);
any other becomes a plain function (calling :func:`~idemflow.run`).

The wrapper keeps the handler's name, docstring and signature, but not its
``__wrapped__`` link: frameworks such as FastAPI follow that link to decide
how to call a route and encode its answer, and would take a generator
workflow for a streaming response.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import logging
import re
import typing
import uuid
from collections.abc import Callable, Generator
from typing import Any, ParamSpec

from idemflow.core.plan import Plan
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy
from idemflow.engine.deterministic import effect
from idemflow.engine.monad import Idem
from idemflow.errors import InvalidInputError
from idemflow.records import RunRecord
from idemflow.running.answer_cache import AnswerCache
from idemflow.running.first_read import finished_record
from idemflow.running.pickers import Pick, picker
from idemflow.running.request_spec import Request, describe_request
from idemflow.running.runner import execute, result_of
from idemflow.running.runner_asyncio import aexecute
from idemflow.running.workflows import Workflow
from idemflow.stores.base import AsyncStore, Store

P = ParamSpec("P")

log = logging.getLogger("idemflow.handlers")  # its documented name, not its module's

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


class Default(enum.Enum):
    """The marker of an argument left out (None means "none" for ``cache``)."""

    TOKEN = enum.auto()


DEFAULT = Default.TOKEN


NAME_LIMIT = 100
"""Longest workflow name (:func:`idemflow.keys.check_workflow_name`)."""


def _derived_name(handler: Callable[..., Any]) -> str:
    """``module.qualname`` as a workflow name; one too long keeps a hash of the whole.

    Two handlers whose names share their first 100 characters must not share
    records: cutting the name alone made one handler answer with the other's
    cached result.
    """
    full = f"{handler.__module__}.{handler.__qualname__}"
    name = _NAME_CHARS.sub("_", full)
    if not (name[0].isalpha() or name[0] == "_"):
        name = "_" + name
    if len(name) <= NAME_LIMIT:
        return name
    tag = hashlib.sha256(full.encode()).hexdigest()[:16]
    return f"{name[: NAME_LIMIT - len(tag) - 1]}-{tag}"


def _request_id(key: object) -> str:
    """A handler's key as a request id: a ``str``, an ``int`` in decimal (not a ``bool``), a ``UUID``."""
    if (isinstance(key, int) and not isinstance(key, bool)) or isinstance(key, uuid.UUID):
        return str(key)
    if not isinstance(key, str):
        kind = type(key).__name__
        raise InvalidInputError(f"an @idempotent key must be a str, an int or a UUID, not {kind}")
    return key


def idempotent(
    store: Store | AsyncStore,
    *,
    key: Pick,
    name: str | None = None,
    policy: RetryPolicy | None = None,
    fingerprint: Pick | None = None,
    key_required: bool = True,
    on_replay: Callable[[Any], Any] | None = None,
    cache: AnswerCache | Default | None = DEFAULT,
) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
    """Make a handler exactly-once per request id ``key(*args, **kwargs)``.

    The handler is a ``@workflow``-style generator, an ``async def`` awaiting
    steps, a function returning an ``Idem`` or a :class:`Workflow`;
    duplicates return the first call's result.

    ``key`` is a function of the handler's arguments giving a ``str``, an
    ``int`` or a ``UUID``, or a JMESPath expression over the arguments by name
    (``key="order.id"``). A call whose key is None (or missing from the path)
    is refused with :class:`~idemflow.errors.InvalidInputError`; with
    ``key_required=False`` it runs once, without deduplication, under a
    request id of its own, and a warning is logged. ``fingerprint`` (the same
    kinds) is the part of the input duplicates are compared on: a duplicate
    that differs elsewhere (a timestamp, a trace id) gets the first answer
    instead of :class:`~idemflow.errors.IdempotencyKeyReuseError`.
    ``on_replay(result)`` is called when the answer is an earlier call's (no
    step of this call committed), and what it returns is answered instead:
    Powertools' ``response_hook``, e.g. to mark a replayed HTTP answer.
    ``cache`` keeps finished answers in this process, so a duplicate here
    costs no store call: an :class:`~idemflow.AnswerCache` of
    its own per handler by default (256 answers, 5 minutes), None for none.

    >>> from idemflow import atomic
    >>> from idemflow.stores import MemoryStore
    >>> store = MemoryStore()
    >>> @idempotent(store, key=lambda order: order["id"])
    ... def place(order):
    ...     yield atomic("orders", order["id"], lambda tx: tx.increment("placed"))
    ...     return "placed"
    >>> place({"id": "o-1"}), place({"id": "o-1"})
    ('placed', 'placed')
    """

    def decorate(handler: Callable[P, Any]) -> Callable[P, Any]:
        kept = AnswerCache() if isinstance(cache, Default) else cache
        return decorated(store, handler, key, name, policy, fingerprint, key_required, on_replay, kept)

    return decorate


def decorated(
    store: Store | AsyncStore,
    handler: Callable[P, Any],
    key: Pick,
    name: str | None,
    policy: RetryPolicy | None,
    fingerprint: Pick | None,
    key_required: bool,
    on_replay: Callable[[Any], Any] | None,
    cache: AnswerCache | None,
    *,
    lease_until: float | None = None,
) -> Callable[P, Any]:
    """``@idempotent(...)(handler)``; ``lease_until`` (epoch seconds) caps the effect leases its
    calls take: the end of the Lambda invocation that runs them (:mod:`idemflow.aws_lambda`)."""
    if isinstance(handler, Workflow):
        function = handler.function
    elif callable(handler):
        function = handler
        _refuse_a_plain_function(handler)
    else:
        raise InvalidInputError(f"@idempotent needs a callable, not {type(handler).__name__}")
    basis = None if fingerprint is None else picker(fingerprint, function, "fingerprint")
    flow: Workflow[P, Any]
    if not isinstance(handler, Workflow):
        flow = Workflow(name or _derived_name(handler), handler, basis=basis)
    elif basis is None:
        flow = handler
    else:
        flow = Workflow(
            handler.name, function, version=handler.version, on_failure=handler.on_failure, basis=basis
        )
    keyed = picker(key, function, "key")
    return _handler(
        store, flow, handler, function, keyed, key_required, policy, on_replay, cache, lease_until
    )


def idempotent_function(
    store: Store | AsyncStore,
    *,
    key: Pick,
    name: str | None = None,
    policy: RetryPolicy | None = None,
    fingerprint: Pick | None = None,
    key_required: bool = True,
    on_replay: Callable[[Any], Any] | None = None,
    lease: float | None = None,
    cache: AnswerCache | Default | None = DEFAULT,
) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
    """Make a plain function (``def`` or ``async def``) exactly-once per key: one memoized call.

    The call is one step of a workflow of its own (an :func:`~idemflow.effect`):
    the first call's result (JSON or a codec type) is stored, and every
    duplicate gets it without calling the function again. Racing duplicates
    (both before either stored its result) may each call it, as with any
    effect, unless ``lease=seconds`` is given: then one calls and the others
    wait for its answer, and a caller that crashed is replaced once its lease
    ends (``effect(fn, lease=)``). ``key``, ``fingerprint``, ``key_required``,
    ``on_replay``, ``name``, ``policy`` and ``cache`` are :func:`idempotent`'s.
    This is Powertools' ``@idempotent_function``.

    >>> from idemflow.stores import MemoryStore
    >>> calls = []
    >>> @idempotent_function(MemoryStore(), key="order.id")
    ... def charge(order):
    ...     calls.append(order["id"])
    ...     return {"charged": order["amount"]}
    >>> charge({"id": "o-1", "amount": 5}), charge({"id": "o-1", "amount": 5}), calls
    ({'charged': 5}, {'charged': 5}, ['o-1'])
    """

    def decorate(function: Callable[P, Any]) -> Callable[P, Any]:
        if not callable(function) or isinstance(function, Workflow):
            raise InvalidInputError(f"@idempotent_function needs a plain function, not {function!r}")
        if inspect.isgeneratorfunction(function):
            raise InvalidInputError(
                "@idempotent_function needs a plain function; a generator is a workflow: @idempotent"
            )
        basis = None if fingerprint is None else picker(fingerprint, function, "fingerprint")
        once = _one_call(function, lease)
        flow: Workflow[P, Any] = Workflow(name or _derived_name(function), once, basis=basis)
        keyed = picker(key, function, "key")
        kept = AnswerCache() if isinstance(cache, Default) else cache
        return _handler(store, flow, function, function, keyed, key_required, policy, on_replay, kept)

    return decorate


def _one_call(function: Callable[..., Any], lease: float | None) -> Callable[..., Any]:
    """A workflow whose one step calls ``function`` (awaited, if it is a coroutine function)."""
    label = f"call {getattr(function, '__qualname__', type(function).__qualname__)}"
    once: Callable[..., Any]
    if inspect.iscoroutinefunction(function):

        async def awaited(*args: Any, **kwargs: Any) -> Any:
            async def call(_key: str) -> Any:
                return await function(*args, **kwargs)

            return await effect(call, name=label, lease=lease)

        once = awaited
    else:

        def called(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            return (yield effect(lambda _key: function(*args, **kwargs), name=label, lease=lease))

        once = called
    once.__signature__ = inspect.signature(function)  # type: ignore[union-attr]
    return once


def _refuse_a_plain_function(handler: Callable[..., Any]) -> None:
    """A ``def`` annotated to return something other than an ``Idem`` is a plain function: its
    body would run on every duplicate before anything could stop it. Point to the decorator for it."""
    if inspect.isgeneratorfunction(handler) or inspect.iscoroutinefunction(handler):
        return
    try:
        returned = inspect.signature(handler, eval_str=True).return_annotation
    except (NameError, TypeError, SyntaxError, ValueError):
        return
    if returned is inspect.Signature.empty or returned is Any:  # `-> Any` says no more than nothing
        return
    origin = typing.get_origin(returned) or returned
    if isinstance(origin, type) and issubclass(origin, (Idem, Workflow)):
        return
    raise InvalidInputError(
        f"@idempotent: {handler.__qualname__} returns {returned!r}, not an Idem; "
        "make a plain function exactly-once with @idempotent_function"
    )


def _handler(
    store: Store | AsyncStore,
    flow: Workflow[P, Any],
    handler: Callable[P, Any],
    function: Callable[..., Any],
    keyed: Callable[..., Any],
    key_required: bool,
    policy: RetryPolicy | None,
    on_replay: Callable[[Any], Any] | None,
    cache: AnswerCache | None,
    lease_until: float | None = None,
) -> Callable[P, Any]:
    """The wrapper: each call runs ``flow`` under the request id its key gives (or answers from
    ``cache``, the finished answers this process kept)."""
    label = flow.name
    retention = (policy or DEFAULT_POLICY).retention

    def kept(rid: str, request: Request, replayed: list[bool]) -> RunRecord | None:
        record = None if cache is None else cache.get(rid, request.matches)
        if record is not None:
            replayed.append(True)
        return record

    def replay(rid: str, record: RunRecord | None, replayed: list[bool]) -> RunRecord | None:
        """A finished record read first from a store whose reads are local (a duplicate's
        answer, :func:`~idemflow.running.runner.finished_record`): replayed, and kept."""
        if record is None:
            return None
        replayed.append(True)
        return keep(rid, record)

    def keep(rid: str, record: RunRecord) -> RunRecord:
        if cache is not None:
            cache.put(rid, record, retention)
        return record

    def plan() -> tuple[Plan, list[bool]]:
        replayed: list[bool] = []
        told = Plan(
            version=flow.version, observe_replay=lambda: replayed.append(True), lease_until=lease_until
        )
        return told, replayed

    def answer(m: Idem[Any], record: RunRecord, rid: str, replayed: list[bool]) -> Any:
        result = result_of(record, m, rid)
        return on_replay(result) if replayed and on_replay is not None else result

    def request_id(*args: Any, **kwargs: Any) -> str:
        found = keyed(*args, **kwargs)
        if found is None and not key_required:
            log.warning(
                "no idempotency key: running without deduplication",
                extra={"workflow": label, "request_id": None},
            )
            return f"nokey-{uuid.uuid4().hex}"
        if found is None:
            raise InvalidInputError(f"@idempotent {label!r}: the call has no key (key_required=True)")
        return _request_id(found)

    if inspect.iscoroutinefunction(function):

        async def ahandle(*args: P.args, **kwargs: P.kwargs) -> Any:
            rid = request_id(*args, **kwargs)
            m, (told, replayed) = flow(*args, **kwargs), plan()
            request = describe_request(m)
            record = kept(rid, request, replayed) or keep(
                rid, await aexecute(m, request_id=rid, store=store, policy=policy, plan=told, request=request)
            )
            return answer(m, record, rid, replayed)

        return _named_like(ahandle, handler, function)

    if not isinstance(store, Store):
        raise InvalidInputError(
            f"@idempotent {label!r}: a plain function or generator needs a blocking store; "
            "give an async store to an `async def` handler"
        )
    blocking: Store = store

    def handle(*args: P.args, **kwargs: P.kwargs) -> Any:
        rid = request_id(*args, **kwargs)
        m, (told, replayed) = flow(*args, **kwargs), plan()
        request = describe_request(m)
        record = kept(rid, request, replayed) or replay(
            rid, finished_record(blocking, request, rid), replayed
        )
        record = record or keep(
            rid, execute(m, request_id=rid, store=blocking, policy=policy, plan=told, request=request)
        )
        return answer(m, record, rid, replayed)

    return _named_like(handle, handler, function)


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
