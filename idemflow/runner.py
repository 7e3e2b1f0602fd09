"""What users call: ``@workflow``, ``run``, ``run_result`` and ``@idempotent``.

These are thin: they name and fingerprint the request, then hand the
description to one :class:`~idemflow.engine.Execution`, which does the work.

>>> from idemflow import MemoryStore, atomic, run, workflow
>>> def deposit(amount):
...     def body(tx):
...         tx.increment("balance", amount)
...         return amount
...     return body
>>> @workflow("deposit-twice")
... def twice(req):
...     a = yield atomic("accounts", req["who"], deposit(req["amount"]))
...     b = yield atomic("accounts", req["who"], deposit(req["amount"]))
...     return a + b
>>> store = MemoryStore()
>>> run(twice({"who": "bob", "amount": 5}), request_id="req-1", store=store)
10
>>> run(twice({"who": "bob", "amount": 5}), request_id="req-1", store=store)  # a duplicate
10
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Generator
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, overload

from returns.result import Failure, Result, Success

from idemflow import records
from idemflow.engine import DEFAULT_POLICY, AbortWorkflow, Execution, Finished, RetryPolicy
from idemflow.errors import CompensationFailed, IdemflowError, InvalidInputError, WorkflowAborted
from idemflow.keys import check_request_id, check_workflow_name, compensation_tag
from idemflow.monad import Bind, Call, Idem
from idemflow.serialization import fingerprint
from idemflow.stores.base import Store
from idemflow.tx import StepAborted

P = ParamSpec("P")
R = TypeVar("R")

ANONYMOUS = "idem"
"""Workflow name of a run whose description is not a ``@workflow`` call."""


class Workflow(Generic[P, R]):
    """A named workflow: calling it with an input gives the ``Idem`` to run."""

    # No __slots__: functools.update_wrapper-style attributes (__doc__, __wrapped__) need a __dict__.

    def __init__(self, name: str, function: Callable[P, Any]) -> None:
        self.name = check_workflow_name(name)
        self.function = function
        self.__wrapped__ = function
        self.__doc__ = function.__doc__

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Idem[R]:
        return Idem(Call(self.name, self.function, args, kwargs))

    def __repr__(self) -> str:
        return f"<workflow {self.name!r}>"


class WorkflowDecorator(Protocol):
    """What ``workflow(name)`` returns: typed for generators and Idem-returning functions."""

    @overload
    def __call__(self, function: Callable[P, Generator[Any, Any, R]]) -> Workflow[P, R]: ...
    @overload
    def __call__(self, function: Callable[P, Idem[R]]) -> Workflow[P, R]: ...


def workflow(name: str) -> WorkflowDecorator:
    """Name a generator function (do-notation) or an ``Idem``-returning function.

    Each yielded ``Idem`` is one or more numbered steps; ``return`` gives the
    result. Loops and branches are fine as long as they depend only on the
    input and on step results.
    """
    check_workflow_name(name)

    def decorate(function: Callable[P, Any]) -> Workflow[P, Any]:
        return Workflow(name, function)

    return decorate


def describe(m: object) -> tuple[str, str]:
    """The workflow name and input fingerprint of a run (validated before any write)."""
    if not isinstance(m, Idem):
        raise InvalidInputError(f"run() takes an Idem (a workflow call or a step), not {type(m).__name__}")
    node = m.node
    while type(node) is Bind:
        node = node.source
    if type(node) is Call:
        where = f"input of workflow {node.name!r}"
        # {"args": [arg]} and {"kwargs": {name: arg}} wrap each argument two levels down.
        return node.name, fingerprint({"args": list(node.args), "kwargs": node.kwargs}, where, envelope=2)
    return ANONYMOUS, fingerprint(None)


def execute(
    m: Idem[Any],
    *,
    request_id: str,
    store: Store,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    prepare: Callable[[Execution], None] | None = None,
) -> records.RunRecord:
    """Run ``m`` to its end (completed or aborted and compensated) and return the record."""
    check_request_id(request_id)
    name, fp = describe(m)
    execution = Execution(store, name, request_id, fp, policy or DEFAULT_POLICY, clock)
    if prepare is not None:
        prepare(execution)
    try:
        try:
            value = execution.evaluate(m.node)
        except AbortWorkflow as abort:
            compensate(execution)
            execution.finish(records.RunStatus.ABORTED, reason=abort.reason)
            return records.RunRecord(fp, records.RunStatus.ABORTED, reason=abort.reason)
        return records.RunRecord(
            fp,
            records.RunStatus.COMPLETED,
            result=execution.finish(records.RunStatus.COMPLETED, result=value),
        )
    except Finished as finished:
        return finished.record


def compensate(execution: Execution) -> None:
    """Undo the completed steps in reverse order, each an idempotent step of its own."""
    for done in reversed(execution.completed):
        node = done.node
        assert node.compensate is not None
        undo, result = node.compensate, done.result

        def body(tx: Any, undo: Any = undo, result: Any = result) -> Any:
            return undo(tx, result)

        try:
            execution.run_step(
                node.table,
                node.partition,
                compensation_tag(done.step),
                "compensate " + node.name,
                body,
                done.step,
                abortable=False,
            )
        except IdemflowError:
            raise
        except (Exception, StepAborted) as exc:
            cause = f"aborted: {exc.reason!r}" if isinstance(exc, StepAborted) else repr(exc)
            raise CompensationFailed(
                execution.workflow, execution.request_id, done.step, node.name, cause
            ) from exc


def run(
    m: Idem[R],
    *,
    request_id: str,
    store: Store,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
) -> R:
    """Run ``m`` under ``request_id`` to completion in the caller; exactly once.

    Duplicates, retries after crashes and racing callers all return the same
    result. Raises :class:`~idemflow.errors.WorkflowAborted` if it aborted.
    """
    record = execute(m, request_id=request_id, store=store, policy=policy, clock=clock)
    if record.status is records.RunStatus.ABORTED:
        raise WorkflowAborted(record.reason, describe(m)[0], request_id)
    result: R = record.result  # type: ignore[assignment]
    return result


def run_result(
    m: Idem[R],
    *,
    request_id: str,
    store: Store,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
) -> Result[R, WorkflowAborted]:
    """Like :func:`run`, with an abort as ``Failure(WorkflowAborted)`` instead of raised.

    >>> from idemflow import MemoryStore, pure
    >>> run_result(pure(1), request_id="r", store=MemoryStore())
    <Success: 1>
    """
    try:
        return Success(run(m, request_id=request_id, store=store, policy=policy, clock=clock))
    except WorkflowAborted as aborted:
        return Failure(aborted)


_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


def _derived_name(handler: Callable[..., Any]) -> str:
    name = _NAME_CHARS.sub("_", f"{handler.__module__}.{handler.__qualname__}")
    return name[:100] if name[0].isalpha() or name[0] == "_" else ("_" + name)[:100]


def idempotent(
    store: Store,
    *,
    key: Callable[..., str],
    name: str | None = None,
    policy: RetryPolicy | None = None,
) -> Callable[[Callable[P, Any]], Callable[P, Any]]:
    """Make a handler exactly-once per request id ``key(*args, **kwargs)``.

    The handler is a ``@workflow``-style generator, a function returning an
    ``Idem`` or a :class:`Workflow`; duplicates return the first call's result.

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
        else:
            flow = Workflow(name or _derived_name(handler), handler)
        if not isinstance(handler, Workflow) and not callable(handler):
            raise InvalidInputError(f"@idempotent needs a callable, not {type(handler).__name__}")

        @functools.wraps(handler)
        def handle(*args: P.args, **kwargs: P.kwargs) -> Any:
            return run(flow(*args, **kwargs), request_id=key(*args, **kwargs), store=store, policy=policy)

        return handle

    return decorate


def run_status(store: Store, workflow: str, request_id: str) -> records.RunRecord | None:
    """The run record of a request, or None if no step of it ever committed."""
    from idemflow.keys import RUNS_TABLE, run_key
    from idemflow.stores.base import RowRef

    row = store.read(RowRef(RUNS_TABLE, check_request_id(request_id), run_key(check_workflow_name(workflow))))
    return None if row is None else records.RunRecord.from_json(row.value)
