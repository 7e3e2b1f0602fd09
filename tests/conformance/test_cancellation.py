"""Cancellation as an outcome, on every store and both APIs: a waiting request reads ``cancelled``
as soon as ``cancel`` returns and its handle raises at once, its continuations run nothing, a
worker inside it stops at its next step boundary (or completes it first), a cascade reaches the
children it started, and a parent waiting on a cancelled child meets ``ChildCancelledError``."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Generator, Sequence
from typing import Any

import pytest

import idemflow
from idemflow import (
    Concurrency,
    Idem,
    StepRetry,
    atomic,
    checkpoint,
    effect,
    receive,
    sleep,
    start,
    wait,
    workflow,
)
from idemflow.admin import cancel, retry
from idemflow.client import RunStatus, send_message
from idemflow.errors import ChildCancelledError, InvalidInputError, RequestCancelledError
from idemflow.records import run_ref
from idemflow.stores import Store
from idemflow.stores.base import Op, Put
from idemflow.worker import MemoryQueue
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_outside_calls import Payments, hold
from tests.conformance.test_request_control import Meanwhile, Timer, completing, handle_visible
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api
from tests.support.workflows import rows_of

DAY = 86_400.0


def cancelling(record: Any) -> Callable[[Sequence[Op]], bool]:
    """A commit writing the request at ``record`` as cancelled (an operator's cancel)."""

    def picked(ops: Sequence[Op]) -> bool:
        return any(
            isinstance(op, Put)
            and op.ref == record
            and isinstance(op.value, dict)
            and op.value.get("status") == RunStatus.CANCELLED.value
            for op in ops
        )

    return picked


def napper(pay: Payments) -> Any:
    @workflow("napper")
    def flow(req: str) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req + "naps", hold("n"))
        yield sleep(DAY)
        yield effect(pay.charge(5), name="charge")
        return "woke"

    return flow


def test_a_request_sleeping_for_a_day_reads_cancelled_at_once_and_runs_nothing(
    store: Store, api: Api
) -> None:
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    flow = napper(pay)
    api.submit(flow(space), request_id=space, store=store, queue=queue, clock=clock)
    assert str(api.status(store, "napper", space).waiting).startswith("sleeping until")
    assert api.cancel(store, "napper", space, reason="closed") is RunStatus.RUNNING
    seen = api.status(store, "napper", space)
    assert (seen.status, seen.reason, seen.waiting) == (RunStatus.CANCELLED, "closed", "cancelled: closed")
    with pytest.raises(RequestCancelledError) as raised:  # at once: a second poll would fail
        api.result(store, "napper", space, timeout=600)
    assert (raised.value.workflow, raised.value.request_id, raised.value.reason) == (
        "napper",
        space,
        "closed",
    )
    copy = pickle.loads(pickle.dumps(raised.value))
    assert (type(copy), copy.reason, copy.code) == (RequestCancelledError, "closed", raised.value.code)
    worker = api.worker([flow], store=store, queue=queue, clock=clock)
    deliver_all(worker, queue, clock, step=DAY / 4)  # the timer's continuation comes due: dropped
    assert pay.calls == 0 and worker.stats.cancelled == 1
    assert api.status(store, "napper", space).status is RunStatus.CANCELLED
    with pytest.raises(RequestCancelledError):
        idemflow.run(flow(space), request_id=space, store=store, clock=clock)  # nor does run run it
    assert retry(store, queue, "napper", space) is RunStatus.CANCELLED  # resumed where it stopped
    deliver_all(worker, queue, clock, step=DAY / 4)
    assert api.result(store, "napper", space, timeout=0) == "woke"
    assert pay.calls == 1 and rows_of(store, space) == {("tablea", "naps", "n"): 1}


def test_a_request_blocked_in_receive_is_cancelled_and_a_message_does_not_wake_it(
    store: Store, api: Api
) -> None:
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("hearing")
    def hearing(req: str) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req + "asked", hold("n"))
        word = yield receive("word")
        yield effect(pay.charge(1), name="charge")
        return word

    api.submit(hearing(space), request_id=space, store=store, queue=queue, clock=clock)
    assert api.cancel(store, "hearing", space, reason="gave up") is RunStatus.RUNNING
    assert api.cancel(store, "hearing", space, reason="twice") is RunStatus.CANCELLED  # nothing more
    assert api.status(store, "hearing", space).reason == "gave up"
    with pytest.raises(RequestCancelledError, match="gave up"):
        api.result(store, "hearing", space)
    send_message(store, "hearing", space, "word", "hello", key=space + "m", queue=queue)
    worker = api.worker([hearing], store=store, queue=queue, clock=clock)

    def stopped() -> bool:
        return api.status(store, "hearing", space).status is RunStatus.CANCELLED

    deliver_all(worker, queue, clock, settled=stopped)
    assert pay.calls == 0 and stopped()
    retry(store, queue, "hearing", space)
    deliver_all(worker, queue, clock)
    assert api.status(store, "hearing", space).result == "hello" and pay.calls == 1


def family(pay: Payments, *, catch: bool) -> tuple[Any, Any, Any]:
    """A parent waiting on its child, which waits on a grandchild blocked in a receive; the parent
    catches its child's cancellation where it waits if ``catch``."""

    @workflow("grandkid")
    def grandkid(req: str) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req + "grandkid", hold("n"))
        yield receive("never")
        yield effect(pay.charge(1), name="grandkid charge")
        return "grandkid done"

    @workflow("kid")
    def kid(req: str) -> Generator[Idem[Any], Any, Any]:
        child = yield start(grandkid(req), request_id=req + "-grandkid")
        yield effect(pay.charge(2), name="kid charge")
        return (yield wait(child))

    @workflow("elder")
    def elder(req: str) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        child = yield start(kid(req), request_id=req + "-kid")
        try:
            return (yield wait(child))
        except ChildCancelledError as cancelled:
            if not catch:
                raise
            return f"kid cancelled: {cancelled.reason} ({cancelled.workflow} {cancelled.request_id})"

    return elder, kid, grandkid


def test_cancel_with_children_cancels_a_waiting_parent_and_its_descendants_once(
    store: Store, api: Api
) -> None:
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    flows = family(pay, catch=True)
    names = [("elder", space), ("kid", space + "-kid"), ("grandkid", space + "-grandkid")]
    api.submit(flows[0](space), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker(flows, store=store, queue=queue, clock=clock)
    handle_visible(worker, queue)  # the elder and the kid wait, the grandkid receives
    assert pay.calls == 1 and [api.status(store, *name).status for name in names] == [RunStatus.RUNNING] * 3
    assert api.cancel(store, "elder", space, reason="closing", children=True) is RunStatus.RUNNING
    for name in names:
        seen = api.status(store, *name)
        assert (seen.status, seen.reason) == (RunStatus.CANCELLED, "closing"), (name, seen)
    assert api.cancel(store, "elder", space, reason="again", children=True) is RunStatus.CANCELLED
    assert {api.status(store, *name).reason for name in names} == {"closing"}  # each cancelled once
    worker.relay()  # the wake-ups of the cancelled children's parents: delivered, dropped
    deliver_all(worker, queue, clock, settled=lambda: True)
    assert pay.calls == 1 and rows_of(store, space) == {("tablea", "grandkid", "n"): 1}
    assert [api.status(store, *name).status for name in names] == [RunStatus.CANCELLED] * 3


def test_a_parent_waiting_on_a_cancelled_child_meets_child_cancelled_error_once(
    store: Store, api: Api
) -> None:
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    flows = family(pay, catch=True)
    api.submit(flows[0](space), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker(flows, store=store, queue=queue, clock=clock)
    handle_visible(worker, queue)
    assert api.cancel(store, "kid", space + "-kid", reason="stop") is RunStatus.RUNNING  # not its child
    worker.relay()  # the kid's cancel wakes the elder
    deliver_all(worker, queue, clock, settled=lambda: api.status(store, "elder", space).result is not None)
    told = f"kid cancelled: stop (kid {space}-kid)"
    assert api.status(store, "elder", space).result == told
    assert api.status(store, "grandkid", space + "-grandkid").status is RunStatus.RUNNING
    retry(store, queue, "kid", space + "-kid")  # the kid goes on; its parent heard it once
    send_message(store, "grandkid", space + "-grandkid", "never", "now", key=space + "m", queue=queue)
    deliver_all(
        worker, queue, clock, settled=lambda: api.status(store, "kid", space + "-kid").result is not None
    )
    assert api.status(store, "kid", space + "-kid").result == "grandkid done"
    assert api.status(store, "elder", space).result == told


def test_under_run_a_child_cancelled_while_it_sleeps_stops_and_its_parent_meets_the_error(
    store: Store, api: Api
) -> None:
    """``run`` runs the child in its process; the operator cancels it during its sleep: the child
    stops at its next step, and the parent's ``wait`` raises ``ChildCancelledError``."""
    space, pay, clock = new_space(), Payments(), Timer()

    @workflow("dozer")
    def dozer(req: str) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req + "dozer", hold("n"))
        yield sleep(DAY)
        yield effect(pay.charge(2), name="charge")
        return "dozed"

    @workflow("watcher")
    def watcher(req: str) -> Generator[Idem[Any], Any, Any]:
        child = yield start(dozer(req), request_id=req + "-dozer")
        try:
            return (yield wait(child))
        except ChildCancelledError as cancelled:
            return f"dozer cancelled: {cancelled.reason}"

    answers: list[RunStatus] = []
    clock.then = lambda: answers.append(cancel(store, "dozer", space + "-dozer", reason="wake up"))
    assert api.run(watcher(space), request_id=space, store=store, clock=clock) == "dozer cancelled: wake up"
    assert answers == [RunStatus.RUNNING] and pay.calls == 0
    assert api.status(store, "dozer", space + "-dozer").status is RunStatus.CANCELLED
    assert rows_of(store, space) == {("tablea", "dozer", "n"): 1}


@pytest.mark.parametrize("waits_for", ["a retry's backoff", "a limit"])
def test_a_request_waiting_for_its_next_attempt_or_a_slot_is_dropped_when_delivered(
    store: Store, api: Api, waits_for: str
) -> None:
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    backoff = waits_for == "a retry's backoff"

    @workflow(
        "patient", retry=StepRetry(initial=60, maximum_attempts=5), concurrency=Concurrency(1, lease=DAY)
    )
    def patient(req: str) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        yield effect(pay.charge(4), name="charge")
        return "paid"

    worker = api.worker([patient], store=store, queue=queue, clock=clock)
    if backoff:
        pay.down = 1
        api.submit(patient(space), request_id=space, store=store, queue=queue, clock=clock)
        handle_visible(worker, queue)  # failed once: the next attempt is a delayed continuation
        assert pay.calls == 1 and "retrying step" in str(api.status(store, "patient", space).waiting)
    else:  # another request holds the only slot (for a day), this one waits for it
        holding = completing(run_ref("patient", space + "h"))
        hold_slot = Meanwhile(store, holding, lambda: handle_visible(worker, queue))
        holder = api.worker([patient], store=hold_slot, queue=queue, clock=clock)
        api.submit(patient(space + "h"), request_id=space + "h", store=store, queue=queue, clock=clock)
        api.submit(patient(space), request_id=space, store=store, queue=queue, clock=clock)
        holder.handle(queue.receive()[0])  # while it completes, the other is delivered and waits
        assert hold_slot.ran and pay.calls == 1
        assert "concurrency slot" in str(api.status(store, "patient", space).waiting)
    assert api.cancel(store, "patient", space) is RunStatus.RUNNING
    with pytest.raises(RequestCancelledError):
        api.result(store, "patient", space)
    deliver_all(worker, queue, clock, step=120)
    assert pay.calls == 1 and worker.stats.cancelled == 1
    assert api.status(store, "patient", space).status is RunStatus.CANCELLED


def racing(pay: Payments) -> Any:
    @workflow("racing")
    def flow(req: str) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        yield atomic("tablea", req + "first", hold("n"))
        yield effect(pay.charge(7), name="charge")
        return "done"

    return flow


@pytest.mark.parametrize("lands", ["in a step", "before the completion", "after the completion"])
def test_a_cancel_racing_a_worker_ends_the_request_one_way(store: Store, api: Api, lands: str) -> None:
    """``in a step``: the cancel lands as the worker commits its first step, which stands; the
    worker stops before the charge. ``before the completion``: it lands as the worker records the
    outcome (with the charge's memo): the charge's memo is committed alone and the request stays
    cancelled, then a retry completes it without charging again. ``after the completion``: the
    worker completes the request between the cancel's read and its write: it stays completed,
    and the cancel says so."""
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    flow = racing(pay)
    ref = run_ref("racing", space)
    answers: list[RunStatus] = []

    def operator() -> None:
        answers.append(api.cancel(store, "racing", space, reason="now"))

    api.submit(flow(space), request_id=space, store=store, queue=queue, clock=clock)
    if lands == "after the completion":
        worker = api.worker([flow], store=store, queue=queue, clock=clock)
        first = Meanwhile(store, cancelling(ref), lambda: handle_visible(worker, queue))
        answers.append(api.cancel(first, "racing", space, reason="now"))
    else:

        def first_step(ops: Sequence[Op]) -> bool:
            return any(op.ref.table == "tablea" for op in ops)

        when = first_step if lands == "in a step" else completing(ref)
        first = Meanwhile(store, when, operator)
        worker = api.worker([flow], store=first, queue=queue, clock=clock)
        handle_visible(worker, queue)
    assert first.ran
    ended = api.status(store, "racing", space)
    assert rows_of(store, space) == {("tablea", "first", "n"): 1}  # the step committed stands
    if lands == "after the completion":
        assert answers == [RunStatus.COMPLETED] and ended.result == "done" and pay.calls == 1
        return
    assert answers == [RunStatus.RUNNING] and ended.status is RunStatus.CANCELLED, (answers, ended)
    assert pay.calls == (0 if lands == "in a step" else 1) and worker.stats.cancelled == 1
    retry(store, queue, "racing", space)
    deliver_all(worker, queue, clock)
    assert api.status(store, "racing", space).result == "done" and pay.calls == 1  # the memo, replayed
    assert rows_of(store, space) == {("tablea", "first", "n"): 1}


def test_a_request_cancelled_inside_a_worker_gives_its_limit_slot_back(store: Store, api: Api) -> None:
    """The slot a worker holds for a request is given back when the cancel stops it, so the next
    request gets it at once (its lease, a day, never ended)."""
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("single", concurrency=Concurrency(1, lease=DAY))
    def single(req: str) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        yield atomic("tablea", req + "first", hold("n"))
        yield effect(pay.charge(3), name="charge")
        return "ok"

    api.submit(single(space + "a"), request_id=space + "a", store=store, queue=queue, clock=clock)
    api.submit(single(space + "b"), request_id=space + "b", store=store, queue=queue, clock=clock)
    worker = api.worker([single], store=store, queue=queue, clock=clock)

    def meanwhile() -> None:  # the other one meets the full slot, then the first is cancelled
        handle_visible(worker, queue)
        api.cancel(store, "single", space + "a", reason="stop")

    first = Meanwhile(store, lambda ops: any(op.ref.table == "tablea" for op in ops), meanwhile)
    inside = api.worker([single], store=first, queue=queue, clock=clock)
    inside.handle(queue.receive()[0])
    assert first.ran and inside.stats.cancelled == 1 and pay.calls == 0
    assert "concurrency slot" in str(api.status(store, "single", space + "b").waiting)
    deliver_all(worker, queue, clock, step=60)  # 20 minutes at most: far inside the lease
    assert api.status(store, "single", space + "b").result == "ok" and pay.calls == 1
    assert api.status(store, "single", space + "a").status is RunStatus.CANCELLED


def test_cancel_refuses_what_it_cannot_cancel_before_writing_anything(store: Store, api: Api) -> None:
    space = new_space()

    @workflow("ran-here")
    def ran_here(req: str) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req + "x", hold("n"))
        if req.endswith("!"):
            raise RuntimeError("left unfinished")
        return "done"

    with pytest.raises(InvalidInputError, match="no request"):
        api.cancel(store, "ran-here", space)
    api.run(ran_here(space), request_id=space, store=store)
    assert api.cancel(store, "ran-here", space) is RunStatus.COMPLETED  # finished: left as it is
    with pytest.raises(InvalidInputError, match="reason"):
        api.cancel(store, "ran-here", space, reason=["not", "text"])
    assert api.status(store, "ran-here", space).result == "done"
    with pytest.raises(RuntimeError):
        api.run(ran_here(space + "!"), request_id=space + "!", store=store)
    with pytest.raises(InvalidInputError, match="started by run"):  # no input stored to resume from
        api.cancel(store, "ran-here", space + "!")
    assert api.status(store, "ran-here", space + "!").status is RunStatus.RUNNING
