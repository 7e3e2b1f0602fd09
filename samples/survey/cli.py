"""``python -m samples.survey serve|load|check|demo``: run the API, throw load at it, verify.

    python -m samples.survey serve --store sqlite:survey.db [--queue sqlite:queue.db] [--port 8000]
    python -m samples.survey load  --url http://127.0.0.1:8000     (or --store URL [--queue URL])
    python -m samples.survey check --store sqlite:survey.db
    python -m samples.survey demo                     # all of it, with SIGKILLed processes

``load`` simulates ``--users`` concurrent users (threads). Every request is
sent 2-4 times under the same request id — duplicate retries, some racing
each other — through the HTTP API (``--url``, repeatable: each retry goes
to the next server) or to the API's service methods on a store (``--store``). It then
verifies what the clients saw: every copy of a request got the same answer,
and each survey counted exactly the responses its clients were told were
accepted. ``check`` verifies the tables alone and exits 1 on any violation.

The machinery (retrying HTTP client, duplicate sends, process fleet and
killer, the command line) is :mod:`samples._harness`, shared with the
auction and transfer samples.
"""

from __future__ import annotations

import argparse
import functools
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from idemflow.stores import Store
from samples import _harness as harness
from samples._api import Answer, Direct
from samples.survey import workflows
from samples.survey.api import SurveyService, create_app

# -- the survey load ------------------------------------------------------------------------


class SurveyApi(Protocol):
    """What the load calls: :class:`SurveyHttp`, or :class:`SurveyDirect` (no HTTP)."""

    def create_survey(self, key: str, body: object) -> Answer: ...
    def respond(self, key: str, survey_id: str, body: object) -> Answer: ...
    def response_status(self, request_id: str) -> Answer: ...
    def results(self, survey_id: str) -> Answer: ...


class SurveyHttp:
    """:class:`SurveyApi` over HTTP."""

    def __init__(self, client: harness.HttpClient) -> None:
        self.client = client

    def create_survey(self, key: str, body: object) -> Answer:
        return self.client.request("POST", "/surveys", key=key, body=body)

    def respond(self, key: str, survey_id: str, body: object) -> Answer:
        return self.client.request("POST", f"/surveys/{survey_id}/responses", key=key, body=body)

    def response_status(self, request_id: str) -> Answer:
        return self.client.request("GET", f"/responses/{request_id}")

    def results(self, survey_id: str) -> Answer:
        return self.client.request("GET", f"/surveys/{survey_id}/results")


class SurveyDirect:
    """:class:`SurveyApi` without HTTP: :class:`~samples.survey.api.SurveyService`'s methods,
    awaited on the event loop of a :class:`~samples._api.Direct`."""

    def __init__(self, call: Direct[SurveyService]) -> None:
        self.call, self.service = call, call.service

    def create_survey(self, key: str, body: object) -> Answer:
        return self.call(self.service.create_survey, key, body)

    def respond(self, key: str, survey_id: str, body: object) -> Answer:
        return self.call(self.service.respond, key, survey_id, body)

    def response_status(self, request_id: str) -> Answer:
        return self.call(self.service.response_status, request_id)

    def results(self, survey_id: str) -> Answer:
        return self.call(self.service.results, survey_id)


COLOURS = ["red", "green", "blue", "yellow"]
SIZES = ["S", "M", "L"]


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """Sizes of one load. Ids derive from ``seed``: re-running a load is one big duplicate."""

    users: int = 8
    responses: int = 200
    surveys: int = 3
    seed: int = 0
    wait: float = 60.0
    """Asynchronous variant: how long to wait for the workers to count everything."""


@dataclass
class LoadReport(harness.LoadReport[LoadSettings]):
    """What the clients saw; ``problems`` is empty when their answers were consistent."""

    outcomes: Counter[str] = field(default_factory=Counter)

    def lines(self) -> list[str]:
        s = self.settings
        refused = {code: n for code, n in sorted(self.outcomes.items()) if code != "counted"}
        detail = ", ".join(f"{n} {code}" for code, n in refused.items())
        return [
            f"  load      {s.responses} responses to {s.surveys} surveys sent {self.sent} times by "
            f"{s.users} users ({self.sent - s.responses} duplicates)",
            f"  outcome   {self.outcomes['counted']} counted, {sum(refused.values())} refused"
            + (f" ({detail})" if detail else ""),
            f"  [{'FAIL' if self.problems else ' ok '}] answers: every copy of a request got the same "
            "answer; each survey counts exactly the responses its clients saw accepted",
        ]


def survey_plan(settings: LoadSettings) -> list[workflows.Survey]:
    return [
        {
            "id": f"load{settings.seed}-s{n}",
            "title": f"Survey {n} of load {settings.seed}",
            "questions": [
                {"id": "colour", "text": "Favourite colour?", "options": COLOURS},
                {"id": "size", "text": "T-shirt size?", "options": SIZES},
            ],
        }
        for n in range(settings.surveys)
    ]


def response_plan(settings: LoadSettings, rng: random.Random) -> list[tuple[str, str, dict[str, Any]]]:
    """``(request id, survey id, body)``; one in 15 picks a non-option, one in 12 repeats a respondent."""
    plan: list[tuple[str, str, dict[str, Any]]] = []
    for n in range(settings.responses):
        respondent = f"user{n}"
        if n % 12 == 5 and n >= settings.surveys:
            respondent = plan[n - settings.surveys][2]["respondent"]  # the same survey, answered twice
        answers = {"colour": rng.choice(COLOURS), "size": rng.choice(SIZES)}
        if n % 15 == 7:
            answers["colour"] = "purple"
        body = {"respondent": respondent, "answers": answers}
        plan.append((f"load{settings.seed}-r{n}", f"load{settings.seed}-s{n % settings.surveys}", body))
    return plan


def run_load(api: SurveyApi, settings: LoadSettings) -> LoadReport:
    """Create the surveys, send the responses with duplicates, verify what the clients saw.

    Responses answered ``202`` (the asynchronous variant) are first waited
    for, up to ``settings.wait`` seconds, until the workers counted them all.
    """
    rng = random.Random(settings.seed)
    report = LoadReport(settings)
    surveys = survey_plan(settings)
    created = harness.send_all(
        [
            (f"create-{s['id']}", functools.partial(api.create_survey, f"create-{s['id']}", s))
            for s in surveys
        ],
        users=settings.users,
        rng=rng,
        label="surveys",
    )
    report.problems += [f"creating {key}: {got[0]}" for key, got in created.items() if got[0].status != 201]
    plan = response_plan(settings, rng)
    sends = {key: functools.partial(api.respond, key, survey, body) for key, survey, body in plan}
    answers = harness.send_all(list(sends.items()), users=settings.users, rng=rng, label="responses")
    report.sent = sum(map(len, answers.values()))
    report.problems += harness.settle(
        answers, sends, api.response_status, done=200, wait=settings.wait, what="response"
    )
    report.problems += harness.disagreements(answers)
    accepted: Counter[str] = Counter()
    for key, target, _body in plan:
        first = answers[key][0]
        if first.status in (200, 202):
            accepted[target] += 1
            report.outcomes["counted"] += 1
        else:
            report.outcomes[str(first.body.get("error"))] += 1
    for definition in surveys:
        survey = definition["id"]
        found = api.results(survey)
        counted = found.body.get("responses") if found.status == 200 else found
        if counted != accepted[survey]:
            report.problems.append(
                f"survey {survey!r}: clients saw {accepted[survey]} responses accepted, "
                f"the summary counts {counted}"
            )
    return report


# -- the demo: load through API servers and workers that get SIGKILLed ---------------------------


@dataclass(frozen=True, slots=True)
class DemoSettings(harness.FleetSettings):
    """One survey demo: the processes (:class:`~samples._harness.FleetSettings`) and the load."""

    load: LoadSettings = LoadSettings(responses=300)


class DemoReport(harness.DemoReport[DemoSettings, LoadReport, workflows.Verdict]):
    def render(self) -> str:
        s = self.settings
        return self.text(
            f"idemflow survey demo: {self.store}, seed {s.load.seed}",
            f"{s.servers} API servers (asynchronous: answer at the checkpoint) and {s.workers} "
            "`idemflow worker` processes counting the responses",
            2,
            "every response counted exactly once",
        )


def run_demo(settings: DemoSettings) -> DemoReport:
    """Servers and workers on one store and queue, SIGKILLed during a load; then ``check``."""
    found = harness.run_demo(
        settings,
        "survey",
        workflows.TABLES,
        workflows.check,
        total=2 * settings.load.responses,
        seed=settings.load.seed,
        load=lambda client: run_load(SurveyHttp(client), settings.load),
    )
    return DemoReport(settings, *found)


# -- commands -----------------------------------------------------------------------------------


def _open(url: str) -> Store:
    return harness.open_with(url, workflows.TABLES)


def _load(args: argparse.Namespace, api: SurveyApi) -> LoadReport:
    return run_load(api, LoadSettings(args.users, args.responses, args.surveys, args.seed, args.wait))


def _demo(args: argparse.Namespace) -> int:
    load = LoadSettings(responses=args.responses, seed=harness.demo_seed(args))
    print(f"survey demo: {args.responses} responses, duplicates, {args.kills} SIGKILLs ...", flush=True)
    result = run_demo(DemoSettings(data=args.data, kills=args.kills, workers=args.workers, load=load))
    print(result.render())
    return 0 if result.ok else 1


SAMPLE = harness.Sample[SurveyApi](
    "survey",
    workflows.TABLES,
    app=lambda store, queue: create_app(SurveyService(store, queue)),
    service=SurveyService,
    check=workflows.check,
    http=SurveyHttp,
    direct=SurveyDirect,
    load=_load,
    demo=_demo,
    help={
        "queue": "queue URL: answer at the checkpoint, workers count (async variant)",
        "load": "simulate concurrent users sending responses, with duplicates",
        "check": "verify every response is counted once; exit 1 if not",
        "demo": "load with SIGKILLed servers and workers, then check (SQLite)",
    },
    load_sizes=[("--responses", int, 200, "distinct responses"), ("--surveys", int, 3, "surveys")],
    demo_sizes=[("--responses", int, 300, "distinct responses")],
)
main = SAMPLE.main


__all__ = [
    "DemoReport",
    "DemoSettings",
    "LoadReport",
    "LoadSettings",
    "SurveyApi",
    "SurveyDirect",
    "SurveyHttp",
    "main",
    "run_demo",
    "run_load",
]
