"""``Idem[T]``: an idempotent computation, as a description to be run.

An ``Idem`` is a value, not a running thing: it records *what* to do (atomic
steps, pure values, continuations), and :func:`idemflow.run` interprets it
under a request id. So the same ``Idem`` can be run many times, under many
request ids, from many threads, and a crashed run is simply run again.

It is a monad (checked with hypothesis in ``tests/engine/test_monad_laws.py``):

>>> from idemflow import pure, run
>>> from idemflow.stores import MemoryStore
>>> m = pure(20).bind(lambda x: pure(x + 1)).map(lambda x: x * 2)
>>> run(m, request_id="r1", store=MemoryStore())
42

and a ``returns`` container, so ``returns.pipeline.flow`` and the pointfree
``bind`` / ``map_`` work on it:

>>> from returns.pipeline import flow
>>> from returns.pointfree import bind as bind_
>>> run(flow(pure(1), bind_(lambda x: pure(x + 1))), request_id="r2", store=MemoryStore())
2
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from returns.interfaces.bindable import Bindable1
from returns.interfaces.mappable import Mappable1
from returns.primitives.container import BaseContainer
from returns.primitives.hkt import Kind1, SupportsKind1, dekind

from idemflow.core.step_retry import StepRetry, check_retry
from idemflow.errors import InvalidInputError
from idemflow.keys import check_partition, check_table
from idemflow.serialization import JSON, encode

if TYPE_CHECKING:
    from idemflow.core.limit_spec import Limit
    from idemflow.core.step_retry import StepRetry
    from idemflow.engine.tx import Tx

T = TypeVar("T")
U = TypeVar("U")

Body = Callable[["Tx"], Any]
Compensate = Callable[["Tx", Any], Any]


class Pure(NamedTuple):
    value: Any


class Bind(NamedTuple):
    source: Any  # a node
    then: Callable[[Any], Idem[Any]]


class Atomic(NamedTuple):
    table: str
    partition: str
    body: Body
    compensate: Compensate | None
    name: str
    retry: StepRetry | None = None
    """How the step is tried again when its body raises (None: the workflow's policy)."""


class Now(NamedTuple):
    """``now()``: the clock, read once and memoized."""


class Uuid4(NamedTuple):
    """``uuid4()``: derived from the request and step, no store call."""


class Random(NamedTuple):
    """``random()``: derived from the request and step, no store call."""


class Effect(NamedTuple):
    """``effect(fn)``: a call outside the store, at least once, result memoized."""

    label: str
    function: Callable[[str], Any]
    lease: float | None = None
    compensate: Callable[[str, Any], Any] | None = None
    """``undo(key, result)``: the outside call that undoes this one if the request is undone."""
    retry: StepRetry | None = None
    """How a call that raised is made again (None: the workflow's policy)."""
    timeout: float | None = None
    """Seconds an attempt may take before it counts as failed."""
    group: Limit | None = None
    """The limit group held around the call alone (``effect(..., group=)``)."""


class Abort(NamedTuple):
    """``abort(reason)``: end the workflow and compensate, decided once."""

    reason: Any


class Checkpoint(NamedTuple):
    """``checkpoint()``: where ``submit`` answers the client and hands the rest to workers."""


class Deadline(NamedTuple):
    """A due time, memoized: ``at``, or the clock plus ``seconds`` when first reached."""

    seconds: float | None
    at: float | None
    label: str


class Until(NamedTuple):
    """Go on once the clock reaches ``due`` (a worker suspends the request until then)."""

    due: float


class Start(NamedTuple):
    """``start(child(...), request_id=)``: claim a child request, exactly once, with this step."""

    call: Call
    request_id: str
    version: int
    fingerprint: str
    aliases: tuple[str, ...]
    input: Any
    on_parent_abort: str = "abort"
    """``"abort"``: if this request is undone, the child is aborted too (its compensations run);
    ``"abandon"``: the child goes on by itself."""


class WaitFor(NamedTuple):
    """``wait(child)``: the child's outcome, once it finished."""

    workflow: str
    request_id: str
    call: Call | None


class Post(NamedTuple):
    """``send(workflow, request_id, topic, value)``: one message into another request."""

    workflow: str
    request_id: str
    topic: str
    value: Any


class Receive(NamedTuple):
    """``receive(topic)``: the next message on ``topic``, or None once ``due`` passed."""

    topic: str
    due: float | None
    over_at: tuple[int, ...] = ()
    """In an ``any_of``: the steps of the block's due times; a message sent at or after the first
    one memoized came after that branch ended the block, so it is left for a later receive."""


class SetEvent(NamedTuple):
    """``set_event(key, value)``: publish ``value`` under ``key`` (a later one of the key wins)."""

    key: str
    value: Any
    text: str
    """The value's canonical JSON, encoded (and so checked) when the step was made."""


class WriteStream(NamedTuple):
    """``write_stream(key, value)``: append ``value`` to the stream ``key``."""

    key: str
    value: Any
    text: str
    """The value's canonical JSON, encoded (and so checked) when the step was made."""


class CloseStream(NamedTuple):
    """``close_stream(key)``: end the stream ``key`` (its readers stop after its last value)."""

    key: str


class Child(NamedTuple):
    """What ``yield start(...)`` gives: the child's workflow and request id, for ``wait``."""

    workflow: str
    request_id: str
    call: Call | None = None


class AsWritten(NamedTuple):
    """The arguments as the caller wrote them, where binding them to the signature changed them
    (``f(x=1)`` is ``f(1)``): 0.1.0 fingerprinted this form, so it is one more alias."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class Basis(NamedTuple):
    """The part of the input duplicates are compared on, when the workflow says
    (``@idempotent(fingerprint=)``); it may be None itself."""

    value: object


class Call(NamedTuple):
    """A ``@workflow`` function applied to its input."""

    name: str
    function: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    version: int = 1
    compared: Basis | AsWritten | None = None
    """What duplicates are compared on beyond ``args``/``kwargs``: only a :class:`Basis`, or also
    the call :class:`AsWritten`; None: the whole input as bound."""
    retry: StepRetry | None = None
    """The workflow's retry policy for its steps (``@workflow(..., retry=)``)."""
    timeout: float | None = None
    """Seconds a submitted request of this workflow may take (``@workflow(..., timeout=)``)."""
    on_abort: Callable[..., Any] | None = None
    """``on_abort(reason, *args, **kwargs)``: steps to run once the request is undone."""
    limits: tuple[Limit, ...] = ()
    """The concurrency and rate limits its requests take (``@workflow(..., concurrency=)``)."""


class Timer(NamedTuple):
    """``sleep(...)`` as a branch of ``any_of`` (a timeout): its due time is a step, memoized as a
    sleep's, then it is waited for beside the other branches."""

    deadline: Deadline


class TimedReceive(NamedTuple):
    """``receive(topic, timeout=)`` as a branch: its deadline's step, then the receive's."""

    deadline: Deadline
    topic: str


Branch = Effect | WaitFor | Receive | TimedReceive | Timer
"""What ``all_of`` and ``any_of`` run side by side (:mod:`idemflow.engine.together`)."""


class AllOf(NamedTuple):
    """``all_of(...)``: every branch side by side, their values in order."""

    branches: tuple[Branch, ...]


class AnyOf(NamedTuple):
    """``any_of(...)``: the branches side by side until the first ends: ``(index, value)``."""

    branches: tuple[Branch, ...]


TableLess = Now | Uuid4 | Random | Effect | Abort | Checkpoint
"""Steps with no table of their own; the engine dispatches on them exhaustively."""

Coordination = Deadline | Until | Start | WaitFor | Post | Receive
"""Steps that wait for time, for another request, or reach one (:mod:`idemflow.running.coordination`)."""


class ContinueAsNew(NamedTuple):
    """``continue_as_new(*args, **kwargs)``: the next incarnation's input, checked when built."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    input: JSON
    """``{"args": [...], "kwargs": {...}}`` as the run record stores it (already encoded once)."""


Publishing = SetEvent | WriteStream | CloseStream
"""Steps that publish what a request's readers see while it runs (:mod:`idemflow.running.publishing`)."""

Node = (
    Pure
    | Bind
    | Atomic
    | Call
    | Now
    | Uuid4
    | Random
    | Effect
    | Abort
    | Checkpoint
    | Coordination
    | Publishing
    | AllOf
    | AnyOf
    | ContinueAsNew
)


class Idem(BaseContainer, SupportsKind1["Idem[Any]", T], Bindable1[T], Mappable1[T], Generic[T]):
    """An idempotent computation producing a ``T`` (immutable; slotted)."""

    __slots__ = ()

    _inner_value: Node

    def __init__(self, node: Node) -> None:
        super().__init__(node)

    @property
    def node(self) -> Node:
        """The description this computation interprets to."""
        return self._inner_value

    def bind(self, function: Callable[[T], Kind1[Idem[Any], U]]) -> Idem[U]:
        """Sequence: run ``self``, feed its result to ``function``, run what it returns."""
        return Idem(Bind(self._inner_value, lambda value: dekind(function(value))))

    def map(self, function: Callable[[T], U]) -> Idem[U]:
        """Transform the result with a pure function (no step of its own)."""
        return Idem(Bind(self._inner_value, lambda value: Idem(Pure(function(value)))))

    def then(self, other: Idem[U]) -> Idem[U]:
        """Run ``self`` for its effects, then ``other``."""
        return Idem(Bind(self._inner_value, lambda _value: other))

    def __await__(self) -> Generator[Idem[T], Any, T]:
        """``await step`` inside an ``async def`` workflow: the engine runs it and sends the value.

        The engine drives the coroutine itself (as it drives a generator
        workflow), so such a workflow runs under ``run`` and ``arun`` alike;
        it may await only steps (``atomic``, ``effect``, ``now`` ...).
        """
        value: T = yield self
        return value

    def __repr__(self) -> str:
        return f"<Idem {type(self._inner_value).__name__}>"


def pure(value: T) -> Idem[T]:
    """Lift a value into a computation with no effect.

    >>> pure(3).node
    Pure(value=3)
    """
    return Idem(Pure(value))


def bind(m: Idem[T], function: Callable[[T], Idem[U]]) -> Idem[U]:
    """Module form of :meth:`Idem.bind`, for code that reads better prefix.

    >>> bind(pure(1), lambda x: pure(x + 1)).node.__class__.__name__
    'Bind'
    """
    return m.bind(function)


def atomic(
    table: str,
    partition: str,
    body: Callable[[Tx], T],
    *,
    compensate: Callable[[Tx, T], object] | None = None,
    name: str | None = None,
    retry: StepRetry | None = None,
) -> Idem[T]:
    """One step: ``body(tx)`` as one serializable transaction on one partition.

    The body may run more than once (conflict retries); only the committed
    run's writes and result count. ``compensate(tx, result)`` undoes the step
    if the workflow later aborts. ``name`` identifies the step in its memo
    (default: the body's qualified name) for non-determinism detection.
    ``retry`` (a :class:`~idemflow.StepRetry`) tries a body that
    raised again (see :mod:`idemflow.core.step_retry`); a data conflict is always
    retried, whatever the policy.

    >>> def deposit(tx):
    ...     tx.increment("balance", 5)
    ...     return "ok"
    >>> atomic("accounts", "alice", deposit).node.name
    'deposit'
    """
    check_table(table)
    check_partition(partition)
    if not callable(body):
        raise InvalidInputError(f"atomic step body must be callable, not {type(body).__name__}")
    step_name = name if name is not None else getattr(body, "__qualname__", type(body).__qualname__)
    if retry is not None:
        check_retry(retry)
    return Idem(Atomic(table, partition, body, compensate, step_name, retry))


def abort(reason: JSON = None) -> Idem[None]:
    """Abort the workflow from its generator: ``yield abort("out of stock")``; the completed
    steps' compensations run in reverse order (see :mod:`idemflow.compensation`)."""
    encode(reason, "abort reason")
    return Idem(Abort(reason))
