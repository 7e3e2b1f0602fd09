"""Durable timers, child workflows and messages between workflows.

Each is a step like ``atomic``: yielded by a workflow, numbered, memoized,
replayed. In the asynchronous variant (``submit`` and workers) a step that
must wait does not hold a worker: the request is *suspended* and its
continuation is queued for when it can go on.

- ``yield sleep(seconds)`` / ``yield sleep_until(timestamp)``: the due time
  is memoized when first reached (a resumed request never sleeps again from
  the start); a worker re-queues the continuation with a delay, re-delaying
  past the queue's longest delay (SQS: 15 minutes) until it is due. A worker
  down at the due time runs it when it comes back.
- ``child = yield start(child_wf(input), request_id=...)``: claims the child
  request (its own id, status and run record, its input stored) exactly
  once, in the same commit as the parent's step where the store commits
  across partitions (DynamoDB, SQLite), else claim first, step second, a
  rerun meeting the claim (Azure Tables). Its continuation goes through the
  outbox: sent at once by a worker, by a relay if that send is lost.
- ``result = yield wait(child)``: the child's result once it finished, or
  :class:`~idemflow.errors.ChildAborted` thrown where the parent waits. The
  child's outcome wakes the parent (an outbox row committed with it).
- ``yield send(workflow, request_id, topic, value)``: a message into another
  request, exactly once (a resent step meets its own message), woken like a
  child's parent. ``value = yield receive(topic, timeout=)``: the next
  message on ``topic``, marked taken in the same commit as the step's memo;
  each sender's messages in the order sent; None, memoized, once the timeout
  (counted from the first time the step is reached) passed.

Under :func:`idemflow.run` and :func:`idemflow.arun` nothing is queued: a
sleep sleeps in the process (``time.sleep`` / ``asyncio.sleep``) until the
memoized due time, a wait runs the child right there if nobody finished it
(or polls one that runs on another version), a receive polls its inbox. A
child started under ``run`` and not waited for is run by a worker's relay.

>>> from idemflow import run, workflow
>>> from idemflow.stores import MemoryStore
>>> @workflow("child-doc")
... def kid(n):
...     return n * 2
...     yield
>>> @workflow("parent-doc")
... def parent(n):
...     child = yield start(kid(n), request_id=f"kid-{n}")
...     return (yield wait(child))
>>> run(parent(21), request_id="p-1", store=MemoryStore())
42
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

from idemflow.engine.monad import Bind, Call, Child, Deadline, Idem, Post, Receive, Start, Until, WaitFor
from idemflow.errors import InvalidInputError, InvalidValueError
from idemflow.keys import check_request_id, check_workflow_name
from idemflow.running.request_spec import describe_request
from idemflow.running.workflows import Workflow
from idemflow.serialization import encode

__all__ = ["Child", "receive", "send", "sleep", "sleep_until", "start", "wait"]

SLEEP_LABEL = "sleep"
"""What a sleep's due time is called (its step's identity)."""
TIMEOUT_LABEL = "deadline "
"""What a receive's timeout is called, before its topic (its step's identity)."""

MAX_WAIT = 366 * 24 * 3600.0
"""The longest sleep or receive timeout accepted (a year): a longer one is most likely a unit
mistake (milliseconds given as seconds)."""


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidValueError(what, f"must be a finite number of seconds, not {value!r}")
    if not 0 <= value <= MAX_WAIT:
        raise InvalidValueError(what, f"must be between 0 and {MAX_WAIT:g} seconds, not {value!r}")
    return float(value)


def _timestamp(value: object, what: str) -> float:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise InvalidValueError(what, "a datetime needs a time zone (naive times are ambiguous)")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidValueError(what, f"must be epoch seconds or an aware datetime, not {value!r}")
    return float(value)


def _then(first: Idem[Any], function: Any) -> Idem[Any]:
    return Idem(Bind(first.node, function))


def sleep(seconds: float) -> Idem[None]:
    """Go on ``seconds`` after this step is first reached (the due time is memoized)."""
    wanted = _seconds(seconds, "sleep")
    return _then(Idem(Deadline(wanted, None, SLEEP_LABEL)), lambda due: Idem(Until(due)))


def sleep_until(timestamp: float | _dt.datetime) -> Idem[None]:
    """Go on once the clock reaches ``timestamp`` (epoch seconds or an aware ``datetime``)."""
    at = _timestamp(timestamp, "sleep_until")
    return _then(Idem(Deadline(None, at, SLEEP_LABEL)), lambda due: Idem(Until(due)))


def start(m: Idem[Any], *, request_id: str, on_parent_abort: str = "abort") -> Idem[Child]:
    """Start ``m`` (a ``@workflow`` call) as a request of its own, exactly once; a :class:`Child`.

    The child's input is checked and fingerprinted here, before any write. Starting the
    same ``request_id`` with another input raises
    :class:`~idemflow.errors.IdempotencyKeyReuseError` in the parent.

    ``on_parent_abort`` says what happens to the child if this request is undone (a later
    abort, ``on_failure="compensate"``, an operator's abort, a deadline): ``"abort"`` (the
    default) aborts a child still unfinished, in reverse order with the other compensations,
    so its own compensations run (a child that already finished is left as it ended);
    ``"abandon"`` lets it go on by itself.
    """
    call = m.node if isinstance(m, Idem) else None
    if not isinstance(call, Call):
        raise InvalidInputError("start() needs a @workflow call, e.g. start(child(input), request_id=...)")
    check_request_id(request_id)
    if on_parent_abort not in ("abort", "abandon"):
        raise InvalidInputError(f"on_parent_abort must be 'abort' or 'abandon', not {on_parent_abort!r}")
    request = describe_request(m)
    return Idem(
        Start(
            call,
            request_id,
            request.version,
            request.fingerprint,
            request.aliases,
            request.input(),
            on_parent_abort,
        )
    )


def wait(child: Child | Workflow[Any, Any] | str, request_id: str | None = None) -> Idem[Any]:
    """The result of a child once it finished (:class:`~idemflow.errors.ChildAborted` if it aborted).

    Give the :class:`Child` ``start`` returned, or a workflow (or its name) and a request id to
    wait for any request. A request that ended ``failed`` is waited for until an operator
    retries or aborts it (under ``run``: :class:`~idemflow.errors.RequestFailedError`).
    """
    if isinstance(child, Child):
        return Idem(WaitFor(child.workflow, child.request_id, child.call))
    name = child.name if isinstance(child, Workflow) else child
    if request_id is None:
        raise InvalidInputError("wait() needs the Child start() gave, or a workflow and a request_id")
    return Idem(WaitFor(check_workflow_name(name), check_request_id(request_id), None))


def send(workflow: Workflow[Any, Any] | str, request_id: str, topic: str, value: Any) -> Idem[None]:
    """Deliver ``value`` on ``topic`` to the request ``request_id`` of ``workflow``, exactly once.

    The message waits in the receiver's partition until a ``receive(topic)`` of that request
    takes it, even if the request has not started yet; a receiver waiting for it is woken.
    """
    name = workflow.name if isinstance(workflow, Workflow) else workflow
    check_workflow_name(name)
    check_request_id(request_id)
    _check_topic(topic)
    encode(value, f"message to {name!r} {request_id!r} on {topic!r}")  # refused before any write
    return Idem(Post(name, request_id, topic, value))


def receive(topic: str, *, timeout: float | None = None) -> Idem[Any]:
    """The next message sent to this request on ``topic``; None once ``timeout`` seconds passed.

    Without a timeout it waits for as long as it takes. The timeout counts from the first
    time the step is reached (memoized, as a sleep's due time), so a resumed request does not
    wait it again from the start.
    """
    _check_topic(topic)
    if timeout is None:
        return Idem(Receive(topic, None))
    wanted = _seconds(timeout, "receive timeout")
    return _then(Idem(Deadline(wanted, None, TIMEOUT_LABEL + topic)), lambda due: Idem(Receive(topic, due)))


def _check_topic(topic: object) -> str:
    if not isinstance(topic, str) or not 1 <= len(topic) <= 100:
        raise InvalidValueError("topic", f"must be text of 1 to 100 characters, not {topic!r}")
    if not topic.isascii():  # a topic is part of row keys and memo identities: stored as UTF-8
        try:
            topic.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidValueError("topic", f"{topic!r} holds a lone surrogate, not valid unicode") from None
    return topic
