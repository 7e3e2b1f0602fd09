"""The SQS queues' calls, sans I/O: one copy for the blocking and the asyncio queue.

As for DynamoDB (:mod:`idemflow.stores._dynamodb_calls`, whose :class:`SdkCall`,
:func:`drive` and :func:`adrive` these reuse), each queue operation is a
generator that *yields* an :class:`SdkCall` and is sent the response, or has
the SDK's exception thrown in at the ``yield``. Two descriptions are no client
call: :class:`Pause` (wait between short polls) and :class:`Open` (the queue's
URL is not known yet: resolve it, then send it back).
:class:`~idemflow.async_worklist.queues.sqs.SqsQueue` answers them on a boto3
client, :class:`~idemflow.async_worklist.queues.sqs_async.AsyncSqsQueue` awaits
them on an aiobotocore client. So argument checks, requests, the receive loop,
"gone" receipts and the mapping of SDK errors onto idemflow's exist once.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

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
from idemflow.core.backlog import QueueStats
from idemflow.core.sdk_calls import Calls, SdkCall
from idemflow.errors import BackendError, ConfigurationError, ErrorCode, InvalidNameError, MessageLostError
from idemflow.stores._aws_errors import answer_of, api_name, classify, classify_sdk

log = logging.getLogger("idemflow.async_worklist.queues.sqs")

SQS_MAX_BODY_BYTES = 256 * 1024 - 1024
"""SQS's 256 KiB message limit less 1 KiB kept for the dead-letter reason attribute."""
MAX_VISIBILITY = 43_200  # 12 hours
MAX_DELAY = 900  # 15 minutes
CONFIG = Config(retries={"mode": "standard", "max_attempts": 4}, read_timeout=40)
"""The botocore configuration of both queues' own clients (a long poll lasts up to 20 s)."""
_NAME = re.compile(r"[A-Za-z0-9_-]{1,76}")  # 80 characters less "-dlq"; no FIFO queues
_STALE = {"ReceiptHandleIsInvalid", "AWS.SimpleQueueService.MessageNotInflight", "MessageNotInflight"}
_SQS = Service("sqs", "SQS", "access refused", "check the AWS credentials and policy")
_SIZE_ATTRIBUTES = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]


@dataclass(frozen=True, slots=True)
class Pause(SdkCall):
    """No client call: the driver waits ``seconds``, then sends None."""

    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Open(SdkCall):
    """No client call: the driver resolves the queue (:meth:`SqsCalls.open`, once), then sends its URL."""


_OPEN = Open("open", {})

ErrorMap = Callable[[str, Exception, str], BackendError]
"""``(operation, SDK exception, client method) -> idemflow error``: :func:`sqs_error` for one queue."""


def check_options(name: object, visibility_timeout: float) -> float:
    """The queue's visibility timeout, once its name and the timeout are valid for SQS."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidNameError(
            "SQS queue name",
            name,
            "use 1-76 letters, digits, '-' or '_' ('-dlq' is appended for dead letters)",
        )
    return float(_seconds(visibility_timeout, "visibility_timeout", 1, MAX_VISIBILITY))


class SqsCalls:
    """The operations of the SQS queue ``name`` (and ``<name>-dlq``), as :data:`Calls`.

    ``url`` and ``dlq_url`` are None until resolved; ``error`` maps a failed call.
    """

    def __init__(self, name: str, create: bool, error: ErrorMap) -> None:
        self.name = name
        self.create = create
        self.error = error
        self.url: str | None = None
        self.dlq_url: str | None = None
        self._where = f"SQS queue {name!r}"

    def open(self) -> Calls[str]:
        """Resolve the queue and (with ``create``) its dead-letter queue, creating missing ones."""
        url = yield from self._resolve(self.name, self.create)
        if self.create:
            self.dlq_url = yield from self._resolve(f"{self.name}-dlq", True)
        self.url = url
        return url

    # -- operations --------------------------------------------------------------------------------

    def send(self, body: str, delay: float, max_body_bytes: int) -> Calls[None]:
        text = check_wire_body(body, max_body_bytes, self._where)
        seconds = _seconds(delay, "delay", 0, MAX_DELAY)
        url = yield from self.queue_url()
        yield from self.call("send", "send_message", QueueUrl=url, MessageBody=text, DelaySeconds=seconds)

    def receive(self, max_messages: int, wait: float, visibility_timeout: float) -> Calls[list[Message]]:
        """Up to ``min(max_messages, 10)`` messages (SQS's per-call limit), long-polling up to ``wait``."""
        check_max_messages(max_messages)
        hide = _seconds(visibility_timeout, "visibility_timeout", 1, MAX_VISIBILITY)
        deadline = time.monotonic() + check_seconds(wait, "wait")
        url = yield from self.queue_url()
        while True:
            poll = max(0, min(20, int(deadline - time.monotonic() + 0.5)))  # long poll, whole seconds
            found = yield from self.call(
                "receive",
                "receive_message",
                QueueUrl=url,
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
                yield Pause("pause", {}, seconds=min(remaining, 0.1))

    def ack(self, message: Message) -> Calls[None]:
        url = yield from self.queue_url()
        if not (
            yield from self._on_message("ack", "delete_message", QueueUrl=url, ReceiptHandle=message.receipt)
        ):
            log.debug("ack of SQS message %s ignored: already deleted or received elsewhere", message.id)

    def nack(self, message: Message, delay: float) -> Calls[None]:
        seconds = _seconds(delay, "delay", 0, MAX_VISIBILITY)
        url = yield from self.queue_url()
        if not (yield from self._change_visibility(url, message.receipt, seconds, "nack")):
            log.debug("nack of SQS message %s ignored: already deleted or received elsewhere", message.id)

    def extend(self, message: Message, visibility_timeout: float) -> Calls[Message]:
        seconds = _seconds(visibility_timeout, "visibility_timeout", 1, MAX_VISIBILITY)
        url = yield from self.queue_url()
        if not (yield from self._change_visibility(url, message.receipt, seconds, "extend")):
            raise MessageLostError(
                f"cannot extend message {message.id} of {self._where}: it is gone",
                backend="sqs",
                operation="ChangeMessageVisibility",
            )
        return message

    def dead_letter(self, message: Message, reason: str, max_body_bytes: int) -> Calls[None]:
        """Send body and reason (a message attribute) to ``<name>-dlq``, then delete the original."""
        reason = check_reason(reason)
        text = check_wire_body(message.body, max_body_bytes, self._where)
        attributes = {"reason": {"DataType": "String", "StringValue": reason}}
        dlq = yield from self.dead_letter_url()
        send = {"QueueUrl": dlq, "MessageBody": text, "MessageAttributes": attributes}
        yield from self.call("dead_letter", "send_message", **send)
        yield from self.ack(message)

    def list_dead_letters(self, limit: int | None) -> Calls[list[DeadLetter]]:
        """The dead letters, read by receiving them briefly and making them visible again at once."""
        limit = check_limit(limit)
        found: list[DeadLetter] = []

        def add(raw: Any) -> Calls[bool]:
            found.append(_dead_letter(raw))
            yield from ()
            return False  # leave it in the dlq

        done = lambda: limit is not None and len(found) >= limit  # noqa: E731
        yield from self._scan_dead_letters("list_dead_letters", add, done)
        return found

    def redrive(self, ids: Iterable[str] | None) -> Calls[int]:
        """Receive each from ``<name>-dlq``, send its body to the queue, then delete it from the dlq."""
        wanted = check_ids(ids)
        if wanted is not None and not wanted:
            return 0
        url = yield from self.queue_url()
        dlq, moved = (yield from self.dead_letter_url()), 0

        def move(raw: Any) -> Calls[bool]:
            nonlocal moved
            if wanted is not None and raw["MessageId"] not in wanted:
                return False
            yield from self.call("redrive", "send_message", QueueUrl=url, MessageBody=raw["Body"])
            moved += 1
            receipt = raw["ReceiptHandle"]
            if not (
                yield from self._on_message("redrive", "delete_message", QueueUrl=dlq, ReceiptHandle=receipt)
            ):
                log.warning("dead letter %s was redriven but may still be in the dlq", raw["MessageId"])
            return True

        done = lambda: wanted is not None and moved >= len(wanted)  # noqa: E731
        yield from self._scan_dead_letters("redrive", move, done)
        return moved

    def approximate_size(self) -> Calls[int]:
        url = yield from self.queue_url()
        args = {"QueueUrl": url, "AttributeNames": _SIZE_ATTRIBUTES}
        found = yield from self.call("approximate_size", "get_queue_attributes", **args)
        return sum(int(found["Attributes"].get(name, "0")) for name in _SIZE_ATTRIBUTES)

    def stats(self) -> Calls[QueueStats]:
        """The three ``ApproximateNumberOf*`` attributes in one call; no lag (CloudWatch has it)."""
        url = yield from self.queue_url()
        args = {"QueueUrl": url, "AttributeNames": _SIZE_ATTRIBUTES}
        found = (yield from self.call("stats", "get_queue_attributes", **args))["Attributes"]
        visible, held, delayed = (int(found.get(name, "0")) for name in _SIZE_ATTRIBUTES)
        return QueueStats(
            self.name, visible, delayed, held, visible + held + delayed, lag_source="cloudwatch"
        )

    # -- queues ------------------------------------------------------------------------------------

    def queue_url(self) -> Calls[str]:
        """The queue's URL; if not resolved yet, asks the driver to :meth:`open` the queue."""
        return self.url or str((yield _OPEN))

    def dead_letter_url(self) -> Calls[str]:
        if self.dlq_url is None:
            self.dlq_url = yield from self._resolve(f"{self.name}-dlq", False)
        return self.dlq_url

    def _resolve(self, name: str, create: bool) -> Calls[str]:
        try:
            return str((yield SdkCall("get_queue_url", {"QueueName": name}))["QueueUrl"])
        except ClientError as exc:
            if not create or classify(_code(exc), 0) is not ErrorCode.NOT_FOUND:
                raise self.error("open", exc, "get_queue_url") from exc
        except (BotoCoreError, ValueError) as exc:
            raise self.error("open", exc, "get_queue_url") from exc
        attributes = {"MessageRetentionPeriod": "1209600"}  # 14 days, SQS's maximum
        created = yield from self.call("create", "create_queue", QueueName=name, Attributes=attributes)
        return str(created["QueueUrl"])

    def _scan_dead_letters(
        self, operation: str, visit: Callable[[Any], Calls[bool]], done: Callable[[], bool]
    ) -> Calls[None]:
        """Receive the dead letters (hidden 30 s) and ``visit`` each once, until ``done()``.

        ``visit`` returns True once it deleted one; the rest are made visible
        again at the end, also on an error. Stops after as many as the dlq
        reported, three empty (short) polls, or a batch of only seen ones.
        """
        dlq = yield from self.dead_letter_url()
        visible = "ApproximateNumberOfMessages"
        found = yield from self.call(
            operation, "get_queue_attributes", QueueUrl=dlq, AttributeNames=[visible]
        )
        expected = int(found["Attributes"].get(visible, "0"))
        held: dict[str, str] = {}  # message id -> receipt, of those to make visible again
        seen: set[str] = set()
        empty_polls = 0
        try:
            while len(seen) < expected and empty_polls < 3 and not done():
                found = yield from self.call(
                    operation,
                    "receive_message",
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
                    if not done() and (yield from visit(raw)):
                        del held[raw["MessageId"]]
        finally:
            for receipt in held.values():
                yield from self._change_visibility(dlq, receipt, 0, operation)

    # -- calls and errors --------------------------------------------------------------------------

    def call(self, operation: str, method: str, **kwargs: Any) -> Calls[Any]:
        """``client.<method>(**kwargs)``, its SDK failure mapped by :attr:`error`."""
        try:
            return (yield SdkCall(method, kwargs))
        except (ClientError, BotoCoreError) as exc:
            raise self.error(operation, exc, method) from exc

    def _change_visibility(self, url: str, receipt: str, seconds: int, operation: str) -> Calls[bool]:
        change = {"QueueUrl": url, "ReceiptHandle": receipt, "VisibilityTimeout": seconds}
        return (yield from self._on_message(operation, "change_message_visibility", **change))

    def _on_message(self, operation: str, method: str, **kwargs: Any) -> Calls[bool]:
        """Run a call on one received message; ``False`` if SQS says the receipt is no longer valid."""
        try:
            yield SdkCall(method, kwargs)
        except ClientError as exc:
            code = _code(exc)
            if code in _STALE or (code == "InvalidParameterValue" and "receipt" in str(exc).lower()):
                return False
            raise self.error(operation, exc, method) from exc
        except BotoCoreError as exc:
            raise self.error(operation, exc, method) from exc
        return True


def sqs_error(name: str, operation: str, exc: Exception, method: str | None = None) -> BackendError:
    """The idemflow error for ``exc``, raised by ``operation`` (the client's ``method``) on the queue
    ``name``: classified by the AWS table the DynamoDB store reads too."""
    where = f"{operation} on SQS queue {name!r}"
    api = api_name(method) if method else None
    if isinstance(exc, ClientError):
        code, message, status = answer_of(exc)
        meant, api = classify(code, status), exc.operation_name or api
        return queue_error(where, _SQS, meant, api, code or str(status), status, f": {message}")
    meant = classify_sdk(exc) if isinstance(exc, BotoCoreError) else ErrorCode.BACKEND_FAILED
    if meant is ErrorCode.MISCONFIGURED:
        return ConfigurationError(
            f"{where}: {exc}; configure AWS credentials and region",
            backend="sqs",
            operation=api,
            service_code=type(exc).__name__,
        )
    return queue_error(where, _SQS, meant, api, type(exc).__name__, detail=f": {exc}")


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


__all__ = ["CONFIG", "MAX_DELAY", "MAX_VISIBILITY", "SQS_MAX_BODY_BYTES", "Calls", "ErrorMap", "Open"]
__all__ += ["Pause", "SdkCall", "SqsCalls", "check_options", "sqs_error"]
