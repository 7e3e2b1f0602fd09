"""The paper's claim as a property, on every store.

Random workflows (random steps over random tables and partitions: counters,
appends to shared lists, reads, and random aborts with compensation), run as
several executions per request — duplicates, executions crashed at random
commits (before the commit, after it, or with its answer lost) and retried,
optionally all racing in threads — end with exactly the tables of one
failure-free run per distinct request, and every execution of a request
returns the same outcome.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Success

from idemflow import Idem, Tx, atomic, workflow
from idemflow.stores import Store
from idemflow.stores.registry import Feature
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash
from tests.conformance.test_workflow_contract import new_space
from tests.conftest import StoreFactory, make_factory, store_kinds
from tests.support.apis import Api
from tests.support.workflows import rows_of

Step = tuple[str, str, str, int]


def step_body(kind: str, token: str, amount: int) -> Any:
    def body(tx: Tx) -> Any:
        if kind == "count":
            tx.increment("count", amount)
            return amount
        if kind == "append":
            log = tx.get("log", [])
            tx.put("log", [*log, token])
            return len(log)
        if kind == "abort":
            tx.get("count")
            tx.abort(f"abort at {token}")
        return [tx.get("count", 0), len(tx.get("log", []))]

    return body


def undo_body(kind: str, token: str, amount: int) -> Any:
    def undo(tx: Tx, _result: object) -> None:
        if kind == "count":
            tx.increment("count", -amount)
        elif kind == "append":
            tx.put("log", [t for t in tx.get("log", []) if t != token])
        tx.increment("undone")

    return undo


@workflow("random")
def random_workflow(req: dict[str, Any]) -> Generator[Idem[Any], Any, list[Any]]:
    results = []
    for index, (table, partition, kind, amount) in enumerate(req["steps"]):
        token = f"{req['tag']}.{index}"
        results.append(
            (
                yield atomic(
                    table,
                    req["space"] + partition,
                    step_body(kind, token, amount),
                    compensate=undo_body(kind, token, amount),
                    name=f"{kind}-{index}",
                )
            )
        )
    return results


steps = st.lists(
    st.tuples(
        st.sampled_from(["tablea", "tableb"]),
        st.sampled_from(["p0", "p1", "p2"]),
        st.sampled_from(["count", "count", "append", "append", "read", "abort"]),
        st.integers(1, 5),
    ),
    min_size=1,
    max_size=5,
)
faults = st.one_of(
    st.none(),
    st.tuples(st.sampled_from([Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER]), st.integers(0, 6)),
)
scenario = st.fixed_dictionaries(
    {
        "requests": st.lists(
            st.tuples(steps, st.lists(faults, min_size=1, max_size=3)), min_size=1, max_size=3
        ),
        "concurrent": st.booleans(),
    }
)


def normalized(rows: dict[Any, Any]) -> dict[Any, Any]:
    """Lists compared as multisets: concurrent requests append in any order."""
    return {key: sorted(value) if isinstance(value, list) else value for key, value in rows.items()}


def summary(outcome: Any) -> str:
    """An outcome without the request id: the value, or the abort reason."""
    if isinstance(outcome, Success):
        return f"ok {outcome.unwrap()!r}"
    return f"aborted {outcome.failure().reason!r}"


def check_scenario(api: Api, store: Store, data: dict[str, Any]) -> None:
    space, reference_space = new_space(), new_space()
    requests = [
        (space + f"r{n}", {"space": space, "tag": f"r{n}", "steps": [list(s) for s in request_steps]}, plans)
        for n, (request_steps, plans) in enumerate(data["requests"])
    ]
    expected: dict[str, Any] = {}
    for request_id, req, _plans in requests:
        reference = random_workflow({**req, "space": reference_space})
        expected[request_id] = summary(api.run_result(reference, request_id="ref" + request_id, store=store))

    seen: dict[str, list[str]] = {request_id: [] for request_id, _, _ in requests}
    errors: list[BaseException] = []

    def execute(request_id: str, req: dict[str, Any], plan: tuple[Fault, int] | None) -> None:
        def inject(point: FaultPoint) -> Fault | None:
            return plan[0] if plan is not None and point.index == plan[1] else None

        faulty = FaultyStore(store, inject)
        try:
            for _ in range(30):
                try:
                    seen[request_id].append(
                        summary(api.run_result(random_workflow(req), request_id=request_id, store=faulty))
                    )
                    return
                except SimulatedCrash:
                    continue
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    jobs = [(request_id, req, plan) for request_id, req, plans in requests for plan in plans]
    if data["concurrent"]:
        threads = [threading.Thread(target=execute, args=job) for job in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for job in jobs:
            execute(*job)
    assert errors == []
    got = normalized(rows_of(store, space))
    want = normalized(rows_of(store, reference_space))
    assert got == want
    for request_id, outcomes in seen.items():
        assert len(set(outcomes)) == 1, outcomes  # every execution returned the same outcome
        if not data["concurrent"] or len(requests) == 1:
            # Alone, a request sees the same state as in the reference run.
            assert outcomes[0] == expected[request_id]


@given(data=scenario)
@settings(max_examples=60)
def test_exactly_once_on_local_stores(local_store: Store, data: dict[str, Any], api: Api) -> None:
    check_scenario(api, local_store, data)


@given(data=scenario)
@settings(max_examples=8)
def test_exactly_once_on_cloud_stores(cloud_store: Store, data: dict[str, Any], api: Api) -> None:
    """Fewer examples than on the local stores: the engine's paths (replay, retries, compensation)
    are the same on every store and get their 60 examples a run there, in a fraction of the time;
    these check each server's commit conditions, conflicts and answers under the same faults (each
    example a round trip per call to a server shared by the suite's workers)."""
    check_scenario(api, cloud_store, data)


def _make(kind: str, request: Any, tmp_path: Any) -> Store:
    factory: StoreFactory = make_factory(kind, request, tmp_path)
    return factory()


@pytest.fixture(params=store_kinds(without=(Feature.SERVER,)))
def local_store(request: pytest.FixtureRequest, tmp_path: Any) -> Store:
    return _make(str(request.param), request, tmp_path)


@pytest.fixture(params=store_kinds(Feature.SERVER))
def cloud_store(request: pytest.FixtureRequest, tmp_path: Any) -> Store:
    return _make(str(request.param), request, tmp_path)
