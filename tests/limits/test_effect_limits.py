"""A limit group on one outside call (``effect(..., group=)``), on every store: held around
the call alone, by calls that are really made; ``run`` waits in place then refuses, workers
and ``submit`` wait as a delayed continuation that is never an attempt.

Across worker processes with SIGKILLed holders: ``tests/limits/test_limits_processes.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator
from typing import Any

import botocore.exceptions
import httpx
import pytest
import requests
import urllib3

from idemflow import (
    Concurrency,
    EffectTimeoutError,
    InvalidInputError,
    LimitGroup,
    LimitReachedError,
    Rate,
    StepRetry,
    WorkflowAborted,
    abort,
    arun,
    atomic,
    checkpoint,
    effect,
    run,
    workflow,
)
from idemflow.client import RunStatus, status, submit
from idemflow.engine.drive import drive
from idemflow.limits import calls as call_limits
from idemflow.limits.slots import holders, release, slots_ref
from idemflow.running.runner import run_status
from idemflow.stores import MemoryStore
from idemflow.stores.base import Store
from idemflow.testing import data_rows
from idemflow.worker import MemoryQueue, Worker
from tests.conftest import StoreFactory
from tests.limits.test_limits import Clock, drained, hold
from tests.support.apis import AsyncioApi, BlockingApi

COMPANY_WAIT = 10.0
"""Seconds at most a call waits for company (:class:`Provider`): well inside the tests' 30 s leases."""


class Provider:
    """An outside service that counts the calls inside it at once (and can be held busy)."""

    def __init__(self, crowd: int = 1, patience: float = 0.0, company: int = 0) -> None:
        self.lock = threading.Lock()
        self.met = threading.Condition(self.lock)
        self.crowd = crowd
        self.patience = patience
        """A call stays ``patience`` seconds, or until ``crowd`` calls are inside."""
        self.company = company
        """Then it stays (for at most :data:`COMPANY_WAIT` s) until ``company`` calls were inside at
        once: a test that demands the limit be reached forces it rather than hoping that a loaded
        machine overlaps two calls. Once the peak was reached nobody waits."""
        self.inside = 0
        self.peak = 0
        self.keys: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def call(self, key: str) -> str:
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            self.keys.append(key)
            self.met.notify_all()
        self.entered.set()
        self.gate.wait(30)
        with self.met:  # stays while callers pile up (a crowd of them lets it go at once)
            self.met.wait_for(lambda: self.inside >= self.crowd, timeout=self.patience)
            self.met.wait_for(lambda: self.peak >= self.company, timeout=COMPANY_WAIT)
            self.inside -= 1
        return "ch_" + key[:6]


def slot_holders(store: Store, group: LimitGroup) -> dict[str, float]:
    row = drive(_read(slots_ref(group.limit)), store)
    return holders(row, time.time())


def _read(ref: Any) -> Any:
    from idemflow.core.requests import Read

    return (yield Read(ref))


# --- declared --------------------------------------------------------------------------------


def test_a_bad_group_or_a_call_that_outlasts_the_lease_is_refused_before_anything_is_written() -> None:
    store = MemoryStore()
    short = LimitGroup("short", concurrency=Concurrency(1, lease=5))

    groups: dict[str, Any] = {"typo": "payments", "short": short, "paced": LimitGroup("paced", rate=Rate(5))}

    @workflow("refused")
    def refused(group: str, timeout: float | None) -> Generator[Any, Any, None]:
        yield effect(lambda key: None, group=groups[group], timeout=timeout)

    with pytest.raises(InvalidInputError, match="takes a LimitGroup, not 'payments'"):
        run(refused("typo", None), request_id="r-1", store=store)
    with pytest.raises(InvalidInputError, match="outlasts the lease of limit group 'short'"):
        run(refused("short", 6.0), request_id="r-2", store=store)
    assert run_status(store, "refused", "r-1") is None and run_status(store, "refused", "r-2") is None
    run(refused("short", 5.0), request_id="r-3", store=store)  # a timeout the lease covers
    run(refused("paced", 60.0), request_id="r-4", store=store)  # a rate holds no slot


# --- under run ---------------------------------------------------------------------------------


def test_racing_runs_call_the_provider_at_most_n_at_once_and_each_once(store_factory: StoreFactory) -> None:
    store, provider = store_factory(), Provider(crowd=3, patience=0.3, company=2)
    group = LimitGroup("provider", concurrency=Concurrency(2, lease=30))

    @workflow("booked")
    def booked(n: int) -> Generator[Any, Any, str]:
        yield atomic("accounts", f"b{n}", lambda tx: tx.increment("held"))
        charged: str = yield effect(provider.call, group=group)
        yield atomic("accounts", f"b{n}", lambda tx: tx.put("charge", charged))
        return charged

    answers: dict[int, str] = {}

    def one(n: int) -> None:
        answers[n] = run(booked(n), request_id=f"b-{n}", store=store)

    threads = [threading.Thread(target=one, args=(n % 4,)) for n in range(8)]  # each request twice
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == list(range(4))
    assert provider.peak == 2, f"{provider.peak} calls were inside a group of 2"
    assert len(set(provider.keys)) == 4  # a racing duplicate may call too (no lease), with the same key
    assert slot_holders(store, group) == {}  # every slot given back
    store.flush()
    assert {k: v for k, v in _by_partition(store).items() if k.endswith(".held")} == {
        f"b{n}.held": 1 for n in range(4)
    }


def _by_partition(store: Store) -> dict[str, Any]:
    return {
        f"{partition}.{key}": value for (_, partition, key), value in data_rows(store, "accounts").items()
    }


class Declined(Exception):
    """The provider answered "no": the call is over (declared so by ``non_retryable``)."""


def test_a_replayed_call_takes_no_slot_and_a_declined_call_gives_its_slot_back(
    store_factory: StoreFactory,
) -> None:
    store, clock = store_factory(), Clock(time.time())
    group = LimitGroup("one", concurrency=Concurrency(1, lease=30))
    failures = [Declined("card declined")]

    def flaky(key: str) -> str:
        if failures:
            raise failures.pop()
        return "ok"

    @workflow("replayed")
    def replayed(n: int) -> Generator[Any, Any, str]:
        answer: str = yield effect(flaky, group=group, retry=StepRetry(non_retryable=(Declined,)))
        return answer

    with pytest.raises(Declined, match="card declined"):
        run(replayed(1), request_id="r-1", store=store)
    assert slot_holders(store, group) == {}  # the declined call gave it back
    assert run(replayed(1), request_id="r-1", store=store) == "ok"
    hold(store, group.limit, clock)  # the group is full now
    assert run(replayed(1), request_id="r-1", store=store) == "ok"  # answered from the memo


def test_run_waits_in_place_for_the_group_then_refuses_and_a_later_run_resumes(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, provider = store_factory(), Provider()
    group = LimitGroup("busy", concurrency=Concurrency(1, lease=30))
    monkeypatch.setattr(call_limits, "IN_PLACE_WAIT", 0.0)  # no wait in place: refused at once

    @workflow("waited", retry=StepRetry(maximum_attempts=1))
    def waited(n: int) -> Generator[Any, Any, str]:
        yield atomic("accounts", f"w{n}", lambda tx: tx.increment("before"))
        charged: str = yield effect(provider.call, group=group)
        return charged

    provider.gate.clear()  # the first call stays inside the provider, holding the group
    first = threading.Thread(target=lambda: run(waited(1), request_id="w-1", store=store))
    first.start()
    assert provider.entered.wait(30)
    with pytest.raises(LimitReachedError) as full:
        run(waited(2), request_id="w-2", store=store)
    assert full.value.why == "concurrency slot of group busy (1 at once)"
    assert full.value.retry_after > 0
    record = run_status(store, "waited", "w-2")  # its first step stands; the call was not made
    assert record is not None and record.status is RunStatus.RUNNING and record.attempts is None
    provider.gate.set()
    first.join()
    monkeypatch.setattr(call_limits, "IN_PLACE_WAIT", 30.0)
    assert run(waited(2), request_id="w-2", store=store).startswith("ch_")
    assert len(provider.keys) == 2
    assert _by_partition(store) == {"w1.before": 1, "w2.before": 1}


def test_a_rate_spends_a_token_per_call_and_a_long_wait_is_refused_at_once(
    store_factory: StoreFactory,
) -> None:
    store = store_factory()
    group = LimitGroup("daily", rate=Rate(2, per=3600.0))
    calls: list[str] = []

    @workflow("rated")
    def rated(n: int) -> Generator[Any, Any, int]:
        yield effect(calls.append, group=group)
        return n

    assert [run(rated(n), request_id=f"r-{n}", store=store) for n in range(2)] == [0, 1]
    started = time.monotonic()
    with pytest.raises(LimitReachedError) as full:  # a token is 30 minutes away: no wait in place
        run(rated(2), request_id="r-2", store=store)
    assert time.monotonic() - started < 10
    assert full.value.why == "rate of group daily (2 per 3600 s)"
    assert 1000 < full.value.retry_after <= 1800
    assert len(calls) == 2
    assert run(rated(0), request_id="r-0", store=store) == 0  # a duplicate: answered, no token


def test_a_group_the_workflow_holds_is_not_taken_again_by_its_calls(store_factory: StoreFactory) -> None:
    store = store_factory()
    solo = LimitGroup("solo", concurrency=Concurrency(1, lease=30))

    @workflow("holding", groups=[solo])
    def holding(n: int) -> Generator[Any, Any, str]:
        answer: str = yield effect(lambda key: "inside", group=solo)  # would wait for itself
        return answer

    assert run(holding(1), request_id="h-1", store=store) == "inside"


def test_arun_holds_the_group_around_the_call(store_factory: StoreFactory) -> None:
    store, inside, peak = store_factory(), [0], [0]
    group = LimitGroup("aio", concurrency=Concurrency(1, lease=30))

    async def call(key: str) -> str:
        inside[0] += 1
        peak[0] = max(peak[0], inside[0])
        await asyncio.sleep(0.02)
        inside[0] -= 1
        return key[:4]

    @workflow("awaited")
    async def awaited(n: int) -> str:
        return await effect(call, group=group)

    async def main() -> list[str]:
        return list(
            await asyncio.gather(*(arun(awaited(n), request_id=f"a-{n}", store=store) for n in range(4)))
        )

    assert len(set(asyncio.run(main()))) == 4
    assert peak[0] == 1
    assert slot_holders(store, group) == {}


# --- under workers ---------------------------------------------------------------------------


def test_a_worker_waits_for_the_group_as_a_continuation_never_an_attempt(store_factory: StoreFactory) -> None:
    store, queue, provider = store_factory(), MemoryQueue(), Provider()
    group = LimitGroup("partner", concurrency=Concurrency(1, lease=30))

    @workflow("partnered", retry=StepRetry(maximum_attempts=1))
    def partnered(n: int) -> Generator[Any, Any, Any]:
        yield checkpoint()
        charged = yield effect(provider.call, group=group)
        # what the run record said once the call was made: the note of the wait is gone
        note = yield effect(lambda key: status(store, "partnered", f"p-{n}").waiting)
        return [charged, note]

    pending = [submit(partnered(n), request_id=f"p-{n}", store=store, queue=queue) for n in range(4)]
    seen: set[str | None] = set()
    done = threading.Event()

    def watch() -> None:  # the first call stays inside until another request waits for it
        while not done.wait(0.03):
            seen.update(status(store, "partnered", f"p-{n}").waiting for n in range(4))
            if len(seen) > 1 or time.monotonic() > give_up:
                provider.gate.set()

    provider.gate.clear()
    give_up = time.monotonic() + 10

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        stats = drained(Worker([partnered], store=store, queue=queue, concurrency=4, max_deliveries=1), 4)
    finally:
        done.set()
        watcher.join()
    results = [p.result(timeout=5) for p in pending]
    assert provider.peak == 1 and len(provider.keys) == 4
    assert stats.failed == 0 and stats.completed == 4 and stats.suspended >= 1
    assert "concurrency slot of group partner (1 at once)" in seen
    assert [note for _, note in results] == [None] * 4
    for n in range(4):
        record = run_status(store, "partnered", f"p-{n}")
        assert record is not None and record.attempts is None


def test_submit_hands_a_request_whose_group_is_full_to_the_workers(store_factory: StoreFactory) -> None:
    """Another caller holds the group, and gives its slot back once submit handed the request over
    (a slot's lease ending under workers: ``test_a_worker_retries_after_a_kept_slot_as_a_continuation``)."""
    store, queue, clock = store_factory(), MemoryQueue(), Clock(time.time())
    group = LimitGroup("inline", concurrency=Concurrency(1, lease=30))
    calls: list[str] = []

    @workflow("inline")
    def inline(n: int) -> Generator[Any, Any, int]:
        yield atomic("accounts", f"i{n}", lambda tx: tx.increment("held"))
        yield effect(calls.append, group=group)
        return n

    hold(store, group.limit, clock)  # another caller, holding the group (token "a-dead-holder")
    handle = submit(inline(1), request_id="i-1", store=store, queue=queue)
    assert calls == []  # not made in the submitter, and submit did not wait
    assert status(store, "inline", "i-1").waiting == "concurrency slot of group inline (1 at once)"
    drive(release([group.limit], "a-dead-holder", clock), store)
    drained(Worker([inline], store=store, queue=queue), 1)
    assert handle.result(timeout=5) == 1 and len(calls) == 1
    assert _by_partition(store) == {"i1.held": 1}


def test_a_call_that_timed_out_keeps_its_slot_until_its_lease_ends(store_factory: StoreFactory) -> None:
    """The timed-out call may still be at the provider: no other call takes its slot meanwhile."""
    store = store_factory()
    group = LimitGroup("late", concurrency=Concurrency(1, lease=30))
    answered = threading.Event()

    @workflow("late")
    def late(n: int) -> Generator[Any, Any, None]:
        yield effect(
            lambda key: answered.wait(5), group=group, timeout=0.2, retry=StepRetry(maximum_attempts=1)
        )

    with pytest.raises(EffectTimeoutError):
        run(late(1), request_id="l-1", store=store)
    assert len(slot_holders(store, group)) == 1  # held by the call still out there
    answered.set()


# --- a failed call: kept unless it is over ----------------------------------------------------


def _may_still_run() -> dict[str, Exception]:
    """What HTTP clients raise when they gave up on a call the provider may still be making."""
    return {
        "timeout": TimeoutError("read timed out"),
        "requests": requests.exceptions.ReadTimeout("read timed out. (read timeout=5)"),
        "httpx": httpx.ReadTimeout("timed out"),
        "botocore": botocore.exceptions.ReadTimeoutError(endpoint_url="https://provider.example"),
        "urllib3": urllib3.exceptions.ReadTimeoutError(None, "/charges", "read timed out"),  # type: ignore[arg-type]
        "reset": ConnectionResetError(104, "connection reset by peer"),
        "unknown": RuntimeError("something nobody declared"),
        "declared timeout": TimeoutError("named non-retryable, still maybe running"),
    }


class LateProvider:
    """A provider that goes on working on every call it received, while its client gives up."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.working = 0
        """Calls at the provider now: none of them ends during the test."""
        self.peak = 0
        self.lock = threading.Lock()

    def call(self, key: str) -> str:
        with self.lock:
            self.working += 1
            self.peak = max(self.peak, self.working)
        raise self.error


@pytest.mark.parametrize("api_name", ["blocking", "asyncio"])
def test_a_call_that_may_still_run_keeps_its_slot_and_a_declined_one_gives_it_back(
    store_factory: StoreFactory, api_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six requests at a limit of 1 whose client raises while the provider goes on: one call at
    the provider, the other five wait for its slot (refused at once here: no wait in place)."""
    store, api = store_factory(), AsyncioApi() if api_name == "asyncio" else BlockingApi()
    monkeypatch.setattr(call_limits, "IN_PLACE_WAIT", 0.0)
    kinds = {name: LateProvider(error) for name, error in _may_still_run().items()}
    declined: list[str] = []
    policy = StepRetry(maximum_attempts=1, non_retryable=(Declined, TimeoutError))
    groups = {
        name: LimitGroup(f"late-{n}", concurrency=Concurrency(1, lease=60)) for n, name in enumerate(kinds)
    }
    groups["declined"] = LimitGroup("declined", concurrency=Concurrency(1, lease=60))

    def decline(key: str) -> str:
        declined.append(key)
        raise Declined("card declined")  # the provider answered: the call is over

    @workflow("late-client")
    def late_client(kind: str, n: int) -> Generator[Any, Any, str]:
        call = decline if kind == "declined" else kinds[kind].call
        retry = policy if kind in ("declined", "declared timeout") else None
        answer: str = yield effect(call, group=groups[kind], retry=retry)
        return answer

    try:
        for kind in [*kinds, "declined"]:
            for n in range(6):
                expected = Declined if kind == "declined" else type(_may_still_run()[kind])
                with pytest.raises((expected, LimitReachedError)):
                    api.run(late_client(kind, n), request_id=f"{kind}-{n}", store=store)
    finally:
        api.close()
    assert {kind: provider.peak for kind, provider in kinds.items()} == dict.fromkeys(kinds, 1)
    for kind in kinds:
        assert len(slot_holders(store, groups[kind])) == 1, kind  # until its lease ends by itself
    assert len(declined) == 6 and slot_holders(store, groups["declined"]) == {}


@pytest.mark.parametrize("api_name", ["blocking", "asyncio"])
def test_the_next_attempt_after_a_kept_slot_waits_for_its_lease_then_calls(
    store_factory: StoreFactory, api_name: str
) -> None:
    """A kept slot deadlocks nothing: the retry waits for it as for any full group."""
    store, api = store_factory(), AsyncioApi() if api_name == "asyncio" else BlockingApi()
    group = LimitGroup("retried", concurrency=Concurrency(1, lease=0.5))
    failures = [ConnectionResetError(104, "connection reset by peer")]
    calls: list[str] = []

    def flaky(key: str) -> str:
        calls.append(key)
        if failures:
            raise failures.pop()
        return "ok"

    @workflow("retried")
    def retried(n: int) -> Generator[Any, Any, str]:
        answer: str = yield effect(flaky, group=group, retry=StepRetry(initial=0.05, maximum_attempts=3))
        return answer

    try:
        assert api.run(retried(1), request_id="r-1", store=store) == "ok"
    finally:
        api.close()
    assert len(calls) == 2 and slot_holders(store, group) == {}


def test_a_worker_retries_after_a_kept_slot_as_a_continuation(store_factory: StoreFactory) -> None:
    store, queue = store_factory(), MemoryQueue()
    group = LimitGroup("worked", concurrency=Concurrency(1, lease=0.5))
    failures = [TimeoutError("read timed out")]
    calls: list[str] = []

    def flaky(key: str) -> str:
        calls.append(key)
        if failures:
            raise failures.pop()
        return "ok"

    @workflow("worked", retry=StepRetry(initial=0.05, maximum_attempts=3))
    def worked(n: int) -> Generator[Any, Any, str]:
        yield checkpoint()
        answer: str = yield effect(flaky, group=group)
        return answer

    pending = submit(worked(1), request_id="w-1", store=store, queue=queue)
    stats = drained(Worker([worked], store=store, queue=queue), 1)
    assert pending.result(timeout=5) == "ok"
    assert len(calls) == 2 and stats.completed == 1 and stats.failed == 0


# --- undos ------------------------------------------------------------------------------------


def _aborting(
    name: str, group: LimitGroup, charges: Provider, refunds: Provider, met: threading.Barrier
) -> Any:
    """Charge under ``group``, meet every other request, then abort: a mass abort, all at once."""

    def refund(key: str, charge: str | None) -> str:
        return refunds.call(key)

    def meet(key: str) -> None:
        met.wait(30)

    @workflow(name)
    def aborting(n: int) -> Generator[Any, Any, None]:
        yield checkpoint()
        yield effect(charges.call, name="charge", group=group, compensate=refund)
        yield effect(meet)
        yield abort("cancelled by the customer")

    return aborting


@pytest.mark.parametrize("api_name", ["blocking", "asyncio"])
def test_a_mass_abort_holds_the_group_around_the_undos(store_factory: StoreFactory, api_name: str) -> None:
    store, api = store_factory(), AsyncioApi() if api_name == "asyncio" else BlockingApi()
    requests_at_once = 5  # the asyncio API's calls share a thread pool of 6 on 2 cores
    group = LimitGroup("refunded", concurrency=Concurrency(2, lease=30))
    charges, refunds = Provider(), Provider(crowd=requests_at_once, patience=0.2)
    aborting = _aborting("mass-abort", group, charges, refunds, threading.Barrier(requests_at_once))
    outcomes: dict[int, BaseException] = {}

    def one(n: int) -> None:
        try:
            api.run(aborting(n), request_id=f"a-{n}", store=store)
        except BaseException as exc:  # noqa: BLE001 - looked at below
            outcomes[n] = exc

    try:
        threads = [threading.Thread(target=one, args=(n,)) for n in range(requests_at_once)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        api.close()
    assert {n: type(exc) for n, exc in outcomes.items()} == dict.fromkeys(
        range(requests_at_once), WorkflowAborted
    )
    assert refunds.peak <= 2, f"{refunds.peak} undos were inside a group of 2"
    assert sorted(refunds.keys) == sorted(charges.keys) and len(set(refunds.keys)) == requests_at_once
    assert slot_holders(store, group) == {}


def test_workers_wait_for_the_group_in_a_mass_abort_as_a_continuation(store_factory: StoreFactory) -> None:
    store, queue = store_factory(), MemoryQueue()
    requests_at_once = 4
    group = LimitGroup("worked-refunds", concurrency=Concurrency(1, lease=30))
    charges, refunds = Provider(), Provider(crowd=requests_at_once, patience=0.2)
    aborting = _aborting("worked-abort", group, charges, refunds, threading.Barrier(requests_at_once))
    pending = [
        submit(aborting(n), request_id=f"w-{n}", store=store, queue=queue) for n in range(requests_at_once)
    ]
    worker = Worker([aborting], store=store, queue=queue, concurrency=requests_at_once)
    stats = drained(worker, requests_at_once)
    for handle in pending:
        with pytest.raises(WorkflowAborted):
            handle.result(timeout=5)
    assert refunds.peak == 1 and stats.suspended >= 1  # an undo waited for the group, as a continuation
    assert sorted(refunds.keys) == sorted(charges.keys) and len(set(refunds.keys)) == requests_at_once
    for n in range(requests_at_once):
        assert status(store, "worked-abort", f"w-{n}").status is RunStatus.ABORTED


def test_run_refuses_an_undo_whose_group_stays_full_and_a_later_run_finishes_the_abort(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, clock = store_factory(), Clock(time.time())
    group = LimitGroup("undo-full", concurrency=Concurrency(1, lease=30))
    refunds: list[str] = []

    def filled(key: str) -> None:  # another call takes the provider's slot once ours was made
        hold(store, group.limit, clock, "another-caller")

    @workflow("undo-full")
    def undo_full(n: int) -> Generator[Any, Any, None]:
        yield effect(lambda key: "ch_1", group=group, compensate=lambda key, charge: refunds.append(key))
        yield effect(filled)
        yield abort("cancelled")

    monkeypatch.setattr(call_limits, "IN_PLACE_WAIT", 0.0)
    with pytest.raises(LimitReachedError):  # the undo waits for the provider: not a failed undo
        run(undo_full(1), request_id="u-1", store=store)
    assert refunds == [] and run_status(store, "undo-full", "u-1") is not None
    drive(release([group.limit], "another-caller", clock), store)
    with pytest.raises(WorkflowAborted):
        run(undo_full(1), request_id="u-1", store=store)
    assert len(refunds) == 1 and slot_holders(store, group) == {}
