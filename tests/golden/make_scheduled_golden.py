"""Golden rows of delayed and prioritised requests (``python -m tests.golden.make_scheduled_golden OUT``).

Format revision 5 stores when a delayed request may start (``in.nb``) and the lane of a
prioritised one (``in.ln``) with its input. Such requests wait in the store and the queue across
a deploy, so their rows are pinned as this release leaves them, none started: ``later-lea``
submitted with ``delay=3600``, ``at-ned`` with ``not_before=`` half an hour on, ``high-hal`` and
``low-lou`` with ``priority="high"`` and ``"low"``, ``soon-sue`` delayed 1200 s *and* high;
``nap-nia``, low, whose workflow sleeps after its first step (its timer must go back to its
lane); ``parent-pam``, low, whose child and the child's wake-up must take its lane; and
``lost-lia``, high, whose submitter met its queue down: only its outbox entry says it is due,
and the relay learns its lane from ``in.ln`` alone. Every message is kept with its lane and the
time it becomes visible, as the queue holds it.
``tests/test_golden.py`` loads them into every store and finishes them on this version.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

from idemflow import Tx, atomic, checkpoint, sleep, start, wait, workflow
from idemflow.client import submit
from idemflow.errors import QueueError
from idemflow.stores import MemoryStore
from idemflow.worker import LanedQueue, MemoryQueue
from tests.golden.make_golden import write_golden

NOW = 1_800_000_000.0
"""The clock the rows were written under."""

DUE = {"later-lea": NOW + 3600, "at-ned": NOW + 1800, "soon-sue": NOW + 1200}
"""When each delayed request may start."""

NAP = 3000.0
"""How long ``nap-nia`` sleeps after its first step: past the queues' 900-second hop."""


def take_turn(tx: Tx) -> int:
    """The order in which workers took the requests' steps, across every request."""
    turn: int = (tx.get("turns") or 0) + 1
    tx.put("turns", turn)
    return turn


@workflow("g-sched")
def scheduled(who: str) -> Any:
    yield checkpoint()  # nothing runs in the submitter: a worker takes every step
    turn: int = yield atomic("tablea", "order", take_turn, name="turn")
    yield atomic("tablea", who, lambda tx: tx.increment("ran"), name="run")
    return turn


@workflow("g-nap")
def napping(who: str) -> Any:
    yield checkpoint()
    first: int = yield atomic("tablea", "order", take_turn, name="turn")
    yield sleep(NAP)
    second: int = yield atomic("tablea", "order", take_turn, name="turn again")
    yield atomic("tablea", who, lambda tx: tx.increment("ran"), name="run")
    return [first, second]


@workflow("g-parent")
def parent(who: str) -> Any:
    yield checkpoint()
    child = yield start(scheduled(who), request_id="kid-" + who)
    return (yield wait(child))


WORKFLOWS = [scheduled, napping, parent]


class Lane(MemoryQueue):
    """One lane of the written queue, keeping each message sent with when it becomes visible."""

    def __init__(self, lane: str, sent: list[dict[str, Any]]) -> None:
        super().__init__(clock=lambda: NOW)
        self.lane, self.sent = lane, sent

    def send(self, body: str, *, delay: float = 0.0) -> None:
        super().send(body, delay=delay)
        self.sent.append({"lane": self.lane, "body": body, "visible_at": NOW + delay})


class Down(MemoryQueue):
    """A lane refusing every send: the submitter's queue was down."""

    def send(self, body: str, *, delay: float = 0.0) -> None:
        raise QueueError("down", backend="memory")


def main(out: str) -> None:
    clock = lambda: NOW  # noqa: E731
    sent: list[dict[str, Any]] = []
    store = MemoryStore()
    queue = LanedQueue({lane: Lane(lane, sent) for lane in ("high", "normal", "low")})
    given: dict[str, Any] = {"store": store, "queue": queue, "clock": clock}
    submit(scheduled("lea"), request_id="later-lea", delay=3600, **given)
    ned_at = datetime.fromtimestamp(DUE["at-ned"], UTC)
    submit(scheduled("ned"), request_id="at-ned", not_before=ned_at, **given)
    submit(scheduled("hal"), request_id="high-hal", priority="high", **given)
    submit(scheduled("lou"), request_id="low-lou", priority="low", **given)
    submit(scheduled("sue"), request_id="soon-sue", delay=1200, priority="high", **given)
    submit(napping("nia"), request_id="nap-nia", priority="low", **given)
    submit(parent("pam"), request_id="parent-pam", priority="low", **given)
    down = LanedQueue({lane: Down() for lane in ("high", "normal", "low")})
    submit(scheduled("lia"), request_id="lost-lia", priority="high", **{**given, "queue": down})
    store.flush()
    write_golden(out, [store], messages=sent, now=NOW)


if __name__ == "__main__":
    main(sys.argv[1])
