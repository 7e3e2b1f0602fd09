"""idemflow: exactly-once multi-step workflows without a coordinator.

This module holds what a workflow is written with: the decorators, every step, ``run`` and
``arun``, ``Tx``, the policies, ``Schedule`` (a workflow started at every tick of a cron
expression, declared beside the workflows) and the errors. The program around it uses
:mod:`idemflow.client` (submit, status, messages), :mod:`idemflow.worker` (workers, queues),
:mod:`idemflow.admin` (operators' commands) and :mod:`idemflow.stores`.

The idempotence monad of Ramalingam & Vaswani (POPL 2013): a workflow is a
chain of atomic steps, each a transaction on one partition of one table; each
step's result is memoized in the same atomic write as its data, keyed by
``(workflow, request id, step number)``. Duplicates, retries after crashes
and racing executions then have the effect of one failure-free run.

>>> from idemflow import atomic, run, workflow
>>> from idemflow.stores import MemoryStore
>>> def move(amount):
...     def body(tx):
...         tx.increment("balance", amount)
...         return amount
...     return body
>>> @workflow("transfer")
... def transfer(req):
...     yield atomic("accounts", req["src"], move(-req["amount"]))
...     yield atomic("accounts", req["dst"], move(req["amount"]))
...     return "done"
>>> store = MemoryStore()
>>> req = {"src": "alice", "dst": "bob", "amount": 5}
>>> [run(transfer(req), request_id="t-1", store=store) for _ in range(3)]
['done', 'done', 'done']
"""

from __future__ import annotations

from idemflow.aggregates import ShardedCounter
from idemflow.async_worklist._submission import checkpoint
from idemflow.codecs import register_codec
from idemflow.core.limit_spec import Concurrency, LimitGroup, Rate
from idemflow.core.moved import Moves as _Moves
from idemflow.core.moved import resolve as _resolve
from idemflow.core.policy import RetryPolicy
from idemflow.core.step_retry import StepRetry
from idemflow.engine.deterministic import effect, now, random, uuid4
from idemflow.engine.monad import Idem, abort, atomic, bind, pure
from idemflow.engine.tx import Tx
from idemflow.errors import (
    RENAMED,
    BackendError,
    ChildAborted,
    ChildCancelledError,
    CompensationError,
    ConfigurationError,
    ConflictError,
    ContinueAsNewError,
    EffectTimeoutError,
    ErrorCode,
    IdemflowError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    InvalidNameError,
    InvalidScheduleError,
    InvalidValueError,
    LimitExceededError,
    LimitReachedError,
    MessageLostError,
    MessageNotDeliveredError,
    MessageRejectedError,
    MissingIdempotencyKeyError,
    NonDeterminismError,
    QueueError,
    RequestCancelledError,
    RequestFailedError,
    RequestNotFoundError,
    StepFailedError,
    StreamClosedError,
    StreamTimeoutError,
    TransientError,
    VersionNotHeldError,
    WorkflowAborted,
    deprecated_error,
)
from idemflow.running.answer_cache import AnswerCache
from idemflow.running.coordination import Child, receive, send, sleep, sleep_until, start, wait
from idemflow.running.handlers import idempotent, idempotent_function
from idemflow.running.publishing import close_stream, set_event, write_stream
from idemflow.running.renewal import continue_as_new
from idemflow.running.runner import run, run_result
from idemflow.running.runner_asyncio import arun, arun_result
from idemflow.running.together import all_of, any_of
from idemflow.running.workflows import Workflow, workflow
from idemflow.scheduling.definition import Schedule
from idemflow.stores._opening import open_async_store, open_store

__all__ = [
    "AnswerCache",
    "BackendError",
    "Child",
    "ChildAborted",
    "ChildCancelledError",
    "CompensationError",
    "Concurrency",
    "ConfigurationError",
    "ConflictError",
    "ContinueAsNewError",
    "EffectTimeoutError",
    "ErrorCode",
    "Idem",
    "IdemflowError",
    "IdempotencyKeyReuseError",
    "InvalidInputError",
    "InvalidNameError",
    "InvalidScheduleError",
    "InvalidValueError",
    "LimitExceededError",
    "LimitGroup",
    "LimitReachedError",
    "MessageLostError",
    "MessageNotDeliveredError",
    "MessageRejectedError",
    "MissingIdempotencyKeyError",
    "NonDeterminismError",
    "QueueError",
    "Rate",
    "RequestCancelledError",
    "RequestFailedError",
    "RequestNotFoundError",
    "RetryPolicy",
    "Schedule",
    "ShardedCounter",
    "StepFailedError",
    "StepRetry",
    "StreamClosedError",
    "StreamTimeoutError",
    "TransientError",
    "Tx",
    "VersionNotHeldError",
    "Workflow",
    "WorkflowAborted",
    "abort",
    "all_of",
    "any_of",
    "arun",
    "arun_result",
    "atomic",
    "bind",
    "checkpoint",
    "close_stream",
    "continue_as_new",
    "effect",
    "idempotent",
    "idempotent_function",
    "now",
    "open_async_store",
    "open_store",
    "pure",
    "random",
    "receive",
    "register_codec",
    "run",
    "run_result",
    "send",
    "set_event",
    "sleep",
    "sleep_until",
    "start",
    "uuid4",
    "wait",
    "workflow",
    "write_stream",
]

_MOVES: _Moves = {
    "AsyncAzureTableStore": "idemflow.stores",
    "AsyncDynamoDBStore": "idemflow.stores",
    "AzureTableStore": "idemflow.stores",
    "DynamoDBStore": "idemflow.stores",
    "MemoryStore": "idemflow.stores",
    "SqliteStore": "idemflow.stores",
    "Store": "idemflow.stores",
    "RunRecord": "idemflow.admin",
    "RunStatus": "idemflow.client",
    "aget": "idemflow.client",
    "arows": "idemflow.client",
    "get": "idemflow.client",
    "rows": "idemflow.client",
    "ConsoleExposedError": "idemflow.admin",
    "ConsoleRefusedError": "idemflow.admin",
    "DeliveryRetryError": "idemflow.azure_functions",
}
"""Names this module gave before 1.0, and where they live now (docs/upgrading.md)."""


def __getattr__(name: str) -> object:
    if name in RENAMED:  # error names before 1.0 warn
        return deprecated_error(__name__, name)
    return _resolve(__name__, name, _MOVES)
