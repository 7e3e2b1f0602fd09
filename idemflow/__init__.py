"""idemflow: exactly-once multi-step workflows without a coordinator.

The idempotence monad of Ramalingam & Vaswani (POPL 2013): a workflow is a
chain of atomic steps, each a transaction on one partition of one table; each
step's result is memoized in the same atomic write as its data, keyed by
``(workflow, request id, step number)``. Duplicates, retries after crashes
and racing executions then have the effect of one failure-free run.

>>> from idemflow import MemoryStore, atomic, run, workflow
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

from idemflow._lazy import load_optional
from idemflow.aggregates import ShardedCounter
from idemflow.answer_cache import AnswerCache
from idemflow.arunner import arun, arun_result
from idemflow.codecs import register_codec
from idemflow.coordination import Child, receive, send, sleep, sleep_until, start, wait
from idemflow.errors import (
    RENAMED,
    BackendError,
    ChildAborted,
    CompensationError,
    ConfigurationError,
    ConflictError,
    EffectTimeoutError,
    ErrorCode,
    IdemflowError,
    IdempotencyKeyReuseError,
    InvalidInputError,
    InvalidNameError,
    InvalidValueError,
    LimitExceededError,
    MessageNotDeliveredError,
    NonDeterminismError,
    RequestFailedError,
    StepFailedError,
    TransientError,
    VersionNotHeldError,
    WorkflowAborted,
    deprecated_error,
)
from idemflow.handlers import idempotent, idempotent_function
from idemflow.helpers import effect, now, random, uuid4
from idemflow.monad import Idem, atomic, bind, pure
from idemflow.policy import RetryPolicy
from idemflow.reads import aget, arows, get, rows
from idemflow.records import RunRecord, RunStatus
from idemflow.runner import Workflow, run, run_result, workflow
from idemflow.step_retry import StepRetry
from idemflow.stores import _LAZY, MemoryStore, SqliteStore, Store, open_store
from idemflow.tx import Tx

__all__ = [
    "AnswerCache",
    "BackendError",
    "Child",
    "ChildAborted",
    "CompensationError",
    "ConfigurationError",
    "ConflictError",
    "EffectTimeoutError",
    "ErrorCode",
    "Idem",
    "IdemflowError",
    "IdempotencyKeyReuseError",
    "InvalidInputError",
    "InvalidNameError",
    "InvalidValueError",
    "LimitExceededError",
    "MemoryStore",
    "MessageNotDeliveredError",
    "NonDeterminismError",
    "RequestFailedError",
    "RetryPolicy",
    "RunRecord",
    "RunStatus",
    "ShardedCounter",
    "SqliteStore",
    "StepFailedError",
    "StepRetry",
    "Store",
    "TransientError",
    "Tx",
    "VersionNotHeldError",
    "Workflow",
    "WorkflowAborted",
    "aget",
    "arows",
    "arun",
    "arun_result",
    "atomic",
    "bind",
    "effect",
    "get",
    "idempotent",
    "idempotent_function",
    "now",
    "open_store",
    "pure",
    "random",
    "receive",
    "register_codec",
    "rows",
    "run",
    "run_result",
    "send",
    "sleep",
    "sleep_until",
    "start",
    "uuid4",
    "wait",
    "workflow",
]


def __getattr__(name: str) -> object:
    # The cloud stores need optional extras: resolve them lazily. Error names before 1.0 warn.
    if name in RENAMED:
        return deprecated_error(__name__, name)
    return load_optional(__name__, name, _LAZY)
