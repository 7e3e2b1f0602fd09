"""What the step engine asks of the outside world, as values: one algorithm, two drivers.

The engine (:mod:`idemflow.engine.execution`) is a generator: instead of calling a
store, it *yields* one of the requests below and is sent the answer (or has
the store's exception thrown in at the ``yield``). :mod:`idemflow.engine.drive`
answers them with a blocking store on the caller's thread; :mod:`idemflow.engine.drive_asyncio`
awaits an asynchronous store on the event loop. So ``run`` and ``arun`` share
every decision (replay, claim, conflicts, retries, compensation) and differ
only in how a request is carried out.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from idemflow.core.ops import Op
from idemflow.core.row import Row, RowRef

if TYPE_CHECKING:
    from idemflow.core.limit_spec import Limit

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Read:
    """One strongly consistent point read: answered with ``Row | None``."""

    ref: RowRef


@dataclass(frozen=True, slots=True)
class ReadMany:
    """Point reads in one round trip where the backend can: answered with ``list[Row | None]``."""

    refs: Sequence[RowRef]


@dataclass(frozen=True, slots=True)
class Commit:
    """One atomic commit: answered with a ``CommitOutcome``."""

    ops: Sequence[Op]


@dataclass(frozen=True, slots=True)
class CommitCache:
    """A best-effort cache write (completion records, outbox clean-up): answered with None."""

    ops: Sequence[Op]


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` (a timer, a poll, a retry); ``sleep`` is the waiter's own (tests inject one)."""

    seconds: float
    sleep: Callable[[float], Any]


@dataclass(frozen=True, slots=True)
class Backoff(Sleep):
    """The wait between two tries of a store call or a step's body (a transient error, a data
    conflict): part of the store's answer, so a branch of ``all_of``/``any_of`` waits it out in
    line, as it sends its store requests, instead of letting another branch go first."""


@runtime_checkable
class SkippingClock(Protocol):
    """A run's clock that a test moves (``idemflow.testing.check_workflow``'s), whose frozen time
    would never reach the end of a wait: a timer and a receive's timeout move it on to their end
    (under ``run``, ``submit`` and workers alike: no continuation is handed over for them), and a
    retry's backoff is not slept but counted as time tried (the clock stays: ``now()`` after a
    retry is the same however many attempts a scenario made)."""

    def __call__(self) -> float: ...

    def skip_to(self, when: float) -> None:
        """Move the clock on to ``when`` (epoch seconds); never back."""


@dataclass(frozen=True, slots=True)
class Turn:
    """Wait for this process's turn on a hot partition, at most until ``until`` (monotonic).

    Answered with a function that gives the turn back (call it exactly once).
    """

    table: str
    partition: str
    until: float


@dataclass(frozen=True, slots=True)
class CallOut:
    """Call ``function(key)`` outside the store (an effect): answered with its result.

    ``function`` may be a coroutine function; the drivers await it (``arun``) or
    run it to completion (``run``).
    """

    function: Callable[[str], Any]
    key: str
    lease: float | None = None
    """Seconds one execution holds the call before a racing one may make it (:mod:`idemflow.engine.lease`)."""
    timeout: float | None = None
    """Seconds the call may take: the drivers raise :class:`~idemflow.errors.EffectTimeoutError` after."""
    name: str = ""
    """The effect's name, for that error."""
    group: Limit | None = None
    """The limit group the stepper holds around the call (the drivers only make the call)."""


@dataclass(frozen=True, slots=True)
class Launch:
    """Start ``request`` (an effect's :class:`CallOut`, or a :class:`Sleep` a branch waits out)
    without waiting for it: answered at once with a flight, a handle only the driver that made it
    reads. ``all_of`` and ``any_of`` launch their branches' requests so that they run together
    (threads under a blocking driver, tasks on an event loop)."""

    request: CallOut | Sleep


@dataclass(frozen=True, slots=True)
class Collect:
    """Wait until at least one of ``flights`` landed: answered with ``[(flight, Landed)]`` for
    every one that has, in the order they landed."""

    flights: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Abandon:
    """Let ``flights`` go unanswered: an event loop cancels their tasks; a thread's call goes on,
    its answer dropped (Python cannot stop a thread). Answered with None."""

    flights: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Landed:
    """What a launched request answered (``value``), or the error it raised (``error``)."""

    value: Any = None
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class Scan:
    """Every row of a table (or one partition), sorted: answered with ``list[(partition, key, Row)]``."""

    table: str
    partition: str | None


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``body`` to the driver's queue, visible after ``delay`` seconds, in ``lane`` (a
    priority: None for the normal lane, the queue itself): answered with None."""

    body: str
    delay: float = 0.0
    lane: str | None = None


@dataclass(frozen=True, slots=True)
class Settle:
    """``ack``, ``nack`` (``options``: its ``delay``) or ``dead_letter`` (its ``reason``) the message
    a worker holds, unless another worker took it meanwhile: answered with None.

    ``holder`` has ``message``, ``lost`` and the locks its heartbeat takes (``lock`` for a
    thread, ``alock`` for a task), so an ack never races an extension of the same receipt.
    """

    holder: Any
    action: str
    options: Mapping[str, Any] = field(default_factory=dict)


Request = (
    Read
    | ReadMany
    | Commit
    | CommitCache
    | Sleep
    | Turn
    | CallOut
    | Launch
    | Collect
    | Abandon
    | Scan
    | Send
    | Settle
)

Steps = Generator[Request, Any, T]
"""A computation of the engine that yields requests and returns a ``T``."""


class ProcessDied(BaseException):
    """An answer that stands for the process dying at this request (the testing kit's
    :class:`~idemflow.testing.SimulatedCrash`). A killed process runs no handler and makes no
    store call, so the engine passes this through the handlers that would write on the way out
    (giving limit slots or an effect's lease back): what the execution held stays held until
    its lease ends, as after a SIGKILL."""


class Skipped(BaseException):
    """The answer to a branch's :class:`CallOut` or :class:`Sleep` that is not carried out: its
    ``all_of`` failed or aborted, or its ``any_of`` was decided. The call was not made, so what
    was taken for it (its effect lease, its limit group's slot) is given back on the way out."""


class NeedRows(BaseException):
    """A body read rows not fetched yet (asynchronous runs): fetch them, run the body again.

    A ``BaseException`` so a body's ``except Exception`` cannot swallow it.
    """

    def __init__(self, refs: Sequence[RowRef]) -> None:
        super().__init__(len(refs))
        self.refs = refs


class Prefetched:
    """The reads of a body that cannot block: rows fetched so far, or :class:`NeedRows`.

    Bodies are plain functions of ``Tx``; on an event loop their reads cannot
    wait for the store. So a body runs against the rows fetched so far, the
    first missing read stops it, the driver awaits that read, and the body
    runs again from the start (bodies may always run more than once). A body
    that reads ``k`` rows runs ``k + 1`` times, each run a few microseconds.
    """

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: dict[RowRef, Row | None] = {}

    def read(self, ref: RowRef) -> Row | None:
        try:
            return self.rows[ref]
        except KeyError:
            raise NeedRows((ref,)) from None

    def read_many(self, refs: Sequence[RowRef]) -> list[Row | None]:
        rows = self.rows
        missing = [ref for ref in refs if ref not in rows]
        if missing:
            raise NeedRows(missing)
        return [rows[ref] for ref in refs]

    def add(self, refs: Sequence[RowRef], found: Sequence[Row | None]) -> None:
        self.rows.update(zip(refs, found, strict=True))
