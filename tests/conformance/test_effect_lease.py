"""``effect(fn, lease=seconds)``: racing executions call an effect once; a dead holder blocks
nobody beyond its lease. On every store, with the blocking and the asyncio API."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Generator
from typing import Any

import pytest
from tenacity import Retrying

from idemflow import Idem, InvalidInputError, RetryPolicy, effect, idempotent_function, workflow
from idemflow.keys import RUNS_TABLE
from idemflow.stores import Store
from tests.support.apis import Api, ApiName

RACERS = 4


class Waits:
    """The policy's sleep: counts the waits of executions that found the lease held (on the
    asyncio API it must not block the loop: it returns the coroutine the driver awaits)."""

    def __init__(self, api: ApiName) -> None:
        self.count = 0
        self.lock = threading.Lock()
        self.api = api

    def __call__(self, seconds: float) -> Any:
        with self.lock:
            self.count += 1
        if self.api == "asyncio":
            return asyncio.sleep(seconds)
        time.sleep(seconds)
        return None


def blocking_until(release: threading.Event, api: ApiName, then: Any) -> Any:
    """An effect function that holds its call until ``release``; a coroutine function on the
    asyncio API, where a blocking one would stop the loop every execution shares."""
    if api == "asyncio":

        async def held(key: str) -> Any:
            await asyncio.to_thread(release.wait, 30)
            return then(key)

        return held

    def blocked(key: str) -> Any:
        release.wait(30)
        return then(key)

    return blocked


def leased_policy(waits: Waits) -> RetryPolicy:
    return RetryPolicy(conflicts=Retrying(sleep=waits))


def race(target: Any, n: int) -> tuple[list[Any], list[BaseException]]:
    results: list[Any] = []
    errors: list[BaseException] = []

    def contender() -> None:
        try:
            results.append(target())
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=contender) for _ in range(n)]
    for thread in threads:
        thread.start()
    return results, errors, threads  # type: ignore[return-value]


def test_racing_executions_call_a_leased_effect_once(store: Store, api: Api) -> None:
    calls: list[str] = []
    entered, release, waits = threading.Event(), threading.Event(), Waits(api.name)

    def record(key: str) -> str:
        calls.append(key)
        entered.set()
        return key

    def answer(key: str) -> str:
        return f"charged {len(calls)}"

    held = blocking_until(release, api.name, answer)

    def charge(key: str) -> Any:
        record(key)
        return held(key)

    @workflow("lease-charge")
    def charging(order: str) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(charge, name="charge", lease=30))

    request_id = "lease-" + uuid.uuid4().hex
    policy = leased_policy(waits)
    results, errors, threads = race(
        lambda: api.run(charging("o"), request_id=request_id, store=store, policy=policy), 1
    )
    assert entered.wait(30)  # the first holds the lease and is inside the call
    more, more_errors, more_threads = race(
        lambda: api.run(charging("o"), request_id=request_id, store=store, policy=policy), RACERS - 1
    )
    deadline = time.monotonic() + 30
    while waits.count < RACERS - 1 and time.monotonic() < deadline:  # every other one is waiting
        time.sleep(0.01)
    release.set()
    for thread in threads + more_threads:
        thread.join()
    assert errors == more_errors == []
    assert len(calls) == 1
    assert results + more == ["charged 1"] * RACERS


def test_a_holder_that_died_blocks_nobody_beyond_its_lease(store: Store, api: Api) -> None:
    """The first holder's process dies inside the call (its lease row stays); a retry waits at most
    the lease, takes it over and calls once more, and every later duplicate gets that answer."""
    calls: list[str] = []

    class Died(BaseException):
        """Not an Exception: like a SIGKILL, nothing of the execution's own runs after it."""

    def charge(key: str) -> str:
        calls.append(key)
        if len(calls) == 1:
            raise Died
        return "charged"

    @workflow("lease-died")
    def charging(order: str) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(charge, name="charge", lease=0.5))

    request_id = "lease-" + uuid.uuid4().hex
    with pytest.raises(Died):
        api.run(charging("o"), request_id=request_id, store=store)
    assert any(key.endswith("|l1") for _, key, _ in store.scan(RUNS_TABLE, request_id))  # left behind
    started = time.monotonic()
    assert api.run(charging("o"), request_id=request_id, store=store) == "charged"
    assert time.monotonic() - started < 30  # it did not wait for the policy's deadline either
    assert api.run(charging("o"), request_id=request_id, store=store) == "charged"
    assert len(calls) == 2
    store.flush()
    assert not any(key.endswith("|l1") for _, key, _ in store.scan(RUNS_TABLE, request_id))


def test_a_call_that_raised_gives_its_lease_up_at_once(store: Store, api: Api) -> None:
    calls: list[str] = []

    def flaky(key: str) -> str:
        calls.append(key)
        if len(calls) == 1:
            raise ConnectionError("payment service down")
        return "ok"

    @workflow("lease-flaky")
    def charging(order: str) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(flaky, name="charge", lease=3600))  # a retry must not wait an hour

    request_id = "lease-" + uuid.uuid4().hex
    with pytest.raises(ConnectionError):
        api.run(charging("o"), request_id=request_id, store=store)
    assert api.run(charging("o"), request_id=request_id, store=store) == "ok"
    assert len(calls) == 2


@pytest.mark.blocking_api
def test_an_idempotent_function_with_a_lease_is_called_once_by_racing_duplicates(store: Store) -> None:
    """The blocking API: ``@idempotent_function`` on a ``def`` (its ``async def`` twin shares the step)."""
    calls: list[str] = []
    entered, release, waits = threading.Event(), threading.Event(), Waits("blocking")

    @idempotent_function(store, key="order", lease=30, policy=leased_policy(waits))
    def ship(order: str) -> str:
        calls.append(order)
        entered.set()
        assert release.wait(30)
        return f"shipped {order}"

    order = "o-" + uuid.uuid4().hex
    first, first_errors, threads = race(lambda: ship(order), 1)
    assert entered.wait(30)
    more, more_errors, more_threads = race(lambda: ship(order), RACERS - 1)
    deadline = time.monotonic() + 30
    while waits.count < RACERS - 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for thread in threads + more_threads:
        thread.join()
    assert first_errors == more_errors == []
    assert first + more == [f"shipped {order}"] * RACERS and calls == [order]


@pytest.mark.parametrize("lease", [0, -1, float("inf"), float("nan"), True, "30"])
def test_a_lease_that_is_not_a_positive_time_is_refused(lease: Any) -> None:
    with pytest.raises(InvalidInputError, match="lease"):
        effect(lambda key: None, lease=lease)
