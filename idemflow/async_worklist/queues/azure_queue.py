"""Azure Queue Storage as the work queue (azure-storage-queue), ``<name>-dlq`` for dead letters.

Why Azure Queue: it is the plain at-least-once queue of an Azure storage
account, the same account the Azure Tables store uses. A receive hides a
message for its visibility timeout; ``deliveries`` is its ``dequeue_count``;
every update changes the pop receipt, so :meth:`AzureQueue.extend` returns
the message with its new receipt. There is no long poll: ``receive(wait=...)``
polls with a short backoff through an injectable ``sleep``.

Bodies go as plain text (the SDK's default ``NoEncodePolicy``; base64 would
cost a quarter of the 64 KiB), with the characters XML cannot carry escaped
reversibly (:func:`~idemflow.async_worklist.queues.base.encode_wire`).
Messages never expire (``time_to_live=-1``): a checkpointed workflow must not
silently vanish after Azure's default seven days. The connection string holds
the account key, so it never appears in an error message, log line or repr.

>>> AzureQueue.check_name("jobs")
'jobs'
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.queue import QueueClient, QueueMessage

from idemflow.async_worklist.queues._errors import Service, queue_error
from idemflow.async_worklist.queues.base import (
    DeadLetter,
    Message,
    MessageLostError,
    Queue,
    check_ids,
    check_limit,
    check_max_messages,
    check_reason,
    check_seconds,
    check_wire_body,
    decode_wire,
)
from idemflow.errors import (
    InvalidNameError,
    StoreConfigError,
    StoreError,
)

log = logging.getLogger(__name__)

AZURE_MAX_BODY_BYTES = 64 * 1024 - 1024
"""Azure's 64 KiB message limit less 1 KiB kept for the reason of a dead letter."""
MAX_SECONDS = 7 * 24 * 3600  # longest visibility timeout or delay Azure accepts
_NAME = re.compile(r"[a-z0-9](?:-?[a-z0-9])+")
_STALE = {"MessageNotFound", "PopReceiptMismatch"}
_AZURE = Service(
    "the Azure queue service", "authentication failed", "check the key or SAS in the connection string"
)


class AzureQueue(Queue):
    """A :class:`~idemflow.async_worklist.queues.Queue` on an Azure storage queue.

    With ``create`` the queue and its ``<name>-dlq`` are created when
    missing; without it a missing queue is a
    :class:`~idemflow.errors.StoreConfigError` naming the fix. ``retry_total``
    bounds the SDK's own retries before a :class:`TransientStoreError`.

    >>> AzureQueue("Jobs", connection_string="UseDevelopmentStorage=true")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidNameError: invalid Azure queue name 'Jobs': use 3-59 lowercase letters, ...
    """

    max_body_bytes = AZURE_MAX_BODY_BYTES

    def __init__(
        self,
        name: str,
        *,
        connection_string: str,
        visibility_timeout: float = 30.0,
        create: bool = True,
        retry_total: int = 3,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = self.check_name(name)
        self.visibility_timeout = float(_seconds(visibility_timeout, "visibility_timeout", 1))
        self._clock = clock
        self._sleep = sleep
        try:
            self._client = QueueClient.from_connection_string(
                connection_string, name, retry_total=retry_total
            )
            self._dlq = QueueClient.from_connection_string(
                connection_string, f"{name}-dlq", retry_total=retry_total
            )
        except (ValueError, TypeError):
            # Never echo the connection string: it holds the account key.
            raise StoreConfigError(f"Azure queue {name!r}: the connection string is malformed") from None
        self._where = f"Azure queue {name!r} (account {self._client.account_name})"
        if create:
            for client in (self._client, self._dlq):
                try:
                    client.create_queue()
                except ResourceExistsError:
                    pass
                except AzureError as exc:
                    raise self._error("create", exc) from exc

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

    def __repr__(self) -> str:
        return f"AzureQueue({self.name!r})"

    def send(self, body: str, *, delay: float = 0.0) -> None:
        text = check_wire_body(body, self.max_body_bytes, self._where)
        hidden = _seconds(delay, "delay", 0) or None
        self._call("send", self._client.send_message, text, visibility_timeout=hidden, time_to_live=-1)

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        """Up to ``min(max_messages, 32)`` messages (Azure's per-call limit), polling up to ``wait``."""
        check_max_messages(max_messages)
        vt = self.visibility_timeout if visibility_timeout is None else visibility_timeout
        hide = _seconds(vt, "visibility_timeout", 1)
        count = min(max_messages, 32)
        deadline = self._clock() + check_seconds(wait, "wait")
        pause = 0.05
        while True:
            pages = self._call(
                "receive",
                self._client.receive_messages,
                messages_per_page=count,
                max_messages=count,
                visibility_timeout=hide,
            )
            found = [_message(m) for m in self._call("receive", list, pages)]
            remaining = deadline - self._clock()
            if found or remaining <= 0:
                return found
            self._sleep(min(pause, remaining))
            pause = min(pause * 2, 1.0)

    def ack(self, message: Message) -> None:
        if not self._on_message("ack", self._client.delete_message, message.id, message.receipt):
            log.debug("ack of Azure message %s ignored: already deleted or received elsewhere", message.id)

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        seconds = _seconds(delay, "delay", 0)
        update = self._client.update_message
        if not self._on_message("nack", update, message.id, message.receipt, visibility_timeout=seconds):
            log.debug("nack of Azure message %s ignored: already deleted or received elsewhere", message.id)

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        seconds = _seconds(visibility_timeout, "visibility_timeout", 1)
        updated: list[QueueMessage] = []

        def update() -> None:
            updated.append(
                self._client.update_message(message.id, message.receipt, visibility_timeout=seconds)
            )

        if not self._on_message("extend", update):
            raise MessageLostError(
                f"cannot extend message {message.id} of {self._where}: it was deleted or received again"
            )
        return Message(message.id, message.body, message.deliveries, str(updated[0].pop_receipt))

    def dead_letter(self, message: Message, reason: str) -> None:
        """Send ``reason`` and the body to ``<name>-dlq`` (one text: reason line, then body), then delete.

        Ownership is checked first (an update needs the current pop receipt),
        so a holder that lost the message does not dead-letter a copy of it.
        """
        envelope = (
            f"{check_reason(reason)}\n{check_wire_body(message.body, self.max_body_bytes, self._where)}"
        )
        try:
            held = self.extend(message, self.visibility_timeout)
        except MessageLostError:
            log.debug("dead_letter of Azure message %s ignored: deleted or received elsewhere", message.id)
            return
        self._call("dead_letter", self._dlq.send_message, envelope, time_to_live=-1)
        self.ack(held)

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        """The dead letters, read by receiving them briefly and making them visible again at once.

        ``dead_at`` is when the dead letter reached ``<name>-dlq``.
        """
        limit = check_limit(limit)
        found: list[DeadLetter] = []

        def add(raw: QueueMessage) -> bool:
            reason, _, text = str(raw.content or "").partition("\n")
            dead_at = raw.inserted_on.timestamp() if raw.inserted_on else None
            found.append(DeadLetter(raw.id, decode_wire(text), reason, dead_at))
            return False  # leave it in the dlq

        self._scan_dead_letters("list_dead_letters", add, lambda: limit is not None and len(found) >= limit)
        return found

    def redrive(self, ids: Iterable[str] | None = None) -> int:
        """Receive each from ``<name>-dlq``, send its body to the queue, then delete it from the dlq.

        A dead letter being moved is hidden from other redrives and listings
        for 30 s. A crash between the send and the delete duplicates it (see
        :meth:`Queue.redrive`), harmless for idemflow's continuations.
        """
        wanted = check_ids(ids)
        if wanted is not None and not wanted:
            return 0
        moved = 0

        def move(raw: QueueMessage) -> bool:
            nonlocal moved
            if wanted is not None and raw.id not in wanted:
                return False
            text = str(raw.content or "").partition("\n")[2]
            self._call("redrive", self._client.send_message, text, time_to_live=-1)
            moved += 1
            if not self._on_message("redrive", self._dlq.delete_message, raw.id, raw.pop_receipt):
                log.warning("dead letter %s was redriven but may still be in the dlq", raw.id)
            return True

        self._scan_dead_letters("redrive", move, lambda: wanted is not None and moved >= len(wanted))
        return moved

    def approximate_size(self) -> int:
        properties = self._call("approximate_size", self._client.get_queue_properties)
        return int(properties.approximate_message_count or 0)

    def close(self) -> None:
        self._client.close()
        self._dlq.close()

    def _scan_dead_letters(
        self, operation: str, visit: Callable[[QueueMessage], bool], done: Callable[[], bool]
    ) -> None:
        """Receive the dead letters (hidden 30 s) and ``visit`` each once, until ``done()``.

        ``visit`` returns True once it deleted one; the rest are made visible
        again at the end, also on an error. Stops when a receive brings none
        not seen before (the dlq is empty, or only seen ones came back).
        """
        held: dict[str, str] = {}  # message id -> pop receipt, of those to make visible again
        seen: set[str] = set()
        try:
            while not done():
                receive = self._dlq.receive_messages
                pages = self._call(
                    operation, receive, messages_per_page=32, max_messages=32, visibility_timeout=30
                )
                batch: list[QueueMessage] = self._call(operation, list, pages)
                held.update((raw.id, str(raw.pop_receipt)) for raw in batch)
                new = [raw for raw in batch if raw.id not in seen]
                if not new:
                    break
                for raw in new:
                    seen.add(raw.id)
                    if not done() and visit(raw):
                        del held[raw.id]
        finally:
            for message_id, receipt in held.items():
                update = self._dlq.update_message
                self._on_message(operation, update, message_id, receipt, visibility_timeout=0)

    def _call(self, operation: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except AzureError as exc:
            raise self._error(operation, exc) from exc

    def _on_message(self, operation: str, call: Callable[..., object], *args: Any, **kwargs: Any) -> bool:
        """Run a call on one received message; ``False`` if Azure says it is gone or received again."""
        try:
            call(*args, **kwargs)
        except HttpResponseError as exc:
            if _code(exc) in _STALE:
                return False
            raise self._error(operation, exc) from exc
        except AzureError as exc:
            raise self._error(operation, exc) from exc
        return True

    def _error(self, operation: str, exc: AzureError) -> StoreError:
        # No detail: SDK messages may quote request URLs.
        where = f"{operation} on {self._where}"
        if not isinstance(exc, HttpResponseError):
            unreachable = isinstance(exc, (ServiceRequestError, ServiceResponseError))
            return queue_error(where, exc, _AZURE, unreachable=unreachable)
        code = _code(exc)
        return queue_error(
            where,
            exc,
            _AZURE,
            answer=(code, int(exc.status_code or 0)),
            missing=code == "QueueNotFound",
            refused=isinstance(exc, ClientAuthenticationError),
            transient=code in ("ServerBusy", "OperationTimedOut"),
        )


def _message(raw: QueueMessage) -> Message:
    return Message(
        raw.id, decode_wire(str(raw.content or "")), int(raw.dequeue_count or 1), str(raw.pop_receipt)
    )


def _code(exc: HttpResponseError) -> str:
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


def _seconds(value: float, what: str, low: int) -> int:
    """Whole seconds for Azure (rounded up so a message is never hidden for less than asked)."""
    return math.ceil(check_seconds(value, what, positive=low > 0, high=MAX_SECONDS))
