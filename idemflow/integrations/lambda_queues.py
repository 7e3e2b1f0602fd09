"""The queues a Lambda invocation hands the worker and the relay, and the clients a sandbox keeps.

:mod:`idemflow.aws_lambda` builds the handlers; this module holds what they drive: the stores
and queues opened once per sandbox (keyed by URL), the event's batch standing in for the queue
a worker receives from, and the relay's queue that stops sending when the invocation's time is
nearly up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from idemflow.async_worklist.outbox import relay
from idemflow.async_worklist.queues import _parsed, open_queue
from idemflow.async_worklist.queues.lanes import LANES, LanedQueue, lane_url
from idemflow.errors import ConfigurationError
from idemflow.integrations.lambda_context import LambdaContext
from idemflow.stores._opening import open_store

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.base import DeadLetter, Message, Queue
    from idemflow.stores.base import Store

_OPENED: dict[tuple[str, str], Any] = {}
"""Stores and queues opened from URLs, one per URL for the sandbox's life (its clients stay warm)."""
_OPENING = threading.Lock()


def _kept(kind: str, url: str, opener: Callable[[str], Any]) -> Any:
    """What ``opener`` opens of ``url``, opened on first use and kept for the sandbox."""
    with _OPENING:
        if (kind, url) not in _OPENED:
            _OPENED[kind, url] = opener(url)
        return _OPENED[kind, url]


def store_of(store: str | Store) -> Store:
    """``store`` itself, or the store its URL names, opened on first use and kept for the sandbox."""
    if not isinstance(store, str):
        return store

    opened: Store = _kept("store", store, open_store)
    return opened


def queue_of(queue: str | Queue) -> Queue:
    """``queue`` itself, or the queue its URL names, opened on first use and kept for the sandbox."""
    if not isinstance(queue, str):
        return queue

    opened: Queue = _kept("queue", queue, open_queue)
    return opened


_PLACEHOLDERS = ("<name>-high", "<name>", "<name>-low")


def lane_names(queue: str | Queue) -> list[str] | None:
    """The names of the three queues a laned ``queue`` stands for (a ``?lanes=true`` URL, read
    without opening anything, or a ``LanedQueue``), highest first; None for a queue of its own.

    Why: a platform that pushes messages binds one queue per trigger or mapping, so such a
    queue is refused, and the refusal names the queues to bind instead.

    >>> lane_names("sqlite:/tmp/q.sqlite3?name=jobs&lanes=true"), lane_names("memory:")
    (['jobs-high', 'jobs', 'jobs-low'], None)
    """

    if isinstance(queue, LanedQueue):
        names = [name for lane in LANES if isinstance(name := getattr(queue.lanes[lane], "name", None), str)]
        return names if len(names) == len(LANES) else list(_PLACEHOLDERS)
    if not isinstance(queue, str):
        return None

    _, url = _parsed(queue)
    if not url.flag("lanes"):
        return None
    if url.scheme == "sqlite":
        return [lane_url(url, lane).params.get("name", "default") for lane in LANES]
    if not url.target:  # a queue of no name of its own (memory:)
        return list(_PLACEHOLDERS)
    return [f"{url.target}-high", url.target, f"{url.target}-low"]


def seconds_left(context: LambdaContext) -> float:
    """What the invocation has left, in seconds."""
    return context.get_remaining_time_in_millis() / 1000.0


LEASE_MARGIN = 2.0
"""Seconds a running record's extended visibility reaches past the invocation's end. Lambda ends
the invocation at its timeout, so the record of a sandbox that ran out of time comes back this
soon after, not a whole visibility timeout later."""


class Pushed:
    """A queue as a worker sees it inside a function a platform triggers with its messages (an
    SQS event, an Azure Functions queue trigger): sends go to the queue itself, the dead-letter
    commands reach it, and receiving is refused, since the platform does it.

    Subclasses say how the worker's settlements (ack, nack, extend, dead letter) reach the
    platform."""

    pushed_by = "the platform"
    """Who gets the messages, for the error a receive meets."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.visibility_timeout = queue.visibility_timeout
        self.max_body_bytes = queue.max_body_bytes

    def send(self, body: str, *, delay: float = 0.0) -> None:
        self.queue.send(body, delay=delay)

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        raise TypeError(f"{self.pushed_by} gets its messages from the platform, it never receives")

    def consume(
        self,
        *,
        wait: float = 1.0,
        visibility_timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[Message]:
        raise TypeError(f"{self.pushed_by} gets its messages from the platform, it never consumes")

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        return self.queue.list_dead_letters(limit)

    def dead_letters(self) -> list[tuple[str, str]]:
        return self.queue.dead_letters()

    def redrive(self, ids: Iterable[str] | None = None) -> int:
        return self.queue.redrive(ids)

    def approximate_size(self) -> int:
        return self.queue.approximate_size()

    def close(self) -> None:
        """The queue outlives the invocation: nothing to close."""


class Batch(Pushed):
    """The event's queue for one invocation: the worker's settlements become the batch response.

    An ack deletes the message at once (a sandbox killed later in the batch must not bring it
    back), a dead letter moves it to ``<name>-dlq``; a nack sets its visibility to the delay the
    worker chose and reports it as a batch item failure, so Lambda leaves it in the queue.
    Sends (delayed continuations, waits) go to the queue itself. The heartbeat's extensions
    reach at most :data:`LEASE_MARGIN` past the invocation's end.
    """

    pushed_by = "a Lambda handler"

    def __init__(self, queue: Queue) -> None:  # a laned queue: refused by the handler already
        super().__init__(queue)
        self.settled: set[str] = set()
        self.context: LambdaContext | None = None

    def ack(self, message: Message) -> None:
        self.queue.ack(message)
        self.settled.add(message.id)

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        self.queue.nack(message, delay=delay)

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        if self.context is not None:
            left = seconds_left(self.context) + LEASE_MARGIN
            visibility_timeout = min(visibility_timeout, max(left, 1.0))
        return self.queue.extend(message, visibility_timeout)

    def dead_letter(self, message: Message, reason: str) -> None:
        self.queue.dead_letter(message, reason)
        self.settled.add(message.id)


def refuse_lanes(queue: str | Queue, advice: Callable[[str, str, str], str]) -> None:
    """A :class:`~idemflow.errors.ConfigurationError` for priority lanes (``?lanes=true`` or a
    ``LanedQueue``), read from the URL alone, before anything is opened: a platform that pushes
    messages binds one queue, so each lane needs a binding of its own. ``advice(high, normal,
    low)`` says how, on that platform, with the lanes' queue names."""
    names = lane_names(queue)
    if names is None:
        return

    high, normal, low = names
    raise ConfigurationError(advice(high, normal, low))


def one_mapping_per_lane(high: str, normal: str, low: str) -> str:
    """The refusal of a laned queue by an SQS handler: an event's records carry no lane."""
    return (
        "a Lambda SQS handler drains one queue, not ?lanes=true: give each lane's queue "
        f"({high}, {normal}, {low}) its own event source mapping and handler, each with that "
        "queue's plain URL"
    )


class OutOfTime(Exception):
    """The invocation's reserve was reached: the relay stops between two sends."""


class Timed:
    """The queue for one relay pass: refuses to send once ``reserve`` seconds are all that is left."""

    def __init__(self, queue: Queue, context: LambdaContext, reserve: float) -> None:
        self.queue, self.context, self.reserve = queue, context, reserve
        self.sent = 0

    def send(self, body: str, *, delay: float = 0.0) -> None:
        if seconds_left(self.context) < self.reserve:
            raise OutOfTime
        self.queue.send(body, delay=delay)
        self.sent += 1


def relay_once(store: Store, timed: Any, signing_key: bytes | None, clock: Callable[[], float]) -> bool:
    """One outbox relay pass through ``timed`` (a :class:`Timed` or alike): False when the time
    ran out, what is left staying in the outbox for the next run. The store is flushed either way:
    nothing is left to a thread when the sandbox freezes."""

    try:
        relay(store, timed, signing_key=signing_key, clock=clock)
    except OutOfTime:
        return False
    finally:
        store.flush()
    return True
