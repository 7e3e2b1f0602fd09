"""What users call: ``@workflow``, ``run``, ``run_result`` and ``@idempotent``.

These are thin: they name and fingerprint the request, then hand the
description to one :class:`~idemflow.engine.execution.Execution`, which does the work.

>>> from idemflow import atomic, run, workflow
>>> from idemflow.stores import MemoryStore
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

import contextlib
import inspect
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, ParamSpec, Protocol, TypeVar, overload

from returns.result import Failure, Result, Success

from idemflow import records
from idemflow.core.limit_spec import Concurrency, LimitGroup, Rate, workflow_limits
from idemflow.core.policy import DEFAULT_POLICY, RetryPolicy, resent
from idemflow.core.requests import Read, Steps
from idemflow.core.step_retry import StepRetry
from idemflow.engine.drive import drive
from idemflow.engine.execution import Execution, OtherVersion, Plan
from idemflow.engine.monad import AsWritten, Basis, Bind, Call, Idem, check_retry
from idemflow.engine.tx import Reader
from idemflow.errors import (
    IdempotencyKeyReuseError,
    InvalidInputError,
    LimitReachedError,
    VersionNotHeldError,
    WorkflowAborted,
)
from idemflow.keys import check_duration, check_request_id, check_workflow_name
from idemflow.limits.gate import gated
from idemflow.serialization import JSON, decode, digest, encode, encode_canonical, fingerprint
from idemflow.stores import expiry
from idemflow.stores.base import AsyncStore, RowRef, Store

P = ParamSpec("P")
R = TypeVar("R")

ANONYMOUS = "idem"
"""Workflow name of a run whose description is not a ``@workflow`` call."""

OnFailure = Literal["fail", "compensate"]


class Workflow(Generic[P, R]):
    """A named, versioned workflow: calling it with an input gives the ``Idem`` to run."""

    # No __slots__: functools.update_wrapper-style attributes (__doc__, __wrapped__) need a __dict__.

    def __init__(
        self,
        name: str,
        function: Callable[P, Any],
        *,
        version: int = 1,
        on_failure: OnFailure = "fail",
        basis: Callable[..., Any] | None = None,
        retry: StepRetry | None = None,
        timeout: float | None = None,
        on_abort: Callable[..., Any] | None = None,
        concurrency: int | Concurrency | None = None,
        rate: Rate | None = None,
        groups: Iterable[LimitGroup] | None = None,
    ) -> None:
        self.name = check_workflow_name(name)
        self.limits = workflow_limits(self.name, concurrency, rate, groups)
        """The limits every request takes before it runs (docs/flow-control.md)."""
        if on_abort is not None and not callable(on_abort):
            raise InvalidInputError(f"on_abort takes a function, not {type(on_abort).__name__}")
        self.on_abort = on_abort
        """Called with the abort reason and the input once the request is undone: its steps run."""
        self.retry = check_retry(retry)
        """The retry policy of this workflow's steps that name none of their own."""
        self.timeout = check_timeout(timeout)
        """Seconds a submitted request may take before a worker ends it (None: no limit)."""
        self.version = check_version(version)
        if on_failure not in ("fail", "compensate"):
            raise InvalidInputError(f"on_failure must be 'fail' or 'compensate', not {on_failure!r}")
        self.on_failure: OnFailure = on_failure
        self.function = function
        self.basis = basis
        """Called with the input: the part duplicates are compared on (default: all of it)."""
        self.__wrapped__ = function
        self.__doc__ = function.__doc__
        try:
            self._signature: inspect.Signature | None = inspect.signature(function)
        except (TypeError, ValueError):  # a callable without one: its calls are taken as written
            self._signature = None
        self._plain = _plain_arity(self._signature)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Idem[R]:
        """The workflow applied to its input, bound to its signature: ``f(1)`` and ``f(x=1)`` are
        one input (one fingerprint). Arguments the signature does not take raise ``TypeError``
        here, before anything is written."""
        compared: Basis | AsWritten | None = None
        if self.basis is not None:
            compared = Basis(self.basis(*args, **kwargs))
        # Taken as written: every parameter given by position (bound already), or no signature.
        if self._signature is None or (not kwargs and len(args) == self._plain):
            return Idem(
                Call(
                    self.name,
                    self.function,
                    args,
                    kwargs,
                    self.version,
                    compared,
                    self.retry,
                    self.timeout,
                    self.on_abort,
                    self.limits,
                )
            )
        bound = self._signature.bind(*args, **kwargs)
        if compared is None and (bound.args, bound.kwargs) != (args, kwargs):
            compared = AsWritten(args, kwargs)
        return Idem(
            Call(
                self.name,
                self.function,
                bound.args,
                bound.kwargs,
                self.version,
                compared,
                self.retry,
                self.timeout,
                self.on_abort,
                self.limits,
            )
        )

    def __repr__(self) -> str:
        return f"<workflow {self.name!r} v{self.version}>"


def _plain_arity(signature: inspect.Signature | None) -> int:
    """How many arguments a call gives by position when it is already bound as it stands: the
    parameter count of a signature of positional parameters without defaults, else -1."""
    if signature is None:
        return -1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    plain = all(
        p.kind in kinds and p.default is inspect.Parameter.empty for p in signature.parameters.values()
    )
    return len(signature.parameters) if plain else -1


def check_timeout(timeout: object) -> float | None:
    """A workflow's ``timeout=``: positive finite seconds, or None."""
    return None if timeout is None else check_duration(timeout, "workflow timeout")


def check_version(version: object) -> int:
    """A workflow version: a positive int."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidInputError(f"a workflow version is a positive int, not {version!r}")
    return version


class WorkflowDecorator(Protocol):
    """What ``workflow(name)`` returns: typed for generators and Idem-returning functions."""

    @overload
    def __call__(self, function: Callable[P, Generator[Any, Any, R]]) -> Workflow[P, R]: ...
    @overload
    def __call__(self, function: Callable[P, Idem[R]]) -> Workflow[P, R]: ...


def workflow(
    name: str,
    *,
    version: int = 1,
    on_failure: OnFailure = "fail",
    retry: StepRetry | None = None,
    timeout: float | None = None,
    on_abort: Callable[..., Any] | None = None,
    concurrency: int | Concurrency | None = None,
    rate: Rate | None = None,
    groups: Iterable[LimitGroup] | None = None,
) -> WorkflowDecorator:
    """Name a generator function (do-notation) or an ``Idem``-returning function.

    Each yielded ``Idem`` is one or more numbered steps; ``return`` gives the
    result. Loops and branches are fine as long as they depend only on the
    input and on step results.

    ``version`` (default 1) is recorded with every request: a request always
    finishes on the version it started with, so changing a workflow's steps
    while requests are in flight means adding a new version beside the old
    one (see docs/deploying.md). ``on_failure`` says what a worker does once
    a step after a checkpoint has failed its retry budget: ``"fail"`` (the
    default) ends the request ``failed`` with its steps kept, for an operator
    to retry or abort; ``"compensate"`` runs the compensations of the
    completed steps once and ends it ``aborted``. ``retry`` (a
    :class:`~idemflow.StepRetry`) is how its steps and outside
    calls that raise are tried again, unless a call names its own: in place
    under ``run``, as delayed continuations under workers (whose default
    retries for a day; see :mod:`idemflow.core.step_retry`). ``timeout`` is how
    many seconds a submitted request may take: past it a worker ends it as
    ``on_failure`` says (see :func:`~idemflow.async_worklist._submission`).
    ``on_abort(reason, *input)`` lets the workflow see that it was undone: it
    is called, after the compensations, with the abort's reason and the
    workflow's input, and the steps it yields (or the ``Idem`` it returns)
    run once, exactly as the workflow's own (an e-mail saying the booking
    was cancelled).

    ``concurrency`` (slots, or a :class:`~idemflow.Concurrency` with its lease) and ``rate`` (a
    :class:`~idemflow.Rate`) limit this workflow's requests across every process sharing the
    store, and ``groups`` names :class:`~idemflow.LimitGroup` limits shared with other workflows
    (docs/flow-control.md): under workers a request over a limit waits as a delayed
    continuation; ``run`` raises :class:`~idemflow.errors.LimitReachedError` instead.
    """
    check_workflow_name(name)
    if groups is not None and not isinstance(groups, LimitGroup) and isinstance(groups, Iterable):
        groups = tuple(groups)  # read once: a generator would be empty for the second reader
    workflow_limits(name, concurrency, rate, groups)
    check_version(version)
    check_retry(retry)
    check_timeout(timeout)
    if on_abort is not None and not callable(on_abort):
        raise InvalidInputError(f"on_abort takes a function, not {type(on_abort).__name__}")

    def decorate(function: Callable[P, Any]) -> Workflow[P, Any]:
        return Workflow(
            name,
            function,
            version=version,
            on_failure=on_failure,
            retry=retry,
            timeout=timeout,
            on_abort=on_abort,
            concurrency=concurrency,
            rate=rate,
            groups=groups,
        )

    return decorate


@dataclass(frozen=True, slots=True)
class Request:
    """What a run is, checked before any write: workflow name, version, input and its fingerprint."""

    workflow: str
    version: int
    fingerprint: str
    call: Call | None
    input_text: str | None = "null"
    """Canonical JSON of ``{"args": [...], "kwargs": {...}}``, taken before the workflow runs;
    None where only a part of the input is compared (``fingerprint=``): then the rest need not be
    JSON (a Lambda context) unless the input is stored, by ``submit``."""
    aliases: tuple[str, ...] = ()
    """Other fingerprints of this same input: the call as written, which 0.1.0 fingerprinted
    (a duplicate of a request it started still matches)."""

    def matches(self, stored: str) -> bool:
        """Is ``stored`` (a run record's fingerprint) this request's input?"""
        return stored == self.fingerprint or stored in self.aliases

    def input(self) -> JSON:
        """The input as it was submitted: a copy the workflow cannot change under us."""
        text = self.input_text
        if text is None:
            assert self.call is not None
            given = {"args": list(self.call.args), "kwargs": self.call.kwargs}
            text = encode(given, f"input of workflow {self.workflow!r}", envelope=2)
        return decode(text)


def describe_request(m: object) -> Request:
    """Name, version and fingerprint of a run (validated before any write)."""
    if not isinstance(m, Idem):
        raise InvalidInputError(f"run() takes an Idem (a workflow call or a step), not {type(m).__name__}")
    node = m.node
    while type(node) is Bind:
        node = node.source
    if type(node) is Call:
        # {"args": [arg]} and {"kwargs": {name: arg}} wrap each argument two levels down.
        where = f"input of workflow {node.name!r}"
        if isinstance(node.compared, Basis):  # compared on a part of the input only
            compared = fingerprint(node.compared.value, f"fingerprint of workflow {node.name!r}")
            return Request(node.name, node.version, compared, node, None)
        given = {"args": list(node.args), "kwargs": node.kwargs}
        text, canonical = encode_canonical(given, where, envelope=2)
        aliases: tuple[str, ...] = ()
        if canonical is not text:  # 0.1.0 fingerprinted numbers as spelled (10.0 was not 10)
            aliases = (digest(text),)
        if isinstance(node.compared, AsWritten):
            args, kwargs = node.compared
            aliases += (digest(encode({"args": list(args), "kwargs": kwargs}, where, envelope=2)),)
        return Request(node.name, node.version, digest(canonical), node, text, aliases)
    return Request(ANONYMOUS, 1, fingerprint(None), None)


def describe(m: object) -> tuple[str, str]:
    """The workflow name and input fingerprint of a run (validated before any write)."""
    request = describe_request(m)
    return request.workflow, request.fingerprint


def execute(
    m: Idem[Any],
    *,
    request_id: str,
    store: Store,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    plan: Plan | None = None,
    versions: Iterable[Workflow[Any, Any]] = (),
    request: Request | None = None,
) -> records.RunRecord:
    """Run ``m`` to its end (completed, or aborted and compensated) and return the record.

    A request that started on another version of the workflow finishes on
    that version if ``versions`` holds it, else :class:`VersionNotHeldError`.
    ``request`` is ``describe_request(m)`` when the caller has it already.
    """
    check_request_id(request_id)
    request = request or describe_request(m)
    steps = execution_steps(m, request, request_id, store, policy, clock, plan, versions, reader=store)
    if plan is None and request.call is not None and request.call.limits:  # run(): under its limits
        steps = under_limits(steps, request, request_id, policy, clock)
    return drive(steps, store)


def under_limits(
    steps: Steps[records.RunRecord],
    request: Request,
    request_id: str,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
) -> Steps[records.RunRecord]:
    """``steps`` once the workflow's limits are held. A full limit raises
    :class:`~idemflow.errors.LimitReachedError`, except to a duplicate of a finished request,
    which gets its answer: the record is read only then, so a request that runs pays nothing."""
    limits = () if request.call is None else request.call.limits
    if not limits:
        return (yield from steps)
    try:
        return (yield from gated(steps, limits, clock, workflow=request.workflow, request_id=request_id))
    except LimitReachedError:
        record = yield from status_steps(request.workflow, request_id, policy or DEFAULT_POLICY)
        if record is not None and record.status.final and request.matches(record.fingerprint):
            return record
        raise


def execution_steps(
    m: Idem[Any],
    request: Request,
    request_id: str,
    store: Store | AsyncStore,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
    plan: Plan | None,
    versions: Iterable[Workflow[Any, Any]],
    *,
    reader: Reader | None,
) -> Steps[records.RunRecord]:
    """The engine's computation for :func:`execute` and :func:`aexecute` (one algorithm).

    Under ``run`` (no ``plan``), a step's error, or the store's, leaves the request unfinished
    for the caller to retry: its run record then says why, and its rows are kept a retention
    from this attempt (:func:`idemflow.stores.expiry.left_over`)."""
    if plan is None:  # run: a wait here keeps no row alive where rows expire by date alone
        longest = None if expiry.sweeps(store) else (policy or DEFAULT_POLICY).retention * expiry.SLACK
        base = Plan(version=request.version, longest_wait_here=longest)
    else:
        base = plan
    execution = _execution(request, request_id, store, policy, clock, base, reader)
    if plan is not None:
        return (
            yield from _versioned(m, execution, request, request_id, store, policy, clock, versions, reader)
        )
    known: set[RowRef] = set()
    ran = _versioned(m, execution, request, request_id, store, policy, clock, versions, reader)
    try:
        return (yield from expiry.watched(ran, execution.record_ref, known))
    except IdempotencyKeyReuseError:
        raise  # the record is another input's: nothing of this one's was written
    except WorkflowAborted:
        raise  # an outcome, not a left-over: its record says so
    except Exception as exc:
        why = f"left unfinished by run at step {execution.step}"
        if execution.step_name:
            why += f" ({execution.step_name})"
        why += f": {type(exc).__name__}: {exc}"
        retention = (policy or DEFAULT_POLICY).retention
        now = max(time.time(), clock())
        with contextlib.suppress(Exception):  # the note is for operators: the caller gets its error
            yield from expiry.left_over(
                execution.record_ref,
                request.workflow,
                request_id,
                why,
                retention,
                now,
                known,
                execution.capabilities,
            )
        raise


def _versioned(
    m: Idem[Any],
    execution: Execution,
    request: Request,
    request_id: str,
    store: Store | AsyncStore,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
    versions: Iterable[Workflow[Any, Any]],
    reader: Reader | None,
) -> Steps[records.RunRecord]:
    """``execution`` run; a request that started on another version finishes on that one if
    ``versions`` holds it."""
    base = execution.plan
    try:
        return (yield from execution.run(m.node))
    except OtherVersion as other:
        started = other.record.version
        held = {flow.version: flow for flow in versions if flow.name == request.workflow}
        flow = held.get(started)
        if flow is None or request.call is None:
            raise VersionNotHeldError(
                request.workflow, request_id, started, tuple(sorted({request.version, *held}))
            ) from None
        again = flow(*request.call.args, **request.call.kwargs)
        plan = Plan(version=started, durable_outcome=base.durable_outcome, step_errors=base.step_errors)
        return (
            yield from _execution(request, request_id, store, policy, clock, plan, reader).run(again.node)
        )


def _execution(
    request: Request,
    request_id: str,
    store: Store | AsyncStore,
    policy: RetryPolicy | None,
    clock: Callable[[], float],
    plan: Plan,
    reader: Reader | None,
) -> Execution:
    return Execution(
        store.capabilities,
        request.workflow,
        request_id,
        request.fingerprint,
        policy or DEFAULT_POLICY,
        clock,
        plan,
        reader,
        aliases=request.aliases,
    )


def run(
    m: Idem[R],
    *,
    request_id: str,
    store: Store,
    policy: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
    versions: Iterable[Workflow[Any, Any]] = (),
) -> R:
    """Run ``m`` under ``request_id`` to completion in the caller; exactly once.

    Duplicates, retries after crashes and racing callers all return the same
    result. Raises :class:`~idemflow.errors.WorkflowAborted` if it aborted.
    ``versions`` are other versions of the workflow, to finish a request that
    started on one of them (a retry across a deploy).
    """
    record = execute(m, request_id=request_id, store=store, policy=policy, clock=clock, versions=versions)
    return result_of(record, m, request_id)


def result_of(record: records.RunRecord, m: Idem[R], request_id: str) -> R:
    """The result a finished run answers: its value, or :class:`WorkflowAborted` raised."""
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
    versions: Iterable[Workflow[Any, Any]] = (),
) -> Result[R, WorkflowAborted]:
    """Like :func:`run`, with an abort as ``Failure(WorkflowAborted)`` instead of raised.

    >>> from idemflow import pure
    >>> from idemflow.stores import MemoryStore
    >>> run_result(pure(1), request_id="r", store=MemoryStore())
    <Success: 1>
    """
    try:
        return Success(
            run(m, request_id=request_id, store=store, policy=policy, clock=clock, versions=versions)
        )
    except WorkflowAborted as aborted:
        return Failure(aborted)


def run_status(
    store: Store, workflow: str, request_id: str, *, policy: RetryPolicy = DEFAULT_POLICY
) -> records.RunRecord | None:
    """The run record of a request, or None if no step of it ever committed."""
    return drive(status_steps(workflow, request_id, policy), store)


def status_steps(workflow: str, request_id: str, policy: RetryPolicy) -> Steps[records.RunRecord | None]:
    """Read a request's run record, resent on transient errors (for both APIs)."""
    ref = records.run_ref(check_workflow_name(workflow), check_request_id(request_id))
    row = yield from resent(policy.resending(policy.until()), Read(ref))
    return None if row is None else records.RunRecord.from_json(row.value)
