"""What an Azure queue does per call, once for the blocking and the asyncio queue.

Sans-IO, as :mod:`idemflow.stores._azure_calls` is for the table stores: the
logic of each operation (argument checks, body encoding, the receive poll,
pop receipts and "gone" detection, dead-lettering, error mapping, decoding)
is a generator that *yields* a :class:`Call` (one SDK call on the queue's or
its ``<name>-dlq``'s ``QueueClient``) or a :class:`Pause` (a wait between
polls) and is sent the answer, or has the SDK's exception thrown in at the
``yield``. :class:`~idemflow.async_worklist.queues.azure_queue.AzureQueue`
carries the calls out with blocking clients and its ``sleep``;
:class:`~idemflow.async_worklist.queues.azure_queue_async.AsyncAzureQueue`
awaits them on ``azure.storage.queue.aio`` clients and ``asyncio.sleep``. A
call whose ``collect`` is set returns pages of messages: the driver answers
with them as a list (the aio client's are iterated asynchronously).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError
from azure.storage.queue import QueueMessage

from idemflow.async_worklist.queues._errors import Service, queue_error
from idemflow.async_worklist.queues.base import (
    DeadLetter,
    Message,
    check_ids,
    check_limit,
    check_max_messages,
    check_reason,
    check_seconds,
    check_wire_body,
    decode_wire,
)
from idemflow.core.backlog import QueueStats, oldest_lag
from idemflow.errors import BackendError, ConfigurationError, InvalidNameError, MessageLostError
from idemflow.stores._azure_errors import classify_exception, code_of

T = TypeVar("T")

# The blocking queue's logger, whichever module logs: one name for operators' log configuration.
log = logging.getLogger("idemflow.async_worklist.queues.azure_queue")

AZURE_MAX_BODY_BYTES = 64 * 1024 - 1024
"""Azure's 64 KiB message limit less 1 KiB kept for the reason of a dead letter."""
MAX_SECONDS = 7 * 24 * 3600  # longest visibility timeout or delay Azure accepts
_NAME = re.compile(r"[a-z0-9](?:-?[a-z0-9])+")
_PEEK = 32  # the most messages one Azure peek returns
_STALE = {"MessageNotFound", "PopReceiptMismatch"}
_GONE: Any = object()
"""What :meth:`AzureQueueCalls._on_message` answers when the message is gone or received again."""

_AZURE = Service(
    "azure_queue",
    "the Azure queue service",
    "authentication failed",
    "check the key or SAS in the connection string",
)
Which = Literal["queue", "dlq"]


@dataclass(frozen=True, slots=True)
class Call:
    """``client.method(*args, **kwargs)`` on the queue's or the dlq's client (``which``): answered
    with its result, or (``collect``) with the messages of the pages it returns, as a list."""

    which: Which
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    collect: bool = False


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait ``seconds`` (answered with None)."""

    seconds: float


Calls = Generator[Call | Pause, Any, T]
"""A computation of a queue that yields SDK calls and returns a ``T``."""


def connect(make: Callable[[], T], name: str) -> T:
    """``make()`` (the SDK clients of queue ``name``), a malformed connection string reported
    without its key."""
    try:
        return make()
    except (ValueError, TypeError):
        # Never echo the connection string: it holds the account key.
        raise ConfigurationError(
            f"Azure queue {name!r}: the connection string is malformed", backend="azure_queue"
        ) from None


class AzureQueueCalls:
    """The state and per-call logic both Azure queues share.

    A subclass sets ``_where`` (the queue and its account, for messages); SDK
    failures become idemflow errors through :func:`azure_error`.
    """

    max_body_bytes = AZURE_MAX_BODY_BYTES
    _where: str

    def __init__(self, name: str, visibility_timeout: float, clock: Callable[[], float]) -> None:
        self.name = self.check_name(name)
        self.visibility_timeout = float(_seconds(visibility_timeout, "visibility_timeout", 1))
        self._clock = clock

    @staticmethod
    def check_name(name: object) -> str:
        """``name`` if Azure accepts it (and its ``-dlq``), else an :class:`InvalidNameError`."""
        if not isinstance(name, str) or not 3 <= len(name) <= 59 or not _NAME.fullmatch(name):
            raise InvalidNameError(
                "Azure queue name",
                name,
                "use 3-59 lowercase letters, digits and single hyphens, starting and ending with a letter "
                "or digit ('-dlq' is appended for dead letters)",
            )
        return name

    def _error(self, operation: str, exc: AzureError, method: str) -> BackendError:
        return azure_error(f"{operation} on {self._where}", exc, method)

    # -- the operations -----------------------------------------------------------------------------

    def _create(self) -> Calls[None]:
        """Create the queue and its ``<name>-dlq`` when missing."""
        for which in ("queue", "dlq"):
            try:
                yield Call(which, "create_queue")
            except ResourceExistsError:
                pass
            except AzureError as exc:
                raise self._error("create", exc, "create_queue") from exc

    def _send(self, body: str, delay: float) -> Calls[None]:
        text = check_wire_body(body, self.max_body_bytes, self._where)
        hidden = _seconds(delay, "delay", 0) or None
        kwargs = {"visibility_timeout": hidden, "time_to_live": -1}
        yield from self._call("send", Call("queue", "send_message", (text,), kwargs))

    def _receive(
        self, max_messages: int, wait: float, visibility_timeout: float | None
    ) -> Calls[list[Message]]:
        """Up to ``min(max_messages, 32)`` messages (Azure's per-call limit), polling up to ``wait``."""
        check_max_messages(max_messages)
        vt = self.visibility_timeout if visibility_timeout is None else visibility_timeout
        hide = _seconds(vt, "visibility_timeout", 1)
        count = min(max_messages, 32)
        deadline = self._clock() + check_seconds(wait, "wait")
        pause = 0.05
        kwargs = {"messages_per_page": count, "max_messages": count, "visibility_timeout": hide}
        while True:
            raws = yield from self._call(
                "receive", Call("queue", "receive_messages", (), kwargs, collect=True)
            )
            found = [_message(raw) for raw in raws]
            remaining = deadline - self._clock()
            if found or remaining <= 0:
                return found
            yield Pause(min(pause, remaining))
            pause = min(pause * 2, 1.0)

    def _ack(self, message: Message) -> Calls[None]:
        call = Call("queue", "delete_message", (message.id, message.receipt))
        if (yield from self._on_message("ack", call)) is _GONE:
            log.debug("ack of Azure message %s ignored: already deleted or received elsewhere", message.id)

    def _nack(self, message: Message, delay: float) -> Calls[None]:
        seconds = _seconds(delay, "delay", 0)
        call = Call("queue", "update_message", (message.id, message.receipt), {"visibility_timeout": seconds})
        if (yield from self._on_message("nack", call)) is _GONE:
            log.debug("nack of Azure message %s ignored: already deleted or received elsewhere", message.id)

    def _extend(self, message: Message, visibility_timeout: float) -> Calls[Message]:
        seconds = _seconds(visibility_timeout, "visibility_timeout", 1)
        call = Call("queue", "update_message", (message.id, message.receipt), {"visibility_timeout": seconds})
        updated = yield from self._on_message("extend", call)
        if updated is _GONE:
            raise MessageLostError(
                f"cannot extend message {message.id} of {self._where}: it was deleted or received again",
                backend="azure_queue",
                operation="update_message",
            )
        return Message(message.id, message.body, message.deliveries, str(updated.pop_receipt))

    def _dead_letter(self, message: Message, reason: str) -> Calls[None]:
        """Send ``reason`` and the body to ``<name>-dlq`` (one text: reason line, then body), then delete.

        Ownership is checked first (an update needs the current pop receipt),
        so a holder that lost the message does not dead-letter a copy of it.
        """
        envelope = (
            f"{check_reason(reason)}\n{check_wire_body(message.body, self.max_body_bytes, self._where)}"
        )
        try:
            held = yield from self._extend(message, self.visibility_timeout)
        except MessageLostError:
            log.debug("dead_letter of Azure message %s ignored: deleted or received elsewhere", message.id)
            return
        yield from self._call("dead_letter", Call("dlq", "send_message", (envelope,), {"time_to_live": -1}))
        yield from self._ack(held)

    def _approximate_size(self) -> Calls[int]:
        properties = yield from self._call("approximate_size", Call("queue", "get_queue_properties"))
        return int(properties.approximate_message_count or 0)

    def _stats(self) -> Calls[QueueStats]:
        """Azure's one approximate total, and a peek (no side effects) at up to 32 visible messages.

        Azure counts delayed and held messages together, so ``delayed`` and
        ``in_flight`` stay None; ``visible`` is the peek's count when under
        32, else None (at least 32). ``lag`` is the age of the first peeked
        message, from its ``inserted_on``: time since it was sent, delay included.
        """
        properties = yield from self._call("stats", Call("queue", "get_queue_properties"))
        peeked = yield from self._call("stats", Call("queue", "peek_messages", (), {"max_messages": _PEEK}))
        total = int(properties.approximate_message_count or 0)
        sent = [raw.inserted_on.timestamp() for raw in peeked if raw.inserted_on is not None]
        visible = len(peeked) if len(peeked) < _PEEK else None
        lag = oldest_lag(min(sent, default=None), time.time())
        return QueueStats(self.name, visible, None, None, max(total, len(peeked)), lag, False, "peek")

    def _list_dead_letters(self, limit: int | None) -> Calls[list[DeadLetter]]:
        limit = check_limit(limit)
        found: list[DeadLetter] = []

        def add(raw: QueueMessage) -> Calls[bool]:
            reason, _, text = str(raw.content or "").partition("\n")
            dead_at = raw.inserted_on.timestamp() if raw.inserted_on else None
            found.append(DeadLetter(raw.id, decode_wire(text), reason, dead_at))
            yield from ()  # no call: it stays in the dlq
            return False

        yield from self._scan_dead_letters(
            "list_dead_letters", add, lambda: limit is not None and len(found) >= limit
        )
        return found

    def _redrive(self, ids: Iterable[str] | None) -> Calls[int]:
        wanted = check_ids(ids)
        if wanted is not None and not wanted:
            return 0
        moved = 0

        def move(raw: QueueMessage) -> Calls[bool]:
            nonlocal moved
            if wanted is not None and raw.id not in wanted:
                return False
            text = str(raw.content or "").partition("\n")[2]
            yield from self._call("redrive", Call("queue", "send_message", (text,), {"time_to_live": -1}))
            moved += 1
            delete = Call("dlq", "delete_message", (raw.id, raw.pop_receipt))
            if (yield from self._on_message("redrive", delete)) is _GONE:
                log.warning("dead letter %s was redriven but may still be in the dlq", raw.id)
            return True

        yield from self._scan_dead_letters(
            "redrive", move, lambda: wanted is not None and moved >= len(wanted)
        )
        return moved

    def _scan_dead_letters(
        self, operation: str, visit: Callable[[QueueMessage], Calls[bool]], done: Callable[[], bool]
    ) -> Calls[None]:
        """Receive the dead letters (hidden 30 s) and ``visit`` each once, until ``done()``.

        ``visit`` returns True once it deleted one; the rest are made visible
        again at the end, also on an error. Stops when a receive brings none
        not seen before (the dlq is empty, or only seen ones came back).
        """
        held: dict[str, str] = {}  # message id -> pop receipt, of those to make visible again
        seen: set[str] = set()
        receive = Call(
            "dlq",
            "receive_messages",
            kwargs={"messages_per_page": 32, "max_messages": 32, "visibility_timeout": 30},
            collect=True,
        )
        try:
            while not done():
                batch: list[QueueMessage] = yield from self._call(operation, receive)
                held.update((raw.id, str(raw.pop_receipt)) for raw in batch)
                new = [raw for raw in batch if raw.id not in seen]
                if not new:
                    break
                for raw in new:
                    seen.add(raw.id)
                    if not done() and (yield from visit(raw)):
                        del held[raw.id]
        finally:
            for message_id, receipt in held.items():
                again = Call("dlq", "update_message", (message_id, receipt), {"visibility_timeout": 0})
                yield from self._on_message(operation, again)

    # -- one call -----------------------------------------------------------------------------------

    def _call(self, operation: str, call: Call) -> Calls[Any]:
        try:
            return (yield call)
        except AzureError as exc:
            raise self._error(operation, exc, call.method) from exc

    def _on_message(self, operation: str, call: Call) -> Calls[Any]:
        """A call on one received message: its answer, or ``_GONE`` if Azure says it is gone or
        received again."""
        try:
            return (yield call)
        except HttpResponseError as exc:
            if code_of(exc) in _STALE:
                return _GONE
            raise self._error(operation, exc, call.method) from exc
        except AzureError as exc:
            raise self._error(operation, exc, call.method) from exc


def _message(raw: QueueMessage) -> Message:
    return Message(
        raw.id, decode_wire(str(raw.content or "")), int(raw.dequeue_count or 1), str(raw.pop_receipt)
    )


def azure_error(where: str, exc: AzureError, method: str | None = None) -> BackendError:
    """The idemflow error for an SDK failure of ``where`` (the client's ``method``), for both Azure
    queues: classified by the Azure table the Tables store reads too. No detail: SDK messages may
    quote request URLs."""
    meant, said, status = classify_exception(exc)
    return queue_error(where, _AZURE, meant, method, said, status)


def _seconds(value: float, what: str, low: int) -> int:
    """Whole seconds for Azure (rounded up so a message is never hidden for less than asked)."""
    return math.ceil(check_seconds(value, what, positive=low > 0, high=MAX_SECONDS))
