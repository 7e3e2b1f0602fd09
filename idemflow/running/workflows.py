"""What a workflow is: ``@workflow`` (its name, version, retry policy, timeout, limits and
what happens when it fails or is undone) and the :class:`Workflow` it makes, whose call binds an
input into the ``Idem`` that is run.

Declaring a workflow checks everything about it before any request exists, and every way of
running one (``run``, ``submit``, a worker, a host) starts from the same :class:`Workflow`, so
the declaration has a module of its own, apart from the running.

>>> @workflow("greet", version=2)
... def greet(name):
...     return (yield from ())
>>> greet
<workflow 'greet' v2>
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Iterable
from typing import Any, Generic, Literal, ParamSpec, Protocol, TypeVar, overload

from idemflow.core.limit_spec import Concurrency, LimitGroup, Rate, workflow_limits
from idemflow.core.step_retry import StepRetry, check_retry
from idemflow.engine.monad import AsWritten, Basis, Call, Idem
from idemflow.errors import InvalidInputError
from idemflow.keys import check_duration, check_workflow_name

P = ParamSpec("P")
R = TypeVar("R")

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
