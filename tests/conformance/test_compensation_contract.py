"""Compensation on every store: aborts look all-or-nothing, exactly once."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Generator
from typing import Any

import pytest
from returns.result import Failure, Success

from idemflow import CompensationError, Idem, Tx, WorkflowAborted, abort, atomic, workflow
from idemflow.stores import Store
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash
from tests.conformance.test_workflow_contract import new_space
from tests.support.apis import Api
from tests.support.workflows import rows_of


def add(key: str, amount: int) -> Any:
    def add_body(tx: Tx) -> int:
        value = tx.get(key, 0) + amount
        tx.put(key, value)
        return int(value)

    return add_body


def undo(key: str, amount: int) -> Any:
    def undo_body(tx: Tx, _result: object) -> None:
        tx.put(key, tx.get(key, 0) - amount)
        tx.increment("undone")

    return undo_body


def refuse(tx: Tx) -> None:
    tx.get("anything")
    tx.put("never", 1)
    tx.abort({"why": "refused"})


@workflow("chain")
def chain(req: dict[str, Any]) -> Generator[Idem[Any], Any, str]:
    """Four steps over two tables; step ``abort_at`` aborts (0: none; -1: workflow-level abort)."""
    space, abort_at = req["space"], req["abort_at"]
    for step in range(1, 5):
        table = "tablea" if step % 2 else "tableb"
        if step == abort_at:
            yield atomic(table, space + f"p{step}", refuse)
        yield atomic(table, space + f"p{step}", add("v", step), compensate=undo("v", step))
        if abort_at == -1 and step == 2:
            yield abort("workflow says no")
    return "done"


def reference(api: Api, store: Store, abort_at: int) -> dict[Any, Any]:
    space = new_space()
    with contextlib.suppress(WorkflowAborted):
        api.run(chain({"space": space, "abort_at": abort_at}), request_id="ref", store=store)
    return rows_of(store, space)


@pytest.mark.parametrize("abort_at", [1, 2, 3, 4, -1])
def test_abort_at_each_position_undoes_completed_steps(store: Store, abort_at: int, api: Api) -> None:
    space = new_space()
    m = chain({"space": space, "abort_at": abort_at})
    with pytest.raises(WorkflowAborted) as caught:
        api.run(m, request_id="a", store=store)
    expected_reason = "workflow says no" if abort_at == -1 else {"why": "refused"}
    assert caught.value.reason == expected_reason
    assert caught.value.workflow == "chain" and caught.value.request_id == "a"
    rows = rows_of(store, space)
    completed = range(1, (abort_at if abort_at > 0 else 3))
    assert rows == {
        **{("tablea" if s % 2 else "tableb", f"p{s}", "v"): 0 for s in completed},
        **{("tablea" if s % 2 else "tableb", f"p{s}", "undone"): 1 for s in completed},
    }
    assert api.run_result(m, request_id="a", store=store) == Failure(caught.value)


def test_run_result_success(store: Store, api: Api) -> None:
    assert api.run_result(
        chain({"space": new_space(), "abort_at": 0}), request_id="ok", store=store
    ) == Success("done")


@pytest.mark.parametrize("fault", [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER])
@pytest.mark.parametrize("abort_at", [3, -1])
def test_crash_anywhere_on_the_forward_and_compensating_path(
    store: Store, fault: Fault, abort_at: int, api: Api
) -> None:
    expected = reference(api, store, abort_at)
    for point in range(9):  # forward commits, the abort, every compensation (and past the end)
        space = new_space()

        def plan(p: FaultPoint, point: int = point) -> Fault | None:
            return fault if p.index == point else None

        faulty = FaultyStore(store, plan)
        m = chain({"space": space, "abort_at": abort_at})
        for _ in range(10):
            try:
                api.run(m, request_id=f"c{point}", store=faulty)
            except SimulatedCrash:
                continue
            except WorkflowAborted:
                break
        else:
            raise AssertionError("never finished")
        assert rows_of(store, space) == expected, (fault, point)
        # Duplicates of the aborted request end the same way and change nothing.
        assert isinstance(api.run_result(m, request_id=f"c{point}", store=store), Failure)
        assert rows_of(store, space) == expected


def test_concurrent_duplicates_of_an_aborting_request(store: Store, api: Api) -> None:
    space = new_space()
    m = chain({"space": space, "abort_at": 4})
    outcomes: list[object] = []
    barrier = threading.Barrier(5)

    def contender() -> None:
        barrier.wait()
        outcomes.append(api.run_result(m, request_id="dup", store=store))

    threads = [threading.Thread(target=contender) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(outcomes) == 5 and all(isinstance(o, Failure) for o in outcomes)
    assert rows_of(store, space) == reference(api, store, 4)


def test_failing_compensation_raises_and_stays_resumable(store: Store, api: Api) -> None:
    space = new_space()
    broken = {"on": True}

    def fragile_undo(tx: Tx, _result: object) -> None:
        if broken["on"]:
            raise RuntimeError("payment service down")
        tx.increment("undone")

    @workflow("fragile")
    def fragile(s: str) -> Generator[Idem[Any], Any, None]:
        yield atomic("tablea", s + "one", add("v", 1), compensate=undo("v", 1))
        yield atomic("tablea", s + "two", add("v", 2), compensate=fragile_undo)
        yield atomic("tablea", s + "three", refuse)

    with pytest.raises(CompensationError) as caught:
        api.run(fragile(space), request_id="f", store=store)
    assert caught.value.step == 2 and "payment service down" in caught.value.cause
    assert rows_of(store, space)[("tablea", "one", "v")] == 1  # not yet undone: reverse order
    broken["on"] = False
    with pytest.raises(WorkflowAborted):
        api.run(fragile(space), request_id="f", store=store)
    rows = rows_of(store, space)
    assert rows[("tablea", "one", "v")] == 0 and rows[("tablea", "one", "undone")] == 1
    assert rows[("tablea", "two", "undone")] == 1


def test_aborting_step_commits_nothing_of_its_own(store: Store, api: Api) -> None:
    space = new_space()
    with pytest.raises(WorkflowAborted):
        api.run(atomic("tablea", space + "p", refuse), request_id="own", store=store)
    assert rows_of(store, space) == {}


def test_duplicate_of_aborted_request_runs_nothing(store: Store, api: Api) -> None:
    space = new_space()
    m = chain({"space": space, "abort_at": 3})
    with pytest.raises(WorkflowAborted):
        api.run(m, request_id="once", store=store)
    store.flush()
    before = store.round_trips
    with pytest.raises(WorkflowAborted):
        api.run(m, request_id="once", store=store)
    store.flush()
    assert store.round_trips - before <= (1 if store.capabilities.cross_partition_commit else 2)
