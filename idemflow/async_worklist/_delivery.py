"""One delivery as a worker holds it, and what a worker counts and logs of its deliveries.

:class:`Holder` is the message being worked on (the heartbeat swaps in each extended receipt);
:class:`Wait` and :class:`DeadlinePassed` end a delivery before its request runs; a
:class:`WorkerStats` counts the outcomes; ``event`` logs them on ``idemflow.worker``. Both
workers, the handling they share and the hosts use these, so they live apart from any of them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tenacity import wait_exponential

from idemflow import telemetry
from idemflow.async_worklist.queues.base import Message
from idemflow.async_worklist.queues.lanes import lane_of
from idemflow.core.policy import backoff
from idemflow.errors import StepFailedError
from idemflow.records import Attempts, RunRecord
from idemflow.stores.base import RowRef

log = logging.getLogger("idemflow.worker")


def event(level: int, name: str, **fields: Any) -> None:
    """One worker log event (:func:`idemflow.telemetry.log_event` on ``idemflow.worker``)."""
    telemetry.log_event(log, level, name, **fields)


@dataclass
class WorkerStats:
    """Counts since the worker started (read them after ``run`` returns)."""

    completed: int = 0
    aborted: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    retried: int = 0
    failed: int = 0
    waiting: int = 0
    relayed: int = 0
    cancelled: int = 0
    """Continuations of cancelled requests, dropped until an operator resumes them."""
    suspended: int = 0
    """Requests handed back to the queue at a sleep, a wait for a child or a receive."""
    started: float = field(default_factory=time.monotonic)

    @property
    def finished(self) -> int:
        return self.completed + self.aborted + self.duplicates


_REDELIVERY = wait_exponential(multiplier=0.1, max=30.0)
"""A failed attempt's message comes back after 0.2 s, 0.4 s, ... at most 30 s."""


def redelivery_delay(deliveries: int) -> float:
    """Seconds before a message delivered ``deliveries`` times is offered again (tenacity's wait:
    the queue, not a loop here, does the waiting)."""
    return backoff(_REDELIVERY, deliveries + 1)


class Holder:
    """The message being worked on; the heartbeat swaps in each extended receipt.

    ``lock`` (a thread's heartbeat) or ``alock`` (a task's) keeps an ack from racing an extension.
    """

    def __init__(self, message: Message) -> None:
        self.message = message
        self.lost = False
        self.seen: Attempts | None = None
        """The retry count the run record held when this delivery began (see ``_step_failed``)."""
        self.known: set[RowRef] = set()
        """The request's rows its execution met: what a long wait extends (:mod:`idemflow.stores.expiry`)."""
        self.lane = lane_of(message)
        """The lane its request's continuations go to: the message's, then its run record's."""
        self.lock = threading.Lock()
        self.alock = asyncio.Lock()


class Wait(Exception):
    """This worker cannot run the request now (version not held, code that differs)."""

    def __init__(
        self, why: str, *, bounded: bool = False, delay: float | None = None, recorded: bool = False
    ) -> None:
        super().__init__(why)
        self.why = why
        self.bounded = bounded
        """Counts toward ``max_deliveries`` (a workflow nobody here holds), then fails."""
        self.delay = delay
        """Seconds before it is offered again (None: ``version_wait``): a full limit's estimate."""
        self.recorded = recorded
        """The run record says ``why`` already: a request waiting again costs no write."""


class DeadlinePassed(Exception):
    """The request's deadline passed before it finished: end it as ``on_failure`` says."""

    def __init__(self, workflow: str, request_id: str, record: RunRecord) -> None:
        at = datetime.fromtimestamp(record.deadline or 0.0, UTC).isoformat(timespec="seconds")
        self.reason = f"deadline exceeded ({at})"
        super().__init__(self.reason)
        self.failure = StepFailedError(workflow, request_id, 0, "deadline", self.reason)
