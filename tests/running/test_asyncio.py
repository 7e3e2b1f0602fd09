"""The asyncio API: what ``arun`` adds beyond the conformance suites it shares with ``run``.

The workflow, compensation and exactly-once suites run on both APIs against
every store (``tests/conformance``). Here: the event loop is never blocked,
``async def`` workflows and coroutine effects, cancellation, the prefetching
of a body's reads, ``@idempotent`` on ``async def`` handlers, and the
asynchronous store URLs.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure

from idemflow import (
    IdempotencyKeyReuseError,
    InvalidInputError,
    InvalidValueError,
    Tx,
    WorkflowAborted,
    arun,
    arun_result,
    atomic,
    effect,
    idempotent,
    now,
    open_async_store,
    run,
    workflow,
)
from idemflow.client import AsyncPending, RunStatus, astatus
from idemflow.errors import ConfigurationError
from idemflow.stores import MemoryStore, SqliteStore
from idemflow.stores.async_adapters import InlineStore, ThreadedStore, to_async
from idemflow.stores.base import CommitOutcome, Op, Store
from idemflow.testing import data_rows
from tests.support.apis import AwaitedStore


class GatedStore(MemoryStore):
    """A memory store whose commits block their thread until released (a slow disk, a far region)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        self.entered.set()
        assert self.release.wait(10), "never released"
        return super().commit(ops)


def counting(tx: Tx) -> int:
    tx.increment("n")
    return 1


def test_the_loop_runs_other_tasks_while_a_store_call_waits() -> None:
    gated = GatedStore()

    async def main() -> tuple[int, list[str]]:
        store = ThreadedStore(gated)
        task = asyncio.create_task(arun(atomic("accounts", "a", counting), request_id="r", store=store))
        await asyncio.to_thread(gated.entered.wait, 10)  # the commit is blocked on its thread...
        served = ["probe"]  # ...and this coroutine runs on the loop meanwhile
        gated.release.set()
        return await task, served

    assert asyncio.run(main()) == (1, ["probe"])


def test_a_cancelled_arun_leaves_nothing_half_done_and_a_retry_finishes_once() -> None:
    gated = GatedStore()

    @workflow("two-steps")
    def two(_: int) -> Generator[Any, Any, str]:
        yield atomic("accounts", "a", counting)
        yield atomic("accounts", "b", counting)
        return "done"

    async def main() -> str:
        store = ThreadedStore(gated)
        task = asyncio.create_task(arun(two(1), request_id="c", store=store))
        await asyncio.to_thread(gated.entered.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gated.release.set()  # the commit in flight may still apply: the retry meets its memo
        return await arun(two(1), request_id="c", store=store)

    assert asyncio.run(main()) == "done"
    assert data_rows(gated, "accounts") == {("accounts", "a", "n"): 1, ("accounts", "b", "n"): 1}


def test_an_async_def_workflow_awaits_its_steps_under_run_and_arun() -> None:
    calls: list[str] = []

    async def notify(key: str) -> str:
        calls.append(key)
        await asyncio.sleep(0)
        return "sent"

    @workflow("greet")
    async def greet(name: str) -> dict[str, Any]:
        visits = await atomic("accounts", name, counting)
        sent = await effect(notify)
        at = await now()
        return {"visits": visits, "sent": sent, "at": at > 0}

    store = MemoryStore()
    first = run(greet("ann"), request_id="g", store=store)
    assert asyncio.run(arun(greet("ann"), request_id="g", store=store)) == first
    assert asyncio.run(arun(greet("bob"), request_id="g2", store=store)) == first
    assert len(calls) == 2 and first == {"visits": 1, "sent": "sent", "at": True}


def test_an_async_def_workflow_awaiting_something_else_is_refused_before_any_write() -> None:
    @workflow("sleepy")
    async def sleepy(_: int) -> None:
        await asyncio.sleep(0.01)  # not a step: its result would differ on replay

    store = MemoryStore()
    with pytest.raises(InvalidInputError, match="awaits only steps"):
        asyncio.run(arun(sleepy(1), request_id="s", store=store))
    assert list(store.scan("idemflowruns")) == []


def test_a_plain_effect_runs_off_the_loop_and_a_coroutine_effect_on_it() -> None:
    threads: dict[str, str] = {}

    def blocking_call(key: str) -> str:
        threads["plain"] = threading.current_thread().name
        return key[:8]

    async def async_call(key: str) -> str:
        threads["coroutine"] = threading.current_thread().name
        return key[:8]

    @workflow("calls")
    def calls(_: int) -> Generator[Any, Any, list[str]]:
        first = yield effect(blocking_call)
        second = yield effect(async_call)
        return [first, second]

    async def main() -> tuple[list[str], str]:
        return await arun(calls(1), request_id="e", store=MemoryStore()), threading.current_thread().name

    result, loop_thread = asyncio.run(main())
    assert len(result) == 2 and result[0] != result[1]
    assert threads["coroutine"] == loop_thread and threads["plain"] != loop_thread


def test_a_body_runs_again_once_each_read_it_needs_arrives() -> None:
    runs: list[int] = []

    def body(tx: Tx) -> int:
        runs.append(1)
        return int(tx.get("a", 0)) + int(tx.get("b", 0)) + int(tx.get("c", 0))

    store = MemoryStore()
    run(atomic("accounts", "p", lambda tx: tx.put("a", 1) or tx.put("b", 2)), request_id="w", store=store)
    assert run(atomic("accounts", "p", body), request_id="sync", store=store) == 3
    assert len(runs) == 1
    runs.clear()
    awaited = AwaitedStore(store)  # a store the drivers await (as DynamoDB's and Azure's)
    assert asyncio.run(arun(atomic("accounts", "p", body), request_id="async", store=awaited)) == 3
    assert len(runs) == 4  # three reads: run, fetch a (with the run record), run, fetch b, run, fetch c, run


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_body_on_a_local_store_reads_directly_and_runs_once(kind: str, tmp_path: Path) -> None:
    runs: list[str] = []
    seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")

    def body(tx: Tx) -> int:
        runs.append(seen.get())  # the caller's context, even on the store's threads
        return int(tx.get("a", 0)) + int(tx.get("b", 0))

    store: Store = MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "direct.sqlite3")
    run(atomic("accounts", "p", lambda tx: tx.put("a", 1) or tx.put("b", 2)), request_id="w", store=store)

    async def main() -> int:
        seen.set("caller")
        return await arun(atomic("accounts", "p", body), request_id="r", store=store)

    assert asyncio.run(main()) == 3
    assert runs == ["caller"]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_many_concurrent_aruns_on_one_hot_row_all_apply_exactly_once(kind: str, tmp_path: Path) -> None:
    store: Store = MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "hot.sqlite3")

    def add(tx: Tx) -> int:
        total = int(tx.get("total", 0)) + 1  # a read-modify-write: conflicts, reruns
        tx.put("total", total)
        return total

    async def main() -> list[int]:
        jobs = [arun(atomic("accounts", "hot", add), request_id=f"r{i % 40}", store=store) for i in range(80)]
        return await asyncio.gather(*jobs)

    results = asyncio.run(main())
    assert sorted(set(results)) == list(range(1, 41))  # 40 requests, each applied once
    assert results[:40] == results[40:]  # each duplicate answered its first run's result
    assert run(atomic("accounts", "hot", lambda tx: tx.get("total")), request_id="read", store=store) == 40


def test_errors_are_the_blocking_apis_errors() -> None:
    @workflow("pay")
    def pay(amount: Any) -> Generator[Any, Any, Any]:
        left = yield atomic("accounts", "ann", lambda tx: tx.increment("spent", amount) or amount)
        if amount > 5:
            yield atomic("accounts", "ann", lambda tx: tx.abort("too much"))
        return left

    store = MemoryStore()

    async def main() -> None:
        assert await arun(pay(3), request_id="p1", store=store) == 3
        with pytest.raises(IdempotencyKeyReuseError):
            await arun(pay(4), request_id="p1", store=store)
        with pytest.raises(WorkflowAborted):
            await arun(pay(9), request_id="p2", store=store)
        assert isinstance(await arun_result(pay(9), request_id="p2", store=store), Failure)
        with pytest.raises(InvalidValueError):
            await arun(pay({1, 2}), request_id="p3", store=store)
        assert (await astatus(store, "pay", "p1")).status is RunStatus.COMPLETED
        assert (await astatus(store, "pay", "never")).status is RunStatus.UNKNOWN

    asyncio.run(main())
    assert all(key != "p3" for _, key, _ in store.scan("idemflowruns"))  # refused before any write


def test_idempotent_on_an_async_def_handler_gives_an_async_def() -> None:
    store = MemoryStore()

    @idempotent(store, key=lambda order: order["id"])
    async def place(order: dict[str, Any]) -> str:
        await atomic("items", order["id"], counting)
        return "placed " + order["id"]

    assert inspect.iscoroutinefunction(place) and place.__name__ == "place"

    async def main() -> list[str]:
        return list(await asyncio.gather(*(place({"id": "o1"}) for _ in range(5))))

    assert asyncio.run(main()) == ["placed o1"] * 5
    assert data_rows(store, "items") == {("items", "o1", "n"): 1}


def test_idempotent_wrappers_keep_the_signature_but_do_not_lead_frameworks_to_the_generator() -> None:
    store = MemoryStore()

    @idempotent(store, key=lambda amount, who="x": who)
    def add(amount: int, who: str = "x") -> Generator[Any, Any, dict[str, int]]:
        """Add to a counter."""
        yield atomic("accounts", who, lambda tx: tx.increment("n", amount))
        return {"added": amount}

    # FastAPI follows __wrapped__ to pick the call style: it must meet a plain function.
    assert not inspect.isgeneratorfunction(inspect.unwrap(add))
    assert list(inspect.signature(add).parameters) == ["amount", "who"]
    assert add.__doc__ == "Add to a counter." and add(5) == {"added": 5}


def test_idempotent_on_a_plain_handler_needs_a_blocking_store() -> None:
    with pytest.raises(InvalidInputError, match="blocking store"):
        idempotent(to_async(SqliteStore(":memory:")), key=str)(lambda order: None)


def test_async_store_urls(tmp_path: Path) -> None:
    async def main() -> None:
        assert isinstance(open_async_store("memory:"), InlineStore)
        threaded = open_async_store(f"sqlite:{tmp_path / 'a.db'}")
        assert isinstance(threaded, ThreadedStore)
        assert await arun(atomic("accounts", "a", counting), request_id="u", store=threaded) == 1
        await threaded.close()
        with pytest.raises(ConfigurationError, match="no database file"):
            open_async_store(f"sqlite:{tmp_path / 'missing.db'}", create=False)
        emulated = open_async_store("dynamodb:?endpoint=http://127.0.0.1:1&region=us-east-1&conflicts=0.1")
        assert isinstance(emulated, ThreadedStore)  # the emulator hooks the blocking client

    asyncio.run(main())


def test_to_async_adapts_a_blocking_store_once() -> None:
    store = MemoryStore()
    assert to_async(store) is to_async(store)
    assert to_async(to_async(store)) is to_async(store)


def test_asubmit_answers_at_the_checkpoint_and_its_handle_waits_for_the_workers(tmp_path: Path) -> None:
    from idemflow import checkpoint
    from idemflow.client import astatus, asubmit
    from idemflow.worker import SqliteQueue, Worker

    @workflow("vote")
    def vote(ballot: dict[str, str]) -> Generator[Any, Any, str]:
        yield atomic("tablea", ballot["poll"], lambda tx: tx.put(ballot["voter"], ballot["choice"]))
        yield checkpoint()
        yield atomic("tableb", ballot["poll"], lambda tx: tx.increment(ballot["choice"]))
        return "counted"

    store = SqliteStore(tmp_path / "votes.sqlite3")
    queue = SqliteQueue(tmp_path / "queue.sqlite3")
    ballot = {"poll": "p", "voter": "v", "choice": "yes"}

    async def main() -> tuple[str, str, str]:
        pending = await asubmit(vote(ballot), request_id="b-1", store=store, queue=queue)
        before = (await pending.status()).value
        assert isinstance(pending, AsyncPending)  # its own handle: mypy refuses a blocking call on it
        worker = Worker([vote], store=store, queue=queue, wait=0.01)
        finished = asyncio.create_task(asyncio.to_thread(worker.run, idle_timeout=0.3))
        result = await pending.result(timeout=30)
        await finished
        return before, result, (await astatus(store, "vote", "b-1")).status.value

    assert asyncio.run(main()) == ("running", "counted", "completed")
    assert data_rows(store, "tableb") == {("tableb", "p", "yes"): 1}


def test_reads_outside_a_workflow_on_the_asynchronous_stores(store: Store) -> None:
    """``aget``, ``arows`` and ``ShardedCounter.aread`` on each store's asynchronous twin."""
    from idemflow import ShardedCounter
    from idemflow.client import aget, arows
    from tests.conformance.test_workflow_contract import new_space
    from tests.support.apis import LOOP, async_twin, close_twins

    space = new_space()
    votes = ShardedCounter("votes", shards=4)

    def body(tx: Tx) -> None:
        tx.put("title", "poll")
        votes.add(tx, 3)

    run(atomic("items", space, body), request_id=space, store=store)
    twin = async_twin(store)

    async def main() -> tuple[Any, Any, dict[tuple[str, str], Any], int | float]:
        return (
            await aget(twin, "items", space, "title"),
            await aget(twin, "items", space, "nothing", "default"),
            await arows(twin, "items", space),
            await votes.aread(twin, "items", space),
        )

    try:
        title, missing, found, total = LOOP.run(main())
    finally:
        close_twins()
    assert (title, missing, total) == ("poll", "default", 3)
    assert found[(space, "title")] == "poll" and sum(v for (_p, k), v in found.items() if k != "title") == 3


def test_an_asyncio_worker_finishes_requests_with_tasks_and_can_run_again(tmp_path: Path) -> None:
    from idemflow import checkpoint
    from idemflow.client import submit
    from idemflow.worker import AsyncWorker, SqliteQueue

    @workflow("tally")
    def tally(vote: dict[str, str]) -> Generator[Any, Any, str]:
        yield atomic("tablea", "votes", lambda tx: tx.put(vote["who"], vote["choice"]))
        yield checkpoint()
        yield atomic("tableb", "totals", lambda tx: tx.increment(vote["choice"]))
        return "counted"

    store = SqliteStore(tmp_path / "tally.sqlite3")
    queue = SqliteQueue(tmp_path / "queue.sqlite3")
    for n in range(40):
        vote = {"who": f"v{n}", "choice": "yes" if n % 4 else "no"}
        for _ in range(1 + (n % 5 == 0)):  # some submitted twice
            submit(tally(vote), request_id=f"t{n}", store=store, queue=queue)
    worker = AsyncWorker([tally], store=store, queue=queue, concurrency=8, wait=0.01, relay_every=None)
    first = asyncio.run(worker.run(idle_timeout=0.3))
    assert first.finished == 40  # a copy of a submitted request enqueues nothing
    assert data_rows(store, "tableb") == {("tableb", "totals", "yes"): 30, ("tableb", "totals", "no"): 10}
    again = asyncio.run(worker.run(idle_timeout=0.1))  # a fresh loop: the worker runs again
    assert again is first and first.finished == 40
    worker.stop()
    assert asyncio.run(worker.run()) is first  # stopped before it started: returns at once
