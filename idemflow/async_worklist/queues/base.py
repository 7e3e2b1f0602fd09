"""The work-queue protocol: what a worker needs from SQS, Azure Queue, SQLite or memory.

Why a protocol: the asynchronous worklist checkpoints the rest of a workflow
as one message and background workers finish it. Any at-least-once queue with
visibility timeouts will do, so the worker is written against :class:`Queue`
and every backend passes the same conformance suite
(``tests/conformance/test_queue_contract.py``).

Delivery is at least once: a received message stays hidden for its visibility
timeout; if its holder neither acks nor extends it in time, it comes back with
``deliveries`` one higher. Exactly-once effects come from the workflow memos,
not from the queue.

>>> from idemflow.async_worklist.queues import MemoryQueue
>>> queue = MemoryQueue()
>>> queue.send('{"workflow": "transfer"}')
>>> [message] = queue.receive()
>>> message.body, message.deliveries
('{"workflow": "transfer"}', 1)
>>> queue.ack(message)
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from idemflow.errors import InvalidValueError, LimitExceededError, deprecated_error

DEFAULT_MAX_BODY_BYTES = 256 * 1024
"""Body limit of the local queues: SQS's classic limit, so what works locally works on SQS."""

REASON_MAX_BYTES = 900
"""Dead-letter reasons are cut to this many UTF-8 bytes (they ride beside a full-size body)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One received message; hand it back to :meth:`Queue.ack` / ``nack`` / ``extend``.

    ``deliveries`` counts receives including this one, so a worker can
    dead-letter a message that keeps failing. ``receipt`` proves this receive:
    a holder whose visibility expired and whose message was received again
    elsewhere can no longer ack or extend it where the backend can tell.

    >>> Message(id="m1", body="{}", deliveries=1, receipt="r1").deliveries
    1
    """

    id: str
    body: str
    deliveries: int
    receipt: str


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-lettered message as :meth:`Queue.list_dead_letters` reports it.

    ``id`` names it for :meth:`Queue.redrive` (the dead-letter place's own id
    on SQS and Azure, the message's id locally); ``dead_at`` is when it was
    dead-lettered, in epoch seconds, where the backend knows it.

    >>> DeadLetter(id="m1", body="{}", reason="rejected: bad input", dead_at=None).reason
    'rejected: bad input'
    """

    id: str
    body: str
    reason: str
    dead_at: float | None


@runtime_checkable
class Queue(Protocol):
    """An at-least-once queue with visibility timeouts, acks and a dead-letter place.

    The four backends subclass it explicitly, inheriting :meth:`consume`,
    :meth:`dead_letters` and these docstrings; any other object with these
    members is a queue too.

    >>> from idemflow.async_worklist.queues import MemoryQueue
    >>> isinstance(MemoryQueue(), Queue)
    True
    """

    visibility_timeout: float
    """Default seconds a received message stays hidden."""
    max_body_bytes: int
    """Largest UTF-8 body :meth:`send` accepts; larger bodies are refused before sending."""

    def send(self, body: str, *, delay: float = 0.0) -> None:
        """Enqueue ``body`` (text), visible after ``delay`` seconds."""
        ...

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        """Up to ``max_messages``, waiting up to ``wait`` seconds for the first; ``[]`` on timeout."""
        ...

    def ack(self, message: Message) -> None:
        """Delete for good; a message already deleted or received elsewhere is left alone quietly."""
        ...

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        """Give the message back: visible again after ``delay`` seconds."""
        ...

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        """Keep it hidden ``visibility_timeout`` more seconds from now; use the returned message after."""
        ...

    def dead_letter(self, message: Message, reason: str) -> None:
        """Move it to this queue's dead-letter place with ``reason``; it is not received again."""
        ...

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        """The dead letters (at most ``limit``, oldest first where the backend keeps an order).

        Listing leaves them where they are. The cloud queues have no peek:
        they receive the dead letters briefly and make them visible again.
        """
        ...

    def dead_letters(self) -> list[tuple[str, str]]:
        """``(body, reason)`` of every dead-lettered message, for operators and tests.

        >>> from idemflow.async_worklist.queues import MemoryQueue
        >>> MemoryQueue().dead_letters()
        []
        """
        return [(dead.body, dead.reason) for dead in self.list_dead_letters()]

    def redrive(self, ids: Iterable[str] | None = None) -> int:
        """Move the dead letters ``ids`` (all if None) back onto the queue; how many moved.

        Each goes back as a fresh message (a new id, ``deliveries`` counting
        from 1 again) and leaves the dead-letter place; unknown ids, and dead
        letters already redriven, are skipped, so running it twice, or beside
        workers, is safe. Where the queue moves a message in one transaction
        (memory, SQLite) it moves at most once. SQS and Azure receive it from
        ``<name>-dlq``, send it to the queue, then delete it from the
        ``-dlq``: a crash (or a lost answer) between the send and the delete
        leaves it in both places, and a later redrive sends it again. That
        duplicate is harmless for idemflow, whose memos make a replayed
        continuation exact, but a queue used for other work should know it.
        """
        ...

    def approximate_size(self) -> int:
        """Visible, delayed and in-flight messages, best effort."""
        ...

    def consume(
        self,
        *,
        wait: float = 1.0,
        visibility_timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[Message]:
        """Received messages one at a time until ``stop`` is set; the caller acks or nacks each.

        The stop flag is checked between receives, so a consumer stops within
        about ``wait`` seconds and never takes a message after being told to
        stop (dramatiq's ``Consumer`` is the model). Backends inherit this.

        >>> from idemflow.async_worklist.queues import MemoryQueue
        >>> queue, stop = MemoryQueue(), threading.Event()
        >>> queue.send("a")
        >>> for message in queue.consume(wait=0.01, stop=stop):
        ...     queue.ack(message)
        ...     stop.set()
        """
        while stop is None or not stop.is_set():
            yield from self.receive(max_messages=1, wait=wait, visibility_timeout=visibility_timeout)

    def close(self) -> None:
        """Release connections; the queue's messages stay where they are."""
        ...


def polled(
    claim: Callable[[], list[Message]],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    wait: float,
    *,
    longest: float = 0.1,
) -> list[Message]:
    """``claim()``'s messages once it has some, or none after ``wait`` seconds of ``clock``:
    the receive of a queue no notification reaches (a file, a database), which looks again after
    5 ms, then twice as long each time up to ``longest`` seconds."""
    deadline = clock() + wait
    pause = 0.005
    while True:
        claimed = claim()
        remaining = deadline - clock()
        if claimed or remaining <= 0:
            return claimed
        sleep(min(pause, remaining))
        pause = min(pause * 2, longest)


def check_body(body: object, max_bytes: int, where: str) -> str:
    """``body`` as a str within ``max_bytes`` UTF-8 bytes, or an :class:`InvalidValueError`.

    >>> check_body("{}", 10, "queue 'jobs'")
    '{}'
    >>> check_body(b"{}", 10, "queue 'jobs'")
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidValueError: message body for queue 'jobs': must be str, not bytes
    """
    if not isinstance(body, str):
        raise InvalidValueError(f"message body for {where}", f"must be str, not {type(body).__name__}")
    try:
        size = len(body.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidValueError(
            f"message body for {where}", f"is not valid UTF-8 text (lone surrogate at index {exc.start})"
        ) from exc
    if size > max_bytes:
        raise LimitExceededError(
            f"message body for {where}", f"{size} bytes (UTF-8) exceeds the queue's limit of {max_bytes}"
        )
    return body


def check_seconds(value: float, what: str, *, positive: bool = False, high: float = float("inf")) -> float:
    """A number of seconds, ``>= 0`` (``> 0`` if ``positive``) and at most ``high``, or an error.

    >>> check_seconds(1.5, "delay")
    1.5
    >>> check_seconds(0, "visibility_timeout", positive=True)
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidValueError: visibility_timeout: must be a number of seconds > 0, not 0
    """
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if not ok or not (value > 0 if positive else value >= 0) or not value <= high:
        bounds = ("> 0" if positive else ">= 0") + (f" and <= {high:g}" if high != float("inf") else "")
        raise InvalidValueError(what, f"must be a number of seconds {bounds}, not {value!r}")
    return float(value)


def check_reason(reason: object) -> str:
    """A dead-letter reason as stored everywhere: one line of safe text, at most 900 bytes.

    Every backend cleans reasons the same way, so :meth:`Queue.dead_letters`
    reports the same text on all of them.

    >>> check_reason("handler failed:\\nKeyError")
    'handler failed: KeyError'
    """
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidValueError("dead-letter reason", f"must be a non-empty str, not {reason!r}")
    cleaned = _UNSAFE_IN_REASON.sub(" ", reason)
    data = cleaned.encode("utf-8", "replace")[:REASON_MAX_BYTES]
    return data.decode("utf-8", "ignore")


def check_limit(limit: object) -> int | None:
    """``limit`` if it is None or a positive int, else an :class:`InvalidValueError`.

    >>> check_limit(None), check_limit(5)
    (None, 5)
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidValueError("limit", f"must be None or a positive int, not {limit!r}")
    return limit


def check_ids(ids: object) -> set[str] | None:
    """The dead-letter ids to redrive as a set (None: all), or an :class:`InvalidValueError`.

    A lone str is refused rather than read as its characters.

    >>> sorted(check_ids(["b", "a", "b"]))
    ['a', 'b']
    >>> check_ids("abc")
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidValueError: ids: must be an iterable of dead-letter ids (str), not one str
    """
    if ids is None:
        return None
    what = "must be an iterable of dead-letter ids (str)"
    if isinstance(ids, (str, bytes)):
        raise InvalidValueError("ids", f"{what}, not one {type(ids).__name__}")
    if not isinstance(ids, Iterable):
        raise InvalidValueError("ids", f"{what}, not {type(ids).__name__}")
    wanted = set()
    for item in ids:
        if not isinstance(item, str):
            raise InvalidValueError("ids", f"{what}, not containing {type(item).__name__}")
        wanted.add(item)
    return wanted


def check_max_messages(max_messages: object) -> int:
    """``max_messages`` if it is a positive int, else an :class:`InvalidValueError`.

    >>> check_max_messages(10)
    10
    """
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
        raise InvalidValueError("max_messages", f"must be a positive int, not {max_messages!r}")
    return max_messages


# Characters XML 1.0 cannot carry (Azure Queue speaks XML; SQS allows the same set)
# plus the escape character itself. Lone surrogates never get here (check_body).
_WIRE_ESCAPE = "~"
_UNSAFE_ON_WIRE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_ESCAPED_ON_WIRE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff~]")
_UNSAFE_IN_REASON = re.compile("[\x00-\x1f\ufffe\uffff\u2028\u2029]")
_WIRE_SEQUENCE = re.compile("~([0-9A-F]{4})")


def encode_wire(body: str) -> str:
    """``body`` as text both cloud services carry exactly.

    Bodies made of XML-safe characters that do not start with ``~`` (every
    JSON document) go as they are. Any other body (control characters,
    U+FFFE/U+FFFF, the empty string, a leading ``~``) is sent as ``~``
    followed by the body with each unsafe character and ``~`` written
    ``~XXXX``. :func:`decode_wire` undoes it exactly.

    >>> encode_wire('{"a": 1}'), encode_wire("a\\x00~"), encode_wire("")
    ('{"a": 1}', '~a~0000~007E', '~')
    """
    if body and not body.startswith(_WIRE_ESCAPE) and not _UNSAFE_ON_WIRE.search(body):
        return body
    return _WIRE_ESCAPE + _ESCAPED_ON_WIRE.sub(lambda m: f"~{ord(m.group()):04X}", body)


def decode_wire(text: str) -> str:
    """The body :func:`encode_wire` was given.

    >>> decode_wire("~a~0000~007E") == "a\\x00~"
    True
    """
    if not text.startswith(_WIRE_ESCAPE):
        return text
    return _WIRE_SEQUENCE.sub(lambda m: chr(int(m.group(1), 16)), text[1:])


def check_wire_body(body: object, max_bytes: int, where: str) -> str:
    """The wire text of ``body``, refused before sending if it (or the body) exceeds ``max_bytes``.

    >>> check_wire_body("{}", 10, "queue 'jobs'")
    '{}'
    """
    text = encode_wire(check_body(body, max_bytes, where))
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise LimitExceededError(
            f"message body for {where}",
            f"{size} bytes once control characters are escaped exceeds the queue's limit of {max_bytes}",
        )
    return text


__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DeadLetter",
    "Message",
    "Queue",
    "check_body",
    "check_ids",
    "check_limit",
    "check_max_messages",
    "check_reason",
    "check_seconds",
    "check_wire_body",
    "decode_wire",
    "encode_wire",
    "polled",
]


def __getattr__(name: str) -> Any:
    # MessageLostError lived here before 1.0: idemflow.errors.MessageLostError now.
    return deprecated_error(__name__, name, moved=("MessageLostError",))
