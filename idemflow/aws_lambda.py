"""Finish requests on AWS Lambda: an SQS event-source handler and a scheduled relay.

Lambda runs a handler per event and freezes the sandbox as soon as it returns,
so the long-lived ``idemflow worker`` maps onto two functions:

- :func:`sqs_handler` is the worker's message handling for an SQS event-source
  mapping. Each record is handled by
  :meth:`~idemflow.async_worklist.Worker.handle`, the same code as a worker's
  message, with an ack deleting the message at once, and the handler returns
  the partial batch response (``batchItemFailures``) naming the records that
  must come back: a store or queue error, or records the invocation had no
  time left to start.
- :func:`schedule_handler` runs one outbox relay pass for an EventBridge
  schedule: continuations that ``submit`` could not send and wake-ups (a child
  started, a child's outcome, a message sent) whose own send failed, which a
  worker's relay thread sends between messages.
- :func:`schedules_handler` runs one pass of the project's schedules for an EventBridge
  schedule: every tick due is submitted, once however many passes race.

:func:`http_handler` makes a workflow an ``Idempotency-Key`` endpoint behind API
Gateway (REST or HTTP API) or a Function URL, on the ``@idempotent`` machinery.

All return only after what the invocation wrote is durable (the store's
deferred cache writes are flushed): no thread holds work while the sandbox is
frozen. Stores and queues given as URLs are opened once per sandbox, on the
first invocation, and kept in a module-level cache keyed by the URL. Loading
this module, or building a handler, imports no SDK: the first invocation does,
when it opens the store and the queue.

>>> from idemflow import atomic, checkpoint, workflow
>>> from idemflow.stores import MemoryStore
>>> from idemflow.client import submit
>>> from idemflow.worker import MemoryQueue
>>> @workflow("greet")
... def greet(name):
...     yield checkpoint()
...     return (yield atomic("tablea", name, lambda tx: "hello " + name))
>>> store, queue = MemoryStore(), MemoryQueue()
>>> pending = submit(greet("ada"), request_id="g-1", store=store, queue=queue)
>>> [message] = queue.receive()
>>> record = {"messageId": message.id, "receiptHandle": message.receipt, "body": message.body,
...           "attributes": {"ApproximateReceiveCount": "1"}, "eventSource": "aws:sqs"}
>>> handler = sqs_handler([greet], store=store, queue=queue)
>>> handler({"Records": [record]}, FixedContext(60_000))
{'batchItemFailures': []}
>>> pending.result(timeout=5)
'hello ada'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

from idemflow.async_worklist.messages import resolve_signing_key
from idemflow.async_worklist.queues.base import Message, decode_wire
from idemflow.async_worklist.worker import Worker
from idemflow.core.policy import DEFAULT_POLICY
from idemflow.errors import InvalidInputError
from idemflow.integrations.http_answers import KEY_HEADER
from idemflow.integrations.lambda_context import LambdaContext
from idemflow.integrations.lambda_http import REPLAYED_HEADER, HttpHandler, HttpOptions, HttpRequest
from idemflow.integrations.lambda_queues import (
    Batch,
    Timed,
    one_mapping_per_lane,
    queue_of,
    refuse_lanes,
    relay_once,
    seconds_left,
    store_of,
)
from idemflow.integrations.schedule_hosts import SchedulesHandler, schedules_handler
from idemflow.running.answer_cache import AnswerCache

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.base import Message, Queue
    from idemflow.async_worklist.worker import Worker, WorkerStats
    from idemflow.core.policy import RetryPolicy
    from idemflow.core.step_retry import StepRetry
    from idemflow.running.answer_cache import AnswerCache
    from idemflow.running.workflows import Workflow
    from idemflow.stores.base import Store

__all__ = [
    "REPLAYED_HEADER",
    "FixedContext",
    "HttpHandler",
    "HttpRequest",
    "LambdaContext",
    "RelayHandler",
    "SchedulesHandler",
    "SqsHandler",
    "http_handler",
    "schedule_handler",
    "schedules_handler",
    "sqs_handler",
    "sqs_messages",
]

SQS_EVENT_SOURCE = "aws:sqs"
SCHEDULED_EVENT = "Scheduled Event"


class FixedContext:
    """A context for calling a handler outside Lambda (tests, a script): ``millis`` left, counting down.

    >>> FixedContext(1_000).get_remaining_time_in_millis() <= 1_000
    True
    """

    def __init__(self, millis: int) -> None:
        self._deadline = time.monotonic() + millis / 1000.0

    def get_remaining_time_in_millis(self) -> int:
        return max(int((self._deadline - time.monotonic()) * 1000), 0)


def _check_reserve(reserve: float) -> float:
    if isinstance(reserve, bool) or not isinstance(reserve, int | float) or not 0 <= reserve <= 900:
        raise InvalidInputError(f"reserve must be seconds between 0 and 900, not {reserve!r}")
    return float(reserve)


def sqs_messages(event: Mapping[str, Any], queue_name: str | None = None) -> list[Message]:
    """The messages of an SQS event, checked before anything is written.

    A record that is not from SQS, lacks a field the worker reads, or (when ``queue_name`` is
    given) comes from another queue than the handler's is an
    :class:`~idemflow.errors.InvalidInputError`: the function is wired to the wrong trigger.

    >>> sqs_messages({"Records": [{"eventSource": "aws:sns"}]})
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidInputError: record 0 is not an SQS message (eventSource 'aws:sns')
    """

    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list):
        raise InvalidInputError("an SQS event needs a list of Records")
    messages = []
    for n, record in enumerate(records):
        source = record.get("eventSource") if isinstance(record, Mapping) else None
        if source != SQS_EVENT_SOURCE:
            raise InvalidInputError(f"record {n} is not an SQS message (eventSource {source!r})")
        arn = record.get("eventSourceARN")
        if queue_name is not None and isinstance(arn, str) and arn.rsplit(":", 1)[-1] != queue_name:
            raise InvalidInputError(f"record {n} comes from {arn!r}, not from this handler's queue")
        fields = [record.get(name) for name in ("messageId", "receiptHandle", "body")]
        count = (record.get("attributes") or {}).get("ApproximateReceiveCount", "")
        if not all(isinstance(field, str) for field in fields) or not str(count).isdigit():
            raise InvalidInputError(
                f"record {n} needs messageId, receiptHandle, body and attributes.ApproximateReceiveCount"
            )
        message_id, receipt, body = fields
        messages.append(Message(message_id, decode_wire(body), int(count), receipt))
    return messages


class SqsHandler:
    """``handler(event, context)`` for an SQS event-source mapping (see :func:`sqs_handler`)."""

    def __init__(
        self,
        workflows: Iterable[Workflow[Any, Any]],
        *,
        store: str | Store,
        queue: str | Queue,
        reserve: float,
        options: dict[str, Any],
    ) -> None:

        refuse_lanes(
            queue, one_mapping_per_lane
        )  # from the URL: nothing is opened before the first invocation
        self.reserve = _check_reserve(reserve)
        self._flows = list(workflows)
        self._store, self._queue = store, queue
        self._options = options
        unopened = cast(Any, _Unopened())  # the options are checked now, the clients opened later
        Worker(self._flows, store=unopened, queue=unopened, relay_every=None, **options)
        self._worker: Worker | None = None
        self._batch: Batch | None = None

    @property
    def stats(self) -> WorkerStats | None:
        """The worker's counts over this sandbox's invocations (None before the first)."""
        return None if self._worker is None else self._worker.stats

    @property
    def store(self) -> Store | None:
        """The store this sandbox opened (None before the first invocation): one per URL, shared."""
        return None if self._worker is None else self._worker.store

    def __call__(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        worker, batch = self._open()
        messages = sqs_messages(event, getattr(batch.queue, "name", None))
        batch.settled, batch.context = set(), context
        handed: list[Message] = []
        try:
            for n, message in enumerate(messages):
                if seconds_left(context) < self.reserve:  # no time to finish it: give the rest back
                    handed = messages[n:]
                    break
                worker.handle(message)
            for message in handed:
                try:
                    batch.queue.nack(message)
                except Exception:  # noqa: BLE001 - reported below: it comes back after its timeout
                    continue
        finally:
            worker.store.flush()  # completion records: durable before the sandbox is frozen
        failed = [m.id for m in messages if m.id not in batch.settled]
        return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}

    def _open(self) -> tuple[Worker, Batch]:
        if self._worker is None or self._batch is None:
            batch = Batch(queue_of(self._queue))
            store = store_of(self._store)
            self._worker = Worker(self._flows, store=store, queue=batch, relay_every=None, **self._options)
            self._batch = batch
        return self._worker, self._batch


class _Unopened:
    """Stands in for the store and queue while the worker's options are checked at build time."""

    visibility_timeout = 30.0


def sqs_handler(
    workflows: Iterable[Workflow[Any, Any]],
    *,
    store: str | Store,
    queue: str | Queue,
    reserve: float = 5.0,
    signing_key: bytes | str | None = None,
    max_deliveries: int = 5,
    policy: RetryPolicy | None = None,
    version_wait: float = 30.0,
    step_retry: StepRetry | None = None,
    clock: Callable[[], float] | None = None,
) -> SqsHandler:
    """A handler for an SQS event-source mapping with ``ReportBatchItemFailures``.

    It finishes each record's request as ``idemflow worker`` does (same options, same
    outcomes), one record at a time, and returns ``{"batchItemFailures": [...]}``. ``store``
    and ``queue`` are URLs (``open_store``/``open_queue``; opened once per sandbox) or open
    objects; ``queue`` is the mapping's source queue, where continuations are re-sent (with
    priority lanes, one lane's queue: a ``?lanes=true`` URL is a ``ConfigurationError``).
    A record is started only while ``reserve`` seconds of the invocation remain
    (``context.get_remaining_time_in_millis()``); the rest are made visible again and reported
    as failures. Build it at module level, so a sandbox builds it once::

        handler = sqs_handler(WORKFLOWS, store=os.environ["STORE_URL"], queue=os.environ["QUEUE_URL"])
    """
    options: dict[str, Any] = {
        "signing_key": signing_key,
        "max_deliveries": max_deliveries,
        "policy": policy,
        "version_wait": version_wait,
        "step_retry": step_retry,
        "clock": clock,
    }
    return SqsHandler(workflows, store=store, queue=queue, reserve=reserve, options=options)


class RelayHandler:
    """``handler(event, context)`` for an EventBridge schedule (see :func:`schedule_handler`)."""

    def __init__(
        self,
        *,
        store: str | Store,
        queue: str | Queue,
        reserve: float,
        signing_key: bytes | str | None,
        clock: Callable[[], float] | None,
    ) -> None:

        self.reserve = _check_reserve(reserve)
        self._store, self._queue = store, queue
        self._key = resolve_signing_key(signing_key)
        self._clock = time.time if clock is None else clock

    def __call__(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        _check_scheduled(event)
        store, queue = store_of(self._store), queue_of(self._queue)
        timed = Timed(queue, context, self.reserve)
        finished = relay_once(store, timed, self._key, self._clock)
        return {"relayed": timed.sent, "finished": finished}


def _check_scheduled(event: Mapping[str, Any]) -> None:
    if not isinstance(event, Mapping) or "Records" in event:
        raise InvalidInputError("the relay handler takes an EventBridge scheduled event, not queue records")
    kind = event.get("detail-type", SCHEDULED_EVENT)
    if kind != SCHEDULED_EVENT:
        raise InvalidInputError(f"the relay handler takes a {SCHEDULED_EVENT!r}, not {kind!r}")


def schedule_handler(
    *,
    store: str | Store,
    queue: str | Queue,
    reserve: float = 2.0,
    signing_key: bytes | str | None = None,
    clock: Callable[[], float] | None = None,
) -> RelayHandler:
    """A handler for an EventBridge schedule (``rate(1 minute)``): one outbox relay pass.

    It sends the continuations that are due (a ``submit`` that died before sending, a wake-up
    whose own send failed) and returns ``{"relayed": N, "finished": bool}``; it stops sending while
    ``reserve`` seconds are left (``finished`` False: the next run sends the rest). An event
    that is not a ``Scheduled Event`` is an :class:`~idemflow.errors.InvalidInputError`.

    >>> from idemflow.stores import MemoryStore
    >>> from idemflow.worker import MemoryQueue
    >>> relay = schedule_handler(store=MemoryStore(), queue=MemoryQueue())
    >>> relay({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}, FixedContext(5_000))
    {'relayed': 0, 'finished': True}
    """
    return RelayHandler(store=store, queue=queue, reserve=reserve, signing_key=signing_key, clock=clock)


def http_handler(
    store: str | Store,
    *,
    key_header: str = KEY_HEADER,
    status: int = 200,
    refusals: Mapping[str, int] | None = None,
    policy: RetryPolicy | None = None,
    reserve: float = 1.0,
    max_body_bytes: int = 1 << 20,
    name: str | None = None,
    cache: AnswerCache | Literal["default"] | None = "default",
) -> Callable[[Callable[[HttpRequest], Any]], HttpHandler]:
    """Make a workflow an exactly-once HTTP endpoint on Lambda: API Gateway REST APIs (payload
    1.0), HTTP APIs (1.0 or 2.0) and Function URLs.

    The decorated function (a ``@workflow``-style generator, or a function returning an
    ``Idem``) gets an :class:`HttpRequest` and is run with ``@idempotent`` under the request's
    ``key_header`` (case-insensitive); its result is the JSON body of a ``status`` answer, and
    a duplicate gets the same body, with ``Idempotent-Replayed: true`` when no step of it
    committed. Duplicates are compared on method, path, query and body: a key reused for
    another request is 422. Errors answer as :mod:`idemflow.asgi` does (``{"error", "detail"}``;
    ``refusals`` maps abort codes to statuses); no key or a body that is not JSON is 400 and a
    body over ``max_body_bytes`` 413, before anything is written. The invocation's remaining
    time, less ``reserve`` seconds, bounds how long each step retries (then 503 with
    ``Retry-After``: the client retries with the same key). The store (an object, or a URL
    opened once per sandbox) is flushed before the handler returns.

    >>> from idemflow import atomic
    >>> from idemflow.stores import MemoryStore
    >>> @http_handler(MemoryStore())
    ... def place(request):
    ...     order = request.body
    ...     yield atomic("orders", order["id"], lambda tx: tx.increment("placed"))
    ...     return {"placed": order["id"]}
    >>> event = {"version": "2.0", "rawPath": "/orders", "headers": {"idempotency-key": "k-1"},
    ...          "requestContext": {"http": {"method": "POST"}}, "body": '{"id": "o-1"}',
    ...          "isBase64Encoded": False}
    >>> first, again = place(event, FixedContext(10_000)), place(event, FixedContext(10_000))
    >>> first["statusCode"], first["body"], again["body"], again["headers"][REPLAYED_HEADER]
    (200, '{"placed":"o-1"}', '{"placed":"o-1"}', 'true')
    """

    if not isinstance(key_header, str) or not key_header.strip():
        raise InvalidInputError(f"key_header must be a header name, not {key_header!r}")
    if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status < 300:
        raise InvalidInputError(f"status must be a success status (200-299), not {status!r}")
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise InvalidInputError(f"max_body_bytes must be a positive int, not {max_body_bytes!r}")
    options = HttpOptions(
        key_header=key_header.strip(),
        status=status,
        refusals=dict(refusals or {}),
        policy=policy or DEFAULT_POLICY,
        reserve=_check_reserve(reserve),
        max_body_bytes=max_body_bytes,
        name=name,
        cache=AnswerCache() if cache == "default" else cache,
    )

    def decorate(function: Callable[[HttpRequest], Any]) -> HttpHandler:
        return HttpHandler(function, store=store, options=options)

    return decorate
