"""Ending and stopping requests on every store and both APIs: deadlines enforced by a durable
timer, an operator's cancel and resume, and what happens to a child when its parent is undone."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any

import pytest

import idemflow
from idemflow import (
    Idem,
    StepRetry,
    abort,
    atomic,
    checkpoint,
    effect,
    receive,
    sleep,
    sleep_until,
    start,
    uuid4,
    wait,
    workflow,
)
from idemflow.admin import abort_request, cancel, retry
from idemflow.client import RunStatus
from idemflow.engine.memo_reader import WAIT_ABORTED
from idemflow.errors import ChildAborted, InvalidInputError, WorkflowAborted
from idemflow.records import RunRecord, run_ref
from idemflow.stores import Store
from idemflow.stores.base import CommitOutcome, Insert, Op, Put, RowRef
from idemflow.testing import StoreWrapper
from idemflow.worker import MemoryQueue
from tests.conformance.test_continuations import Clock, deliver_all
from tests.conformance.test_outside_calls import Payments, hold, release
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api
from tests.support.workflows import rows_of


def awaiting(pay: Payments, *, on_failure: str = "fail", timeout: float | None = 600) -> Any:
    """Hold a seat and charge, then wait for a confirmation that may never come."""

    @workflow("awaiting", on_failure=on_failure, timeout=timeout)  # type: ignore[arg-type]
    def flow(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req["space"] + "seats", hold("held"), compensate=release("held"))
        yield effect(pay.charge(req["amount"]), compensate=pay.refund, name="charge")
        yield checkpoint()
        return (yield receive("confirm"))  # no timeout of its own: only the deadline ends it

    return flow


@pytest.mark.parametrize("on_failure", ["fail", "compensate"])
def test_a_deadline_ends_a_request_nothing_else_would_wake(store: Store, on_failure: str, api: Api) -> None:
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    flow = awaiting(pay, on_failure=on_failure)
    pending = api.submit(
        flow({"space": space, "amount": 20}), request_id=space, store=store, queue=queue, clock=clock
    )
    deliver_all(api.worker([flow], store=store, queue=queue, clock=clock), queue, clock, step=300)
    ended = api.status(store, "awaiting", space)
    if on_failure == "compensate":
        assert ended.status is RunStatus.ABORTED and "deadline exceeded" in str(ended.reason)
        assert pay.kept() == 0 and rows_of(store, space) == {("tablea", "seats", "held"): 0}
    else:
        assert ended.status is RunStatus.FAILED and ended.failure is not None
        assert "deadline exceeded" in ended.failure.reason and pay.kept() == 20
    assert pending.status() is ended.status


def test_submit_takes_an_earlier_deadline_and_a_copy_keeps_the_first(store: Store, api: Api) -> None:
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    flow = awaiting(pay, timeout=None)
    req = {"space": space, "amount": 3}
    api.submit(flow(req), request_id=space, store=store, queue=queue, clock=clock, deadline=clock.now + 60)
    api.submit(flow(req), request_id=space, store=store, queue=queue, clock=clock, deadline=clock.now + 10**6)
    worker = api.worker([flow], store=store, queue=queue, clock=clock)
    worker.handle(queue.receive()[0])  # now waiting for its confirmation
    assert api.status(store, "awaiting", space).status is RunStatus.RUNNING
    clock.now += 61
    deliver_all(worker, queue, clock)
    assert api.status(store, "awaiting", space).status is RunStatus.FAILED
    with pytest.raises(InvalidInputError, match="deadline"):
        api.submit(flow(req), request_id=space + "x", store=store, queue=queue, deadline=float("nan"))
    with pytest.raises(InvalidInputError, match="timeout"):
        workflow("bad-timeout", timeout=-1)


def test_a_cancelled_request_runs_no_step_until_it_is_resumed(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)

    @workflow("stoppable")
    def stoppable(req: str) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req + "a", hold("n"))
        yield checkpoint()
        yield atomic("tablea", req + "b", hold("n"))
        return "done"

    api.submit(stoppable(space), request_id=space, store=store, queue=queue, clock=clock)
    assert cancel(store, "stoppable", space, reason="investigating") is RunStatus.RUNNING
    assert cancel(store, "stoppable", space) is RunStatus.CANCELLED  # twice: nothing more
    worker = api.worker([stoppable], store=store, queue=queue, clock=clock)
    deliver_all(worker, queue, clock)
    stopped = api.status(store, "stoppable", space)
    assert stopped.status is RunStatus.CANCELLED and stopped.waiting == "cancelled: investigating"
    assert worker.stats.cancelled == 1
    assert rows_of(store, space) == {("tablea", "a", "n"): 1}  # nothing undone, nothing run
    assert retry(store, queue, "stoppable", space) is RunStatus.CANCELLED  # resume
    deliver_all(worker, queue, clock)
    assert api.status(store, "stoppable", space).result == "done"
    assert rows_of(store, space) == {("tablea", "a", "n"): 1, ("tablea", "b", "n"): 1}


def parent_and_child(pay: Payments, on_parent_abort: str) -> tuple[Any, Any]:
    @workflow("reminder")
    def reminder(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        yield effect(pay.charge(1), compensate=pay.refund, name="fee")
        yield receive("never", timeout=3600)
        yield atomic("tablea", req["space"] + "sent", hold("n"))
        return "reminded"

    @workflow("booker")
    def booker(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        yield start(reminder(req), request_id=req["space"] + "-reminder", on_parent_abort=on_parent_abort)
        yield abort("no room")

    return booker, reminder


@pytest.mark.parametrize("on_parent_abort", ["abort", "abandon"])
def test_a_child_is_aborted_with_its_parent_unless_abandoned(
    store: Store, on_parent_abort: str, api: Api
) -> None:
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    booker, reminder = parent_and_child(pay, on_parent_abort)
    pending = api.submit(booker({"space": space}), request_id=space, store=store, queue=queue, clock=clock)
    with pytest.raises(WorkflowAborted, match="no room"):
        pending.result(timeout=0)
    deliver_all(api.worker([booker, reminder], store=store, queue=queue, clock=clock), queue, clock, step=900)
    child = api.status(store, "reminder", space + "-reminder")
    if on_parent_abort == "abort":
        assert child.status is RunStatus.ABORTED and child.reason == {"parent aborted": "no room"}
        assert rows_of(store, space) == {} and pay.kept() == 0
    else:
        assert child.result == "reminded" and rows_of(store, space) == {("tablea", "sent", "n"): 1}


def test_under_run_an_aborting_parent_aborts_its_unfinished_child(store: Store, api: Api) -> None:
    space, pay = new_space(), Payments()

    @workflow("kid-waits")
    def kid(req: str) -> Generator[Idem[Any], Any, Any]:
        yield effect(pay.charge(5), compensate=pay.refund, name="deposit")
        return "kid done"

    @workflow("parent-undone")
    def parent(req: str) -> Generator[Idem[Any], Any, Any]:
        child = yield start(kid(req), request_id=req + "-kid")
        yield wait(child)
        yield abort("changed my mind")

    with pytest.raises(WorkflowAborted):
        api.run(parent(space), request_id=space, store=store)
    # the kid had finished (completed) before its parent aborted: it is left as it ended
    assert pay.kept() == 5
    with pytest.raises(InvalidInputError, match="on_parent_abort"):
        start(kid(space), request_id="k", on_parent_abort="terminate")


def test_a_workflow_sees_its_abort_and_its_clean_up_runs_once(store: Store, api: Api) -> None:
    """``on_abort`` steps run after the compensations, once, whoever undoes the request."""
    from idemflow import admin

    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    mails: list[str] = []

    def mail_cancellation(reason: Any, req: dict[str, Any]) -> Generator[Idem[Any], Any, None]:
        text = f"booking {req['space']} cancelled: {reason}"
        yield effect(lambda key: mails.append(text), name="mail")
        yield atomic("tablea", req["space"] + "log", hold("cancellations"))

    @workflow("mailing", on_abort=mail_cancellation)
    def mailing(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        yield effect(pay.charge(9), compensate=pay.refund, name="charge")
        yield checkpoint()
        return (yield receive("confirm"))

    api.submit(mailing({"space": space}), request_id=space, store=store, queue=queue, clock=clock)
    api.worker([mailing], store=store, queue=queue, clock=clock).handle(queue.receive()[0])
    for _ in range(2):  # the operator aborts twice: one refund, one e-mail
        record = admin.abort_request(store, [mailing], "mailing", space, reason="no show", clock=clock)
        assert record.status is RunStatus.ABORTED
    assert mails == [f"booking {space} cancelled: no show"] and pay.kept() == 0
    assert rows_of(store, space) == {("tablea", "log", "cancellations"): 1}
    with pytest.raises(InvalidInputError, match="on_abort"):
        workflow("bad-hook", on_abort="mail")  # type: ignore[arg-type]


def mail_down(tries: list[str]) -> Any:
    """An ``on_abort`` notification whose mail server is down for good."""

    def notify(reason: Any, req: dict[str, Any]) -> Generator[Idem[Any], Any, None]:
        def mail(key: str) -> None:
            tries.append(key)
            raise ConnectionError("mail server down")

        yield effect(mail, name="mail")

    return notify


def test_a_failing_notification_never_turns_an_operators_abort_into_a_failure(store: Store, api: Api) -> None:
    """The refund ran, so the request is ``aborted``; the notification is tried once (an operator
    waits for the undo, not for a mail server), its failure logged."""
    space, pay, clock, tries = new_space(), Payments(), Clock(), list[str]()
    queue = MemoryQueue(clock=clock)

    # In-place retries of the mail would wait 20 s and more: an abort trying it again would show.
    @workflow("noted", on_abort=mail_down(tries), retry=StepRetry(initial=20, maximum_attempts=5))
    def noted(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        yield effect(pay.charge(9), compensate=pay.refund, name="charge")
        yield checkpoint()
        return (yield receive("confirm"))

    api.submit(noted({"space": space}), request_id=space, store=store, queue=queue, clock=clock)
    api.worker([noted], store=store, queue=queue, clock=clock).handle(queue.receive()[0])
    record = api.abort_request(store, [noted], "noted", space, reason="no show", clock=clock)
    assert record.status is RunStatus.ABORTED and record.reason == "no show"
    assert pay.kept() == 0 and len(tries) == 1
    ended = api.status(store, "noted", space)
    assert ended.status is RunStatus.ABORTED and ended.failure is None
    again = api.abort_request(store, [noted], "noted", space, reason="twice", clock=clock)
    assert again.reason == "no show" and len(tries) == 1  # answered from the record


def test_under_workers_a_failing_notification_is_retried_then_the_request_is_aborted(
    store: Store, api: Api
) -> None:
    space, pay, clock, tries = new_space(), Payments(), Clock(), list[str]()
    queue = MemoryQueue(clock=clock)

    @workflow("renoted", on_abort=mail_down(tries), retry=StepRetry(initial=5, maximum_attempts=3))
    def renoted(req: dict[str, Any]) -> Generator[Idem[Any], Any, Any]:
        yield effect(pay.charge(4), compensate=pay.refund, name="charge")
        yield checkpoint()
        yield abort("sold out")

    api.submit(renoted({"space": space}), request_id=space, store=store, queue=queue, clock=clock)
    deliver_all(api.worker([renoted], store=store, queue=queue, clock=clock), queue, clock, step=10)
    ended = api.status(store, "renoted", space)
    assert ended.status is RunStatus.ABORTED and ended.reason == "sold out", ended
    assert pay.kept() == 0 and len(pay.refunds) == 1
    assert 3 <= len(tries) <= 4  # its policy's attempts (and the worker's last look), never failed


def handle_visible(worker: Any, queue: MemoryQueue) -> None:
    """Hand the worker every message visible now, moving no time."""
    while received := queue.receive():
        worker.handle(received[0])


@pytest.mark.parametrize("timer", ["sleep", "sleep_until"])
def test_an_operators_abort_of_a_sleeping_request_runs_nothing_past_its_timer(
    store: Store, api: Api, timer: str
) -> None:
    """Undone at the wait: what completed before it is compensated, ``on_abort`` runs, and no
    code after the wait runs, neither in the operator's process nor once the timer is due."""
    space, pay, clock = new_space(), Payments(), Clock()
    queue = MemoryQueue(clock=clock)
    after, told = list[str](), list[Any]()
    wake_at = clock.now + 1000

    def tell(reason: Any, req: str) -> Generator[Idem[Any], Any, None]:
        yield effect(lambda key: told.append(reason), name="tell")

    @workflow("napping", on_abort=tell)
    def napping(req: str) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req + "seats", hold("held"), compensate=release("held"))
        yield sleep(1000) if timer == "sleep" else sleep_until(wake_at)
        after.append("woke")
        yield effect(pay.charge(3), compensate=pay.refund, name="charge")
        return "woke"

    api.submit(napping(space), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([napping], store=store, queue=queue, clock=clock)
    handle_visible(worker, queue)  # now asleep
    assert api.status(store, "napping", space).waiting is not None
    record = api.abort_request(store, [napping], "napping", space, reason="closed", clock=clock)
    assert record.status is RunStatus.ABORTED and record.reason == "closed"
    assert after == [] and pay.calls == 0 and told == ["closed"]
    assert rows_of(store, space) == {("tablea", "seats", "held"): 0}
    deliver_all(worker, queue, clock, step=600)  # the timer's continuation comes due: a duplicate
    assert api.status(store, "napping", space).status is RunStatus.ABORTED
    assert after == [] and pay.calls == 0 and told == ["closed"]


def test_a_parent_waiting_on_a_sleeping_child_meets_its_abort(store: Store, api: Api) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    dozing, minding = dozing_and_minding()

    api.submit(minding(space), request_id=space, store=store, queue=queue, clock=clock)
    worker = api.worker([minding, dozing], store=store, queue=queue, clock=clock)
    handle_visible(worker, queue)  # the parent waits, the child sleeps
    record = api.abort_request(store, [dozing], "dozing-last", space + "-kid", reason="stop", clock=clock)
    assert record.status is RunStatus.ABORTED
    worker.relay()  # the child's outcome wakes its parent
    deliver_all(worker, queue, clock, step=600)
    assert api.status(store, "minding-last", space).result == "child aborted: stop"
    assert rows_of(store, space) == {("tablea", "kid", "n"): 0}


class Meanwhile(StoreWrapper):
    """A store that lets ``then`` run just before the first commit ``when`` picks reaches it:
    another process acting between what this one read and what it writes (``ran`` says it did,
    so a test cannot pass on an interleaving that never happened)."""

    def __init__(
        self, inner: Store, when: Callable[[Sequence[Op]], bool], then: Callable[[], object]
    ) -> None:
        super().__init__(inner)
        self._when = when
        self._then: Callable[[], object] | None = then
        self._lock = threading.Lock()
        self.ran = False

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        with self._lock:
            then = self._then if self._then is not None and self._when(ops) else None
            if then is not None:
                self._then = None
        if then is not None:
            then()
            self.ran = True
        return super().commit(ops)


def aborting_at_the_wait(ops: Sequence[Op]) -> bool:
    """The operator's abort writing its memo in the place of the step after the wait."""
    return any(
        isinstance(op, Insert) and isinstance(op.value, dict) and op.value.get("id") == WAIT_ABORTED
        for op in ops
    )


def completing(record: RowRef) -> Callable[[Sequence[Op]], bool]:
    """A commit recording the request at ``record`` completed."""

    def picked(ops: Sequence[Op]) -> bool:
        return any(
            isinstance(op, Put | Insert)
            and op.ref == record
            and isinstance(op.value, dict)
            and op.value.get("status") == RunStatus.COMPLETED.value
            for op in ops
        )

    return picked


def resting(pay: Payments, told: list[Any], tail: str) -> Any:
    """Hold a seat, charge, then sleep as the last step: nothing comes after it (``nothing``), or
    only a step that writes no memo (``uuid4``), so no step's memo takes the place after it."""

    def tell(reason: Any, req: str) -> Generator[Idem[Any], Any, None]:
        yield effect(lambda key: told.append(reason), name="tell")

    @workflow("resting", on_abort=tell)
    def flow(req: str) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req + "seats", hold("held"), compensate=release("held"))
        yield effect(pay.charge(3), compensate=pay.refund, name="charge")
        yield sleep(1000)
        return "rested" if tail == "nothing" else "rested " + (yield uuid4())

    return flow


@pytest.mark.parametrize("tail", ["nothing", "uuid4"])
@pytest.mark.parametrize("first", ["timer", "operator"])
def test_an_operators_abort_racing_the_timer_of_a_last_sleep_ends_the_request_one_way(
    store: Store, api: Api, first: str, tail: str
) -> None:
    """The worker whose timer fires writes the outcome at once (no step's memo follows the wait),
    while the operator's abort writes its memo in the place of the step after the wait: whichever
    lands first decides. ``timer``: the worker completes the request between the abort's read
    of that place and its write, and the abort answers the completed record, undoing nothing.
    ``operator``: the abort lands between the worker's replay and its outcome, and the worker
    aborts with it: the undo runs once, ``on_abort`` once, nobody records ``completed``."""
    space, pay, clock, told = new_space(), Payments(), Clock(), list[Any]()
    queue = MemoryQueue(clock=clock)
    flow = resting(pay, told, tail)
    answers: list[RunRecord] = []

    def operator() -> None:
        answers.append(api.abort_request(store, [flow], "resting", space, reason="closed", clock=clock))

    worked = Meanwhile(store, completing(run_ref("resting", space)), operator)
    worker = api.worker([flow], store=worked if first == "operator" else store, queue=queue, clock=clock)

    def timer_fires() -> None:
        clock.now += 1000
        handle_visible(worker, queue)

    api.submit(flow(space), request_id=space, store=store, queue=queue, clock=clock)
    handle_visible(worker, queue)  # now asleep
    assert api.status(store, "resting", space).waiting is not None
    if first == "timer":
        aborting = Meanwhile(store, aborting_at_the_wait, timer_fires)
        answers.append(api.abort_request(aborting, [flow], "resting", space, reason="closed", clock=clock))
        assert aborting.ran
    else:
        timer_fires()
        assert worked.ran
    (answer,) = answers
    ended = api.status(store, "resting", space)
    if first == "timer":
        assert answer.status is RunStatus.COMPLETED and str(answer.result).startswith("rested"), answer
        assert ended.status is RunStatus.COMPLETED and ended.result == answer.result
        assert rows_of(store, space) == {("tablea", "seats", "held"): 1}
        assert pay.kept() == 3 and pay.refunds == {} and told == []
        assert (worker.stats.completed, worker.stats.aborted) == (1, 0)
    else:
        assert answer.status is RunStatus.ABORTED and answer.reason == "closed", answer
        assert ended.status is RunStatus.ABORTED and ended.reason == "closed", ended
        assert rows_of(store, space) == {("tablea", "seats", "held"): 0}
        assert pay.kept() == 0 and len(pay.refunds) == 1 and told == ["closed"]
        assert (worker.stats.completed, worker.stats.aborted) == (0, 1)
    deliver_all(worker, queue, clock, step=600)  # whatever is still queued changes nothing
    assert api.status(store, "resting", space).status is ended.status
    assert len(pay.refunds) == len(told) == (first == "operator")


def dozing_and_minding() -> tuple[Any, Any]:
    """A child whose last step is a sleep, and a parent that waits for it."""

    @workflow("dozing-last")
    def dozing(req: str) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", req + "kid", hold("n"), compensate=release("n"))
        yield sleep(1000)
        return "kid woke"

    @workflow("minding-last")
    def minding(req: str) -> Generator[Idem[Any], Any, Any]:
        yield checkpoint()
        child = yield start(dozing(req), request_id=req + "-kid")
        try:
            return (yield wait(child))
        except ChildAborted as aborted:
            return f"child aborted: {aborted.reason}"

    return dozing, minding


def one_way(store: Store, api: Api, space: str, answer: RunRecord, first: str) -> None:
    """The child ended as the side that came first decided, the operator was told so, and its
    parent heard the same: ``ChildAborted`` exactly when the child ended aborted."""
    kid = api.status(store, "dozing-last", space + "-kid")
    parent = api.status(store, "minding-last", space)
    assert answer.status is kid.status, (answer, kid)
    if first == "timer":
        assert kid.status is RunStatus.COMPLETED and parent.result == "kid woke", (kid, parent)
        assert rows_of(store, space) == {("tablea", "kid", "n"): 1}
    else:
        assert kid.status is RunStatus.ABORTED and parent.result == "child aborted: stop", (kid, parent)
        assert rows_of(store, space) == {("tablea", "kid", "n"): 0}


@pytest.mark.parametrize("first", ["timer", "operator"])
def test_a_parent_meets_child_aborted_iff_its_sleep_last_child_ended_aborted(
    store: Store, api: Api, first: str
) -> None:
    space, clock = new_space(), Clock()
    queue = MemoryQueue(clock=clock)
    dozing, minding = dozing_and_minding()
    kid = space + "-kid"
    answers: list[RunRecord] = []

    def operator() -> None:
        answers.append(api.abort_request(store, [dozing], "dozing-last", kid, reason="stop", clock=clock))

    worked = Meanwhile(store, completing(run_ref("dozing-last", kid)), operator)
    worker = api.worker(
        [minding, dozing], store=worked if first == "operator" else store, queue=queue, clock=clock
    )

    def timer_fires() -> None:
        clock.now += 1000
        handle_visible(worker, queue)

    api.submit(minding(space), request_id=space, store=store, queue=queue, clock=clock)
    handle_visible(worker, queue)  # the parent waits, the child sleeps
    if first == "timer":
        aborting = Meanwhile(store, aborting_at_the_wait, timer_fires)
        answers.append(api.abort_request(aborting, [dozing], "dozing-last", kid, reason="stop", clock=clock))
        assert aborting.ran
    else:
        timer_fires()
        assert worked.ran
    worker.relay()  # the child's outcome wakes its parent
    deliver_all(worker, queue, clock, step=600)
    (answer,) = answers
    one_way(store, api, space, answer, first)


class Timer(Clock):
    """A test's clock that a timer moves on to its end (``run`` then waits for nothing), letting
    ``then`` run first: an operator acting while the run waits."""

    def __init__(self) -> None:
        super().__init__()
        self.then: Callable[[], object] | None = None

    def skip_to(self, when: float) -> None:
        then, self.then = self.then, None
        if then is not None:
            then()
        self.now = max(self.now, when)


@pytest.mark.parametrize("first", ["timer", "operator"])
def test_under_run_a_sleep_last_child_racing_an_operators_abort_ends_one_way(
    store: Store, api: Api, first: str
) -> None:
    """``run`` runs the child in its process; while the child waits, the operator aborts it.
    ``operator``: the abort lands before the child's timer ends. ``timer``: another ``run`` of
    the child completes it between the abort's read and its write (and the first run then meets
    that outcome). The operator's abort is the blocking one here: the hook runs inside ``arun``."""
    space, clock = new_space(), Timer()
    dozing, minding = dozing_and_minding()
    kid = space + "-kid"
    answers: list[RunRecord] = []

    def another_run() -> None:
        later = Clock()
        later.now = clock.now + 2000
        assert idemflow.run(dozing(space), request_id=kid, store=store, clock=later) == "kid woke"

    def operator() -> None:
        if first == "operator":
            answers.append(abort_request(store, [dozing], "dozing-last", kid, reason="stop", clock=clock))
            return
        aborting = Meanwhile(store, aborting_at_the_wait, another_run)
        answers.append(abort_request(aborting, [dozing], "dozing-last", kid, reason="stop", clock=clock))
        assert aborting.ran

    clock.then = operator
    api.run(minding(space), request_id=space, store=store, clock=clock)
    assert clock.then is None  # the child waited, and the operator acted then
    (answer,) = answers
    one_way(store, api, space, answer, first)
