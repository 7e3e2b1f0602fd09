"""The queue an Azure Functions invocation hands the worker, and the host's poison queue folded into
idemflow's dead letters.

:mod:`idemflow.azure_functions` builds the functions; this module holds what they drive. The
Functions host, not idemflow, owns a triggered message: it received it, renews its visibility
while the function runs (each renewal changes the pop receipt it holds), deletes it when the
function returns and, when the function raises, makes it visible again after ``visibilityTimeout``
or moves it to ``<queue>-poison`` after ``maxDequeueCount`` deliveries. So the worker's
settlements become what the function does before it returns:

- an ack is recorded, and the function returns: the host deletes the message;
- a nack is recorded, and the function raises: the host delivers it again, counting it;
- a dead letter is sent to ``<queue>-dlq`` with its reason, and the function returns;
- an extension does nothing: an update from here would change the pop receipt under the host,
  whose delete would then fail and bring the finished message back.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from idemflow.async_worklist.queues import _parsed
from idemflow.async_worklist.queues.base import check_reason, check_wire_body, decode_wire
from idemflow.errors import InvalidInputError
from idemflow.integrations.lambda_queues import Pushed, queue_of, refuse_lanes

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.azure_queue import AzureQueue
    from idemflow.async_worklist.queues.base import Message, Queue

Settled = Literal["ack", "nack", "dead"]

POISON_SUFFIX = "-poison"
"""The host moves a message that failed ``maxDequeueCount`` deliveries to ``<queue>-poison``."""
POISON_REASON = (
    "poison: the Functions host gave up after maxDequeueCount failed deliveries "
    "(the store or queue kept failing, or no function here holds its workflow)"
)


def queue_name(queue: str | Queue) -> str:
    """The name of the Azure queue ``queue`` is (or its URL names), read without opening it."""
    if isinstance(queue, str):
        _, url = _parsed(queue)
        if url.scheme == "azure-queue" and url.target:
            from idemflow.async_worklist.queues._azure_queue_calls import AzureQueueCalls  # the [azure] extra

            name = AzureQueueCalls.check_name(url.target)  # the host would listen on no queue
            refuse_lanes(queue, _one_function_per_lane)
            return name
        raise InvalidInputError(
            f"the queue trigger reads an Azure queue: use an azure-queue: URL, not {url.scheme}:"
        )
    refuse_lanes(queue, _one_function_per_lane)
    module = sys.modules.get("idemflow.async_worklist.queues.azure_queue")  # loaded if queue is one
    if module is None or not isinstance(queue, module.AzureQueue):
        raise InvalidInputError(f"the queue trigger reads an Azure queue, not {type(queue).__name__}")
    return str(queue.name)


def _one_function_per_lane(high: str, normal: str, low: str) -> str:
    """The refusal of a laned queue by a queue trigger, which binds one queue."""
    return (
        f"a queue trigger binds one queue, not ?lanes=true: register one function per lane (the "
        f"queues {high}, {normal} and {low}), each with its lane's own queue URL and name, e.g. "
        f"register(app, workflows, store=..., queue='azure-queue:{high}', name='idemflow_high')"
    )


def azure_queue_of(queue: str | Queue) -> AzureQueue:
    """``queue`` itself, or the queue its URL names (opened once per process), if an Azure queue."""
    from idemflow.async_worklist.queues.azure_queue import AzureQueue  # the [azure] extra

    opened = queue_of(queue)
    if not isinstance(opened, AzureQueue):
        raise InvalidInputError(f"the queue trigger reads an Azure queue, not {type(opened).__name__}")
    return opened


class HostHeld(Pushed):
    """The Azure queue as the worker sees it inside one function app process.

    Settlements are kept per delivery (the host runs a batch of messages on threads side by side),
    for :meth:`settled` to hand to the function that handled the message. Sends go to the
    queue itself: a continuation re-sent with its delay is a fresh message the host will trigger
    on later.
    """

    pushed_by = "a queue-triggered function"
    queue: AzureQueue

    def __init__(self, queue: AzureQueue) -> None:
        super().__init__(queue)
        self.name = queue.name
        self._settled: dict[tuple[str, str], Settled] = {}
        self._lock = threading.Lock()

    def settled(self, message: Message) -> Settled | None:
        """How the worker settled ``message`` (None: it could not even nack), forgotten once read."""
        with self._lock:
            return self._settled.pop((message.id, message.receipt), None)

    def _settle(self, message: Message, how: Settled) -> None:
        with self._lock:  # by receipt too: two deliveries of one message may run side by side
            self._settled[message.id, message.receipt] = how

    def ack(self, message: Message) -> None:
        self._settle(message, "ack")  # the host deletes it when the function returns

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        self._settle(message, "nack")  # the function raises: visible again after visibilityTimeout

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        return message  # the host renews it; an update here would change the receipt it holds

    def dead_letter(self, message: Message, reason: str) -> None:
        bury(self.queue, [(message.body, reason)])
        self._settle(message, "dead")


def bury(queue: AzureQueue, letters: Iterable[tuple[str, str]]) -> None:
    """Send each ``(body, reason)`` to ``<queue>-dlq`` as :meth:`AzureQueue.dead_letter` writes it
    (reason line, then the body's wire text), without touching the message the host holds."""
    from azure.core.exceptions import AzureError  # the [azure] extra

    from idemflow.async_worklist.queues._azure_queue_calls import azure_error  # the [azure] extra

    for body, reason in letters:
        envelope = f"{check_reason(reason)}\n{check_wire_body(body, queue.max_body_bytes, repr(queue))}"
        try:
            queue._dlq.send_message(envelope, time_to_live=-1)
        except AzureError as exc:
            raise azure_error(f"dead_letter on {queue!r}", exc, "send_message") from exc


_POISON: dict[str, Any] = {}
_POISON_LOCK = threading.Lock()


def _poison_client(queue: AzureQueue) -> Any:
    """The ``QueueClient`` of ``<queue>-poison``, built once per process and queue."""
    from azure.storage.queue import QueueClient  # the [azure] extra

    key = f"{queue._client.url}{POISON_SUFFIX}"
    with _POISON_LOCK:
        if key not in _POISON:
            name = queue.name + POISON_SUFFIX
            _POISON[key] = QueueClient.from_connection_string(queue._connection_string, name, retry_total=3)
        return _POISON[key]


def fold_poison(queue: AzureQueue, deadline: float) -> tuple[int, bool]:
    """Move what the host put in ``<queue>-poison`` to ``<queue>-dlq`` until ``deadline``
    (``time.monotonic()``); how many moved, and whether the poison queue was emptied.

    The host copies a poison message with Azure's default time to live (seven days); in the
    dead letters it never expires and ``idemflow dead-letters list|redrive`` sees it. A message
    is sent to the dead letters before it is deleted from the poison queue: a crash between the
    two leaves a copy in both, and redriving both runs one request twice, which its memos make
    one effect.
    """
    from azure.core.exceptions import AzureError, ResourceNotFoundError  # the [azure] extra

    from idemflow.async_worklist.queues._azure_queue_calls import azure_error  # the [azure] extra

    poison = _poison_client(queue)
    moved = 0
    while time.monotonic() < deadline:
        try:
            found = list(
                poison.receive_messages(messages_per_page=32, max_messages=32, visibility_timeout=30)
            )
        except ResourceNotFoundError:
            return moved, True  # the host creates it with the first poison message
        except AzureError as exc:
            raise azure_error(f"receive on {queue.name}{POISON_SUFFIX}", exc, "receive_messages") from exc
        if not found:
            return moved, True
        for raw in found:
            if time.monotonic() >= deadline:
                _release(poison, raw)
                continue
            bury(queue, [(decode_wire(str(raw.content or "")), POISON_REASON)])
            try:
                poison.delete_message(raw.id, raw.pop_receipt)
            except AzureError as exc:
                raise azure_error(f"delete on {queue.name}{POISON_SUFFIX}", exc, "delete_message") from exc
            moved += 1
    return moved, False


def _release(poison: Any, raw: Any) -> None:
    """Make a poison message received too late visible again at once (the next run moves it)."""
    from azure.core.exceptions import AzureError  # the [azure] extra

    try:
        poison.update_message(raw.id, raw.pop_receipt, visibility_timeout=0)
    except AzureError:
        return  # it comes back after its 30 s anyway


class Deadline:
    """The time a timer invocation has left, as the relay's
    :class:`~idemflow.integrations.lambda_queues.Timed` reads an invocation's context."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(int((self.at - time.monotonic()) * 1000), 0)
