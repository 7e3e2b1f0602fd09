"""DBOS Transact's behaviours, as a DBOS user expects them of idemflow.

Source: ``dbos-inc/dbos-transact-py``, ``tests/`` (``test_dbos.py``, ``test_failures.py``,
``test_concurrency.py``, ``test_async.py``, ``test_queue.py``, ``test_workflow_management.py``,
``test_workflow_introspection.py``). ``SetWorkflowID(id)`` is ``request_id=``; a
``@DBOS.transaction`` is an ``atomic`` step; a ``@DBOS.step`` an ``effect``;
``DBOS.start_workflow`` / handles are ``submit`` / ``Pending`` with a ``Worker``
(``docs/migrating.md``). A missing feature would be a strict xfail naming it; none is left.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from idemflow import (
    Concurrency,
    InvalidValueError,
    NonDeterminismError,
    Rate,
    RequestFailedError,
    StepRetry,
    Tx,
    WorkflowAborted,
    admin,
    arun,
    atomic,
    checkpoint,
    effect,
    now,
    receive,
    run,
    sleep,
    start,
    wait,
    workflow,
)
from idemflow.admin import retry
from idemflow.cli import main as idemflow_cli
from idemflow.client import RunStatus, send_message, status, submit
from idemflow.stores import MemoryStore, SqliteStore
from idemflow.stores.base import Store
from idemflow.testing import Fault, FaultyStore, SimulatedCrash, data_rows
from idemflow.worker import MemoryQueue, Worker

MISSING = "idemflow has no {} (not planned yet)"


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "dbos.sqlite3")


def counted(counter: list[str], name: str, amount: int = 1) -> Callable[[Tx], str]:
    """A transaction body that adds to a row and records that it ran."""

    def body(tx: Tx) -> str:
        counter.append(name)
        tx.increment(name, amount)
        return name

    body.__name__ = body.__qualname__ = name
    return body


def worker(store: Store, queue: MemoryQueue, *flows: Any, max_deliveries: int = 5) -> Worker:
    fast = StepRetry(initial=0.01, maximum_attempts=max_deliveries)  # attempts as DBOS's max_attempts
    return Worker(flows, store=store, queue=queue, step_retry=fast, wait=0.02, relay_every=None)


# --- one workflow id, one execution --------------------------------------------------------------


def test_a_workflow_id_runs_its_transactions_and_steps_once(store: Store) -> None:
    """DBOS does not rerun a finished workflow's function; idemflow answers from the run record
    met at the first step (docs/migrating.md), so the function runs up to that step again,
    but no transaction or step does."""
    # peer: tests/test_dbos.py::test_simple_workflow
    sent: list[str] = []

    @workflow("simple")
    def simple(var: str, var2: str) -> Generator[Any, Any, str]:
        res = yield atomic("accounts", var2, lambda tx: tx.increment("n") or var2 + "1")
        res2 = yield effect(lambda key: sent.append(key) or var)
        return str(res) + str(res2)

    assert run(simple("alice", "alice"), request_id="wf-1", store=store) == "alice1alice"
    assert run(simple("alice", "alice"), request_id="wf-1", store=store) == "alice1alice"
    assert run(simple("bob", "bob"), request_id="wf-2", store=store) == "bob1bob"
    assert data_rows(store, "accounts") == {("accounts", "alice", "n"): 1, ("accounts", "bob", "n"): 1}
    assert len(sent) == 2


def test_starting_a_finished_workflow_id_returns_its_recorded_result(store: Store) -> None:
    # peer: tests/test_dbos.py::test_simple_workflow (start_workflow on a completed id)
    @workflow("finished")
    def finished(var: str) -> Generator[Any, Any, str]:
        yield atomic("accounts", var, lambda tx: tx.increment("n"))
        return var + "!"

    assert run(finished("a"), request_id="f-1", store=store) == "a!"
    queue = MemoryQueue()
    pending = submit(finished("a"), request_id="f-1", store=store, queue=queue)
    assert pending.outcome is not None and pending.outcome.status is RunStatus.COMPLETED
    assert pending.result(timeout=1) == "a!"  # no worker needed
    assert data_rows(store, "accounts") == {("accounts", "a", "n"): 1}


def test_a_workflow_returning_none_replays_none(store: Store) -> None:
    # peer: tests/test_dbos.py::test_workflow_returns_none
    @workflow("returns_none")
    def returns_none(var: str) -> Generator[Any, Any, None]:
        yield atomic("accounts", var, lambda tx: tx.increment("n"))

    assert run(returns_none("a"), request_id="n-1", store=store) is None
    assert run(returns_none("a"), request_id="n-1", store=store) is None
    assert status(store, "returns_none", "n-1").status is RunStatus.COMPLETED


def test_a_failed_workflow_answers_its_recorded_failure_to_every_duplicate(store: Store) -> None:
    """DBOS records any exception a workflow raises as its outcome. idemflow records an abort
    (``tx.abort``): compensations run once, and every duplicate gets ``WorkflowAborted``."""
    # peer: tests/test_dbos.py::test_exception_workflow
    ran: list[str] = []

    def refuse(tx: Tx) -> None:
        ran.append("refuse")
        tx.abort("test error")

    @workflow("failing")
    def failing(var: str) -> Generator[Any, Any, None]:
        yield atomic("accounts", "a", counted(ran, "held"), compensate=lambda tx, _: tx.increment("held", -1))
        yield atomic("accounts", "b", refuse)

    for _ in range(3):
        with pytest.raises(WorkflowAborted, match="test error"):
            run(failing("x"), request_id="e-1", store=store)
    assert ran.count("refuse") == 1
    assert status(store, "failing", "e-1").status is RunStatus.ABORTED
    assert data_rows(store, "accounts") == {("accounts", "a", "held"): 0}


def test_an_exception_in_a_workflow_is_raised_again_and_its_steps_stay_done(store: Store) -> None:
    """DBOS records the exception and answers it without rerunning. idemflow treats a raised
    exception like a crash: nothing final is recorded (the request stays ``running``), a retry
    reruns the function, and the steps already done replay from their memos."""
    # peer: tests/test_dbos.py::test_exception_workflow
    sent: list[str] = []

    @workflow("raising")
    def raising(var: str) -> Generator[Any, Any, None]:
        yield atomic("accounts", "a", lambda tx: tx.increment("n"))
        yield effect(lambda key: sent.append(key))
        raise RuntimeError("test error")

    for _ in range(2):
        with pytest.raises(RuntimeError, match="test error"):
            run(raising("x"), request_id="e-2", store=store)
    assert data_rows(store, "accounts") == {("accounts", "a", "n"): 1}
    assert len(sent) == 1
    assert status(store, "raising", "e-2").status is RunStatus.RUNNING


def test_a_result_that_is_not_serializable_is_refused(store: Store) -> None:
    # peer: tests/test_failures.py::test_nonserializable_return
    # peer: tests/test_dbos.py::test_nonserializable_values
    @workflow("unserializable")
    def unserializable(var: str) -> Generator[Any, Any, object]:
        yield atomic("accounts", "a", lambda tx: tx.increment("n"))
        return threading.Lock()

    with pytest.raises(InvalidValueError, match="not JSON"):
        run(unserializable("x"), request_id="u-1", store=store)
    with pytest.raises(InvalidValueError, match="not JSON"):
        run(effect(lambda key: object()), request_id="u-2", store=store)


# --- recovery --------------------------------------------------------------------------------


def test_recovery_after_a_crash_skips_the_committed_transactions(store: Store) -> None:
    # peer: tests/test_dbos.py::test_recovery_workflow
    ran: list[str] = []
    crashing = FaultyStore(store, lambda point: Fault.CRASH_AFTER if point.index == 0 else None)

    @workflow("recover")
    def recover(var: str) -> Generator[Any, Any, str]:
        yield atomic("accounts", "a", counted(ran, "first"))
        yield atomic("accounts", "b", counted(ran, "second"))
        return var + "1" + var

    with pytest.raises(SimulatedCrash):
        run(recover("bob"), request_id="r-1", store=crashing)
    assert run(recover("bob"), request_id="r-1", store=crashing) == "bob1bob"
    assert data_rows(store, "accounts") == {("accounts", "a", "first"): 1, ("accounts", "b", "second"): 1}


def test_recovery_after_a_crash_does_not_repeat_a_finished_step(store: Store) -> None:
    # peer: tests/test_dbos.py::test_recovery_workflow_step
    calls: list[str] = []
    crashing = FaultyStore(store, lambda point: Fault.CRASH_AFTER if point.index == 0 else None)

    @workflow("recover_step")
    def recover_step(var: str) -> Generator[Any, Any, str]:
        receipt = yield effect(lambda key: calls.append(key) or f"receipt-{len(calls)}")
        yield atomic("accounts", "a", lambda tx: tx.increment("n"))
        return str(receipt)

    with pytest.raises(SimulatedCrash):
        run(recover_step("x"), request_id="r-2", store=crashing)
    assert run(recover_step("x"), request_id="r-2", store=crashing) == "receipt-1"
    assert len(calls) == 1


def test_a_step_gets_a_stable_key_of_its_own_for_the_outside_service(store: Store) -> None:
    # peer: tests/test_dbos.py::test_run_step
    # peer: tests/test_dbos.py::test_simple_workflow (DBOS.workflow_id, DBOS.step_id)
    keys: list[str] = []

    @workflow("keyed_steps")
    def keyed_steps(var: str) -> Generator[Any, Any, list[str]]:
        first = yield effect(lambda key: keys.append(key) or key, name="charge")
        second = yield effect(lambda key: keys.append(key) or key, name="notify")
        return [first, second]

    first = run(keyed_steps("x"), request_id="k-1", store=store)
    assert run(keyed_steps("x"), request_id="k-1", store=store) == first
    assert first[0] != first[1]
    assert run(keyed_steps("x"), request_id="k-2", store=store)[0] not in first


def test_a_workflow_changed_under_a_recorded_step_is_detected(store: Store) -> None:
    # peer: tests/test_failures.py::test_nondeterministic_workflow
    # peer: tests/test_failures.py::test_nondeterministic_workflow_txn
    flag, crash = [True], [True]

    def second(tx: Tx) -> None:
        if crash[0]:
            raise RuntimeError("crashed before the second step")
        tx.increment("x")

    def step_one(tx: Tx) -> None:
        tx.increment("one")

    def step_two(tx: Tx) -> None:
        tx.increment("two")

    @workflow("nondeterministic")
    def nondeterministic(var: str) -> Generator[Any, Any, None]:
        yield atomic("accounts", "a", step_one if flag[0] else step_two)
        yield atomic("accounts", "b", second)

    with pytest.raises(RuntimeError):
        run(nondeterministic("x"), request_id="nd-1", store=store)
    flag[0], crash[0] = False, False
    with pytest.raises(NonDeterminismError, match="step_one"):
        run(nondeterministic("x"), request_id="nd-1", store=store)


# --- concurrency -------------------------------------------------------------------------------


def test_concurrent_executions_of_one_workflow_id_agree_and_commit_once(store: Store) -> None:
    # peer: tests/test_concurrency.py::test_concurrent_workflows
    @workflow("concurrent")
    def concurrent(var: str) -> Generator[Any, Any, int]:
        total = yield atomic("accounts", "a", lambda tx: tx.increment("n") or 1)
        yield atomic("accounts", "b", lambda tx: tx.increment("m"))
        return int(total)

    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(run(concurrent("x"), request_id="c-1", store=store)))
        for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [1] * 6
    assert data_rows(store, "accounts") == {("accounts", "a", "n"): 1, ("accounts", "b", "m"): 1}


def test_conflicting_transactions_are_retried_until_they_commit(store: Store) -> None:
    # peer: tests/test_failures.py::test_transaction_errors (serialization failures retried)
    def add_one(tx: Tx) -> None:
        tx.put("n", int(tx.get("n", 0)) + 1)  # a read-modify-write: concurrent ones conflict

    @workflow("hot_row")
    def hot_row(i: int) -> Generator[Any, Any, None]:
        yield atomic("accounts", "hot", add_one)

    threads = [
        threading.Thread(target=run, args=(hot_row(i),), kwargs={"request_id": f"h-{i}", "store": store})
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert data_rows(store, "accounts") == {("accounts", "hot", "n"): 8}


def test_an_async_workflow_runs_once_per_id(store: Store) -> None:
    # peer: tests/test_async.py::test_async_workflow
    # peer: tests/test_async.py::test_async_step
    calls: list[str] = []

    async def notify(key: str) -> str:
        calls.append(key)
        await asyncio.sleep(0)
        return "notified"

    @workflow("async_flow")
    async def async_flow(var: str) -> str:
        await atomic("accounts", var, lambda tx: tx.increment("n"))
        told = await effect(notify)
        return f"{var}:{told}"

    async def main() -> list[str]:
        return [await arun(async_flow("a"), request_id="a-1", store=store) for _ in range(3)]

    assert asyncio.run(main()) == ["a:notified"] * 3
    assert data_rows(store, "accounts") == {("accounts", "a", "n"): 1}
    assert len(calls) == 1


# --- started workflows, queues, management ---------------------------------------------------------


@workflow("background")
def background(var: str) -> Generator[Any, Any, str]:
    yield atomic("accounts", var, lambda tx: tx.increment("started"))
    yield checkpoint()
    yield atomic("ledger", var, lambda tx: tx.increment("finished"))
    return var + " done"


def test_a_started_workflow_is_finished_by_a_worker_and_its_handle_gets_the_result(store: Store) -> None:
    # peer: tests/test_dbos.py::test_start_workflow
    # peer: tests/test_queue.py::test_simple_queue
    queue = MemoryQueue()
    pending = submit(background("a"), request_id="s-1", store=store, queue=queue)
    assert pending.status() is RunStatus.RUNNING
    worker(store, queue, background).run(idle_timeout=0.2)
    assert pending.result(timeout=5) == "a done"
    assert data_rows(store, "ledger") == {("ledger", "a", "finished"): 1}


def test_a_workflow_status_is_unknown_then_running_then_completed_with_its_result(store: Store) -> None:
    # peer: tests/test_dbos.py::test_retrieve_workflow
    # peer: tests/test_workflow_introspection.py::test_get_workflow
    queue = MemoryQueue()
    assert status(store, "background", "s-2").status is RunStatus.UNKNOWN
    submit(background("b"), request_id="s-2", store=store, queue=queue)
    assert status(store, "background", "s-2").status is RunStatus.RUNNING
    worker(store, queue, background).run(idle_timeout=0.2)
    done = status(store, "background", "s-2")
    assert (done.status, done.result) == (RunStatus.COMPLETED, "b done")


def test_starting_a_workflow_id_twice_runs_it_once(store: Store) -> None:
    # peer: tests/test_queue.py::test_duplicate_workflow_id
    # peer: tests/test_duplication_policy.py::test_return_existing_attaches
    queue = MemoryQueue()
    first = submit(background("c"), request_id="s-3", store=store, queue=queue)
    second = submit(background("c"), request_id="s-3", store=store, queue=queue)
    worker(store, queue, background).run(idle_timeout=0.2)
    assert first.result(timeout=5) == second.result(timeout=5) == "c done"
    assert data_rows(store, "accounts") == {("accounts", "c", "started"): 1}
    assert data_rows(store, "ledger") == {("ledger", "c", "finished"): 1}


def test_a_concurrency_limit_holds_across_workers(store: Store) -> None:
    # peer: tests/test_queue.py::test_queue_concurrency (Queue(concurrency=1) across workers)
    inside, peak, lock = [0], [0], threading.Lock()

    def enter(key: str) -> None:
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        threading.Event().wait(0.02)
        with lock:
            inside[0] -= 1

    @workflow("one_by_one", concurrency=Concurrency(1, lease=10))
    def one_by_one(n: int) -> Generator[Any, Any, int]:
        yield effect(enter)
        return n

    queue = MemoryQueue()
    pending = [submit(one_by_one(n), request_id=f"q-{n}", store=store, queue=queue) for n in range(10)]
    workers = [
        Worker([one_by_one], store=store, queue=queue, concurrency=4, wait=0.02, relay_every=None)
        for _ in range(2)
    ]
    threads = [threading.Thread(target=w.run, kwargs={"idle_timeout": 1.0}) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [p.result(timeout=5) for p in pending] == list(range(10))
    assert peak[0] == 1


def test_a_rate_limited_queue_starts_at_most_its_limit_per_period(store: Store) -> None:
    # peer: tests/test_queue.py::test_limiter (limiter={"limit": 5, "period": 1.8})
    # DBOS starts waves of 5 per period; a token bucket of 5 refills one token every 0.36 s:
    # at most 5 + 5 * T / 1.8 starts in any T seconds, and 15 starts take at least 10 * 0.36 s.
    pace = Rate(5, per=1.8)
    starts: list[float] = []

    @workflow("limited_queue", rate=pace)
    def limited_queue(n: int) -> Generator[Any, Any, int]:
        at = yield now()
        yield effect(lambda key: starts.append(at))
        return n

    queue = MemoryQueue()
    pending = [submit(limited_queue(n), request_id=f"l-{n}", store=store, queue=queue) for n in range(15)]
    Worker([limited_queue], store=store, queue=queue, concurrency=8, wait=0.02, relay_every=None).run(
        idle_timeout=1.0
    )
    assert sorted(p.result(timeout=5) for p in pending) == list(range(15))
    starts.sort()
    # A start is read by the first step, a moment after its token was taken: on a loaded machine
    # that moment runs to tenths of a second. With no limit at all 15 starts would land in one
    # such moment, far over the 5 + 2.8 * 0.3 this allows.
    slack = 0.3
    for i in range(len(starts)):
        for j in range(i, len(starts)):
            assert j - i + 1 <= pace.capacity + pace.per_second * (starts[j] - starts[i] + slack) + 1e-6
    assert starts[-1] - starts[0] >= 10 / pace.per_second - slack


def test_workflows_are_listed_by_status(store: Store) -> None:
    # peer: tests/test_workflow_introspection.py::test_list_workflow
    queue = MemoryQueue()
    run(background("d"), request_id="l-1", store=store)
    submit(background("e"), request_id="l-2", store=store, queue=queue)
    done = admin.runs(store, workflow="background", status=RunStatus.COMPLETED).runs
    running = admin.runs(store, workflow="background", status=RunStatus.RUNNING).runs
    assert [r.request_id for r in done] == ["l-1"]
    assert [r.request_id for r in running] == ["l-2"]


def test_a_delayed_enqueue_is_listed_waiting_and_runs_no_earlier_than_its_time(store: Store) -> None:
    # peer: tests/test_delay.py::test_delay
    now = [1_800_000_000.0]
    clock = lambda: now[0]  # noqa: E731
    queue = MemoryQueue(clock=clock)
    pending = submit(background("f"), request_id="dl-1", store=store, queue=queue, clock=clock, delay=2.0)
    waiting = status(store, "background", "dl-1")
    assert (waiting.status, waiting.waiting) == (
        RunStatus.RUNNING,
        "waiting until 2027-01-15T08:00:02.000+00:00",
    )
    assert [
        r.request_id for r in admin.runs(store, workflow="background", status=RunStatus.RUNNING).runs
    ] == ["dl-1"]
    early = Worker([background], store=store, queue=queue, clock=clock, wait=0.02, relay_every=None)
    early.run(idle_timeout=0.2)
    assert data_rows(store, "accounts") == {} and pending.status() is RunStatus.RUNNING
    now[0] += 2.0
    Worker([background], store=store, queue=queue, clock=clock, wait=0.02, relay_every=None).run(
        idle_timeout=0.2
    )
    assert pending.result(timeout=5) == "f done"


def test_a_delayed_workflow_cancelled_never_runs_and_one_resumed_runs_at_once(store: Store) -> None:
    # peer: tests/test_delay.py::test_delay_cancel_resume_list
    queue = MemoryQueue()
    submit(background("g"), request_id="dl-2", store=store, queue=queue, delay=60.0)
    submit(background("h"), request_id="dl-3", store=store, queue=queue, delay=60.0)
    admin.cancel(store, "background", "dl-2")
    assert status(store, "background", "dl-2").status is RunStatus.CANCELLED
    retry(store, queue, "background", "dl-3")  # DBOS's resume: it runs now, bypassing the delay
    worker(store, queue, background).run(idle_timeout=0.2)
    assert status(store, "background", "dl-3").result == "h done"
    assert data_rows(store, "accounts") == {("accounts", "h", "started"): 1}


def test_a_cancelled_workflow_is_undone_and_its_handle_raises(store: Store) -> None:
    """DBOS's cancel stops a workflow where it is (resumable later); idemflow's ``abort`` is final:
    the compensations of its completed steps run, and it ends ``aborted``."""
    # peer: tests/test_workflow_management.py::test_cancel_resume
    queue = MemoryQueue()

    @workflow("reserve")
    def reserve(var: str) -> Generator[Any, Any, str]:
        yield atomic(
            "accounts",
            var,
            lambda tx: tx.increment("held"),
            compensate=lambda tx, _: tx.increment("held", -1),
        )
        yield checkpoint()
        yield atomic("ledger", var, lambda tx: tx.increment("charged"))
        return "reserved"

    pending = submit(reserve("f"), request_id="x-1", store=store, queue=queue)
    admin.abort_request(store, [reserve], "reserve", "x-1", reason="cancelled")
    worker(store, queue, reserve).run(idle_timeout=0.2)  # the queued continuation is a no-op now
    with pytest.raises(WorkflowAborted, match="cancelled"):
        pending.result(timeout=5)
    assert data_rows(store, "accounts") == {("accounts", "f", "held"): 0}
    assert data_rows(store, "ledger") == {}


def test_a_step_that_fails_is_retried_until_it_succeeds(store: Store) -> None:
    """DBOS retries a step in place (``retries_allowed``); an idemflow worker redelivers the
    request, and the step runs again from its memoized prefix, up to ``max_deliveries``."""
    # peer: tests/test_failures.py::test_step_retries
    # peer: tests/test_failures.py::test_step_should_retry
    attempts: list[int] = []

    def flaky(key: str) -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError(f"down ({len(attempts)})")
        return "sent"

    @workflow("flaky_step")
    def flaky_step(var: str) -> Generator[Any, Any, str]:
        yield atomic("accounts", var, lambda tx: tx.increment("n"))
        yield checkpoint()
        return str((yield effect(flaky)))

    queue = MemoryQueue()
    pending = submit(flaky_step("g"), request_id="t-1", store=store, queue=queue)
    worker(store, queue, flaky_step, max_deliveries=5).run(idle_timeout=0.5)
    assert pending.result(timeout=5) == "sent"
    assert len(attempts) == 3
    assert data_rows(store, "accounts") == {("accounts", "g", "n"): 1}


def test_a_step_that_keeps_failing_fails_the_workflow_and_a_retry_resumes_it(store: Store) -> None:
    # peer: tests/test_failures.py::test_step_retries (DBOSMaxStepRetriesExceeded)
    # peer: tests/test_workflow_management.py::test_cancel_resume (resume)
    fixed = [False]

    def call(key: str) -> str:
        if not fixed[0]:
            raise ConnectionError("down")
        return "sent"

    @workflow("failing_step")
    def failing_step(var: str) -> Generator[Any, Any, str]:
        yield atomic("accounts", var, lambda tx: tx.increment("n"))
        yield checkpoint()
        return str((yield effect(call)))

    queue = MemoryQueue()
    pending = submit(failing_step("h"), request_id="t-2", store=store, queue=queue)
    worker(store, queue, failing_step, max_deliveries=2).run(idle_timeout=0.5)
    with pytest.raises(RequestFailedError, match="down"):
        pending.result(timeout=5)
    failed = status(store, "failing_step", "t-2")
    assert failed.status is RunStatus.FAILED and failed.failure is not None and failed.failure.attempts == 2
    fixed[0] = True  # the fix is deployed
    assert retry(store, queue, "failing_step", "t-2") is RunStatus.FAILED
    worker(store, queue, failing_step).run(idle_timeout=0.2)
    assert status(store, "failing_step", "t-2").result == "sent"
    assert data_rows(store, "accounts") == {("accounts", "h", "n"): 1}


def test_a_request_started_on_an_old_version_finishes_on_it(store: Store) -> None:
    # peer: tests/test_dbos.py::test_app_version
    # peer: tests/test_dbos.py::test_recovery_appversion
    @workflow("versioned", version=1)
    def v1(var: str) -> Generator[Any, Any, str]:
        yield atomic("accounts", var, lambda tx: tx.increment("v1"))
        yield checkpoint()
        return "finished on v1"

    @workflow("versioned", version=2)
    def v2(var: str) -> Generator[Any, Any, str]:
        yield atomic("accounts", var, lambda tx: tx.increment("v2"))
        return "finished on v2"

    submit(v1("i"), request_id="v-1", store=store, queue=MemoryQueue())  # started before the deploy
    assert run(v2("i"), request_id="v-1", store=store, versions=[v1]) == "finished on v1"
    assert run(v2("i"), request_id="v-2", store=store, versions=[v1]) == "finished on v2"
    assert data_rows(store, "accounts") == {("accounts", "i", "v1"): 1, ("accounts", "i", "v2"): 1}


def test_garbage_collection_removes_finished_workflows_only(tmp_path: Path) -> None:
    # peer: tests/test_workflow_management.py::test_garbage_collection
    path = tmp_path / "gc.sqlite3"
    store = SqliteStore(path)
    run(background("j"), request_id="g-1", store=store)
    submit(background("k"), request_id="g-2", store=store, queue=MemoryQueue())
    assert idemflow_cli(["gc", "--store", f"sqlite:{path}", "--older-than", "0s"]) == 0
    assert status(store, "background", "g-1").status is RunStatus.UNKNOWN
    assert status(store, "background", "g-2").status is RunStatus.RUNNING
    store.close()


# --- not offered yet -----------------------------------------------------------------------------


def test_a_child_workflow_is_a_request_of_its_own(store: Store) -> None:
    """A workflow call yielded inside another runs as the parent's own steps; one started with
    ``start`` is a request of its own (run record, status, id), waited for with ``wait``."""

    # peer: tests/test_dbos.py::test_child_workflow
    @workflow("child")
    def child(var: str) -> Generator[Any, Any, str]:
        yield atomic("accounts", "c", lambda tx: tx.increment("n"))
        return var + "_child"

    @workflow("parent")
    def parent(var: str) -> Generator[Any, Any, str]:
        started = yield start(child("test"), request_id=f"{var}-child")
        return str((yield wait(started)))

    assert run(parent("x"), request_id="p-1", store=store) == "test_child"
    assert sorted(r.workflow for r in admin.runs(store).runs) == ["child", "parent"]
    assert status(store, "child", "x-child").status is RunStatus.COMPLETED


def test_a_child_workflow_with_an_assigned_id_runs_once_for_any_parent(store: Store) -> None:
    # peer: tests/test_dbos.py::test_child_workflow_assigned_id
    ran: list[str] = []

    @workflow("assigned_child")
    def assigned_child(var: str) -> Generator[Any, Any, str]:
        yield atomic("accounts", "c", counted(ran, "child"))
        return var + "1"

    @workflow("assigning_parent")
    def assigning_parent(var: str) -> Generator[Any, Any, str]:
        return str((yield wait((yield start(assigned_child(var), request_id="assigned_child_id")))))

    assert run(assigning_parent("first"), request_id="p-2", store=store) == "first1"
    assert run(assigning_parent("first"), request_id="p-3", store=store) == "first1"
    assert ran == ["child"]


def test_a_durable_sleep_is_not_slept_again_on_recovery(store: Store) -> None:
    # peer: tests/test_dbos.py::test_sleep
    now = [1_000.0]

    @workflow("sleeper")
    def sleeper(seconds: float) -> Generator[Any, Any, str]:
        yield sleep(seconds)
        return "awake"

    queue = MemoryQueue()
    submit(sleeper(3600), request_id="z-1", store=store, queue=queue, clock=lambda: now[0])
    now[0] += 3600  # the process was down the whole hour: recovery finds it due, no new hour
    assert run(sleeper(3600), request_id="z-1", store=store, clock=lambda: now[0]) == "awake"


def test_a_workflow_receives_a_message_sent_to_its_id(store: Store) -> None:
    # peer: tests/test_dbos.py::test_send_recv
    # peer: tests/test_dbos.py::test_recv_timeout
    @workflow("receiver")
    def receiver(topic: str) -> Generator[Any, Any, Any]:
        return (yield receive(topic, timeout=5))

    queue = MemoryQueue()
    pending = submit(receiver("greeting"), request_id="m-1", store=store, queue=queue)
    send_message(store, "receiver", "m-1", "greeting", "hello", key="hello-m-1", queue=queue)
    worker(store, queue, receiver).run(idle_timeout=0.2)
    assert pending.result(timeout=5) == "hello"


def test_a_message_sent_twice_with_one_key_is_received_once(store: Store) -> None:
    # peer: tests/test_dbos.py::test_send_idempotency_key
    @workflow("counting_receiver")
    def counting_receiver(topic: str) -> Generator[Any, Any, list[Any]]:
        first = yield receive(topic, timeout=1)
        second = yield receive(topic, timeout=0.2)
        return [first, second]

    for _ in range(2):
        send_message(store, "counting_receiver", "m-2", "t", "once", key="k")
    assert run(counting_receiver("t"), request_id="m-2", store=store) == ["once", None]


def test_an_event_set_by_a_workflow_is_read_by_its_id(store: Store) -> None:
    """As DBOS's ``get_event``: the value a workflow set (the last one set), and after a timeout
    with nothing set, None. The reader is :func:`idemflow.client.get_event`, beside ``status``."""
    # peer: tests/test_dbos.py::test_set_get_events
    # peer: tests/test_dbos.py::test_get_event_timeout
    from idemflow import set_event
    from idemflow.client import get_event

    @workflow("publisher")
    def publisher(value: str) -> Generator[Any, Any, None]:
        yield set_event("status", "starting")
        yield set_event("status", value)

    run(publisher("ready"), request_id="ev-1", store=store)
    assert get_event(store, "publisher", "ev-1", "status", timeout=1) == "ready"
    assert get_event(store, "publisher", "ev-1", "other", timeout=0.1) is None
    assert get_event(store, "publisher", "ev-2", "status", timeout=0.1) is None


def test_a_workflow_past_its_timeout_is_ended(store: Store) -> None:
    """A submitted request past ``@workflow(timeout=)`` is ended by a worker, as ``on_failure``
    says (here ``failed``; ``"compensate"`` undoes it and ends it ``aborted``). Unlike DBOS's
    ``SetWorkflowTimeout`` around a direct call, ``run`` does not enforce it: its caller waits."""
    # peer: tests/test_dbos.py::test_workflow_timeout
    now = [1_900_000_000.0]
    clock = lambda: now[0]  # noqa: E731

    @workflow("slow", timeout=60)
    def slow(var: str) -> Generator[Any, Any, None]:
        yield checkpoint()
        yield sleep(3600)  # past the timeout

    queue = MemoryQueue(clock=clock)
    pending = submit(slow("x"), request_id="to-1", store=store, queue=queue, clock=clock)
    worker = Worker([slow], store=store, queue=queue, clock=clock, wait=0.01, relay_every=None)
    worker.run(idle_timeout=0.05)  # to the sleep
    now[0] += 61
    worker.run(idle_timeout=0.05)  # its continuation is due at the deadline, not after the sleep
    with pytest.raises(RequestFailedError, match="deadline"):
        pending.result(timeout=0)


def test_a_finished_workflow_is_forked_from_a_step(store: Store) -> None:
    """DBOS's ``fork_workflow(id, start_step)`` is ``admin.fork(..., from_step=)``: a new request
    keeps the steps before it (not run again) and the workers run the rest. A finished request
    no longer stores its input, so it is given again (checked against its fingerprint)."""
    # peer: tests/test_workflow_management.py::test_fork_steps
    ran: list[str] = []

    @workflow("forkable")
    def forkable(var: str) -> Generator[Any, Any, None]:
        yield atomic("accounts", "a", counted(ran, "one"))
        yield atomic("accounts", "b", counted(ran, "two"))

    run(forkable("x"), request_id="fk-1", store=store)
    queue = MemoryQueue()
    forked = admin.fork(
        store,
        [forkable],
        "forkable",
        "fk-1",
        from_step=2,
        new_request_id="fk-2",
        queue=queue,
        input=(["x"], {}),
    )
    Worker([forkable], store=store, queue=queue).run(idle_timeout=0)
    assert ran == ["one", "two", "two"]
    assert forked.status() is RunStatus.COMPLETED


def test_a_step_is_retried_in_place_under_run(store: Store) -> None:
    """DBOS's ``retries_allowed`` is a retry policy on the step: ``effect(fn, retry=StepRetry())``
    retries it in place under ``run`` (a worker retries it as a delayed continuation)."""
    # peer: tests/test_failures.py::test_step_retries (calling the workflow directly)
    attempts: list[int] = []

    def flaky(key: str) -> str:
        attempts.append(1)
        if len(attempts) < 2:
            raise ConnectionError("down")
        return "sent"

    @workflow("retried_in_place")
    def retried_in_place(var: str) -> Generator[Any, Any, Any]:
        return (yield effect(flaky, retry=StepRetry(initial=0.01, maximum_attempts=3)))

    assert run(retried_in_place("x"), request_id="ri-1", store=store) == "sent"
    assert len(attempts) == 2
