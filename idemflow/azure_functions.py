"""Finish requests on Azure Functions (the Python v2 programming model): a queue-triggered worker
and a timer-triggered relay.

A long-lived ``idemflow worker`` receives, extends and deletes its messages and runs the outbox
relay on a thread. On Azure Functions the host does the receiving: it triggers a function with
one message, renews the message's visibility while the function runs, deletes it when the
function returns and, when the function raises, makes it visible again after ``visibilityTimeout``
or moves it to ``<queue>-poison`` after ``maxDequeueCount`` deliveries (``host.json``). So:

- :func:`queue_function` handles the message with the worker's own message handling
  (:meth:`~idemflow.worker.Worker.handle`). What finished, and what was re-sent as a fresh
  delayed message (a step's retry, a timer, a wait for a version), returns normally; a malformed
  or forged message is dead-lettered to ``<queue>-dlq`` and returns normally; what must come
  back as it is (a store or queue error, a workflow no function here holds) raises
  :class:`~idemflow.errors.DeliveryRetryError`, so the host counts the delivery.
- :func:`timer_function` runs one outbox relay pass, bounded in time, and moves what the host
  put in ``<queue>-poison`` to ``<queue>-dlq``, where ``idemflow dead-letters`` lists and
  redrives it.
- :func:`schedules_function` runs one pass of the project's schedules per timer invocation.
- :func:`register` adds both to a ``func.FunctionApp`` with the decorators the host indexes.

Both functions flush the store before they return, so what an invocation wrote is durable when
the host settles the message; no thread outlives an invocation. Stores and queues given as URLs
are opened on the first invocation and kept for the process. Loading this module imports no SDK;
building a function imports the Azure Storage queue SDK to check the queue's name (a name Azure
refuses would leave the host listening on nothing), and :func:`register` ``azure.functions``,
which the app imported already.

>>> import azure.functions as func
>>> from idemflow import atomic, checkpoint, workflow
>>> @workflow("greet")
... def greet(name):
...     yield checkpoint()
...     return (yield atomic("greetings", name, lambda tx: "hello " + name))
>>> app = func.FunctionApp()
>>> url = "azure-queue:greetings?connection_string=UseDevelopmentStorage%3Dtrue"
>>> functions = register(app, [greet], store="memory:", queue=url, connection="IDEMFLOW_STORAGE")
>>> sorted(f.get_function_name() for f in app.get_functions())
['idemflow_relay', 'idemflow_worker']
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from idemflow.async_worklist._delivery import event
from idemflow.async_worklist.messages import resolve_signing_key
from idemflow.async_worklist.queues.base import Message, decode_wire
from idemflow.async_worklist.queues.memory import MemoryQueue
from idemflow.async_worklist.worker import Worker
from idemflow.errors import DeliveryRetryError, InvalidInputError
from idemflow.integrations.azure_host import Deadline, HostHeld, azure_queue_of, fold_poison, queue_name
from idemflow.integrations.lambda_queues import Timed, relay_once, store_of
from idemflow.integrations.schedule_hosts import SchedulesFunction, schedules_function
from idemflow.stores.memory import MemoryStore

if TYPE_CHECKING:
    from idemflow.async_worklist.queues.base import Message, Queue
    from idemflow.async_worklist.worker import Worker, WorkerStats
    from idemflow.core.policy import RetryPolicy
    from idemflow.core.step_retry import StepRetry
    from idemflow.running.workflows import Workflow
    from idemflow.scheduling.definition import Schedule
    from idemflow.stores.base import Store

__all__ = [
    "DeliveryRetryError",
    "QueueFunction",
    "Registered",
    "SchedulesFunction",
    "TimerFunction",
    "TriggerMessage",
    "message_of",
    "queue_function",
    "register",
    "schedules_function",
    "timer_function",
]

_FUNCTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,100}")
_SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,200}")
_TIMESPAN = re.compile(r"\d{1,2}:\d{2}:\d{2}")


class TriggerMessage(Protocol):
    """What the queue trigger's ``func.QueueMessage`` gives: its id, body, receipt and count."""

    @property
    def id(self) -> str | None: ...

    @property
    def dequeue_count(self) -> int | None: ...

    @property
    def pop_receipt(self) -> str | None: ...

    def get_body(self) -> bytes: ...


def message_of(msg: TriggerMessage) -> Message:
    """The worker's message for a trigger's ``func.QueueMessage`` (``deliveries``: its dequeue count).

    The body is the queue's text as it was sent (``host.json``: ``"messageEncoding": "none"``);
    a message without the trigger's metadata is an :class:`~idemflow.errors.InvalidInputError`.
    """

    if not all(hasattr(msg, name) for name in ("id", "dequeue_count", "pop_receipt", "get_body")):
        raise InvalidInputError(
            f"a queue trigger's function takes a func.QueueMessage, not {type(msg).__name__}"
        )
    message_id, count, receipt = msg.id, msg.dequeue_count, msg.pop_receipt
    if not isinstance(message_id, str) or not message_id or not isinstance(receipt, str):
        raise InvalidInputError("a queue trigger's message needs its id and pop_receipt")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidInputError(
            f"a queue trigger's message needs a dequeue_count of 1 or more, not {count!r}"
        )
    body = decode_wire(msg.get_body().decode("utf-8", "replace"))  # not UTF-8: rejected as malformed
    return Message(message_id, body, count, receipt)


class QueueFunction:
    """``function(msg)`` for a queue trigger on the worker's queue (see :func:`queue_function`)."""

    def __init__(
        self,
        workflows: Iterable[Workflow[Any, Any]],
        *,
        store: str | Store,
        queue: str | Queue,
        options: dict[str, Any],
    ) -> None:

        self.queue_name = queue_name(queue)
        self._flows = list(workflows)
        self._store, self._queue = store, queue
        self._options = options
        # The workflows and options are checked now, on throwaway local clients; the real ones
        # are opened by the first invocation.
        Worker(self._flows, store=MemoryStore(), queue=MemoryQueue(), relay_every=None, **options)
        self._worker: Worker | None = None
        self._held: HostHeld | None = None
        self._opening = threading.Lock()  # the host runs a batch's first messages side by side

    @property
    def max_deliveries(self) -> int:
        """Deliveries after which a request whose workflow no function here holds ends ``failed``."""
        return int(self._options["max_deliveries"])

    @property
    def stats(self) -> WorkerStats | None:
        """The worker's counts over this process's invocations (None before the first)."""
        return None if self._worker is None else self._worker.stats

    @property
    def store(self) -> Store | None:
        """The store this process opened (None before the first invocation): one per URL, shared."""
        return None if self._worker is None else self._worker.store

    def __call__(self, msg: TriggerMessage) -> None:
        """Finish the message's request; raises :class:`~idemflow.errors.DeliveryRetryError` when
        the host must deliver it again."""
        message = message_of(msg)
        worker, held = self._open()
        try:
            worker.handle(message)  # never raises: its outcome is how it settled the message
        finally:
            worker.store.flush()  # completion records: durable before the host deletes the message
        settled = held.settled(message)
        if settled is None or settled == "nack":
            halted = worker.halted
            why = (
                str(halted) if halted is not None else "a store or queue error, or no function here holds it"
            )
            raise DeliveryRetryError(message.id, message.deliveries, why) from halted

    def _open(self) -> tuple[Worker, HostHeld]:
        with self._opening:
            if self._worker is None or self._held is None:
                held = HostHeld(azure_queue_of(self._queue))
                store = store_of(self._store)
                self._worker = Worker(self._flows, store=store, queue=held, relay_every=None, **self._options)
                self._held = held
            return self._worker, self._held


def queue_function(
    workflows: Iterable[Workflow[Any, Any]],
    *,
    store: str | Store,
    queue: str | Queue,
    signing_key: bytes | str | None = None,
    max_deliveries: int = 5,
    policy: RetryPolicy | None = None,
    version_wait: float = 30.0,
    step_retry: StepRetry | None = None,
    clock: Callable[[], float] | None = None,
) -> QueueFunction:
    """A function for a queue trigger on ``queue``: it finishes each message's request as
    ``idemflow worker`` does (same options, same outcomes).

    ``queue`` is an ``azure-queue:`` URL or an ``AzureQueue``, the queue the trigger reads
    (continuations are re-sent to it); ``store`` a store URL or an open store; both are opened
    once per process, on the first invocation. ``max_deliveries`` bounds the deliveries of a
    message whose workflow no function here holds (then the request fails): keep it at most
    ``host.json``'s ``maxDequeueCount``, so idemflow decides before the host poisons the message.
    :func:`register` adds it to a ``FunctionApp``; called directly, it takes a ``func.QueueMessage``::

        worker = queue_function(WORKFLOWS, store=os.environ["STORE_URL"], queue=os.environ["QUEUE_URL"])
    """
    options: dict[str, Any] = {
        "signing_key": signing_key,
        "max_deliveries": max_deliveries,
        "policy": policy,
        "version_wait": version_wait,
        "step_retry": step_retry,
        "clock": clock,
    }
    return QueueFunction(workflows, store=store, queue=queue, options=options)


def _check_budget(budget: float) -> float:
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not 1 <= budget <= 600:
        raise InvalidInputError(f"budget must be seconds between 1 and 600, not {budget!r}")
    return float(budget)


class TimerFunction:
    """``function(timer)`` for a timer trigger: one relay pass (see :func:`timer_function`)."""

    def __init__(
        self,
        *,
        store: str | Store,
        queue: str | Queue,
        budget: float,
        signing_key: bytes | str | None,
        clock: Callable[[], float] | None,
    ) -> None:

        self.queue_name = queue_name(queue)
        self.budget = _check_budget(budget)
        self._store, self._queue = store, queue
        self._key = resolve_signing_key(signing_key)
        self._clock = time.time if clock is None else clock

    def __call__(self, timer: object = None) -> dict[str, Any]:
        """``{"relayed": N, "poisoned": M, "finished": bool}``: continuations sent, poison messages
        moved to the dead letters, and whether both were done within ``budget``."""

        deadline = Deadline(self.budget)
        store, queue = store_of(self._store), azure_queue_of(self._queue)
        timed = Timed(queue, deadline, 0.0)
        finished = relay_once(store, timed, self._key, self._clock)
        poisoned = 0
        if finished:
            poisoned, finished = fold_poison(queue, deadline.at)
        answer = {"relayed": timed.sent, "poisoned": poisoned, "finished": finished}
        past_due = bool(getattr(timer, "past_due", False))
        event(logging.INFO, "relay-run", past_due=past_due, **answer)
        return answer


def timer_function(
    *,
    store: str | Store,
    queue: str | Queue,
    budget: float = 50.0,
    signing_key: bytes | str | None = None,
    clock: Callable[[], float] | None = None,
) -> TimerFunction:
    """A function for a timer trigger (every minute): one outbox relay pass, then the host's
    poison messages moved to the dead letters, within ``budget`` seconds.

    The relay sends the continuations that are due (a ``submit`` that died before sending, a
    wake-up whose own send failed); what ``budget`` leaves unsent waits for the next run. Keep
    ``budget`` under the schedule's period and ``host.json``'s ``functionTimeout``::

        relay = timer_function(store=os.environ["STORE_URL"], queue=os.environ["QUEUE_URL"])
    """
    return TimerFunction(store=store, queue=queue, budget=budget, signing_key=signing_key, clock=clock)


@dataclass(frozen=True)
class Registered:
    """What :func:`register` added: the two functions, for their stats and for direct calls."""

    worker: QueueFunction
    relay: TimerFunction
    schedules: SchedulesFunction | None = None
    """The scheduler's pass (``register(schedules=)``), or None."""


def _check_registration(name: str, connection: str, schedule: str) -> None:
    if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
        raise InvalidInputError(f"name must be a letter then letters, digits, '_' or '-', not {name!r}")
    if not isinstance(connection, str) or not _SETTING_NAME.fullmatch(connection):
        raise InvalidInputError(f"connection must name an app setting, not {connection!r}")
    if not isinstance(schedule, str) or not (len(schedule.split()) == 6 or _TIMESPAN.fullmatch(schedule)):
        raise InvalidInputError(
            f"schedule must be an NCRONTAB expression of six fields ('0 */1 * * * *') or hh:mm:ss, "
            f"not {schedule!r}"
        )


def register(
    app: Any,
    workflows: Iterable[Workflow[Any, Any]],
    *,
    store: str | Store,
    queue: str | Queue,
    connection: str = "AzureWebJobsStorage",
    schedule: str = "0 */1 * * * *",
    name: str = "idemflow",
    budget: float = 50.0,
    signing_key: bytes | str | None = None,
    max_deliveries: int = 5,
    policy: RetryPolicy | None = None,
    version_wait: float = 30.0,
    step_retry: StepRetry | None = None,
    clock: Callable[[], float] | None = None,
    schedules: Iterable[Schedule] | None = None,
) -> Registered:
    """Add ``<name>_worker`` (a queue trigger on ``queue``) and ``<name>_relay`` (a timer trigger
    on ``schedule``) to ``app``, a ``func.FunctionApp`` (or a ``Blueprint``).

    ``connection`` names the app setting holding the storage account's connection string the
    host reads the queue with (``AzureWebJobsStorage`` by default); it must reach the same queue
    as ``queue``, which idemflow sends continuations to. With ``schedules``, a third function,
    ``<name>_schedules``, fires their ticks on the same timer (:func:`schedules_function`).
    Everything is checked here, before the
    host indexes the app; nothing is opened until an invocation::

        app = func.FunctionApp()
        register(app, WORKFLOWS, store=os.environ["IDEMFLOW_STORE"], queue=os.environ["IDEMFLOW_QUEUE"])
    """
    import azure.functions as func  # the [azure-functions] extra

    _check_registration(name, connection, schedule)
    worker = queue_function(
        workflows,
        store=store,
        queue=queue,
        signing_key=signing_key,
        max_deliveries=max_deliveries,
        policy=policy,
        version_wait=version_wait,
        step_retry=step_retry,
        clock=clock,
    )
    relay = timer_function(store=store, queue=queue, budget=budget, signing_key=signing_key, clock=clock)
    passes = None
    if schedules is not None:
        passes = schedules_function(schedules, store=store, queue=queue, signing_key=signing_key, clock=clock)

    def on_message(msg: func.QueueMessage) -> None:
        worker(msg)

    def on_timer(timer: func.TimerRequest) -> None:
        relay(timer)

    # The host reads the annotations with typing.get_type_hints: give it the classes themselves.
    on_message.__annotations__ = {"msg": func.QueueMessage, "return": None}
    on_timer.__annotations__ = {"timer": func.TimerRequest, "return": None}
    trigger = app.queue_trigger(arg_name="msg", queue_name=worker.queue_name, connection=connection)
    app.function_name(name=f"{name}_worker")(trigger(on_message))
    timed = app.timer_trigger(arg_name="timer", schedule=schedule, run_on_startup=False, use_monitor=True)
    app.function_name(name=f"{name}_relay")(timed(on_timer))
    if passes is not None:
        fire = passes

        def on_schedules(timer: func.TimerRequest) -> None:
            fire(timer)

        on_schedules.__annotations__ = {"timer": func.TimerRequest, "return": None}
        ticking = app.timer_trigger(
            arg_name="timer", schedule=schedule, run_on_startup=False, use_monitor=True
        )
        app.function_name(name=f"{name}_schedules")(ticking(on_schedules))
    return Registered(worker, relay, passes)
