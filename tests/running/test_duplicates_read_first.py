"""A duplicate on a store whose reads are local (SQLite, memory) is answered from one read of
its run record: no step body runs, no commit is tried. Whatever else the record says (an
unfinished request, another input's) goes down the engine's path, as on every other store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from idemflow import Idem, Tx, WorkflowAborted, abort, arun, atomic, idempotent_function, run, workflow
from idemflow.errors import IdempotencyKeyReuseError
from idemflow.keys import data_key
from idemflow.stores import MemoryStore, SqliteStore
from idemflow.stores.base import RowRef, Store

bodies: list[str] = []
failing: set[str] = set()


def _step(name: str) -> Callable[[Tx], str]:
    def body(tx: Tx) -> str:
        bodies.append(name)
        if name in failing:
            raise RuntimeError(f"{name} fails")
        tx.increment(name)
        return name

    return body


@workflow("read-first")
def two_steps(order: str) -> Generator[Idem[Any], Any, str]:
    first = yield atomic("orders", order, _step("first"))
    second = yield atomic("orders", order, _step("second"))
    if order == "refused":
        yield abort("declined")
    return f"{first}+{second}"


@pytest.fixture(params=["sqlite", "memory"])
def local(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    bodies.clear()
    failing.clear()
    store: Store = SqliteStore(tmp_path / "rows.sqlite3") if request.param == "sqlite" else MemoryStore()
    yield store
    store.close()


def test_the_store_says_its_reads_are_local(local: Store) -> None:
    assert local.capabilities.local_reads


def test_a_duplicate_runs_no_step_body_and_makes_one_call(local: Store) -> None:
    assert run(two_steps("o-1"), request_id="r1", store=local) == "first+second"
    assert bodies == ["first", "second"]
    local.flush()
    before = local.round_trips
    assert run(two_steps("o-1"), request_id="r1", store=local) == "first+second"
    assert bodies == ["first", "second"]
    assert local.round_trips - before == 1


def test_a_duplicate_on_the_event_loop_too(local: Store) -> None:
    assert asyncio.run(arun(two_steps("o-1"), request_id="r1", store=local)) == "first+second"
    assert asyncio.run(arun(two_steps("o-1"), request_id="r1", store=local)) == "first+second"
    assert bodies == ["first", "second"]


def test_a_duplicate_of_an_aborted_request_raises_its_abort(local: Store) -> None:
    with pytest.raises(WorkflowAborted) as first:
        run(two_steps("refused"), request_id="r1", store=local)
    ran = list(bodies)
    with pytest.raises(WorkflowAborted) as again:
        run(two_steps("refused"), request_id="r1", store=local)
    assert bodies == ran
    assert again.value.reason == first.value.reason == "declined"


def test_another_input_under_the_id_is_refused(local: Store) -> None:
    run(two_steps("o-1"), request_id="r1", store=local)
    with pytest.raises(IdempotencyKeyReuseError):
        run(two_steps("o-2"), request_id="r1", store=local)
    assert local.read(RowRef("orders", "o-2", data_key("first"))) is None  # nothing of its was written
    assert run(two_steps("o-1"), request_id="r1", store=local) == "first+second"


def test_an_unfinished_request_goes_on_where_it_stopped(local: Store) -> None:
    failing.add("second")
    with pytest.raises(RuntimeError, match="second fails"):
        run(two_steps("o-1"), request_id="r1", store=local)
    failing.clear()
    assert run(two_steps("o-1"), request_id="r1", store=local) == "first+second"
    counts = [local.read(RowRef("orders", "o-1", data_key(name))) for name in ("first", "second")]
    assert [None if row is None else row.value for row in counts] == [1, 1]
    assert bodies[-1] == "second"


def test_an_idempotent_function_s_duplicate_is_one_read_and_replayed(local: Store) -> None:
    replays: list[Any] = []

    def replayed(result: Any) -> Any:
        replays.append(result)
        return result

    @idempotent_function(local, key=lambda order: order["id"], cache=None, on_replay=replayed)
    def place(order: dict[str, str]) -> dict[str, str]:
        bodies.append(order["id"])
        return {"placed": order["id"]}

    assert place({"id": "o-1"}) == {"placed": "o-1"}
    local.flush()
    before = local.round_trips
    assert place({"id": "o-1"}) == {"placed": "o-1"}
    assert local.round_trips - before == 1
    assert bodies == ["o-1"] and replays == [{"placed": "o-1"}]


def test_an_async_idempotent_function_s_duplicate_too(local: Store) -> None:
    @idempotent_function(local, key=lambda order: order["id"], cache=None)
    async def place(order: dict[str, str]) -> str:
        bodies.append(order["id"])
        return "placed"

    async def twice() -> list[str]:
        return [await place({"id": "o-1"}), await place({"id": "o-1"})]

    assert asyncio.run(twice()) == ["placed", "placed"]
    assert bodies == ["o-1"]
