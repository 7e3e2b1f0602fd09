"""Concurrency and rate limits in one process, on every store: checked when declared, held in
the store, given back, expired with their lease; ``run`` refuses, workers wait, submit queues.

The cross-process claims (3 worker processes x 8 threads, SIGKILLed holders) are in
``tests/limits/test_limits_processes.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest

from idemflow import (
    Concurrency,
    InvalidInputError,
    LimitGroup,
    LimitReachedError,
    Rate,
    StepRetry,
    arun,
    atomic,
    effect,
    run,
    workflow,
)
from idemflow.client import RunStatus, status, submit
from idemflow.core.limit_spec import Limit
from idemflow.engine.drive import drive
from idemflow.errors import ErrorCode
from idemflow.limits.slots import acquire, bucket_ref, holders, release, slots_ref
from idemflow.running.runner import run_status
from idemflow.stores import MemoryStore
from idemflow.stores.base import Store
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash, data_rows
from idemflow.worker import AsyncWorker, MemoryQueue, Worker, WorkerStats
from tests.conftest import StoreFactory
from tests.support.apis import AsyncioApi, BlockingApi


class Clock:
    """A clock the test moves: leases and refills without waiting."""

    def __init__(self, at: float = 1_000_000.0) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def hold(store: Store, limit: Limit, clock: Clock, token: str = "a-dead-holder") -> None:
    """Take a slot as a process that then dies would: never given back."""
    assert drive(acquire([limit], token, clock), store) is None


def tally(name: str) -> Any:
    return atomic("accounts", name, lambda tx: tx.increment("ran"))


FALLBACK_IDLE = 30.0
"""Seconds without progress after which a drained worker stops anyway (a test that went wrong)."""


def _stopper(worker: Worker | AsyncWorker, finished: int) -> Callable[[WorkerStats], None]:
    def enough(stats: WorkerStats) -> None:
        if stats.finished >= finished:
            worker.stop()

    return enough


def drained(worker: Worker, finished: int) -> WorkerStats:
    """Run ``worker`` until ``finished`` requests finished (completed, aborted or answered), then
    stop it: no idle spell is waited out. One that never gets there stops after
    :data:`FALLBACK_IDLE` seconds without progress, and the test's assertions say what is missing."""
    return worker.run(idle_timeout=FALLBACK_IDLE, on_progress=_stopper(worker, finished), progress_every=0.02)


async def adrained(worker: AsyncWorker, finished: int) -> WorkerStats:
    """:func:`drained` for an :class:`AsyncWorker`."""
    return await worker.run(
        idle_timeout=FALLBACK_IDLE, on_progress=_stopper(worker, finished), progress_every=0.02
    )


# --- declared and checked at decoration time ------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"concurrency": 0}, "a concurrency limit is an int >= 1, not 0"),
        ({"concurrency": True}, "not True"),
        ({"concurrency": "2"}, "not '2'"),
        ({"rate": "50/s"}, "rate takes a Rate(count, per=seconds), not '50/s'"),
        ({"rate": 5}, "rate takes a Rate"),
        ({"groups": LimitGroup("g1", concurrency=1)}, "groups takes a list of LimitGroup"),
        ({"groups": ["payments"]}, "groups takes LimitGroup objects, not 'payments'"),
        ({"groups": [LimitGroup("g2", rate=Rate(1)), LimitGroup("g2", concurrency=2)]}, "named twice"),
    ],
)
def test_a_bad_limit_is_refused_where_the_workflow_is_declared(options: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInputError) as refused:

        @workflow("limited", **options)
        def limited(x: int) -> Generator[Any, Any, int]:
            yield tally("x")
            return x

    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Rate(0), "a rate's count is an int >= 1, not 0"),
        (lambda: Rate(5, per=-1.0), "a rate's period"),
        (lambda: Rate(5, per=float("nan")), "a rate's period"),
        (lambda: Rate(5, burst=0), "a rate's burst"),
        (lambda: LimitGroup("payments"), "needs concurrency= or rate="),
        (lambda: LimitGroup("bad name!", concurrency=1), "bad name!"),
        (lambda: Concurrency(1.5), "not 1.5"),  # type: ignore[arg-type]
        (lambda: Concurrency(2, lease=0), "a concurrency lease must be a finite number of seconds > 0"),
    ],
)
def test_a_bad_rate_group_or_concurrency_is_refused_when_built(make: Any, says: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        make()
    assert says in str(refused.value)


# --- run: a full limit refuses before anything runs -----------------------------------------------


def test_a_full_concurrency_limit_refuses_run_before_anything_is_written(store_factory: StoreFactory) -> None:
    store, clock = store_factory(), Clock()

    @workflow("one_at_a_time", concurrency=Concurrency(1, lease=10))
    def one_at_a_time(name: str) -> Generator[Any, Any, str]:
        yield tally(name)
        return name

    hold(store, one_at_a_time.limits[0], clock)
    with pytest.raises(LimitReachedError) as full:
        run(one_at_a_time("a"), request_id="r-1", store=store, clock=clock)
    assert full.value.code is ErrorCode.LIMIT_REACHED
    assert full.value.why == "concurrency slot of workflow one_at_a_time (1 at once)"
    assert 0 < full.value.retry_after <= 10
    assert status(store, "one_at_a_time", "r-1").status is RunStatus.UNKNOWN
    assert data_rows(store, "accounts") == {}
    clock.at += 10.5  # the dead holder's lease ended: its slot is free
    assert run(one_at_a_time("a"), request_id="r-1", store=store, clock=clock) == "a"
    assert run(one_at_a_time("b"), request_id="r-2", store=store, clock=clock) == "b"  # given back


def test_a_slot_is_given_back_when_the_request_aborts_or_raises(store_factory: StoreFactory) -> None:
    store = store_factory()

    def boom(key: str) -> None:
        raise RuntimeError("boom")

    @workflow("fragile", concurrency=1)
    def fragile(how: str) -> Generator[Any, Any, str]:
        if how == "raise":
            yield effect(boom)
        yield atomic("accounts", how, lambda tx: tx.abort("no") if how == "abort" else tx.put("k", 1))
        return how

    with pytest.raises(RuntimeError):
        run(fragile("raise"), request_id="f-1", store=store)
    with pytest.raises(Exception, match="no"):
        run(fragile("abort"), request_id="f-2", store=store)
    assert run(fragile("ok"), request_id="f-3", store=store) == "ok"
    row = store.read(slots_ref(fragile.limits[0]))
    assert row is not None and row.value == {"holders": {}}


def test_a_holder_making_store_calls_keeps_its_slot_past_its_first_lease(store_factory: StoreFactory) -> None:
    """Renewed between store calls: 20 s into a 10 s lease its slot is still its own; a holder
    that stopped renewing has lost it by then (the lease is what a dead holder leaves behind)."""
    store, clock = store_factory(), Clock()
    lease = 10.0
    probes: list[bool] = []

    def probe() -> bool:
        """Can another execution take a slot now?"""
        return drive(acquire([long.limits[0]], f"probe-{len(probes)}", clock), store) is None

    def later(tx: Any) -> None:
        clock.at += 4.0  # a step that takes 4 s of the clock

    @workflow("long", concurrency=Concurrency(1, lease=lease))
    def long(n: int) -> Generator[Any, Any, int]:
        for i in range(5):
            yield atomic("accounts", f"l{i}", later)
        yield atomic("accounts", "probe", lambda tx: probes.append(probe()))
        return n

    assert run(long(1), request_id="long-1", store=store, clock=clock) == 1
    assert probes == [False]  # 20 s after it took the slot, it still held it
    hold(store, long.limits[0], clock, "stalled")  # takes the slot, then never renews
    clock.at += lease + 0.5
    assert probe()  # the stalled holder's lease ended: the slot is free


def test_racing_runs_never_hold_more_slots_than_the_limit(store_factory: StoreFactory) -> None:
    store = store_factory()
    inside, peak, met = [0], [0], threading.Condition()
    gate = threading.Barrier(6, timeout=10)

    def enter(key: str) -> None:
        with met:  # a holder stays (for at most 5 s) until a second one is inside with it: on a
            inside[0] += 1  # loaded machine two short calls may never overlap, and that the limit
            peak[0] = max(peak[0], inside[0])  # of 2 is reached is what is checked, not hoped for
            met.notify_all()
            met.wait_for(lambda: peak[0] >= 2, timeout=5)
            inside[0] -= 1

    @workflow("pair", concurrency=2)
    def pair(n: int) -> Generator[Any, Any, int]:
        yield effect(enter)
        return n

    outcomes: list[Any] = []

    def go(n: int) -> None:
        gate.wait()
        for attempt in range(200):
            try:
                outcomes.append(run(pair(n), request_id=f"p-{n}", store=store))
                return
            except LimitReachedError as full:
                threading.Event().wait(min(full.retry_after, 0.05) * (1 + attempt % 3))
        outcomes.append("gave up")

    threads = [threading.Thread(target=go, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == list(range(6))
    assert peak[0] == 2


def test_a_rate_allows_its_burst_then_one_start_per_refill(store_factory: StoreFactory) -> None:
    store, clock = store_factory(), Clock()

    @workflow("paced", rate=Rate(5, per=1.0))
    def paced(n: int) -> Generator[Any, Any, int]:
        yield tally("paced")
        return n

    started = [run(paced(n), request_id=f"b-{n}", store=store, clock=clock) for n in range(5)]
    assert started == [0, 1, 2, 3, 4]  # the burst: the bucket starts full
    with pytest.raises(LimitReachedError) as full:
        run(paced(5), request_id="b-5", store=store, clock=clock)
    assert full.value.why == "rate of workflow paced (5 per 1 s)"
    assert full.value.retry_after == pytest.approx(0.2)
    clock.at += 0.2
    assert run(paced(5), request_id="b-5", store=store, clock=clock) == 5
    with pytest.raises(LimitReachedError):
        run(paced(6), request_id="b-6", store=store, clock=clock)
    clock.at += 10  # refilled to the burst, not beyond
    assert [run(paced(n), request_id=f"c-{n}", store=store, clock=clock) for n in range(5)] == list(range(5))
    with pytest.raises(LimitReachedError):
        run(paced(9), request_id="c-9", store=store, clock=clock)
    bucket = store.read(bucket_ref(paced.limits[0]))
    assert bucket is not None and bucket.value["tokens"] == pytest.approx(0.0)


def test_a_duplicate_of_a_finished_request_gets_its_answer_while_the_limit_is_full(
    store_factory: StoreFactory,
) -> None:
    store, clock = store_factory(), Clock()

    @workflow("solo", concurrency=Concurrency(1, lease=5))
    def solo(n: int) -> Generator[Any, Any, int]:
        yield tally("solo")
        return n

    assert run(solo(1), request_id="d-1", store=store, clock=clock) == 1
    hold(store, solo.limits[0], clock)
    assert run(solo(1), request_id="d-1", store=store, clock=clock) == 1  # an API client's retry
    with pytest.raises(LimitReachedError):  # another input under that id is not its duplicate
        run(solo(2), request_id="d-1", store=store, clock=clock)
    with pytest.raises(LimitReachedError):
        run(solo(1), request_id="d-2", store=store, clock=clock)
    assert data_rows(store, "accounts") == {("accounts", "solo", "ran"): 1}


# --- groups span workflows ---------------------------------------------------------------------


def test_a_group_limit_spans_every_workflow_that_names_it(store_factory: StoreFactory) -> None:
    store, clock = store_factory(), Clock()
    provider = LimitGroup("provider", concurrency=Concurrency(1, lease=5), rate=Rate(3, per=60.0))

    @workflow("charge", groups=[provider])
    def charge(n: int) -> Generator[Any, Any, str]:
        yield tally("charge")
        return f"charged {n}"

    @workflow("refund", groups=(provider,), concurrency=4)
    def refund(n: int) -> Generator[Any, Any, str]:
        yield tally("refund")
        return f"refunded {n}"

    hold(store, provider.limit, clock, "charge-in-flight")  # one slot and one token taken
    with pytest.raises(LimitReachedError) as full:
        run(refund(1), request_id="g-1", store=store, clock=clock)
    assert full.value.why == "concurrency slot of group provider (1 at once)"
    clock.at += 6
    assert run(refund(1), request_id="g-1", store=store, clock=clock) == "refunded 1"
    assert run(charge(2), request_id="g-2", store=store, clock=clock) == "charged 2"
    with pytest.raises(LimitReachedError) as spent:  # three starts of the group this minute
        run(charge(3), request_id="g-3", store=store, clock=clock)
    assert spent.value.why == "rate of group provider (3 per 60 s)"
    # A full group takes nothing of the workflow's own limits: its slots are all free.
    own = store.read(slots_ref(refund.limits[0]))
    assert own is not None and own.value == {"holders": {}}


# --- workers: waiting is a delayed continuation, never an attempt --------------------------------


def test_a_worker_requeues_a_request_over_its_limit_and_waiting_is_not_an_attempt(
    store_factory: StoreFactory,
) -> None:
    """A dead holder keeps the only slot until the watcher saw a request wait for it, then gives it
    back (a lease ending frees a slot the same way: ``test_a_full_concurrency_limit_refuses_run_…``
    here, SIGKILLed holders in ``test_limits_processes.py``): the wait is seen however slow the
    store is, and nobody waits out a lease."""
    store, queue, clock = store_factory(), MemoryQueue(), Clock(time.time())

    @workflow("queued", concurrency=Concurrency(1, lease=30.0), retry=StepRetry(maximum_attempts=1))
    def queued(n: int) -> Generator[Any, Any, int]:
        yield tally(f"q{n}")
        return n

    hold(store, queued.limits[0], clock)  # a holder that died just now
    pending = [submit(queued(n), request_id=f"w-{n}", store=store, queue=queue) for n in range(3)]
    assert data_rows(store, "accounts") == {}  # submit ran nothing of a limited workflow
    # max_deliveries=1: had a wait counted as an attempt, the second delivery would fail it
    worker = Worker([queued], store=store, queue=queue, concurrency=2, max_deliveries=1, relay_every=None)
    seen: set[str | None] = set()
    done = threading.Event()

    def watch() -> None:  # the dead holder's slot comes back once a request was seen waiting
        give_up, released = time.monotonic() + 20, False
        while not done.wait(0.03):
            seen.update(status(store, "queued", f"w-{n}").waiting for n in range(3))
            if not released and (len(seen) > 1 or time.monotonic() > give_up):
                drive(release([queued.limits[0]], "a-dead-holder", clock), store)
                released = True

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        stats = drained(worker, 3)
    finally:
        done.set()
        watcher.join()
    assert [p.result(timeout=5) for p in pending] == [0, 1, 2]
    assert stats.failed == 0 and stats.completed == 3 and stats.waiting >= 1
    assert "concurrency slot of workflow queued (1 at once)" in seen
    assert all(status(store, "queued", f"w-{n}").waiting is None for n in range(3))
    for n in range(3):  # no attempt was counted against the one the policy allows
        record = run_status(store, "queued", f"w-{n}")
        assert record is not None and record.attempts is None


def test_under_a_limit_submit_queues_the_request_and_runs_nothing_in_the_caller() -> None:
    store, queue = MemoryStore(), MemoryQueue()

    @workflow("deferred", rate=Rate(1, per=3600.0))
    def deferred(n: int) -> Generator[Any, Any, int]:
        yield tally("deferred")
        return n

    pending = submit(deferred(1), request_id="s-1", store=store, queue=queue)
    assert pending.status() is RunStatus.RUNNING and queue.approximate_size() == 1
    assert data_rows(store, "accounts") == {}
    again = submit(deferred(1), request_id="s-1", store=store, queue=queue)  # a copy enqueues nothing
    assert again.status() is RunStatus.RUNNING and queue.approximate_size() == 1
    drained(Worker([deferred], store=store, queue=queue, relay_every=None), 1)
    assert pending.result(timeout=5) == 1


# --- asyncio: the same gate, awaited ----------------------------------------------------------------


def test_arun_takes_and_gives_back_the_same_slots(store_factory: StoreFactory) -> None:
    store, clock = store_factory(), Clock()

    @workflow("awaited", concurrency=Concurrency(1, lease=3))
    def awaited(n: int) -> Generator[Any, Any, int]:
        yield tally("awaited")
        return n

    assert asyncio.run(arun(awaited(1), request_id="a-1", store=store, clock=clock)) == 1
    hold(store, awaited.limits[0], clock)
    with pytest.raises(LimitReachedError):
        asyncio.run(arun(awaited(2), request_id="a-2", store=store, clock=clock))
    clock.at += 4
    assert asyncio.run(arun(awaited(2), request_id="a-2", store=store, clock=clock)) == 2


def test_an_asyncio_worker_holds_the_limit_with_its_tasks(store_factory: StoreFactory) -> None:
    store, queue = store_factory(), MemoryQueue()
    inside, peak = [0], [0]

    async def enter(key: str) -> None:
        inside[0] += 1
        peak[0] = max(peak[0], inside[0])
        await asyncio.sleep(0.02)  # long enough for a third one to pile in, were the limit broken
        deadline = asyncio.get_running_loop().time() + 5.0  # well inside the 10 s lease
        while peak[0] < 2 and asyncio.get_running_loop().time() < deadline:  # until two met once:
            await asyncio.sleep(0.01)  # on a slow store two holders meet all the same
        inside[0] -= 1

    @workflow("tasks", concurrency=Concurrency(2, lease=10))
    async def tasks(n: int) -> int:
        await effect(enter)
        return n

    pending = [submit(tasks(n), request_id=f"t-{n}", store=store, queue=queue) for n in range(8)]
    worker = AsyncWorker([tasks], store=store, queue=queue, concurrency=6, wait=0.02, relay_every=None)
    stats = asyncio.run(adrained(worker, 8))
    assert sorted(p.result(timeout=5) for p in pending) == list(range(8))
    assert stats.completed == 8 and peak[0] == 2


class DelaysSeen(MemoryQueue):
    """A memory queue that keeps the delay of every send (SQS refuses one over 900 s)."""

    def __init__(self) -> None:
        super().__init__()
        self.delays: list[float] = []

    def send(self, body: str, *, delay: float = 0.0) -> None:
        self.delays.append(delay)
        super().send(body, delay=delay)


def test_a_wait_longer_than_a_queue_delay_is_queued_in_hops() -> None:
    store, queue = MemoryStore(), DelaysSeen()

    @workflow("hourly", rate=Rate(1, per=3600.0))
    def hourly(n: int) -> Generator[Any, Any, int]:
        yield tally("hourly")
        return n

    first = submit(hourly(1), request_id="h-1", store=store, queue=queue)
    second = submit(hourly(2), request_id="h-2", store=store, queue=queue)
    Worker([hourly], store=store, queue=queue, relay_every=None).run(idle_timeout=0.3)
    assert first.result(timeout=1) == 1
    assert status(store, "hourly", "h-2").waiting == "rate of workflow hourly (1 per 3600 s)"
    assert second.status() is RunStatus.RUNNING
    assert max(queue.delays) == 900.0  # the longest delay every queue takes; it looks again then


def test_an_http_caller_over_the_limit_gets_429_with_retry_after() -> None:
    from idemflow.asgi import answer

    response = answer(
        LimitReachedError("order", "k-2", "concurrency slot of workflow order (1 at once)", 2.2)
    )
    assert response is not None and response.status_code == 429
    assert response.headers["retry-after"] == "3"
    assert b'"error":"limit_reached"' in response.body


# --- a simulated crash keeps what a killed process keeps ------------------------------------------


@pytest.mark.exact_calls  # the commits are counted: no phantom conflicts
@pytest.mark.parametrize("api_name", ["blocking", "asyncio"])
def test_a_simulated_crash_at_any_commit_gives_back_no_slot_it_held(
    store_factory: StoreFactory, api_name: str
) -> None:
    """A SIGKILLed holder runs nothing on its way out: its slots stay until their leases end.
    ``FaultyStore``'s crash must leave the same; it used to give the workflow's slot back."""
    store, clock = store_factory(), Clock(time.time())
    api = AsyncioApi() if api_name == "asyncio" else BlockingApi()
    group = LimitGroup("crashed-provider", concurrency=Concurrency(1, lease=30))

    @workflow("crashed", concurrency=Concurrency(1, lease=30))
    def crashed(n: int) -> Generator[Any, Any, int]:
        yield tally(f"c{n}")
        yield effect(lambda key: key[:4], group=group)
        yield tally(f"c{n}")
        return n

    limits = {"workflow": crashed.limits[0], "group": group.limit}
    seen: list[FaultPoint] = []

    def watched(point: FaultPoint) -> Fault | None:
        seen.append(point)
        return None

    try:
        assert api.run(crashed(0), request_id="c-0", store=FaultyStore(store, watched), clock=clock) == 0
        writes = {  # the commits that take (first) and give back (last) each limit's slot
            kind: [p.index for p in seen if any(op.ref == slots_ref(limit) for op in p.ops)]
            for kind, limit in limits.items()
        }
        assert all(len(indexes) == 2 for indexes in writes.values()), writes
        for crash in range(1, len(seen)):
            clock.at += 31  # every lease left by the crash before has ended
            dies = FaultyStore(
                store, lambda point, at=crash: Fault.CRASH_BEFORE if point.index == at else None
            )
            with pytest.raises(SimulatedCrash):
                api.run(crashed(crash), request_id=f"c-{crash}", store=dies, clock=clock)
            held = {
                kind: len(holders(store.read(slots_ref(limit)), clock.at)) for kind, limit in limits.items()
            }
            kept = {kind: int(taken < crash <= given) for kind, (taken, given) in writes.items()}
            assert held == kept, f"crash before commit #{crash}"
    finally:
        api.close()
