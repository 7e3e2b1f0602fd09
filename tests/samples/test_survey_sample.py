"""The survey sample (samples/survey): workflows, the HTTP API over a real socket, the CLI,
and the load + SIGKILL + check cycle on SQLite and on DynamoDB + SQS (moto)."""

from __future__ import annotations

import doctest
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemflow import IdempotencyKeyReuseError, Tx, WorkflowAborted, atomic, run
from idemflow.client import RunStatus, status, submit
from idemflow.stores import Store
from idemflow.stores.async_adapters import is_async
from idemflow.testing import Fault, FaultPoint, FaultyStore, SimulatedCrash, data_rows
from idemflow.testing.servers import Moto
from idemflow.worker import MemoryQueue, Worker
from samples import _api, _harness
from samples.survey import api as survey_api
from samples.survey import cli, reads, validation, workflows
from samples.survey.api import SurveyService, create_app
from samples.survey.workflows import (
    RESPONSES,
    SUMMARIES,
    TABLES,
    NewSurvey,
    Response,
    check,
    create_survey,
    respond,
    results,
)
from tests.conftest import dynamodb_url, make_factory
from tests.support.samples_http import running

LUNCH: NewSurvey = {
    "id": "lunch",
    "title": "Lunch",
    "questions": [
        {"id": "main", "text": "Main course?", "options": ["soup", "salad", "pie"]},
        {"id": "drink", "text": "Drink?", "options": ["tea", "juice"]},
    ],
}
KEY = b"survey-test-key"


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    store = make_factory(str(request.param), request, tmp_path)()
    run(create_survey(LUNCH), request_id="create-lunch", store=store)
    return store


def answer(who: str, main: str = "soup", drink: str = "tea") -> Response:
    return {"survey": "lunch", "respondent": who, "answers": {"main": main, "drink": drink}}


def counts(store: Store) -> dict[str, Any]:
    found = results(store, "lunch")
    assert found is not None
    return {"responses": found["responses"], **found["questions"]}


def test_a_response_is_recorded_and_counted(store: Store) -> None:
    assert run(respond(answer("ada")), request_id="r-1", store=store) == {
        "survey": "lunch",
        "respondent": "ada",
        "counted": True,
    }
    assert counts(store) == {
        "responses": 1,
        "main": {"soup": 1, "salad": 0, "pie": 0},
        "drink": {"tea": 1, "juice": 0},
    }
    assert check(store).ok


def test_duplicates_and_racing_copies_count_once(store: Store) -> None:
    barrier = threading.Barrier(4)
    outcomes: list[Any] = []

    def client() -> None:
        barrier.wait()
        outcomes.append(run(respond(answer("bob", "pie")), request_id="r-race", store=store))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outcomes += [run(respond(answer("bob", "pie")), request_id="r-race", store=store) for _ in range(3)]
    assert len(outcomes) == 7 and all(outcome == outcomes[0] for outcome in outcomes)
    assert counts(store)["responses"] == 1 and counts(store)["main"]["pie"] == 1


@pytest.mark.parametrize("fault", [Fault.CRASH_BEFORE, Fault.CRASH_AFTER, Fault.LOST_ANSWER])
def test_a_crash_at_any_commit_still_counts_once(store: Store, fault: Fault) -> None:
    for point in range(2):  # record, summarize (the completion record is a cache write)
        who = f"crash-{fault.value}-{point}"

        def plan(p: FaultPoint, point: int = point) -> Fault | None:
            return fault if p.kind == "commit" and p.index == point else None

        faulty = FaultyStore(store, plan)
        for _attempt in range(5):
            try:
                run(respond(answer(who)), request_id=who, store=faulty)
                break
            except SimulatedCrash:
                continue
        assert len(faulty.injected) == 1
    assert counts(store)["responses"] == 2
    assert check(store).ok


@pytest.mark.parametrize(
    ("response", "code", "message"),
    [
        ({**answer("x"), "survey": "dinner"}, "not_found", "no survey 'dinner'"),
        (answer("x", main="steak"), "invalid", "'steak' is not an option of question 'main'"),
        ({**answer("x"), "answers": {"main": "soup"}}, "invalid", "question 'drink' is not answered"),
        (
            {**answer("x"), "answers": {"main": "soup", "drink": "tea", "x": "y"}},
            "invalid",
            "no question 'x'",
        ),
    ],
)
def test_bad_responses_are_refused_before_anything_is_written(
    store: Store, response: Response, code: str, message: str
) -> None:
    before = data_rows(store, *TABLES)
    with pytest.raises(WorkflowAborted) as refused:
        run(respond(response), request_id="bad", store=store)
    assert isinstance(refused.value.reason, dict)
    assert refused.value.reason["code"] == code and message in refused.value.reason["message"]
    assert data_rows(store, *TABLES) == before


def test_a_respondent_answers_once_whatever_the_request_id(store: Store) -> None:
    run(respond(answer("cy")), request_id="first", store=store)
    with pytest.raises(WorkflowAborted, match="already_responded"):
        run(respond(answer("cy", "salad")), request_id="second", store=store)
    assert counts(store)["main"] == {"soup": 1, "salad": 0, "pie": 0}


def test_a_request_id_reused_for_another_response_is_refused(store: Store) -> None:
    run(respond(answer("dee")), request_id="r-dee", store=store)
    with pytest.raises(IdempotencyKeyReuseError):
        run(respond(answer("dee", "pie")), request_id="r-dee", store=store)


def test_creating_surveys(store: Store) -> None:
    with pytest.raises(WorkflowAborted, match="already exists"):
        run(create_survey(LUNCH), request_id="create-again", store=store)
    assert run(create_survey(LUNCH), request_id="create-lunch", store=store) == {
        "survey": "lunch"
    }  # duplicate
    anonymous: NewSurvey = {"title": "T", "questions": LUNCH["questions"]}
    made = run(create_survey(anonymous), request_id="c-anon", store=store)
    assert made == run(create_survey(anonymous), request_id="c-anon", store=store)  # same derived id
    assert workflows.survey(store, made["survey"]) is not None
    with pytest.raises(WorkflowAborted, match="distinct options"):
        bad: NewSurvey = {"title": "T", "questions": [{"id": "q", "text": "?", "options": ["a", "a"]}]}
        run(create_survey(bad), request_id="c-bad", store=store)


def test_the_async_variant_answers_at_the_checkpoint_and_leaves_the_same_tables(store: Store) -> None:
    queue = MemoryQueue()
    for n in range(3):
        pending = submit(
            respond(answer(f"a{n}")), request_id=f"async-{n}", store=store, queue=queue, signing_key=KEY
        )
        assert pending.status() is RunStatus.RUNNING
    assert counts(store)["responses"] == 0  # recorded, not yet counted
    assert not check(store).ok  # ... which the checker reports
    stats = Worker([respond], store=store, queue=queue, signing_key=KEY, wait=0.01).run(idle_timeout=0.1)
    assert stats.completed == 3
    assert status(store, "respond", "async-0").result == {
        "survey": "lunch",
        "respondent": "a0",
        "counted": True,
    }
    assert counts(store)["responses"] == 3 and check(store).ok


# -- the checker catches each kind of violation ----------------------------------------------


def _poke(store: Store, table: str, body: Any) -> None:
    run(atomic(table, "lunch", body), request_id=f"poke-{uuid.uuid4()}", store=store)


def test_check_catches_a_response_counted_twice(store: Store) -> None:
    run(respond(answer("eve")), request_id="r-eve", store=store)

    def count_again(tx: Tx) -> None:
        tx.increment("responses")
        tx.increment("q:main:soup")
        tx.increment("q:drink:tea")

    _poke(store, SUMMARIES, count_again)
    verdict = check(store)
    assert not verdict.ok and verdict.counted == 2 and verdict.recorded == 1
    assert any("1 responses recorded, 2 counted" in problem for problem in verdict.problems)


def test_check_catches_a_lost_count_and_a_bad_row(store: Store) -> None:
    _poke(store, RESPONSES, lambda tx: tx.put("r:ghost", {"answers": {"main": "steak", "drink": "tea"}}))
    _poke(store, SUMMARIES, lambda tx: tx.increment("q:main:caviar"))
    problems = " | ".join(check(store).problems)
    assert "1 responses recorded, 0 counted" in problems and "'ghost' is invalid" in problems
    assert "option 'caviar' of 'main' counted 1 times, chosen by 0" in problems


def test_check_while_responses_are_being_counted(store: Store) -> None:
    """``settled=False`` (what the chaos suite checks continuously) lets a count trail its
    response, never run ahead of it."""
    queue = MemoryQueue()
    submit(respond(answer("fay")), request_id="r-fay", store=store, queue=queue, signing_key=KEY)
    assert not check(store).ok and check(store, settled=False).ok  # recorded, not counted yet
    Worker([respond], store=store, queue=queue, signing_key=KEY, wait=0.01).run(idle_timeout=0.1)
    assert check(store).ok and check(store, settled=False).ok
    _poke(store, SUMMARIES, lambda tx: tx.increment("q:main:soup"))
    problems = check(store, settled=False).problems
    assert problems == ("survey 'lunch': option 'soup' of 'main' counted 2 times, chosen by 1 responses",)


def test_the_sample_docstrings_run() -> None:
    for module in (workflows, validation, reads, survey_api, _api, _harness):
        failed, attempted = doctest.testmod(module)
        assert attempted > 0 and failed == 0


# -- the HTTP API, through a real socket -----------------------------------------------------------


def test_the_http_api(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'api.sqlite3'}"
    store = cli._open(store_url)  # the tables; the app opens its own asynchronous store from the URL
    service = SurveyService(store_url)
    with running(create_app(service)) as url, httpx.Client(base_url=url) as http:
        assert is_async(service.store)  # opened in the lifespan, on the server's loop
        assert http.post("/surveys", json=LUNCH).json()["error"] == "missing_idempotency_key"
        assert http.post("/surveys", json=LUNCH).status_code == 400
        bad = http.post("/surveys", content=b"{not json", headers={"Idempotency-Key": "c0"})
        assert (bad.status_code, bad.json()["error"]) == (400, "invalid_json")
        bad = http.post("/surveys", json={"title": "T"}, headers={"Idempotency-Key": "c0"})
        assert bad.status_code == 422 and "questions" in bad.json()["detail"]
        for _ in range(2):  # a retry gets the first answer
            made = http.post("/surveys", json=LUNCH, headers={"Idempotency-Key": "c1"})
            assert (made.status_code, made.json()) == (201, {"survey": "lunch"})
        assert http.get("/surveys/lunch").json()["questions"] == LUNCH["questions"]
        other = http.post("/surveys", json={**LUNCH, "title": "Other"}, headers={"Idempotency-Key": "c1"})
        assert (other.status_code, other.json()["error"]) == (422, "idempotency_key_reused")
        again = http.post("/surveys", json=LUNCH, headers={"Idempotency-Key": "c2"})
        assert (again.status_code, again.json()["error"]) == (409, "exists")

        body = {"respondent": "ada", "answers": {"main": "pie", "drink": "juice"}}
        first = http.post("/surveys/lunch/responses", json=body, headers={"Idempotency-Key": "r1"})
        assert (first.status_code, first.json()["counted"]) == (200, True)
        retry = http.post("/surveys/lunch/responses", json=body, headers={"Idempotency-Key": "r1"})
        assert retry.json() == first.json()
        twice = http.post("/surveys/lunch/responses", json=body, headers={"Idempotency-Key": "r2"})
        assert (twice.status_code, twice.json()["error"]) == (409, "already_responded")
        wrong = {"respondent": "bo", "answers": {"main": "steak", "drink": "tea"}}
        refused = http.post("/surveys/lunch/responses", json=wrong, headers={"Idempotency-Key": "r3"})
        assert refused.status_code == 422 and "'steak' is not an option" in refused.json()["detail"]
        nowhere = http.post("/surveys/dinner/responses", json=body, headers={"Idempotency-Key": "r4"})
        assert (nowhere.status_code, nowhere.json()["error"]) == (404, "not_found")
        long_key = http.post("/surveys/lunch/responses", json=body, headers={"Idempotency-Key": "k" * 300})
        assert (long_key.status_code, long_key.json()["error"]) == (400, "invalid_input")
        shape = http.post("/surveys/lunch/responses", json={"answers": {}}, headers={"Idempotency-Key": "r5"})
        assert shape.status_code == 422

        summary = http.get("/surveys/lunch/results").json()
        assert summary["responses"] == 1 and summary["questions"]["main"]["pie"] == 1
        assert http.get("/surveys/dinner/results").status_code == 404
        assert http.get("/responses/r1").json() == {
            "request_id": "r1",
            "status": "completed",
            "result": first.json(),
        }
        assert http.get("/responses/nobody").status_code == 404
        assert http.get("/healthz").json() == {"ok": True}
    assert check(store).ok


def test_the_http_api_with_a_queue_answers_202_and_workers_count(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'api.sqlite3'}"
    store = cli._open(store_url)
    queue = MemoryQueue()  # shared with the worker below; the server calls it from threads
    run(create_survey(LUNCH), request_id="c", store=store)
    service = SurveyService(store_url, queue, signing_key=KEY)
    body = {"respondent": "ada", "answers": {"main": "soup", "drink": "tea"}}
    with running(create_app(service)) as url, httpx.Client(base_url=url) as http:
        accepted = http.post("/surveys/lunch/responses", json=body, headers={"Idempotency-Key": "r1"})
        assert accepted.status_code == 202
        assert accepted.json() == {"request_id": "r1", "status": "running", "status_url": "/responses/r1"}
        assert accepted.headers["Location"] == "/responses/r1"
        running_now = http.get("/responses/r1")
        assert (running_now.status_code, running_now.json()["status"]) == (202, "running")
        assert http.get("/surveys/lunch/results").json()["responses"] == 0
        Worker(workflows.WORKFLOWS, store=store, queue=queue, signing_key=KEY, wait=0.01).run(
            idle_timeout=0.1
        )
        assert http.get("/responses/r1").json()["status"] == "completed"
        done = http.post("/surveys/lunch/responses", json=body, headers={"Idempotency-Key": "r1"})
        assert (done.status_code, done.json()["counted"]) == (200, True)
        twice = http.post("/surveys/lunch/responses", json=body, headers={"Idempotency-Key": "r2"})
        assert twice.status_code == 409  # refused in the first step, before the checkpoint
    assert check(store).ok


# -- the command line ------------------------------------------------------------------------------


def test_load_and_check_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:{tmp_path / 'cli.sqlite3'}"
    assert cli.main(["load", "--store", url, "--responses", "60", "--users", "4"]) == 0
    out = capsys.readouterr().out
    assert "[ ok ] answers" in out and "refused (" in out
    assert cli.main(["check", "--store", url]) == 0
    assert "PASS" in capsys.readouterr().out
    store = cli._open(url)
    run(atomic(SUMMARIES, "load0-s0", lambda tx: tx.increment("responses")), request_id="extra", store=store)
    store.close()
    assert cli.main(["check", "--store", url]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_load_through_the_api(tmp_path: Path) -> None:
    store_url = f"sqlite:{tmp_path / 'http.sqlite3'}"
    store = cli._open(store_url)
    with running(create_app(SurveyService(store_url))) as url:
        report = cli.run_load(
            cli.SurveyHttp(_harness.HttpClient([url])), cli.LoadSettings(users=4, responses=40)
        )
    assert not report.problems, report.problems
    assert report.outcomes["counted"] == check(store).counted > 0


# -- load + SIGKILL + check: servers and `idemflow worker` processes killed mid-request ---------------


@pytest.mark.slow
def test_demo_with_sigkilled_servers_and_workers_on_sqlite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        cli.main(["demo", "--data", str(tmp_path), "--responses", "60", "--kills", "2", "--seed", "7"]) == 0
    )
    out = capsys.readouterr().out
    assert "PASS" in out and "FAIL" not in out and "2 SIGKILLs (1 API servers, 1 workers)" in out
    assert "seed 7" in out


@pytest.mark.slow
def test_demo_with_sigkilled_servers_and_workers_on_dynamodb(
    moto: Moto, request: pytest.FixtureRequest
) -> None:
    """On AWS's own engine (DynamoDB Local), every process meeting the service's conflicts; the
    queue on moto's SQS. Moto's DynamoDB runs the same store code, a less faithful bed: only the
    store suites run there too (``Feature.STORE_SUITES``, ``store_kinds`` in tests/conftest.py)."""
    prefix = f"sv{uuid.uuid4().hex[:8]}"
    settings = cli.DemoSettings(
        store=dynamodb_url("dynamodb-local", request, prefix),
        queue=f"sqs:{prefix}?endpoint={moto.endpoint}&region={moto.region}&visibility_timeout=2",
        kills=2,
        load=cli.LoadSettings(responses=40, users=6, seed=11),
    )
    report = cli.run_demo(settings)
    assert report.ok, report.render()
    assert sum(report.crashes.kills.values()) == 2
    assert report.verdict.recorded == report.verdict.counted == report.load.outcomes["counted"] > 0
