"""What the Azure Functions host does with a function app's queue and timer triggers, for tests.

The host itself (azure-functions-core-tools) cannot be installed here, so this stands in for
it, as its queue extension documents and implements it (QueueListener, QueueProcessor):

- it reads the app's functions from ``FunctionApp.get_functions()`` and checks each as the
  Python worker does when it loads it (parameters named as the bindings,
  ``typing.get_type_hints`` giving types the bindings' converters accept);
- it receives up to ``batchSize`` messages from the trigger's queue, with the connection string
  of the app setting the binding names, and runs the function on each, side by side on threads;
  the body is the message's text as stored (``"messageEncoding": "none"``), with its ``id``,
  ``dequeue_count``, ``pop_receipt`` and times;
- a message already past ``maxDequeueCount`` goes to ``<queue>-poison`` without a call;
- when the function returns it deletes the message; when it raises, it copies the message to
  ``<queue>-poison`` if this was delivery ``maxDequeueCount``, else makes it visible again after
  ``visibilityTimeout``;
- a function that dies (the test raises :class:`Crash` inside it) settles nothing: the message
  comes back when its hold lapses.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
import typing
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import azure.functions as func
from azure.core.exceptions import ResourceExistsError
from azure.functions.queue import QueueMessage, QueueMessageInConverter
from azure.functions.timer import TimerRequest, TimerRequestConverter
from azure.storage.queue import QueueClient


class Crash(BaseException):
    """The function app's process dies here (nothing after it runs, nothing is settled)."""


@dataclass
class HostSettings:
    """``host.json``'s ``extensions.queues`` (visibility in seconds; the host's is a TimeSpan)."""

    max_dequeue_count: int = 5
    visibility_timeout: float = 0.0
    batch_size: int = 16


@dataclass
class Polled:
    """What one poll did with the messages it received."""

    outcomes: Counter[str] = field(default_factory=Counter)
    errors: list[BaseException] = field(default_factory=list)
    deliveries: list[int] = field(default_factory=list)
    """The dequeue count of each message received."""


def _binding(function: Any) -> dict[str, Any]:
    trigger: dict[str, Any] = function.get_trigger().get_dict_repr()
    return trigger


def loaded(function: Any) -> Any:
    """The function's Python callable, checked as the Python worker checks it when loading it."""
    user = function.get_user_function()
    trigger = _binding(function)
    params = list(inspect.signature(user).parameters)
    assert params == [trigger["name"]], f"{function.get_function_name()}: {params} vs {trigger}"
    hints = typing.get_type_hints(user)
    converter = {"queueTrigger": QueueMessageInConverter, "timerTrigger": TimerRequestConverter}
    assert converter[trigger["type"]].check_input_type_annotation(hints[trigger["name"]])
    return user


class FunctionsHost:
    """One host instance running ``app``'s queue-triggered and timer-triggered functions.

    An app with several pairs (one per priority lane) is run a pair at a time: ``name`` picks
    ``<name>_worker`` and ``<name>_relay``, and ``functions`` passes what the app already gave
    (``get_functions`` may be called once)."""

    def __init__(
        self,
        app: func.FunctionApp | None,
        settings: HostSettings | None = None,
        *,
        name: str | None = None,
        functions: list[Any] | None = None,
    ) -> None:
        self.settings = settings or HostSettings()
        if functions is None:
            assert app is not None
            functions = app.get_functions()  # once, as the host indexes an app (twice raises)
        picked = (f"{name}_worker", f"{name}_relay")
        self.functions = [f for f in functions if name is None or f.get_function_name() in picked]
        by_type = {_binding(f)["type"]: f for f in self.functions}
        queued, timed = by_type["queueTrigger"], by_type["timerTrigger"]
        self.on_message, self.on_timer = loaded(queued), loaded(timed)
        trigger = _binding(queued)
        connection = os.environ[trigger["connection"]]  # an app setting, as the host reads it
        self.queue_name = trigger["queueName"]
        self.queue = QueueClient.from_connection_string(connection, self.queue_name)
        self.poison = QueueClient.from_connection_string(connection, f"{self.queue_name}-poison")

    def poll(self, *, hold: float = 30.0, settle: bool = True, wait: float = 0.0) -> Polled:
        """One batch: receive (polling up to ``wait`` seconds for a first message), run the
        function on each message side by side, settle each (``settle`` False: the host dies after
        the calls, before settling any)."""
        deadline = time.monotonic() + wait
        while True:
            raws = list(
                self.queue.receive_messages(
                    messages_per_page=self.settings.batch_size,
                    max_messages=self.settings.batch_size,
                    visibility_timeout=max(int(hold), 1),
                )
            )
            if raws or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        polled = Polled(deliveries=sorted(raw.dequeue_count for raw in raws))
        if not raws:
            return polled
        with ThreadPoolExecutor(max_workers=len(raws)) as pool:
            for outcome in pool.map(lambda raw: self._process(raw, settle), raws):
                if isinstance(outcome, BaseException):
                    polled.errors.append(outcome)
                    outcome = type(outcome).__name__
                polled.outcomes[outcome] += 1
        return polled

    def _process(self, raw: Any, settle: bool) -> str | BaseException:
        if raw.dequeue_count > self.settings.max_dequeue_count:
            self._to_poison(raw)
            return "poisoned"
        msg = QueueMessage(  # the class the Python worker builds for a queue trigger
            id=raw.id,
            body=raw.content,
            dequeue_count=raw.dequeue_count,
            pop_receipt=raw.pop_receipt,
            insertion_time=raw.inserted_on,
            expiration_time=raw.expires_on,
            time_next_visible=raw.next_visible_on,
        )
        try:
            self.on_message(msg)
        except Crash:
            return "crashed"
        except Exception as exc:  # noqa: BLE001 - the host's failure path
            if settle:
                self._release(raw)
            return exc
        if not settle:
            return "unsettled"
        self.queue.delete_message(raw.id, raw.pop_receipt)
        return "deleted"

    def _release(self, raw: Any) -> None:
        if raw.dequeue_count >= self.settings.max_dequeue_count:
            self._to_poison(raw)
        else:
            visible = int(self.settings.visibility_timeout)
            self.queue.update_message(raw.id, raw.pop_receipt, visibility_timeout=visible)

    def _to_poison(self, raw: Any) -> None:
        with contextlib.suppress(ResourceExistsError):
            self.poison.create_queue()
        self.poison.send_message(raw.content)  # the host's copy keeps the default time to live
        self.queue.delete_message(raw.id, raw.pop_receipt)

    def tick(self, *, past_due: bool = False) -> None:
        """One run of the timer-triggered function."""
        self.on_timer(TimerRequest(past_due=past_due))

    def poisoned(self) -> list[str]:
        """The texts in ``<queue>-poison``, left where they are."""
        try:
            return [m.content for m in self.poison.peek_messages(max_messages=32)]
        except Exception:  # noqa: BLE001 - no poison queue yet
            return []
