"""idemflow.aws_lambda.http_handler and ASGI through Mangum: API Gateway and Function URL events.

The events are built as AWS documents them: a REST API proxy event (payload 1.0, with
``multiValueHeaders``), an HTTP API event (payload 2.0: lower-case header names, repeated
values joined with commas, ``rawPath``, ``requestContext.http``) and a Function URL event (the
2.0 shape, ``accountId`` ``anonymous``, a ``lambda-url`` domain). The in-process tests call the
handler with a fixed context on SQLite; the sandbox tests run it inside ``awslambdaric``
(:mod:`tests.support.lambda_runtime`) on DynamoDB (moto), racing, SIGKILLed and SIGSTOPped, with each
request's effect counted in a table the test reads from outside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from idemflow import Idem, atomic, effect, idempotent, open_store, pure, receive, run, workflow
from idemflow.aws_lambda import REPLAYED_HEADER, FixedContext, HttpRequest, http_handler
from idemflow.client import RunStatus, send_message, status
from idemflow.errors import InvalidInputError, TransientError
from idemflow.stores import MemoryStore, SqliteStore
from idemflow.testing.servers import Moto
from samples.survey.tables import TABLES as SURVEY_TABLES
from samples.survey.workflows import create_survey, results
from tests.conftest import TEST_TABLES, dynamodb_url
from tests.support.lambda_events import ORDERS, http_event, rest_event
from tests.support.lambda_functions import orders
from tests.support.lambda_runtime import Invocation, Sandbox, SandboxCounts
from tests.support.workflows import rows_of


def body_of(answer: dict[str, Any]) -> Any:
    return json.loads(answer["body"])


# -- in-process, with a fixed context ---------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(str(tmp_path / "store.sqlite3"))


def counting(store: Any, **options: Any) -> Any:
    """An endpoint counting one effect per key in ``tableb/p-orders``."""

    @http_handler(store, status=201, name="p-order", **options)
    def order(request: HttpRequest) -> Generator[Idem[Any], Any, Any]:
        count = yield atomic("tableb", "p-orders", lambda tx: once(tx, request.key), name="effect")
        return {"order": request.key, "count": count, "item": request.body.get("item")}

    return order


def once(tx: Any, key: str) -> int:
    count = int(tx.get(key, 0)) + 1
    tx.put(key, count)
    return count


def effects(store: Any) -> dict[str, Any]:
    return {key: value for (table, part, key), value in rows_of(store, "p-").items() if table == "tableb"}


@pytest.mark.parametrize("kind", ["rest", "http", "function_url"])
def test_a_duplicate_gets_the_stored_answer_marked_replayed(store: SqliteStore, kind: str) -> None:
    order = counting(store)
    make = {
        "rest": lambda h: rest_event("POST", "/orders", {"item": "tea"}, h),
        "http": lambda h: http_event("POST", "/orders", {"item": "tea"}, h),
        "function_url": lambda h: http_event("POST", "/orders", {"item": "tea"}, h, function_url=True),
    }[kind]
    first = order(make({"Idempotency-Key": "k-1"}), FixedContext(10_000))
    assert first["statusCode"] == 201 and first["isBase64Encoded"] is False
    assert first["headers"] == {"Content-Type": "application/json"}
    assert body_of(first) == {"order": "k-1", "count": 1, "item": "tea"}
    again = order(make({"Idempotency-Key": "k-1"}), FixedContext(10_000))  # new request and trace ids
    assert again["statusCode"] == 201 and body_of(again) == body_of(first)
    assert again["headers"][REPLAYED_HEADER] == "true"
    fresh = counting(store, cache=None)  # another sandbox: no answers kept, the store has it
    from_store = fresh(make({"Idempotency-Key": "k-1"}), FixedContext(10_000))
    assert body_of(from_store) == body_of(first) and from_store["headers"][REPLAYED_HEADER] == "true"
    assert effects(store) == {"k-1": 1}


def test_the_key_header_is_found_whatever_its_case(store: SqliteStore) -> None:
    order = counting(store, key_header="X-Request-Key")
    upper = rest_event("POST", "/orders", {"item": "a"}, {"X-REQUEST-KEY": "k-1"})
    assert order(upper, FixedContext(10_000))["statusCode"] == 201
    only_multi = rest_event("POST", "/orders", {"item": "b"})
    only_multi["multiValueHeaders"]["x-request-key"] = ["k-2"]
    assert order(only_multi, FixedContext(10_000))["statusCode"] == 201
    lower = http_event("POST", "/orders", {"item": "c"}, {"x-request-key": "k-3"})
    assert order(lower, FixedContext(10_000))["statusCode"] == 201
    assert effects(store) == {"k-1": 1, "k-2": 1, "k-3": 1}


def test_a_base64_body_is_decoded(store: SqliteStore) -> None:
    order = counting(store)
    event = http_event("POST", "/orders", {"item": "thé"}, {"Idempotency-Key": "k-1"}, base64_body=True)
    answer = order(event, FixedContext(10_000))
    assert answer["statusCode"] == 201 and body_of(answer)["item"] == "thé"
    plain = http_event("POST", "/orders", {"item": "thé"}, {"Idempotency-Key": "k-1"})
    assert body_of(order(plain, FixedContext(10_000))) == body_of(answer)  # the same request


def refused(answer: dict[str, Any]) -> tuple[int, str]:
    return answer["statusCode"], body_of(answer)["error"]


def test_bad_requests_are_answered_4xx_before_anything_is_written(store: SqliteStore) -> None:
    order = counting(store, max_body_bytes=64)
    key = {"Idempotency-Key": "k-1"}
    context = FixedContext(10_000)
    assert refused(order(http_event("POST", "/orders", {"item": "a"}), context)) == (
        400,
        "missing_idempotency_key",
    )
    blank = http_event("POST", "/orders", {"item": "a"}, {"Idempotency-Key": "  "})
    assert refused(order(blank, context)) == (400, "missing_idempotency_key")
    two = rest_event("POST", "/orders", {"item": "a"}, key)
    two["multiValueHeaders"]["Idempotency-Key"] = ["k-1", "k-2"]
    assert refused(order(two, context)) == (400, "invalid_input")
    too_long = http_event("POST", "/orders", {"item": "a"}, {"Idempotency-Key": "k" * 256})
    assert refused(order(too_long, context)) == (400, "invalid_input")
    assert refused(order(http_event("POST", "/orders", None, key, raw_body="{not json"), context)) == (
        400,
        "invalid_input",
    )
    not_base64 = http_event("POST", "/orders", None, key, raw_body="%%%")
    not_base64["isBase64Encoded"] = True
    assert refused(order(not_base64, context)) == (400, "invalid_input")
    large = {"item": "x" * 100}
    assert refused(order(http_event("POST", "/orders", large, key), context)) == (413, "payload_too_large")
    large64 = http_event("POST", "/orders", large, key, base64_body=True)
    assert refused(order(large64, context)) == (413, "payload_too_large")
    assert rows_of(store, "p-") == {}
    assert status(store, "p-order", "k-1").status is RunStatus.UNKNOWN


def test_a_key_reused_for_another_request_is_422(store: SqliteStore) -> None:
    order = counting(store)
    key = {"Idempotency-Key": "k-1"}
    assert (
        order(http_event("POST", "/orders", {"item": "tea"}, key), FixedContext(10_000))["statusCode"] == 201
    )
    for other in (
        http_event("POST", "/orders", {"item": "coffee"}, key),  # another body
        http_event("PUT", "/orders", {"item": "tea"}, key),  # another method
        http_event("POST", "/orders/2", {"item": "tea"}, key),  # another path
    ):
        assert refused(order(other, FixedContext(10_000))) == (422, "idempotency_key_reused")
    assert effects(store) == {"k-1": 1}


def test_refusals_answer_as_idemflow_asgi_does(store: SqliteStore) -> None:
    @http_handler(store, refusals={"sold_out": 410})
    def buy(request: HttpRequest) -> Generator[Idem[Any], Any, Any]:
        reason = request.body["reason"]
        yield atomic("tablea", "p-stock", lambda tx: tx.abort(reason))
        return "never"

    coded = http_event(
        "POST", "/buy", {"reason": {"code": "sold_out", "message": "none left"}}, {"Idempotency-Key": "a"}
    )
    assert order_answer(buy(coded, FixedContext(10_000))) == (
        410,
        {"error": "sold_out", "detail": "none left"},
    )
    plain = http_event("POST", "/buy", {"reason": "no"}, {"Idempotency-Key": "b"})
    assert order_answer(buy(plain, FixedContext(10_000))) == (409, {"error": "aborted", "detail": "no"})


def order_answer(answer: dict[str, Any]) -> tuple[int, Any]:
    return answer["statusCode"], body_of(answer)


def test_no_time_left_answers_503_and_writes_nothing(store: SqliteStore) -> None:
    order = counting(store, reserve=2.0)
    answer = order(
        http_event("POST", "/orders", {"item": "a"}, {"Idempotency-Key": "k-1"}), FixedContext(1_500)
    )
    assert refused(answer) == (503, "busy") and answer["headers"]["Retry-After"] == "1"
    assert rows_of(store, "p-") == {}


class Throttled:
    """A real store whose commits all fail with a transient error (a throttled table)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def commit(self, *_args: Any, **_kwargs: Any) -> Any:
        raise TransientError("injected: throttled")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_the_remaining_time_bounds_the_retries(store: SqliteStore) -> None:
    """A store that keeps failing is answered 503 before the function's timeout, not after the
    policy's 30 s: API Gateway would otherwise answer the client 504 with nothing said."""
    order = counting(Throttled(store), reserve=1.0)
    context = FixedContext(2_000)
    answer = order(http_event("POST", "/orders", {"item": "a"}, {"Idempotency-Key": "k-1"}), context)
    assert refused(answer) == (503, "busy")
    assert context.get_remaining_time_in_millis() > 0  # answered while the invocation still ran


class Killed(BaseException):
    """The sandbox dies inside the effect's call: nothing after it runs, the lease stays."""


def test_an_effect_lease_ends_with_the_invocation_that_took_it(store: SqliteStore) -> None:
    """A sandbox killed while holding a 60 s effect lease keeps a retry waiting only until its
    invocation would have ended (Lambda had killed it by then), not for the whole lease."""
    calls: list[str] = []

    def charge(key: str) -> dict[str, str]:
        calls.append(key)
        if len(calls) == 1:
            raise Killed
        return {"charge": key}

    @http_handler(store, cache=None)
    def pay(request: HttpRequest) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(charge, lease=60))

    event = http_event("POST", "/pay", {"amount": 5}, {"Idempotency-Key": "p-1"})
    with pytest.raises(Killed):
        pay(event, FixedContext(1_500))  # killed inside the call, holding the lease
    retry = FixedContext(10_000)
    answer = pay(event, retry)
    assert answer["statusCode"] == 200 and body_of(answer)["charge"] == calls[1]
    assert len(calls) == 2
    assert retry.get_remaining_time_in_millis() > 6_000  # waited about 1.5 s, not 60


def test_a_workflow_keeps_its_name(store: SqliteStore) -> None:
    @http_handler(store)
    @workflow("book")
    def book(request: HttpRequest) -> Generator[Idem[Any], Any, Any]:
        return (yield atomic("tablea", "p-books", lambda tx: once(tx, request.key)))

    answer = book(http_event("POST", "/books", {}, {"Idempotency-Key": "b-1"}), FixedContext(10_000))
    assert answer["statusCode"] == 200 and body_of(answer) == 1 and book.name == "book"
    assert status(store, "book", "b-1").status is RunStatus.COMPLETED
    with pytest.raises(InvalidInputError, match="keeps its name"):
        http_handler(store, name="other")(workflow("book2")(lambda_returning_a_dict))


def test_results_with_codec_types_are_answered_as_json(store: SqliteStore) -> None:
    from datetime import date
    from decimal import Decimal

    @http_handler(store)
    def price(request: HttpRequest) -> Generator[Idem[Any], Any, Any]:
        yield atomic("tablea", "p-prices", lambda tx: tx.put("tea", Decimal("2.5")))
        return {
            "price": Decimal("2.5"),
            "count": Decimal(3),
            "on": date(2026, 11, 27),
            "id": uuid.UUID(int=1),
        }

    answer = price(http_event("GET", "/price", None, {"Idempotency-Key": "k-1"}), FixedContext(10_000))
    assert body_of(answer) == {"price": 2.5, "count": 3, "on": "2026-11-27", "id": str(uuid.UUID(int=1))}


def test_the_wrong_trigger_and_bad_handlers_are_refused(store: SqliteStore) -> None:
    order = counting(store)
    with pytest.raises(InvalidInputError, match="Function URL event"):
        order({"Records": [{"eventSource": "aws:sqs"}]}, FixedContext(10_000))
    with pytest.raises(InvalidInputError, match="Function URL event"):
        order("POST /orders", FixedContext(10_000))  # type: ignore[arg-type]

    async def asynchronous(request: HttpRequest) -> Any:
        return None

    with pytest.raises(InvalidInputError, match="Mangum"):
        http_handler(store)(asynchronous)
    with pytest.raises(InvalidInputError, match="@idempotent_function"):
        http_handler(store)(lambda_returning_a_dict)
    with pytest.raises(InvalidInputError, match="status"):
        http_handler(store, status=404)
    with pytest.raises(InvalidInputError, match="max_body_bytes"):
        http_handler(store, max_body_bytes=0)
    with pytest.raises(InvalidInputError, match="reserve"):
        http_handler(store, reserve=-1)


def lambda_returning_a_dict(request: HttpRequest) -> dict[str, Any]:
    return {}


def test_a_function_annotated_to_return_any_is_a_handler(store: SqliteStore) -> None:
    """``-> Any`` says no more than no annotation: the function may return an Idem (it is run)."""

    @http_handler(store, name="p-any")
    def counted(request: HttpRequest) -> Any:
        return atomic("tableb", "p-any", lambda tx: once(tx, request.key), name="effect")

    event = http_event("POST", "/orders", {"item": "a"}, {"Idempotency-Key": "k-1"})
    assert [body_of(counted(event, FixedContext(10_000))) for _ in range(2)] == [1, 1]

    @idempotent(store, key=lambda n: str(n))
    def doubled(n: int) -> Any:
        return atomic("tableb", "p-any", lambda tx: tx.increment("doubled", 2 * n))

    doubled(3)


@workflow("p-subscription")
def p_subscription(plan: str) -> Generator[Idem[Any], Any, Any]:
    return (yield receive("cancel", timeout=3600))


def test_a_message_to_a_finished_request_is_409_not_delivered(store: SqliteStore) -> None:
    send_message(store, p_subscription, "s-1", "cancel", True, key="c-0")
    assert run(p_subscription("basic"), request_id="s-1", store=store) is True

    @http_handler(store, name="p-cancel")
    def cancel(request: HttpRequest) -> Idem[Any]:
        send_message(store, p_subscription, "s-1", "cancel", True, key=request.key)
        return pure("sent")

    answer = cancel(http_event("POST", "/cancel", None, {"Idempotency-Key": "c-1"}), FixedContext(10_000))
    assert refused(answer) == (409, "not_delivered")


@pytest.mark.parametrize("failure", [TimeoutError("slow"), ConnectionError("refused")])
def test_a_provider_outage_is_503_with_retry_after_as_idemflow_asgi_answers(
    store: SqliteStore, failure: Exception
) -> None:
    def provider(_key: str) -> Any:
        raise failure

    @http_handler(store, name="p-charge")
    def charge(request: HttpRequest) -> Generator[Idem[Any], Any, Any]:
        return (yield effect(provider, name="charge"))

    answer = charge(
        http_event("POST", "/charges", {"a": 1}, {"Idempotency-Key": "c-1"}), FixedContext(10_000)
    )
    assert refused(answer) == (503, "unavailable") and answer["headers"]["Retry-After"] == "1"


class Unflushed(Throttled):
    """A store that went down after the steps: only the flush of its deferred writes fails."""

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        return self._store.commit(*args, **kwargs)

    def flush(self) -> None:
        raise TransientError("injected: unreachable")


@pytest.mark.parametrize("down", [Throttled, Unflushed], ids=["throughout", "at-the-flush"])
def test_a_store_down_is_503_not_a_failed_invocation(store: SqliteStore, down: type[Throttled]) -> None:
    """The flush after the steps failing too (the completion record may be lost) is answered 503,
    not raised past the answer (API Gateway would answer 502): a retry replays the steps."""
    order = counting(down(store), reserve=1.0)
    answer = order(http_event("POST", "/o", {"item": "a"}, {"Idempotency-Key": "k"}), FixedContext(2_000))
    assert refused(answer) == (503, "busy") and answer["headers"]["Retry-After"] == "1"


def test_a_url_store_is_opened_once_per_sandbox(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'store.sqlite3'}"
    first, second = counting(url), counting(url)
    assert first.store is None  # nothing opened before the first invocation
    for handler, key in ((first, "k-1"), (second, "k-2")):
        assert (
            handler(http_event("POST", "/o", {}, {"Idempotency-Key": key}), FixedContext(10_000))[
                "statusCode"
            ]
            == 201
        )
    assert first.store is not None and first.store is second.store


def test_an_in_memory_store_works_as_well() -> None:
    order = counting(MemoryStore())
    event = http_event("POST", "/orders", {"item": "a"}, {"Idempotency-Key": "k-1"})
    assert [body_of(order(event, FixedContext(10_000)))["count"] for _ in range(3)] == [1, 1, 1]


# -- inside AWS's runtime client ------------------------------------------------------


@pytest.fixture
def cloud(moto: Moto, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """A fresh prefix on moto with the test tables and the survey's, and the sandbox's environment."""
    prefix = f"h{uuid.uuid4().hex[:8]}"
    store_url = dynamodb_url("dynamodb", request, prefix)
    store = open_store(store_url)
    store.create_tables(*TEST_TABLES, *SURVEY_TABLES)
    gates = tmp_path / "gates"
    gates.mkdir()
    env = {"IDEMFLOW_STORE_URL": store_url, "LAMBDA_GATE_DIR": str(gates)}
    return {"space": prefix + "-", "store": store, "env": env, "gates": gates}


def order_event(space: str, key: str, **body: Any) -> dict[str, Any]:
    return http_event("POST", "/orders", {"space": space, **body}, {"Idempotency-Key": key})


def counted(store: Any, space: str) -> dict[str, Any]:
    store.flush()
    return {key: value for (table, part, key), value in rows_of(store, space).items() if part == "orders"}


@pytest.mark.cloud
def test_sandbox_racing_duplicates_in_two_sandboxes_get_one_answer(cloud: dict[str, Any]) -> None:
    space, env = cloud["space"], cloud["env"]
    counts = SandboxCounts()
    with (
        Sandbox("tests.support.lambda_functions.orders", env, counts) as one,
        Sandbox("tests.support.lambda_functions.orders", env, counts) as two,
    ):
        event = order_event(space, "race-1", meet=2, item="tea")
        racing: list[Invocation] = [one.invoke_async(event), two.invoke_async(event)]
        answers = [invocation.result(30) for invocation in racing]
    assert [a["statusCode"] for a in answers] == [201, 201]
    assert body_of(answers[0]) == body_of(answers[1]) == {"order": "race-1", "count": 1, "item": "tea"}
    assert counted(cloud["store"], space) == {"race-1": 1}
    assert len(list(cloud["gates"].glob("race-1.*.met"))) == 2  # both were inside the step at once


@pytest.mark.cloud
def test_sandbox_killed_mid_request_then_the_client_retries(cloud: dict[str, Any]) -> None:
    space, env, gates, store = cloud["space"], cloud["env"], cloud["gates"], cloud["store"]
    counts = SandboxCounts()
    event = order_event(space, "kill-1", gate=True, item="tea")
    doomed = Sandbox("tests.support.lambda_functions.orders", env, counts)
    try:
        invocation = doomed.invoke_async(event)
        deadline = time.monotonic() + 20
        while not (gates / "kill-1.entered").exists():  # inside the step, its effect not committed
            assert not invocation.done.is_set() and time.monotonic() < deadline, doomed.output()
            time.sleep(0.01)
        doomed.kill()
    finally:
        doomed.stop()
    assert status(store, ORDERS, "kill-1").status is not RunStatus.COMPLETED
    assert counted(store, space) == {}  # killed before its step committed
    with Sandbox("tests.support.lambda_functions.orders", env, counts) as retry:
        answer = retry.invoke(event)  # the client's retry, with the same key, in a new sandbox
        retry.freeze()
        assert status(store, ORDERS, "kill-1").status is RunStatus.COMPLETED  # durable while frozen
        retry.thaw()
        again = retry.invoke(event)
    assert answer["statusCode"] == 201 and body_of(answer) == {"order": "kill-1", "count": 1, "item": "tea"}
    assert body_of(again) == body_of(answer) and again["headers"][REPLAYED_HEADER] == "true"
    assert counted(store, space) == {"kill-1": 1}
    assert counts.kills == 1 and counts.freezes == 1


@pytest.mark.cloud
def test_sandbox_frozen_between_invocations_answers_from_durable_state(cloud: dict[str, Any]) -> None:
    space, env, store = cloud["space"], cloud["env"], cloud["store"]
    keys = [f"stop-{n}" for n in range(4)]
    with (
        Sandbox("tests.support.lambda_functions.orders", env) as sandbox,
        Sandbox("tests.support.lambda_functions.orders", env) as other,
    ):
        for key in keys:
            if sandbox.frozen:
                sandbox.thaw()
            answer = sandbox.invoke(order_event(space, key, item=key))
            sandbox.freeze()  # at once, as Lambda does: what it wrote must be durable already
            assert answer["statusCode"] == 201
            assert status(store, ORDERS, key).status is RunStatus.COMPLETED
            duplicate = other.invoke(order_event(space, key, item=key))  # while the first is frozen
            assert body_of(duplicate) == body_of(answer) and duplicate["headers"][REPLAYED_HEADER] == "true"
        sandbox.thaw()
        closed = sandbox.invoke(order_event(space, "stop-closed", closed=True))
    assert closed["statusCode"] == 410 and body_of(closed)["error"] == "closed"
    assert counted(store, space) == dict.fromkeys(keys, 1)


LUNCH = {
    "id": "lunch",
    "title": "Lunch",
    "questions": [{"id": "main", "text": "?", "options": ["soup", "salad"]}],
}


@pytest.mark.cloud
def test_sandbox_the_templates_survey_endpoint_counts_a_response_once(cloud: dict[str, Any]) -> None:
    """``samples.survey.lambda_handlers.respond``, the handler deploy/aws/template.yaml routes
    ``POST /surveys/{survey}/responses`` to, configured by the template's environment."""
    store, survey = cloud["store"], f"{cloud['space']}lunch"
    run(create_survey({**LUNCH, "id": survey}), request_id=f"{survey}-created", store=store)
    env = {"IDEMFLOW_STORE": cloud["env"]["IDEMFLOW_STORE_URL"], "IDEMFLOW_QUEUE": "memory:"}
    path = f"/surveys/{survey}/responses"
    response = {"respondent": "ada", "answers": {"main": "salad"}}

    def post(body: Any, key: str) -> dict[str, Any]:
        return http_event(
            "POST",
            path,
            body,
            {"Idempotency-Key": key},
            route="POST /surveys/{survey}/responses",
            path_parameters={"survey": survey},
        )

    with Sandbox("samples.survey.lambda_handlers.respond", env) as sandbox:
        answers = [sandbox.invoke(post(response, "r-1")) for _ in range(2)]
        sandbox.freeze()
        sandbox.thaw()
        second = sandbox.invoke(post(response, "r-2"))  # the same respondent, another request
        wrong = sandbox.invoke(post({"respondent": "bo"}, "r-3"))
    assert [a["statusCode"] for a in answers] == [200, 200] and answers[0]["body"] == answers[1]["body"]
    assert body_of(answers[0])["counted"] is True and answers[1]["headers"][REPLAYED_HEADER] == "true"
    assert refused(second) == (409, "already_responded")
    assert refused(wrong) == (400, "invalid_input")
    assert results(store, survey)["questions"] == {"main": {"soup": 0, "salad": 1}}


# -- ASGI through Mangum ---------------------------------------------------------------


@pytest.mark.cloud
def test_sandbox_survey_app_through_mangum_on_v1_and_v2_events(cloud: dict[str, Any]) -> None:
    """The survey sample's Starlette app (idemflow.asgi) served by Mangum inside awslambdaric."""
    env = {**cloud["env"], "LAMBDA_ASGI": "1"}
    survey = f"{cloud['space']}lunch"
    respond_path = f"/surveys/{survey}/responses"
    response = {"respondent": "ada", "answers": {"main": "soup"}}
    with Sandbox("tests.support.lambda_functions.survey_api", env) as sandbox:
        created = sandbox.invoke(
            rest_event("POST", "/surveys", {**LUNCH, "id": survey}, {"Idempotency-Key": "c-1"})
        )
        assert created["statusCode"] == 201, created
        sandbox.freeze()
        sandbox.thaw()
        answers = []
        for make in (http_event, rest_event, http_event):  # v2, then v1 and v2 duplicates
            event = make(
                "POST",
                respond_path,
                response,
                {"Idempotency-Key": "r-1"},
                path_parameters={"survey": survey},
            )
            answers.append(sandbox.invoke(event))
            sandbox.freeze()  # the lifespan closed the store: its records are written
            sandbox.thaw()
        missing = sandbox.invoke(http_event("POST", respond_path, response))
        results = sandbox.invoke(http_event("GET", f"/surveys/{survey}/results"))
    assert [a["statusCode"] for a in answers] == [200, 200, 200]
    assert body_of(answers[0])["counted"] is True
    assert {a["body"] for a in answers} == {answers[0]["body"]}
    assert missing["statusCode"] == 400 and body_of(missing)["error"] == "missing_idempotency_key"
    assert body_of(results)["questions"] == {"main": {"soup": 1, "salad": 0}}


def test_building_the_templates_handlers_imports_no_sdk_and_no_web_framework() -> None:
    """A cold start of the survey's functions loads neither boto3 nor Starlette: the first
    invocation opens the store (and imports its SDK); the HTTP handler needs no framework."""
    code = (
        "import sys, samples.survey.lambda_handlers\n"
        "print(sorted(m for m in sys.modules if m.startswith(('boto', 'azure', 'starlette', 'mangum'))))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "IDEMFLOW_STORE": "dynamodb:?region=us-east-1&prefix=p-",
        "IDEMFLOW_QUEUE": "sqs:q?region=us-east-1&create=false",
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


def test_the_records_are_named_after_the_handler() -> None:
    assert orders.name == ORDERS  # what operators pass to `idemflow runs` and status()
