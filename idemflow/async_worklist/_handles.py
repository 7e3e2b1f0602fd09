"""A submitted request from the outside: its status as the run record tells (``status``,
``astatus``) and the handle ``submit`` and ``asubmit`` return (:class:`Pending`,
:class:`AsyncPending`), which polls that status until the request finishes.

Reading where a request stands needs no submission machinery (a client may only hold a request
id), so the status and the handles live apart from the submission that creates them.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, Retrying, retry_if_result, wait_fixed

from idemflow.core.memos import incarnation_number
from idemflow.errors import RequestCancelledError, RequestFailedError, WorkflowAborted
from idemflow.records import Failure, RunRecord, RunStatus
from idemflow.running.runner import run_status
from idemflow.running.runner_asyncio import arun_status
from idemflow.serialization import JSON
from idemflow.stores.base import AsyncStore, Store


@dataclass(frozen=True, slots=True)
class RequestStatus:
    """Where a request stands and its outcome.

    ``status`` is ``unknown | running | completed | aborted | failed | cancelled``;
    ``reason`` an abort's reason, or an operator's for a cancel;
    ``version`` the workflow version it runs on; ``failure`` why it failed;
    ``waiting`` why no worker could run it yet (e.g. no worker holds its version) or what it
    waits for (``sleeping until ...``, a child, a message); ``incarnation`` which incarnation of
    the request the record is (1, then one more at each ``continue_as_new``).
    """

    status: RunStatus
    result: JSON = None
    reason: JSON = None
    version: int = 1
    failure: Failure | None = None
    waiting: str | None = None
    incarnation: int = 1

    @classmethod
    def of(cls, record: RunRecord) -> RequestStatus:
        reason = record.cancel_reason if record.status is RunStatus.CANCELLED else record.reason
        number = incarnation_number(record.incarnation)
        return cls(
            record.status, record.result, reason, record.version, record.failure, record.waiting, number
        )


def status(store: Store, workflow: str, request_id: str) -> RequestStatus:
    """The status of a request as its run record tells (``unknown`` if it has none)."""
    return _status_of(run_status(store, workflow, request_id))


async def astatus(store: Store | AsyncStore, workflow: str, request_id: str) -> RequestStatus:
    """:func:`status`, awaitable."""
    return _status_of(await arun_status(store, workflow, request_id))


def _status_of(record: RunRecord | None) -> RequestStatus:
    return RequestStatus(RunStatus.UNKNOWN) if record is None else RequestStatus.of(record)


_NOT_YET = object()


def _not_yet(answer: Any) -> bool:
    return answer is _NOT_YET


class _Handle:
    """What both handles share: the request they stand for and its outcome once known.

    ``outcome`` is the final :class:`RequestStatus` when it is known without
    asking the store: ``submit`` saw the request finish (it completed or
    aborted before any checkpoint, or was a duplicate of a finished request),
    or this handle already read a final status.
    """

    def __init__(
        self,
        workflow: str,
        request_id: str,
        outcome: RequestStatus | None,
        clock: Callable[[], float],
    ) -> None:
        self.workflow = workflow
        self.request_id = request_id
        self.outcome = outcome
        self._clock = clock

    def _seen(self, current: RequestStatus) -> RequestStatus:
        if current.status.final:
            self.outcome = current  # final: it never changes again
        return current

    def _answer(self, current: RequestStatus, deadline: float | None) -> Any:
        """The result of a finished request (or its error raised), else ``_NOT_YET``."""
        if current.status is RunStatus.COMPLETED:
            return current.result
        if current.status is RunStatus.ABORTED:
            raise WorkflowAborted(current.reason, self.workflow, self.request_id)
        if current.status is RunStatus.FAILED and current.failure is not None:
            failure = current.failure
            raise RequestFailedError(
                self.workflow,
                self.request_id,
                failure.step,
                failure.reason,
                failure.attempts,
                failure.identity,
            )
        if current.status is RunStatus.CANCELLED:  # at once: nothing of it runs until a retry
            raise RequestCancelledError(self.workflow, self.request_id, current.reason)
        if deadline is not None and self._clock() >= deadline:
            raise TimeoutError(f"request {self.request_id!r} of {self.workflow!r} not finished")
        return _NOT_YET

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.workflow}/{self.request_id}>"


class Pending(_Handle):
    """A handle on a request :func:`submit` submitted, asked through a blocking store.

    ``sleep`` and ``clock`` (monotonic seconds) pace :meth:`result`'s polling.
    :func:`asubmit` gives an :class:`AsyncPending` instead: each API has its
    own handle, so awaiting a blocking one (or blocking on an asynchronous
    one) is a type error mypy reports, not a failure at run time.

    >>> from idemflow.stores import MemoryStore
    >>> Pending(MemoryStore(), "checkout", "o-1").status().value
    'unknown'
    """

    def __init__(
        self,
        store: Store,
        workflow: str,
        request_id: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        outcome: RequestStatus | None = None,
    ) -> None:
        super().__init__(workflow, request_id, outcome, clock)
        self.store = store
        self._sleep = sleep

    def _current(self) -> RequestStatus:
        if self.outcome is None:
            return self._seen(status(self.store, self.workflow, self.request_id))
        return self.outcome

    def status(self) -> RunStatus:
        """``unknown | running | completed | aborted | failed | cancelled``."""
        return self._current().status

    def result(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        """Wait for the workers to finish; the result, or :class:`WorkflowAborted`.

        Raises :class:`~idemflow.errors.RequestFailedError` for a request that
        ended ``failed``, :class:`~idemflow.errors.RequestCancelledError` as soon as it reads
        ``cancelled`` (an operator's retry may resume it: a later call waits again), and
        :class:`TimeoutError` if not finished within ``timeout`` seconds.
        """
        deadline = None if timeout is None else self._clock() + timeout
        polling = Retrying(sleep=self._sleep, wait=wait_fixed(poll), retry=retry_if_result(_not_yet))
        return polling(lambda: self._answer(self._current(), deadline))


class AsyncPending(_Handle):
    """A handle on a request :func:`asubmit` submitted: :class:`Pending`, awaitable.

    It polls the store with ``asyncio.sleep``, never blocking the event loop.

    >>> import asyncio
    >>> from idemflow.stores import MemoryStore
    >>> asyncio.run(AsyncPending(MemoryStore(), "checkout", "o-1").status()).value
    'unknown'
    """

    def __init__(
        self,
        store: Store | AsyncStore,
        workflow: str,
        request_id: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        outcome: RequestStatus | None = None,
    ) -> None:
        super().__init__(workflow, request_id, outcome, clock)
        self.store = store

    async def _current(self) -> RequestStatus:
        if self.outcome is None:
            return self._seen(await astatus(self.store, self.workflow, self.request_id))
        return self.outcome

    async def status(self) -> RunStatus:
        """``unknown | running | completed | aborted | failed | cancelled``."""
        return (await self._current()).status

    async def result(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        """Wait for the workers to finish: :meth:`Pending.result`, awaitable."""
        deadline = None if timeout is None else self._clock() + timeout

        async def answer() -> Any:
            return self._answer(await self._current(), deadline)

        return await AsyncRetrying(wait=wait_fixed(poll), retry=retry_if_result(_not_yet))(answer)

    async def aresult(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        """Deprecated: :meth:`result` (an asynchronous handle's methods are awaited by their names)."""
        warnings.warn(
            "AsyncPending.aresult() is deprecated: await pending.result()", DeprecationWarning, stacklevel=2
        )
        return await self.result(timeout, poll)

    async def astatus(self) -> RunStatus:
        """Deprecated: :meth:`status`."""
        warnings.warn(
            "AsyncPending.astatus() is deprecated: await pending.status()", DeprecationWarning, stacklevel=2
        )
        return await self.status()
