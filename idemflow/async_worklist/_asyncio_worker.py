"""The asyncio worker: :class:`~idemflow.worker.Worker` with tasks for threads.

The same decisions about every message (:mod:`idemflow.async_worklist._handling`:
reject, wait for a version, finish on the version a request started with,
retry, fail or compensate), the same outbox relay and the same log events;
only the concurrency differs. ``concurrency`` consumer tasks share one event
loop, each message's visibility is kept by a heartbeat task, and store and
queue calls are awaited on their SDKs' asynchronous clients (blocking ones
run on threads of their own). Many requests in flight then cost tasks, not
threads: ``idemflow worker --asyncio --concurrency 64``.

>>> import asyncio
>>> from idemflow import atomic, workflow
>>> from idemflow.stores import MemoryStore
>>> from idemflow import checkpoint
>>> from idemflow.client import submit
>>> from idemflow.worker import MemoryQueue
>>> @workflow("greet")
... def greet(name):
...     yield checkpoint()
...     return (yield atomic("tablea", name, lambda tx: "hello " + name))
>>> store, queue = MemoryStore(), MemoryQueue()
>>> pending = submit(greet("ada"), request_id="g-1", store=store, queue=queue)
>>> asyncio.run(AsyncWorker([greet], store=store, queue=queue).run(idle_timeout=0.2)).completed
1
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from idemflow import telemetry
from idemflow.async_worklist._delivery import Holder, WorkerStats, event
from idemflow.async_worklist._handling import Handling
from idemflow.async_worklist._queue_answers import on_async_queue
from idemflow.async_worklist.outbox import relay_steps
from idemflow.async_worklist.queues.async_adapters import AsyncQueue, to_async_queue
from idemflow.async_worklist.queues.base import Message, Queue
from idemflow.core.policy import RetryPolicy
from idemflow.core.step_retry import StepRetry
from idemflow.engine.drive_asyncio import adrive
from idemflow.errors import MessageLostError
from idemflow.running.workflows import Workflow
from idemflow.stores.async_adapters import sync_reader, to_async
from idemflow.stores.base import AsyncStore, Store

__all__ = ["AsyncWorker"]


class AsyncWorker(Handling):
    """Drains ``queue`` on the event loop; the arguments are :class:`Worker`'s.

    ``store`` and ``queue`` are asynchronous (``AsyncDynamoDBStore``,
    ``AsyncSqsQueue`` ...) or blocking ones, then used from threads of their
    own. ``concurrency`` is the number of consumer tasks.
    """

    def __init__(
        self,
        workflows: Iterable[Workflow[Any, Any]],
        *,
        store: Store | AsyncStore,
        queue: Queue | AsyncQueue,
        concurrency: int = 1,
        signing_key: bytes | str | None = None,
        max_deliveries: int = 5,
        policy: RetryPolicy | None = None,
        wait: float = 0.5,
        version_wait: float = 30.0,
        relay_every: float | None = 10.0,
        clock: Callable[[], float] | None = None,
        step_retry: StepRetry | None = None,
    ) -> None:
        target = to_async(store)
        super().__init__(
            workflows,
            store=target,
            reader=sync_reader(target),
            signing_key=signing_key,
            max_deliveries=max_deliveries,
            policy=policy,
            version_wait=version_wait,
            clock=clock,
            step_retry=step_retry,
        )
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.store = target
        self.queue = to_async_queue(queue)
        self.concurrency = concurrency
        self.wait = wait
        self.relay_every = relay_every
        self._stop = asyncio.Event()  # replaced by run(): an Event belongs to the loop that waits on it
        self._stop_asked = False
        self._busy = 0
        self._last_activity = time.monotonic()

    def stop(self) -> None:
        """Stop taking messages; what is held is finished (or released by its timeout).

        Call it on the worker's loop (or through ``loop.call_soon_threadsafe``). It ends the run
        under way, or, asked between runs, the next one at once; a later run works again."""
        self._stop_asked = True
        self._stop.set()

    async def run(
        self,
        idle_timeout: float | None = None,
        *,
        on_progress: Callable[[WorkerStats], None] | None = None,
        progress_every: float = 5.0,
    ) -> WorkerStats:
        """Work until stopped (SIGTERM/SIGINT in the main thread) or idle ``idle_timeout`` seconds;
        a :class:`~idemflow.errors.ConfigurationError` stops it and is raised (see :meth:`Worker.run`)."""
        self._stop = asyncio.Event()
        if self._stop_asked:
            self._stop.set()
        restore = self._install_signal_handlers()
        unwatch = telemetry.watch_async_queue(self.queue, asyncio.get_running_loop())
        tasks = [
            asyncio.create_task(self._consume(), name=f"idemflow-worker-{n}") for n in range(self.concurrency)
        ]
        if self.relay_every is not None:
            tasks.append(asyncio.create_task(self._relay_loop(), name="idemflow-relay"))
        next_progress = time.monotonic() + progress_every
        try:
            while not await self._stopped_within(0.05) and self.halted is None:
                now = time.monotonic()
                if on_progress is not None and now >= next_progress:
                    on_progress(self.stats)
                    next_progress = now + progress_every
                idle = self._busy == 0 and now - self._last_activity >= (idle_timeout or 0.0)
                if idle_timeout is not None and idle:
                    self._stop.set()
        finally:
            self._stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._stop_asked = False  # this run's stop: the next run works again
            unwatch()
            restore()
        if self.halted is not None:
            raise self.halted
        return self.stats

    async def relay(self) -> int:
        """Send the continuations due in the outbox now (the relay task calls this)."""
        sent = await adrive(relay_steps(self.key, self.clock), self.store, on_async_queue(self.queue))
        self._relayed(sent)
        if sent:
            self._last_activity = time.monotonic()
        return sent

    async def handle(self, message: Message) -> bool:
        """Process one message to ack, nack or dead letter; never raises (see :meth:`Worker.handle`)."""
        holder = Holder(message)
        heart = asyncio.create_task(self._heartbeat(holder))
        fields: dict[str, Any] = {"queue_message": message.id, "attempt": message.deliveries}
        try:
            with telemetry.span(
                "idemflow.queue.receive", queue_message=message.id, attempt=message.deliveries
            ):
                return await adrive(self._settle(holder, fields), self.store, on_async_queue(self.queue))
        except Exception as exc:  # noqa: BLE001 - redelivered after the visibility timeout
            if not self.halt(exc):
                event(logging.WARNING, "handling-failed", error=repr(exc), **fields)
            return True
        finally:
            heart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heart

    async def _stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return self._stop.is_set()

    async def _relay_loop(self) -> None:
        assert self.relay_every is not None
        while True:
            try:
                await self.relay()
            except Exception as exc:  # noqa: BLE001 - the next pass tries again
                if self.halt(exc):
                    return
                event(logging.WARNING, "relay-failed", error=repr(exc))
            if await self._stopped_within(self.relay_every):
                return

    async def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                messages = await self.queue.receive(max_messages=1, wait=self.wait)
            except Exception as exc:  # noqa: BLE001 - a queue that failed to receive: try again shortly
                if self.halt(exc):
                    return
                event(logging.WARNING, "receive-failed", error=repr(exc))
                await self._stopped_within(1.0)
                continue
            for message in messages:
                self._busy += 1
                progressed = False
                try:
                    progressed = await self.handle(message)
                finally:
                    self._busy -= 1
                    if progressed:  # a request only offered back is not activity
                        self._last_activity = time.monotonic()

    async def _heartbeat(self, holder: Holder) -> None:
        timeout = self.queue.visibility_timeout
        period = max(timeout / 3.0, 0.05)
        while True:
            await asyncio.sleep(period)
            async with holder.alock:
                try:
                    holder.message = await self.queue.extend(holder.message, timeout)
                except MessageLostError:
                    holder.lost = True  # another worker has it now; the memos keep this safe
                    return
                except Exception as exc:  # noqa: BLE001 - a missed beat only risks a duplicate run
                    event(logging.WARNING, "extend-failed", error=repr(exc))

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT)

        def graceful(signum: signal.Signals) -> None:
            event(logging.INFO, "stopping", signal=signum.name)
            self.stop()

        try:
            for sig in signals:
                loop.add_signal_handler(sig, graceful, sig)
        except (NotImplementedError, RuntimeError):  # not on this platform or loop
            return lambda: None

        def restore() -> None:
            for sig in signals:
                loop.remove_signal_handler(sig)

        return restore
