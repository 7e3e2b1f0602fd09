"""Amazon SQS as the work queue (boto3), with a ``<name>-dlq`` queue for dead letters.

Why SQS: it is the managed at-least-once queue on AWS, with the visibility
timeouts, receive counts and long polling a worker needs. Receives long-poll
(``WaitTimeSeconds``, at most 20 s per call); ``deliveries`` is SQS's
``ApproximateReceiveCount``. Bodies are sent as plain text; the few
characters SQS refuses (and the empty body) are escaped reversibly
(:func:`~idemflow.async_worklist.queues.base.encode_wire`).

Unlike SQLite, Azure and memory, SQS itself does not refuse an ack or extend
with an old receipt handle, so a stale holder may still delete its message.

>>> from idemflow.async_worklist.queues import SqsQueue
>>> queue = SqsQueue("jobs", endpoint_url="http://127.0.0.1:5000")  # doctest: +SKIP
>>> queue.send('{"step": 2}')  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

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
from idemflow.errors import InvalidNameError, StoreConfigError, StoreError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

log = logging.getLogger(__name__)

SQS_MAX_BODY_BYTES = 256 * 1024 - 1024
"""SQS's 256 KiB message limit less 1 KiB kept for the dead-letter reason attribute."""
MAX_VISIBILITY = 43_200  # 12 hours
MAX_DELAY = 900  # 15 minutes
_NAME = re.compile(r"[A-Za-z0-9_-]{1,76}")  # 80 characters less "-dlq"; no FIFO queues
_MISSING = {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}
_STALE = {"ReceiptHandleIsInvalid", "AWS.SimpleQueueService.MessageNotInflight", "MessageNotInflight"}
_AUTH = {
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "AccessDenied",
    "AccessDeniedException",
    "MissingAuthenticationToken",
    "IncompleteSignature",
    "ExpiredToken",
    "InvalidAccessKeyId",
    "InvalidSecurity",
}
_TRANSIENT = {
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "ServiceUnavailable",
    "InternalError",
    "InternalFailure",
    "RequestTimeout",
    "KmsThrottled",
}
_SQS = Service("SQS", "access refused", "check the AWS credentials and policy")
_SIZE_ATTRIBUTES = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]


class SqsQueue(Queue):
    """A :class:`~idemflow.async_worklist.queues.Queue` on an SQS standard queue.

    Pass ``client`` to reuse a configured boto3 client (credentials chain,
    retries); otherwise one is built from ``endpoint_url`` and
    ``region_name``. With ``create`` the queue and its ``<name>-dlq`` are
    created when missing (14-day retention); without it a missing queue is a
    :class:`~idemflow.errors.StoreConfigError`.

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
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidNameError(
                "SQS queue name",
                name,
                "use 1-76 letters, digits, '-' or '_' ('-dlq' is appended for dead letters)",
            )
        self.name = name
        self.visibility_timeout = float(_seconds(visibility_timeout, "visibility_timeout", 1, MAX_VISIBILITY))
        self._owns_client = client is None
        if client is None:
            config = Config(retries={"mode": "standard", "max_attempts": 4}, read_timeout=40)
            try:
                client = boto3.client(
                    "sqs", endpoint_url=endpoint_url, region_name=region_name, config=config
                )
            except (BotoCoreError, ValueError) as exc:
                raise StoreConfigError(f"cannot build an SQS client for queue {name!r}: {exc}") from exc
        self._client = client
        self._url = self._resolve(name, create)
        self._dlq_url = self._resolve(f"{name}-dlq", create) if create else None

    def __repr__(self) -> str:
        return f"SqsQueue({self.name!r})"

    def send(self, body: str, *, delay: float = 0.0) -> None:
        text = check_wire_body(body, self.max_body_bytes, f"SQS queue {self.name!r}")
        seconds = _seconds(delay, "delay", 0, MAX_DELAY)
        self._call(
            "send", self._client.send_message, QueueUrl=self._url, MessageBody=text, DelaySeconds=seconds
        )

    def receive(
        self, *, max_messages: int = 1, wait: float = 0.0, visibility_timeout: float | None = None
    ) -> list[Message]:
        """Up to ``min(max_messages, 10)`` messages (SQS's per-call limit), long-polling up to ``wait``."""
        check_max_messages(max_messages)
        vt = self.visibility_timeout if visibility_timeout is None else visibility_timeout
        hide = _seconds(vt, "visibility_timeout", 1, MAX_VISIBILITY)
        deadline = time.monotonic() + check_seconds(wait, "wait")
        while True:
            poll = max(0, min(20, int(deadline - time.monotonic() + 0.5)))  # long poll, whole seconds
            found = self._call(
                "receive",
                self._client.receive_message,
                QueueUrl=self._url,
                MaxNumberOfMessages=min(max_messages, 10),
                WaitTimeSeconds=poll,
                VisibilityTimeout=hide,
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
            messages = [_message(m) for m in found.get("Messages", [])]
            remaining = deadline - time.monotonic()
            if messages or remaining <= 0.01:
                return messages
            if poll == 0:  # under half a second left: short polls, briefly spaced
                time.sleep(min(remaining, 0.1))

    def ack(self, message: Message) -> None:
        if not self._on_message(
            "ack", self._client.delete_message, QueueUrl=self._url, ReceiptHandle=message.receipt
        ):
            log.debug("ack of SQS message %s ignored: already deleted or received elsewhere", message.id)

    def nack(self, message: Message, *, delay: float = 0.0) -> None:
        seconds = _seconds(delay, "delay", 0, MAX_VISIBILITY)
        if not self._change_visibility(self._url, message.receipt, seconds, "nack"):
            log.debug("nack of SQS message %s ignored: already deleted or received elsewhere", message.id)

    def extend(self, message: Message, visibility_timeout: float) -> Message:
        seconds = _seconds(visibility_timeout, "visibility_timeout", 1, MAX_VISIBILITY)
        if not self._change_visibility(self._url, message.receipt, seconds, "extend"):
            raise MessageLostError(
                f"cannot extend message {message.id} of SQS queue {self.name!r}: it is gone"
            )
        return message

    def dead_letter(self, message: Message, reason: str) -> None:
        """Send body and reason (a message attribute) to ``<name>-dlq``, then delete the original."""
        reason = check_reason(reason)
        text = check_wire_body(message.body, self.max_body_bytes, f"SQS queue {self.name!r}")
        attributes = {"reason": {"DataType": "String", "StringValue": reason}}
        dlq = self._dead_letter_url()
        self._call(
            "dead_letter",
            self._client.send_message,
            QueueUrl=dlq,
            MessageBody=text,
            MessageAttributes=attributes,
        )
        self.ack(message)

    def list_dead_letters(self, limit: int | None = None) -> list[DeadLetter]:
        """The dead letters, read by receiving them briefly and making them visible again at once.

        SQS has no peek; this is for operators and tests, not for a hot path.
        ``dead_at`` is when the dead letter reached ``<name>-dlq``.
        """
        limit = check_limit(limit)
        found: list[DeadLetter] = []

        def add(raw: Any) -> bool:
            found.append(_dead_letter(raw))
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
        dlq, moved = self._dead_letter_url(), 0

        def move(raw: Any) -> bool:
            nonlocal moved
            if wanted is not None and raw["MessageId"] not in wanted:
                return False
            self._call("redrive", self._client.send_message, QueueUrl=self._url, MessageBody=raw["Body"])
            moved += 1
            delete = self._client.delete_message
            if not self._on_message("redrive", delete, QueueUrl=dlq, ReceiptHandle=raw["ReceiptHandle"]):
                log.warning("dead letter %s was redriven but may still be in the dlq", raw["MessageId"])
            return True

        self._scan_dead_letters("redrive", move, lambda: wanted is not None and moved >= len(wanted))
        return moved

    def approximate_size(self) -> int:
        found = self._call(
            "approximate_size",
            self._client.get_queue_attributes,
            QueueUrl=self._url,
            AttributeNames=_SIZE_ATTRIBUTES,
        )
        return sum(int(found["Attributes"].get(name, "0")) for name in _SIZE_ATTRIBUTES)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def _resolve(self, name: str, create: bool) -> str:
        try:
            return str(self._client.get_queue_url(QueueName=name)["QueueUrl"])
        except ClientError as exc:
            if not create or _code(exc) not in _MISSING:
                raise self._error("open", exc) from exc
        except (BotoCoreError, ValueError) as exc:
            raise self._error("open", exc) from exc
        attributes = {"MessageRetentionPeriod": "1209600"}  # 14 days, SQS's maximum
        created = self._call("create", self._client.create_queue, QueueName=name, Attributes=attributes)
        return str(created["QueueUrl"])

    def _dead_letter_url(self) -> str:
        if self._dlq_url is None:
            self._dlq_url = self._resolve(f"{self.name}-dlq", False)
        return self._dlq_url

    def _scan_dead_letters(
        self, operation: str, visit: Callable[[Any], bool], done: Callable[[], bool]
    ) -> None:
        """Receive the dead letters (hidden 30 s) and ``visit`` each once, until ``done()``.

        ``visit`` returns True once it deleted one; the rest are made visible
        again at the end, also on an error. Stops after as many as the dlq
        reported, three empty (short) polls, or a batch of only seen ones.
        """
        dlq = self._dead_letter_url()
        visible = "ApproximateNumberOfMessages"
        found = self._call(
            operation, self._client.get_queue_attributes, QueueUrl=dlq, AttributeNames=[visible]
        )
        expected = int(found["Attributes"].get(visible, "0"))
        held: dict[str, str] = {}  # message id -> receipt, of those to make visible again
        seen: set[str] = set()
        empty_polls = 0
        try:
            while len(seen) < expected and empty_polls < 3 and not done():
                found = self._call(
                    operation,
                    self._client.receive_message,
                    QueueUrl=dlq,
                    MaxNumberOfMessages=10,
                    VisibilityTimeout=30,
                    MessageAttributeNames=["reason"],
                    MessageSystemAttributeNames=["SentTimestamp"],
                )
                batch = found.get("Messages", [])
                held.update((m["MessageId"], m["ReceiptHandle"]) for m in batch)
                new = [m for m in batch if m["MessageId"] not in seen]
                if batch and not new:
                    break  # the first ones are visible again: every dead letter was seen
                empty_polls = 0 if batch else empty_polls + 1
                for raw in new:
                    seen.add(raw["MessageId"])
                    if not done() and visit(raw):
                        del held[raw["MessageId"]]
        finally:
            for receipt in held.values():
                self._change_visibility(dlq, receipt, 0, operation)

    def _call(self, operation: str, call: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return call(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(operation, exc) from exc

    def _change_visibility(self, url: str, receipt: str, seconds: int, operation: str) -> bool:
        change = self._client.change_message_visibility
        return self._on_message(
            operation, change, QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=seconds
        )

    def _on_message(self, operation: str, call: Callable[..., object], **kwargs: Any) -> bool:
        """Run a call on one received message; ``False`` if SQS says the receipt is no longer valid."""
        try:
            call(**kwargs)
        except ClientError as exc:
            code = _code(exc)
            if code in _STALE or (code == "InvalidParameterValue" and "receipt" in str(exc).lower()):
                return False
            raise self._error(operation, exc) from exc
        except BotoCoreError as exc:
            raise self._error(operation, exc) from exc
        return True

    def _error(self, operation: str, exc: Exception) -> StoreError:
        where = f"{operation} on SQS queue {self.name!r}"
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError, NoRegionError)):
            return StoreConfigError(f"{where}: {exc}; configure AWS credentials and region")
        unreachable = isinstance(exc, (BotoConnectionError, HTTPClientError))
        if not isinstance(exc, ClientError):
            return queue_error(where, exc, _SQS, unreachable=unreachable, detail=f": {exc}")
        code = _code(exc)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        return queue_error(
            where,
            exc,
            _SQS,
            answer=(code, status),
            missing=code in _MISSING,
            refused=code in _AUTH,
            transient=code in _TRANSIENT,
            detail=f": {exc.response.get('Error', {}).get('Message', '')}",
        )


def _message(raw: Any) -> Message:
    count = int(raw.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
    return Message(raw["MessageId"], decode_wire(raw["Body"]), count, raw["ReceiptHandle"])


def _dead_letter(raw: Any) -> DeadLetter:
    reason = raw.get("MessageAttributes", {}).get("reason", {}).get("StringValue", "")
    sent = raw.get("Attributes", {}).get("SentTimestamp")
    return DeadLetter(raw["MessageId"], decode_wire(raw["Body"]), reason, int(sent) / 1000 if sent else None)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _seconds(value: float, what: str, low: int, high: int) -> int:
    """Whole seconds for SQS (rounded up so a message is never hidden for less than asked)."""
    return math.ceil(check_seconds(value, what, positive=low > 0, high=high))
