"""Amazon SQS as the work queue (boto3), with a ``<name>-dlq`` queue for dead letters.

Why SQS: it is the managed at-least-once queue on AWS, with the visibility
timeouts, receive counts and long polling a worker needs. Receives long-poll
(``WaitTimeSeconds``, at most 20 s per call); ``deliveries`` is SQS's
``ApproximateReceiveCount``. Bodies are sent as plain text; the few
characters SQS refuses (and the empty body) are escaped reversibly
(:func:`~idemflow.async_worklist.queues.base.encode_wire`).

Unlike SQLite, Azure and memory, SQS itself does not refuse an ack or extend
with an old receipt handle, so a stale holder may still delete its message.

Requests and responses are built and read in
:mod:`idemflow.async_worklist.queues._sqs_calls`, shared with
:class:`~idemflow.async_worklist.queues.sqs_async.AsyncSqsQueue`.

>>> from idemflow.async_worklist.queues import SqsQueue
>>> queue = SqsQueue("jobs", endpoint_url="http://127.0.0.1:5000")  # doctest: +SKIP
>>> queue.send('{"step": 2}')  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.exceptions import BotoCoreError

from idemflow.async_worklist.queues._sqs_calls import (
    CONFIG,
    MAX_DELAY,
    MAX_VISIBILITY,
    SQS_MAX_BODY_BYTES,
    Calls,
    Open,
    Pause,
    SdkCall,
    SqsCalls,
    check_options,
    sqs_error,
)
from idemflow.async_worklist.queues.base import DeadLetter, Message, Queue
from idemflow.core.backlog import QueueStats
from idemflow.core.sdk_calls import drive
from idemflow.errors import ConfigurationError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["MAX_DELAY", "MAX_VISIBILITY", "SQS_MAX_BODY_BYTES", "SqsQueue"]

T = TypeVar("T")


class SqsQueue(Queue):
    """A :class:`~idemflow.async_worklist.queues.Queue` on an SQS standard queue.

    Pass ``client`` to reuse a configured boto3 client (credentials chain,
    retries); otherwise one is built from ``endpoint_url`` and
    ``region_name``. With ``create`` the queue and its ``<name>-dlq`` are
    created when missing (14-day retention); without it a missing queue is a
    :class:`~idemflow.errors.ConfigurationError`.

    >>> SqsQueue("no spaces allowed")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    idemflow.errors.InvalidNameError: invalid SQS queue name 'no spaces allowed': use 1-76 letters, ...
    """

    max_body_bytes = SQS_MAX_BODY_BYTES

    def __init__(
        self,
        name: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        visibility_timeout: float = 30.0,
        client: SQSClient | None = None,
        create: bool = True,
    ) -> None:
        self.visibility_timeout = check_options(name, visibility_timeout)
        self.name = name
        self._owns_client = client is None
        if client is None:
            try:
                client = boto3.client(
                    "sqs", endpoint_url=endpoint_url, region_name=region_name, config=CONFIG
                )
            except (BotoCoreError, ValueError) as exc:
                raise ConfigurationError(
                    f"cannot build an SQS client for queue {name!r}: {exc}", backend="sqs"
                ) from exc
        self._client = client
        self._calls = SqsCalls(name, create, functools.partial(sqs_error, name))
        self._run(self._calls.open())

    @property
    def client(self) -> SQSClient:
        """The boto3 client (for tools, and :meth:`AsyncSqsQueue.twin_of`)."""
        return self._client

    def __repr__(self) -> str:
        return f"SqsQueue({self.name!r})"

    def send(self, body: str, *, delay: float = 0.0) -> None:
        self._run(self._calls.send(body, delay, self.max_body_bytes))

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        """Up to ``min(max_messages, 10)`` messages (SQS's per-call limit), long-polling up to ``wait``."""
        vt = self.visibility_timeout if visibility_timeout is None else visibility_timeout
        return self._run(self._calls.receive(max_messages, wait, vt))

    def ack(self, message: Message) -> None:
        self._run(self._calls.ack(message))

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        self._run(self._calls.nack(message, delay))

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        return self._run(self._calls.extend(message, visibility_timeout))

    def dead_letter(self, message: Message, reason: str) -> None:
        """Send body and reason (a message attribute) to ``<name>-dlq``, then delete the original."""
        self._run(self._calls.dead_letter(message, reason, self.max_body_bytes))

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        """The dead letters, read by receiving them briefly and making them visible again at once.

        SQS has no peek; this is for operators and tests, not for a hot path.
        ``dead_at`` is when the dead letter reached ``<name>-dlq``.
        """
        return self._run(self._calls.list_dead_letters(limit))

    def redrive(self, ids: Iterable[str] | None = None) -> int:
        """Receive each from ``<name>-dlq``, send its body to the queue, then delete it from the dlq.

        A dead letter being moved is hidden from other redrives and listings
        for 30 s. A crash between the send and the delete duplicates it (see
        :meth:`Queue.redrive`), harmless for idemflow's continuations.
        """
        return self._run(self._calls.redrive(ids))

    def approximate_size(self) -> int:
        return self._run(self._calls.approximate_size())

    def stats(self) -> QueueStats:
        """SQS's approximate visible, delayed and in-flight counts (seconds behind, one call)."""
        return self._run(self._calls.stats())

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def _run(self, calls: Calls[T]) -> T:
        return drive(calls, self._invoke)

    def _invoke(self, call: SdkCall) -> Any:
        if isinstance(call, Pause):
            time.sleep(call.seconds)
            return None
        if isinstance(call, Open):
            return self._run(self._calls.open())
        return getattr(self._client, call.operation)(**call.kwargs)
