"""Finished answers a handler keeps in memory: a duplicate in the same process costs no call.

A finished request's run record does not change again: ``completed`` and
``aborted`` are final, and the record stays until the retention window ends
(``RetryPolicy.retention``, 7 days by default). So a process that saw a
request finish may answer its duplicates from memory, as Powertools'
``use_local_cache`` does. The cache is bounded in entries (least recently
used go first) and in age, and never keeps an answer longer than the
retention window. A duplicate whose input differs from the answer's goes to
the store, which refuses it (:class:`~idemflow.errors.IdempotencyKeyReuseError`).

What it cannot know: rows deleted before their time by ``idemflow gc
--older-than D`` with ``D`` shorter than ``max_age`` are still answered from
memory by processes that kept them (until ``max_age`` passes), where the
store would take the request as new.

Each answer is kept as its stored JSON text and decoded afresh for every
duplicate: a caller (or an ``on_replay`` hook) that changes the object it got
changes nobody else's answer, as with duplicates answered by the store. A
result that is a bare scalar (a str, a number, None) needs no copy and is
handed out as kept.

>>> from idemflow.stores import MemoryStore
>>> from idemflow import idempotent_function
>>> calls = []
>>> @idempotent_function(MemoryStore(), key=lambda order: order["id"], cache=AnswerCache(max_entries=2))
... def place(order):
...     calls.append(order["id"])
...     return "placed"
>>> place({"id": "o-1"}), place({"id": "o-1"}), calls
('placed', 'placed', ['o-1'])
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from idemflow.errors import InvalidInputError
from idemflow.records import RunRecord
from idemflow.serialization import decode, encode

__all__ = ["AnswerCache"]


class AnswerCache:
    """At most ``max_entries`` finished answers, each kept at most ``max_age`` seconds."""

    def __init__(
        self, max_entries: int = 256, max_age: float = 300.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidInputError(f"AnswerCache max_entries must be an int >= 1, not {max_entries!r}")
        if (
            isinstance(max_age, bool)
            or not isinstance(max_age, (int, float))
            or not math.isfinite(max_age)
            or max_age <= 0
        ):
            raise InvalidInputError(
                f"AnswerCache max_age must be a finite number of seconds > 0, not {max_age!r}"
            )
        self.max_entries = max_entries
        self.max_age = float(max_age)
        self._clock = clock
        self._lock = threading.Lock()
        self._answers: OrderedDict[str, tuple[float, RunRecord, _Copier | None]] = OrderedDict()

    def get(self, request_id: str, matches: Callable[[str], bool]) -> RunRecord | None:
        """The finished record of ``request_id`` if kept, fresh, and of an input that ``matches``."""
        with self._lock:
            kept = self._answers.get(request_id)
            if kept is None:
                return None
            until, record, copy = kept
            if self._clock() >= until:
                del self._answers[request_id]
                return None
            self._answers.move_to_end(request_id)
        if not matches(record.fingerprint):
            return None
        return record if copy is None else copy()

    def put(self, request_id: str, record: RunRecord, retention: float) -> None:
        """Keep ``record`` if the request finished, for ``max_age`` at most, never past ``retention``."""
        if not record.status.final:
            return
        copy = _copier(record)
        until = self._clock() + min(self.max_age, retention)
        with self._lock:
            self._answers[request_id] = (until, record, copy)
            self._answers.move_to_end(request_id)
            while len(self._answers) > self.max_entries:
                self._answers.popitem(last=False)

    def clear(self) -> None:
        """Forget every answer (a test's fresh start, or after ``idemflow gc``)."""
        with self._lock:
            self._answers.clear()

    def __len__(self) -> int:
        return len(self._answers)


_Copier = Callable[[], RunRecord]
"""Makes a kept record with a result and reason of its own (decoded from their texts)."""

_SCALAR = (str, int, float, bool, type(None))
_ANSWER = ("result", "reason")
"""The fields of a record that are the answer a caller gets (and may change)."""


def _text_of(value: object) -> str | None:
    """The text a mutable value is revived from, or None for a scalar (nothing to share)."""
    return None if isinstance(value, _SCALAR) else encode(value, "a cached answer")


def _copier(record: RunRecord) -> _Copier | None:
    """How to hand out a copy of ``record``'s answer, taken when it is kept (so a first caller
    changing its own object afterwards changes nothing kept); None when it holds only scalars.

    The record is rebuilt from its fields rather than with ``dataclasses.replace``, which costs
    twice as much per duplicate."""
    texts = {name: _text_of(getattr(record, name)) for name in _ANSWER}
    revived = {name: text for name, text in texts.items() if text is not None}
    if not revived:
        return None
    others: dict[str, Any] = {name: getattr(record, name) for name in record.__slots__ if name not in revived}

    def copy() -> RunRecord:
        answer: dict[str, Any] = {name: decode(text) for name, text in revived.items()}
        return RunRecord(**others, **answer)

    return copy
