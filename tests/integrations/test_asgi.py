"""``idemflow.asgi`` in a FastAPI app and a Starlette app: keys, answers, and nothing blocking."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from pydantic import Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from idemflow import (
    InvalidValueError,
    Tx,
    atomic,
    checkpoint,
    effect,
    idempotent,
    receive,
    run,
    send,
    workflow,
)
from idemflow.admin import cancel
from idemflow.asgi import Idempotency, answer
from idemflow.client import RunStatus, asend_message, send_message, status, submit
from idemflow.running.runner import run_status
from idemflow.stores import MemoryStore, SqliteStore
from idemflow.stores.base import CommitOutcome, Op
from idemflow.testing import data_rows
from idemflow.worker import SqliteQueue, Worker
from tests.support.apis import AwaitedStore


def charge(amount: int) -> Any:
    def body(tx: Tx) -> int:
        if amount > 100:
            tx.abort({"code": "over_limit", "message": f"{amount} is over the limit"})
        tx.increment("charged", amount)
        return amount

    return body


@workflow("checkout")
def checkout(order: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    charged = yield atomic("accounts", order["customer"], charge(order["amount"]))
    yield checkpoint()
    yield atomic("orders", order["customer"], lambda tx: tx.increment("shipped"))
    return {"charged": charged}


def fastapi_app(idem: Idempotency) -> FastAPI:
    app = FastAPI()
    idem.install(app)

    @app.post("/orders")
    async def place(order: dict[str, Any], key: str = Depends(idem.key)) -> Any:
        return await idem.run(checkout(order), request_id=key)

    @app.post("/orders/later")
    async def place_later(order: dict[str, Any], key: str = Depends(idem.key)) -> Any:
        return await idem.submit(checkout(order), request_id=key, accepted={"customer": order["customer"]})

    @app.get("/requests/{workflow}/{request_id}")
    async def where(workflow: str, request_id: str) -> Response:
        return await idem.status(workflow, request_id)

    @app.get("/probe")
    async def probe() -> dict[str, bool]:
        return {"ok": True}

    return app


@pytest.fixture
def sqlite_idem(tmp_path: Path) -> Iterator[Idempotency]:
    yield Idempotency(
        SqliteStore(tmp_path / "shop.sqlite3"),
        queue=SqliteQueue(tmp_path / "queue.sqlite3"),
        refusals={"over_limit": 402},
    )


def test_a_fastapi_route_runs_once_per_key_and_answers_duplicates_alike(sqlite_idem: Idempotency) -> None:
    with TestClient(fastapi_app(sqlite_idem)) as client:
        order = {"customer": "ann", "amount": 30}
        answers = [client.post("/orders", json=order, headers={"Idempotency-Key": "o-1"}) for _ in range(3)]
    assert [(a.status_code, a.json()) for a in answers] == [(200, {"charged": 30})] * 3
    assert data_rows(sqlite_idem.store, "accounts") == {("accounts", "ann", "charged"): 30}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("headers", "body", "status", "code"),
    [
        ({}, {"customer": "ann", "amount": 1}, 400, "missing_idempotency_key"),
        ({"Idempotency-Key": "x" * 300}, {"customer": "ann", "amount": 1}, 400, "invalid_input"),
        ({"Idempotency-Key": "k"}, {"customer": "c" * 2000, "amount": 1}, 400, "invalid_input"),
        ({"Idempotency-Key": "k"}, {"customer": "", "amount": 1}, 400, "invalid_input"),
        ({"Idempotency-Key": "k"}, {"customer": "ann", "amount": 500}, 402, "over_limit"),
    ],
)
def test_bad_requests_are_answered_before_anything_is_written(
    headers: dict[str, str], body: dict[str, Any], status: int, code: str
) -> None:
    store = MemoryStore()
    with TestClient(fastapi_app(Idempotency(store, refusals={"over_limit": 402}))) as client:
        answer = client.post("/orders", json=body, headers=headers)
    assert (answer.status_code, answer.json()["error"]) == (status, code)
    assert data_rows(store, "accounts", "orders") == {}


@pytest.mark.parametrize("route", ["/orders", "/orders/later"])
@pytest.mark.parametrize(
    "text",
    [
        '{"customer": "ann", "amount": 1, "note": "\\ud800"}',
        '{"customer": "ann", "amount": 1, "note": {"\\udc00": [1]}}',
        '{"customer": "\\udfff", "amount": 1}',
    ],
    ids=["value", "dict-key", "partition"],
)
def test_a_lone_surrogate_in_the_json_body_is_400_not_500(
    sqlite_idem: Idempotency, route: str, text: str
) -> None:
    """JSON may escape a lone surrogate, which no UTF-8 backend can store: refused as bad input."""
    with TestClient(fastapi_app(sqlite_idem), raise_server_exceptions=False) as client:
        answer = client.post(
            route, content=text, headers={"Idempotency-Key": "k", "Content-Type": "application/json"}
        )
    assert (answer.status_code, answer.json()["error"]) == (400, "invalid_input")
    assert "lone surrogate" in answer.json()["detail"]
    store = sqlite_idem.store
    assert isinstance(store, SqliteStore)
    assert [row for table in store.tables() for row in store.scan(table)] == []


def test_an_error_quoting_a_lone_surrogate_is_still_answered() -> None:
    """A detail may quote the client's text, which a UTF-8 body cannot carry raw: escaped instead."""
    found = answer(InvalidValueError("result of step 1 (note \udc00)", "bad"))
    assert found is not None and found.status_code == 400
    assert json.loads(found.body)["detail"] == "result of step 1 (note \\udc00): bad"


def test_a_key_reused_for_another_request_is_422() -> None:
    with TestClient(fastapi_app(Idempotency(MemoryStore()))) as client:
        first = client.post(
            "/orders", json={"customer": "ann", "amount": 1}, headers={"Idempotency-Key": "k"}
        )
        again = client.post(
            "/orders", json={"customer": "ann", "amount": 2}, headers={"Idempotency-Key": "k"}
        )
    assert first.status_code == 200
    assert (again.status_code, again.json()["error"]) == (422, "idempotency_key_reused")


def test_a_submitted_request_is_202_with_a_status_url_until_workers_finish_it(
    sqlite_idem: Idempotency,
) -> None:
    with TestClient(fastapi_app(sqlite_idem)) as client:
        order = {"customer": "bob", "amount": 20}
        accepted = client.post("/orders/later", json=order, headers={"Idempotency-Key": "o-2"})
        assert accepted.status_code == 202
        url = accepted.headers["Location"]
        assert accepted.json() == {
            "request_id": "o-2",
            "status": "running",
            "status_url": url,
            "customer": "bob",
        }
        assert url == "/requests/checkout/o-2" and client.get(url).status_code == 202
        assert isinstance(sqlite_idem.store, SqliteStore) and isinstance(sqlite_idem.queue, SqliteQueue)
        Worker([checkout], store=sqlite_idem.store, queue=sqlite_idem.queue, wait=0.01).run(idle_timeout=0.2)
        done = client.get(url)
        assert (done.status_code, done.json()) == (
            200,
            {"request_id": "o-2", "status": "completed", "result": {"charged": 20}},
        )
        duplicate = client.post("/orders/later", json=order, headers={"Idempotency-Key": "o-2"})
        assert (duplicate.status_code, duplicate.json()) == (200, {"charged": 20})
        assert client.get("/requests/checkout/nobody").status_code == 404


def test_a_sync_fastapi_route_under_idempotent_answers_json_not_a_stream() -> None:
    store = MemoryStore()
    app = FastAPI()

    @app.post("/add")
    @idempotent(store, key=lambda amount: f"add-{amount}")
    def add(amount: int) -> Generator[Any, Any, dict[str, int]]:
        yield atomic("accounts", "pot", lambda tx: tx.increment("n", amount))
        return {"added": amount}

    with TestClient(app) as client:
        answer = client.post("/add", params={"amount": 5})
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {"added": 5}


def test_an_async_fastapi_route_under_idempotent() -> None:
    store = MemoryStore()
    app = FastAPI()

    @app.post("/add")
    @idempotent(store, key=lambda amount: f"add-{amount}")
    async def add(amount: int) -> dict[str, int]:
        await atomic("accounts", "pot", lambda tx: tx.increment("n", amount))
        return {"added": amount}

    with TestClient(app) as client:
        answers = [client.post("/add", params={"amount": 7}).json() for _ in range(2)]
    assert answers == [{"added": 7}] * 2
    assert data_rows(store, "accounts") == {("accounts", "pot", "n"): 7}


def test_a_starlette_app_and_a_busy_store_answer_503_with_retry_after() -> None:
    from idemflow.errors import TransientError
    from idemflow.testing import Fault, FaultyStore

    store = FaultyStore(MemoryStore(), lambda point: Fault.TRANSIENT)
    idem = Idempotency(store)

    async def place(request: Request) -> Response:
        result = await idem.run(checkout(await request.json()), request_id=await idem.key(request))
        return JSONResponse(result)

    app = Starlette(routes=[Route("/orders", place, methods=["POST"])])
    idem.install(app)
    from idemflow import RetryPolicy

    idem.policy = RetryPolicy(deadline=0.05)
    with TestClient(app) as client:
        answer = client.post(
            "/orders", json={"customer": "ann", "amount": 1}, headers={"Idempotency-Key": "b"}
        )
    assert (answer.status_code, answer.json()["error"], answer.headers["Retry-After"]) == (503, "busy", "1")
    assert issubclass(TransientError, Exception)


def test_the_loop_serves_other_requests_while_a_workflow_waits_on_the_store() -> None:
    """A route awaiting a slow store never holds up a probe on the same loop."""
    from tests.running.test_asyncio import GatedStore

    gated = GatedStore()
    from idemflow.stores.async_adapters import ThreadedStore

    app = fastapi_app(Idempotency(ThreadedStore(gated)))

    async def main() -> tuple[int, int]:
        import httpx

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            slow = asyncio.create_task(
                client.post("/orders", json={"customer": "c", "amount": 1}, headers={"Idempotency-Key": "s"})
            )
            await asyncio.to_thread(gated.entered.wait, 10)  # the workflow's commit is blocked
            probe = await client.get("/probe")  # answered meanwhile
            gated.release.set()
            return probe.status_code, (await slow).status_code

    assert asyncio.run(main()) == (200, 200)


Amount = Annotated[int, Field(gt=0, le=1000)]
"""A parameter type defined in the route's module (annotations are strings here: PEP 563)."""


def test_an_idempotent_route_whose_annotations_name_types_of_its_own_module() -> None:
    store = MemoryStore()
    app = FastAPI()

    @app.post("/pay")
    @idempotent(store, key=lambda customer, amount: f"{customer}-{amount}")
    async def pay(customer: str, amount: Amount) -> dict[str, Any]:
        charged = await atomic("accounts", customer, charge(amount))
        return {"charged": charged}

    with TestClient(app) as client:
        paid = client.post("/pay", params={"customer": "dee", "amount": 9})
        refused = client.post("/pay", params={"customer": "dee", "amount": 0})  # FastAPI validates Amount
    assert (paid.status_code, paid.json()) == (200, {"charged": 9})
    assert refused.status_code == 422


class HeldStore(AwaitedStore):
    """Commits wait until released, counting how many are under way at once."""

    def __init__(self) -> None:
        super().__init__(MemoryStore())
        self.active = 0
        self.most = 0
        self.release = asyncio.Event()

    async def commit(self, ops: Sequence[Op]) -> CommitOutcome:
        self.active += 1
        self.most = max(self.most, self.active)
        try:
            await self.release.wait()
            return await super().commit(ops)
        finally:
            self.active -= 1


def test_in_flight_bounds_the_runs_under_way_and_the_rest_wait_their_turn() -> None:
    async def main(in_flight: int | None) -> tuple[int, list[Any]]:
        store = HeldStore()
        idem = Idempotency(store, in_flight=in_flight)
        step = atomic("accounts", "a", lambda tx: tx.increment("n") or "ok")
        runs = [asyncio.create_task(idem.run(step, request_id=f"r{i}")) for i in range(6)]
        for _ in range(200):  # every run that may start reaches its commit meanwhile
            await asyncio.sleep(0)
        most = store.most
        store.release.set()
        return most, await asyncio.gather(*runs)

    assert asyncio.run(main(2)) == (2, ["ok"] * 6)
    assert asyncio.run(main(None)) == (6, ["ok"] * 6)  # no bound: all six at once
    with pytest.raises(ValueError, match="in_flight"):
        Idempotency(MemoryStore(), in_flight=0)


def test_a_helper_given_urls_opens_them_in_the_apps_lifespan_and_closes_them(tmp_path: Path) -> None:
    """The lifespan pattern of a FastAPI app on asynchronous clients: made at import time, opened
    on the server's loop, closed at shutdown; used before, it says what to do."""
    store_url, queue_url = f"sqlite:{tmp_path / 'store.db'}", f"sqlite:{tmp_path / 'queue.db'}"
    SqliteStore(tmp_path / "store.db").create_tables("accounts", "orders")
    idem = Idempotency(store_url, queue=queue_url)
    with pytest.raises(RuntimeError, match="lifespan"):
        _ = idem.store
    app = FastAPI(lifespan=idem.lifespan)
    idem.install(app)

    @app.post("/pay")
    async def pay(order: dict[str, Any], key: str = Depends(idem.key)) -> Any:
        return await idem.submit(checkout(order), request_id=key)

    with TestClient(app) as client:
        answered = client.post(
            "/pay", json={"customer": "c", "amount": 5}, headers={"Idempotency-Key": "k-1"}
        )
        assert answered.status_code == 202, answered.text
        assert type(idem.store).__name__ == "ThreadedStore"
    with pytest.raises(RuntimeError, match="lifespan"):  # closed with the app: opened again by the next
        _ = idem.queue
    assert SqliteQueue(tmp_path / "queue.db").approximate_size() == 1


# -- the HTTP edges: answers as http_handler gives them ----------------------------------------------


@workflow("subscription")
def subscription(plan: str) -> Generator[Any, Any, Any]:
    yield atomic("accounts", plan, lambda tx: tx.increment("started"))
    cancelled = yield receive("cancel", timeout=3600)
    return {"cancelled": cancelled is not None}


def messaging_app(idem: Idempotency) -> FastAPI:
    app = FastAPI()
    idem.install(app)

    @app.post("/subscriptions/{sid}/cancel")
    async def cancel(sid: str, key: str = Depends(idem.key)) -> dict[str, bool]:
        await asend_message(idem.store, subscription, sid, "cancel", True, key=key)
        return {"sent": True}

    return app


def test_a_message_to_a_finished_request_is_409_not_delivered_and_writes_nothing() -> None:
    store = MemoryStore()
    send_message(store, subscription, "s-1", "cancel", True, key="c-0")  # kept until it starts
    assert run(subscription("basic"), request_id="s-1", store=store) == {"cancelled": True}
    before = data_rows(store, "accounts")
    with TestClient(messaging_app(Idempotency(store)), raise_server_exceptions=False) as client:
        answer = client.post("/subscriptions/s-1/cancel", headers={"Idempotency-Key": "c-1"})
    assert (answer.status_code, answer.json()["error"]) == (409, "not_delivered")
    assert "already finished" in answer.json()["detail"]
    assert data_rows(store, "accounts") == before


@pytest.mark.parametrize(
    ("keys", "status"),
    [(["k-1", "k-2"], 400), (["k-1", "k-1"], 200), (["k-1", " k-1"], 200)],
    ids=["different", "repeated", "repeated-with-space"],
)
def test_two_idempotency_key_headers_are_one_key_or_a_400_before_anything_is_written(
    keys: list[str], status: int
) -> None:
    store = MemoryStore()
    headers = [("Idempotency-Key", key) for key in keys]
    with TestClient(fastapi_app(Idempotency(store))) as client:
        answer = client.post("/orders", json={"customer": "ann", "amount": 1}, headers=headers)
    assert answer.status_code == status
    if status == 400:
        assert answer.json()["error"] == "invalid_input" and "2 different" in answer.json()["detail"]
        assert data_rows(store, "accounts", "orders") == {}
    else:
        assert run_status(store, "checkout", "k-1") is not None


@pytest.mark.parametrize("failure", [TimeoutError("read timed out"), ConnectionError("refused")])
def test_an_outside_call_that_times_out_or_finds_no_service_is_503_with_retry_after(
    failure: Exception,
) -> None:
    def provider(_key: str) -> Any:
        raise failure

    @workflow("charging")
    def charging(order: dict[str, Any]) -> Generator[Any, Any, Any]:
        return (yield effect(provider, name="charge"))

    idem = Idempotency(MemoryStore())
    app = FastAPI()
    idem.install(app)

    @app.post("/charges")
    async def charge(order: dict[str, Any], key: str = Depends(idem.key)) -> Any:
        return await idem.run(charging(order), request_id=key)

    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.post("/charges", json={"amount": 1}, headers={"Idempotency-Key": "c-1"})
    assert (answer.status_code, answer.json()["error"], answer.headers["Retry-After"]) == (
        503,
        "unavailable",
        "1",
    )
    assert "read timed out" not in answer.text and "refused" not in answer.text  # the provider's words


def test_a_send_from_a_run_reaches_the_helpers_queue_at_once(tmp_path: Path) -> None:
    """The helper holds the workers' queue: a ``send`` in a workflow it runs wakes the receiver
    now, as ``submit`` would, not when a worker's relay next looks (10 s by default)."""
    store, queue = SqliteStore(tmp_path / "s.sqlite3"), SqliteQueue(tmp_path / "q.sqlite3")
    idem = Idempotency(store, queue=queue)

    @workflow("canceller")
    def canceller(sid: str) -> Generator[Any, Any, Any]:
        yield send("subscription", sid, "cancel", True)
        return "sent"

    submit(subscription("basic"), request_id="s-1", store=store, queue=queue)
    Worker([subscription], store=store, queue=queue, wait=0.01, relay_every=None).run(idle_timeout=0.1)
    assert run_status(store, "subscription", "s-1").waiting  # type: ignore[union-attr]
    timers = queue.approximate_size()  # the receive's timeout, an hour away
    assert asyncio.run(idem.run(canceller("s-1"), request_id="c-1")) == "sent"
    assert queue.approximate_size() == timers + 1  # the receiver's wake-up, sent at once
    Worker([subscription], store=store, queue=queue, wait=0.01, relay_every=None).run(idle_timeout=0.1)
    assert status(store, "subscription", "s-1").result == {"cancelled": True}


def test_a_cancelled_request_reads_cancelled_with_its_reason_and_a_run_of_it_is_409(
    sqlite_idem: Idempotency,
) -> None:
    with TestClient(fastapi_app(sqlite_idem)) as client:
        order = {"customer": "cy", "amount": 4}
        accepted = client.post("/orders/later", json=order, headers={"Idempotency-Key": "o-9"})
        assert accepted.status_code == 202 and isinstance(sqlite_idem.store, SqliteStore)
        assert cancel(sqlite_idem.store, "checkout", "o-9", reason="fraud review") is RunStatus.RUNNING
        seen = client.get(accepted.headers["Location"])
        assert (seen.status_code, seen.json()["status"], seen.json()["reason"]) == (
            200,
            "cancelled",
            "fraud review",
        )
        again = client.post("/orders", json=order, headers={"Idempotency-Key": "o-9"})
        assert (again.status_code, again.json()["error"]) == (409, "cancelled")
        assert "fraud review" in again.json()["detail"]
